"""Put every state update ``IKVCacheUpdateLayer`` can make on that layer.

The layer writes a contiguous run along axis 2 of a ``[B, H, S, D]`` network
input in place. A contiguous state written along one axis is such a cache seen
as ``[B', H', S, D']`` (:func:`kv_layer_view`), a view with no copy. Each write
the state plan puts in place is rewritten into that form::

    state4 = aten.reshape(state, [B', H', S, D'])  # meta STATE_VIEW "input"
    new4 = aten.reshape(new, [B', H', n, D'])
    written = aten.slice_scatter(state4, new4, 2, p, p + n)   # or index_copy
    aten.view(written, state.shape)               # meta STATE_VIEW "output"

The write carries ``KV_STATE_WRITE`` for the converters. The ``STATE_VIEW``
views are the engine's boundary: ``compile()``'s partitioners leave them to
PyTorch; a standalone engine declares its input in that form
(:func:`declare_state_views`).
"""

from __future__ import annotations

import copy
import logging
from typing import Any, Dict, List, Sequence, Tuple

import torch
from torch_tensorrt._Input import Input
from torch_tensorrt.dynamo._settings import CompilationSettings
from torch_tensorrt.dynamo.conversion._functionalized_op import is_write_back
from torch_tensorrt.dynamo.conversion.impl._kv_cache_layer import (
    KV_STATE_WRITE,
    STATE_VIEW,
)
from torch_tensorrt.dynamo.lowering._kv_state_writes import KVStateWrite, kv_layer_view
from torch_tensorrt.dynamo.lowering._state_plan import STATE_PLAN, plan_state_updates
from torch_tensorrt.dynamo.lowering.passes.pass_utils import (
    clean_up_graph_after_modifications,
)

logger = logging.getLogger(__name__)


def _call(
    graph: torch.fx.Graph, target: Any, args: Tuple[Any, ...], val: Any
) -> torch.fx.Node:
    node = graph.call_function(target, args)
    node.meta["val"] = val
    return node


def _new_values(graph: torch.fx.Graph, plan: KVStateWrite) -> torch.fx.Node:
    """The write's new values without slice assignment's ``aten.copy``, which reads
    only the slice's shape and dtype: ``new`` cast to the state's dtype and
    broadcast to the slice's shape."""
    source = plan.source
    if not (source.target is torch.ops.aten.copy.default and len(source.args) > 1):
        return source
    new = source.args[1]
    new_val = new.meta.get("val") if isinstance(new, torch.fx.Node) else None
    val = source.meta.get("val")
    if new_val is None or val is None:
        return source
    if new_val.dtype != val.dtype:
        new = _call(
            graph,
            torch.ops.aten._to_copy.default,
            (new,),
            new_val.to(val.dtype),
        )
        new.kwargs = {"dtype": val.dtype}
        new_val = new.meta["val"]
    if tuple(new_val.shape) != tuple(val.shape):
        if not all(isinstance(s, int) for s in val.shape):
            return source
        new = _call(
            graph,
            torch.ops.aten.expand.default,
            (new, list(val.shape)),
            new_val.expand(val.shape),
        )
    return new


def _rewrite(gm: torch.fx.GraphModule, plan: KVStateWrite) -> None:
    graph, write = gm.graph, plan.write
    batch, heads, _, inner = plan.view
    # the state's own shape, as view() takes it: a dynamic first dimension is -1
    shape_args = [s if isinstance(s, int) else -1 for s in plan.shape]
    state_val = plan.cache.meta["val"]
    with graph.inserting_before(write):
        new = _new_values(graph, plan)
        state, values = plan.cache, new
        if not plan.in_layer_form:
            # the caller's memory when it is contiguous (the engine writes the
            # state itself), a contiguous copy, written back into it, when the
            # caller lays it out otherwise
            layout = _call(
                graph,
                torch.ops.aten.contiguous.default,
                (plan.cache,),
                state_val,
            )
            layout.meta[STATE_VIEW] = {"role": "layout", "state": plan.cache.name}
            state = _call(
                graph,
                torch.ops.aten.reshape.default,
                (layout, list(plan.view)),
                state_val.view(plan.view),
            )
            state.meta[STATE_VIEW] = {
                "role": "input",
                "state": plan.cache.name,
                "axis": plan.axis,
                "shape": list(shape_args),
                "view": list(plan.view),
            }
            # the engine's input in compile(): it stands for its state
            state.meta[STATE_PLAN] = plan.cache.meta[STATE_PLAN]
            values = _call(
                graph,
                torch.ops.aten.reshape.default,
                (new, [batch, heads, plan.length, inner]),
                new.meta["val"].reshape(batch, heads, plan.length, inner),
            )
        if plan.index is not None:
            args: Tuple[Any, ...] = (state, 2, plan.index, values)
            target = torch.ops.aten.index_copy.default
        else:
            # a symbolic start keeps the write's own (symbolic) end
            static = isinstance(plan.start, int)
            end = plan.start + plan.length if static else plan.write.args[4]
            args = (state, values, 2, plan.start, end)
            target = torch.ops.aten.slice_scatter.default
        written = _call(graph, target, args, state.meta["val"].clone())
        written.meta[KV_STATE_WRITE] = True
        if plan.in_layer_form:
            write.replace_all_uses_with(written)
            graph.erase_node(write)
            return
    # The new state, in the state's own shape: once for what leaves the engine
    # (the write-back into the state, an output), once for readers inside it
    with graph.inserting_after(written):
        inner_view, boundary_view = [
            _call(
                graph,
                torch.ops.aten.view.default,
                (written, shape_args),
                write.meta["val"],
            )
            for _ in range(2)
        ]
        boundary_view.meta[STATE_VIEW] = {"role": "output", "input": plan.cache.name}
    for user in list(write.users):
        leaves = user.op == "output" or is_write_back(user)
        user.replace_input_with(write, boundary_view if leaves else inner_view)
    graph.erase_node(write)


