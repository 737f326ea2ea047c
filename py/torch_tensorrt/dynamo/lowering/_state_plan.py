"""One plan per graph for the states it writes: which updates TensorRT makes in place.

A *state* is a graph input the model writes: a user input written back with
``aten.copy_``, or a lifted buffer whose new value is a graph output.
:func:`plan_state_updates` decides, after lowering, how each state's new value
reaches the caller and records it on its placeholder (``STATE_PLAN``):
``in_place`` where ``IKVCacheUpdateLayer`` makes its one slab write
(:func:`plan_kv_state_write`) or its op's converter computes it in the state's
memory (:func:`in_place_source`), else ``copy`` (the caller copies it back).
Passes, converters and partitioners follow the plan; every engine is checked
against it (:func:`check_engine_against_state_plan`).
"""

from __future__ import annotations

import dataclasses
import logging
import operator
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch_tensorrt.dynamo.conversion._functionalized_op import (
    FunctionalizedOp,
    is_write_back,
    mutated_values,
    updates_in_place,
)
from torch_tensorrt.dynamo.lowering._kv_state_writes import (
    KVStateWrite,
    plan_kv_state_write,
)
from torch_tensorrt.dynamo.utils import STATE_PLAN as STATE_PLAN

logger = logging.getLogger(__name__)

IN_PLACE = "in_place"
COPY = "copy"


@dataclasses.dataclass(frozen=True)
class StateUpdate:
    """How one state's new value reaches the caller, as the plan decided it."""

    state: str  # the placeholder's name
    update: str  # IN_PLACE or COPY
    reason: str
    dtype: str  # the state's dtype, e.g. "float16"
    write: Optional[str] = None  # the write made in place
    by_its_op: bool = False  # in place by its mutating op's converter, not the plan

    @property
    def in_place(self) -> bool:
        return self.update == IN_PLACE


def _outputs(gm: torch.fx.GraphModule) -> List[Any]:
    output = next(n for n in gm.graph.nodes if n.op == "output")
    results = output.args[0]
    return list(results) if isinstance(results, (tuple, list)) else [results]


def state_new_values(
    gm: torch.fx.GraphModule,
) -> Dict[torch.fx.Node, Optional[torch.fx.Node]]:
    """Each state of ``gm`` (a placeholder it writes) and the node of its new value.

    A lifted buffer's is the output ``lift_mutated_buffers`` added for it
    (``meta["_lifted_buffer_output"]``), a user input's what its last write-back
    copies in; None if that is not a node (a constant written back).
    """
    outputs = _outputs(gm)
    states: Dict[torch.fx.Node, Optional[torch.fx.Node]] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder" and "_lifted_buffer_output" in node.meta:
            position = node.meta["_lifted_buffer_output"]
            value = outputs[position] if position is not None else None
            states[node] = value if isinstance(value, torch.fx.Node) else None
        elif is_write_back(node) and isinstance(node.args[0], torch.fx.Node):
            value = node.args[1] if len(node.args) > 1 else None
            states[node.args[0]] = value if isinstance(value, torch.fx.Node) else None
    return states


def other_readers(state: torch.fx.Node, writer: torch.fx.Node) -> List[str]:
    """Nodes besides ``writer`` (and write-backs) that read ``state``; with any,
    TensorRT gives an in-place plugin a copy of its aliased input."""
    return [u.name for u in state.users if u is not writer and not is_write_back(u)]


def in_place_writer(state: torch.fx.Node) -> Optional[torch.fx.Node]:
    """The :class:`FunctionalizedOp` call whose converter updates ``state`` in place:
    it takes ``state`` itself as a mutated argument, is its only reader, and its
    converter declares ``requires_aliased_plugin_io`` (an in-place plugin)."""
    for user in state.users:
        if (
            isinstance(user.target, FunctionalizedOp)
            and any(v is state for v in mutated_values(user).values())
            and not other_readers(state, user)
            and updates_in_place(user)
        ):
            return user
    return None


