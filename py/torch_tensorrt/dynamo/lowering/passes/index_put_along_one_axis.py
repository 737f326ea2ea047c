"""Write ``state[:, :, p] = new`` (an index_put along one axis) as ``index_copy``.

Indexing one axis with a 1-D tensor of positions, every other axis whole, and
assigning is ``aten.index_put(state, [None, None, p], new)`` once
functionalized: the positions ``p`` of axis 2 take ``new``, broadcast to the
indexed shape. That is ``aten.index_copy(state, 2, p, new)`` with ``new``
expanded to that shape, the form the converters take (a scatter, or
IKVCacheUpdateLayer where the state plan puts the write in place), where
``index_put``'s converter failed the build for it ("Cannot broadcast (2, 1, 4)
to (1, 1, 2, 4)"). Rewritten only where that is what ``index_put`` computes:
``accumulate=False``, one index tensor of int64 positions with a static
length, the other indices ``None``; every other ``index_put`` is left as it is.
"""

from __future__ import annotations

import logging
from typing import Any, Optional, Tuple

import torch
from torch_tensorrt.dynamo._settings import CompilationSettings
from torch_tensorrt.dynamo.lowering.passes.pass_utils import (
    clean_up_graph_after_modifications,
)

logger = logging.getLogger(__name__)


def _along_one_axis(node: torch.fx.Node) -> Optional[Tuple[int, torch.fx.Node]]:
    """``(axis, positions)`` of an ``index_put`` along one axis, or None."""
    args = list(node.args) + [False] * (4 - len(node.args))
    state, indices, values, accumulate = args[:4]
    if accumulate or not isinstance(indices, (list, tuple)):
        return None
    given = [(i, index) for i, index in enumerate(indices) if index is not None]
    if len(given) != 1:
        return None
    axis, positions = given[0]
    state_val = getattr(state, "meta", {}).get("val")
    positions_val = getattr(positions, "meta", {}).get("val")
    if not (
        isinstance(state_val, torch.Tensor)
        and isinstance(positions_val, torch.Tensor)
        and isinstance(values, torch.fx.Node)
        and positions_val.dtype == torch.int64
        and positions_val.dim() == 1
        and isinstance(positions_val.shape[0], int)
        and axis < state_val.dim()
    ):
        return None
    return axis, positions


def index_put_along_one_axis(
    gm: torch.fx.GraphModule, settings: CompilationSettings
) -> torch.fx.GraphModule:
    """Rewrite each ``index_put`` along one axis into ``index_copy`` (see the module docstring)."""
    rewritten = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in (
            torch.ops.aten.index_put.default,
        ):
            continue
        found = _along_one_axis(node)
        if found is None:
            continue
        axis, positions = found
        state, values = node.args[0], node.args[2]
        state_val, values_val = state.meta["val"], values.meta.get("val")
        shape: list[Any] = list(state_val.shape)
        shape[axis] = positions.meta["val"].shape[0]
        with gm.graph.inserting_before(node):
            new = values
            if values_val is None or tuple(values_val.shape) != tuple(shape):
                if not all(isinstance(s, int) for s in shape) or values_val is None:
                    continue
                new = gm.graph.call_function(
                    torch.ops.aten.expand.default, (values, shape)
                )
                new.meta["val"] = values_val.expand(shape)
            if values_val is not None and values_val.dtype != state_val.dtype:
                continue
            write = gm.graph.call_function(
                torch.ops.aten.index_copy.default, (state, axis, positions, new)
            )
        write.meta = dict(node.meta)
        node.replace_all_uses_with(write)
        gm.graph.erase_node(node)
        rewritten += 1
    if rewritten:
        gm = clean_up_graph_after_modifications(gm)
        logger.debug(
            f"Rewrote {rewritten} index_put along one axis as index_copy:\n{gm.graph}"
        )
    return gm
