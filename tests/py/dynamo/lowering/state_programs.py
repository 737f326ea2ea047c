# type: ignore
"""A generator of state programs, for differential tests of in-place state.

A state program is a small ``torch.nn.Module`` that keeps one or two states (a
user input it writes, or a buffer) and does, in a random order, what models do
around a state: slab writes (static starts, negative and past-the-end bounds,
runs of positions), ``index_copy_`` at a position given at run time, reads of
the state before and after a write, snapshots (``clone``) returned, whole-state
in-place ops, functional writes (``torch.index_copy``) whose result is
returned, resets from an input (``copy_``), a mutating custom op with a
converter and one without (PyTorch runs it), and the state itself returned.
States are float32, float16, bfloat16, int32 or float64, of rank 2 to 4, and an
input state may reach the module contiguous, transposed, as a slice of a larger
tensor, or expanded (stride 0, which eager refuses to write).

Every program is made from one integer seed (:func:`generate`): a failure
replays from its seed, and :attr:`StateProgram.source` is the module's Python
source, printed in every failure message. :func:`run_eager` and
:func:`compare` give the reference and the check: over several steps, with new
inputs each step, the compiled module must return what eager returns, leave
every written input and buffer as eager leaves it, and the outputs it returned
earlier must still hold their values after later steps (a returned snapshot
must not be the state's memory).

The CPU tests (``test_state_program_fuzzer.py``) build each program's engines
with TensorRT-RTX and run ``compile()``'s module with the engines' execution
stood in; ``tools/fuzz/state_programs.py`` runs the same programs with real
engines on a GPU.
"""

import dataclasses
import random
import textwrap
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int32": torch.int32,
    "float64": torch.float64,
}
FLOATS = ("float32", "float16", "bfloat16", "float64")
EXPORT_BATCH, CALL_BATCH = 2, 3
LAYOUTS = ("contiguous", "transposed", "sliced", "expanded")

# ----------------------------------------------------------------------------
# Two mutating custom ops: one with a converter, one without (PyTorch runs it)


@torch.library.custom_op("state_fuzz::bump_", mutates_args=("x",))
def bump_(x: torch.Tensor) -> None:
    x.add_(1)


@bump_.register_fake
def _(x):
    return None


@torch.library.custom_op("state_fuzz::bump_in_pytorch_", mutates_args=("x",))
def bump_in_pytorch_(x: torch.Tensor) -> None:
    x.add_(2)


@bump_in_pytorch_.register_fake
def _(x):
    return None


def _register_converter() -> None:
    from torch_tensorrt.dynamo._SourceIR import SourceIR
    from torch_tensorrt.dynamo.conversion import dynamo_tensorrt_converter, impl

    @dynamo_tensorrt_converter(
        torch.ops.state_fuzz.bump_.default, supports_dynamic_shapes=True
    )
    def convert_bump_(ctx, target, args, kwargs, name):
        # the new value of the mutated argument, the only output
        return impl.elementwise.add(ctx, target, SourceIR.ATEN, name, args[0], 1)


try:
    _register_converter()
except ImportError:  # torch_tensorrt is not installed: the generator still works
    pass


# ----------------------------------------------------------------------------
# Programs


@dataclasses.dataclass
class State:
    name: str
    kind: str  # "input" or "buffer"
    shape: Tuple[int, ...]
    dtype: str
    layout: str  # for an input: how the caller's tensor is laid out

    @property
    def ref(self) -> str:
        return f"self.{self.name}" if self.kind == "buffer" else self.name


@dataclasses.dataclass
class Input:
    name: str
    shape: Tuple[int, ...]
    dtype: str
    # "values" (random), "position" (an int64 [1] position below ``bound``),
    # "length" (a [1, L] tensor whose dynamic size L, from 2 to ``bound``, is
    # a symbolic start)
    role: str = "values"
    bound: int = 0
    # its first dimension is the dynamic batch of the input states
    batched: bool = False


