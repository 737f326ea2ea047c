"""Inputs that compiled modules and engines write into, for the CUDA graph modes.

Both CUDA graph modes replay work recorded for fixed addresses:

* per-engine (``torch_tensorrt.runtime.set_cudagraphs_mode(True)``): an engine
  with aliased I/O binds an aliased input to the caller's tensor itself, not to
  a staging buffer, so the captured graph writes to the address that tensor had
  at capture. :class:`AliasedInputAddresses` tells when it moved.
* whole-graph (``torch_tensorrt.runtime.enable_cudagraphs(module)``): every
  input is copied into a static buffer the graph reads and writes, so a
  mutation of an input reaches that buffer, not the caller's tensor.
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
    Iterator,
    List,
    Optional,
    Sequence,
    Set,
    Tuple,
)

import torch
from torch_tensorrt.dynamo.conversion._functionalized_op import is_write_back

logger = logging.getLogger(__name__)


class AliasedInputAddresses:
    """The addresses of an engine's aliased inputs when a CUDA graph captured them."""

    def __init__(self, positions: Sequence[int]) -> None:
        self.positions = tuple(positions)
        self._bound: Optional[Tuple[int, ...]] = None
        self._shapes: Optional[Tuple[Tuple[int, ...], ...]] = None

    @classmethod
    def of_engine(
        cls, input_binding_names: Sequence[str], aliased_inputs: Collection[str]
    ) -> Optional[AliasedInputAddresses]:
        """Tracker for the inputs named in ``aliased_inputs``; ``None`` if there are none."""
        positions = [
            i for i, name in enumerate(input_binding_names) if name in aliased_inputs
        ]
        return cls(positions) if positions else None

    def __getstate__(self) -> Dict[str, Any]:
        # addresses belong to this process and to a graph a reloaded engine lacks
        return {"positions": self.positions, "_bound": None, "_shapes": None}

    def _addresses(self, inputs: Sequence[torch.Tensor]) -> Tuple[int, ...]:
        return tuple(inputs[i].data_ptr() for i in self.positions)

    def moved(self, inputs: Sequence[torch.Tensor]) -> bool:
        """Whether an aliased input moved since the last call; remembers this call's.

        For a runtime that captures the graph again when this is true (the Python
        runtime).
        """
        bound = self._addresses(inputs)
        moved = self._bound is not None and bound != self._bound
        self._bound = bound
        return moved

    def check(
        self,
        engine_name: str,
        input_binding_names: Sequence[str],
        inputs: Sequence[torch.Tensor],
        cudagraphs: Optional[bool] = None,
    ) -> None:
        """Raise if the captured graph would write aliased inputs to stale memory.

        For a runtime that keeps its graph while the input shapes stay the same
        (the C++ runtime), called before each execution with the inputs given;
        ``cudagraphs`` defaults to whether per-engine CUDA graphs are on.
        """
        if cudagraphs is None:
            from torch_tensorrt.runtime import get_cudagraphs_mode

            cudagraphs = get_cudagraphs_mode()
        if not cudagraphs:
            self._bound = None  # the next call in CUDA graph mode captures again
            return
        names = [input_binding_names[i] for i in self.positions]
        for i, name in zip(self.positions, names):
            if not inputs[i].is_contiguous():
                raise RuntimeError(
                    f"TensorRT engine '{engine_name}' updates input '{name}' in place "
                    "and runs as a CUDA graph, but the tensor passed is not "
                    "contiguous, so the graph would update a temporary copy of it. "
                    "Pass a contiguous tensor."
                )
        shapes = tuple(tuple(t.shape) for t in inputs)
        bound = self._addresses(inputs)
        if self._bound is None or shapes != self._shapes:
            self._bound, self._shapes = bound, shapes  # the runtime captures now
        elif bound != self._bound:
            moved = [n for n, a, b in zip(names, bound, self._bound) if a != b]
            raise RuntimeError(
                f"TensorRT engine '{engine_name}' updates input(s) {moved} in place "
                "and runs as a CUDA graph captured with their addresses, but this "
                "call passes different tensors: the graph would write to the old "
                "ones. Pass the same tensors on every call, or turn CUDA graphs off "
                "(torch_tensorrt.runtime.set_cudagraphs_mode(False)); the Python "
                "runtime captures the graph again instead."
            )


def _written_nodes(gm: torch.fx.GraphModule) -> Set[torch.fx.Node]:
    """Inputs and buffers (``get_attr``) of ``gm`` that a write-back updates."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    written = set()
    for node in gm.graph.nodes:
        if is_write_back(node) and isinstance(node.args[0], torch.fx.Node):
            written.add(node.args[0])
        elif node.op == "call_module":
            # the fast partitioner moves write-backs into PyTorch submodules
            submodule = getattr(gm, str(node.target))
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
    """Flat positions of the inputs a compiled module writes new values into.

    Those are the graph inputs that a write-back (``aten.copy_``) updates, in the
    module's graph or in one of its PyTorch submodules. A module that is not an
    FX graph has none that can be found.
    """
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
