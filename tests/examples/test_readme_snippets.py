"""The README's code blocks work as pasted.

Every ``python`` block runs in a fresh interpreter, as a user would paste it
(the plugin block needs standard TensorRT's ``tensorrt.plugin``; it is skipped,
with the reason, where the install has none), and must then have done what the
text says: registered its converter. The ``json`` block is a valid alias map. The
``sh`` blocks name commands and files that exist. The ``cpp`` block is a sketch
the README says is not compiled.
"""

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(ROOT, "README.md")


def blocks(language):
    with open(README, encoding="utf-8") as f:
        text = f.read()
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.S | re.M)


def run(code, check):
    """Run ``code`` and then ``check`` (more code) in one fresh interpreter."""
    result = subprocess.run(
        [sys.executable, "-c", code + "\n" + check],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


# run after a block: prints whether the block's op has a Torch-TensorRT converter
CONVERTER_OF = (
    "from torch_tensorrt.dynamo.conversion._ConverterRegistry import "
    "DYNAMO_CONVERTERS\n"
    "print(torch.ops.my.{op}.default in DYNAMO_CONVERTERS)\n"
)


def test_the_readme_has_the_blocks_this_test_knows():
    assert len(blocks("python")) == 2
    assert len(blocks("json")) == 1
    assert len(blocks("sh")) >= 2


def test_the_converter_convention_block():
    (code,) = [b for b in blocks("python") if "dynamo_tensorrt_converter" in b]
    out = run(code, CONVERTER_OF.format(op="increment_"))
    assert out.strip().splitlines()[-1] == "True"


def _has_qdp():
    from torch_tensorrt import ENABLED_FEATURES

    return ENABLED_FEATURES.qdp_plugin


@pytest.mark.skipif(
    not _has_qdp(),
    reason="The plugin block needs standard TensorRT's tensorrt.plugin "
    "(TensorRT-RTX has no Python plugins).",
)
def test_the_plugin_block():
    (code,) = [b for b in blocks("python") if "trtp.register" in b]
    out = run(
        code,
        CONVERTER_OF.format(op="add_one_") + "import tensorrt as trt\n"
        "creator = trt.get_plugin_registry().get_creator('add_one_', '1', 'my')\n"
        "print(creator is not None)",
    )
    assert out.strip().splitlines()[-2:] == ["True", "True"]


def test_the_alias_map_block_is_a_valid_map():
    from torch_tensorrt.dynamo.lowering._mutation_write_backs import (
        ALIAS_MAP_FORMAT,
        ALIAS_MAP_VERSION,
    )

    (text,) = blocks("json")
    data = json.loads(text)
    assert (data["format"], data["version"]) == (ALIAS_MAP_FORMAT, ALIAS_MAP_VERSION)
    for entry in data["aliases"]:
        assert entry["update"] in ("in_place", "copy")
        if entry["update"] == "in_place":
            assert entry["binding"] in ("engine", "declared_alias", "same_address")
        else:
            assert "binding" not in entry


def test_the_shell_blocks_name_what_exists():
    checked = 0
    for block in blocks("sh"):
        for line in block.replace("\\\n", " ").splitlines():
            words = [
                w
                for w in shlex.split(line.split("#", 1)[0])
                if not re.match(r"^[A-Z_]+=", w)
            ]
            if not words:
                continue
            # the workplace's tools (../) and the GPU machine's .gpu* packs are
            # outside the repository
            files = [
                w
                for w in words
                if re.match(r"^(tools|tests|examples)/", w) and "*" not in w
            ]
            for rel in files:
                assert os.path.exists(os.path.join(ROOT, rel)), f"{rel}: {line}"
                checked += 1
            if words[0].startswith("tools/"):
                assert os.access(os.path.join(ROOT, words[0]), os.X_OK), words[0]
    assert checked >= 5