@dataclasses.dataclass
class StateProgram:
    seed: int
    states: List[State]
    inputs: List[Input]  # the other inputs, after the input states
    body: List[str]
    returns: List[str]
    # returns that are a state itself: compared at their step only (eager
    # returns the state's own tensor, which later steps change)
    live_returns: List[int]
    features: List[str]
    # the input states' first dimension is dynamic: exported at EXPORT_BATCH,
    # called at CALL_BATCH
    dynamic_batch: bool = False

    @property
    def arg_names(self) -> List[str]:
        return [s.name for s in self.states if s.kind == "input"] + [
            i.name for i in self.inputs
        ]

    @property
    def source(self) -> str:
        lines = ["class Program(torch.nn.Module):", "    def __init__(self):"]
        lines.append("        super().__init__()")
        for s in self.states:
            if s.kind == "buffer":
                lines.append(
                    f"        self.register_buffer({s.name!r}, _initial("
                    f"{s.shape!r}, torch.{s.dtype}, {self.seed}))"
                )
        lines.append("")
        lines.append(f"    def forward(self, {', '.join(self.arg_names)}):")
        lines.extend("        " + line for line in self.body)
        if not self.returns:
            lines.append("        return None")
        elif len(self.returns) == 1:
            lines.append(f"        return {self.returns[0]}")
        else:
            lines.append(f"        return ({', '.join(self.returns)},)")
        return "\n".join(lines) + "\n"

    def describe(self) -> str:
        states = ", ".join(
            f"{s.name}: {s.kind} {list(s.shape)} {s.dtype}"
            + (f" {s.layout}" if s.kind == "input" else "")
            for s in self.states
        )
        return (
            f"state program seed {self.seed} ({states}; "
            f"{', '.join(self.features) or 'no writes'}):\n"
            + textwrap.indent(self.source, "    ")
        )

    def module(self) -> torch.nn.Module:
        namespace = {"torch": torch, "_initial": _initial}
        exec(compile(self.source, f"<state program {self.seed}>", "exec"), namespace)
        return namespace["Program"]()

    def written(self, state: "State") -> bool:
        """Whether the program writes ``state`` (not only reads it)."""
        ref = state.ref
        return any(
            line.startswith(f"{ref}[")
            or line.startswith(f"{ref}.")
            or line.endswith(f"({ref})")
            for line in self.body
        )

    @property
    def overlapping_write(self) -> bool:
        """Whether a written input state reaches the module expanded over more
        than one row: memory PyTorch refuses to write, or writes ambiguously
        (``index_put_`` does not check). The compiled module must refuse it."""
        return any(
            s.kind == "input"
            and s.layout == "expanded"
            and self._batch(s.shape, True, False)[0] > 1
            and self.written(s)
            for s in self.states
        )

    def _batch(self, shape: Tuple[int, ...], batched: bool, export: bool):
        if not (self.dynamic_batch and batched):
            return tuple(shape)
        return ((EXPORT_BATCH if export else CALL_BATCH),) + tuple(shape[1:])

    def make_inputs(self, step: int, export: bool = False) -> Tuple[torch.Tensor, ...]:
        """The call's arguments at ``step``, as the caller lays them out
        (``export``: the example the program is exported with)."""
        gen = torch.Generator().manual_seed(self.seed * 1000 + step)
        args = []
        for s in self.states:
            if s.kind == "input":
                shape = self._batch(s.shape, True, export)
                state = _initial(shape, DTYPES[s.dtype], self.seed)
                args.append(state if export else _laid_out(state, s.layout))
        for i in self.inputs:
            if i.role == "position":
                args.append(torch.randint(0, i.bound, (1,), generator=gen))
            elif i.role == "length":
                length = 2 if export else 2 + (self.seed + step) % (i.bound - 1)
                args.append(torch.zeros(1, length))
            else:
                shape = self._batch(i.shape, i.batched, export)
                args.append(_random(shape, DTYPES[i.dtype], gen))
        return tuple(args)

    def dynamic_shapes(self) -> Optional[Tuple[Any, ...]]:
        """``torch.export``'s ``dynamic_shapes`` for the arguments, or None."""
        batch = torch.export.Dim("batch", min=1, max=8)
        specs: List[Any] = []
        any_dynamic = False
        for s in self.states:
            if s.kind == "input":
                specs.append({0: batch} if self.dynamic_batch else None)
                any_dynamic |= self.dynamic_batch
        for i in self.inputs:
            if i.role == "length":
                specs.append({1: torch.export.Dim(f"len_{i.name}", min=2, max=i.bound)})
                any_dynamic = True
            elif i.batched and self.dynamic_batch:
                specs.append({0: batch})
            else:
                specs.append(None)
        return tuple(specs) if any_dynamic else None

    def compile_inputs(self, device: str = "cpu") -> List[Any]:
        """``arg_inputs`` for ``torch_tensorrt.dynamo.compile``: the example tensors,
        and ``torch_tensorrt.Input`` ranges for the dynamic ones."""
        import torch_tensorrt

        example = [t.to(device) for t in self.make_inputs(0, export=True)]
        specs = self.dynamic_shapes()
        if specs is None:
            return example
        inputs: List[Any] = []
        for tensor, spec in zip(example, specs):
            if not spec:
                inputs.append(tensor)
                continue
            low, high = list(tensor.shape), list(tensor.shape)
            for dim, d in spec.items():
                low[dim], high[dim] = d.min, d.max
            inputs.append(
                torch_tensorrt.Input(
                    min_shape=low,
                    opt_shape=list(tensor.shape),
                    max_shape=high,
                    dtype=tensor.dtype,
                )
            )
        return inputs

    def export(self, module: torch.nn.Module, device: str = "cpu") -> Any:
        """``module`` (this program's) exported with its example and dynamic shapes."""
        example = tuple(t.to(device) for t in self.make_inputs(0, export=True))
        return torch.export.export(
            module, example, dynamic_shapes=self.dynamic_shapes()
        )


