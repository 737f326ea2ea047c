"""Functional form of an op that mutates its tensor arguments.

``lower_auto_functionalized`` rewrites ``auto_functionalized(_v2)`` into calls of
:class:`FunctionalizedOp`, which the converter registry resolves to the op's own
converters, validators and support flags. The op's converter returns the op's
returns, then the new value of each mutated argument in schema order; one that
computes them in the arguments' memory (an in-place plugin) declares
``requires_aliased_plugin_io=True``, and ``lowering/_state_plan.py`` decides where
that happens in place.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Dict, List, Sequence, Tuple

import torch
from torch_tensorrt.dynamo.utils import is_write_back  # noqa: F401 (imported from here)
from torch_tensorrt.dynamo.utils import STATE_PLAN


def mutated_arguments(schema: torch.FunctionSchema) -> List[torch.Argument]:
    """Schema arguments the op writes to (``Tensor(a!)``), in schema order."""
    return [
        arg
        for arg in schema.arguments
        if arg.alias_info is not None and arg.alias_info.is_write
    ]


def arguments(
    op: torch._ops.OpOverload, args: Sequence[Any], kwargs: Dict[str, Any]
) -> Dict[str, Any]:
    """The arguments of a call of ``op`` by schema name"""
    return dict(zip((arg.name for arg in op._schema.arguments), args), **kwargs)


def __getattr__(name: str) -> FunctionalizedOp:
    """Resolve ``functionalized_<ns>_<op>_<overload>`` (as FX code and pickles do)."""
    parts = name.split("_") if name.startswith("functionalized_") else []
    # the op name may contain underscores: try each split into ns / op / overload
    for i in range(2, len(parts) - 1):
        for j in range(i + 1, len(parts)):
            ns, op_name, overload = (
                "_".join(p) for p in (parts[1:i], parts[i:j], parts[j:])
            )
            packet = getattr(getattr(torch.ops, ns, None), op_name, None)
            op = getattr(packet, overload, None)
            if (
                isinstance(op, torch._ops.OpOverload)
                and mutated_arguments(op._schema)
                and FunctionalizedOp(op).__name__ == name
            ):
                return FunctionalizedOp(op)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class FunctionalizedOp:
    """FX target: ``op`` without side effects; one instance per op overload"""

    _instances: Dict[torch._ops.OpOverload, FunctionalizedOp] = {}

    op: torch._ops.OpOverload
    mutated: Tuple[str, ...]
    num_returns: int

    def __new__(cls, op: torch._ops.OpOverload) -> FunctionalizedOp:
        if op in cls._instances:
            return cls._instances[op]
        if not isinstance(op, torch._ops.OpOverload):
            raise TypeError(f"FunctionalizedOp needs an OpOverload, got {op!r}")
        if not mutated_arguments(op._schema):
            raise ValueError(f"{op} does not mutate any argument")
        self = super().__new__(cls)
        self.op = op
        self.mutated = tuple(arg.name for arg in mutated_arguments(op._schema))
        self.num_returns = len(op._schema.returns)
        # FX code generation and logging name the target by these
        namespace, name = op._schema.name.split("::")
        self.__name__ = f"functionalized_{namespace}_{name}_{op._overloadname}"
        self.__qualname__, self.__module__ = self.__name__, __name__
        cls._instances[op] = self
        return self

    def __deepcopy__(self, memo: Dict[int, Any]) -> FunctionalizedOp:
        return self  # one instance per op (copying a graph module copies targets)

    def __reduce__(self) -> str:
        return str(self.__name__)  # pickled by reference (the module's __getattr__)

    def __repr__(self) -> str:
        return f"FunctionalizedOp({self.op})"

    @property
    def num_outputs(self) -> int:
        """Length of the output tuple: the op's returns, then the mutated arguments."""
        return self.num_returns + len(self.mutated)

    def __call__(self, *args: Any, **kwargs: Any) -> Tuple[Any, ...]:
        """The op on clones of its mutated arguments: ``(*returns, *new_values)``"""
        bound = arguments(self.op, args, kwargs)
        for name in self.mutated:
            if bound.get(name) is not None:
                bound[name] = bound[name].clone()
        out = self.op(**bound)
        returns = tuple(out) if self.num_returns > 1 else (out,)[: self.num_returns]
        return (*returns, *(bound.get(name) for name in self.mutated))

    def adapt_converter(self, converter: Callable[..., Any]) -> Callable[..., Any]:
        """Wrap the op's converter: it sees the op as target; outputs are checked."""

        def convert_functionalized(
            ctx: Any, target: Any, args: Any, kwargs: Any, name: str
        ) -> Tuple[Any, ...]:
            outputs = converter(ctx, self.op, args, kwargs, name)
            if not isinstance(outputs, (tuple, list)):
                outputs = (outputs,)
            if len(outputs) != self.num_outputs:
                raise RuntimeError(
                    f"The converter for {self.op} returned {len(outputs)} tensor(s); "
                    f"it must return the op's {self.num_returns} return(s), then "
                    f"the new value of each mutated argument {list(self.mutated)}"
                )
            missing = [k for k, out in enumerate(outputs) if out is None]
            if missing:
                k = missing[0]
                what = (
                    f"return {k}"
                    if k < self.num_returns
                    else f"new value of '{self.mutated[k - self.num_returns]}'"
                )
                raise RuntimeError(
                    f"The converter for {self.op} returned None for {what}; it must "
                    "return a TensorRT tensor for each of the op's returns and "
                    f"mutated arguments {list(self.mutated)}"
                )
            node = getattr(ctx, "current_node", None)
            if node is not None and updates_in_place(node):
                record_in_place_outputs(ctx, node, outputs)
            return tuple(outputs)

        return convert_functionalized


