"""How to update a large state in place from a standalone engine. Needs a GPU.

    python tools/bench/state_update.py [--sizes-mib 16 64 256 1024 4096] \\
        [--steps 50] [--impl aot|jit] [--json state_update.json]

Each step adds updates to 0.1% of the rows of an fp32 state (distinct random
rows of 4 KiB). Three ways are timed, each on a stream of its own (TensorRT
synchronizes more on the default stream):

- **triton**: the bare Triton kernel the plugins run, launched directly on the
  state (the reference: no TensorRT);
- **declared_alias**: an in-place TensorRT plugin (``mutates_args=("state",)``)
  whose output is declared to alias the state (``X.aliased()``); the engine's
  alias map says ``in_place`` and the state and its new value are bound to the
  same memory;
- **copy_back**: the functional update (``state[index] = state[index] +
  update``, standard TensorRT layers); the engine writes the whole new state
  to ``state_new`` and the caller copies it back, as the alias map's ``copy``
  says.

Engines are built with ``convert_exported_program_to_serialized_trt_engine``
and bound as their alias map says (outputs get the engine's dtypes; an output
bound in place gets no memory of its own; every ``set_tensor_address`` is
checked, and ``check_in_place_bindings`` verifies the addresses). Prints the
median step time per state size, which ways are flat in the state size, and
the targets: the in-place plugin within 2x of triton and at least 100x
faster than copy_back at 1 GiB. ``--json`` writes all of it. The plugins use
the Triton kernel ahead of time (``--impl aot``, no Python at run time, as
from C++) or a Python JIT impl that launches it (``--impl jit``). Needs the
standard TensorRT flavour (``tensorrt.plugin``), Triton and a CUDA device.

Argument parsing, the table, the verdicts, dtype mapping, output binding and
building the copy-back engine (with TensorRT-RTX on a CPU) run without a GPU
(``tests/patchset/test_bench_state_update.py``).
"""

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch

ROW = 1024  # fp32 elements per state row (4 KiB)
FRACTION = 1000  # 1 / fraction of the rows updated per step (0.1%)
WAYS = ("triton", "declared_alias", "copy_back")
IN_PLACE_MODES = ("declared_alias",)
TARGET_MIB = 1024
TARGET_VS_TRITON = 2.0  # in-place within 2x of the bare kernel
TARGET_VS_COPY_BACK = 100.0  # and at least 100x faster than copy-back
FLAT = 2.0  # flat: at most 2x slower on the largest state than on the smallest

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


def bench_parser(description: str, ways: Sequence[str]) -> argparse.ArgumentParser:
    """The arguments every state-update benchmark takes: sizes, steps, ways, JSON."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--sizes-mib", type=int, nargs="+", default=[16, 64, 256, 1024, 4096]
    )
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument(
        "--ways",
        nargs="+",
        choices=ways,
        default=list(ways),
        help="which ways to time (default: all)",
    )
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    return parser


def parse_bench_args(
    parser: argparse.ArgumentParser, argv: Optional[Sequence[str]]
) -> argparse.Namespace:
    args = parser.parse_args(argv)
    if args.steps < 1 or min(args.sizes_mib) < 1:
        parser.error("--steps and --sizes-mib must be positive")
    return args


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = bench_parser(__doc__.split("\n")[0], WAYS)
    parser.add_argument("--impl", choices=("aot", "jit"), default="aot")
    return parse_bench_args(parser, argv)


def rows_of(mib: int) -> Tuple[int, int]:
    """(rows of the state, rows updated per step) for a state of ``mib`` MiB."""
    rows = mib * 1024 * 1024 // (ROW * 4)
    return rows, max(1, rows // FRACTION)


def header(ways: Sequence[str], width: int = 14) -> str:
    return " | ".join(["state MiB"] + [f"{w:>{width}}" for w in ways])


def format_row(
    mib: int,
    times_ms: Mapping[str, float],
    ways: Sequence[str],
    width: int = 14,
    unit: str = "ms",
) -> str:
    """A table row: each way's step time in ``unit`` (``ms`` or ``us``), ``-`` if not timed."""
    scale, digits = (1000.0, 1) if unit == "us" else (1.0, 3)
    cells = [f"{mib:9d}"]
    for w in ways:
        t = times_ms.get(w)
        cells.append(
            f"{'-':>{width}}"
            if t is None
            else f"{t * scale:{width - 3}.{digits}f} {unit}"
        )
    return " | ".join(cells)