def _random(shape, dtype, gen):
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    return torch.randint(-8, 8, shape, generator=gen).to(dtype)


def _initial(shape, dtype, seed):
    return _random(shape, dtype, torch.Generator().manual_seed(seed))


def _laid_out(t: torch.Tensor, layout: str) -> torch.Tensor:
    """``t``'s values in a tensor laid out as ``layout`` (same shape)."""
    if layout == "transposed":
        return t.transpose(0, -1).contiguous().transpose(0, -1)
    if layout == "sliced":
        big = torch.zeros(*t.shape[:-1], t.shape[-1] + 3, dtype=t.dtype)
        view = big[..., : t.shape[-1]]
        view.copy_(t)
        return view
    if layout == "expanded":
        # every row the same memory: eager refuses to write it
        return t[:1].expand(t.shape)
    return t.clone()


def _index(axis: int, rank: int, spec: str) -> str:
    return "[" + ", ".join([":"] * axis + [spec]) + "]"


def generate(seed: int) -> StateProgram:
    """The state program of ``seed``."""
    rng = random.Random(seed)
    n_states = 1 if rng.random() < 0.75 else 2
    states: List[State] = []
    for k in range(n_states):
        rank = rng.choice((2, 3, 4, 4, 4))
        shape = {
            2: (rng.choice((8, 16)), 4),
            3: (rng.choice((1, 2)), rng.choice((8, 16)), 4),
            4: (rng.choice((1, 2)), rng.choice((1, 2)), rng.choice((8, 16)), 4),
        }[rank]
        dtype = rng.choices(
            ("float32", "float16", "bfloat16", "int32", "float64"),
            weights=(5, 2, 2, 1, 1),
        )[0]
        kind = rng.choice(("input", "buffer"))
        layout = "contiguous"
        if kind == "input" and rng.random() < 0.25:
            layout = rng.choice(LAYOUTS[1:])
        states.append(State(f"s{k}", kind, shape, dtype, layout))
    # a dynamic batch: every input state of rank 3 or more, never written along it
    dynamic_batch = rng.random() < 0.15 and any(
        s.kind == "input" and len(s.shape) >= 3 for s in states
    )
    if dynamic_batch:
        states = [s for s in states if not (s.kind == "input" and len(s.shape) < 3)]

    inputs: List[Input] = []
    body: List[str] = []
    returns: List[str] = []
    live: List[int] = []
    features: List[str] = []
    counter = [0]

    def fresh(prefix: str) -> str:
        counter[0] += 1
        return f"{prefix}{counter[0]}"

    def new_input(shape, dtype, role="values", bound=0, batched=False) -> str:
        name = fresh({"values": "u", "position": "p", "length": "q"}[role])
        inputs.append(Input(name, tuple(shape), dtype, role, bound, batched))
        return name

    for _ in range(rng.randint(1, 5)):
        s = rng.choice(states)
        rank = len(s.shape)
        axis = rng.choice(range(rank)) if rank < 4 else rng.choice((1, 2, 2, 2))
        batched = dynamic_batch and s.kind == "input"
        if batched and axis == 0:
            axis = rank - 2
        size = s.shape[axis]
        is_float = s.dtype in FLOATS
        kind = rng.choices(
            (
                "slab",
                "index_copy",
                "read",
                "snapshot",
                "whole",
                "functional",
                "reset",
                "op",
                "op_in_pytorch",
                "symbolic",
                "index_put",
            ),
            weights=(6, 4, 2, 2, 1, 1, 1, 1, 1, 2, 1),
        )[0]
        if kind == "symbolic" and size < 4:
            kind = "slab"
        if kind == "slab":
            form = rng.choice(("static", "negative", "past_end", "run", "tail"))
            if form == "run" and size < 3:
                form = "static"
            if form == "static":
                start = rng.randrange(size)
                stop = start + 1
            elif form == "run":
                start = rng.randrange(size - 2)
                stop = start + rng.randint(2, min(4, size - start))
            elif form == "negative":
                start, stop = -rng.randint(1, 3), None
            elif form == "past_end":
                start = size - rng.randint(1, 2)
                stop = start + rng.randint(3, 6)
            else:  # the tail of a sliding window
                start, stop = -1, None
            length = len(range(size)[slice(start, stop)])
            spec = f"{start}:{'' if stop is None else stop}"
            shape = list(s.shape)
            shape[axis] = length
            u = new_input(shape, s.dtype, batched=batched)
            body.append(f"{s.ref}{_index(axis, rank, spec)} = {u}")
            features.append(f"slab {form}")
        elif kind == "index_copy":
            shape = list(s.shape)
            shape[axis] = 1
            u = new_input(shape, s.dtype, batched=batched)
            p = new_input((1,), "int64", "position", size)
            body.append(f"{s.ref}.index_copy_({axis}, {p}, {u})")
            features.append("index_copy_")
        elif kind == "read":
            r = fresh("r")
            body.append(f"{r} = {s.ref}.sum(dim={axis})")
            returns.append(r)
            features.append("read")
        elif kind == "snapshot":
            r = fresh("r")
            body.append(f"{r} = {s.ref}.clone()")
            returns.append(r)
            features.append("snapshot")
        elif kind == "whole":
            body.append(f"{s.ref}.mul_(2)" if is_float else f"{s.ref}.add_(3)")
            features.append("whole-state op")
        elif kind == "functional":
            shape = list(s.shape)
            shape[axis] = 1
            u = new_input(shape, s.dtype, batched=batched)
            p = new_input((1,), "int64", "position", size)
            r = fresh("r")
            body.append(f"{r} = torch.index_copy({s.ref}, {axis}, {p}, {u})")
            returns.append(r)
            features.append("functional write")
            if s.kind == "input":
                # read as well: a functional KV write that is an input's only
                # reader is written into it (upstream's contract, warned about)
                r = fresh("r")
                body.append(f"{r} = {s.ref}.sum()")
                returns.append(r)
        elif kind == "reset":
            z = new_input(s.shape, s.dtype, batched=batched)
            body.append(f"{s.ref}.copy_({z})")
            features.append("reset")
        elif kind == "op":
            body.append(f"torch.ops.state_fuzz.bump_({s.ref})")
            features.append("custom op")
        elif kind == "op_in_pytorch":
            body.append(f"torch.ops.state_fuzz.bump_in_pytorch_({s.ref})")
            features.append("custom op in PyTorch")
        elif kind == "symbolic":
            # a start known at run time, from a dynamic size (a prefix's length)
            shape = list(s.shape)
            shape[axis] = 1
            u = new_input(shape, s.dtype, batched=batched)
            q = new_input((1, 2), "float32", "length", size - 1)
            start = fresh("t")
            body.append(f"{start} = {q}.shape[1]")
            body.append(f"{s.ref}{_index(axis, rank, f'{start}:{start} + 1')} = {u}")
            features.append("slab symbolic")
        else:  # an index_put at a position given at run time
            shape = list(s.shape)
            shape[axis] = 1
            u = new_input(shape, s.dtype, batched=batched)
            p = new_input((1,), "int64", "position", size)
            body.append(f"{s.ref}{_index(axis, rank, p)} = {u}")
            features.append("index_put")
    # a state the program never touches is not one
    states = [s for s in states if any(s.ref in line for line in body)] or states[:1]
    if rng.random() < 0.2:
        s = rng.choice(states)
        live.append(len(returns))
        returns.append(s.ref)
        features.append("state returned")
    if not returns and rng.random() < 0.5:
        returns.append("None")
    elif not returns:
        extra = inputs[0].name if inputs else None
        if extra is not None and inputs[0].dtype in FLOATS:
            returns.append(f"{extra} * 2")
    if dynamic_batch:
        features.append("dynamic batch")
    return StateProgram(
        seed, states, inputs, body, returns, live, features, dynamic_batch
    )


