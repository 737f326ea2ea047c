"""Give an engine a copy of each input it would update in place against the plan.

An in-place plugin (converter declaring ``requires_aliased_plugin_io``) writes the
memory bound to its engine input; readers partitioning moved out of the engine
would see a value depending on submodule order. So an input stays in place only
where its state plan (``lowering/_state_plan.py``) says so; any other gets an
``aten.clone`` before the engine, with a warning, and the usual write-back copies
the new value into the original.
"""

from __future__ import annotations

import logging
import operator
from typing import Any, Dict, List, Optional, Set

import torch
from torch_tensorrt.dynamo.conversion._functionalized_op import is_write_back
from torch_tensorrt.dynamo.lowering._state_plan import STATE_PLAN, in_place_writer

logger = logging.getLogger(__name__)

_TRT_SUBMODULE_MARKER = "_run_on_acc"


def in_place_engine_inputs(submodule: torch.fx.GraphModule) -> List[int]:
    """Positions of the inputs of ``submodule`` that its engine writes in place."""
    placeholders = [n for n in submodule.graph.nodes if n.op == "placeholder"]
    return [i for i, p in enumerate(placeholders) if in_place_writer(p) is not None]


def _is_trt_call(node: torch.fx.Node) -> bool:
    return node.op == "call_module" and _TRT_SUBMODULE_MARKER in str(node.target)


def _outputs(gm: torch.fx.GraphModule) -> List[Any]:
    """The values ``gm`` returns."""
    results = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    return list(results) if isinstance(results, (tuple, list)) else [results]


class _Views:
    """Which outputs of each PyTorch submodule view which inputs (cached per module)."""

    def __init__(self) -> None:
        self._by_module: Dict[int, List[Optional[int]]] = {}

    def of(self, gm: torch.fx.GraphModule) -> List[Optional[int]]:
        """For each output of ``gm``: the input it is a view of, or ``None``."""
        key = id(gm)
        if key not in self._by_module:
            position = {
                n: i
                for i, n in enumerate(
                    n for n in gm.graph.nodes if n.op == "placeholder"
                )
            }
            views: List[Optional[int]] = []
            for value in _outputs(gm):
                while isinstance(value, torch.fx.Node) and value not in position:
                    value = _view_source(gm, value, self)
                views.append(position.get(value) if value is not None else None)
            self._by_module[key] = views
        return self._by_module[key]


def _view_source(gm: torch.fx.GraphModule, node: torch.fx.Node, views: _Views) -> Any:
    """The node ``node`` is a view of (shares memory with), or ``None``."""
    target = node.target
    if node.op == "call_function" and isinstance(target, torch._ops.OpOverload):
        returns = target._schema.returns
        alias = returns[0].alias_info if returns else None
        if alias is not None and not alias.is_write and node.args:
            return node.args[0]
        return None
    if node.op == "call_function" and target is operator.getitem:
        source = node.args[0]
        if not isinstance(source, torch.fx.Node):
            return None
        if source.op == "call_module" and not _is_trt_call(source):
            # one output of a PyTorch submodule that returns several
            outputs = views.of(getattr(gm, str(source.target)))
            index = node.args[1]
            if isinstance(index, int) and outputs[index] is not None:
                return source.args[outputs[index]]
            return None
        return source if _view_source(gm, source, views) is not None else None
    if node.op == "call_module" and not _is_trt_call(node):
        outputs = views.of(getattr(gm, str(node.target)))
        if len(outputs) == 1 and outputs[0] is not None:
            return node.args[outputs[0]]
    return None


def _aliases(
    gm: torch.fx.GraphModule, node: torch.fx.Node, views: _Views
) -> Set[torch.fx.Node]:
    """``node``, the tensor it is a view of, and every view of either."""
    root = node
    while (source := _view_source(gm, root, views)) is not None:
        root = source
    aliases, pending = set(), [root]
    while pending:
        current = pending.pop()
        if current in aliases:
            continue
        aliases.add(current)
        pending.extend(
            u for u in current.users if _view_source(gm, u, views) is current
        )
    return aliases


