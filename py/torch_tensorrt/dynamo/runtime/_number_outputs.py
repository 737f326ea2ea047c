"""Numbers among an engine's outputs, given back as Python numbers.

A number among a graph's outputs (a literal, ``SymInt``, ``SymFloat`` or
``SymBool``) is a rank-0 engine output; its record in the engine's symbolic
shape expressions says so (``is_scalar``, ``expr``). The runtime gives it back
as the Python number eager PyTorch returns.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

logger = logging.getLogger(__name__)


# The Python type eager PyTorch returns for a number, by its engine dtype
_NUMBER_TYPES: Dict[torch.dtype, type] = {
    torch.bool: bool,
    torch.int64: int,
    torch.float32: float,
}


class NumberOutputs(Tuple[int, ...]):
    """Positions of the engine outputs that carry a number (``is_scalar``).

    A number whose ``expr`` is a literal or a function of the input dimensions is
    computed on the host from the call's input shapes (float64, as in eager; the
    engine carries float32); any other is read from its engine output, all with
    one synchronization.
    """

    _host: Dict[int, Tuple[Callable[..., Any], Tuple[Tuple[int, int], ...]]]
    _types: Dict[int, Optional[type]]
    _records: Optional[Dict[str, Any]]
    _input_count: int

    def __new__(
        cls, symbolic_shape_expressions: Optional[Dict[str, Any]]
    ) -> "NumberOutputs":
        records = symbolic_shape_expressions or {}
        outputs = records.get("outputs") or []
        positions = tuple(
            i
            for i, out in enumerate(outputs)
            if isinstance(out, dict) and out.get("is_scalar")
        )
        self = super().__new__(cls, positions)
        self._records = symbolic_shape_expressions
        self._types = {i: _NUMBER_TYPES.get(outputs[i].get("dtype")) for i in positions}
        self._input_count = len(records.get("inputs") or [])
        dims = _input_dimensions(records.get("inputs") or [])
        self._host = {}
        for i in positions:
            if "expr" in outputs[i]:
                host = _host_function(outputs[i]["expr"], dims)
                if host is not None:
                    self._host[i] = host
        return self

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        # the functions are made again from the records
        return (NumberOutputs, (self._records,))

    def returned(self, outputs: Sequence[Any], inputs: Sequence[Any] = ()) -> List[Any]:
        """``outputs`` with each number as eager PyTorch returns it."""
        numbers = list(outputs)
        read = []
        for i in self:
            if i >= len(numbers):
                continue
            host = self._host.get(i)
            if host is not None and len(inputs) == self._input_count:
                function, dims = host
                value = function(*(inputs[k].shape[d] for k, d in dims))
                numbers[i] = self._as_number(i, value)
            elif isinstance(numbers[i], torch.Tensor):
                read.append(i)
        for i, value in zip(read, numbers_from_device([numbers[i] for i in read])):
            numbers[i] = self._as_number(i, value)
        return numbers

    def _as_number(self, i: int, value: Any) -> Any:
        number_type = self._types.get(i)
        if number_type is None or isinstance(
            value, (torch.SymInt, torch.SymFloat, torch.SymBool)
        ):
            return value  # as read, or traced: symbolic, as eager's would be
        return number_type(value)


def _input_dimensions(inputs: Sequence[Any]) -> Dict[Any, Tuple[int, int]]:
    """Where each symbol of the input shapes is read: (input, dimension)."""
    import sympy

    dims: Dict[Any, Tuple[int, int]] = {}
    for k, record in enumerate(inputs):
        if not isinstance(record, dict) or record.get("is_scalar"):
            continue
        for d, expr in enumerate(record.get("shape_exprs") or []):
            if isinstance(expr, sympy.Symbol):
                dims.setdefault(expr, (k, d))
    return dims


def _host_function(
    expr: Any, dims: Dict[Any, Tuple[int, int]]
) -> Optional[Tuple[Callable[..., Any], Tuple[Tuple[int, int], ...]]]:
    """A function of the input dimensions it reads that computes ``expr``, or
    ``None`` if ``expr`` needs more than the input shapes."""
    if isinstance(expr, (bool, int, float)):
        return (lambda: expr), ()
    import math

    import sympy
    from torch.utils._sympy.printers import PythonPrinter

    if not isinstance(expr, sympy.Basic):
        return None
    symbols = sorted(expr.free_symbols, key=str)
    if any(s not in dims for s in symbols):
        return None  # e.g. a number read from a tensor's data
    try:
        # torch's printer for Python code: IntTrueDiv as /, FloorDiv as //,
        # ToFloat as torch.sym_float, floats with every digit
        source = PythonPrinter().doprint(expr)
        code = compile(
            f"lambda {', '.join(map(str, symbols))}: {source}", "<number>", "eval"
        )
        function = eval(code, {"math": math, "torch": torch})
    except Exception as e:
        logger.debug(f"The number {expr} is read from the engine: {e}")
        return None
    return function, tuple(dims[s] for s in symbols)


def numbers_from_device(tensors: Sequence[torch.Tensor]) -> List[Any]:
    """The values of one-element tensors, with one synchronization for all."""
    if len(tensors) < 2 or any(t.device.type != "cuda" for t in tensors):
        return [t.item() for t in tensors]
    if torch.compiler.is_compiling() or any(
        isinstance(t, torch._subclasses.FakeTensor) for t in tensors
    ):
        return [t.item() for t in tensors]
    # copies into pinned host memory, queued on the current stream
    host = [t.to("cpu", non_blocking=True) for t in tensors]
    torch.cuda.current_stream(tensors[0].device).synchronize()
    return [h.item() for h in host]
