"""No copy of a state onto itself after an engine wrote it in place.

The partitioned graph writes every new state value back (``aten.copy_``): in the
graph, in a PyTorch submodule or, for a lifted buffer, in the code the module's
output generates. For a state an engine wrote in place (its output is bound to
the state's memory, see ``aliased_io``), the value copied is the state's own
tensor: a copy onto itself, one dispatch per state on every call.
:func:`drop_write_backs_of_in_place_outputs` removes those write-backs once the
engines exist.
"""

from __future__ import annotations

import logging
import operator
from typing import Dict

import torch
from torch_tensorrt.dynamo.runtime._in_place_outputs import engine_in_place_inputs
from torch_tensorrt.dynamo.utils import is_write_back

logger = logging.getLogger(__name__)


def _in_place_values(gm: torch.fx.GraphModule) -> Dict[torch.fx.Node, torch.fx.Node]:
    """Each node holding an engine's in-place output -> the engine's argument it is.

    At run time such a value is the argument's tensor itself
    (:func:`with_inputs_written_in_place`; the C++ runtime returns the bound
    input), already holding the new value.
    """
    values: Dict[torch.fx.Node, torch.fx.Node] = {}
    for node in gm.graph.nodes:
        if node.op != "call_module":
            continue
        pairs = dict(engine_in_place_inputs(gm.get_submodule(str(node.target))))
        if not pairs:
            continue
        if 0 in pairs and not any(u.target is operator.getitem for u in node.users):
            # one output: the module returns it bare, not in a tuple
            argument = node.args[pairs[0]]
            if isinstance(argument, torch.fx.Node):
                values[node] = argument
            continue
        for user in node.users:
            if (
                user.op == "call_function"
                and user.target is operator.getitem
                and user.args[1] in pairs
            ):
                argument = node.args[pairs[user.args[1]]]
                if isinstance(argument, torch.fx.Node):
                    values[user] = argument
    return values


def _drop_in_submodule(
    gm: torch.fx.GraphModule,
    call: torch.fx.Node,
    in_place: Dict[torch.fx.Node, torch.fx.Node],
) -> int:
    """Drop the write-backs of in-place values inside a PyTorch submodule."""
    submodule = gm.get_submodule(str(call.target))
    if not isinstance(submodule, torch.fx.GraphModule):
        return 0
    placeholders = [n for n in submodule.graph.nodes if n.op == "placeholder"]
    outer = dict(zip(placeholders, call.args))
    dropped = 0
    for node in list(submodule.graph.nodes):
        if (
            is_write_back(node)
            and not node.users
            and isinstance(node.args[1], torch.fx.Node)
            and outer.get(node.args[0]) is not None
            and in_place.get(outer.get(node.args[1])) is outer[node.args[0]]
        ):
            submodule.graph.erase_node(node)
            dropped += 1
    if not dropped:
        return 0
    submodule.recompile()
    rest = [n for n in submodule.graph.nodes if n.op not in ("placeholder", "output")]
    if not rest and not call.users:
        # nothing left to run
        gm.graph.erase_node(call)
        delattr(gm, str(call.target))
    return dropped


def drop_write_backs_of_in_place_outputs(gm: torch.fx.GraphModule) -> int:
    """Remove the copies of an engine's in-place outputs onto their own inputs (see
    the module docstring). Run once the engines exist and their aliases were checked
    against the state plan; returns how many were dropped. The states stay known as
    written (``runtime/_input_mutations.py`` reads the engines' aliases too)."""
    in_place = _in_place_values(gm)
    if not in_place:
        return 0
    dropped = 0
    for node in list(gm.graph.nodes):
        if is_write_back(node):
            value = node.args[1]
            if (
                not node.users
                and isinstance(value, torch.fx.Node)
                and in_place.get(value) is node.args[0]
            ):
                gm.graph.erase_node(node)
                dropped += 1
        elif node.op == "call_module" and not engine_in_place_inputs(
            gm.get_submodule(str(node.target))
        ):
            dropped += _drop_in_submodule(gm, node, in_place)
    codegen = gm.graph._codegen
    buffers = getattr(codegen, "write_back_buffers", None)
    if buffers:
        # hidden outputs, the last ones, copied into the buffers in this order
        output = next(n for n in gm.graph.nodes if n.op == "output")
        hidden = list(output.args[0])[-len(buffers) :]
        skipped = {
            buffer
            for buffer, value in zip(buffers, hidden)
            if isinstance(value, torch.fx.Node)
            and in_place.get(value) is not None
            and in_place[value].op == "get_attr"
            and in_place[value].target == buffer
        }
        if skipped:
            codegen.written_in_place = sorted(skipped)
            dropped += len(skipped)
    for value in in_place:
        if not value.users and value.op != "call_module":
            gm.graph.erase_node(value)  # a getitem read by nothing now
    if dropped:
        gm.recompile()
        logger.debug(f"{dropped} write-back(s) of states written in place dropped")
    return dropped
