"""A wrong argument of a public entry point, named in one sentence before anything runs.

:func:`expect` raises a ``TypeError`` naming the function, the argument, what it
got, what it expects and what to do; :func:`check_inputs_against_program` raises
a ``ValueError`` for example inputs the exported program was not exported with.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple, Type, Union

import torch


def described(value: Any) -> str:
    """``value`` as a message names it: its type, and for text or bytes a glimpse."""
    kind = type(value).__name__
    if isinstance(value, (bytes, bytearray)):
        return f"{kind} ({len(value)} bytes)"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"a str ({shown!r})"
    if value is None:
        return "None"
    return f"an object of type {kind}"


def expect(
    function: str,
    argument: str,
    value: Any,
    types: Union[Type[Any], Tuple[Type[Any], ...]],
    expected: str,
    fix: str,
) -> None:
    """Raise ``TypeError`` unless ``value`` is an instance of ``types``.

    ``expected`` says what the argument is (``"a torch.export.ExportedProgram"``),
    ``fix`` what to pass instead; both complete one sentence.
    """
    if not isinstance(value, types):
        raise TypeError(
            f"{function}: argument '{argument}' is {described(value)}; expected "
            f"{expected}: {fix}."
        )


def expect_exported_program(function: str, exported_program: Any) -> None:
    """The ``exported_program`` argument of a compile entry point."""
    expect(
        function,
        "exported_program",
        exported_program,
        torch.export.ExportedProgram,
        "a torch.export.ExportedProgram",
        "export the module first (torch.export.export(module, args)), or call "
        "torch_tensorrt.compile(module, ...), which exports it",
    )


def expect_examples(
    function: str, exported_program: Any, arg_inputs: Sequence[Any]
) -> None:
    """Raise ``ValueError`` for an example that is no tensor where the program takes
    one, naming its position and the program's input, before the inputs are read.

    Checked where each example stands for one input (no container among them).
    """
    from torch.export.graph_signature import InputKind, TensorArgument
    from torch_tensorrt._Input import Input

    specs = [
        spec
        for spec in exported_program.graph_signature.input_specs
        if spec.kind == InputKind.USER_INPUT
    ]
    if any(isinstance(x, (list, tuple, dict)) for x in arg_inputs):
        return  # flattened by the program's own rules
    for position, (spec, example) in enumerate(zip(specs, arg_inputs)):
        if isinstance(spec.arg, TensorArgument) and not isinstance(
            example, (torch.Tensor, Input)
        ):
            raise ValueError(
                f"{function}: arg_inputs[{position}] (input '{spec.arg.name}') is "
                f"{described(example)}; expected a torch.Tensor or a "
                "torch_tensorrt.Input: pass an example of that input as the model "
                "was exported with."
            )


def expect_module_call(
    function: str,
    module: Any,
    arg_inputs: Sequence[Any],
    kwarg_inputs: Optional[Dict[str, Any]],
) -> None:
    """Raise ``ValueError`` unless the example inputs bind to ``module.forward`` and
    each is a tensor, a ``torch_tensorrt.Input``, a number or a container, naming
    the position and the parameter, before the module is traced."""
    import inspect

    from torch_tensorrt._Input import Input

    if not isinstance(module, torch.nn.Module):
        return  # an ExportedProgram: checked against its inputs when compiled
    forward = f"{type(module).__name__}.forward"
    try:
        signature = inspect.signature(module.forward)
        bound = signature.bind(*arg_inputs, **(kwarg_inputs or {}))
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"{function}: the example inputs do not fit {forward}{signature}: {e}; "
            "pass one example per argument of forward (arg_inputs, kwarg_inputs)."
        ) from None
    kinds = (torch.Tensor, Input, int, float, bool, list, tuple, dict)
    for position, (name, value) in enumerate(bound.arguments.items()):
        if value is not None and not isinstance(value, kinds):
            where = (
                f"arg_inputs[{position}]"
                if position < len(arg_inputs)
                else f"kwarg_inputs['{name}']"
            )
            raise ValueError(
                f"{function}: {where} (parameter '{name}' of {forward}) is "
                f"{described(value)}; expected a torch.Tensor or a "
                "torch_tensorrt.Input (or a number or a container of them): pass an "
                "example of that argument."
            )


def check_inputs_against_program(
    function: str,
    exported_program: Any,
    arg_inputs: Sequence[Any],
    kwarg_inputs: Optional[Dict[str, Any]],
) -> None:
    """Raise ``ValueError`` unless the example inputs fit the program's user inputs.

    ``arg_inputs`` are ``torch_tensorrt.Input`` (as ``prepare_inputs`` makes them).
    Checked: their number; for a tensor, its rank, every dimension the program
    fixed, and an explicit dtype. Not checked: dimensions the program exported as
    dynamic, and calls with ``kwarg_inputs`` or with objects (a cache) that the
    program flattens by its own rules.
    """
    from torch.export.graph_signature import InputKind, TensorArgument
    from torch.utils._pytree import tree_leaves
    from torch_tensorrt._Input import Input

    if kwarg_inputs:
        return  # the program flattens keyword inputs its own way
    given = tree_leaves(list(arg_inputs))
    if not all(
        isinstance(x, (Input, torch.Tensor, int, float, str)) or x is None
        for x in given
    ):
        return  # an object the program flattens its own way
    specs = [
        spec
        for spec in exported_program.graph_signature.input_specs
        if spec.kind == InputKind.USER_INPUT
    ]
    if len(given) != len(specs):
        raise ValueError(
            f"{function}: the exported program takes {len(specs)} input(s), but "
            f"arg_inputs gives {len(given)}; pass one example tensor or "
            "torch_tensorrt.Input per input, as the model was exported with."
        )
    nodes = {n.name: n for n in exported_program.graph.nodes if n.op == "placeholder"}
    for position, (spec, example) in enumerate(zip(specs, given)):
        if not isinstance(spec.arg, TensorArgument):
            continue  # a number or a string, specialized by export
        node = nodes[spec.arg.name]
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or not isinstance(example, Input):
            continue
        if val.is_complex():
            continue  # its Input is the real view (one more dimension)
        where = f"{function}: arg_inputs[{position}] (input '{node.name}')"
        if example._explicit_set_dtype and example.dtype.to(torch.dtype) != val.dtype:
            raise ValueError(
                f"{where} is {example.dtype.to(torch.dtype)}, but the program was "
                f"exported with {val.dtype}; pass a {val.dtype} example (an engine "
                "built for another dtype would accept what the model refuses)."
            )
        shapes = (
            [example.shape]
            if example.shape_mode == Input._ShapeMode.STATIC
            else [example.shape[k] for k in ("min_shape", "opt_shape", "max_shape")]
        )
        exported = tuple(d if isinstance(d, int) else "dynamic" for d in val.shape)
        for shape in shapes:
            if len(shape) != len(exported) or any(
                isinstance(d, int) and d != s for d, s in zip(exported, shape)
            ):
                raise ValueError(
                    f"{where} has shape {tuple(shape)}, but the program was exported "
                    f"with shape {exported}; pass an example of that shape, or "
                    "export with dynamic shapes (torch.export.Dim) for the "
                    "dimensions that vary."
                )
