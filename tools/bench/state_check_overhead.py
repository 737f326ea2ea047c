"""What the check of in-place arguments costs per call, by the number of written states.

    python tools/bench/state_check_overhead.py --out state_check_overhead.json \\
        [--states 0 1 16 64 256] [--calls 200] [--unpatched-python PATH]
        [--as-buffers]

Two parts, both written to the JSON file ``--out`` names:

- **check** (on the CPU, always run): the aliased-argument check alone, i.e.
  what ``compile()``'s forward pre-hook does on every call (binding the call's
  arguments to the graph's inputs, then refusing overlaps), and the engines'
  own check (``check_engine_inputs_distinct``), for N written states of 1 MiB
  each (float32 ``[1, 8, 256, 128]``) next to a position and an update; median
  microseconds per call over ``--calls`` calls. The pre-hook is also timed with
  the N states as buffers of the module, two per submodule (a KV cache's form).
- **module** (needs a CUDA device; skipped with its reason otherwise):
  ``torch_tensorrt.dynamo.compile`` of the exported model below with
  ``min_block_size=1``, median wall microseconds per call with the device
  synchronized after each call, for N written states; next to the same call
  with the check taken off (the pre-hook and forward hook removed, the engines'
  check a no-op) in this process, eager PyTorch, and, with
  ``--unpatched-python`` (an interpreter with the released wheel installed),
  the unpatched wheel's module, timed by this script in that interpreter.
  Each module is first called once on copies of the arguments and its states
  compared with eager PyTorch's (``matches_eager``); a size that fails is
  recorded under ``errors`` and the others still run. The module with and
  without the check are timed in alternating blocks. ``module_host_us`` and
  ``eager_host_us``: the host's time in the call alone, the device idle when
  it starts (what the call costs the host, not the device's work). ``--profile PATH`` writes
  where the host's time goes at ``--profile-states`` N (cProfile). Beside it, the same
  engine object driven by hand (``engine_by_hand_us``: every I/O address set, then
  ``execute_async_v3`` and a synchronize; ``engine_execute_us``: the run alone) and the
  module under ``torch_tensorrt.runtime.enable_cudagraphs`` (``module_cudagraphs_us``,
  after ``cudagraphs_match_eager`` compares the states over three replays).

The model writes each state at a position given at run time, as a KV cache
step does (the states are inputs; with N = 0 it computes ``u * 2 + 1`` only;
with ``--as-buffers`` the states are the model's buffers, ``WritesBuffers``)::

    def forward(self, pos, u, *states):
        for state in states:
            state.index_copy_(2, pos, u)
        return u * 2 + 1
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

STATE_SHAPE = (1, 8, 256, 128)  # float32: 1 MiB
UPDATE_SHAPE = (1, 8, 1, 128)
DEFAULT_STATES = (0, 1, 16, 64, 256)


class WritesStates(torch.nn.Module):
    def forward(self, pos: torch.Tensor, u: torch.Tensor, *states: torch.Tensor):
        for state in states:
            state.index_copy_(2, pos, u)
        return u * 2 + 1


class WritesBuffers(torch.nn.Module):
    """The same writes on N buffers, two per layer (a KV cache's usual form)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        for i in range(n):
            layer = self._modules.get(f"layer_{i // 2}")
            if layer is None:
                layer = torch.nn.Module()
                self.add_module(f"layer_{i // 2}", layer)
            layer.register_buffer("kv"[i % 2], torch.zeros(STATE_SHAPE))

    def forward(self, pos: torch.Tensor, u: torch.Tensor):
        for state in self.buffers():
            state.index_copy_(2, pos, u)
        return u * 2 + 1


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, metavar="PATH", help="JSON results")
    parser.add_argument(
        "--states", type=int, nargs="+", default=list(DEFAULT_STATES), metavar="N"
    )
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument(
        "--unpatched-python",
        metavar="PATH",
        help="a Python with the released (unpatched) wheel, for the module part",
    )
    parser.add_argument(
        "--module-only",
        action="store_true",
        help="time only compile()'s module (what --unpatched-python runs)",
    )
    parser.add_argument(
        "--profile",
        metavar="PATH",
        help="write a cProfile of compile()'s module (host time) to PATH",
    )
    parser.add_argument(
        "--profile-states", type=int, default=64, metavar="N", help="profiled at N"
    )
    parser.add_argument(
        "--as-buffers",
        action="store_true",
        help="the module part's states are the model's buffers (WritesBuffers)",
    )
    return parser.parse_args(argv)


