"""The code blocks of the README and of docs/mutating-ops.md work as pasted.

Every ``python`` block runs in a fresh interpreter, in an empty directory, as a
user would paste it, and must then have done what the text says: the README's
example writes the engine and the alias map the README shows (it builds its
engine on the CPU with TensorRT-RTX, and also runs ``compile()`` where there is
a GPU); the converter block registers its converter; the plugin block (standard
TensorRT's ``tensorrt.plugin``; skipped with the reason where the install has
none) registers its plugin. The ``json`` blocks are valid alias maps. The ``sh``
blocks name commands and files that exist. The ``cpp`` blocks are sketches the
text says are not compiled.
"""

import json
import os
import re
import shlex
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
README = os.path.join(ROOT, "README.md")
MUTATING_OPS = os.path.join(ROOT, "docs", "mutating-ops.md")


def blocks(language, path=README):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.S | re.M)


def run(code, check, cwd):
    """Run ``code`` and then ``check`` (more code) in one fresh interpreter."""
    result = subprocess.run(
        [sys.executable, "-c", code + "\n" + check],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


# run after a block: prints whether the block's op has a Torch-TensorRT converter
CONVERTER_OF = (
    "from torch_tensorrt.dynamo.conversion._ConverterRegistry import "
    "DYNAMO_CONVERTERS\n"
    "print(torch.ops.my.{op}.default in DYNAMO_CONVERTERS)\n"
)


def _features():
    from torch_tensorrt import ENABLED_FEATURES

    return ENABLED_FEATURES


def test_the_files_have_the_blocks_this_test_knows():
    assert len(blocks("python")) == 1
    assert len(blocks("json")) == 1
    assert len(blocks("cpp")) == 1
    assert len(blocks("sh")) >= 3
    assert len(blocks("python", MUTATING_OPS)) == 2
    assert len(blocks("json", MUTATING_OPS)) == 1


def test_the_readme_example_is_the_example_file():
    """One record: the README shows examples/dynamo/model_with_state.py as it is."""
    (code,) = blocks("python")
    path = os.path.join(ROOT, "examples", "dynamo", "model_with_state.py")
    with open(path, encoding="utf-8") as f:
        _, _, example = f.read().partition('"""\n\n')  # after its gallery header
    assert code == example
    assert "python examples/dynamo/model_with_state.py" in open(README).read()


def test_the_readme_is_short():
    with open(README, encoding="utf-8") as f:
        assert len(f.read().splitlines()) <= 300


@pytest.mark.skipif(
    not (torch.cuda.is_available() or _features().tensorrt_rtx),
    reason="The example builds an engine: that needs a CUDA device, or TensorRT-RTX, "
    "which builds on the CPU.",
)
def test_the_readme_example_writes_the_engine_and_the_map_it_shows(tmp_path):
    (code,) = blocks("python")
    out = run(code, CONVERTER_OF.format(op="decay_"), tmp_path)
    assert out.stdout.strip().splitlines()[-1] == "True"
    # it shows what it did: the map's entries, and on a GPU the state advancing
    assert "buf_cache: in_place" in out.stdout, out.stdout
    assert "buf_norm: copy my.decay_.default writes it" in out.stdout, out.stdout
    assert "wrote model.engine and model.aliases.json" in out.stdout, out.stdout
    if torch.cuda.is_available():
        assert "call 2: norm[0] = 0.125" in out.stdout, out.stdout
    else:
        assert "skipped the compiled module: it runs on a GPU" in out.stdout
    assert (tmp_path / "model.engine").stat().st_size > 0
    written = json.loads((tmp_path / "model.aliases.json").read_text())
    (shown,) = blocks("json")
    assert written == json.loads(shown)
    # nothing printed that the user did not ask for but the C++ library's one
    # device-query line on a host without a GPU (a C++ change; see the README)
    assert "modelopt" not in out.stderr
    for deprecated in ("register_opaque_type", "typ='reference'", "_opaque_base"):
        assert deprecated not in out.stderr


def test_the_converter_convention_block(tmp_path):
    (code,) = [
        b for b in blocks("python", MUTATING_OPS) if "dynamo_tensorrt_converter" in b
    ]
    out = run(code, CONVERTER_OF.format(op="increment_"), tmp_path)
    assert out.stdout.strip().splitlines()[-1] == "True"


@pytest.mark.skipif(
    not _features().qdp_plugin,
    reason="The plugin block needs standard TensorRT's tensorrt.plugin "
    "(TensorRT-RTX has no Python plugins).",
)
def test_the_plugin_block(tmp_path):
    (code,) = [b for b in blocks("python", MUTATING_OPS) if "trtp.register" in b]
    out = run(
        code,
        CONVERTER_OF.format(op="add_one_") + "import tensorrt as trt\n"
        "creator = trt.get_plugin_registry().get_creator('add_one_', '1', 'my')\n"
        "print(creator is not None)",
        tmp_path,
    )
    assert out.stdout.strip().splitlines()[-2:] == ["True", "True"]


def test_the_alias_map_blocks_are_valid_maps():
    from torch_tensorrt.dynamo import read_alias_map

    for text in blocks("json") + blocks("json", MUTATING_OPS):
        assert read_alias_map(json.loads(text))


def test_the_shell_blocks_name_what_exists():
    checked = 0
    docs = os.path.join(ROOT, "docs", "building-and-testing.md")
    for block in blocks("sh") + blocks("sh", docs):
        for line in block.replace("\\\n", " ").splitlines():
            words = [
                w
                for w in shlex.split(line.split("#", 1)[0])
                if not re.match(r"^[A-Z_]+=", w)
            ]
            if not words:
                continue
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