# ----------------------------------------------------------------------------
# Running and comparing


def _as_list(out: Any) -> List[Any]:
    if isinstance(out, (tuple, list)):
        return list(out)
    return [out]


def _snapshot(values: Sequence[Any]) -> List[Any]:
    return [v.detach().clone() if isinstance(v, torch.Tensor) else v for v in values]


@dataclasses.dataclass
class Trace:
    """What a module did over the steps: each step's outputs (as returned, and
    copied at once), and the states after each step."""

    outputs: List[List[Any]]
    copies: List[List[Any]]
    states: List[Dict[str, torch.Tensor]]
    error: Optional[BaseException] = None


def run(
    program: StateProgram,
    module: torch.nn.Module,
    steps: int = 3,
    device: str = "cpu",
    buffers_of: Optional[Any] = None,
) -> Trace:
    """Run ``module`` for ``steps`` steps on the program's inputs.

    ``buffers_of(name)`` returns the module's current buffer ``name`` (eager
    modules by default). The input states are created once and passed again at
    every step, as a caller keeps its state.
    """
    # a buffer the program only reads is a constant of compile()'s module
    buffers_of = buffers_of or (lambda name: getattr(module, name, None))
    first = program.make_inputs(0)
    n_state_inputs = sum(s.kind == "input" for s in program.states)
    state_args = [_to(a, device) for a in first[:n_state_inputs]]
    trace = Trace([], [], [])
    try:
        for step in range(steps):
            others = [
                _to(a, device) for a in program.make_inputs(step)[n_state_inputs:]
            ]
            out = _as_list(module(*state_args, *others))
            trace.outputs.append(out)
            trace.copies.append(_snapshot(out))
            states = {}
            inputs = iter(state_args)
            for s in program.states:
                value = next(inputs) if s.kind == "input" else buffers_of(s.name)
                states[s.name] = None if value is None else value.detach().clone()
            trace.states.append(states)
    except Exception as e:  # noqa: BLE001 - the error is part of the trace
        trace.error = e
    return trace