def sample_us(call: Callable[[], Any], calls: int, sync: bool = False) -> List[float]:
    """Wall times of ``calls`` calls in microseconds, after 10 warm-up calls."""
    for _ in range(10):
        call()
    if sync:
        torch.cuda.synchronize()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        if sync:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e6)
    return times


def host_us(call: Callable[[], Any], calls: int) -> float:
    """Median time the host spends in ``call``, the device idle when it starts.

    The device is synchronized before each call and after it, outside the timed
    span: what the call costs the host (checks, bindings, the engine's enqueue),
    not the device's work.
    """
    for _ in range(10):
        call()
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def median_us(call: Callable[[], Any], calls: int, sync: bool = False) -> float:
    """Median wall time of ``call`` in microseconds, after 10 warm-up calls."""
    return statistics.median(sample_us(call, calls, sync))


_BLOCKS = 4


def _profile(call: Callable[[], Any], calls: int, path: str, n: int) -> None:
    """Where the host's time goes in ``calls`` calls: cProfile, by own time."""
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(30)
    with open(path, "w") as f:
        f.write(f"compile()'s module, {n} written states, {calls} calls\n")
        f.write(text.getvalue())


def _arguments(n: int, device: str) -> List[torch.Tensor]:
    pos = torch.tensor([3], device=device)
    u = torch.randn(UPDATE_SHAPE, device=device)
    return [pos, u] + [torch.zeros(STATE_SHAPE, device=device) for _ in range(n)]


def _graph_module(n: int) -> torch.fx.GraphModule:
    """A graph with compile()'s calling convention: one placeholder per argument."""
    graph = torch.fx.Graph()
    pos, u = graph.placeholder("pos"), graph.placeholder("u")
    for i in range(n):
        graph.placeholder(f"state_{i}")
    graph.output(u)
    del pos
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def _buffer_names(n: int) -> List[str]:
    """The paths of ``WritesBuffers(n)``'s buffers, two per layer."""
    return [f"layer_{i // 2}.{'kv'[i % 2]}" for i in range(n)]


def _buffer_module(n: int) -> torch.fx.GraphModule:
    """A graph module whose N states are ``WritesBuffers(n)``'s buffers."""
    graph = torch.fx.Graph()
    graph.placeholder("pos")
    u = graph.placeholder("u")
    for name in _buffer_names(n):
        graph.get_attr(name)
    graph.output(u)
    return torch.fx.GraphModule(WritesBuffers(n), graph)


def check_part(states: Sequence[int], calls: int) -> Dict[str, Any]:
    """Median microseconds per call of the check alone, on the CPU."""
    from torch_tensorrt.dynamo.runtime._aliased_arguments import (
        InPlaceArgumentsCheck,
        check_engine_inputs_distinct,
    )

    pre_hook, engine, buffers = {}, {}, {}
    for n in states:
        args = _arguments(n, "cpu")
        names = ["pos", "u"] + [f"state_{i}" for i in range(n)]
        written = list(range(2, 2 + n))
        module = _graph_module(n)
        check = InPlaceArgumentsCheck(names, written, [])
        hook = lambda: (
            check(module, tuple(args), {}),
            check.done(module),
        )  # noqa: E731
        pre_hook[str(n)] = round(median_us(hook, calls), 2)
        engine_check = lambda: check_engine_inputs_distinct(  # noqa: E731
            "e", args, names, written
        )
        engine[str(n)] = round(median_us(engine_check, calls), 2)
        # the same states as buffers of the module (a KV cache's usual form)
        with_buffers = _buffer_module(n)
        buffer_check = InPlaceArgumentsCheck(
            ["pos", "u"],
            [],
            _buffer_names(n),
        )
        buffer_hook = lambda: (  # noqa: E731
            buffer_check(with_buffers, tuple(args[:2]), {}),
            buffer_check.done(with_buffers),
        )
        buffers[str(n)] = round(median_us(buffer_hook, calls), 2)
        print(
            f"check, {n:4d} written states: pre-hook {pre_hook[str(n)]:9.2f} us, "
            f"engine {engine[str(n)]:9.2f} us, pre-hook with the states as "
            f"buffers {buffers[str(n)]:9.2f} us per call"
        )
    return {
        "what": "median us per call, CPU tensors, 1 MiB float32 states",
        "pre_hook_us": pre_hook,
        "engine_check_us": engine,
        "pre_hook_buffers_us": buffers,
    }