def flatness(
    results: Mapping[int, Mapping[str, float]], ways: Sequence[str]
) -> Dict[str, bool]:
    """Way -> whether its step on the largest state is at most FLAT x the smallest's.

    ``results`` maps state MiB -> way -> median step ms; a way timed at only
    one of the two sizes is left out.
    """
    sizes = sorted(results)
    flat = {}
    if len(sizes) > 1:
        for way in ways:
            small, large = results[sizes[0]].get(way), results[sizes[-1]].get(way)
            if small and large:
                flat[way] = large / small <= FLAT
    return flat


def flatness_lines(flat: Mapping[str, bool]) -> List[str]:
    """:func:`flatness` as sentences (none when nothing was compared)."""
    if not flat:
        return []
    return [
        f"flat in the state size (largest <= {FLAT:g}x smallest): "
        f"{', '.join(w for w in flat if flat[w]) or 'none'}",
        f"grows with the state: {', '.join(w for w in flat if not flat[w]) or 'none'}",
    ]


def targets_at(
    at: Mapping[str, float],
    mib: int,
    in_place: Sequence[str],
    bound: str,
    copy_back: str,
    max_vs_bound: float,
    min_speedup: float,
) -> Optional[Dict[str, Any]]:
    """The targets at one state size, from its way -> median step ms ``at``.

    The fastest of the ``in_place`` ways is compared with ``bound`` (target: at
    most ``max_vs_bound`` x its time) and with ``copy_back`` (target: at least
    ``min_speedup`` x faster). None when one of them was not timed.
    """
    timed = {w: at[w] for w in in_place if at.get(w)}
    if not (timed and at.get(bound) and at.get(copy_back)):
        return None
    best = min(timed, key=timed.__getitem__)
    vs_bound = timed[best] / at[bound]
    speedup = at[copy_back] / timed[best]
    return {
        "state_mib": mib,
        "mode": best,
        "bound": bound,
        "vs_bound": vs_bound,
        "max_vs_bound": max_vs_bound,
        "vs_bound_met": vs_bound <= max_vs_bound,
        "copy_back": copy_back,
        "speedup_vs_copy_back": speedup,
        "min_speedup": min_speedup,
        "speedup_met": speedup >= min_speedup,
    }


def target_lines(
    verdict: Mapping[str, Any], bound_label: str, needs: str, mib: int
) -> List[str]:
    """A verdict's flatness and targets as sentences.

    ``bound_label`` names the bound in the sentence (``"the bare kernel"``);
    ``needs`` says which ways the targets need, for when they were not timed.
    """
    lines = flatness_lines(verdict["flat"])
    t = verdict["targets"]
    if t is None:
        lines.append(f"targets: not evaluated (needs {needs} at {mib} MiB)")
        return lines
    lines.append(
        f"target at {t['state_mib']} MiB, {t['mode']}: {t['vs_bound']:.2f}x "
        f"{bound_label} (target <= {t['max_vs_bound']:g}x): "
        f"{'met' if t['vs_bound_met'] else 'MISSED'}; "
        f"{t['speedup_vs_copy_back']:.1f}x faster than {t['copy_back']} (target >= "
        f"{t['min_speedup']:g}x): {'met' if t['speedup_met'] else 'MISSED'}"
    )
    return lines


def verdicts(results: Mapping[int, Mapping[str, float]]) -> Dict[str, Any]:
    """Which ways are flat in the state size, and the targets at TARGET_MIB.

    ``results`` maps state MiB -> way -> median step ms.
    """
    return {
        "flat": flatness(results, WAYS),
        "targets": targets_at(
            results.get(TARGET_MIB, {}),
            TARGET_MIB,
            IN_PLACE_MODES,
            "triton",
            "copy_back",
            TARGET_VS_TRITON,
            TARGET_VS_COPY_BACK,
        ),
    }


def describe(verdict: Mapping[str, Any]) -> List[str]:
    """The verdicts as sentences."""
    return target_lines(
        verdict, "the bare kernel", "triton, copy_back and an in-place mode", TARGET_MIB
    )


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


