"""What ``IKVCacheUpdateLayer`` takes as its cache, checked before it is emitted.

The layer's builder takes Float, Half or BFloat16 caches only (TensorRT's
KVCacheUpdate: "T: float32, float16, bfloat16"); any other type leaves the layer
without an output shape and the build fails later with "Could not get tensor
shape". A write that fails the check keeps the scatter path and is copied back.
Which writes may take the layer is decided in ``lowering/_kv_state_writes.py``.
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


# A write in the layer's form that view_state_writes_in_kv_cache_form made from a
# state update: the converters take it on the layer at any batch size, also a
# dynamic one, and with a start position known at run time.
KV_STATE_WRITE = "_trt_kv_state_write"

# A view of a state at an engine's boundary: the state seen in the layer's form
# ("input"), or the layer's output seen in the state's own shape ("output").
STATE_VIEW = "_trt_state_view"
