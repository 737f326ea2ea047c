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
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch
from torch_tensorrt._enums import dtype

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
        if user.op == "call_function" and user.target in _WRITE_OPS:
            if user.args and user.args[0] is node:
                return False, (
                    f"the state it writes is written again by {user.name}; the "
                    "later write is a scatter, so this one is too"
                )
    return True, "the last write of its state"
