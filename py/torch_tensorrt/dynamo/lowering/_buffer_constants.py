"""Lifted constants that are a buffer's own tensor, folded into that buffer.

A module can reach one tensor both as a registered buffer and through another
Python object. HuggingFace's ``TorchExportableModuleWithStaticCache`` registers
each static cache layer's keys and values as (non-persistent) buffers
``key_cache_0``, ``value_cache_0``, ... while the attention writes them through
the cache object, which ``torch.export`` does not know as module state: it
lifts what the attention reaches as constants (``lifted_tensor_2``), one
more graph input for the same memory as ``key_cache_0``. The writes
(``index_copy_``, ``copy_``) go to the constant, so ``run_decompositions``
sees two aliasing inputs, one of them mutated, and fails ("expected
compiled_fn to be GraphModule, got <class 'function'>").

:func:`fold_constants_aliasing_buffers` gives every use of such a constant to
the buffer's input and drops the constant: the writes are then mutations of
the buffer, which ``torch.export`` records as buffer mutations, and the buffer
can be an engine input written in place. Only a constant that is exactly the
buffer's tensor (one storage, offset, sizes, strides and dtype) is folded; one
that is a part or another view of a buffer is left as it is.
"""

from __future__ import annotations

import logging
from typing import Dict, List, Optional, Tuple

import torch
from torch.export.graph_signature import InputKind

logger = logging.getLogger(__name__)


def _identity(t: torch.Tensor) -> Optional[Tuple[object, ...]]:
    """What makes two tensors the same memory seen the same way."""
    if not isinstance(t, torch.Tensor) or t.device.type == "meta":
        return None
    try:
        address = t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # no storage to compare
        return None
    if not address:
        return None
    return (
        t.device,
        address,
        t.storage_offset(),
        tuple(t.shape),
        tuple(t.stride()),
        t.dtype,
    )


def _buffer_tensor(ep: torch.export.ExportedProgram, name: str) -> object:
    # a non-persistent buffer's tensor is kept with the constants
    if name in ep.state_dict:
        return ep.state_dict[name]
    return ep.constants.get(name)


def fold_constants_aliasing_buffers(
    ep: torch.export.ExportedProgram,
) -> List[Tuple[str, str]]:
    """Replace each lifted constant that is a buffer's tensor by that buffer.

    Edits ``ep`` in place (its graph, signature and constants); returns the
    ``(constant, buffer)`` pairs folded.
    """
    signature = ep.graph_signature
    buffers: Dict[Tuple[object, ...], str] = {}  # tensor identity -> placeholder
    buffer_names: Dict[str, str] = {}  # placeholder -> buffer
    for spec in signature.input_specs:
        if spec.kind != InputKind.BUFFER or spec.target is None:
            continue
        identity = _identity(_buffer_tensor(ep, spec.target))
        if identity is not None:
            buffers.setdefault(identity, spec.arg.name)
            buffer_names[spec.arg.name] = spec.target
    if not buffers:
        return []
    folded: Dict[str, str] = {}  # constant placeholder -> buffer placeholder
    for spec in signature.input_specs:
        if spec.kind != InputKind.CONSTANT_TENSOR or spec.target is None:
            continue
        identity = _identity(ep.constants.get(spec.target))
        if identity is not None and identity in buffers:
            folded[spec.arg.name] = buffers[identity]
    if not folded:
        return []
    graph = ep.graph_module.graph
    placeholders = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    pairs = []
    for constant, buffer in folded.items():
        node = placeholders[constant]
        node.replace_all_uses_with(placeholders[buffer])
        graph.erase_node(node)
        spec = next(s for s in signature.input_specs if s.arg.name == constant)
        signature.input_specs.remove(spec)
        if not any(
            s.target == spec.target
            for s in signature.input_specs
            if s.kind in (InputKind.CONSTANT_TENSOR, InputKind.BUFFER)
        ):
            ep.constants.pop(spec.target, None)
        pairs.append((str(spec.target), buffer_names[buffer]))
    ep.graph_module.recompile()
    folded_text = ", ".join(f"{c} -> {b}" for c, b in pairs)
    logger.debug(
        f"Lifted constants that are a buffer's tensor, folded into it: {folded_text}"
    )
    return pairs
