"""Metadata of graph inputs and outputs for symbolic shape capture.

``extract_symbolic_shape_expressions`` reads ``meta["val"]`` of every graph input
and output. Nodes added after the last fake-tensor propagation (e.g. the ``copy_``
write-backs ``ExportedProgram.module()`` appends) lack it: this module derives it
where it can, else raises an error naming the node, its op and graph partition.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List

import torch
from torch._guards import detect_fake_mode
from torch.fx.node import map_arg
from torch.fx.passes.shape_prop import TensorMetadata
from torch.utils._pytree import tree_leaves

logger = logging.getLogger(__name__)


def is_none_output(out_arg: Any) -> bool:
    """Whether a graph output is a literal ``None`` or a node whose ``meta["val"]``
    is ``None``. The engine has no binding for it: the interpreter does not mark
    it and ``get_output_dtypes`` gives it no dtype."""
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
    """Output-node outputs in order, nested tuples/lists flattened, ``None`` kept."""
    if isinstance(value, (tuple, list)):
        return [leaf for v in value for leaf in flat_outputs(v)]
    return [value]


def is_scalar_output(out_arg: Any) -> bool:
    """Whether a graph output is a number: a literal (``return y, 12``) or a node
    whose value is a ``SCALAR_TYPES`` instance (``return y, y.shape[0]``)."""
    if isinstance(out_arg, torch.fx.Node):
        return isinstance(out_arg.meta.get("val"), SCALAR_TYPES)
    return isinstance(out_arg, SCALAR_TYPES)


def scalar_output_dtype(value: Any) -> torch.dtype:
    """Engine dtype of a number: bool, int64 or float32 (TensorRT has no float64)."""
    if isinstance(value, (torch.SymBool, bool)):
        return torch.bool
    if isinstance(value, (torch.SymInt, int)):
        return torch.int64
    return torch.float32


def scalar_output_record(value: Any) -> Dict[str, Any]:
    """Record of a number among the outputs: rank 0, its engine dtype, and ``expr``:
    the literal, or the sympy expression of a symbolic number in the input
    dimensions' symbols."""
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


def scalar_at_rank_0(ctx: Any, tensor: Any, name: str) -> Any:
    """``tensor`` (one element) reshaped to rank 0; unchanged if it has rank 0.

    A converter may give a number as a shape ``[1]`` tensor (``aten.sym_size.int``
    does), but its engine output has rank 0."""
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
    """``meta["val"]`` of a graph input or output, else ``meta["tensor_meta"]``,
    else the value derived from its inputs' fake values (then stored in
    ``meta["val"]``); else ``RuntimeError`` naming the node, its op and the
    partition ``graph_name``."""
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
