"""The CPU-testable parts of the GPU benchmark tools/bench/state_update.py."""

import os

import pytest
import torch


@pytest.fixture(scope="module")
def bench(bench_script):
    return bench_script("state_update")  # defines no ops, touches no GPU


@pytest.fixture(scope="module")
def trt(bench):
    return bench._trt()


class FakeEngine:
    """The ICudaEngine queries the benchmark makes, over a fixed I/O table."""

    def __init__(self, trt, io):
        self.trt, self.io = trt, io  # name -> (is_output, shape, dtype)
        self.num_io_tensors = len(io)

    def get_tensor_name(self, i):
        return list(self.io)[i]

    def get_tensor_mode(self, name):
        mode = self.trt.TensorIOMode
        return mode.OUTPUT if self.io[name][0] else mode.INPUT

    def get_tensor_shape(self, name):
        return self.io[name][1]

    def get_tensor_dtype(self, name):
        return self.io[name][2]


def test_arguments(bench):
    args = bench.parse_args([])
    assert (args.sizes_mib, args.steps, args.impl, args.json) == (
        [16, 64, 256, 1024, 4096],
        50,
        "aot",
        None,
    )
    assert args.ways == ["triton", "declared_alias", "copy_back"]
    args = bench.parse_args(
        ["--sizes-mib", "1", "2", "--steps", "3", "--impl", "jit", "--json", "r.json"]
    )
    assert (args.sizes_mib, args.steps, args.impl, args.json) == (
        [1, 2],
        3,
        "jit",
        "r.json",
    )
    assert bench.parse_args(["--ways", "copy_back"]).ways == ["copy_back"]
    for bad in (["--steps", "0"], ["--impl", "cpp"], ["--ways", "aliased"]):
        with pytest.raises(SystemExit):
            bench.parse_args(bad)


def test_rows(bench):
    # 16 MiB of 4 KiB rows, 0.1% of them per step
    assert bench.rows_of(16) == (4096, 4)
    assert bench.rows_of(4096) == (1048576, 1048)
    assert bench.rows_of(1) == (256, 1)  # at least one row


def test_table(bench):
    ways = ["triton", "declared_alias", "copy_back"]
    head = bench.header(ways)
    assert [c.strip() for c in head.split(" | ")] == ["state MiB"] + ways
    row = bench.format_row(1024, {"triton": 0.05, "copy_back": 12.5}, ways)
    assert [c.strip() for c in row.split(" | ")] == [
        "1024",
        "0.050 ms",
        "-",
        "12.500 ms",
    ]
    assert [len(c) for c in row.split(" | ")] == [len(c) for c in head.split(" | ")]


def _results(in_place_large, copy_large):
    small = {"triton": 0.010, "declared_alias": 0.012, "copy_back": 1.0}
    large = {"triton": 0.011, "declared_alias": in_place_large, "copy_back": copy_large}
    return {16: small, 1024: large}


def test_verdicts(bench):
    verdict = bench.verdicts(_results(in_place_large=0.014, copy_large=64.0))
    assert verdict["flat"] == {
        "triton": True,
        "declared_alias": True,
        "copy_back": False,
    }
    t = verdict["targets"]
    assert t["mode"] == "declared_alias"
    assert t["bound"] == "triton" and t["copy_back"] == "copy_back"
    assert t["vs_bound"] == pytest.approx(0.014 / 0.011)
    assert t["vs_bound_met"]
    assert t["speedup_vs_copy_back"] == pytest.approx(64.0 / 0.014)
    assert t["speedup_met"]
    lines = bench.describe(verdict)
    assert (
        "flat in the state size (largest <= 2x smallest): triton, declared_alias"
        in (lines[0])
    )
    assert lines[1].endswith("grows with the state: copy_back")
    assert "declared_alias: 1.27x the bare kernel (target <= 2x): met" in lines[2]

    missed = bench.verdicts(_results(in_place_large=9.0, copy_large=1.0))
    assert not missed["targets"]["speedup_met"]
    assert "MISSED" in bench.describe(missed)[2]


def test_verdicts_without_the_target_size(bench):
    verdict = bench.verdicts({16: {"copy_back": 1.0}})
    assert verdict == {"flat": {}, "targets": None}
    assert bench.describe(verdict) == [
        "targets: not evaluated (needs triton, copy_back and an in-place mode at "
        "1024 MiB)"
    ]


def test_dtypes_of_the_engine(bench, trt):
    assert bench.torch_dtype(trt.float32) is torch.float32
    assert bench.torch_dtype(trt.float16) is torch.float16
    assert bench.torch_dtype(trt.int64) is torch.int64
    assert bench.torch_dtype(trt.bool) is torch.bool
    with pytest.raises(ValueError, match="No torch dtype for TensorRT dtype INT4"):
        bench.torch_dtype(trt.int4)


