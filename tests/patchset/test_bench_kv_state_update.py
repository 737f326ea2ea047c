"""The CPU-testable parts of the GPU benchmark tools/bench/kv_state_update.py."""

import json
import subprocess
import sys

import pytest
import torch


@pytest.fixture(scope="module")
def bench(bench_script):
    return bench_script("kv_state_update")  # touches no GPU


def test_each_form_is_its_size_and_writes_at_most_a_thousandth(bench):
    for form in bench.FORMS:
        for mib in (1, 16, 1024):
            f = bench.Form(form, mib)
            assert torch.Size(f.shape).numel() * 4 == mib * 1024 * 1024, form
            positions = f.shape[f.axis]
            assert f.n >= 1 and (f.n == 1 or f.n / positions <= 1 / bench.FRACTION)
            for step in range(3):
                p = f.position(step)
                assert 0 <= p and p + f.n <= positions
            moved = f.position(0) != f.position(1)
            assert moved == f.runtime_position, form
    assert bench.Form("4d_b4", 16).shape[0] == 4
    assert bench.Form("2d_rows", 16).shape == (4096, bench.ROW)


def test_the_models_write_what_pytorch_writes(bench):
    for form in bench.FORMS:
        f = bench.Form(form, 1)
        module = f.module()
        state = module.state if form == "buffer" else torch.zeros(f.shape)
        for step in range(2):
            expected = f.expected(state, step)
            args = f.args(step, "cpu")
            module(*(args if form == "buffer" else (state,) + args))
            assert torch.equal(state, expected), form
    f = bench.Form("4d_run", 16)
    cache = torch.zeros(f.shape)
    p = f.position(0)
    bench.CopyBackWrite()(cache, torch.arange(p, p + f.n), f.update(0, "cpu"))
    assert torch.equal(cache, f.expected(torch.zeros(f.shape), 0))


def test_the_engine_view_of_a_state(bench):
    state = torch.zeros(3, 64, 4, 8)
    view = bench.engine_view(state, {"binding_shape": [-1, 1, 64, 32]})
    assert view.shape == (3, 1, 64, 32) and view.data_ptr() == state.data_ptr()
    assert bench.engine_view(state, {}) is state


def test_verdicts_and_their_sentences(bench):
    results = {
        16: {"4d_run:torch": 0.010, "4d_run:engine": 0.012, "copy_back_engine": 0.02},
        1024: {"4d_run:torch": 0.011, "4d_run:engine": 0.013, "copy_back_engine": 1.0},
    }
    verdict = bench.verdicts(results)
    assert verdict["flat"] == {
        "4d_run:torch": True,
        "4d_run:engine": True,
        "copy_back_engine": False,
    }
    target = verdict["targets"]["4d_run"]
    assert target["vs_torch"] == pytest.approx(0.013 / 0.011)
    assert target["vs_torch_met"] and target["speedup_met"]
    text = "\n".join(bench.describe(verdict))
    assert "grows with the state: copy_back_engine" in text
    assert "4d_run:engine: 1.18x PyTorch's step (target <= 1.5x): met" in text
    assert "76.9x faster than copy_back_engine (target >= 50x): met" in text
    slow = bench.verdicts({1024: dict(results[1024], **{"4d_run:engine": 0.5})})
    assert not slow["targets"]["4d_run"]["vs_torch_met"]
    assert not slow["targets"]["4d_run"]["speedup_met"]
    assert "MISSED" in "\n".join(bench.describe(slow))
    assert "targets: not evaluated" in "\n".join(
        bench.describe(bench.verdicts({16: results[16]}))
    )


def test_table_row(bench):
    row = bench.format_row(16, {"bshd:torch": 0.0125}, ["bshd:torch", "bshd:engine"])
    assert row.split(" | ")[1].strip() == "12.5 us"
    assert row.split(" | ")[2].strip() == "-"


def test_arguments(bench):
    args = bench.parse_args(["--sizes-mib", "16", "1024", "--forms", "bshd"])
    assert args.sizes_mib == [16, 1024] and args.forms == ["bshd"]
    assert bench.ways_of(args) == [
        "bshd:torch",
        "bshd:engine",
        "bshd:module",
        "copy_back_engine",
        "copy_back_module",
    ]
    with pytest.raises(SystemExit):
        bench.parse_args(["--steps", "0"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_without_a_gpu_one_sentence_and_exit_2(bench):
    result = subprocess.run(
        [sys.executable, bench.__file__, "--sizes-mib", "16"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "The benchmark times engines on a GPU; this host has no CUDA device."
    )
    assert "Traceback" not in result.stderr


def test_runs_at_several_sizes_merge_into_one(bench, tmp_path):
    base = {"device": "GPU", "torch_tensorrt": "2.14.0", "torch": "2.11", "steps": 30}
    small = dict(base, median_ms={"16": {"bshd:engine": 0.01}}, facts={"16": {}})
    large = dict(base, median_ms={"1024": {"bshd:engine": 0.011}}, facts={"1024": {}})
    paths = []
    for i, run in enumerate((small, large)):
        paths.append(tmp_path / f"{i}.json")
        paths[-1].write_text(json.dumps(run))
    out = tmp_path / "all.json"
    bench.main(["--merge", *map(str, paths), "--json", str(out)])
    result = json.loads(out.read_text())
    assert set(result["median_ms"]) == {"16", "1024"}
    assert result["flat"] == {"bshd:engine": True}
    with pytest.raises(ValueError, match="runs differ in steps"):
        bench.merged([small, dict(large, steps=5)])