def _kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def scatter_add_rows(state_ptr, index_ptr, update_ptr, out_ptr, n_rows, ROW: tl.constexpr):  # type: ignore[no-untyped-def]
        i = tl.program_id(0)
        if i < n_rows:
            cols = tl.arange(0, ROW)
            row = tl.load(index_ptr + i)
            values = tl.load(state_ptr + row * ROW + cols)
            values += tl.load(update_ptr + i * ROW + cols)
            tl.store(out_ptr + row * ROW + cols, values)

    return scatter_add_rows


def launch(kernel: Any, state, index, update, out) -> None:  # type: ignore[no-untyped-def]
    """The bare update: ``out[index] = state[index] + update`` (distinct rows)."""
    kernel[(index.shape[0],)](state, index, update, out, index.shape[0], ROW=ROW)


def _register_desc(qualname: str) -> None:
    import tensorrt.plugin as trtp

    @trtp.register(qualname)
    def _(
        state: trtp.TensorDesc, index: trtp.TensorDesc, update: trtp.TensorDesc
    ) -> Tuple[trtp.TensorDesc]:
        return (state.aliased(),)


def define_ops(impl: str = "aot") -> None:
    """The in-place op, its plugin and converter (standard TensorRT)."""
    import tensorrt.plugin as trtp
    import torch_tensorrt
    import triton

    kernel = _kernel()
    qualname = "bench_state::scatter_add_"

    @torch.library.custom_op(qualname, mutates_args=("state",))
    def op(state: torch.Tensor, index: torch.Tensor, update: torch.Tensor) -> None:
        state.index_add_(0, index, update)

    @op.register_fake
    def _(state, index, update):  # type: ignore[no-untyped-def]
        return None

    _register_desc(qualname)
    if impl == "jit":

        @trtp.impl(qualname)
        def _(state, index, update, outputs, stream):  # type: ignore[no-untyped-def]
            with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
                idx = torch.as_tensor(index, device="cuda")
                launch(
                    kernel,
                    torch.as_tensor(state, device="cuda"),
                    idx,
                    torch.as_tensor(update, device="cuda"),
                    torch.as_tensor(outputs[0], device="cuda"),
                )

    else:

        @trtp.aot_impl(qualname)
        def _(
            state: trtp.TensorDesc,
            index: trtp.TensorDesc,
            update: trtp.TensorDesc,
            outputs: Tuple[trtp.TensorDesc],
            tactic: int,
        ) -> Tuple[
            Union[str, bytes],
            Union[str, bytes],
            trtp.KernelLaunchParams,
            trtp.SymIntExprs,
        ]:
            src = triton.compiler.ASTSource(
                fn=kernel,
                signature={
                    "state_ptr": "*fp32",
                    "index_ptr": "*i64",
                    "update_ptr": "*fp32",
                    "out_ptr": "*fp32",
                    "n_rows": "i32",
                },
                constexprs={"ROW": ROW},
            )
            compiled = triton.compile(src)
            params = trtp.KernelLaunchParams()
            params.grid_x = index.shape_expr[0]
            params.block_x = compiled.metadata.num_warps * 32
            params.shared_mem = compiled.metadata.shared
            extra = trtp.SymIntExprs(1)
            extra[0] = trtp.SymInt32(index.shape_expr[0])
            return compiled.metadata.name, compiled.asm["ptx"], params, extra

    torch_tensorrt.dynamo.conversion.plugins.generate_plugin_converter(
        qualname, use_aot_if_available=impl == "aot"
    )


class DeclaredAlias(torch.nn.Module):
    def forward(self, state, index, update):  # type: ignore[no-untyped-def]
        torch.ops.bench_state.scatter_add_(state, index, update)
        return update.sum()


class CopyBack(torch.nn.Module):
    def forward(self, state, index, update):  # type: ignore[no-untyped-def]
        # the rows are distinct: the same update as the kernel's, in standard
        # layers (index_add_ would lower to an accumulating index_put)
        state[index] = state[index] + update
        return update.sum()


MODULES = {
    "declared_alias": (DeclaredAlias, {}),
    "copy_back": (CopyBack, {}),
}