def mutated_values(node: torch.fx.Node) -> Dict[str, Any]:
    """The values a :class:`FunctionalizedOp` call passes for its mutated arguments."""
    target = node.target
    assert isinstance(target, FunctionalizedOp)
    bound = arguments(target.op, node.args, node.kwargs)
    return {name: bound.get(name) for name in target.mutated}


def updates_in_place(node: torch.fx.Node) -> bool:
    """Whether the converter of ``node`` declares ``requires_aliased_plugin_io``."""
    from torch_tensorrt.dynamo.conversion._ConverterRegistry import (
        DYNAMO_CONVERTERS,
    )

    converter = DYNAMO_CONVERTERS.get(node)
    return converter is not None and bool(
        converter[2].get("requires_aliased_plugin_io")
    )


def record_in_place_outputs(
    ctx: Any, node: torch.fx.Node, outputs: Sequence[Any]
) -> None:
    """Record as ``user`` aliases the new values ``node``'s converter computes in
    engine inputs' memory: exactly the inputs whose ``STATE_PLAN`` row puts them in
    place by their op with a value this call computes (``write``); the plan's rules
    are not checked again."""
    from torch_tensorrt.dynamo.conversion._ConversionContext import (
        AliasedOutput,
        AliasKind,
    )

    op = node.target
    assert isinstance(op, FunctionalizedOp)
    placeholders = [n for n in node.graph.nodes if n.op == "placeholder"]
    written = {
        row.write: (position, state)
        for position, state in enumerate(placeholders)
        for row in [state.meta.get(STATE_PLAN)]
        if row is not None and row.in_place and row.by_its_op
    }
    for user in node.users:
        if user.target is not operator.getitem or user.name not in written:
            continue
        k = user.args[1] - op.num_returns
        position, state = written[user.name]
        # the interpreter adds one network input per placeholder
        network_input = ctx.net.get_input(position)
        output = outputs[user.args[1]]
        _check_in_place_binding(ctx, op, op.mutated[k], state, network_input, output)
        ctx.aliased_outputs.append(
            AliasedOutput(output, str(network_input.name), AliasKind.USER)
        )


def why_not_written_in_place(ctx: Any, tensor: Any) -> str:
    """Why TensorRT does not compute ``tensor`` in an input's memory, as for a plugin's
    aliased output (checked by the plugin converter) or IKVCacheUpdateLayer's."""
    for i in range(ctx.net.num_layers):
        layer = ctx.net.get_layer(i)
        if any(
            layer.get_output(j).name == tensor.name for j in range(layer.num_outputs)
        ):
            kind = str(layer.type.name)
            return "" if kind in ("PLUGIN_V3", "KV_CACHE_UPDATE") else f"a {kind} layer"
    return "no layer"


def _check_in_place_binding(
    ctx: Any,
    op: FunctionalizedOp,
    arg: str,
    state: torch.fx.Node,
    network_input: Any,
    output: Any,
) -> None:
    """Raise if ``output`` cannot be bound to the memory of ``network_input``."""
    binding = network_input.name
    reason = why_not_written_in_place(ctx, output)
    if reason:
        raise ValueError(
            f"The converter of {op.op} declares requires_aliased_plugin_io, but "
            f"computes the new value of input '{binding}' with {reason}; only a "
            "plugin output aliased to the input or IKVCacheUpdateLayer updates an "
            "input in place"
        )
    if output.dtype != network_input.dtype or tuple(output.shape) != tuple(
        network_input.shape
    ):
        raise ValueError(
            f"{op.op}: the output updating argument '{arg}' in place is "
            f"{output.dtype} {tuple(output.shape)}, but engine input '{binding}' is "
            f"{network_input.dtype} {tuple(network_input.shape)}; an output updating "
            "an input in place must have the input's dtype and shape"
        )
    fake = state.meta.get("val")
    if isinstance(fake, torch.Tensor) and not fake.is_contiguous():
        raise ValueError(
            f"{op.op}: argument '{arg}' (engine input '{binding}') is updated in "
            f"place, but the example tensor is not contiguous (strides {fake.stride()})"
            "; TensorRT binds contiguous memory, so the update would reach a copy. "
            "Compile and call with a contiguous tensor (e.g. .contiguous())"
        )
    for entry in ctx.aliased_outputs:
        if entry.input_binding_name == binding:
            raise ValueError(
                f"{op.op}: engine input '{binding}' (argument '{arg}') would be "
                f"updated in place by two outputs ('{entry.output_tensor.name}' and "
                "this one); an input can be aliased by one output only"
            )
