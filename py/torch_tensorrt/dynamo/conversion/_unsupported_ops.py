"""The ops of a graph that no converter takes, named for the user.

When a graph must become one TensorRT engine (a standalone engine, or
``require_full_compilation=True``) and some op has no converter, the error
names that op as the user wrote it: a mutating custom op reaches the
partitioner wrapped in ``auto_functionalized``, so it is named by the op itself
and the arguments it writes, not by the wrapper. The graph itself is logged at
debug level only.
"""

from __future__ import annotations

import logging
import operator
from typing import Any, List, Sequence

import torch
from torch._higher_order_ops.auto_functionalize import (
    auto_functionalized,
    auto_functionalized_v2,
)

logger = logging.getLogger(__name__)


def op_name(target: Any) -> str:
    """``namespace.op`` for an op overload (as ``torch.ops`` spells it), else its name."""
    if isinstance(target, torch._ops.OpOverload):
        return str(target._schema.name).replace("::", ".")
    return str(getattr(target, "__name__", target))


def _user_op(node: torch.fx.Node) -> Any:
    """The op the user wrote: a functionalized mutating op's own, else the target."""
    if node.target in (auto_functionalized, auto_functionalized_v2) and isinstance(
        node.args[0], torch._ops.OpOverload
    ):
        return node.args[0]
    return node.target


def _described(op: Any) -> str:
    if not isinstance(op, torch._ops.OpOverload):
        return op_name(op)
    written = [
        f"'{a.name}'"
        for a in op._schema.arguments
        if a.alias_info is not None and a.alias_info.is_write
    ]
    if not written:
        return op_name(op)
    return f"{op_name(op)} (writes {', '.join(written)} in place)"


def unsupported_ops(gm: torch.fx.GraphModule) -> List[Any]:
    """The ops of ``gm`` no registered converter takes, each once, in graph order.

    Write-backs (``aten.copy_`` into an input or buffer) are not among them: they
    run after the engine, whatever converts.
    """
    from torch_tensorrt.dynamo.conversion._ConverterRegistry import (
        DYNAMO_CONVERTERS,
    )
    from torch_tensorrt.dynamo.conversion._functionalized_op import is_write_back

    found: List[Any] = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if is_write_back(node) or node in DYNAMO_CONVERTERS:
            continue
        op = _user_op(node)
        if op not in found:
            found.append(op)
    return found


def _spelled(op: Any) -> str:
    if isinstance(op, torch._ops.OpOverload):
        return f"torch.ops.{op_name(op)}.{op._overloadname}"
    return "<op>"


def no_converter_message(ops: Sequence[Any], what: str) -> str:
    """``what`` needs a converter for each of ``ops``; how to give one."""
    names = ", ".join(_described(op) for op in ops)
    these = "this op has" if len(ops) == 1 else "these ops have"
    return (
        f"{what} converts every op to TensorRT, and {these} no converter: {names}. "
        "Register one with @torch_tensorrt.dynamo.conversion.dynamo_tensorrt_converter"
        f"({_spelled(ops[0])}) (or make one for a TensorRT plugin with "
        "torch_tensorrt.dynamo.conversion.plugins.generate_plugin_converter), or let "
        "torch_tensorrt.dynamo.compile() run it in PyTorch "
        "(require_full_compilation=False)."
    )


def full_compilation_error(gm: torch.fx.GraphModule, what: str, fallback: str) -> str:
    """The message for a graph that cannot be one engine: the ops without a
    converter if there are some, else ``fallback``; the graph at debug level."""
    logger.debug(f"The graph {what} could not convert entirely:\n{gm.graph}")
    ops = unsupported_ops(gm)
    return no_converter_message(ops, what) if ops else fallback
