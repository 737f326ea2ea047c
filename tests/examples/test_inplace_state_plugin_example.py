"""examples/dynamo/inplace_state_plugin.py runs as far as this machine allows.

Run as a script, the example says which steps it skipped and why. On a host
without a GPU: with TensorRT-RTX it builds the engine of the same update written
in PyTorch and prints its alias map; with the standard flavour (real
``tensorrt.plugin``, no builder) it registers the plugin and its converter. With
a GPU and the standard flavour it builds the plugin engine and runs it from its
serialized bytes (not run here: no GPU).
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
    "inplace_state_plugin.py",
)
GPU = torch.cuda.is_available()


@pytest.fixture(scope="module")
def output():
    result = subprocess.run(
        [sys.executable, EXAMPLE], capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def _alias_map(output):
    m = re.search(r"alias map:\n(\[.*?\n\])", output, re.S)
    assert m, output
    # the state's dtype and a copy's reason (recorded by a later piece) are not
    # what these tests check
    return [
        {k: v for k, v in entry.items() if k not in ("dtype", "reason")}
        for entry in json.loads(m.group(1))
    ]


@pytest.mark.skipif(
    GPU or not ENABLED_FEATURES.tensorrt_rtx,
    reason="The CPU path of the TensorRT-RTX flavour (no GPU).",
)
def test_rtx_on_a_cpu_builds_the_pytorch_update_and_says_what_it_skipped(output):
    assert "Steps 3-4 skipped: this TensorRT has no Python plugins" in output
    assert "Building the same update written in PyTorch with TensorRT-RTX" in output
    assert re.search(r"Built a serialized engine of [1-9]\d* bytes", output)
    assert _alias_map(output) == [
        {"output": "state_new", "input": "state", "update": "copy"}
    ]
    assert "Step 6 skipped: running a TensorRT engine needs a GPU." in output


@pytest.mark.skipif(
    GPU or not ENABLED_FEATURES.qdp_plugin,
    reason="The CPU path of the standard flavour (tensorrt.plugin, no GPU).",
)
def test_standard_flavour_on_a_cpu_registers_the_plugin_and_its_converter(output):
    assert "Steps 3-4 skipped" not in output
    assert "Step 5 skipped: no TensorRT builder can build this engine here." in output

    # the same registrations in this process, checked against the real QDP
    spec = importlib.util.spec_from_file_location("inplace_state_plugin", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # steps 1-4 only: 5 and 6 are under __main__
    import tensorrt.plugin as trtp
    from torch_tensorrt.dynamo.conversion._ConverterRegistry import DYNAMO_CONVERTERS
    from torch_tensorrt.dynamo.conversion.plugins._plugin_call import (
        qdp_output_descs,
    )

    import tensorrt as trt

    class Input:
        def __init__(self, dtype, rank):
            self.dtype, self.shape = dtype, (1,) * rank

    plugin_def = trtp._lib.QDP_REGISTRY["example::scatter_add_"]
    assert plugin_def.input_tensor_names == ["state", "index", "update"]
    assert plugin_def.aot_impl_func is not None
    inputs = [Input(trt.float32, 2), Input(trt.int64, 1), Input(trt.float32, 2)]
    assert qdp_output_descs(plugin_def, inputs, {}) == [(trt.float32, 0)]
    assert torch.ops.example.scatter_add_.default in DYNAMO_CONVERTERS


@pytest.mark.skipif(
    not (GPU and ENABLED_FEATURES.qdp_plugin),
    reason="Needs a CUDA device and the standard flavour (tensorrt.plugin); "
    "this host has neither or one of them.",
)
def test_on_a_gpu_the_serialized_engine_updates_the_state_in_place(output):
    assert _alias_map(output) == [
        {
            "output": "state_new",
            "input": "state",
            "update": "in_place",
            "binding": "declared_alias",
        }
    ]
    assert "Ran 3 calls; updated in place: ['state_new']" in output
