"""Make ``dst.copy_(src)`` convert ``src`` to ``dst``'s dtype and shape in the graph.

``copy_`` converts its source to the destination's dtype and broadcasts it to the
destination's shape. Once ``run_decompositions`` functionalizes a ``copy_`` that
overwrites a whole graph input (a buffer reset by ``self.state.copy_(x)``, say),
torch 2.14 takes ``src`` itself as the input's new value, with neither step: a
bfloat16 buffer reset from a float32 tensor becomes float32, and one reset from a
row becomes that row, in every later read of the state, in the value written
back, and in a standalone engine's state output. This pass, run before the
decompositions, makes both steps explicit (``aten._to_copy`` and
``aten.expand``) wherever the source differs from the destination, so every
functional form of the copy keeps the destination's dtype and shape.
"""

from __future__ import annotations

import logging
from typing import Any, List

import torch
from torch_tensorrt.dynamo._settings import CompilationSettings

logger = logging.getLogger(__name__)

_COPIES = (torch.ops.aten.copy_.default, torch.ops.aten.copy.default)


def _val(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _sizes(graph: torch.fx.Graph, dst: torch.fx.Node, shape: Any) -> List[Any]:
    """``dst``'s sizes as expand takes them: ints, or a node per symbolic size."""
    sizes: List[Any] = []
    for axis, size in enumerate(shape):
        if isinstance(size, int):
            sizes.append(size)
        else:
            node = graph.call_function(torch.ops.aten.sym_size.int, (dst, axis))
            node.meta["val"] = size
            sizes.append(node)
    return sizes


def copy_converts_to_its_destination(
    gm: torch.fx.GraphModule, settings: CompilationSettings
) -> torch.fx.GraphModule:
    """Convert and broadcast each ``copy_`` source explicitly (see the module docstring)."""
    rewritten = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _COPIES:
            continue
        dst, src = node.args[0], node.args[1]
        dst_val, src_val = _val(dst), _val(src)
        if not (
            isinstance(dst_val, torch.Tensor) and isinstance(src_val, torch.Tensor)
        ):
            continue
        value = src
        with gm.graph.inserting_before(node):
            if src_val.dtype != dst_val.dtype:
                value = gm.graph.call_function(
                    torch.ops.aten._to_copy.default,
                    (value,),
                    {"dtype": dst_val.dtype},
                )
                value.meta["val"] = src_val.to(dst_val.dtype)
            if tuple(src_val.shape) != tuple(dst_val.shape):
                sizes = _sizes(gm.graph, dst, dst_val.shape)
                expanded = gm.graph.call_function(
                    torch.ops.aten.expand.default, (value, sizes)
                )
                expanded.meta["val"] = _val(value).expand(dst_val.shape)
                value = expanded
        if value is not src:
            node.args = (dst, value) + tuple(node.args[2:])
            rewritten += 1
    if rewritten:
        gm.graph.lint()
        gm.recompile()
        logger.debug(f"Made {rewritten} copy_ source(s) the destination's dtype/shape")
    return gm
