"""Time the patch set's lowering work against a whole compile, on a ~1k-node model.

    python tools/bench/lowering_overhead.py [--layers 100] [--repeat 5]

Runs on CPU (TensorRT-RTX: ``compile(..., dryrun=True)`` lowers and partitions
without building engines). The model is a chain of blocks, each with a mutating
custom op on a state slice plus a few ATen ops, so every new pass has work to
do. Reports the median time of ``lower_auto_functionalized``, of the check of
in-place engine inputs after partitioning (``isolate_in_place_engine_inputs``)
and of the write-back exposure that the serialized-engine path adds, and of the whole
``compile(dryrun=True)`` (lowering and partitioning only, the harshest
denominator) and of ``convert_exported_program_to_serialized_trt_engine``
(which builds the engine, on CPU with TensorRT-RTX), and their ratios.
Target: under 2% of a compile.
"""

import argparse
import importlib
import statistics
import time

import torch
import torch_tensorrt
from torch_tensorrt.dynamo._SourceIR import SourceIR
from torch_tensorrt.dynamo.conversion import dynamo_tensorrt_converter, impl

# the module (the package re-exports the pass function under the same name)
laf = importlib.import_module(
    "torch_tensorrt.dynamo.lowering.passes.lower_auto_functionalized"
)


@torch.library.custom_op("bench_mut::bump_", mutates_args=("x",))
def bump_(x: torch.Tensor) -> None:
    x.add_(1)


@bump_.register_fake
def _(x):
    return None


@dynamo_tensorrt_converter(torch.ops.bench_mut.bump_.default)
def _bump(ctx, target, args, kwargs, name):
    return impl.elementwise.add(ctx, target, SourceIR.ATEN, name, args[0], 1.0)


class Chain(torch.nn.Module):
    def __init__(self, layers):
        super().__init__()
        self.layers = layers
        self.register_buffer("state", torch.zeros(layers, 16))

    def forward(self, x):
        for i in range(self.layers):
            torch.ops.bench_mut.bump_(self.state[i : i + 1])
            x = torch.relu(x * 1.01 + self.state[i]) - 0.5
        return x


def timed(fn):
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            wrapper.seconds += time.perf_counter() - start

    wrapper.seconds = 0.0
    wrapper.__wrapped__ = fn
    return wrapper


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    x = torch.randn(8, 16)
    ep = torch.export.export(Chain(args.layers), (x,))
    nodes = len(ep.run_decompositions().graph.nodes)
    compiler = importlib.import_module("torch_tensorrt.dynamo._compiler")
    manager = importlib.import_module(
        "torch_tensorrt.dynamo.lowering.passes._aten_lowering_pass"
    ).ATEN_POST_LOWERING_PASSES

    partitioning = importlib.import_module("torch_tensorrt.dynamo.partitioning")

    def run(entry_point):
        """(seconds in the new passes, total seconds) of one conversion."""
        lower = timed(laf.lower_auto_functionalized)
        expose = timed(compiler.expose_write_backs)
        isolate = timed(partitioning.isolate_in_place_engine_inputs)
        original = list(manager.passes)
        manager.passes = [
            lower if p is laf.lower_auto_functionalized else p for p in original
        ]
        compiler.expose_write_backs = expose
        partitioning.isolate_in_place_engine_inputs = isolate
        try:
            start = time.perf_counter()
            entry_point()
            total = time.perf_counter() - start
        finally:
            manager.passes = original
            compiler.expose_write_backs = expose.__wrapped__
            partitioning.isolate_in_place_engine_inputs = isolate.__wrapped__
        return lower.seconds + expose.seconds + isolate.seconds, total

    entry_points = {
        "compile(dryrun=True), lowering and partitioning only": lambda: (
            torch_tensorrt.dynamo.compile(
                ep, arg_inputs=[x], dryrun=True, min_block_size=1
            )
        ),
        "convert_exported_program_to_serialized_trt_engine, engine built": lambda: (
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep, arg_inputs=[x], min_block_size=1, lift_mutable_buffers=True
            )
        ),
    }
    print(f"{nodes} nodes after decomposition, {args.layers} mutating ops")
    for label, entry_point in entry_points.items():
        runs = [run(entry_point) for _ in range(args.repeat)]
        p = statistics.median(r[0] for r in runs)
        t = statistics.median(r[1] for r in runs)
        print(
            f"  {label}: new passes {p * 1000:.0f} ms of {t * 1000:.0f} ms "
            f"= {100 * p / t:.2f}% (median of {args.repeat})"
        )


if __name__ == "__main__":
    main()