def _without_check(module: torch.nn.Module) -> Callable[[], None]:
    """Take the check off ``module`` (patched wheel); returns how to put it back."""
    import importlib

    hooks = (dict(module._forward_pre_hooks), dict(module._forward_hooks))
    module._forward_pre_hooks.clear()
    module._forward_hooks.clear()
    replaced = []
    # the engines call it by the name each runtime module imported
    for name in ("_aliased_arguments", "_TRTEngine", "_TorchTensorRTModule"):
        try:
            owner = importlib.import_module(f"torch_tensorrt.dynamo.runtime.{name}")
        except ImportError:
            continue
        if hasattr(owner, "check_engine_inputs_distinct"):
            replaced.append((owner, owner.check_engine_inputs_distinct))
            owner.check_engine_inputs_distinct = lambda *a, **k: None

    def restore() -> None:
        module._forward_pre_hooks.update(hooks[0])
        module._forward_hooks.update(hooks[1])
        for owner, function in replaced:
            owner.check_engine_inputs_distinct = function

    return restore


def _time_module(
    n: int,
    calls: int,
    with_check_off: bool,
    result: Dict[str, Any],
    profile_path: Optional[str] = None,
    profile_states: int = -1,
    as_buffers: bool = False,
) -> None:
    """Times eager and compile()'s module (and without the check) at ``n`` states."""
    import torch_tensorrt

    if as_buffers:
        _time_module_of_buffers(n, calls, with_check_off, result, profile_path)
        return
    args = _arguments(n, "cuda")
    eager, eager_args = WritesStates(), [a.clone() for a in args]
    result["eager_us"][str(n)] = round(
        median_us(lambda: eager(*eager_args), calls, sync=True), 2
    )
    ep = torch.export.export(WritesStates().eval(), tuple(a.clone() for a in args))
    trt = torch_tensorrt.dynamo.compile(
        ep, arg_inputs=[a.clone() for a in args], min_block_size=1
    )
    # one call against eager first: the states written as PyTorch writes them
    compiled_args, eager_args_once = [a.clone() for a in args], [
        a.clone() for a in args
    ]
    trt(*compiled_args)
    WritesStates()(*eager_args_once)
    result.setdefault("matches_eager", {})[str(n)] = all(
        torch.equal(c, e) for c, e in zip(compiled_args, eager_args_once)
    )
    _time_calls(n, calls, with_check_off, result, trt, args, eager, eager_args)
    _time_by_hand_and_under_graphs(n, calls, result, trt, args)
    if profile_path and n == profile_states:
        _profile(lambda: trt(*args), calls, profile_path, n)


def _states_of(module: torch.nn.Module) -> List[torch.Tensor]:
    return [b for _, b in sorted(module.named_buffers()) if b.shape == STATE_SHAPE]


def _time_module_of_buffers(
    n: int,
    calls: int,
    with_check_off: bool,
    result: Dict[str, Any],
    profile_path: Optional[str],
) -> None:
    """``_time_module`` of ``WritesBuffers``: the states are the model's buffers."""
    import torch_tensorrt

    args = _arguments(0, "cuda")
    eager = WritesBuffers(n).cuda().eval()
    result["eager_us"][str(n)] = round(
        median_us(lambda: eager(*args), calls, sync=True), 2
    )
    ep = torch.export.export(WritesBuffers(n).cuda().eval(), tuple(args))
    trt = torch_tensorrt.dynamo.compile(ep, arg_inputs=list(args), min_block_size=1)
    # one call from zeros against eager first: the buffers written as PyTorch
    # writes them
    reference = WritesBuffers(n).cuda().eval()
    for state in _states_of(trt):
        state.zero_()
    trt(*args)
    reference(*args)
    compiled_states, eager_states = _states_of(trt), _states_of(reference)
    result.setdefault("matches_eager", {})[str(n)] = len(compiled_states) == n and all(
        torch.equal(c, e) for c, e in zip(compiled_states, eager_states)
    )
    _time_calls(n, calls, with_check_off, result, trt, args, eager, args)
    if profile_path and n == 64:
        _profile(lambda: trt(*args), calls, profile_path, n)


