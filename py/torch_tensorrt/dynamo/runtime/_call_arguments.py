"""A wrong argument of a compiled module's call, named in one sentence.

:func:`check_scalar_argument` refuses, before anything runs, an argument that is
neither a tensor nor a number; :func:`wrong_argument`, asked only after the
engine refused a call, names the first tensor whose dtype, rank or static
dimension is not the engine's; :func:`outside_profile` is the runtime's sentence
for a shape TensorRT refused.
"""

from __future__ import annotations

import numbers
from typing import Any, Dict, List, Optional, Sequence

import torch

_SCALARS = (numbers.Number, torch.SymInt, torch.SymFloat, torch.SymBool)


def _named(engine: str, binding: str, position: int) -> str:
    return f"Input '{binding}' (argument {position}) of TensorRT engine '{engine}'"


def check_scalar_argument(engine: str, binding: str, position: int, value: Any) -> None:
    """Raise ``TypeError`` unless ``value``, passed where no tensor is, is a number."""
    if isinstance(value, _SCALARS) and not isinstance(value, complex):
        return
    kind = "None" if value is None else f"a {type(value).__name__}"
    raise TypeError(
        f"{_named(engine, binding, position)} is {kind}; expected a torch.Tensor, "
        "or a number for a scalar input: pass the tensor the model takes there"
    )


def wrong_argument(
    engine: str,
    bindings: Sequence[str],
    tensors: Sequence[torch.Tensor],
    expressions: Optional[Dict[str, List[Dict[str, Any]]]],
) -> Optional[str]:
    """The sentence naming the first tensor the engine cannot take, or ``None``.

    ``expressions`` are the engine's recorded inputs (``symbolic_shape_expressions``):
    each one's dtype and dimensions, an ``int`` for a static one.
    """
    recorded = (expressions or {}).get("inputs") or []
    for position, (binding, tensor, info) in enumerate(
        zip(bindings, tensors, recorded)
    ):
        if info.get("is_scalar"):
            continue
        dtype, dims = info.get("dtype"), info.get("shape_exprs")
        if dtype is not None and tensor.dtype != dtype:
            name = str(dtype).replace("torch.", "")
            return (
                f"{_named(engine, binding, position)} is a "
                f"{str(tensor.dtype).replace('torch.', '')} tensor; the engine takes "
                f"{name}: pass a {name} tensor (e.g. with .to(torch.{name}))"
            )
        if dims is None:
            continue
        shown = [d if isinstance(d, int) else str(d) for d in dims]
        if tensor.dim() != len(dims) or any(
            isinstance(d, int) and d != n for d, n in zip(dims, tensor.shape)
        ):
            return (
                f"{_named(engine, binding, position)} has shape "
                f"{list(tensor.shape)}; the engine takes {shown}: pass a tensor of "
                "that shape (the shape the module was compiled for)"
            )
    return None


def outside_profile(
    engine: str, binding: str, shape: Sequence[int], low: Any, high: Any
) -> str:
    """Input ``binding`` has ``shape``, outside the profile from ``low`` to ``high``."""
    return (
        f"Input '{binding}' of TensorRT engine '{engine}' has shape {list(shape)}, "
        f"outside the engine's profile (min {list(low)}, max {list(high)}): pass a "
        "tensor of a shape within it"
    )