def in_place_source(value: Any) -> Optional[torch.fx.Node]:
    """The tensor whose memory TensorRT computes ``value`` in; ``None`` if not in place.

    Chains of in-place plugins (:func:`in_place_writer`), each the only reader of
    the previous one's new value, are followed back to the first one's tensor.
    """
    source = None
    while isinstance(value, torch.fx.Node) and value.target is operator.getitem:
        call, index = value.args
        target = call.target
        if not isinstance(target, FunctionalizedOp) or index < target.num_returns:
            break
        argument = mutated_values(call)[target.mutated[index - target.num_returns]]
        if (
            not isinstance(argument, torch.fx.Node)
            or in_place_writer(argument) is not call
        ):
            break
        source = value = argument
    return source


def _dtype_name(node: torch.fx.Node) -> str:
    val = node.meta.get("val")
    dtype = getattr(val, "dtype", None)
    return str(dtype).replace("torch.", "") if dtype is not None else "unknown"


def _plan_one(
    state: torch.fx.Node, value: Optional[torch.fx.Node]
) -> Tuple[StateUpdate, Optional[KVStateWrite]]:
    def copy(reason: str) -> Tuple[StateUpdate, Optional[KVStateWrite]]:
        return StateUpdate(state.name, COPY, reason, _dtype_name(state)), None

    if value is None:
        return copy("its new value is not computed by the graph")
    if value is state:
        return copy("it is written back unchanged")
    if in_place_source(value) is state:
        # an in-place plugin (a user alias) or a converter of its own on the layer
        op = value.args[0].target.op
        return (
            StateUpdate(
                state.name,
                IN_PLACE,
                f"{op} computes it in its own memory (its converter declares "
                "requires_aliased_plugin_io)",
                _dtype_name(state),
                value.name,
                by_its_op=True,
            ),
            None,
        )
    call = value.args[0] if value.target is operator.getitem else None
    if isinstance(call, torch.fx.Node) and isinstance(call.target, FunctionalizedOp):
        readers = other_readers(state, call)
        if readers:
            why = f"the state is also read by {', '.join(readers)}"
        elif not updates_in_place(call):
            why = (
                "its converter computes a new tensor (an in-place one declares "
                "requires_aliased_plugin_io)"
            )
        else:
            why = "it is given a copy or a view of the state, not the state itself"
        if updates_in_place(call):
            # its converter would write it in place: say once why it does not
            logger.warning(
                "%s: state '%s' is copied back, not updated in place: %s",
                call.target.op,
                state.name,
                f"it has other readers ({', '.join(readers)})" if readers else why,
            )
        return copy(f"{call.target.op} writes it, and {why}")
    if not (value.op == "call_function" and value.args and value.args[0] is state):
        return copy(
            f"its new value {value.name} is not one slab write of it (a whole-state "
            "op, several writes, a write of a copy, or an op run in PyTorch)"
        )
    if value.target is torch.ops.aten.as_strided_scatter.default:
        src = value.args[1]
        is_item = isinstance(src, torch.fx.Node) and src.target is operator.getitem
        op = src.args[0].target if is_item else None
        writer = op.op if isinstance(op, FunctionalizedOp) else value.name
        return copy(
            f"{writer} writes a strided view of it (transposed, selected or "
            "stepped), not one slab of it"
        )
    plan, reason = plan_kv_state_write(value, state)
    if plan is None:
        return copy(reason)
    return (
        StateUpdate(state.name, IN_PLACE, reason, _dtype_name(state), value.name),
        plan,
    )


def _functional_cache_update(
    node: torch.fx.Node,
) -> Optional[Tuple[StateUpdate, KVStateWrite]]:
    """A user input written by a functional ``index_copy`` / ``slice_scatter`` in the
    layer's form that nothing else reads: the converters' KV-cache contract takes it
    for an in-place update of that cache (``index_copy`` at batch 1 only)."""
    writes = [u for u in node.users if u.op == "call_function" and u.args[0] is node]
    if len(writes) != 1:
        return None
    plan, reason = plan_kv_state_write(writes[0], node)
    if plan is None or not plan.in_layer_form:
        return None
    if plan.index is not None and plan.shape[0] != 1:
        # index_copy's KV fast path: batch 1 only; a wider write is a scatter
        return None
    update = StateUpdate(
        node.name,
        IN_PLACE,
        f"a functional cache write returned, taken for the update of its cache ({reason})",
        _dtype_name(node),
        writes[0].name,
    )
    return update, plan


