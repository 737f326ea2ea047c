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
"""

from __future__ import annotations

from typing import Any, Tuple

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
    except TypeError:
        return False, f"cache dtype {cache_dtype!r} is not a tensor dtype"
    name = str(cache_type.to(torch.dtype)).replace("torch.", "")
    if cache_type in KV_CACHE_DTYPES:
        return True, f"cache dtype {name} is taken by IKVCacheUpdateLayer"
    return (
        False,
        f"cache dtype is {name}; IKVCacheUpdateLayer takes float32, float16 "
        "and bfloat16 caches only",
    )
