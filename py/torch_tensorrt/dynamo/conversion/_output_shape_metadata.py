"""Metadata of graph inputs and outputs for symbolic shape capture.

``extract_symbolic_shape_expressions`` reads ``meta["val"]`` of every input and
output of the graph it converts. Passes that add nodes after the last
fake-tensor propagation (e.g. the ``copy_`` write-backs that
``ExportedProgram.module()`` appends) leave nodes without it. This module
recovers that metadata where it can and otherwise names the node, its op and
the graph partition in the error, so the user knows which pass to look at
(https://github.com/pytorch/TensorRT/issues/4240).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch._guards import detect_fake_mode
from torch.fx.node import map_arg
from torch.fx.passes.shape_prop import TensorMetadata
from torch.utils._pytree import tree_leaves

logger = logging.getLogger(__name__)


def is_none_output(out_arg: Any) -> bool:
    """Whether a graph output has no value: a literal ``None`` or a node whose
    ``meta["val"]`` is ``None`` (e.g. an op returning nothing).

    Such an output has no tensor, so the engine has no binding for it: the
    interpreter does not mark it and ``get_output_dtypes`` gives it no dtype.
    """
    if out_arg is None:
        return True
    return (
        isinstance(out_arg, torch.fx.Node)
        and "val" in out_arg.meta
        and out_arg.meta["val"] is None
    )


# What a graph output may be besides a tensor: a number, symbolic or literal
SCALAR_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)


def flat_outputs(value: Any) -> List[Any]:
    """The outputs of a graph's output node in order, nested tuples and lists
    flattened, ``None`` kept in its place."""
    if isinstance(value, (tuple, list)):
        return [leaf for v in value for leaf in flat_outputs(v)]
    return [value]


def is_scalar_output(out_arg: Any) -> bool:
    """Whether a graph output is a number: a literal (``return y, 12``) or a node
    whose value is a ``SymInt``, ``SymFloat``, ``SymBool`` or Python number
    (``return y, y.shape[0]`` with a dynamic dimension)."""
    if isinstance(out_arg, torch.fx.Node):
        return isinstance(out_arg.meta.get("val"), SCALAR_TYPES)
    return isinstance(out_arg, SCALAR_TYPES)


def scalar_output_dtype(value: Any) -> torch.dtype:
    """The dtype of the rank-0 engine output that carries a number: bool, int64,
    or float32 (TensorRT has no float64)."""
    if isinstance(value, (torch.SymBool, bool)):
        return torch.bool
    if isinstance(value, (torch.SymInt, int)):
        return torch.int64
    return torch.float32


def scalar_output_record(value: Any) -> Dict[str, Any]:
    """The record of a number among a graph's outputs: rank 0, the dtype of the
    engine output that carries it, and its value as the graph knows it (``expr``):
    a literal, or the sympy expression of a ``SymInt``, ``SymFloat`` or ``SymBool``
    in the input dimensions' symbols."""
    record: Dict[str, Any] = {
        "shape_exprs": [],
        "dtype": scalar_output_dtype(value),
        "is_scalar": True,
    }
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        record["expr"] = value.node.expr
    elif isinstance(value, (int, float, bool)):
        record["expr"] = value
    return record


# The Python type eager PyTorch returns for a number, by its engine dtype
_NUMBER_TYPES: Dict[torch.dtype, type] = {
    torch.bool: bool,
    torch.int64: int,
    torch.float32: float,
}