def engine_by_hand(
    trt: torch.nn.Module,
    args: Sequence[torch.Tensor],
    device: str = "cuda",
    stream: Any = None,
) -> Dict[str, Callable[[], Any]]:
    """The compiled module's one engine driven as a C++ caller drives it: ``bound``
    sets the address of every I/O tensor (an aliased output at its input's memory,
    the others in tensors made once), runs ``execute_async_v3`` and synchronizes;
    ``execute`` runs and synchronizes with the addresses as last set. The engine's
    inputs are the model's arguments, in order (one engine, ``min_block_size=1``)."""
    engines = [
        m.engine
        for m in trt.modules()
        if hasattr(getattr(m, "engine", None), "context")
    ]
    if len(engines) != 1:
        raise RuntimeError(f"{len(engines)} engines with a Python context; need one")
    engine = engines[0]
    context = engine.context
    if len(engine.in_binding_names) != len(args):
        raise RuntimeError(
            f"the engine takes {len(engine.in_binding_names)} inputs, the model "
            f"{len(args)}: not the same inputs"
        )
    tensors = dict(zip(engine.in_binding_names, args))
    aliased = dict(engine.aliased_io or {})
    for name, dtype in zip(engine.out_binding_names, engine.output_dtypes):
        if name in aliased:
            tensors[name] = tensors[aliased[name][0]]
        else:
            shape = tuple(context.get_tensor_shape(name))
            tensors[name] = torch.empty(shape, dtype=dtype, device=device)
    stream = stream if stream is not None else torch.cuda.current_stream()

    def execute() -> None:
        context.execute_async_v3(stream.cuda_stream)
        stream.synchronize()

    def bound() -> None:
        for name, tensor in tensors.items():
            context.set_tensor_address(name, tensor.data_ptr())
        execute()

    return {"bound": bound, "execute": execute}


def _time_by_hand_and_under_graphs(
    n: int,
    calls: int,
    result: Dict[str, Any],
    trt: torch.nn.Module,
    args: Sequence[torch.Tensor],
) -> None:
    """``engine_by_hand_us``, ``engine_execute_us`` and ``module_cudagraphs_us`` at
    ``n`` states; a part that fails is recorded under ``errors``, the rest runs."""
    import torch_tensorrt

    errors = result.setdefault("errors", {})
    try:
        by_hand = engine_by_hand(trt, args)
        result.setdefault("engine_by_hand_us", {})[str(n)] = round(
            median_us(by_hand["bound"], calls), 2
        )
        result.setdefault("engine_execute_us", {})[str(n)] = round(
            median_us(by_hand["execute"], calls), 2
        )
    except Exception as e:  # recorded: the bench goes on
        errors[f"by_hand_{n}"] = f"{type(e).__name__}: {e}"[:300]
    try:
        eager_args = [a.clone() for a in args]
        graph_args = [a.clone() for a in args]
        with torch_tensorrt.runtime.enable_cudagraphs(trt) as graphed:
            for _ in range(3):  # the states advance alike over replays
                graphed(*graph_args)
                WritesStates()(*eager_args)
            torch.cuda.synchronize()
            result.setdefault("cudagraphs_match_eager", {})[str(n)] = all(
                torch.equal(g, e) for g, e in zip(graph_args, eager_args)
            )
            result.setdefault("module_cudagraphs_us", {})[str(n)] = round(
                median_us(lambda: graphed(*args), calls, sync=True), 2
            )
    except Exception as e:
        errors[f"cudagraphs_{n}"] = f"{type(e).__name__}: {e}"[:300]