def _why_copied(value: torch.fx.Node) -> Optional[str]:
    """Why an engine must not update its input ``value`` in place; ``None`` when
    the state plan put that state in place by its op."""
    plan = value.meta.get(STATE_PLAN) if value.op == "placeholder" else None
    if plan is None:
        return (
            f"'{value.name}' is not a state of the graph (a value computed before "
            "the engine)"
        )
    if not (plan.in_place and plan.by_its_op):
        return f"the state plan copies it back: {plan.reason}"
    return None


def _written_back(submodule: torch.fx.GraphModule) -> List[int]:
    """Positions of the inputs a PyTorch submodule writes back into (``aten.copy_``)."""
    placeholders = [n for n in submodule.graph.nodes if n.op == "placeholder"]
    return sorted(
        {
            placeholders.index(n.args[0])
            for n in submodule.graph.nodes
            if is_write_back(n) and n.args[0] in placeholders
        }
    )


def keep_old_values_for_later_readers(partitioned_module: torch.fx.GraphModule) -> None:
    """Readers of a state's old value scheduled after the PyTorch submodule that
    writes its new value back read an ``aten.clone`` taken just before it.

    Partitioners order submodules by data only, and a write-back (``aten.copy_``)
    has no users, so a PyTorch submodule writing a state back could run before an
    engine reading its old value (``r = s.sum(); my_op_(s)``).
    """
    changed = False
    views = _Views()
    nodes = list(partitioned_module.graph.nodes)
    order = {n: i for i, n in enumerate(nodes)}
    for writer in nodes:
        if writer.op != "call_module" or _is_trt_call(writer):
            continue
        submodule = getattr(partitioned_module, str(writer.target))
        if not isinstance(submodule, torch.fx.GraphModule):
            continue
        for position in _written_back(submodule):
            state = writer.args[position]
            aliases = _aliases(partitioned_module, state, views)
            stale = [
                (alias, user)
                for alias in aliases
                for user in alias.users
                if user is not writer
                and order.get(user, -1) > order[writer]
                and _view_source(partitioned_module, user, views) is not alias
            ]
            if not stale:
                continue
            with partitioned_module.graph.inserting_before(writer):
                old = partitioned_module.graph.call_function(
                    torch.ops.aten.clone.default, (state,)
                )
            old.meta.update(
                {k: v for k, v in state.meta.items() if k in ("val", "tensor_meta")}
            )
            for alias, user in stale:
                if alias is state:
                    user.replace_input_with(state, old)
                else:
                    logger.warning(
                        f"{user.name} reads a view of '{state.name}' after "
                        f"{writer.target} writes '{state.name}' back; it sees the "
                        "new value"
                    )
            changed = True
            logger.info(
                f"'{state.name}' is written back by {writer.target} (PyTorch) before "
                f"{', '.join(sorted({u.name for _, u in stale}))} read its old value: "
                "they read a copy of it taken before the write-back"
            )
    if changed:
        partitioned_module.graph.lint()
        partitioned_module.recompile()


def isolate_in_place_engine_inputs(partitioned_module: torch.fx.GraphModule) -> None:
    """Give each engine an ``aten.clone`` of every input it writes in place that the
    state plan did not put in place (see the module docstring), after
    :func:`keep_old_values_for_later_readers`."""
    keep_old_values_for_later_readers(partitioned_module)
    graph = partitioned_module.graph
    changed = False
    for call in list(graph.nodes):
        if not _is_trt_call(call):
            continue
        submodule = getattr(partitioned_module, str(call.target))
        for position in in_place_engine_inputs(submodule):
            value = call.args[position]
            why = _why_copied(value)
            if why is None:
                continue
            with graph.inserting_before(call):
                copy = graph.call_function(torch.ops.aten.clone.default, (value,))
            copy.meta.update(
                {k: v for k, v in value.meta.items() if k in ("val", "tensor_meta")}
            )
            call.update_arg(position, copy)
            changed = True
            logger.warning(
                f"Input '{value.name}' of TensorRT engine '{call.target}' is "
                f"updated in place by an in-place plugin, but {why}. The engine "
                f"gets a copy of '{value.name}' instead; its new value is written "
                "back as usual."
            )
    if changed:
        graph.lint()
        partitioned_module.recompile()