class NumberOutputs(Tuple[int, ...]):
    """Positions of the engine outputs that carry a number (``is_scalar``), and
    how each is given back as the Python number eager PyTorch returns.

    A number whose recorded ``expr`` is a literal or depends only on dimensions
    of the inputs (``y.shape[0] / 3``) is computed on the host from the call's
    input shapes with Python arithmetic, so a ``SymFloat`` has float64 precision
    as in eager PyTorch (the engine carries float32); its engine output is not
    read. Any other number (e.g. one read from a tensor's data) is read from its
    engine output, all of them with one synchronization.
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


def scalar_output_positions(
    symbolic_shape_expressions: Optional[Dict[str, Any]],
) -> NumberOutputs:
    """Positions of the engine outputs that carry a number (``is_scalar``), with
    how each is given back (:class:`NumberOutputs`)."""
    return NumberOutputs(symbolic_shape_expressions)


def outputs_as_numbers(
    outputs: Sequence[Any], positions: Tuple[int, ...], inputs: Sequence[Any] = ()
) -> List[Any]:
    """``outputs`` with the rank-0 tensors at ``positions`` as Python numbers, as
    eager PyTorch returns them; ``inputs`` are the engine's inputs for this call,
    from whose shapes :class:`NumberOutputs` computes the numbers it can."""
    if not isinstance(positions, NumberOutputs):
        positions = NumberOutputs(
            {"outputs": [{"is_scalar": i in positions} for i in range(len(outputs))]}
        )
    return positions.returned(outputs, inputs)


def scalar_at_rank_0(ctx: Any, tensor: Any, name: str) -> Any:
    """``tensor`` (one element) reshaped to rank 0; unchanged if it has rank 0.

    A converter may give a number as a shape ``[1]`` tensor (``aten.sym_size.int``
    does); the engine output that carries it has rank 0, as the number has.
    """
    if len(tensor.shape) == 0:
        return tensor
    if tuple(tensor.shape) != (1,) * len(tensor.shape):
        raise RuntimeError(
            f"Output '{name}' is a number in the graph, but its TensorRT tensor has "
            f"shape {tuple(tensor.shape)}; a number needs exactly one element."
        )
    layer = ctx.net.add_shuffle(tensor)
    layer.reshape_dims = ()
    layer.name = f"{name}_to_rank_0"
    return layer.get_output(0)


def node_value(node: Any, graph_name: str = "") -> Any:
    """The value a graph input or output has in the node metadata.

    Args:
        node (Any): Element of the output node's arguments, or a placeholder
        graph_name (str): Name of the graph partition, for the error message

    Returns:
        ``meta["val"]`` if present; else ``meta["tensor_meta"]`` (a
        ``TensorMetadata``, which has ``shape`` and ``dtype``); else the value
        derived by running the node's op on the fake values of its arguments,
        which is also stored in ``meta["val"]`` for later consumers.

    Raises:
        RuntimeError: if none of these is available, naming the node, its op
            and the graph partition.
    """
    if isinstance(node, torch.fx.Node):
        if "val" in node.meta:
            return node.meta["val"]
        if isinstance(node.meta.get("tensor_meta"), TensorMetadata):
            return node.meta["tensor_meta"]
        derived = _derive_value(node)
        if derived is not None:
            logger.debug(
                f"Derived the missing metadata of node '{node.name}' from its inputs"
            )
            node.meta["val"] = derived
            return derived
    raise RuntimeError(
        f"Failed to extract symbolic shape expressions: {describe_node(node, graph_name)} "
        "has no shape metadata (neither meta['val'] nor meta['tensor_meta']) and it "
        "could not be derived from its inputs. The node was probably created by a "
        "graph pass after the last fake tensor propagation without copying the metadata."
    )


def unsupported_value_error(node: Any, value: Any, graph_name: str) -> RuntimeError:
    """The error for an input or output whose value is neither a tensor nor a scalar."""
    return RuntimeError(
        f"Failed to extract symbolic shape expressions: {describe_node(node, graph_name)} "
        f"has a value of type {type(value).__name__}; a TensorRT engine input or "
        "output must be a tensor or a scalar."
    )


def no_outputs_error(output_args: List[Any], graph_name: str) -> RuntimeError:
    """The error for a graph without a tensor output."""
    return RuntimeError(
        f"Failed to extract symbolic shape expressions: {_describe_graph(graph_name)} "
        f"has no tensor outputs (outputs: {output_args}); a TensorRT engine needs "
        "at least one."
    )


def describe_node(node: Any, graph_name: str) -> str:
    """``node 'name' (op target) in graph partition 'graph_name'``"""
    if not isinstance(node, torch.fx.Node):
        return f"output {node!r} in {_describe_graph(graph_name)}"
    op = node.target if node.op == "call_function" else node.op
    return f"node '{node.name}' (op {op}) in {_describe_graph(graph_name)}"


def _describe_graph(graph_name: str) -> str:
    return f"graph partition '{graph_name}'" if graph_name else "the converted graph"


def _derive_value(node: torch.fx.Node) -> Any:
    """Run the node's op on the fake values of its arguments; None if impossible."""
    if node.op != "call_function":
        return None
    arg_nodes: List[torch.fx.Node] = []
    map_arg((node.args, node.kwargs), arg_nodes.append)
    if not arg_nodes or any("val" not in arg.meta for arg in arg_nodes):
        return None
    args, kwargs = map_arg((node.args, node.kwargs), lambda arg: arg.meta["val"])
    fake_mode = detect_fake_mode(tree_leaves((args, kwargs)))
    if fake_mode is None:
        return None
    try:
        with fake_mode:
            return node.target(*args, **kwargs)
    except Exception as e:
        logger.debug(f"Could not derive the value of node '{node.name}': {e}")
        return None
