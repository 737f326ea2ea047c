"""What ``IKVCacheUpdateLayer`` takes as its cache, checked before it is emitted.

The layer writes a state in place, which is why Torch-TensorRT maps KV-cache
writes (``slice_scatter``, ``index_copy``) onto it. Its builder takes a cache of
type Float, Half or BFloat16 only. Any other type is an API usage error
("cache has type Int32 but must have type Float, Half, or BFloat16"), and the
layer's output is left without a shape. The build then fails further on with
"Could not get tensor shape", naming neither the layer nor the type. Measured
with TensorRT-RTX 1.6.1 for Int8, Int32, Int64, UInt8, Bool and FP8 caches.

TensorRT's operator reference gives the same types for standard TensorRT
(KVCacheUpdate, "T: float32, float16, bfloat16").

The callers check the cache's type before they choose the layer. A write that
fails the check keeps the scatter path: the engine computes the new state and
the caller copies it back, as for any state the layer cannot take.

The layer is also left out for a write whose result is written again in the
same graph (two slabs of one state, or ``state[a:b] += u``, which
functionalization turns into a write and a rewrite of the same slab): the
second write's base is no longer a network input, so it is a scatter, and the
first one in place would only add an engine output aliased to the state beside
the copied-back new value.

Nor is the layer used on a clone of an input that the model writes instead of
the input (``c = cache.clone(); c[:, :, 3:4, :] = u``): lowering removes the
clone, and the layer would write the caller's ``cache``, which eager leaves
unchanged. :func:`forbid_kv_writes_on_cloned_inputs` marks such writes before
lowering (``node.meta["_trt_no_kv_alias"]``, the converters' existing veto);
they are scatters into a new tensor.
"""

from __future__ import annotations

import logging
from typing import Any, Collection, List, Optional, Tuple

import torch
from torch_tensorrt._enums import dtype

logger = logging.getLogger(__name__)

# The cache types the layer's builder accepts.
KV_CACHE_DTYPES = (dtype.f32, dtype.f16, dtype.bf16)


def kv_cache_dtype_eligible(cache_dtype: Any) -> Tuple[bool, str]:
    """Whether ``IKVCacheUpdateLayer`` takes a cache of ``cache_dtype``.

    ``cache_dtype`` is a ``torch.dtype`` (from a node's fake tensor) or a
    TensorRT ``DataType`` (from a network tensor). Returns ``(eligible,
    reason)``, like the converters' other eligibility checks; the reason is for
    the debug log.
    """
    try:
        cache_type = dtype._from(cache_dtype)
        name = str(cache_type.to(torch.dtype)).replace("torch.", "")
    except TypeError:
        # not a dtype, or one with no torch equivalent (``dtype.unknown``)
        return False, f"cache dtype {cache_dtype!r} is not a tensor dtype"
    if cache_type in KV_CACHE_DTYPES:
        return True, f"cache dtype {name} is taken by IKVCacheUpdateLayer"
    return (
        False,
        f"cache dtype is {name}; IKVCacheUpdateLayer takes float32, float16 "
        "and bfloat16 caches only",
    )


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


def kv_write_is_final(node: Optional[torch.fx.Node]) -> Tuple[bool, str]:
    """Whether the write ``node`` makes is the last one of its state in the graph.

    ``node`` is the write being converted (``ctx.current_node``; None outside a
    graph, then nothing is known against it). Returns ``(final, reason)``.
    """
    if node is None:
        return True, "no graph node"
    for user in node.users:
        rewrites = user.op == "call_function" and user.target in _WRITE_OPS
        if rewrites and user.args and user.args[0] is node:
            return False, (
                f"the state it writes is written again by {user.name}; the "
                "later write is a scatter, so this one is too"
            )
    return True, "the last write of its state"


def forbid_kv_writes_on_cloned_inputs(
    gm: torch.fx.GraphModule, state_inputs: Collection[str] = ()
) -> List[str]:
    """Keep ``IKVCacheUpdateLayer`` off a graph input that the model clones.

    Run on the graph of ``ExportedProgram.module()`` (after buffer lifting,
    before lowering). ``c = x.clone(); c[:, :, p:p+n, :] = u`` writes a copy,
    and the caller's ``x`` keeps its value; but lowering removes a clone that
    is its input's only reader (``remove_input_alias_fixing_clones``), and the
    layer would then write ``x`` itself. Every ``slice_scatter`` /
    ``index_copy`` whose cache is a clone of an input other than a lifted
    buffer (``state_inputs``, written by definition) gets
    ``node.meta["_trt_no_kv_alias"]``, the converters' veto. A clone that
    lowering keeps (its input has other readers) is no network input, so the
    mark changes nothing there. Returns the names of the marked nodes.

    A KV-form write directly on an input (``torch.index_copy(x, 2, pos, u)``)
    keeps upstream's behaviour: the input is taken for a cache handed to the
    engine, which writes it in place.
    """
    kv_forms = (torch.ops.aten.slice_scatter.default, torch.ops.aten.index_copy.default)
    marked = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in kv_forms:
            continue
        if not node.args or not isinstance(node.args[0], torch.fx.Node):
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
    """Whether ``node``, a user of ``through``, reads the values of ``through``.

    Metadata reads do not (nor the input guards of ``ExportedProgram.module()``,
    nor a write-back into it); nor does ``aten.copy(through, src)``, which takes
    only the shape and dtype of its first argument (slice assignment
    ``cache[:, :, 3:4] = u`` is ``slice_scatter(cache, copy(slice(cache), u))``
    once functionalized); a view does when one of its users does.
    """
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
    write: Optional[torch.fx.Node], cache: Optional[torch.fx.Node] = None
) -> Tuple[bool, str]:
    """Whether the write ``write`` is the only node reading its cache's values.

    The layer writes its cache input in place, and TensorRT does not order
    another layer reading that input before the write: a read of the old state
    in the same engine (``old = cache.sum(dim=2); cache[:, :, 3:4] = u``) saw
    the new values (measured with TensorRT-RTX 1.6.1). ``cache`` defaults to
    ``write.args[0]``; a clone of it that is the write's cache counts as the
    write. Returns ``(sole_reader, reason)``.
    """
    if write is None:
        return True, "no graph node"
    if cache is None:
        cache = write.args[0] if write.args else None
    if not isinstance(cache, torch.fx.Node):
        return True, "no cache node"
    own = {write, write.args[0] if write.args else None}
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
