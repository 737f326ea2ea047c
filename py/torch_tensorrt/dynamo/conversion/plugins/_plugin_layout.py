"""TensorRT plugin I/O layout, derived from a ``torch.library.custom_op`` schema.

- **inputs**: every ``Tensor`` / ``Tensor?`` argument, in schema order; every other
  argument is a plugin attribute, taken by name (keyword-only args and defaults work);
- **outputs**: the op's returns in order (a ``Tensor[]`` return gives as many outputs
  as the fake implementation returns for it), then one per mutated argument
  (``Tensor(a!)``), in schema order, aliased to that argument's input
  (``X.aliased()`` in the plugin's register function).

The converter returns them as ``conversion/_functionalized_op.py`` expects (returns,
then new values): the aliased output *is* the new value of the mutated argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, get_origin

import numpy as np
import torch
from torch_tensorrt.dynamo.conversion._functionalized_op import (
    FunctionalizedOp,
    mutated_arguments,
)

TENSOR = "Tensor"
TENSOR_LIST = "Tensor[]"


def _is_tensor(arg_type: Any) -> bool:
    if isinstance(arg_type, torch.OptionalType):
        arg_type = arg_type.getElementType()
    return isinstance(arg_type, torch.TensorType)


# The QDP attribute type that carries each scalar schema type
_SCHEMA_ATTR_TYPES = {"float": float, "int": int, "bool": bool, "str": str}


def _is_tensor_list(arg_type: Any) -> bool:
    return isinstance(arg_type, torch.ListType) and _is_tensor(
        arg_type.getElementType()
    )


def _is_array_annotation(annotation: Any) -> bool:
    """A QDP attribute declared as a NumPy array (``numpy.ndarray[...]``), which takes
    any one-element array, whatever the schema's scalar type."""
    return annotation is np.ndarray or get_origin(annotation) is np.ndarray


