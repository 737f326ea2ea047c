"""tools/bench/in_place_pass_scaling.py runs (on the CPU) and reports each pass."""

import sys

import pytest


@pytest.fixture(scope="module")
def bench(bench_script):
    return bench_script("in_place_pass_scaling")


def test_measures_both_passes_for_a_few_states(bench):
    isolate, total, expose = bench.measure(4, 1)
    assert 0 < isolate < total and expose > 0


def test_a_row_per_size_with_the_time_per_state(bench, monkeypatch, capsys):
    monkeypatch.setattr(bench, "measure", lambda n, repeat: (0.004 * n, 1.0, 0.002))
    monkeypatch.setattr(sys, "argv", ["in_place_pass_scaling.py", "--states", "4", "8"])
    bench.main()
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [r.split("|")[0].strip() for r in rows] == ["4", "8"]
    # linear: the same time per state at both sizes
    assert [r.split("|")[2].strip() for r in rows] == ["4000.0 us", "4000.0 us"]
