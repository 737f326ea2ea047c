"""A wrong argument of a public entry point, named in one sentence before anything runs.

Handing ``compile`` an ``nn.Module`` where an ``ExportedProgram`` is expected, or
``check_alias_map_against_engine`` the engine's bytes or the map's path, ended in
an ``AttributeError`` deep inside Torch-TensorRT that named neither the function
nor the argument. :func:`expect` raises a ``TypeError`` whose message is one
sentence: the function, the argument, what it got, what it expects and what to do.
The error is raised without a chained cause, so that sentence is what the user
reads first.
"""

from __future__ import annotations

from typing import Any, Tuple, Type, Union


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
    import torch

    expect(
        function,
        "exported_program",
        exported_program,
        torch.export.ExportedProgram,
        "a torch.export.ExportedProgram",
        "export the module first (torch.export.export(module, args)), or call "
        "torch_tensorrt.compile(module, ...), which exports it",
    )