def _to(t: torch.Tensor, device: str) -> torch.Tensor:
    if device == "cpu":
        return t
    if t.stride() and 0 in t.stride():
        return t[:1].to(device).expand(t.shape)
    moved = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device)
    moved.copy_(t)
    return moved


def _tolerance(dtype: torch.dtype) -> Dict[str, float]:
    if dtype in (torch.float16, torch.bfloat16):
        return {"atol": 5e-2, "rtol": 5e-2}
    if dtype.is_floating_point:
        return {"atol": 1e-4, "rtol": 1e-4}
    return {"atol": 0, "rtol": 0}


def _differs(expected: Any, actual: Any) -> Optional[str]:
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            return f"expected a tensor, got {type(actual).__name__}"
        if expected.shape != actual.shape:
            return f"shape {list(actual.shape)}, expected {list(expected.shape)}"
        if expected.dtype != actual.dtype:
            return f"dtype {actual.dtype}, expected {expected.dtype}"
        a, e = actual.detach().cpu(), expected.detach().cpu()
        if not torch.allclose(a.double(), e.double(), **_tolerance(e.dtype)):
            worst = (a.double() - e.double()).abs().max().item()
            return f"values differ (max abs difference {worst:.4g})"
        return None
    if expected is None or isinstance(expected, (int, float, bool)):
        if actual != expected:
            return f"{actual!r}, expected {expected!r}"
        return None
    return f"unexpected output type {type(expected).__name__}"