def build_engine(way: str, args: Sequence[torch.Tensor]) -> Tuple[bytes, List[Any]]:
    """The serialized engine of ``way`` and its alias map's entries."""
    import torch_tensorrt
    from torch_tensorrt.dynamo import read_alias_map

    module, options = MODULES[way]
    ep = torch.export.export(module(), tuple(args))
    with tempfile.TemporaryDirectory() as tmp:
        engine_bytes = (
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep,
                arg_inputs=list(args),
                min_block_size=1,
                require_full_compilation=True,
                alias_map_path=f"{tmp}/aliases.json",
                **options,
            )
        )
        # the map's format, version and entries checked, as a C++ caller would
        read_alias_map(f"{tmp}/aliases.json")
        with open(f"{tmp}/aliases.json") as f:
            aliases = json.load(f)["aliases"]
    expected = "copy" if way == "copy_back" else "in_place"
    updates = [(a["input"], a["update"]) for a in aliases]
    if updates != [("state", expected)]:
        raise RuntimeError(
            f"{way}: the alias map updates {updates}, expected [('state', "
            f"'{expected}')]; this measurement would not be the {way} way"
        )
    return engine_bytes, aliases


def _timed(run: Any, stream: torch.cuda.Stream, steps: int) -> float:
    times = []
    with torch.cuda.stream(stream):
        run()  # warm-up
        for _ in range(steps):
            start, end = torch.cuda.Event(True), torch.cuda.Event(True)
            start.record(stream)
            run()
            end.record(stream)
            end.synchronize()
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def step_time(way: str, args: Sequence[torch.Tensor], steps: int) -> float:
    """Median ms of one update of the state (``args[0]``) the ``way`` given."""
    from torch_tensorrt.dynamo import (
        check_in_place_bindings,
    )

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    state, index, update = args
    if way == "triton":
        kernel = _kernel()
        return _timed(
            lambda: launch(kernel, state, index, update, state), stream, steps
        )
    trt = _trt()
    engine_bytes, aliases = build_engine(way, args)
    runtime = trt.Runtime(trt.Logger())
    runtime.engine_host_code_allowed = True  # AOT plugins
    engine = runtime.deserialize_cuda_engine(engine_bytes)
    context = engine.create_execution_context()
    buffers, copies = bind_buffers(
        engine, {"state": state, "index": index, "update": update}, aliases
    )
    check_in_place_bindings(aliases, {n: t.data_ptr() for n, t in buffers.items()})
    bind_addresses(context, buffers)

    def run() -> None:
        if not context.execute_async_v3(stream.cuda_stream):
            raise RuntimeError(f"{way}: execute_async_v3 failed")
        for dst, src in copies:
            dst.copy_(src)

    return _timed(run, stream, steps)


def missing_requirement(ways: Sequence[str]) -> Optional[str]:
    """Why the benchmark cannot run ``ways`` here, in one sentence, or None."""
    if any(w in IN_PLACE_MODES for w in ways):
        try:
            import tensorrt.plugin  # noqa: F401
        except ImportError:
            return (
                "The plugin way (declared_alias) needs standard TensorRT's "
                "tensorrt.plugin, which this install does not have (the RTX flavour has "
                "no plugins): run them with the standard flavour, or pass --ways copy_back."
            )
    if any(w == "triton" or w in IN_PLACE_MODES for w in ways):
        if importlib.util.find_spec("triton") is None:
            return "The Triton kernel ways need Triton, which is not installed."
    if not torch.cuda.is_available():
        return "The benchmark times engines on a GPU; this host has no CUDA device."
    return None


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    reason = missing_requirement(args.ways)
    if reason:
        print(reason, file=sys.stderr)
        raise SystemExit(2)
    trt = _trt()
    if any(w in IN_PLACE_MODES for w in args.ways):
        define_ops(args.impl)
    print(header(args.ways))
    results: Dict[int, Dict[str, float]] = {}
    for mib in args.sizes_mib:
        rows, touched = rows_of(mib)
        state = torch.zeros(rows, ROW, device="cuda")
        index = torch.randperm(rows, device="cuda")[:touched]
        update = torch.randn(touched, ROW, device="cuda")
        results[mib] = {
            way: step_time(way, (state, index, update), args.steps) for way in args.ways
        }
        print(format_row(mib, results[mib], args.ways))
        del state
        torch.cuda.empty_cache()
    verdict = verdicts(results)
    for line in describe(verdict):
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "device": torch.cuda.get_device_name(),
                    "tensorrt": trt.__version__,
                    "torch": torch.__version__,
                    "impl": args.impl,
                    "steps": args.steps,
                    "row_bytes": ROW * 4,
                    "fraction_updated": 1 / FRACTION,
                    "median_ms": {str(m): r for m, r in results.items()},
                    **verdict,
                },
                f,
                indent=2,
            )
            f.write("\n")


if __name__ == "__main__":
    main()
