"""The CPU-testable parts of the GPU benchmark tools/bench/kv_state_update.py."""

import subprocess
import sys

import pytest
import torch


@pytest.fixture(scope="module")
def bench(bench_script):
    return bench_script("kv_state_update")  # touches no GPU


def test_shapes_write_at_most_a_thousandth(bench):
    for mib in (1, 16, 1024, 4096):
        shape, position, n = bench.shapes_of(mib)
        assert shape[0] == 1 and shape[1] == bench.HEADS and shape[3] == bench.HEAD_DIM
        assert shape[0] * shape[1] * shape[2] * shape[3] * 4 == mib * 1024 * 1024
        assert n >= 1 and (n == 1 or n / shape[2] <= 1 / bench.FRACTION)
        assert 0 <= position and position + n <= shape[2]


def test_the_models_write_what_pytorch_writes(bench):
    shape, position, n = bench.shapes_of(1)
    cache, update = torch.zeros(shape), torch.randn(1, shape[1], n, shape[3])
    expected = cache.clone()
    expected[:, :, position : position + n, :] = update
    bench.Write4d(position)(cache, update)
    assert torch.equal(cache, expected)
    flat = torch.zeros(shape)
    bench.Write3d(position)(flat.view(shape[1:]), update.view(update.shape[1:]))
    assert torch.equal(flat, expected)


def test_verdicts_and_their_sentences(bench):
    results = {
        16: {"torch": 0.010, "in_place_engine": 0.012, "copy_back_engine": 0.02},
        1024: {"torch": 0.011, "in_place_engine": 0.013, "copy_back_engine": 1.0},
    }
    verdict = bench.verdicts(results)
    assert verdict["flat"] == {
        "torch": True,
        "in_place_engine": True,
        "copy_back_engine": False,
    }
    targets = verdict["targets"]
    assert targets["mode"] == "in_place_engine" and targets["bound"] == "torch"
    assert targets["vs_bound"] == pytest.approx(0.013 / 0.011)
    assert targets["vs_bound_met"] and targets["speedup_met"]
    text = "\n".join(bench.describe(verdict))
    assert "grows with the state: copy_back_engine" in text
    assert "1.18x PyTorch's in-place copy (target <= 2x): met" in text
    assert "76.9x faster than copy_back_engine (target >= 50x): met" in text
    slow = bench.verdicts({1024: dict(results[1024], in_place_engine=0.5)})
    assert not slow["targets"]["vs_bound_met"] and not slow["targets"]["speedup_met"]
    assert "MISSED" in "\n".join(bench.describe(slow))
    assert "targets: not evaluated" in "\n".join(
        bench.describe(bench.verdicts({16: results[16]}))
    )


def test_table_row(bench):
    row = bench.format_row(16, {"torch": 0.0125}, ["torch", "in_place_engine"])
    assert row.split(" | ")[1].strip() == "12.5 us"
    assert row.split(" | ")[2].strip() == "-"


def test_arguments(bench):
    args = bench.parse_args(["--sizes-mib", "16", "1024", "--ways", "torch"])
    assert args.sizes_mib == [16, 1024] and args.ways == ["torch"]
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
