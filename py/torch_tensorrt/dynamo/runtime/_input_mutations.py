"""Inputs that compiled modules and engines write into, for the CUDA graph modes.

Both CUDA graph modes replay work recorded for fixed addresses:

* per-engine (``set_cudagraphs_mode(True)``): an aliased input is bound to the
  caller's tensor itself, so the graph writes to the address it had at capture;
  :class:`AliasedInputAddresses` tells when it moved.
* whole-graph (``enable_cudagraphs(module)``): inputs are copied into static
  buffers, so a mutation reaches the buffer, not the caller's tensor;
  :func:`mutated_inputs` says which inputs to copy back after each replay.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from typing import (
    Any,
    Collection,
    Dict,
    Hashable,
    Iterator,
    List,
    Optional,
    Sequence,
    Set,
    Tuple,
)

import torch
from torch_tensorrt._features import ENABLED_FEATURES
from torch_tensorrt.dynamo.runtime._in_place_outputs import engine_in_place_inputs
from torch_tensorrt.dynamo.utils import is_write_back

logger = logging.getLogger(__name__)


class AliasedInputAddresses:
    """The addresses of an engine's aliased inputs when a CUDA graph captured them.

    :meth:`moved` serves the Python runtime, which captures again when one moved;
    :meth:`check` follows the C++ runtime's own rule for recording a graph.
    """

    def __init__(self, positions: Sequence[int]) -> None:
        self.positions = tuple(positions)
        self._reset()

    def _reset(self) -> None:
        # The C++ runtime's state, as far as it decides about recording
        # (``core/runtime/execute_engine.cpp``, ``TorchTRTRuntimeStates``)
        self._bound: Optional[Tuple[int, ...]] = None  # written by the kept graph
        self._shapes: Optional[Tuple[Tuple[int, ...], ...]] = None  # shape_key
        self._stream: Optional[Hashable] = None  # engine stream of the last call
        self._cudagraphs = False  # old_cudagraphs: the last call used its graph
        self._context_changed = False

    @classmethod
    def of_engine(
        cls, input_binding_names: Sequence[str], aliased_inputs: Collection[str]
    ) -> Optional[AliasedInputAddresses]:
        """Tracker for the inputs named in ``aliased_inputs``; ``None`` if none."""
        positions = [
            i for i, name in enumerate(input_binding_names) if name in aliased_inputs
        ]
        return cls(positions) if positions else None

    def __getstate__(self) -> Dict[str, Any]:
        # addresses, streams and the graph do not survive a reload
        return {"positions": self.positions}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.positions = tuple(state["positions"])
        self._reset()

    def _addresses(self, inputs: Sequence[torch.Tensor]) -> Tuple[int, ...]:
        return tuple(inputs[i].data_ptr() for i in self.positions)

    def moved(self, inputs: Sequence[torch.Tensor]) -> bool:
        """Whether an aliased input moved since the last call; remembers this one's."""
        bound = self._addresses(inputs)
        moved = self._bound is not None and bound != self._bound
        self._bound = bound
        return moved

    def context_changed(self) -> None:
        """The context changed (:func:`engine_context_changes`): next call records."""
        self._context_changed = True

    def check(
        self,
        engine_name: str,
        input_binding_names: Sequence[str],
        inputs: Sequence[torch.Tensor],
        cudagraphs: Optional[bool] = None,
        *,
        stream: Optional[Hashable] = None,
        internal_capture: Optional[bool] = None,
    ) -> None:
        """Raise if the C++ runtime would replay its graph into stale memory.

        It records again if CUDA graphs were off in the previous call or an input
        shape, the stream or the execution context changed; otherwise it replays,
        and a moved aliased input raises. ``None`` defaults: the per-engine CUDA
        graphs mode, :func:`engine_stream`, and TensorRT-RTX (which captures
        itself, binding the current addresses).
        """
        if cudagraphs is None:
            from torch_tensorrt.runtime import get_cudagraphs_mode

            cudagraphs = get_cudagraphs_mode()
        names = [input_binding_names[i] for i in self.positions]
        if cudagraphs:
            for i, name in zip(self.positions, names):
                if not inputs[i].is_contiguous():
                    raise RuntimeError(
                        f"TensorRT engine '{engine_name}' updates input '{name}' in "
                        "place and runs as a CUDA graph, but the tensor passed is "
                        "not contiguous, so the graph would update a temporary copy "
                        "of it. Pass a contiguous tensor."
                    )
        if internal_capture is None:
            internal_capture = bool(ENABLED_FEATURES.tensorrt_rtx)
        graphed = cudagraphs and not internal_capture
        shapes = tuple(tuple(t.shape) for t in inputs)
        bound = self._addresses(inputs)
        if graphed and stream is None:
            stream = engine_stream(inputs)
        # TorchTRTRuntimeStates::set_runtime_states: old_cudagraphs, shape_changed
        # and context_changed (set by a change of the engine's stream)
        records = graphed and (
            not self._cudagraphs
            or shapes != self._shapes
            or stream != self._stream
            or self._context_changed
        )
        if graphed and not records and bound != self._bound:
            assert self._bound is not None
            moved = [n for n, a, b in zip(names, bound, self._bound) if a != b]
            raise RuntimeError(
                f"TensorRT engine '{engine_name}' updates input(s) {moved} in place "
                "and runs as a CUDA graph captured with their addresses, but this "
                "call passes different tensors of the same shapes: the graph would "
                "write to the old ones. Pass the same tensors on every call, or turn "
                "CUDA graphs off (torch_tensorrt.runtime.set_cudagraphs_mode(False)); "
                "the Python runtime captures the graph again instead."
            )
        # the call runs: the runtime's state advances as in execute_engine
        self._shapes, self._cudagraphs, self._context_changed = shapes, graphed, False
        if graphed:
            self._stream = stream
        if records:
            self._bound = bound


