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
originals are removed once unused.
"""

from __future__ import annotations

import logging
import operator
from typing import Dict, List, Optional

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
