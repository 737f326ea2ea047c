"""The ops of a graph that no converter takes, named for the user when the graph
must be one engine: a mutating custom op by itself and the arguments it writes
(not ``auto_functionalized``), an op whose converters all refuse the call with the
tensors it got, a tensor read as a number (``.item()``) as such."""

from __future__ import annotations

import logging
import operator
from typing import Any, Dict, Sequence

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
    from torch_tensorrt.dynamo.conversion._functionalized_op import mutated_arguments

    written = [f"'{a.name}'" for a in mutated_arguments(op._schema)]
    if not written:
        return op_name(op)
    return f"{op_name(op)} (writes {', '.join(written)} in place)"


def _unsupported_nodes(gm: torch.fx.GraphModule) -> Dict[Any, torch.fx.Node]:
    """The ops of ``gm`` no registered converter takes, each with its first node."""
    from torch_tensorrt.dynamo.conversion._ConverterRegistry import (
        DYNAMO_CONVERTERS,
    )
    from torch_tensorrt.dynamo.conversion._functionalized_op import is_write_back

    found: Dict[Any, torch.fx.Node] = {}
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if is_write_back(node) or node in DYNAMO_CONVERTERS:
            continue
        found.setdefault(_user_op(node), node)
    return found


def _tensor_text(value: Any) -> str:
    """``int32 [s0, 8, 16, 64]``: a tensor argument as its dtype and sizes."""
    val = value.meta.get("val") if isinstance(value, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor):
        return ""
    dtype = str(val.dtype).replace("torch.", "")
    sizes = [str(size) if isinstance(size, int) else "dynamic" for size in val.shape]
    return f"{dtype} [{', '.join(sizes)}]"


def _called_with(node: torch.fx.Node) -> str:
    """The tensors ``node`` was called with: ``called with int32 [dynamic, 8]``."""
    texts = [t for t in map(_tensor_text, node.all_input_nodes) if t]
    return f"called with {', '.join(texts)}" if texts else "called here"


def _spelled(op: Any) -> str:
    if isinstance(op, torch._ops.OpOverload):
        return f"torch.ops.{op_name(op)}.{op._overloadname}"
    return "<op>"


_RUN_IN_PYTORCH = (
    "or let torch_tensorrt.dynamo.compile() run it in PyTorch "
    "(require_full_compilation=False)."
)


def _item_message(what: str) -> str:
    return (
        f"{what} converts every op to TensorRT, and the model reads a tensor as a "
        "Python number (aten._local_scalar_dense: .item(), int(t), float(t)), "
        "which an engine cannot hand back to the model while it runs. Keep the "
        "value a tensor (a position for index_copy_ or index_select, a mask, "
        "torch.where), " + _RUN_IN_PYTORCH
    )


def _refused_message(op: Any, node: torch.fx.Node, what: str) -> str:
    return (
        f"{what} converts every op to TensorRT, and the converters of "
        f"{_described(op)} all refuse it as {_called_with(node)}. Call it with "
        "dtypes and sizes its converters take, register a converter that takes "
        "this call with @torch_tensorrt.dynamo.conversion.dynamo_tensorrt_converter"
        f"({_spelled(op)}, priority=torch_tensorrt.dynamo.conversion.ConverterPriority"
        ".HIGH), " + _RUN_IN_PYTORCH
    )


def no_converter_message(ops: Sequence[Any], what: str) -> str:
    """``what`` needs a converter for each of ``ops``; how to give one."""
    names = ", ".join(_described(op) for op in ops)
    these = "this op has" if len(ops) == 1 else "these ops have"
    return (
        f"{what} converts every op to TensorRT, and {these} no converter: {names}. "
        "Register one with @torch_tensorrt.dynamo.conversion.dynamo_tensorrt_converter"
        f"({_spelled(ops[0])}) (or make one for a TensorRT plugin with "
        "torch_tensorrt.dynamo.conversion.plugins.generate_plugin_converter), "
        + _RUN_IN_PYTORCH
    )


def full_compilation_error(gm: torch.fx.GraphModule, what: str, fallback: str) -> str:
    """The message for a graph that cannot be one engine: a tensor read as a
    number, else the op whose converters refuse its call, else the ops without
    a converter, else ``fallback``; the graph at debug level."""
    from torch_tensorrt.dynamo.conversion._ConverterRegistry import DYNAMO_CONVERTERS

    logger.debug(f"The graph {what} could not convert entirely:\n{gm.graph}")
    nodes = _unsupported_nodes(gm)
    if torch.ops.aten._local_scalar_dense.default in nodes:
        return _item_message(what)
    refused = [(op, n) for op, n in nodes.items() if n.target in DYNAMO_CONVERTERS]
    if refused:
        return _refused_message(*refused[0], what)
    return no_converter_message(list(nodes), what) if nodes else fallback
