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
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

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


class _Views:
    """Which outputs of each PyTorch submodule are views of which of its inputs.

    Computed once per submodule and pass: looking it up for every reader of
    every state made the pass quadratic in the number of states.
    """

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
            for value in _outputs(gm)[0]:
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


def _in_place_outputs(
    gm: torch.fx.GraphModule, call: torch.fx.Node
) -> Dict[int, Set[torch.fx.Node]]:
    """Per input position of engine ``call``: the outputs the runtime binds to it.

    Those are the final values of that input's in-place updates in the engine
    (recorded as ``user`` aliases by the plugin converters): after the engine,
    they *are* the input's memory. Each output is looked at once.
    """
    submodule = getattr(gm, str(call.target))
    position = {
        n: i
        for i, n in enumerate(n for n in submodule.graph.nodes if n.op == "placeholder")
    }
    values, single = _outputs(submodule)
    indices: Dict[int, Set[int]] = {}
    for i, value in enumerate(values):
        source = in_place_source(value)
        if source in position and not updated_again(value):
            indices.setdefault(position[source], set()).add(i)
    if single:
        return {p: {call} for p in indices}
    getitems: Dict[Any, List[torch.fx.Node]] = {}
    for user in call.users:
        if user.target is operator.getitem:
            getitems.setdefault(user.args[1], []).append(user)
    return {
        p: {u for i in outputs for u in getitems.get(i, [])}
        for p, outputs in indices.items()
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
        self.readers: List[str] = []  # who reads it with the wrong value

    def holds(self, node: Any) -> bool:
        return node in self.old or node in self.new

    def write(self, node: torch.fx.Node) -> bool:
        """Account for ``node`` if it writes the memory; whether it does."""
        if not (is_write_back(node) and self.holds(node.args[0])):
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


def _find_stale_readers(
    gm: torch.fx.GraphModule,
    memories: Sequence[_Memory],
    after: Optional[torch.fx.Node],
    views: _Views,
) -> None:
    """Record in each of ``memories`` the nodes after ``after`` in ``gm`` that read it
    with the wrong value.

    One walk of the graph for all of them: a node is looked at only for the
    memories it reads or writes (found through an index of their nodes).
    """
    index: Dict[torch.fx.Node, List[_Memory]] = {}
    for memory in memories:
        for node in memory.old | memory.new:
            index.setdefault(node, []).append(memory)
    started = after is None
    for node in gm.graph.nodes:
        if not started:
            started = node is after
            continue
        if node.op == "output" and after is None:
            continue  # a submodule's outputs are followed in the parent graph
        touched: Dict[int, _Memory] = {}
        for arg in node.all_input_nodes:
            for memory in index.get(arg, ()):
                touched[id(memory)] = memory
        own = {id(m) for m in index.get(node, ())}
        # a write-back, or a view whose readers are what counts
        pending = [m for k, m in touched.items() if k not in own and not m.write(node)]
        if not pending:
            continue
        if node.op == "call_module" and not _is_trt_call(node):
            _find_submodule_readers(gm, node, pending, views)
            continue
        for memory in pending:
            if (why := memory.stale(node)) is not None:
                memory.readers.append(f"{node.name} ({why})")


def _find_submodule_readers(
    gm: torch.fx.GraphModule,
    call: torch.fx.Node,
    memories: Sequence[_Memory],
    views: _Views,
) -> None:
    """Stale readers inside the PyTorch submodule ``call`` runs; updates ``memories``."""
    submodule = getattr(gm, str(call.target))
    placeholders = [n for n in submodule.graph.nodes if n.op == "placeholder"]
    positions: Dict[Any, List[int]] = {}
    for position, value in enumerate(call.args[: len(placeholders)]):
        positions.setdefault(value, []).append(position)
    inners = []
    for memory in memories:
        inner = _Memory(set(), set())
        for node in memory.old:
            for position in positions.get(node, ()):
                inner.old |= _aliases(submodule, placeholders[position], views)
        for node in memory.new:
            for position in positions.get(node, ()):
                inner.new |= _aliases(submodule, placeholders[position], views)
        inner.old_expected = memory.old_expected
        inner.overwritten_by = memory.overwritten_by
        inners.append(inner)
    _find_stale_readers(submodule, inners, None, views)
    for memory, inner in zip(memories, inners):
        memory.old_expected = inner.old_expected
        if inner.overwritten_by and not memory.overwritten_by:
            memory.overwritten_by = f"{call.name}.{inner.overwritten_by}"
        memory.readers += [f"{call.name}.{name}" for name in inner.readers]


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
    writes its new value back read a copy taken before it.

    The partitioners order submodules by their data only, and a write-back
    (``aten.copy_`` into an input) has no users: a PyTorch submodule holding a
    custom op run in PyTorch and the write-back of its result could run before
    an engine reading the state's old value (``r = s.sum(); my_op_(s)``), which
    then read the new one. Such readers get ``aten.clone`` of the state, taken
    just before the writer; the write-back itself is unchanged.
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
            if not isinstance(state, torch.fx.Node):
                continue
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
    """Give a TensorRT engine a copy of each in-place input read with a wrong value later.

    That is its old value read after the engine, or the engine's new value of it
    read after something else was written into its memory (see the module
    docstring); each such input gets an ``aten.clone`` and a warning. First,
    readers of a state's old value scheduled after a PyTorch submodule that
    writes it back get a copy (:func:`keep_old_values_for_later_readers`).
    """
    keep_old_values_for_later_readers(partitioned_module)
    changed = False
    views = _Views()
    for call in list(partitioned_module.graph.nodes):
        if not _is_trt_call(call):
            continue
        submodule = getattr(partitioned_module, str(call.target))
        in_place_outputs = _in_place_outputs(partitioned_module, call)
        states: Dict[int, _Memory] = {}
        for position in in_place_engine_inputs(submodule):
            state = call.args[position]
            if not isinstance(state, torch.fx.Node):
                continue
            aliases = _aliases(partitioned_module, state, views)
            new: Set[torch.fx.Node] = set()
            for output in in_place_outputs.get(position, ()):
                new |= _aliases(partitioned_module, output, views)
            memory = _Memory(aliases, new)
            memory.readers = [
                f"{call.name} (another input)"
                for i, other in enumerate(call.args)
                if i != position and other in aliases
            ]
            states[position] = memory
        _find_stale_readers(partitioned_module, list(states.values()), call, views)
        for position, memory in states.items():
            if not memory.readers:
                continue
            state = call.args[position]
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
                f"by {', '.join(memory.readers)}, expecting a value it no longer "
                f"holds. The engine gets a copy of '{state.name}' instead; its new "
                "value is written back as usual."
            )
    if changed:
        partitioned_module.graph.lint()
        partitioned_module.recompile()
