"""Compute a size read from a graph input next to each of its users.

A size of a graph input (``aten.sym_size.int(q, 1)``, a start taken from a
prefix's length) and the integer arithmetic on it (``start + 1``) are shared
by every node that uses them. When the partitioners cut the graph between
the size and a user (a custom op run in PyTorch in between), the size
becomes an engine's input: a shape tensor, which TensorRT-RTX failed to build
("setShapeInterval was not called for tensor"), and which the engine could
have computed from the input itself. This pass gives each user its own copy
of the size's computation, inserted just before it, so that the size is
computed in whichever engine or PyTorch submodule takes the user; the
originals are removed once unused. The partitioners may still put a copy
into an earlier engine (they place a node as soon as its inputs are ready):
after partitioning, :func:`sizes_in_the_engines_that_use_them` moves it into
the engine that takes it.
"""

from __future__ import annotations

import logging
import operator
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch_tensorrt.dynamo._settings import CompilationSettings
from torch_tensorrt.dynamo.lowering.passes.pass_utils import (
    clean_up_graph_after_modifications,
)

logger = logging.getLogger(__name__)

_ARITHMETIC = (
    operator.add,
    operator.sub,
    operator.mul,
    operator.floordiv,
    operator.neg,
)


def _size_chain(node: torch.fx.Node, depth: int = 4) -> Optional[List[torch.fx.Node]]:
    """The nodes computing ``node`` from sizes of graph inputs, inputs first; or None."""
    if node.op != "call_function" or depth == 0:
        return None
    if node.target is torch.ops.aten.sym_size.int:
        source = node.args[0]
        if isinstance(source, torch.fx.Node) and source.op == "placeholder":
            return [node]
        return None
    if node.target not in _ARITHMETIC:
        return None
    chain: List[torch.fx.Node] = []
    for arg in node.args:
        if isinstance(arg, torch.fx.Node):
            sub = _size_chain(arg, depth - 1)
            if sub is None:
                return None
            chain.extend(n for n in sub if n not in chain)
        elif not isinstance(arg, int):
            return None
    return chain + [node]


def sizes_next_to_their_users(
    gm: torch.fx.GraphModule, settings: CompilationSettings
) -> torch.fx.GraphModule:
    """Give every user of a size of a graph input its own computation of it."""
    copied = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target in _ARITHMETIC:
            continue
        if node.target is torch.ops.aten.sym_size.int:
            continue
        copies: Dict[torch.fx.Node, torch.fx.Node] = {}
        for arg in list(node.all_input_nodes):
            chain = _size_chain(arg)
            if chain is None:
                continue
            with gm.graph.inserting_before(node):
                for original in chain:
                    if original not in copies:
                        copies[original] = gm.graph.node_copy(
                            original, lambda n, made=copies: made.get(n, n)
                        )
            node.replace_input_with(arg, copies[arg])
            copied += 1
    if copied:
        gm = clean_up_graph_after_modifications(gm)
        logger.debug(f"Sizes computed next to {copied} of their users:\n{gm.graph}")
    return gm


def sizes_in_the_engines_that_use_them(parent: torch.fx.GraphModule) -> int:
    """Compute in each engine the sizes of graph inputs it takes as numbers.

    The pass above puts a size next to each user, but the partitioners place a
    node as soon as its inputs are ready, so a size of a graph input can still
    land in an earlier engine or PyTorch submodule and reach its user's engine
    as a number: a shape tensor input. This moves each such size into the
    engine (``_run_on_acc`` submodule) that takes it: the engine takes the
    graph input instead, or reuses its own, and computes the size from it.
    Returns the number of engine inputs replaced.
    """
    replaced = 0
    for call in list(parent.graph.nodes):
        if call.op != "call_module" or "_run_on_acc" not in str(call.target):
            continue
        engine = parent.get_submodule(str(call.target))
        for placeholder in _placeholders(engine.graph):
            if isinstance(placeholder.meta.get("val"), torch.Tensor):
                continue
            found = _size_source(
                parent, call.args[_placeholders(engine.graph).index(placeholder)]
            )
            if found is None:
                continue
            chain, sources = found
            # placeholders are the engine's arguments in order: a new one comes
            # first, before every node, and its graph input first among the args
            copies: Dict[torch.fx.Node, torch.fx.Node] = {}
            for inner, outer in sources.items():
                taken = dict(zip(call.args, _placeholders(engine.graph)))
                if outer not in taken:
                    with engine.graph.inserting_before(next(iter(engine.graph.nodes))):
                        taken[outer] = engine.graph.placeholder(outer.name)
                    taken[outer].meta = dict(outer.meta)
                    call.args = (outer, *call.args)
                copies[inner] = taken[outer]
            with engine.graph.inserting_before(next(iter(placeholder.users))):
                for original in chain:
                    copies[original] = engine.graph.node_copy(
                        original, lambda n, made=copies: made[n]
                    )
            k = _placeholders(engine.graph).index(placeholder)
            placeholder.replace_all_uses_with(copies[chain[-1]])
            engine.graph.erase_node(placeholder)
            call.args = call.args[:k] + call.args[k + 1 :]
            engine.recompile()
            replaced += 1
    if replaced:
        parent.recompile()
        logger.debug(f"{replaced} size(s) of graph inputs moved into their engines")
    return replaced


def _placeholders(graph: torch.fx.Graph) -> List[torch.fx.Node]:
    return [n for n in graph.nodes if n.op == "placeholder"]


def _size_source(
    parent: torch.fx.GraphModule, value: Any
) -> Optional[Tuple[List[torch.fx.Node], Dict[torch.fx.Node, torch.fx.Node]]]:
    """The chain computing ``value`` from sizes of the parent's graph inputs (in the
    parent or in the submodule that returns it), and each placeholder the chain
    reads mapped to the parent's graph input; or None."""
    if not isinstance(value, torch.fx.Node):
        return None
    graph_args: Sequence[Any] = ()
    node: Any = value
    if value.op == "call_function" and value.target is operator.getitem:
        producer, index = value.args
        if not isinstance(producer, torch.fx.Node) or producer.op != "call_module":
            return None
        inner = parent.get_submodule(str(producer.target))
        node = _output_values(inner.graph)[index]
        graph_args = producer.args
    elif value.op == "call_module":
        inner = parent.get_submodule(str(value.target))
        (node,) = _output_values(inner.graph)
        graph_args = value.args
    if not isinstance(node, torch.fx.Node):
        return None
    chain = _size_chain(node)
    if chain is None:
        return None
    sources: Dict[torch.fx.Node, torch.fx.Node] = {}
    for size in chain:
        if size.target is torch.ops.aten.sym_size.int:
            tensor = size.args[0]
            if graph_args:  # a placeholder of the producer: its argument
                tensor = graph_args[_placeholders(tensor.graph).index(tensor)]
            if not isinstance(tensor, torch.fx.Node) or tensor.op != "placeholder":
                return None
            sources[size.args[0]] = tensor
    return chain, sources


def _output_values(graph: torch.fx.Graph) -> List[Any]:
    (output,) = [n for n in graph.nodes if n.op == "output"]
    values = output.args[0]
    return list(values) if isinstance(values, (tuple, list)) else [values]
