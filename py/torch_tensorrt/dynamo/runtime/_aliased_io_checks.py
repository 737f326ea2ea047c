"""An engine's aliased I/O records, checked before an output is bound to an input.

``aliased_io`` maps an output binding name to ``(input binding name, kind)``. The
records are reloaded (``ALIASED_IO_IDX``, ``output@input@kind`` joined by ``%``),
possibly damaged, so they are parsed strictly (:func:`read_aliased_io_records`;
an unknown kind would hide an output from ``user_output_count``), checked against
the bindings (:func:`check_aliased_io_records`), the engine
(:func:`check_aliased_io_against_engine`) and, every call, the bound input
(:func:`check_bound_alias`). Each raises :class:`AliasedIOError`.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Sequence, Tuple

import torch
from torch_tensorrt.dynamo.runtime._serialized_engine_layout import (
    SERIALIZED_ALIASED_IO_FIELD_DELIM as _FIELD_DELIM,
)
from torch_tensorrt.dynamo.runtime._serialized_engine_layout import (
    SERIALIZED_ALIASED_IO_RECORD_DELIM as _RECORD_DELIM,
)

# The kinds a record may name: the values of conversion's AliasKind, as the
# serialized records (and the C++ runtime) spell them
ALIAS_KINDS = ("kv_cache_update", "user")


class AliasedIOError(RuntimeError):
    """An aliased I/O record or binding that would share memory unsafely."""


def read_aliased_io_records(
    text: str, engine_name: Optional[str] = None
) -> Dict[str, Tuple[str, str]]:
    """Parse serialized ``output@input@kind`` records, refusing anything unclear;
    ``engine_name``, if known, names the engine in the error."""
    engine = f"Engine {engine_name}" if engine_name is not None else "An engine"
    records: Dict[str, Tuple[str, str]] = {}
    if not text:
        return records
    for record in str(text).split(_RECORD_DELIM):
        fields = record.split(_FIELD_DELIM)
        if len(fields) != 3 or not all(fields):
            raise AliasedIOError(
                f"{engine} has a malformed aliased I/O record "
                f"{record!r}; expected 'output{_FIELD_DELIM}input{_FIELD_DELIM}kind'."
            )
        out_name, in_name, kind = fields
        if kind not in ALIAS_KINDS:
            raise AliasedIOError(
                f"{engine} declares output '{out_name}' aliased to input "
                f"'{in_name}' with unknown kind {kind!r}; expected one of "
                f"{list(ALIAS_KINDS)}."
            )
        if out_name in records:
            raise AliasedIOError(
                f"{engine} declares output '{out_name}' aliased twice "
                f"(to '{records[out_name][0]}' and to '{in_name}'); an output can be "
                "written into one input only."
            )
        records[out_name] = (in_name, kind)
    return records


def check_aliased_io_records(
    engine_name: str,
    aliased_io: Dict[str, Tuple[str, str]],
    input_binding_names: Sequence[str],
    output_binding_names: Sequence[str],
) -> None:
    """Every aliased output and input is a binding of the engine; one output per input.

    Kinds are checked by :func:`read_aliased_io_records`."""
    inputs, outputs = set(input_binding_names), set(output_binding_names)
    written: Dict[str, str] = {}
    for out_name, (in_name, _kind) in aliased_io.items():
        if out_name not in outputs:
            raise AliasedIOError(
                f"Engine {engine_name} declares an aliased output '{out_name}' it "
                f"does not have (its outputs: {list(output_binding_names)})."
            )
        if in_name not in inputs:
            raise AliasedIOError(
                f"Engine {engine_name} declares output '{out_name}' aliased to input "
                f"'{in_name}', which it does not have (its inputs: "
                f"{list(input_binding_names)})."
            )
        if in_name in written:
            raise AliasedIOError(
                f"Engine {engine_name} declares outputs '{written[in_name]}' and "
                f"'{out_name}' both written into input '{in_name}'; an input can "
                "receive one output only."
            )
        written[in_name] = out_name


def _described(dtype: torch.dtype, shape: Sequence[int]) -> str:
    dims = "x".join(str(d) for d in shape) or "scalar"
    text = f"{str(dtype).replace('torch.', '')} {dims}"
    if all(d >= 0 for d in shape):
        nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        text += f" ({nbytes} bytes)"
    return text


def _torch_dtype(trt_dtype: Any) -> torch.dtype:
    from torch_tensorrt._enums import dtype

    return dtype._from(trt_dtype).to(torch.dtype)


def check_aliased_io_against_engine(
    engine_name: str, aliased_io: Dict[str, Tuple[str, str]], cuda_engine: Any
) -> None:
    """Each aliased pair is an output and an input with the same dtype and shape.

    ``cuda_engine``: the ``ICudaEngine``. Dynamic dimensions are left to
    :func:`check_bound_alias`."""
    import tensorrt as trt

    for out_name, (in_name, _kind) in aliased_io.items():
        modes = (
            cuda_engine.get_tensor_mode(out_name),
            cuda_engine.get_tensor_mode(in_name),
        )
        if modes != (trt.TensorIOMode.OUTPUT, trt.TensorIOMode.INPUT):
            raise AliasedIOError(
                f"Engine {engine_name} declares '{out_name}' aliased to '{in_name}', "
                "but the engine does not have them as an output and an input."
            )
        out_dtype = _torch_dtype(cuda_engine.get_tensor_dtype(out_name))
        in_dtype = _torch_dtype(cuda_engine.get_tensor_dtype(in_name))
        out_shape = tuple(cuda_engine.get_tensor_shape(out_name))
        in_shape = tuple(cuda_engine.get_tensor_shape(in_name))
        same_shape = len(out_shape) == len(in_shape) and all(
            o == i or o < 0 or i < 0 for o, i in zip(out_shape, in_shape)
        )
        if out_dtype != in_dtype or not same_shape:
            raise AliasedIOError(
                f"Engine {engine_name} cannot write output '{out_name}' "
                f"({_described(out_dtype, out_shape)}) into input '{in_name}' "
                f"({_described(in_dtype, in_shape)}): an aliased output needs its "
                "input's dtype and shape."
            )


def check_bound_alias(
    engine_name: str,
    output_name: str,
    output_shape: Sequence[int],
    output_dtype: torch.dtype,
    input_name: str,
    bound_input: Optional[torch.Tensor],
) -> torch.Tensor:
    """The tensor ``output_name`` is bound to: ``bound_input``, checked against
    ``output_shape``, the context's shape for the output in this call."""
    if bound_input is None:
        raise AliasedIOError(
            f"Engine {engine_name} writes output '{output_name}' into input "
            f"'{input_name}', which was not bound in this call."
        )
    shape = tuple(int(d) for d in output_shape)
    # one dtype and one shape: one byte size
    if bound_input.dtype != output_dtype or tuple(bound_input.shape) != shape:
        raise AliasedIOError(
            f"Engine {engine_name} cannot write output '{output_name}' "
            f"({_described(output_dtype, shape)}) into input '{input_name}' "
            f"({_described(bound_input.dtype, tuple(bound_input.shape))}): an "
            "aliased output needs its input's dtype and shape."
        )
    if not bound_input.is_contiguous():
        raise AliasedIOError(
            f"Engine {engine_name} cannot write output '{output_name}' into input "
            f"'{input_name}': the bound input is not contiguous."
        )
    return bound_input
