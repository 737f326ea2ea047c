"""A large state updated in place by TensorRT's own aliased output. Needs a GPU.

    python tools/bench/kv_state_update.py [--sizes-mib 16 64 256 1024 4096] \\
        [--steps 50] [--ways ...] [--json kv_state_update.json]

The state is an fp32 cache ``[1, 8, S, 128]``; each step writes ``n = S // 1000``
positions of it (0.1%, at least one) at a fixed position, the model
``cache[:, :, p:p+n, :] = update``. Every way but ``torch`` is compiled through
the patch set (``convert_exported_program_to_serialized_trt_engine`` for the
engine-only ways, ``torch_tensorrt.dynamo.compile`` for the module ways), works
with TensorRT-RTX and the standard flavour, and needs no plugin:

- **torch**: PyTorch's own in-place copy into the slice (the bound);
- **in_place_engine**: the engine of the 4-D model; TensorRT writes the
  update with ``IKVCacheUpdateLayer``, whose output is the state's own memory
  (the alias map says ``in_place``, ``binding: engine``, and the engine reports
  it: ``get_aliased_input_tensor``); bound as the alias map says, no copy;
- **in_place_module**: the compiled module of the same model, called as a user
  would (``module(cache, update)``);
- **copy_back_engine**: the same update on the same memory seen as 3-D
  (``[8, S, 128]``, a form the layer does not take): ordinary layers write a
  whole new state to ``cache_new`` and the caller copies it back (alias map:
  ``copy``);
- **copy_back_module**: its compiled module (the copy back runs in PyTorch);
- **same_address_engine**: the copy-back engine with ``cache_new`` bound to the
  state's own memory (what a caller can do without TensorRT's aliasing:
  TensorRT still writes every element).

Each way is first checked against PyTorch on a fresh state, then timed with
CUDA events on a stream of its own (median per step). Prints a table, which
ways are flat in the state size, and the targets at 1 GiB: ``in_place_engine``
within 2x of ``torch``, and at least 50x faster than ``copy_back_engine``.
``--json`` writes all of it. Without a CUDA device it says so in one sentence
and exits 2. The parts that need no GPU (arguments, shapes, table, verdicts)
are tested on the CPU (``tests/patchset/test_bench_kv_state_update.py``).
"""

import argparse
import json
import os
import sys
import tempfile
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from state_update import (  # noqa: E402  (its sibling, for the shared parts)
    _timed,
    _trt,
    bench_parser,
    bind_addresses,
    bind_buffers,
    flatness,
    parse_bench_args,
    target_lines,
    targets_at,
)
from state_update import format_row as shared_format_row  # noqa: E402
from state_update import header as shared_header  # noqa: E402

HEADS, HEAD_DIM = 8, 128
FRACTION = 1000  # 1 / fraction of the state written per step (0.1%)
WAYS = (
    "torch",
    "in_place_engine",
    "in_place_module",
    "copy_back_engine",
    "copy_back_module",
    "same_address_engine",
)
ENGINE_WAYS = ("in_place_engine", "copy_back_engine", "same_address_engine")
TARGET_MIB = 1024
TARGET_VS_TORCH = 2.0  # in place within 2x of PyTorch's own in-place kernel
TARGET_VS_COPY_BACK = 50.0  # and at least 50x faster than copy-back


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    return parse_bench_args(bench_parser(__doc__.split("\n")[0], WAYS), argv)


def shapes_of(mib: int) -> Tuple[Tuple[int, int, int, int], int, int]:
    """(state shape, write position, positions written per step) for ``mib`` MiB."""
    positions = mib * 1024 * 1024 // (HEADS * HEAD_DIM * 4)
    if positions < 2:
        raise ValueError(f"A {mib} MiB state has fewer than two positions")
    written = max(1, positions // FRACTION)
    return (1, HEADS, positions, HEAD_DIM), positions // 2, written


def header(ways: Sequence[str]) -> str:
    return shared_header(ways, width=19)


def format_row(mib: int, times_ms: Mapping[str, float], ways: Sequence[str]) -> str:
    return shared_format_row(mib, times_ms, ways, width=19, unit="us")


def verdicts(results: Mapping[int, Mapping[str, float]]) -> Dict[str, Any]:
    """Which ways are flat in the state size, and the targets at TARGET_MIB.

    ``results`` maps state MiB -> way -> median step ms.
    """
    return {
        "flat": flatness(results, WAYS),
        "targets": targets_at(
            results.get(TARGET_MIB, {}),
            TARGET_MIB,
            ("in_place_engine",),
            "torch",
            "copy_back_engine",
            TARGET_VS_TORCH,
            TARGET_VS_COPY_BACK,
        ),
    }


def describe(verdict: Mapping[str, Any]) -> List[str]:
    """The verdicts as sentences."""
    return target_lines(
        verdict,
        "PyTorch's in-place copy",
        "torch, in_place_engine and copy_back_engine",
        TARGET_MIB,
    )


def missing_requirement() -> Optional[str]:
    """Why the benchmark cannot run here, in one sentence, or None."""
    if not torch.cuda.is_available():
        return "The benchmark times engines on a GPU; this host has no CUDA device."
    return None


class Write4d(torch.nn.Module):
    """The update ``IKVCacheUpdateLayer`` takes: positions of axis 2 of a 4-D cache."""

    def __init__(self, position: int) -> None:
        super().__init__()
        self.position = position

    def forward(self, cache, update):  # type: ignore[no-untyped-def]
        n = update.shape[2]
        cache[:, :, self.position : self.position + n, :] = update
        return update * 2


class Write3d(Write4d):
    """The same write on the same memory seen as 3-D: ordinary layers."""

    def forward(self, cache, update):  # type: ignore[no-untyped-def]
        n = update.shape[1]
        cache[:, self.position : self.position + n, :] = update
        return update * 2


def _engine(module: torch.nn.Module, args: Sequence[torch.Tensor]) -> Tuple[Any, Any]:
    """The serialized engine of ``module`` and its alias map entries."""
    import torch_tensorrt

    ep = torch.export.export(module, tuple(args))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "aliases.json")
        engine = (
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep,
                arg_inputs=list(args),
                min_block_size=1,
                require_full_compilation=True,
                alias_map_path=path,
            )
        )
        with open(path) as f:
            aliases = json.load(f)["aliases"]
    return engine, aliases


