"""How the in-place passes scale with the number of states. Runs on the CPU.

    python tools/bench/in_place_pass_scaling.py [--states 100 500 1000 2000 4000]

The model takes N states (user inputs) and updates each with an in-place custom
op whose converter declares ``requires_aliased_plugin_io`` (as a generated
in-place plugin's does; the converter is never run: nothing is built). For each N
it times, median of ``--repeat``, the two passes that look at every state:
``isolate_in_place_engine_inputs`` inside ``compile(dryrun=True)`` (lowering and
partitioning, no engine) and ``expose_write_backs`` (the standalone engine's
write-backs) on the lowered graph, and prints their time per state, which stays
flat when a pass is linear in the number of states.
"""

import argparse
import copy
import importlib
import statistics
import time

import torch
import torch_tensorrt
from torch_tensorrt.dynamo._SourceIR import SourceIR
from torch_tensorrt.dynamo.conversion import dynamo_tensorrt_converter, impl


@torch.library.custom_op("bench_scale::bump_", mutates_args=("x",))
def bump_(x: torch.Tensor) -> None:
    x.add_(1)


@bump_.register_fake
def _(x):
    return None


@dynamo_tensorrt_converter(
    torch.ops.bench_scale.bump_.default, requires_aliased_plugin_io=True
)
def _bump(ctx, target, args, kwargs, name):
    return impl.elementwise.add(ctx, target, SourceIR.ATEN, name, args[0], 1.0)


class States(torch.nn.Module):
    def forward(self, *states):
        for state in states:
            torch.ops.bench_scale.bump_(state)
        return states[0] * 2


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


def measure(n, repeat):
    """(isolate seconds, compile seconds, expose seconds) for ``n`` states."""
    from torch_tensorrt.dynamo.lowering import post_lowering
    from torch_tensorrt.dynamo.lowering._mutation_write_backs import (
        expose_write_backs,
    )

    partitioning = importlib.import_module("torch_tensorrt.dynamo.partitioning")
    states = [torch.zeros(4) for _ in range(n)]
    ep = torch.export.export(States(), tuple(states))
    isolate_times, compile_times, expose_times = [], [], []
    for _ in range(repeat):
        isolate = timed(partitioning.isolate_in_place_engine_inputs)
        partitioning.isolate_in_place_engine_inputs = isolate
        try:
            start = time.perf_counter()
            torch_tensorrt.dynamo.compile(
                ep, arg_inputs=states, dryrun=True, min_block_size=1
            )
            compile_times.append(time.perf_counter() - start)
        finally:
            partitioning.isolate_in_place_engine_inputs = isolate.__wrapped__
        isolate_times.append(isolate.seconds)
        lowered = post_lowering(
            ep.run_decompositions().module(),
            torch_tensorrt.dynamo.CompilationSettings(),
        )
        gm = copy.deepcopy(lowered)
        start = time.perf_counter()
        expose_write_backs(gm)
        expose_times.append(time.perf_counter() - start)
    return (
        statistics.median(isolate_times),
        statistics.median(compile_times),
        statistics.median(expose_times),
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--states", type=int, nargs="+", default=[100, 500, 1000, 2000, 4000]
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(
        "states | isolate_in_place_engine_inputs | per state | "
        "compile(dryrun) | expose_write_backs | per state"
    )
    for n in args.states:
        isolate, total, expose = measure(n, args.repeat)
        print(
            f"{n:6d} | {isolate * 1000:9.1f} ms | {isolate / n * 1e6:7.1f} us | "
            f"{total:7.2f} s | {expose * 1000:9.1f} ms | {expose / n * 1e6:7.1f} us",
            flush=True,
        )


if __name__ == "__main__":
    main()
