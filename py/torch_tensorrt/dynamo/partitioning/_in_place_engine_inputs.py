"""Keep engine inputs that TensorRT updates in place from being read afterwards.

An in-place plugin (a converter declaring ``requires_aliased_plugin_io``) that is
the only reader of a network input writes into the memory bound to that input:
TensorRT gives the plugin's aliased input and output the same address. With
``compile()`` that memory is the tensor the partitioned graph passes to the
engine, e.g. the user's input or a module buffer. The functional graph around
the engine may still read that tensor's *old* value after the engine has run:

* a node scheduled after the engine that reads the tensor, or a view of it taken
  before the engine and read after it, before the graph writes the new value
  back (``aten.copy_``);
* another input of the same engine that is a view of the same memory.

Those reads would see the new value. :func:`isolate_in_place_engine_inputs`
finds them in the partitioned graph, before any engine is built, and gives the
engine a copy of such an input (``aten.clone``) with a warning that names the
tensor and its readers: the engine updates the copy, and the usual write-back
copies the new value into the original. Inputs nobody reads afterwards, the
common case of a state updated by one plugin, keep being updated in place.
"""

from __future__ import annotations

import logging
import operator
from typing import Any, List, Optional, Set, Tuple

import torch
from torch_tensorrt.dynamo.conversion._functionalized_op import (
    in_place_writer,
    is_write_back,
)

logger = logging.getLogger(__name__)

_TRT_SUBMODULE_MARKER = "_run_on_acc"


def in_place_engine_inputs(submodule: torch.fx.GraphModule) -> List[int]:
    """Positions of the inputs of ``submodule`` that its engine writes in place."""
    placeholders = [n for n in submodule.graph.nodes if n.op == "placeholder"]
    return [i for i, p in enumerate(placeholders) if in_place_writer(p) is not None]


def _is_trt_call(node: torch.fx.Node) -> bool:
    return node.op == "call_module" and _TRT_SUBMODULE_MARKER in str(node.target)


def _output_views(gm: torch.fx.GraphModule) -> List[Optional[int]]:
    """For each output of ``gm``: the input it is a view of, or ``None``."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    output = next(n for n in gm.graph.nodes if n.op == "output")
    results = output.args[0]
    values = list(results) if isinstance(results, (tuple, list)) else [results]
    views: List[Optional[int]] = []
    for value in values:
        while isinstance(value, torch.fx.Node) and value not in placeholders:
            value = _view_source(gm, value)
        views.append(placeholders.index(value) if value is not None else None)
    return views


def _view_source(gm: torch.fx.GraphModule, node: torch.fx.Node) -> Any:
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
            views = _output_views(getattr(gm, str(source.target)))
            index = node.args[1]
            if isinstance(index, int) and views[index] is not None:
                return source.args[views[index]]
            return None
        return source if _view_source(gm, source) is not None else None
    if node.op == "call_module" and not _is_trt_call(node):
        views = _output_views(getattr(gm, str(node.target)))
        if len(views) == 1 and views[0] is not None:
            return node.args[views[0]]
    return None


def _aliases(gm: torch.fx.GraphModule, node: torch.fx.Node) -> Set[torch.fx.Node]:
    """``node``, the tensor it is a view of, and every view of either."""
    root = node
    while (source := _view_source(gm, root)) is not None:
        root = source
    aliases, pending = set(), [root]
    while pending:
        current = pending.pop()
        if current in aliases:
            continue
        aliases.add(current)
        pending.extend(u for u in current.users if _view_source(gm, u) is current)
    return aliases


def _writes_back(node: torch.fx.Node, aliases: Set[torch.fx.Node]) -> bool:
    return is_write_back(node) and node.args[0] in aliases


def _old_value_readers(
    gm: torch.fx.GraphModule,
    aliases: Set[torch.fx.Node],
    after: Optional[torch.fx.Node],
) -> List[str]:
    """Nodes after ``after`` that read ``aliases`` before its new value is written."""
    readers: List[str] = []
    nodes = list(gm.graph.nodes)
    start = nodes.index(after) + 1 if after is not None else 0
    for node in nodes[start:]:
        if _writes_back(node, aliases):
            return readers  # from here on the memory holds the new value
        if node in aliases:
            continue  # a view: its readers are what counts
        read = [arg for arg in node.all_input_nodes if arg in aliases]
        if not read or (node.op == "output" and after is None):
            continue  # a submodule's outputs are followed in the parent graph
        if node.op == "call_module" and not _is_trt_call(node):
            inner, written = _submodule_readers(gm, node, read)
            readers.extend(f"{node.name}.{name}" for name in inner)
            if written:
                return readers
        else:
            readers.append(node.name)
    return readers


def _submodule_readers(
    gm: torch.fx.GraphModule, call: torch.fx.Node, read: List[torch.fx.Node]
) -> Tuple[List[str], bool]:
    """Old-value readers inside the PyTorch submodule ``call`` runs, and whether it
    writes the new value back."""
    submodule = getattr(gm, str(call.target))
    placeholders = [n for n in submodule.graph.nodes if n.op == "placeholder"]
    inner: Set[torch.fx.Node] = set()
    for position, value in enumerate(call.args):
        if value in read:
            inner |= _aliases(submodule, placeholders[position])
    readers = _old_value_readers(submodule, inner, None)
    written = any(_writes_back(n, inner) for n in submodule.graph.nodes)
    return readers, written


def isolate_in_place_engine_inputs(partitioned_module: torch.fx.GraphModule) -> None:
    """Give a TensorRT engine a copy of each in-place input whose old value is read later."""
    changed = False
    for call in list(partitioned_module.graph.nodes):
        if not _is_trt_call(call):
            continue
        submodule = getattr(partitioned_module, str(call.target))
        for position in in_place_engine_inputs(submodule):
            state = call.args[position]
            if not isinstance(state, torch.fx.Node):
                continue
            aliases = _aliases(partitioned_module, state)
            readers = [
                f"{call.name} (another input)"
                for i, other in enumerate(call.args)
                if i != position and other in aliases
            ]
            readers += _old_value_readers(partitioned_module, aliases, call)
            if not readers:
                continue
            with partitioned_module.graph.inserting_before(call):
                copy = partitioned_module.graph.call_function(
                    torch.ops.aten.clone.default, (state,)
                )
            copy.meta.update(
                {k: v for k, v in state.meta.items() if k in ("val", "tensor_meta")}
            )
            call.update_arg(position, copy)
            changed = True
            logger.warning(
                f"Input '{state.name}' of TensorRT engine '{call.target}' is updated "
                "in place by an in-place plugin, but its old value is still read "
                f"afterwards by {', '.join(readers)}. The engine gets a copy of "
                f"'{state.name}' instead; its new value is written back as usual."
            )
    if changed:
        partitioned_module.graph.lint()
        partitioned_module.recompile()
