"""Aliased (in-place) vs copy-back state updates in a standalone engine. Needs a GPU.

    python tools/bench/state_update.py [--sizes-mib 16 64 256 1024 4096] [--steps 50]

Each step updates 0.1% of an fp32 state (random rows, ``index_add``):

- **aliased**: an in-place TensorRT plugin (``mutates_args=("state",)``) whose
  output aliases the state input; the engine's alias map says ``in_place`` and
  the state and its new value are bound to the same memory, so a step touches
  only the updated rows;
- **copy-back**: the functional update (``index_add``, standard TensorRT
  layers); the engine writes the whole new state to ``state_new`` and the caller
  copies it back, as the alias map's ``copy`` says.

The engines run on a stream of their own (TensorRT synchronizes more on the
default stream); outputs get the engine's dtypes, and an output bound in place
gets no memory of its own. Prints the median step time of each, and the ratio,
per state size. Target: aliased time flat in the state size; at least 100x
faster than copy-back at 1 GiB. Requires the standard flavour (tensorrt.plugin)
and a CUDA device.

Argument parsing, the table, dtype mapping and output binding import and run
without a GPU (``tests/patchset/test_bench_state_update.py``).
"""

import argparse
import json
import statistics
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

ROW = 1024  # fp32 elements per state row (4 KiB)

# TensorRT DataType names -> torch dtypes
TORCH_DTYPES = {
    "FLOAT": torch.float32,
    "HALF": torch.float16,
    "BF16": torch.bfloat16,
    "INT8": torch.int8,
    "INT32": torch.int32,
    "INT64": torch.int64,
    "BOOL": torch.bool,
    "UINT8": torch.uint8,
    "FP8": torch.float8_e4m3fn,
}


def _trt() -> Any:
    import torch_tensorrt  # noqa: F401  (selects the TensorRT flavour)

    import tensorrt as trt

    return trt


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sizes-mib", type=int, nargs="+", default=[16, 64, 256, 1024, 4096]
    )
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args(argv)
    if args.steps < 1 or min(args.sizes_mib) < 1:
        parser.error("--steps and --sizes-mib must be positive")
    return args


HEADER = "state MiB | aliased ms | copy-back ms | copy-back / aliased"


def format_row(mib: int, aliased: float, copy_back: float) -> str:
    ratio = f"{copy_back / aliased:8.1f}x" if aliased > 0 else "     inf"
    return f"{mib:9d} | {aliased:10.3f} | {copy_back:12.3f} | {ratio}"


def torch_dtype(trt_dtype: Any) -> torch.dtype:
    """The torch dtype of a TensorRT ``DataType``."""
    name = getattr(trt_dtype, "name", str(trt_dtype))
    if name not in TORCH_DTYPES:
        raise ValueError(f"No torch dtype for TensorRT dtype {name}")
    return TORCH_DTYPES[name]


def bind_buffers(
    engine: Any,
    inputs: Mapping[str, torch.Tensor],
    aliases: Sequence[Mapping[str, str]],
    device: str = "cuda",
) -> Tuple[Dict[str, torch.Tensor], List[Tuple[torch.Tensor, torch.Tensor]]]:
    """Memory for every engine I/O tensor, and the copy-backs the alias map asks for.

    An output the map binds ``in_place`` is given its input's memory; every
    other output is allocated with the engine's shape and dtype. Returns the
    buffers by name and the ``(input, output)`` pairs to copy after each run.
    """
    trt = _trt()
    in_place = {a["output"]: a["input"] for a in aliases if a["update"] == "in_place"}
    buffers: Dict[str, torch.Tensor] = {}
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        if engine.get_tensor_mode(name) != trt.TensorIOMode.OUTPUT:
            if name not in inputs:
                raise KeyError(f"No tensor given for engine input '{name}'")
            buffers[name] = inputs[name]
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        if engine.get_tensor_mode(name) != trt.TensorIOMode.OUTPUT:
            continue
        shape = tuple(engine.get_tensor_shape(name))
        dtype = torch_dtype(engine.get_tensor_dtype(name))
        if name in in_place:
            state = buffers[in_place[name]]
            if tuple(state.shape) != shape or state.dtype != dtype:
                raise ValueError(
                    f"Output '{name}' ({shape}, {dtype}) is bound in place to "
                    f"'{in_place[name]}' ({tuple(state.shape)}, {state.dtype})"
                )
            buffers[name] = state
        else:
            buffers[name] = torch.empty(shape, dtype=dtype, device=device)
    copies = [
        (buffers[a["input"]], buffers[a["output"]])
        for a in aliases
        if a["update"] != "in_place"
    ]
    return buffers, copies


