"""Signatures of the QDP plugin that ``generate_plugin`` writes for a torch op.

QDP wants tensors first, then attributes, and calls the JIT impl with
``(*tensors, *attributes, outputs, stream=stream)``; a torch schema may interleave
them and have keyword-only arguments. The plugin side is tensors, then attributes,
each in schema order (as ``PluginLayout``); the op is called in schema order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch_tensorrt._enums import dtype
from torch_tensorrt.dynamo.conversion.plugins._plugin_layout import PluginLayout

# Names QDP reserves in the impl signature (``_validate.DISALLOWED_ATTR_NAMES``)
_RESERVED_NAMES = ("outputs", "stream", "tactic")

# Rejected by ``Tensor.__cuda_array_interface__`` itself in TensorRT 11.1
_REJECTED_BY_CUDA_ARRAY_INTERFACE = ("BF16", "FP8", "INT4")


@dataclass(frozen=True)
class GeneratedPluginSignature:
    """Plugin-side argument order of a generated plugin, and the way back to the op."""

    op: torch._ops.OpOverload
    tensor_args: Tuple[str, ...]
    attr_args: Tuple[str, ...]
    attr_annotations: Tuple[Any, ...]  # one per attr_args entry

    @classmethod
    def from_op(
        cls,
        plugin_name: str,
        layout: PluginLayout,
        attr_annotations: Mapping[str, Any],
    ) -> GeneratedPluginSignature:
        """``attr_annotations``: the QDP annotation per attribute schema type name.

        ``Tensor?`` arguments are inputs too; the converter rejects None for them.
        """
        op = layout.op
        schema_types = {a.name: a.type for a in op._schema.arguments}
        reserved = [a for a in schema_types if a in _RESERVED_NAMES]
        if reserved:
            raise ValueError(
                f"{plugin_name}: argument '{reserved[0]}' of {op} has a name that "
                f"tensorrt.plugin reserves ({', '.join(_RESERVED_NAMES)}); rename it "
                "to generate a plugin"
            )
        annotations: List[Any] = []
        for name in layout.attr_args:
            annotation = attr_annotations.get(str(schema_types[name]))
            if annotation is None:
                raise ValueError(
                    f"{plugin_name}: argument '{name}' of {op} has type "
                    f"{schema_types[name]}, which a generated plugin cannot take: "
                    "Tensor and Tensor? arguments become plugin inputs, "
                    f"{', '.join(attr_annotations)} arguments plugin attributes; "
                    "register the plugin with tensorrt.plugin.register and use "
                    "generate_plugin_converter"
                )
            annotations.append(annotation)
        if not layout.tensor_args:
            raise ValueError(
                f"{plugin_name}: {op} has no Tensor argument; a TensorRT plugin needs "
                "at least one input tensor"
            )
        return cls(op, layout.tensor_args, layout.attr_args, tuple(annotations))

    @property
    def register_params(self) -> Tuple[str, ...]:
        """Parameters of the register function: tensors first, then attributes."""
        return self.tensor_args + self.attr_args

    @property
    def impl_params(self) -> Tuple[str, ...]:
        """Parameters of the JIT impl: tensors, attributes, outputs, stream."""
        return self.register_params + ("outputs", "stream")

    def register_annotations(self, desc_type: Any, num_outputs: int) -> Dict[str, Any]:
        annotations: Dict[str, Any] = dict.fromkeys(self.tensor_args, desc_type)
        annotations.update(zip(self.attr_args, self.attr_annotations))
        # Exact arity: QDP calls issubclass on every element of the tuple
        annotations["return"] = Tuple[(desc_type,) * num_outputs]
        return annotations

    def impl_annotations(self, tensor_type: Any, num_outputs: int) -> Dict[str, Any]:
        annotations: Dict[str, Any] = dict.fromkeys(self.tensor_args, tensor_type)
        annotations.update(zip(self.attr_args, self.attr_annotations))
        annotations["outputs"] = Tuple[(tensor_type,) * num_outputs]
        annotations["stream"] = int
        return annotations

    def function_source(
        self, func_name: str, params: Sequence[str], target: str
    ) -> str:
        """``def func_name(params): return target(p=p, ...)``, forwarding by name."""
        forwarded = ", ".join(f"{p}={p}" for p in params)
        return (
            f"def {func_name}({', '.join(params)}):\n    return {target}({forwarded})\n"
        )

    def op_call(
        self, values: Mapping[str, Any], attr_to_python: Callable[[Any], Any]
    ) -> Tuple[List[Any], Dict[str, Any]]:
        """``(args, kwargs)`` calling the op in schema order, from values by name.

        Attributes go through ``attr_to_python`` (QDP hands them over as one-element
        arrays). Every schema argument is a plugin input or attribute, so each value
        is present.
        """
        args: List[Any] = []
        kwargs: Dict[str, Any] = {}
        for arg in self.op._schema.arguments:
            value = values[arg.name]
            if arg.name in self.attr_args:
                value = attr_to_python(value)
            if arg.kwarg_only:
                kwargs[arg.name] = value
            else:
                args.append(value)
        return args, kwargs


def cuda_array_interface_dtypes() -> Tuple[Any, ...]:
    """TensorRT dtypes that ``tensorrt.plugin.Tensor`` can hand to PyTorch."""
    import tensorrt as trt

    rejected = [
        getattr(trt.DataType, name)
        for name in _REJECTED_BY_CUDA_ARRAY_INTERFACE
        if hasattr(trt.DataType, name)
    ]
    supported = []
    for trt_dtype in trt.DataType.__members__.values():
        if trt_dtype in rejected:
            continue
        try:
            trt.nptype(trt_dtype)
        except TypeError:
            continue
        supported.append(trt_dtype)
    return tuple(supported)


def check_jit_dtypes(
    plugin_name: str, named_dtypes: Sequence[Tuple[str, Any]]
) -> List[Any]:
    """TensorRT dtypes of the generated JIT plugin's tensors, or one clear error.

    ``named_dtypes``: ``(label, tensorrt.DataType or torch.dtype)`` per input/output.
    """
    import tensorrt as trt

    supported = cuda_array_interface_dtypes()
    trt_dtypes: List[Any] = []
    bad: List[str] = []
    for label, value in named_dtypes:
        trt_dtype: Optional[Any] = value
        if not isinstance(value, trt.DataType):
            try:
                trt_dtype = dtype._from(value).to(trt.DataType)
            except (TypeError, ValueError):
                trt_dtype = None
        if trt_dtype is None or trt_dtype not in supported:
            shown = value if trt_dtype is None else trt_dtype
            bad.append(f"{label} ({shown})")
        trt_dtypes.append(trt_dtype)
    if bad:
        raise ValueError(
            f"{plugin_name}: the generated plugin cannot handle {', '.join(bad)}: its "
            "JIT implementation passes tensors to PyTorch through "
            "tensorrt.plugin.Tensor.__cuda_array_interface__, which supports "
            f"{', '.join(str(d) for d in supported)}; cast the tensor, or register "
            "the plugin yourself with tensorrt.plugin.register and aot_impl"
        )
    return trt_dtypes