def view_state_writes_in_kv_cache_form(
    gm: torch.fx.GraphModule, settings: CompilationSettings
) -> torch.fx.GraphModule:
    """Rewrite each state update ``IKVCacheUpdateLayer`` can make into its form."""
    writes = plan_state_updates(gm)
    for plan in writes:
        logger.debug(
            "%s: state %s %s is updated in place by IKVCacheUpdateLayer (%s)",
            plan.write.name,
            plan.cache.name,
            list(plan.shape),
            plan.view,
        )
        _rewrite(gm, plan)
    if writes:
        gm = clean_up_graph_after_modifications(gm)
        logger.debug(f"Graph after viewing state writes in KV-cache form:\n{gm.graph}")
    return gm


def _viewed_shape(shape: Sequence[int], axis: int) -> Tuple[int, ...]:
    view, reason = kv_layer_view(tuple(int(s) for s in shape), axis)
    assert view is not None, reason
    return tuple(view)


def _viewed_input(spec: Input, axis: int) -> Input:
    """``spec`` (an engine input's shapes) for the state seen in the layer's form."""
    viewed = copy.copy(spec)
    if isinstance(spec.shape, dict):
        viewed.shape = {
            key: _viewed_shape(shape, axis) for key, shape in spec.shape.items()
        }
        if spec.profiles:
            viewed.profiles = [
                {key: _viewed_shape(shape, axis) for key, shape in profile.items()}
                for profile in spec.profiles
            ]
    else:
        viewed.shape = _viewed_shape(spec.shape, axis)
    example = getattr(spec, "torch_tensor", None)
    if isinstance(example, torch.Tensor):
        viewed.torch_tensor = example.reshape(_viewed_shape(example.shape, axis))
    return viewed


def _shape(val: Any) -> List[int]:
    return [s if isinstance(s, int) else -1 for s in val.shape]


def engine_state_shapes(gm: torch.fx.GraphModule) -> List[Tuple[List[int], List[int]]]:
    """Per placeholder of ``gm``: its shape, as the caller's and the engine's (``-1`` dynamic)."""
    shapes = []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            shape = _shape(val) if isinstance(val, torch.Tensor) else []
            shapes.append((shape, list(shape)))
    return shapes


def declare_state_views(
    gm: torch.fx.GraphModule, inputs: List[Input]
) -> Dict[int, Tuple[List[int], List[int]]]:
    """Declare each state the engine writes in the layer's form as an input of that form.

    For a standalone engine, which has no graph around it to take the views:
    the placeholder of each state viewed by :func:`view_state_writes_in_kv_cache_form`
    becomes the view itself (``inputs``, one per placeholder, is changed to
    match), and the new state leaves the engine in that form. Returns, per
    position of such a placeholder, the state's own shape and the engine
    input's shape (``-1`` for a dynamic dimension), for the alias map.
    """
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    shapes: Dict[int, Tuple[List[int], List[int]]] = {}
    declared = set()
    for node in list(gm.graph.nodes):
        info = node.meta.get(STATE_VIEW)
        if info is None:
            continue
        if info["role"] == "layout":
            # the engine's input is the state's memory itself: no copy
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
            continue
        if info["role"] == "input":
            state = node.args[0]
            for user in list(state.users):
                # a dynamic batch's size (export's sym_size) is the view's first
                # dimension as well
                if (
                    user.target is torch.ops.aten.sym_size.int
                    and user.args[1:] == (0,)
                    and info["view"][0] == -1
                ):
                    user.replace_input_with(state, node)
            if any(u is not node and not is_write_back(u) for u in state.users):
                # read as it is as well: the engine takes it as it is, with the
                # views inside it, and copies the write back
                continue
            declared.add(state.name)
            position = placeholders.index(state)
            inputs[position] = _viewed_input(inputs[position], info["axis"])
            state.meta["val"] = node.meta["val"]
            shapes[position] = (list(info["shape"]), list(info["view"]))
        elif info["input"] not in declared:
            continue  # its input stays in the state's shape, and so does its output
        node.replace_all_uses_with(node.args[0])
        gm.graph.erase_node(node)
    if shapes:
        gm.graph.lint()
        gm.recompile()
    return shapes