def engine_context_changes(
    tracker: Optional[AliasedInputAddresses],
    engine: Any,
    profile_index: Optional[int] = None,
) -> None:
    """Tell ``tracker`` that the C++ runtime records its graph again on the next call.

    Call before changing the weight-streaming budget (``profile_index`` None) or
    switching to an optimization profile other than the active one.
    """
    if tracker is None:
        return
    active = getattr(engine, "_active_profile_index", profile_index)
    if profile_index is None or active != profile_index:
        tracker.context_changed()


def engine_stream(inputs: Sequence[torch.Tensor]) -> Hashable:
    """The stream the C++ runtime runs an engine on, as a comparable key: the
    caller's, or ``"pool"`` (the engine's own) for the device's default stream."""
    device = (
        inputs[0].device
        if inputs and inputs[0].is_cuda
        else torch.device("cuda", torch.cuda.current_device())
    )
    caller = torch.cuda.current_stream(device)
    if caller.cuda_stream == torch.cuda.default_stream(device).cuda_stream:
        return "pool"
    return (caller.device_index, caller.cuda_stream)


def _written_nodes(gm: torch.fx.GraphModule) -> Set[torch.fx.Node]:
    """Inputs and buffers (``get_attr``) of ``gm`` that a write-back or an engine
    (in place) updates."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    written = set()
    for node in gm.graph.nodes:
        if is_write_back(node) and isinstance(node.args[0], torch.fx.Node):
            written.add(node.args[0])
        elif node.op == "call_module":
            submodule = getattr(gm, str(node.target))
            # an engine writes these in place; their write-backs were dropped
            written.update(
                arg
                for _, i in engine_in_place_inputs(submodule)
                if isinstance(arg := node.args[i], torch.fx.Node)
            )
            # the fast partitioner moves write-backs into PyTorch submodules
            if not isinstance(submodule, torch.fx.GraphModule):
                continue
            inner = [n for n in submodule.graph.nodes if n.op == "placeholder"]
            arg_of = dict(zip(inner, node.args))
            written.update(
                arg_of[target]
                for target in _written_nodes(submodule)
                if isinstance(arg_of.get(target), torch.fx.Node)
            )
    return {n for n in written if n in placeholders or n.op == "get_attr"}


def mutated_inputs(module: torch.nn.Module) -> List[int]:
    """Flat positions of the inputs a compiled module writes: by a write-back
    (``aten.copy_``, in its graph or a PyTorch submodule) or an engine in place;
    empty for a module that is not an FX graph."""
    if not isinstance(module, torch.fx.GraphModule):
        return []
    placeholders = [n for n in module.graph.nodes if n.op == "placeholder"]
    written = _written_nodes(module)
    return [i for i, p in enumerate(placeholders) if p in written]


def mutated_buffers(module: torch.nn.Module) -> List[str]:
    """Names of the buffers a compiled module writes new values into."""
    if not isinstance(module, torch.fx.GraphModule):
        return []
    names = {str(n.target) for n in _written_nodes(module) if n.op == "get_attr"}
    # mutated buffers lifted into engine inputs are copied back by the codegen
    names.update(getattr(module.graph._codegen, "write_back_buffers", ()))
    return sorted(names)


@contextlib.contextmanager
def state_kept(module: torch.nn.Module) -> Iterator[None]:
    """Run ``module`` without advancing the buffers it mutates (e.g. a warm-up)."""
    kept = {}
    for name in mutated_buffers(module):
        buffer = functools.reduce(getattr, name.split("."), module)
        if isinstance(buffer, torch.Tensor):
            kept[name] = (buffer, buffer.clone())
    try:
        yield
    finally:
        for buffer, value in kept.values():
            buffer.copy_(value)
        if kept:
            logger.debug(f"Restored mutated buffers {sorted(kept)}")