def _time_calls(
    n: int,
    calls: int,
    with_check_off: bool,
    result: Dict[str, Any],
    trt: torch.nn.Module,
    args: Sequence[torch.Tensor],
    eager: torch.nn.Module,
    eager_args: Sequence[torch.Tensor],
) -> None:
    # the module with and without the check timed in alternating blocks, so
    # that a drift of the machine's speed reaches both alike
    samples: Dict[str, List[float]] = {"on": [], "off": []}
    for _ in range(_BLOCKS):
        samples["on"] += sample_us(lambda: trt(*args), calls // _BLOCKS, sync=True)
        if with_check_off:
            restore = _without_check(trt)
            try:
                samples["off"] += sample_us(
                    lambda: trt(*args), calls // _BLOCKS, sync=True
                )
            finally:
                restore()
    result["module_us"][str(n)] = round(statistics.median(samples["on"]), 2)
    if with_check_off:
        result["module_check_off_us"][str(n)] = round(
            statistics.median(samples["off"]), 2
        )
    result.setdefault("module_host_us", {})[str(n)] = round(
        host_us(lambda: trt(*args), calls), 2
    )
    result.setdefault("eager_host_us", {})[str(n)] = round(
        host_us(lambda: eager(*eager_args), calls), 2
    )
    print(
        f"module, {n:4d} written states: eager {result['eager_us'][str(n)]:9.2f} "
        f"us, module {result['module_us'][str(n)]:9.2f} us per call"
    )


def module_part(
    states: Sequence[int],
    calls: int,
    with_check_off: bool,
    profile_path: Optional[str] = None,
    profile_states: int = 64,
    as_buffers: bool = False,
) -> Dict[str, Any]:
    """Median microseconds per synchronized call of compile()'s module and eager."""
    import torch_tensorrt

    result: Dict[str, Any] = {
        "torch_tensorrt": torch_tensorrt.__version__,
        "eager_us": {},
        "module_us": {},
    }
    if with_check_off:
        result["module_check_off_us"] = {}
    for n in states:
        try:
            _time_module(
                n,
                calls,
                with_check_off,
                result,
                profile_path,
                profile_states,
                as_buffers,
            )
        except Exception as e:  # recorded: the other sizes still run
            result.setdefault("errors", {})[str(n)] = f"{type(e).__name__}: {e}"
            print(f"module, {n:4d} written states: {type(e).__name__}: {e}")
    return result


def unpatched_part(python: str, states: Sequence[int], calls: int) -> Dict[str, Any]:
    """The module part, run by this script in an interpreter with the released wheel."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "unpatched.json")
        subprocess.run(
            [python, os.path.abspath(__file__), "--module-only", "--out", out]
            + ["--calls", str(calls), "--states", *map(str, states)],
            check=True,
        )
        with open(out) as f:
            return dict(json.load(f)["module"])


def added_us(module: Dict[str, Any], unpatched: Optional[Dict[str, Any]]) -> Any:
    """Per N: what the patched module adds over the unpatched one and over its
    own call without the check."""
    added: Dict[str, Dict[str, float]] = {}
    for n, us in module.get("module_us", {}).items():
        row = {}
        if unpatched and n in unpatched.get("module_us", {}):
            row["over_unpatched"] = round(us - unpatched["module_us"][n], 2)
        if n in module.get("module_check_off_us", {}):
            row["over_check_off"] = round(us - module["module_check_off_us"][n], 2)
        added[n] = row
    return added


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    result: Dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "calls": args.calls,
        "states": list(args.states),
        "state_bytes": 4 * STATE_SHAPE[0] * STATE_SHAPE[1] * STATE_SHAPE[2] * 128,
        "states_are": "buffers" if args.as_buffers else "inputs",
    }
    if not args.module_only:
        result["check"] = check_part(args.states, args.calls)
    if not torch.cuda.is_available():
        reason = "no CUDA device: compile()'s module was not timed"
        print(reason)
        result["module"] = {"skipped": reason}
    else:
        result["device"] = torch.cuda.get_device_name()
        result["module"] = module_part(
            args.states,
            args.calls,
            not args.module_only,
            args.profile,
            args.profile_states,
            args.as_buffers,
        )
        if args.unpatched_python:
            result["unpatched_module"] = unpatched_part(
                args.unpatched_python, args.states, args.calls
            )
        result["added_us"] = added_us(result["module"], result.get("unpatched_module"))
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