@dataclass(frozen=True)
class PluginLayout:
    """Inputs, attributes and outputs of the plugin implementing ``op``."""

    op: torch._ops.OpOverload
    tensor_args: Tuple[str, ...]
    attr_args: Tuple[str, ...]
    returns: Tuple[str, ...]  # TENSOR or TENSOR_LIST per schema return
    mutated: Tuple[str, ...]

    @classmethod
    def from_op(cls, op: torch._ops.OpOverload) -> PluginLayout:
        schema = op._schema
        tensor_args, attr_args = [], []
        for arg in schema.arguments:
            if _is_tensor(arg.type):
                tensor_args.append(arg.name)
            elif _is_tensor_list(arg.type):
                raise ValueError(
                    f"{op}: argument '{arg.name}' has type {arg.type}; a TensorRT plugin "
                    "takes Tensor or Tensor? arguments, not lists of tensors"
                )
            else:
                attr_args.append(arg.name)
        returns = []
        for i, ret in enumerate(schema.returns):
            if ret.alias_info is not None:
                raise ValueError(
                    f"{op}: return {i} aliases an argument ({ret.type}"
                    f"({','.join(ret.alias_info.before_set)})); declare the op to "
                    "return nothing for that argument: its new value is the plugin's "
                    "aliased output"
                )
            if _is_tensor(ret.type):
                returns.append(TENSOR)
            elif _is_tensor_list(ret.type):
                returns.append(TENSOR_LIST)
            else:
                raise ValueError(
                    f"{op}: return {i} has type {ret.type}; a TensorRT plugin returns "
                    "Tensor or Tensor[]"
                )
        mutated = []
        for arg in mutated_arguments(schema):
            if not _is_tensor(arg.type):
                raise ValueError(
                    f"{op}: mutated argument '{arg.name}' has type {arg.type}; only "
                    "Tensor arguments can be updated in place by a TensorRT plugin"
                )
            mutated.append(arg.name)
        return cls(
            op, tuple(tensor_args), tuple(attr_args), tuple(returns), tuple(mutated)
        )

    @property
    def requires_aliased_plugin_io(self) -> bool:
        return bool(self.mutated)

    def bind(self, args: Sequence[Any], kwargs: Dict[str, Any]) -> Dict[str, Any]:
        """Argument values by schema name, from args, kwargs and defaults."""
        values: Dict[str, Any] = {}
        for i, arg in enumerate(self.op._schema.arguments):
            if not arg.kwarg_only and i < len(args):
                values[arg.name] = args[i]
            elif arg.name in kwargs:
                values[arg.name] = kwargs[arg.name]
            elif arg.has_default_value():
                values[arg.name] = arg.default_value
            else:
                raise ValueError(f"{self.op}: no value for argument '{arg.name}'")
        return values

    def split_result(self, result: Any) -> Tuple[Tuple[Any, ...], List[Any]]:
        """``(returns, new values)`` of ``result``: what the op returns (a bare value
        for one return) or, for a mutating op, ``(*returns, *new_values)`` as in
        ``meta["val"]`` of its functionalized node."""
        if self.mutated:
            n = len(self.returns)
            return tuple(result[:n]), list(result[n:])
        if len(self.returns) == 1:
            return (result,), []
        return tuple(result or ()), []

    def flat_outputs(self, result: Any) -> List[Any]:
        """One value per plugin output: returns (``Tensor[]`` flattened), new values."""
        returns, new_values = self.split_result(result)
        flat: List[Any] = []
        for kind, value in zip(self.returns, returns):
            flat += list(value) if kind == TENSOR_LIST else [value]
        return flat + new_values

    def return_lengths(self, node_val: Any) -> List[int]:
        """Outputs per schema return: 1 per Tensor, the list's length per Tensor[].

        ``node_val`` (``meta["val"]`` of the converted node) is read only for
        ``Tensor[]`` returns."""
        if TENSOR_LIST not in self.returns:
            return [1] * len(self.returns)
        lengths = []
        for kind, value in zip(self.returns, self.split_result(node_val)[0]):
            if kind == TENSOR:
                lengths.append(1)
            elif not isinstance(value, (list, tuple)):
                raise ValueError(
                    f"{self.op}: the fake implementation returned {type(value).__name__} "
                    "for a Tensor[] return; expected a list of tensors"
                )
            else:
                lengths.append(len(value))
        return lengths

    def fake_outputs(self, args: Sequence[Any], kwargs: Dict[str, Any]) -> List[Any]:
        """The plugin's outputs (:meth:`flat_outputs`) from the op's fake
        implementation; call under a ``FakeTensorMode`` with fake tensors."""
        target = FunctionalizedOp(self.op) if self.mutated else self.op
        return self.flat_outputs(target(*args, **kwargs))

    def outputs(self, return_lengths: Sequence[int]) -> List[Tuple[str, Optional[str]]]:
        """Plugin outputs in order: ``("return i[.j]", None)`` or ``("new X", "X")``."""
        layout: List[Tuple[str, Optional[str]]] = []
        for i, (kind, n) in enumerate(zip(self.returns, return_lengths)):
            if kind == TENSOR:
                layout.append((f"return {i}", None))
            else:
                layout += [(f"return {i}[{j}]", None) for j in range(n)]
        layout += [(f"new {name}", name) for name in self.mutated]
        return layout

    def describe(self, return_lengths: Sequence[int]) -> str:
        return ", ".join(
            label if alias is None else f"{label} (aliases input '{alias}')"
            for label, alias in self.outputs(return_lengths)
        )

    def match_plugin_inputs(
        self, plugin_id: str, input_tensor_names: Sequence[str]
    ) -> Tuple[str, ...]:
        """The schema argument feeding each input of a registered plugin, by name.

        Names are compared exactly, or case-insensitively when unambiguous (``x``
        for ``X``); never by position, so a register function listing its tensors
        in another order cannot silently swap them.
        """
        plugin_names = list(input_tensor_names)
        schema_names = list(self.tensor_args)
        if sorted(plugin_names) == sorted(schema_names):
            return tuple(plugin_names)
        by_folded = {name.casefold(): name for name in schema_names}
        matched = [by_folded.get(name.casefold()) for name in plugin_names]
        if (
            len(by_folded) == len(schema_names)
            and None not in matched
            and sorted(str(m) for m in matched) == sorted(schema_names)
        ):
            return tuple(str(m) for m in matched)
        raise ValueError(
            f"TensorRT plugin {plugin_id} takes input tensors {plugin_names} (in this "
            f"order), but {self.op} has tensor arguments {schema_names}; plugin "
            "inputs are matched to the op's tensor arguments by name, so name the "
            "register function's TensorDesc arguments like the op's tensor arguments"
        )

    def validate_plugin(
        self,
        plugin_id: str,
        input_tensor_names: Sequence[str],
        input_attrs: Mapping[str, Any],
        num_outputs: int,
        return_lengths: Sequence[int],
    ) -> Tuple[str, ...]:
        """Check a plugin's inputs, attributes and output count against the schema.

        Every non-tensor argument must be an attribute of the same Python type (or a
        one-element NumPy array) and vice versa. Returns the schema argument per
        plugin input (:meth:`match_plugin_inputs`).
        """
        plugin_inputs = self.match_plugin_inputs(plugin_id, input_tensor_names)
        missing = [a for a in self.attr_args if a not in input_attrs]
        unknown = [a for a in input_attrs if a not in self.attr_args]
        if missing or unknown:
            raise ValueError(
                f"TensorRT plugin {plugin_id} has attributes {list(input_attrs)}, but "
                f"{self.op} has non-tensor arguments {list(self.attr_args)}"
                + (f"; missing: {missing}" if missing else "")
                + (f"; not arguments of the op: {unknown}" if unknown else "")
                + ". Attributes are matched by name, and every argument of the op "
                "must reach the plugin"
            )
        schema_types = {a.name: str(a.type) for a in self.op._schema.arguments}
        for name, annotation in input_attrs.items():
            expected = _SCHEMA_ATTR_TYPES.get(schema_types[name])
            if expected is None or _is_array_annotation(annotation):
                continue
            if annotation is not expected:
                raise ValueError(
                    f"TensorRT plugin {plugin_id}: attribute '{name}' is declared "
                    f"{getattr(annotation, '__name__', annotation)}, but argument "
                    f"'{name}' of {self.op} is {schema_types[name]}; declare it "
                    f"{expected.__name__} (or a one-element array, "
                    "numpy.ndarray[typing.Any, numpy.dtype[...]])"
                )
        expected_outputs = self.outputs(return_lengths)
        if num_outputs != len(expected_outputs):
            raise ValueError(
                f"TensorRT plugin {plugin_id} declares {num_outputs} output(s), but "
                f"{self.op} needs {len(expected_outputs)}: "
                f"{self.describe(return_lengths)}"
            )
        return plugin_inputs

    def validate_aliasing(
        self,
        plugin_id: str,
        aliased_inputs: Sequence[Optional[int]],
        return_lengths: Sequence[int],
        plugin_inputs: Optional[Sequence[str]] = None,
    ) -> None:
        """Check which plugin output aliases which input.

        ``aliased_inputs`` has, per plugin output, the index of the plugin input
        it aliases or None; ``plugin_inputs`` names the schema argument of each
        plugin input (:meth:`match_plugin_inputs`; schema order by default).
        """
        inputs = list(self.tensor_args if plugin_inputs is None else plugin_inputs)
        expected = [
            None if alias is None else inputs.index(alias)
            for _, alias in self.outputs(return_lengths)
        ]
        if list(aliased_inputs) == expected:
            return

        def show(aliases: Sequence[Optional[int]]) -> str:
            return (
                ", ".join(
                    f"output {i} -> input '{inputs[a]}'"
                    for i, a in enumerate(aliases)
                    if a is not None
                )
                or "no aliased outputs"
            )

        raise ValueError(
            f"TensorRT plugin {plugin_id} aliases {show(aliased_inputs)}, but {self.op} "
            f"needs {show(expected)} (outputs: {self.describe(return_lengths)}); "
            "return X.aliased() from the register function for each mutated "
            "argument X, after the op's own outputs"
        )

    def group_outputs(
        self, outputs: Sequence[Any], return_lengths: Sequence[int]
    ) -> Any:
        """Plugin outputs -> the converter's result (the op's returns, then new values).

        A ``Tensor[]`` return is grouped into a list. An op that mutates nothing and
        has one return gives that return itself, which the ``getitem`` nodes index.
        """
        if len(outputs) != len(self.outputs(return_lengths)):
            raise RuntimeError(
                f"{self.op}: the plugin layer has {len(outputs)} output(s), expected "
                f"{self.describe(return_lengths)}"
            )
        grouped: List[Any] = []
        index = 0
        for kind, n in zip(self.returns, return_lengths):
            if kind == TENSOR:
                grouped.append(outputs[index])
                index += 1
            else:
                grouped.append(list(outputs[index : index + n]))
                index += n
        grouped += list(outputs[index:])
        if not self.mutated and len(self.returns) == 1:
            return grouped[0]
        return tuple(grouped)
