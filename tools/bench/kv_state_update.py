"""A large state updated in place by TensorRT's own aliased output, per form. Needs a GPU.

    python tools/bench/kv_state_update.py [--sizes-mib 16 256 1024 4096] \\
        [--steps 50] [--forms ...] [--kinds ...] [--json kv_state_update.json]

Each *form* is a way a model writes a float32 state of the given size, 0.1% of
it per step (at least one position), at a position that moves every step:

- **4d_b1**: ``cache.index_copy_(2, pos, update)``, cache ``[1, 8, S, 128]``, one
  position given as a tensor at run time;
- **4d_b4**: the same at batch 4 (the position written in every batch row);
- **4d_run**: ``cache[:, :, p:p+n, :] = update``, a run of n positions;
- **2d_rows**: ``state[p:p+n] = update``, rows of a ``[R, 1024]`` state;
- **bshd**: ``cache[:, p:p+n] = update``, a ``[1, S, 8, 128]`` cache along S;
- **buffer**: the ``bshd`` write on a module's buffer (``lift_mutable_buffers``).

Each form is timed *kinds* of ways (every one but ``torch`` compiled through the
patch set; TensorRT-RTX and the standard flavour alike, no plugin):

- **torch**: the model run by PyTorch (its own in-place copy; the bound);
- **engine**: ``convert_exported_program_to_serialized_trt_engine``'s engine,
  bound as its alias map says: the state's memory, seen with the engine's shape
  (``binding_shape``), for the state and for its aliased output; no copy;
- **module**: ``torch_tensorrt.dynamo.compile``'s module, called as a user would.

And one reference per size, **copy_back_engine** (and its module): the ``4d_run``
update given as a tensor of n positions (``index_copy_``), which the layer cannot
take (the positions need not be contiguous): ordinary layers write a new state,
which the caller copies back.

Each way is first checked against PyTorch over two steps, then timed with CUDA
events on a stream of its own (median per step, the position moving every step).
Prints a table, which ways are flat in the state size (largest <= 2x smallest), and
the targets at 1 GiB for each form's engine: within 1.5x of the form's PyTorch
step, and at least 50x faster than ``copy_back_engine``. ``--json`` writes all of
it. Without a CUDA device it says so in one sentence and exits 2. The parts that
need no GPU (arguments, shapes, models, table, verdicts) are tested on the CPU
(``tests/patchset/test_bench_kv_state_update.py``).
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
    bind_addresses,
    bind_buffers,
    flatness,
    flatness_lines,
)
from state_update import format_row as shared_format_row  # noqa: E402
from state_update import header as shared_header  # noqa: E402

HEADS, HEAD_DIM = 8, 128
ROW = 1024  # the row of a 2-D state
FRACTION = 1000  # 1 / fraction of the state written per step (0.1%)
FORMS = ("4d_b1", "4d_b4", "4d_run", "2d_rows", "bshd", "buffer")
KINDS = ("torch", "engine", "module")
COPY_BACK = ("copy_back_engine", "copy_back_module")
TARGET_MIB = 1024
TARGET_VS_TORCH = 1.5  # each form's engine within 1.5x of PyTorch's own step
TARGET_VS_COPY_BACK = 50.0  # and at least 50x faster than copy-back


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sizes-mib", type=int, nargs="+", default=[16, 256, 1024, 4096]
    )
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--forms", nargs="+", choices=FORMS, default=list(FORMS))
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument(
        "--no-copy-back", action="store_true", help="leave out the copy-back reference"
    )
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    parser.add_argument(
        "--merge",
        nargs="+",
        metavar="JSON",
        help="time nothing: merge the JSON of runs at other sizes (one process "
        "per size keeps each run short), print the table and verdicts",
    )
    args = parser.parse_args(argv)
    if args.steps < 1 or any(m < 1 for m in args.sizes_mib):
        parser.error("--steps and --sizes-mib take positive numbers")
    return args


def ways_of(args: argparse.Namespace) -> List[str]:
    """The ways timed: ``<form>:<kind>``, then the copy-back reference."""
    ways = [f"{form}:{kind}" for form in args.forms for kind in args.kinds]
    return ways + ([] if args.no_copy_back else list(COPY_BACK))


class Form:
    """A model writing a state of a given size, and its arguments at a step."""

    def __init__(self, name: str, mib: int) -> None:
        self.name = name
        elements = mib * 1024 * 1024 // 4
        if name == "2d_rows":
            self.shape: Tuple[int, ...] = (elements // ROW, ROW)
            self.axis = 0
        elif name in ("bshd", "buffer"):
            self.shape = (1, elements // (HEADS * HEAD_DIM), HEADS, HEAD_DIM)
            self.axis = 1
        else:
            batch = 4 if name == "4d_b4" else 1
            self.shape = (
                batch,
                HEADS,
                elements // (batch * HEADS * HEAD_DIM),
                HEAD_DIM,
            )
            self.axis = 2
        positions = self.shape[self.axis]
        if positions < 8:
            raise ValueError(f"A {mib} MiB state has fewer than 8 positions")
        one = name in ("4d_b1", "4d_b4")
        self.n = 1 if one else max(1, positions // FRACTION)
        self.positions = positions

    @property
    def runtime_position(self) -> bool:
        """Whether the position is an input (a tensor), else a constant of the model."""
        return self.name in ("4d_b1", "4d_b4")

    def position(self, step: int) -> int:
        """Where step ``step`` writes: moving through the state when it is an input."""
        moved = 7 * step if self.runtime_position else 0
        return (self.positions // 3 + moved) % (self.positions - self.n)

    def update(self, step: int, device: str = "cuda") -> torch.Tensor:
        shape = list(self.shape)
        shape[self.axis] = self.n
        generator = torch.Generator().manual_seed(step)
        return torch.randn(shape, generator=generator).to(device)

    def module(self) -> torch.nn.Module:
        if self.runtime_position:
            return IndexWrite()
        if self.name == "buffer":
            return BufferWrite(self.shape, self.position(0))
        return SliceWrite(self.axis, self.position(0))

    def args(self, step: int, device: str = "cuda") -> Tuple[torch.Tensor, ...]:
        """The arguments the model takes at ``step``, but the state."""
        if self.runtime_position:
            position = torch.tensor([self.position(step)], device=device)
            return (position, self.update(step, device))
        return (self.update(step, device),)

    def expected(self, state: torch.Tensor, step: int) -> torch.Tensor:
        """``state`` after step ``step``, by PyTorch."""
        out = state.clone()
        index = [slice(None)] * self.axis + [
            slice(self.position(step), self.position(step) + self.n)
        ]
        out[tuple(index)] = self.update(step, str(state.device))
        return out


class IndexWrite(torch.nn.Module):
    def forward(self, cache, position, update):  # type: ignore[no-untyped-def]
        cache.index_copy_(2, position, update)
        return update * 2


class SliceWrite(torch.nn.Module):
    """``state[..., p:p+n, ...] = update`` along ``axis``."""

    def __init__(self, axis: int, position: int) -> None:
        super().__init__()
        self.axis, self.position = axis, position

    def forward(self, state, update):  # type: ignore[no-untyped-def]
        p, n = self.position, update.shape[self.axis]
        state[(slice(None),) * self.axis + (slice(p, p + n),)] = update
        return update * 2


class BufferWrite(torch.nn.Module):
    def __init__(self, shape: Sequence[int], position: int) -> None:
        super().__init__()
        self.position = position
        self.register_buffer("state", torch.zeros(shape))

    def forward(self, update):  # type: ignore[no-untyped-def]
        p, n = self.position, update.shape[1]
        self.state[:, p : p + n] = update
        return update * 2


class CopyBackWrite(torch.nn.Module):
    """The ``4d_run`` update at positions given as a tensor: copied back."""

    def forward(self, cache, positions, update):  # type: ignore[no-untyped-def]
        cache.index_copy_(2, positions, update)
        return update * 2


def header(ways: Sequence[str]) -> str:
    return shared_header(ways, width=19)


def format_row(mib: int, times_ms: Mapping[str, float], ways: Sequence[str]) -> str:
    return shared_format_row(mib, times_ms, ways, width=19, unit="us")


def verdicts(results: Mapping[int, Mapping[str, float]]) -> Dict[str, Any]:
    """Which ways are flat in the state size, and each form's targets at TARGET_MIB.

    ``results`` maps state MiB -> way -> median step ms.
    """
    ways = sorted({w for r in results.values() for w in r})
    at = results.get(TARGET_MIB, {})
    targets = {}
    for form in FORMS:
        engine, bound = at.get(f"{form}:engine"), at.get(f"{form}:torch")
        copy_back = at.get("copy_back_engine")
        if not (engine and bound and copy_back):
            continue
        targets[form] = {
            "state_mib": TARGET_MIB,
            "vs_torch": engine / bound,
            "max_vs_torch": TARGET_VS_TORCH,
            "vs_torch_met": engine / bound <= TARGET_VS_TORCH,
            "speedup_vs_copy_back": copy_back / engine,
            "min_speedup": TARGET_VS_COPY_BACK,
            "speedup_met": copy_back / engine >= TARGET_VS_COPY_BACK,
        }
    return {"flat": flatness(results, ways), "targets": targets}


def describe(verdict: Mapping[str, Any]) -> List[str]:
    """The verdicts as sentences."""
    lines = flatness_lines(verdict["flat"])
    if not verdict["targets"]:
        lines.append(
            f"targets: not evaluated (needs a form's torch and engine, and "
            f"copy_back_engine, at {TARGET_MIB} MiB)"
        )
    for form, t in verdict["targets"].items():
        lines.append(
            f"target at {t['state_mib']} MiB, {form}:engine: {t['vs_torch']:.2f}x "
            f"PyTorch's step (target <= {t['max_vs_torch']:g}x): "
            f"{'met' if t['vs_torch_met'] else 'MISSED'}; "
            f"{t['speedup_vs_copy_back']:.1f}x faster than copy_back_engine "
            f"(target >= {t['min_speedup']:g}x): "
            f"{'met' if t['speedup_met'] else 'MISSED'}"
        )
    return lines


def missing_requirement() -> Optional[str]:
    """Why the benchmark cannot run here, in one sentence, or None."""
    if not torch.cuda.is_available():
        return "The benchmark times engines on a GPU; this host has no CUDA device."
    return None


def _engine(
    module: torch.nn.Module, args: Sequence[torch.Tensor], **settings: Any
) -> Tuple[bytes, List[Dict[str, Any]]]:
    """The serialized engine of ``module`` and its alias map entries."""
    import torch_tensorrt
    from torch_tensorrt.dynamo import read_alias_map

    ep = torch.export.export(module, tuple(args))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "aliases.json")
        engine = (
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep,
                arg_inputs=list(args),
                min_block_size=1,
                alias_map_path=path,
                **settings,
            )
        )
        read_alias_map(path)  # checked: a version, key or value it does not know fails
        with open(path) as f:
            aliases = json.load(f)["aliases"]
    return engine, aliases


def engine_view(tensor: torch.Tensor, alias: Mapping[str, Any]) -> torch.Tensor:
    """``tensor`` (a state) seen with the engine's shape of it, as the alias map gives."""
    shape = alias.get("binding_shape")
    if shape is None or list(tensor.shape) == list(shape):
        return tensor
    return tensor.view([tensor.shape[0] if d == -1 else d for d in shape])


