"""Functional form of an op that mutates its tensor arguments.

``torch.export`` functionalizes a mutating op (a ``torch.library.custom_op`` with
``mutates_args``, or any schema with ``Tensor(a!)`` arguments) into the
higher-order op ``auto_functionalized`` / ``auto_functionalized_v2``, which no
converter handles. The lowering pass ``lower_auto_functionalized`` rewrites that
into a call of :class:`FunctionalizedOp`, whose node has the op's own schema
arguments, so the op's converter is what the partitioner sees and converts.

Converter convention for mutating ops
-------------------------------------
A converter is registered on the op overload as usual
(``@dynamo_tensorrt_converter(torch.ops.ns.op.default)``). For an op that mutates
tensor arguments it returns a tuple: the op's own returns, then the new value of
each mutated tensor argument in schema order. A bare ITensor is accepted when
that tuple has one element (e.g. ``ns::op_(Tensor(a!) x) -> ()``)::

    @torch.library.custom_op("ns::scale_", mutates_args=("x",))
    def scale_(x: torch.Tensor, s: float) -> None: ...

    @dynamo_tensorrt_converter(torch.ops.ns.scale_.default)
    def scale_converter(ctx, target, args, kwargs, name):
        x, s = args
        return impl.elementwise.mul(ctx, target, SourceIR.ATEN, name, x, s)  # new x

In PyTorch, ``FunctionalizedOp(op)(*args)`` clones each mutated argument, runs
the op on the clones and returns ``(*returns, *clones)``: the same values, with
no side effect, so a node the partitioner leaves in PyTorch is still correct.
"""

from __future__ import annotations

import logging
import operator
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

logger = logging.getLogger(__name__)


def mutated_arguments(schema: torch.FunctionSchema) -> List[torch.Argument]:
    """Schema arguments the op writes to (``Tensor(a!)``), in schema order."""
    return [
        arg
        for arg in schema.arguments
        if arg.alias_info is not None and arg.alias_info.is_write
    ]


def _is_tensor_type(arg: torch.Argument) -> bool:
    arg_type = arg.type
    if isinstance(arg_type, torch.OptionalType):
        arg_type = arg_type.getElementType()
    return isinstance(arg_type, torch.TensorType)


_NAME_PREFIX = "functionalized_"


def is_write_back(node: torch.fx.Node) -> bool:
    """``aten.copy_``: how ``ExportedProgram.module()`` writes a mutation back."""
    return node.op == "call_function" and node.target in (
        torch.ops.aten.copy_.default,
        torch.ops.aten.copy_,
    )


def other_readers(state: torch.fx.Node, writer: torch.fx.Node) -> List[str]:
    """Nodes besides ``writer`` (and write-backs) that read ``state``.

    An in-place plugin updates its aliased input in place only when that input
    has no other reader; otherwise TensorRT inserts a copy before the plugin.
    """
    return [u.name for u in state.users if u is not writer and not is_write_back(u)]


def mutated_values(node: torch.fx.Node) -> Dict[str, Any]:
    """The values a :class:`FunctionalizedOp` call passes for its mutated arguments."""
    target = node.target
    assert isinstance(target, FunctionalizedOp)
    positions = [arg.name for arg in target.op._schema.arguments]
    return {
        name: (
            node.args[positions.index(name)]
            if positions.index(name) < len(node.args)
            else node.kwargs.get(name)
        )
        for name in target.mutated
    }


def updates_in_place(node: torch.fx.Node) -> bool:
    """Whether the converter of ``node`` declares ``requires_aliased_plugin_io``."""
    from torch_tensorrt.dynamo.conversion._ConverterRegistry import (
        DYNAMO_CONVERTERS,
    )

    converter = DYNAMO_CONVERTERS.get(node)
    return converter is not None and bool(
        converter[2].get("requires_aliased_plugin_io")
    )


def in_place_writer(state: torch.fx.Node) -> Optional[torch.fx.Node]:
    """The node whose converter updates ``state`` in place in TensorRT, if any.

    That is a :class:`FunctionalizedOp` call taking ``state`` itself (not a view)
    as a mutated argument, whose converter declares ``requires_aliased_plugin_io``
    (an in-place plugin), and that is ``state``'s only reader: TensorRT then
    passes the plugin the memory of ``state`` for its aliased output, so when
    ``state`` is a network input the caller's tensor is written.
    """
    for user in _mutators(state):
        if not other_readers(state, user) and updates_in_place(user):
            return user
    return None


def _mutators(value: torch.fx.Node) -> List[torch.fx.Node]:
    """The :class:`FunctionalizedOp` calls that take ``value`` as a mutated argument."""
    return [
        user
        for user in value.users
        if isinstance(user.target, FunctionalizedOp)
        and any(v is value for v in mutated_values(user).values())
    ]


def updated_again(value: torch.fx.Node) -> bool:
    """Whether a mutating op (a :class:`FunctionalizedOp` call) takes ``value``."""
    return bool(_mutators(value))


def in_place_source(value: Any) -> Optional[torch.fx.Node]:
    """The tensor whose memory TensorRT computes ``value`` in, if in place.

    ``value`` is the new value of an argument that an in-place plugin updates
    (see :func:`in_place_writer`); chains of such plugins, each the only reader
    of the previous one's new value, are followed back to the tensor the first
    one updates. ``None`` when ``value`` is not computed in place.
    """
    source = None
    while isinstance(value, torch.fx.Node) and value.target is operator.getitem:
        call, index = value.args
        target = call.target
        if not isinstance(target, FunctionalizedOp) or index < target.num_returns:
            break
        argument = mutated_values(call)[target.mutated[index - target.num_returns]]
        if (
            not isinstance(argument, torch.fx.Node)
            or in_place_writer(argument) is not call
        ):
            break
        source = value = argument
    return source