def compare(program: StateProgram, eager: Trace, compiled: Trace) -> Optional[str]:
    """Why ``compiled`` is not what ``eager`` did, or None when it is."""
    if eager.error is not None and compiled.error is not None:
        return None  # both refuse the call (e.g. a write into an expanded tensor)
    if program.overlapping_write:
        if compiled.error is not None:
            return None  # refused: it writes memory that overlaps itself
        return "a write into an expanded (self-overlapping) input was not refused"
    if eager.error is not None:
        return f"eager raised {type(eager.error).__name__}: {eager.error}; the compiled module did not"
    if compiled.error is not None:
        return f"the compiled module raised {type(compiled.error).__name__}: {compiled.error}"
    for step, (e, c) in enumerate(zip(eager.copies, compiled.copies)):
        if len(e) != len(c):
            return f"step {step}: {len(c)} outputs, expected {len(e)}"
        for i, (ev, cv) in enumerate(zip(e, c)):
            why = _differs(ev, cv)
            if why:
                return f"step {step}, output {i} ({program.returns[i]}): {why}"
        for name, ev in eager.states[step].items():
            cv = compiled.states[step][name]
            if cv is None:
                state = next(s for s in program.states if s.name == name)
                cv = _initial(state.shape, DTYPES[state.dtype], program.seed)
            why = _differs(ev, cv)
            if why:
                return f"step {step}, state {name} after the call: {why}"
    # outputs held across steps keep their values (live returns excepted)
    for step, (held, copies) in enumerate(zip(compiled.outputs, compiled.copies)):
        for i, (h, c) in enumerate(zip(held, copies)):
            if i in program.live_returns or not isinstance(h, torch.Tensor):
                continue
            if not torch.equal(h.detach().cpu(), c.detach().cpu()):
                return (
                    f"output {i} ({program.returns[i]}) of step {step} changed after "
                    "later steps: it shares memory with a state"
                )
    return None