def _engine(trt, state_dtype):
    return FakeEngine(
        trt,
        {
            "state": (False, (8, 4), state_dtype),
            "index": (False, (2,), trt.int64),
            "update": (False, (2, 4), state_dtype),
            "output0": (True, (), state_dtype),
            "state_new": (True, (8, 4), state_dtype),
        },
    )


def _inputs(dtype):
    return {
        "state": torch.zeros(8, 4, dtype=dtype),
        "index": torch.zeros(2, dtype=torch.int64),
        "update": torch.zeros(2, 4, dtype=dtype),
    }


def test_in_place_outputs_get_no_memory_of_their_own(bench, trt):
    inputs = _inputs(torch.float16)
    aliases = [{"output": "state_new", "input": "state", "update": "in_place"}]
    buffers, copies = bench.bind_buffers(
        _engine(trt, trt.float16), inputs, aliases, device="cpu"
    )
    assert buffers["state_new"] is inputs["state"]
    assert copies == []
    assert buffers["output0"].dtype is torch.float16  # the engine's, not fp32
    assert buffers["output0"].shape == ()


def test_copied_outputs_are_allocated_with_the_engine_dtype(bench, trt):
    inputs = _inputs(torch.float16)
    aliases = [{"output": "state_new", "input": "state", "update": "copy"}]
    buffers, copies = bench.bind_buffers(
        _engine(trt, trt.float16), inputs, aliases, device="cpu"
    )
    new = buffers["state_new"]
    assert (new.shape, new.dtype) == ((8, 4), torch.float16)
    assert new.data_ptr() != inputs["state"].data_ptr()
    ((dst, src),) = copies
    assert dst is inputs["state"] and src is new


def test_mismatched_in_place_binding_is_an_error(bench, trt):
    aliases = [{"output": "state_new", "input": "state", "update": "in_place"}]
    with pytest.raises(ValueError, match="'state_new'.*bound in place to 'state'"):
        bench.bind_buffers(
            _engine(trt, trt.float16), _inputs(torch.float32), aliases, device="cpu"
        )


def test_missing_input_is_an_error(bench, trt):
    inputs = _inputs(torch.float32)
    del inputs["index"]
    with pytest.raises(KeyError, match="engine input 'index'"):
        bench.bind_buffers(_engine(trt, trt.float32), inputs, [], device="cpu")


def test_a_refused_address_names_the_tensor(bench):
    class Context:
        def __init__(self, refused):
            self.refused, self.bound = refused, {}

        def set_tensor_address(self, name, address):
            self.bound[name] = address
            return name != self.refused

    buffers = {"state": torch.zeros(2), "update": torch.zeros(3)}
    context = Context(refused=None)
    bench.bind_addresses(context, buffers)
    assert context.bound == {n: t.data_ptr() for n, t in buffers.items()}
    with pytest.raises(
        RuntimeError, match="set_tensor_address failed for tensor 'update'"
    ):
        bench.bind_addresses(Context(refused="update"), buffers)


@pytest.mark.skipif(
    torch.cuda.is_available() or os.environ.get("TORCHTRT_PATCHSET_ENV") != "rtx",
    reason="Builds the engine on the CPU, which needs TensorRT-RTX on a host "
    "without a GPU (the rtx test environment).",
)
def test_the_copy_back_engine_builds_with_its_alias_map(bench):
    rows, touched = bench.rows_of(1)
    args = (
        torch.zeros(rows, bench.ROW),
        torch.randperm(rows)[:touched],
        torch.randn(touched, bench.ROW),
    )
    engine_bytes, aliases = bench.build_engine("copy_back", args)
    assert len(engine_bytes) > 0
    (entry,) = aliases
    assert {k: v for k, v in entry.items() if k != "reason"} == {
        "output": "state_new",
        "input": "state",
        "update": "copy",
    }
    assert "also read by" in entry["reason"]  # why the engine copies it


def test_what_cannot_run_here_is_one_sentence(bench, capsys):
    """No GPU here; the RTX flavour has no tensorrt.plugin: a sentence, no traceback."""
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--sizes-mib", "16"])
    assert exit_.value.code == 2
    message = capsys.readouterr().err.strip()
    assert "\n" not in message and message.endswith(".")
    if os.environ.get("TORCHTRT_PATCHSET_ENV") == "rtx":
        assert "tensorrt.plugin" in message
    reason = bench.missing_requirement(["copy_back"])
    assert reason == (
        None
        if torch.cuda.is_available()
        else "The benchmark times engines on a GPU; this host has no CUDA device."
    )
