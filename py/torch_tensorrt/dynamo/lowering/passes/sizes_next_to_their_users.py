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
from typing import Any, Dict, List, Optional, Tuple

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


def sizes_in_the_engines_that_use_them(parent: torch.fx.GraphModule) -> None:
    """Compute in each engine (``_run_on_acc`` submodule) the sizes of graph inputs
    it would take as numbers from an earlier submodule or the parent graph: the
    engine takes the graph input instead (or reuses its own) and the size's
    computation is copied in before its first user."""
    for call in list(parent.graph.nodes):
        if call.op != "call_module" or "_run_on_acc" not in str(call.target):
            continue
        engine = parent.get_submodule(str(call.target))
        for placeholder in _placeholders(engine):
            k = _placeholders(engine).index(placeholder)
            found = _size_source(parent, call.args[k])
            val = placeholder.meta.get("val")
            if found is None or isinstance(val, torch.Tensor) or not placeholder.users:
                continue
            chain, sources = found
            copies: Dict[torch.fx.Node, torch.fx.Node] = {}
            for inner, outer in sources.items():
                if outer not in call.args:
                    # placeholders are the engine's arguments in order: a new
                    # one comes first, and so does its graph input
                    with engine.graph.inserting_before(next(iter(engine.graph.nodes))):
                        engine.graph.placeholder(outer.name).meta = dict(outer.meta)
                    call.args = (outer, *call.args)
                copies[inner] = _placeholders(engine)[call.args.index(outer)]
            with engine.graph.inserting_before(next(iter(placeholder.users))):
                for original in chain:
                    copies[original] = engine.graph.node_copy(
                        original, copies.__getitem__
                    )
            k = _placeholders(engine).index(placeholder)
            placeholder.replace_all_uses_with(copies[chain[-1]])
            engine.graph.erase_node(placeholder)
            call.args = call.args[:k] + call.args[k + 1 :]
            engine.recompile()
    parent.recompile()


def _placeholders(module: Any) -> List[torch.fx.Node]:
    return [n for n in module.graph.nodes if n.op == "placeholder"]


def _size_source(
    parent: torch.fx.GraphModule, value: Any
) -> Optional[Tuple[List[torch.fx.Node], Dict[torch.fx.Node, torch.fx.Node]]]:
    """The chain computing ``value`` from sizes of the parent's graph inputs, in the
    parent or in the submodule returning it, and the parent's graph input of each
    tensor the chain reads; or None."""
    if not isinstance(value, torch.fx.Node):
        return None
    producer, index = value, 0
    if value.target is operator.getitem:
        producer, index = value.args
    node, module = value, None
    if isinstance(producer, torch.fx.Node) and producer.op == "call_module":
        module = parent.get_submodule(str(producer.target))
        (output,) = [n for n in module.graph.nodes if n.op == "output"]
        outputs = output.args[0]
        node = outputs[index] if isinstance(outputs, (tuple, list)) else outputs
    chain = _size_chain(node) if isinstance(node, torch.fx.Node) else None
    if chain is None:
        return None
    sources = {}
    for size in (n for n in chain if n.target is torch.ops.aten.sym_size.int):
        tensor = size.args[0]
        if module is not None:  # the producer's placeholder: its argument
            tensor = producer.args[_placeholders(module).index(tensor)]
        if not isinstance(tensor, torch.fx.Node) or tensor.op != "placeholder":
            return None
        sources[size.args[0]] = tensor
    return chain, sources
