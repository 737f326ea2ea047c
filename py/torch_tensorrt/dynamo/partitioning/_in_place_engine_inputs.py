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

Those reads would see the new value. Conversely, the runtimes bind the engine
output holding the state's final value in the engine to that same memory (a
``user`` alias), so a read of that output after something else is written into
the memory (a write-back of a later value) would see the wrong value too.

:func:`isolate_in_place_engine_inputs` finds both in the partitioned graph,
before any engine is built, and gives the engine a copy of such an input
(``aten.clone``) with a warning that names the tensor and its readers: the
engine updates the copy, and the usual write-back copies the new value into the
original. Inputs nobody reads afterwards, the common case of a state updated by
one plugin, keep being updated in place.
"""

from __future__ import annotations

import logging
import operator
from typing import Any, List, Optional, Set, Tuple

import torch
from torch_tensorrt.dynamo.conversion._functionalized_op import (
    in_place_source,
    in_place_writer,
    is_write_back,
    updated_again,
)

logger = logging.getLogger(__name__)

_TRT_SUBMODULE_MARKER = "_run_on_acc"


def in_place_engine_inputs(submodule: torch.fx.GraphModule) -> List[int]:
    """Positions of the inputs of ``submodule`` that its engine writes in place."""
    placeholders = [n for n in submodule.graph.nodes if n.op == "placeholder"]
    return [i for i, p in enumerate(placeholders) if in_place_writer(p) is not None]


def _is_trt_call(node: torch.fx.Node) -> bool:
    return node.op == "call_module" and _TRT_SUBMODULE_MARKER in str(node.target)


def _outputs(gm: torch.fx.GraphModule) -> Tuple[List[Any], bool]:
    """The values ``gm`` returns, and whether it returns a single one (not a tuple)."""
    results = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    single = not isinstance(results, (tuple, list))
    return ([results] if single else list(results)), single


def _output_views(gm: torch.fx.GraphModule) -> List[Optional[int]]:
    """For each output of ``gm``: the input it is a view of, or ``None``."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    views: List[Optional[int]] = []
    for value in _outputs(gm)[0]:
        while isinstance(value, torch.fx.Node) and value not in placeholders:
            value = _view_source(gm, value)
        views.append(placeholders.index(value) if value in placeholders else None)
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


def _aliased_outputs(
    gm: torch.fx.GraphModule, call: torch.fx.Node, position: int
) -> Set[torch.fx.Node]:
    """Outputs of engine ``call`` that the runtime binds to its input ``position``.

    Those are the final values of that input's in-place updates in the engine
    (recorded as ``user`` aliases by the plugin converters): after the engine,
    they *are* the input's memory.
    """
    submodule = getattr(gm, str(call.target))
    placeholder = [n for n in submodule.graph.nodes if n.op == "placeholder"][position]
    values, single = _outputs(submodule)
    indices = {
        i
        for i, v in enumerate(values)
        if in_place_source(v) is placeholder and not updated_again(v)
    }
    if single:
        return {call} if indices else set()
    return {
        u for u in call.users if u.target is operator.getitem and u.args[1] in indices
    }


class _Memory:
    """What the memory of an engine input holds while the graph after the engine runs.

    Right after the engine it holds the engine's new value (``new``: the outputs
    bound to it) and no longer the old value the rest of the graph may expect
    (``old``: the input and its views). A write-back of the new value makes that
    expected; a write-back of anything else replaces the new value too.
    """

    def __init__(self, old: Set[torch.fx.Node], new: Set[torch.fx.Node]) -> None:
        self.old, self.new = old, new
        self.old_expected = True  # readers of `old` still expect the old value
        self.overwritten_by: Optional[str] = None  # what replaced `new`, if any

    def write(self, node: torch.fx.Node) -> bool:
        """Account for ``node`` if it writes the memory; whether it does."""
        if not (is_write_back(node) and node.args[0] in self.old | self.new):
            return False
        self.old_expected = False
        if self.overwritten_by is None and node.args[1] not in self.new:
            self.overwritten_by = node.name
        return True

    def stale(self, node: torch.fx.Node) -> Optional[str]:
        """Why ``node`` would read the memory with the wrong value, or ``None``."""
        inputs = node.all_input_nodes
        if self.old_expected and any(arg in self.old for arg in inputs):
            return "old value"
        if self.overwritten_by and any(arg in self.new for arg in inputs):
            return f"new value, after {self.overwritten_by}"
        return None


def _stale_readers(
    gm: torch.fx.GraphModule, memory: _Memory, after: Optional[torch.fx.Node]
) -> List[str]:
    """Nodes after ``after`` in ``gm`` that would read ``memory`` with the wrong value."""
    readers: List[str] = []
    nodes = list(gm.graph.nodes)
    start = nodes.index(after) + 1 if after is not None else 0
    for node in nodes[start:]:
        if memory.write(node) or node in memory.old | memory.new:
            continue  # a write-back, or a view whose readers are what counts
        if node.op == "output" and after is None:
            continue  # a submodule's outputs are followed in the parent graph
        if node.op == "call_module" and not _is_trt_call(node):
            readers.extend(_submodule_readers(gm, node, memory))
        elif (why := memory.stale(node)) is not None:
            readers.append(f"{node.name} ({why})")
    return readers


def _submodule_readers(
    gm: torch.fx.GraphModule, call: torch.fx.Node, memory: _Memory
) -> List[str]:
    """Stale readers inside the PyTorch submodule ``call`` runs; updates ``memory``."""
    submodule = getattr(gm, str(call.target))
    placeholders = [n for n in submodule.graph.nodes if n.op == "placeholder"]
    inner = _Memory(set(), set())
    for position, value in enumerate(call.args[: len(placeholders)]):
        if value in memory.old:
            inner.old |= _aliases(submodule, placeholders[position])
        if value in memory.new:
            inner.new |= _aliases(submodule, placeholders[position])
    inner.old_expected, inner.overwritten_by = (
        memory.old_expected,
        memory.overwritten_by,
    )
    readers = _stale_readers(submodule, inner, None)
    memory.old_expected = inner.old_expected
    if inner.overwritten_by and not memory.overwritten_by:
        memory.overwritten_by = f"{call.name}.{inner.overwritten_by}"
    return [f"{call.name}.{name}" for name in readers]


def isolate_in_place_engine_inputs(partitioned_module: torch.fx.GraphModule) -> None:
    """Give a TensorRT engine a copy of each in-place input read with a wrong value later.

    That is its old value read after the engine, or the engine's new value of it
    read after something else was written into its memory (see the module
    docstring); each such input gets an ``aten.clone`` and a warning.
    """
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
            new: Set[torch.fx.Node] = set()
            for output in _aliased_outputs(partitioned_module, call, position):
                new |= _aliases(partitioned_module, output)
            memory = _Memory(aliases, new)
            readers += _stale_readers(partitioned_module, memory, call)
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
                "in place by an in-place plugin, but its memory is read afterwards "
                f"by {', '.join(readers)}, expecting a value it no longer holds. The "
                f"engine gets a copy of '{state.name}' instead; its new value is "
                "written back as usual."
            )
    if changed:
        partitioned_module.graph.lint()
        partitioned_module.recompile()