def _target_name(op: torch._ops.OpOverload) -> str:
    namespace, name = op._schema.name.split("::")
    return f"{_NAME_PREFIX}{namespace}_{name}_{op._overloadname}"


def __getattr__(name: str) -> FunctionalizedOp:
    """Resolve ``functionalized_<ns>_<op>_<overload>`` (how FX code and pickles name it)."""
    if name.startswith(_NAME_PREFIX):
        parts = name[len(_NAME_PREFIX) :].split("_")
        # the op name may contain underscores: try each split into ns / op / overload
        for i in range(1, len(parts) - 1):
            for j in range(i + 1, len(parts)):
                namespace, op_name = "_".join(parts[:i]), "_".join(parts[i:j])
                overload = "_".join(parts[j:])
                packet = getattr(getattr(torch.ops, namespace, None), op_name, None)
                op = getattr(packet, overload, None) if packet is not None else None
                if isinstance(op, torch._ops.OpOverload) and _target_name(op) == name:
                    return FunctionalizedOp(op)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class FunctionalizedOp:
    """Callable FX target: ``op`` without side effects, returning the mutated values.

    One instance per op overload (instances are cached), so it can be used as a
    dictionary key and compared by identity like any other FX target.
    """

    _instances: Dict[torch._ops.OpOverload, FunctionalizedOp] = {}

    op: torch._ops.OpOverload
    mutated: Tuple[str, ...]
    num_returns: int

    def __new__(cls, op: torch._ops.OpOverload) -> FunctionalizedOp:
        if op in cls._instances:
            return cls._instances[op]
        if not isinstance(op, torch._ops.OpOverload):
            raise TypeError(f"FunctionalizedOp needs an OpOverload, got {op!r}")
        mutated = mutated_arguments(op._schema)
        if not mutated:
            raise ValueError(f"{op} does not mutate any argument")
        for arg in mutated:
            if not _is_tensor_type(arg):
                raise ValueError(
                    f"{op}: mutated argument '{arg.name}' has type {arg.type}; "
                    "only Tensor and Tensor? arguments can be mutated"
                )
        self = super().__new__(cls)
        self.op = op
        self.mutated = tuple(arg.name for arg in mutated)
        self.num_returns = len(op._schema.returns)
        # FX code generation, pickling and logging name the target by these
        self.__name__ = _target_name(op)
        self.__qualname__ = self.__name__
        self.__module__ = __name__
        cls._instances[op] = self
        return self

    def __reduce__(self) -> str:
        # pickled by reference: the module resolves the name (see __getattr__)
        return _target_name(self.op)

    def __repr__(self) -> str:
        return f"FunctionalizedOp({self.op})"

    @property
    def num_outputs(self) -> int:
        """Length of the output tuple: the op's returns, then the mutated arguments."""
        return self.num_returns + len(self.mutated)

    def output_layout(self) -> List[str]:
        returns = [f"return {i}" for i in range(self.num_returns)]
        return returns + [f"new value of '{name}'" for name in self.mutated]

    def __call__(self, *args: Any, **kwargs: Any) -> Tuple[Any, ...]:
        call_args, call_kwargs, clones = self._clone_mutated(args, kwargs)
        out = self.op(*call_args, **call_kwargs)
        if self.num_returns == 0:
            returns: Tuple[Any, ...] = ()
        elif self.num_returns == 1:
            returns = (out,)
        else:
            returns = tuple(out)
        return (*returns, *clones)

    def _clone_mutated(
        self, args: Sequence[Any], kwargs: Dict[str, Any]
    ) -> Tuple[List[Any], Dict[str, Any], List[Any]]:
        args, kwargs = list(args), dict(kwargs)
        positions = {arg.name: i for i, arg in enumerate(self.op._schema.arguments)}
        clones = []
        for name in self.mutated:
            i = positions[name]
            if i < len(args):
                value = args[i]
                args[i] = value.clone() if value is not None else None
                clones.append(args[i])
            else:
                value = kwargs.get(name)
                kwargs[name] = value.clone() if value is not None else None
                clones.append(kwargs[name])
        return args, kwargs, clones

    def adapt_converter(self, converter: Callable[..., Any]) -> Callable[..., Any]:
        """Wrap the op's converter: it sees the op as target, and its outputs are checked."""
        functionalized = self

        def convert_functionalized(
            ctx: Any, target: Any, args: Any, kwargs: Any, name: str
        ) -> Tuple[Any, ...]:
            outputs = converter(ctx, functionalized.op, args, kwargs, name)
            return functionalized.check_converter_outputs(outputs)

        return convert_functionalized

    def check_converter_outputs(self, outputs: Any) -> Tuple[Any, ...]:
        """Normalize a converter's result to the output tuple, or raise naming the layout."""
        if not isinstance(outputs, (tuple, list)):
            outputs = (outputs,)
        if len(outputs) != self.num_outputs:
            raise RuntimeError(
                f"The converter for {self.op} returned {len(outputs)} tensor(s); a "
                f"converter for an op that mutates {list(self.mutated)} must return "
                f"{self.num_outputs}: {', '.join(self.output_layout())}"
            )
        missing = [
            name for name, out in zip(self.output_layout(), outputs) if out is None
        ]
        if missing:
            raise RuntimeError(
                f"The converter for {self.op} returned None for {', '.join(missing)}; "
                f"a converter for an op that mutates {list(self.mutated)} must return "
                f"a TensorRT tensor for each of: {', '.join(self.output_layout())}"
            )
        return tuple(outputs)