def bind_addresses(context: Any, buffers: Mapping[str, torch.Tensor]) -> None:
    for name, tensor in buffers.items():
        if not context.set_tensor_address(name, tensor.data_ptr()):
            raise RuntimeError(f"set_tensor_address failed for tensor '{name}'")


def define_ops() -> None:
    import tensorrt.plugin as trtp
    import torch_tensorrt

    @torch.library.custom_op("bench_state::scatter_add_", mutates_args=("state",))
    def scatter_add_(
        state: torch.Tensor, index: torch.Tensor, update: torch.Tensor
    ) -> None:
        state.index_add_(0, index, update)

    @scatter_add_.register_fake
    def _(state, index, update):
        return None

    @trtp.register("bench_state::scatter_add_")
    def _desc(
        state: trtp.TensorDesc, index: trtp.TensorDesc, update: trtp.TensorDesc
    ) -> Tuple[trtp.TensorDesc]:
        return (state.aliased(),)

    @trtp.impl("bench_state::scatter_add_")
    def _impl(
        state: trtp.Tensor,
        index: trtp.Tensor,
        update: trtp.Tensor,
        outputs: Tuple[trtp.Tensor],
        stream: int,
    ) -> None:
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            torch.as_tensor(state, device="cuda").index_add_(
                0,
                torch.as_tensor(index, device="cuda"),
                torch.as_tensor(update, device="cuda"),
            )

    torch_tensorrt.dynamo.conversion.plugins.generate_plugin_converter(
        "bench_state::scatter_add_", use_aot_if_available=False
    )


class Aliased(torch.nn.Module):
    def forward(self, state, index, update):
        torch.ops.bench_state.scatter_add_(state, index, update)
        return update.sum()


class CopyBack(torch.nn.Module):
    def forward(self, state, index, update):
        state.index_add_(0, index, update)
        return update.sum()


def build(module, args):
    import torch_tensorrt

    trt = _trt()
    ep = torch.export.export(module, args)
    with tempfile.TemporaryDirectory() as tmp:
        engine_bytes = (
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep,
                arg_inputs=list(args),
                min_block_size=1,
                require_full_compilation=True,
                alias_map_path=f"{tmp}/aliases.json",
            )
        )
        with open(f"{tmp}/aliases.json") as f:
            aliases = json.load(f)["aliases"]
    engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(engine_bytes)
    return engine, aliases


def step_time(engine, aliases, args, steps):
    context = engine.create_execution_context()
    inputs = dict(zip(["state", "index", "update"], args))
    buffers, copies = bind_buffers(engine, inputs, aliases)
    bind_addresses(context, buffers)
    # TensorRT documents extra synchronization on the default stream
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    times = []
    with torch.cuda.stream(stream):
        for _ in range(steps):
            start, end = torch.cuda.Event(True), torch.cuda.Event(True)
            start.record(stream)
            if not context.execute_async_v3(stream.cuda_stream):
                raise RuntimeError("execute_async_v3 failed")
            for dst, src in copies:
                dst.copy_(src)
            end.record(stream)
            end.synchronize()
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    define_ops()
    print(HEADER)
    for mib in args.sizes_mib:
        rows = mib * 1024 * 1024 // (ROW * 4)
        touched = max(1, rows // 1000)  # 0.1% of the state per step
        state = torch.zeros(rows, ROW, device="cuda")
        index = torch.randint(0, rows, (touched,), device="cuda")
        update = torch.randn(touched, ROW, device="cuda")
        results = []
        for module in (Aliased(), CopyBack()):
            engine, aliases = build(module, (state, index, update))
            results.append(
                step_time(engine, aliases, (state, index, update), args.steps)
            )
            del engine
        aliased, copy_back = results
        print(format_row(mib, aliased, copy_back))


if __name__ == "__main__":
    main()