def _runner(
    way: str, cache: torch.Tensor, update: torch.Tensor, position: int
) -> Tuple[Callable[[], Any], Dict[str, Any]]:
    """A callable doing one step of ``way`` on ``cache``, and facts about it."""
    import torch_tensorrt

    if way == "torch":
        return (
            lambda: cache[:, :, position : position + update.shape[2], :].copy_(update)
        ), {}
    three_d = way.startswith(("copy_back", "same_address"))
    state = cache.view(cache.shape[1:]) if three_d else cache
    new = update.view(update.shape[1:]) if three_d else update
    module = (Write3d if three_d else Write4d)(position)
    if way.endswith("_module"):
        ep = torch.export.export(module, (state, new))
        compiled = torch_tensorrt.dynamo.compile(
            ep, arg_inputs=[state, new], min_block_size=1
        )
        return (lambda: compiled(state, new)), {}

    from torch_tensorrt.dynamo.lowering._mutation_write_backs import (
        check_in_place_bindings,
    )

    trt = _trt()
    engine_bytes, aliases = _engine(module, (state, new))
    facts: Dict[str, Any] = {"alias_map": aliases}
    if way == "same_address_engine":
        aliases = [dict(a, update="in_place") for a in aliases]
    engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(engine_bytes)
    facts["engine_aliases"] = {
        a["output"]: engine.get_aliased_input_tensor(a["output"]) for a in aliases
    }
    context = engine.create_execution_context()
    buffers, copies = bind_buffers(engine, {"cache": state, "update": new}, aliases)
    check_in_place_bindings(aliases, {n: t.data_ptr() for n, t in buffers.items()})
    bind_addresses(context, buffers)

    def run() -> None:
        stream = torch.cuda.current_stream()
        if not context.execute_async_v3(stream.cuda_stream):
            raise RuntimeError(f"{way}: execute_async_v3 failed")
        for dst, src in copies:
            dst.copy_(src)

    return run, facts


def check_and_time(way: str, mib: int, steps: int) -> Tuple[float, Dict[str, Any]]:
    """Median ms per step of ``way`` on a state of ``mib`` MiB, after checking it."""
    shape, position, n = shapes_of(mib)
    cache = torch.randn(shape, device="cuda")
    update = torch.randn(shape[0], shape[1], n, shape[3], device="cuda")
    expected = cache.clone()
    expected[:, :, position : position + n, :] = update
    run, facts = _runner(way, cache, update, position)
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocated_bytes.all.allocated"]
    run()
    torch.cuda.synchronize()
    allocated = torch.cuda.memory_stats()["allocated_bytes.all.allocated"] - before
    facts["correct"] = bool(torch.equal(cache, expected))
    # what PyTorch allocated during the step: a way that computes a new state
    # allocates one (copy-back); a way that writes the state in place, less
    facts["allocated_bytes_per_step"] = allocated
    facts["allocates_a_new_state"] = allocated >= cache.nbytes
    if not facts["correct"] and way != "same_address_engine":
        raise RuntimeError(f"{way} at {mib} MiB: the state differs from PyTorch's")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    return _timed(run, stream, steps), facts


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    reason = missing_requirement()
    if reason:
        print(reason, file=sys.stderr)
        raise SystemExit(2)
    import torch_tensorrt

    print(header(args.ways))
    results: Dict[int, Dict[str, float]] = {}
    facts: Dict[int, Dict[str, Any]] = {}
    for mib in args.sizes_mib:
        results[mib], facts[mib] = {}, {}
        for way in args.ways:
            results[mib][way], facts[mib][way] = check_and_time(way, mib, args.steps)
            torch.cuda.empty_cache()
        print(format_row(mib, results[mib], args.ways), flush=True)
    verdict = verdicts(results)
    for line in describe(verdict):
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "device": torch.cuda.get_device_name(),
                    "torch_tensorrt": torch_tensorrt.__version__,
                    "torch": torch.__version__,
                    "steps": args.steps,
                    "state": f"fp32 [1, {HEADS}, S, {HEAD_DIM}]",
                    "fraction_written": 1 / FRACTION,
                    "median_ms": {str(m): r for m, r in results.items()},
                    "facts": {str(m): f for m, f in facts.items()},
                    **verdict,
                },
                f,
                indent=2,
                default=str,
            )
            f.write("\n")


if __name__ == "__main__":
    main()
