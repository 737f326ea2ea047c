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

Prints the median step time of each, and the ratio, per state size. Target:
aliased time flat in the state size; at least 100x faster than copy-back at
1 GiB. Requires the standard flavour (tensorrt.plugin) and a CUDA device.
"""

import argparse
import json
import statistics
import tempfile
from typing import Tuple

import torch
import torch_tensorrt

ROW = 1024  # fp32 elements per state row (4 KiB)


def define_ops() -> None:
    import tensorrt.plugin as trtp

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
    import tensorrt as trt

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
    import tensorrt as trt

    context = engine.create_execution_context()
    names = ["state", "index", "update"]
    buffers = dict(zip(names, args))
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        if engine.get_tensor_mode(name) == trt.TensorIOMode.OUTPUT:
            shape = tuple(engine.get_tensor_shape(name))
            buffers[name] = torch.empty(shape, device="cuda")
    copies = []
    for alias in aliases:
        if alias["update"] == "in_place":
            buffers[alias["output"]] = buffers[alias["input"]]
        else:
            copies.append((buffers[alias["input"]], buffers[alias["output"]]))
    for name, tensor in buffers.items():
        context.set_tensor_address(name, tensor.data_ptr())
    stream = torch.cuda.current_stream()
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(True), torch.cuda.Event(True)
        start.record(stream)
        context.execute_async_v3(stream.cuda_stream)
        for dst, src in copies:
            dst.copy_(src)
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--sizes-mib", type=int, nargs="+", default=[16, 64, 256, 1024, 4096]
    )
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    define_ops()
    print("state MiB | aliased ms | copy-back ms | copy-back / aliased")
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
        print(
            f"{mib:9d} | {aliased:10.3f} | {copy_back:12.3f} | {copy_back / aliased:8.1f}x"
        )


if __name__ == "__main__":
    main()
