"""Which KV-cache writes of a graph ``IKVCacheUpdateLayer`` may make in place.

Run before conversion; the layer is in ``conversion/impl/_kv_cache_layer.py``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Collection, List, Optional, Sequence, Tuple

import torch
from torch_tensorrt.dynamo.conversion.impl._kv_cache_layer import (
    kv_cache_dtype_eligible,
)

logger = logging.getLogger(__name__)


# Ops whose first argument is the tensor they write a new version of.
_WRITE_OPS = (
    torch.ops.aten.slice_scatter.default,
    torch.ops.aten.select_scatter.default,
    torch.ops.aten.diagonal_scatter.default,
    torch.ops.aten.as_strided_scatter.default,
    torch.ops.aten.index_copy.default,
    torch.ops.aten.index_put.default,
    torch.ops.aten.scatter.src,
    torch.ops.aten.scatter.value,
    torch.ops.aten.masked_scatter.default,
)


def kv_write_is_final(node: torch.fx.Node) -> Tuple[bool, str]:
    """Whether ``node``'s write is its state's last: ``(final, reason)``.

    A later write's base is no network input, so it is a scatter, and this one in
    place would only add an output aliased to the state."""
    for user in node.users:
        rewrites = user.op == "call_function" and user.target in _WRITE_OPS
        if rewrites and user.args and user.args[0] is node:
            return False, (
                f"the state it writes is written again by {user.name}; the "
                "later write is a scatter, so this one is too"
            )
    return True, "the last write of its state"


def forbid_kv_writes_on_cloned_inputs(
    gm: torch.fx.GraphModule, state_inputs: Collection[str]
) -> List[str]:
    """Veto (``meta["_trt_no_kv_alias"]``) each ``slice_scatter`` / ``index_copy``
    whose cache is a clone of a non-state input; return their names.

    Run before lowering: ``c = x.clone(); c[..] = u`` leaves ``x`` unchanged, but
    ``remove_input_alias_fixing_clones`` drops a clone that is its input's only
    reader, and the layer would write ``x``. ``state_inputs`` (lifted buffers) are
    written anyway."""
    kv_forms = (torch.ops.aten.slice_scatter.default, torch.ops.aten.index_copy.default)
    marked = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in kv_forms:
            continue
        clone = node.args[0]
        if not (
            clone.op == "call_function"
            and clone.target is torch.ops.aten.clone.default
            and clone.args
            and isinstance(clone.args[0], torch.fx.Node)
            and clone.args[0].op == "placeholder"
        ):
            continue
        cache = clone.args[0]
        if cache.name in state_inputs:
            continue
        node.meta["_trt_no_kv_alias"] = True
        marked.append(node.name)
        logger.debug(
            "%s: KV fast path forbidden — its cache is a clone of input '%s', "
            "which lowering removes; the layer would write the caller's tensor",
            node.name,
            cache.name,
        )
    return marked


# Ops that read a tensor's metadata only, never its values.
_METADATA_OPS = (
    torch.ops.aten.sym_size.int,
    torch.ops.aten.sym_stride.int,
    torch.ops.aten.sym_numel.default,
    torch.ops.aten.sym_storage_offset.default,
)

# Views: they read no values themselves; their users may.
_VIEW_OPS = (
    torch.ops.aten.slice.Tensor,
    torch.ops.aten.select.int,
    torch.ops.aten.view.default,
    torch.ops.aten.alias.default,
    torch.ops.aten.unsqueeze.default,
    torch.ops.aten.squeeze.dim,
    torch.ops.aten.permute.default,
    torch.ops.aten.transpose.int,
    torch.ops.aten.expand.default,
)


def _reads_values(node: torch.fx.Node, through: torch.fx.Node) -> bool:
    """Whether ``node``, a user of ``through``, reads its values: not a metadata op,
    an input guard, a write-back into it or ``aten.copy(through, src)`` (slice
    assignment's shape-only copy); a view does when one of its users does."""
    if node.op == "call_module" and str(node.target).startswith("_guards"):
        return False  # ExportedProgram.module()'s input guards check shapes
    if node.op != "call_function":
        return True  # an output (the old state returned), a submodule call
    if node.target in _METADATA_OPS:
        return False
    if node.target is torch.ops.aten.copy.default:
        return len(node.args) > 1 and node.args[1] is through
    if node.target is torch.ops.aten.copy_.default and node.args[0] is through:
        return len(node.args) > 1 and node.args[1] is through  # a write-back
    if node.target in _VIEW_OPS and node.args and node.args[0] is through:
        return any(_reads_values(user, node) for user in node.users)
    return True


def kv_cache_has_no_other_reader(
    write: torch.fx.Node, cache: torch.fx.Node
) -> Tuple[bool, str]:
    """Whether ``write`` is the only reader of its cache's values: ``(sole, reason)``.

    TensorRT does not order other readers before the in-place write; a clone of
    ``cache`` that is the write's own cache counts as the write."""
    own = {write, write.args[0]}
    readers = [
        user.name
        for user in cache.users
        if user not in own and _reads_values(user, cache)
    ]
    if readers:
        return False, (
            f"its cache {cache.name} is also read by {', '.join(readers)}; the "
            "layer would write it in place before they read it"
        )
    return True, "the write is its cache's only reader"


def kv_layer_view(
    shape: Sequence[Any], axis: int
) -> Tuple[Optional[Tuple[int, int, int, int]], str]:
    """The layer's ``[B', H', S, D']`` form of a contiguous state written on ``axis``.

    ``B'``: the first dimension (``-1`` if dynamic); ``H'``: the product of those
    between it and ``axis``; ``S``: the size of ``axis``; ``D'``: the product of
    those after it (``B' = H' = 1`` for axis 0). Returns ``(view, reason)``;
    ``view`` is None if a dimension other than the first, or ``axis``, is dynamic.
    """
    dynamic = [i for i, size in enumerate(shape) if not isinstance(size, int)]
    if axis in dynamic:
        return None, f"the written axis {axis} has a dynamic size"
    if any(i != 0 for i in dynamic):
        return None, (
            f"dimensions {dynamic} of the state are dynamic; the layer takes a "
            "dynamic first dimension only"
        )
    if axis == 0:
        batch, heads = 1, 1
    else:
        batch = -1 if dynamic else int(shape[0])
        heads = math.prod(shape[1:axis])
    view = (batch, heads, int(shape[axis]), math.prod(shape[axis + 1 :]))
    return view, f"the state seen as {list(view)} is written along axis 2"


@dataclass(frozen=True)
class KVStateWrite:
    """A state update the layer can make in place, found by :func:`plan_kv_state_write`.

    ``start``, the first position written: an int, the node of a SymInt, or None
    for ``index_copy`` (its ``index`` tensor holds it).
    """

    write: torch.fx.Node
    cache: torch.fx.Node
    source: torch.fx.Node
    axis: int
    length: int
    start: Any
    index: Optional[torch.fx.Node]
    shape: Tuple[Any, ...]
    view: Tuple[int, int, int, int]

    @property
    def in_layer_form(self) -> bool:
        """Whether the state has the layer's form already (4-D, written on axis 2)."""
        return len(self.shape) == 4 and self.axis == 2


def _slice_write_bounds(
    write: torch.fx.Node, shape: Tuple[Any, ...]
) -> Tuple[Optional[Tuple[int, int, Any]], str]:
    """``(axis, length, start)`` of a ``slice_scatter`` the layer takes, or why not."""
    args = list(write.args) + [None] * (6 - len(write.args))
    _, source, dim, start, end, step = args[:6]
    dim = 0 if dim is None else dim
    if not isinstance(dim, int) or not -len(shape) <= dim < len(shape):
        return None, f"its dim {dim!r} is not a dimension of the state"
    axis = dim % len(shape)
    if step not in (None, 1):
        return None, f"a slice with step {step!r}; the layer writes a contiguous run"
    source_val = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    length = None if source_val is None else source_val.shape[axis]
    if not isinstance(length, int):
        return None, "the number of positions written is not static"
    size = shape[axis]
    start = 0 if start is None else start
    if isinstance(start, int):
        if isinstance(size, int) and start < 0:
            start += size
        if start == 0 and length == size:
            return None, "a write of the whole axis (no state is kept)"
        if not (isinstance(size, int) and 0 <= start and start + length <= size):
            return None, f"positions {start}..{start + length - 1} are not in the state"
    elif not (isinstance(start, torch.fx.Node) and isinstance(end, torch.fx.Node)):
        return None, f"its start {start!r} is neither an int nor a size of the graph"
    return (axis, length, start), ""


def plan_kv_state_write(
    write: torch.fx.Node, cache: torch.fx.Node
) -> Tuple[Optional[KVStateWrite], str]:
    """Whether ``IKVCacheUpdateLayer`` can make the state update ``write`` in place.

    ``write``: a ``slice_scatter`` or ``index_copy`` known to be the new value of
    ``cache``. It can if the write is a contiguous run along one axis of a
    contiguous float32, float16 or bfloat16 engine input (any rank, seen through
    :func:`kv_layer_view`), and is its state's last write and only reader.
    Returns ``(plan, reason)``; the reason is for the debug log.
    """
    if write.op != "call_function" or write.target not in (
        torch.ops.aten.slice_scatter.default,
        torch.ops.aten.index_copy.default,
    ):
        return None, "not a slice or index write"
    if write.meta.get("_trt_no_kv_alias"):
        return None, "the write is marked to stay a scatter (_trt_no_kv_alias)"
    if cache.op != "placeholder":
        return None, "the state it writes is not an engine input"
    val = cache.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None, f"{cache.name} has no tensor metadata"
    eligible, reason = kv_cache_dtype_eligible(val.dtype)
    if not eligible:
        return None, reason
    if not val.is_contiguous():
        return (
            None,
            f"{cache.name} is not contiguous, so it has no view in the layer's form",
        )
    for check in (kv_write_is_final(write), kv_cache_has_no_other_reader(write, cache)):
        if not check[0]:
            return None, check[1]
    shape = tuple(val.shape)
    index = None
    if write.target is torch.ops.aten.slice_scatter.default:
        bounds, reason = _slice_write_bounds(write, shape)
        if bounds is None:
            return None, reason
        axis, length, start = bounds
        source = write.args[1]
    else:
        dim, index, source = write.args[1:4]
        if not isinstance(dim, int) or not -len(shape) <= dim < len(shape):
            return None, f"its dim {dim!r} is not a dimension of the state"
        axis, start = dim % len(shape), None
        index_val = index.meta.get("val") if isinstance(index, torch.fx.Node) else None
        if index_val is None or tuple(index_val.shape) != (1,):
            return None, (
                "it writes positions given by a tensor of more than one; they need "
                "not be contiguous, and the layer writes one run"
            )
        length = 1
    view, reason = kv_layer_view(shape, axis)
    if view is None:
        return None, reason
    assert isinstance(source, torch.fx.Node)
    return (
        KVStateWrite(write, cache, source, axis, length, start, index, shape, view),
        reason,
    )
