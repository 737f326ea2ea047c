"""The CPU-testable parts of the GPU benchmark tools/bench/state_update.py."""

import importlib.util
import os

import pytest
import torch

SCRIPT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "tools",
    "bench",
    "state_update.py",
)


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_state_update", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines no ops, touches no GPU
    return module


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
    assert (args.sizes_mib, args.steps) == ([16, 64, 256, 1024, 4096], 50)
    args = bench.parse_args(["--sizes-mib", "1", "2", "--steps", "3"])
    assert (args.sizes_mib, args.steps) == ([1, 2], 3)
    with pytest.raises(SystemExit):
        bench.parse_args(["--steps", "0"])


def test_table(bench):
    assert bench.HEADER.split(" | ") == [
        "state MiB",
        "aliased ms",
        "copy-back ms",
        "copy-back / aliased",
    ]
    row = bench.format_row(1024, 0.05, 12.5)
    assert row == "     1024 |      0.050 |       12.500 |    250.0x"
    assert [len(c) for c in row.split(" | ")] == [
        len(c) for c in bench.HEADER.split(" | ")[:3]
    ] + [9]
    assert bench.format_row(16, 0.0, 1.0).endswith("inf")


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