def plan_state_updates(gm: torch.fx.GraphModule) -> List[KVStateWrite]:
    """Plan every state of ``gm`` onto its placeholder (read by :func:`state_plan`);
    return the :class:`KVStateWrite` of each write to make in place. Run once, on
    the lowered graph (``view_state_writes_in_kv_cache_form``)."""
    writes: List[KVStateWrite] = []
    states = state_new_values(gm)
    for node in gm.graph.nodes:
        if node.op == "placeholder" and node not in states:
            functional = _functional_cache_update(node)
            if functional is not None:
                update, write = functional
                node.meta[STATE_PLAN] = update
                writes.append(write)
                logger.warning(
                    "%s writes input '%s' functionally; the "
                    "engine writes it into '%s' itself (the KV-cache contract of "
                    "Torch-TensorRT's index_copy and slice_scatter converters), so "
                    "after the call '%s' holds the result, unlike in eager PyTorch",
                    write.write.name,
                    node.name,
                    node.name,
                    node.name,
                )
    for state, value in states.items():
        update, write = _plan_one(state, value)
        state.meta[STATE_PLAN] = update
        if write is not None:
            writes.append(write)
        logger.debug(
            "state %s (%s): %s — %s",
            state.name,
            update.dtype,
            update.update,
            update.reason,
        )
    return writes


def state_plan(gm: torch.fx.GraphModule) -> Dict[str, StateUpdate]:
    """The plan recorded on ``gm``'s placeholders, by state name."""
    return {
        node.name: node.meta[STATE_PLAN]
        for node in gm.graph.nodes
        if node.op == "placeholder" and STATE_PLAN in node.meta
    }


def check_engine_against_state_plan(
    module: torch.fx.GraphModule,
    input_names: Sequence[str],
    aliased_io: Mapping[str, Tuple[str, str]],
) -> None:
    """Raise where the engine built from ``module`` writes in place an input the
    plan did not put in place, or makes an in-place row's write without writing it
    in place (a Torch-TensorRT bug, either way).

    ``input_names``: input bindings, one per placeholder; ``aliased_io``: output
    binding -> ``(input binding, kind)``. Any alias needs an in-place row, a
    ``user`` alias one ``by_its_op``; an in-place row whose write is a node of
    ``module`` needs an alias (a write made elsewhere is that engine's, or runs in
    PyTorch and is copied back)."""
    placeholders = [n for n in module.graph.nodes if n.op == "placeholder"]
    if any("val" not in p.meta for p in placeholders):
        return  # a module whose placeholders lost their meta
    row_of = {b: p.meta.get(STATE_PLAN) for p, b in zip(placeholders, input_names)}
    wrong = []
    for output, (binding, kind) in sorted(aliased_io.items()):
        row = row_of.get(binding)
        if row is None:
            wrong.append(f"'{binding}' (output '{output}'; it is no state)")
        elif not row.in_place:
            wrong.append(f"'{binding}' (output '{output}'; planned: {row.reason})")
        elif kind == "user" and not row.by_its_op:
            wrong.append(
                f"'{binding}' (output '{output}', a converter's alias; planned: "
                f"{row.reason})"
            )
    if wrong:
        raise RuntimeError(
            "The engine writes in place what the state plan copies back: "
            + "; ".join(wrong)
            + ". This is a bug in Torch-TensorRT's state handling, please report "
            "it with the model"
        )
    aliased = {binding for binding, _ in aliased_io.values()}
    made_here = {node.name for node in module.graph.nodes}
    unwritten = [
        f"'{binding}' (write '{row.write}'; planned: {row.reason})"
        for binding, row in row_of.items()
        if row is not None
        and row.in_place
        and row.write in made_here
        and binding not in aliased
    ]
    if unwritten:
        raise RuntimeError(
            "The engine makes, but not in place, the writes the state plan puts in "
            "place: "
            + "; ".join(unwritten)
            + ". This is a bug in Torch-TensorRT's state handling, please report "
            "it with the model"
        )