class EngineRunner:
    """A serialized engine bound as its alias map says."""

    def __init__(
        self, engine_bytes: bytes, aliases: Sequence[Mapping[str, Any]]
    ) -> None:
        from torch_tensorrt.dynamo.lowering._mutation_write_backs import (
            alias_map_entries,
            check_alias_map_against_engine,
        )

        trt = _trt()
        self.engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(engine_bytes)
        # the map fits the engine: names, dtypes, shapes, TensorRT's own aliases
        check_alias_map_against_engine(alias_map_entries(list(aliases)), self.engine)
        self.context = self.engine.create_execution_context()
        self.aliases = list(aliases)
        names = [
            self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)
        ]
        out = trt.TensorIOMode.OUTPUT
        self.inputs = [n for n in names if self.engine.get_tensor_mode(n) != out]
        self.facts: Dict[str, Any] = {
            "alias_map": self.aliases,
            "engine_aliases": {
                a["output"]: self.engine.get_aliased_input_tensor(a["output"])
                for a in self.aliases
            },
            "engine_input_shapes": {
                n: list(self.engine.get_tensor_shape(n)) for n in self.inputs
            },
        }
        self.copies: List[Tuple[torch.Tensor, torch.Tensor]] = []
        self.bound: Dict[str, torch.Tensor] = {}

    def bind(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Bind ``tensors`` (by input binding) and the outputs, per the alias map.

        A state the engine writes in place is bound through its view in the
        engine's shape (``binding_shape``), for the input and for its output.
        """
        in_place = {a["input"]: a for a in self.aliases if a["update"] == "in_place"}
        inputs = {
            name: engine_view(t, in_place[name]) if name in in_place else t
            for name, t in tensors.items()
        }
        # kept: the engine reads and writes them until the next bind
        self.bound, self.copies = bind_buffers(self.engine, inputs, self.aliases)
        bind_addresses(self.context, self.bound)

    def execute(self) -> None:
        stream = torch.cuda.current_stream()
        if not self.context.execute_async_v3(stream.cuda_stream):
            raise RuntimeError("execute_async_v3 failed")
        for state, new in self.copies:
            state.copy_(new)


Step = Tuple[Callable[[], Any], Callable[[], torch.Tensor]]


def _runner(way: str, mib: int) -> Tuple[Callable[[int], Step], Dict[str, Any]]:
    """For ``way``: a function of the step giving (a run of it, the state), and facts."""
    import torch_tensorrt

    copy_back = way.startswith("copy_back")
    form = Form("4d_run" if copy_back else way.split(":")[0], mib)
    kind = way.split("_")[-1] if copy_back else way.split(":")[1]
    facts: Dict[str, Any] = {"shape": list(form.shape), "positions_per_step": form.n}
    module: torch.nn.Module = (CopyBackWrite() if copy_back else form.module()).cuda()
    buffer = form.name == "buffer" and not copy_back
    state = module.state if buffer else torch.zeros(form.shape, device="cuda")

    def args(step: int) -> Tuple[torch.Tensor, ...]:
        if copy_back:
            p = form.position(step)
            values = (torch.arange(p, p + form.n, device="cuda"), form.update(step))
        else:
            values = form.args(step)
        return values if buffer else (state,) + values

    if kind == "torch":
        call: Callable[..., Any] = module
        state_of = lambda: state  # noqa: E731
    elif kind == "module":
        ep = torch.export.export(module, args(0))
        call = torch_tensorrt.dynamo.compile(
            ep, arg_inputs=list(args(0)), min_block_size=1
        )
        state_of = (lambda: call.state) if buffer else (lambda: state)  # noqa: E731
    else:
        settings = {"lift_mutable_buffers": True} if buffer else {}
        runner = EngineRunner(*_engine(module, args(0), **settings))
        facts.update(runner.facts)

        def step_of(step: int) -> Step:
            values = args(step) + ((state,) if buffer else ())
            runner.bind(dict(zip(runner.inputs, values)))
            return runner.execute, lambda: state

        return step_of, facts

    def step_of(step: int) -> Step:
        values = args(step)
        return (lambda: call(*values)), state_of

    return step_of, facts


def check_and_time(way: str, mib: int, steps: int) -> Tuple[float, Dict[str, Any]]:
    """Median ms per step of ``way`` on a state of ``mib`` MiB, after checking it."""
    step_of, facts = _runner(way, mib)
    form = Form("4d_run" if way.startswith("copy_back") else way.split(":")[0], mib)
    for step in range(2):
        run, state_of = step_of(step)
        expected = form.expected(state_of(), step)
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()["allocated_bytes.all.allocated"]
        run()
        torch.cuda.synchronize()
        allocated = torch.cuda.memory_stats()["allocated_bytes.all.allocated"] - before
        if not torch.equal(state_of(), expected):
            raise RuntimeError(
                f"{way} at {mib} MiB, step {step}: the state differs from PyTorch's"
            )
    facts["correct"] = True
    # what PyTorch allocated during a step: a way that computes a new state
    # allocates one (copy-back); a way that writes the state in place, less
    facts["allocated_bytes_per_step"] = allocated
    facts["allocates_a_new_state"] = allocated >= state_of().nbytes
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    run, _ = step_of(2)
    return _timed(run, stream, steps), facts


def merged(runs: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """The JSON of several runs (at different sizes) as one, with its verdicts."""
    first = runs[0]
    result = {k: v for k, v in first.items() if k not in ("flat", "targets")}
    result["median_ms"], result["facts"] = {}, {}
    for run in runs:
        for key in ("device", "torch_tensorrt", "torch", "steps"):
            if run.get(key) != first.get(key):
                raise ValueError(
                    f"runs differ in {key}: {run.get(key)!r}, {first.get(key)!r}"
                )
        result["median_ms"].update(run["median_ms"])
        result["facts"].update(run["facts"])
    results = {int(m): r for m, r in result["median_ms"].items()}
    return {**result, **verdicts(results)}


def _print(
    results: Mapping[int, Mapping[str, float]], verdict: Mapping[str, Any]
) -> None:
    ways = list(dict.fromkeys(w for r in results.values() for w in r))
    print(header(ways))
    for mib in sorted(results):
        print(format_row(mib, results[mib], ways))
    for line in describe(verdict):
        print(line)


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    if args.merge:
        runs = []
        for path in args.merge:
            with open(path) as f:
                runs.append(json.load(f))
        result = merged(runs)
        _print({int(m): r for m, r in result["median_ms"].items()}, result)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=2, default=str)
                f.write("\n")
        return
    reason = missing_requirement()
    if reason:
        print(reason, file=sys.stderr)
        raise SystemExit(2)
    import torch_tensorrt

    ways = ways_of(args)
    print(header(ways))
    results: Dict[int, Dict[str, float]] = {}
    facts: Dict[int, Dict[str, Any]] = {}
    for mib in args.sizes_mib:
        results[mib], facts[mib] = {}, {}
        for way in ways:
            results[mib][way], facts[mib][way] = check_and_time(way, mib, args.steps)
            torch.cuda.empty_cache()
        print(format_row(mib, results[mib], ways), flush=True)
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
