"""examples/dynamo/hf_static_cache_decoder.py runs as far as this machine allows.

Without a GPU it builds the decoder's standalone engine (TensorRT-RTX) and prints
its alias map: every key and value cache written in place, the counters copied
back; the standard flavour on a CPU has no builder and says so. With a GPU it
also compiles the decoder and decodes 16 tokens greedily, asserting they are
HuggingFace's.
"""

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest
import torch
from torch_tensorrt import ENABLED_FEATURES

EXAMPLE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "examples",
    "dynamo",
    "hf_static_cache_decoder.py",
)
HAVE_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
pytestmark = pytest.mark.skipif(
    not HAVE_TRANSFORMERS,
    reason="transformers is not installed (tests/requirements.txt installs it)",
)


@pytest.fixture(scope="module")
def output():
    result = subprocess.run(
        [sys.executable, EXAMPLE], capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_every_cache_is_written_in_place(output):
    if not (torch.cuda.is_available() or ENABLED_FEATURES.tensorrt_rtx):
        assert "Step 3 skipped: no TensorRT builder here" in output
        return
    m = re.search(r"alias map:\n(\[.*?\n\])", output, re.S)
    assert m, output
    entries = {a["input"]: a["update"] for a in json.loads(m.group(1))}
    assert entries == {
        "buf_key_cache_0": "in_place",
        "buf_value_cache_0": "in_place",
        "buf_key_cache_1": "in_place",
        "buf_value_cache_1": "in_place",
        "buf_cumulative_length_0": "copy",
        "buf_cumulative_length_1": "copy",
    }


def test_decoding_where_there_is_a_gpu(output):
    if not torch.cuda.is_available():
        assert "Step 4 skipped" in output
        return
    lines = dict(
        line.split(":", 1) for line in output.splitlines() if line.count(":") == 1
    )
    assert lines["Torch-TensorRT"].strip() == lines["HuggingFace"].strip()
    assert len(json.loads(lines["Torch-TensorRT"])) == 16
