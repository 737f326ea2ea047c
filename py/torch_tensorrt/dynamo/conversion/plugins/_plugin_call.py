"""The TensorRT side of a schema-derived plugin converter (a thin layer on QDP).

:class:`~._plugin_layout.PluginLayout` makes every layout decision from the op
schema; this module reads the registered QDP plugin, checks it against that layout
and adds the layer.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorrt as trt
import torch
from torch.fx.node import Argument, Target
from torch_tensorrt._enums import dtype as _dtype
from torch_tensorrt.dynamo.conversion._ConversionContext import ConversionContext
from torch_tensorrt.dynamo.conversion.converter_utils import get_trt_tensor
from torch_tensorrt.dynamo.conversion.plugins._plugin_layout import PluginLayout

logger = logging.getLogger(__name__)


# The plugin's view of an output: its dtype and the input it aliases (or None)
OutputDesc = Tuple[Any, Optional[int]]


def qdp_output_descs(
    plugin_def: Any, inputs: Sequence[trt.ITensor], attrs: Dict[str, Any]
) -> List[OutputDesc]:
    """Dtype and aliased input of each output of a QDP plugin.

    Calls the register function as QDP does at build time (a fresh ``TensorDesc`` per
    input, rank-only shapes) and matches ``output.get_aliased()`` to them by identity;
    QDP 11.1's ``Tensor.is_aliased`` and runtime alias links are unreliable."""
    from tensorrt.plugin import ShapeExprs, TensorDesc

    descs = []
    for tensor in inputs:
        desc = TensorDesc()
        desc.dtype = tensor.dtype
        desc.shape_expr = ShapeExprs(len(tensor.shape), _is_dummy=True)
        desc._immutable = True
        descs.append(desc)
    outputs = plugin_def.register_func(*descs, **attrs)
    if not isinstance(outputs, tuple):
        outputs = (outputs,)
    index = {id(desc): i for i, desc in enumerate(descs)}
    return [
        (
            out.dtype,
            None if out.get_aliased() is None else index[id(out.get_aliased())],
        )
        for out in outputs
    ]


def scalar_attributes_unsupported() -> Optional[str]:
    """Why QDP cannot create plugins with int/float/bool attributes here, or None:
    ``tensorrt.plugin`` before TensorRT 11.4 calls the annotated type on a one-element
    array (``int(array)``), which NumPy 2.4 rejects."""
    try:
        import tensorrt.plugin  # noqa: F401
    except ImportError:
        return None  # no QDP (e.g. TensorRT-RTX): nothing creates such plugins
    try:
        int(np.array([1]))
    except TypeError:
        pass
    else:
        return None
    version = tuple(int(p) for p in trt.__version__.split(".")[:2])
    if version >= (11, 4):
        return None
    return (
        f"tensorrt.plugin of TensorRT {trt.__version__} cannot create a plugin with "
        f"int, float or bool attributes under NumPy {np.__version__} (fixed in "
        "TensorRT 11.4). Install numpy<2.4, or declare each such attribute as a "
        "one-element array, numpy.ndarray[typing.Any, numpy.dtype[numpy.float32]] "
        "(or int64, bool ...; Torch-TensorRT passes the value so), a form QDP "
        "accepts with every NumPy (it refuses numpy.typing.NDArray[...] from "
        "NumPy 2.5 on)"
    )


def _check_scalar_attributes(
    layout: PluginLayout, plugin_id: str, input_attrs: Dict[str, Any]
) -> None:
    scalars = [
        name
        for name, annotation in input_attrs.items()
        if annotation in (int, float, bool)
    ]
    if not scalars:
        return
    reason = scalar_attributes_unsupported()
    if reason is not None:
        raise RuntimeError(
            f"{layout.op}: TensorRT plugin {plugin_id} has scalar attributes "
            f"{scalars}; {reason}"
        )


def _warn_string_attributes(
    layout: PluginLayout, plugin_id: str, input_attrs: Dict[str, Any]
) -> None:
    """Warn about ``str`` attributes of a JIT plugin, which QDP 11.1 serializes from
    freed memory (``bytes`` attributes and AOT plugins are safe)."""
    strings = [name for name, annotation in input_attrs.items() if annotation is str]
    if strings:
        logger.warning(
            f"{layout.op}: TensorRT plugin {plugin_id} has str attributes {strings} "
            "and runs its JIT implementation; tensorrt.plugin of TensorRT "
            f"{trt.__version__} may serialize str attributes from freed memory, so "
            "the plugin recreated from a serialized engine can see corrupted values. "
            "Declare them as bytes, or use an aot_impl"
        )


def _check_aot_attributes(
    layout: PluginLayout, plugin_id: str, plugin_def: Any
) -> None:
    """An ``aot_impl`` must declare every attribute, in the register function's order.

    QDP 11.1 passes all attributes positionally to ``aot_impl`` at build time, but
    its validation accepts a subset, which would feed the kernel wrong values."""
    if plugin_def.aot_impl_func is None:
        return
    declared = list(plugin_def.aot_impl_attr_names or [])
    registered = list(plugin_def.input_attrs)
    if declared != registered:
        raise ValueError(
            f"{layout.op}: the aot_impl of TensorRT plugin {plugin_id} takes "
            f"attributes {declared}, but the plugin has {registered}; "
            "tensorrt.plugin passes every attribute positionally to aot_impl at build "
            f"time, so declare all of them, in this order: {registered} (or compile "
            "with the JIT implementation: use_aot_if_available=False)"
        )


def _check_output_dtypes(
    layout: PluginLayout,
    plugin_id: str,
    plugin_outputs: Sequence[OutputDesc],
    val: Any,
    return_lengths: Sequence[int],
) -> None:
    """Each plugin output's dtype must be the dtype of the op's (fake) result."""
    if val is None:
        return
    expected = layout.flat_outputs(val)
    labels = layout.outputs(return_lengths)
    for (label, _), (out_dtype, _), fake in zip(labels, plugin_outputs, expected):
        if not isinstance(fake, torch.Tensor):
            continue
        want = _dtype._from(fake.dtype).to(trt.DataType)
        if out_dtype != want:
            raise ValueError(
                f"{layout.op}: TensorRT plugin {plugin_id} declares {label} as "
                f"{out_dtype}, but the op's implementation gives {fake.dtype} "
                f"({want}); outputs: {layout.describe(return_lengths)}"
            )


def add_plugin_for_op(
    ctx: ConversionContext,
    target: Target,
    args: Tuple[Argument, ...],
    kwargs: Dict[str, Argument],
    name: str,
    layout: PluginLayout,
    plugin_id: str,
    plugin: Any,
    plugin_def: Any,
    use_aot: bool,
    coerce_attr: Callable[[str, Any], Any],
    output_descs: Callable[
        [Any, Sequence[trt.ITensor], Dict[str, Any]], List[OutputDesc]
    ] = qdp_output_descs,
) -> Any:
    """Add the plugin layer for one call of ``layout.op``; return the converter result.

    The plugin is first checked against the op's layout (inputs, attributes, output
    count, dtypes, aliasing): a mismatch raises, never feeds it the wrong tensors.
    """
    values = layout.bind(args, kwargs)
    val = ctx.current_node.meta.get("val") if ctx.current_node else None
    return_lengths = layout.return_lengths(val)
    plugin_inputs = layout.validate_plugin(
        plugin_id,
        plugin_def.input_tensor_names,
        plugin_def.input_attrs,
        plugin_def.num_outputs,
        return_lengths,
    )
    _check_scalar_attributes(layout, plugin_id, plugin_def.input_attrs)
    if use_aot:
        _check_aot_attributes(layout, plugin_id, plugin_def)
    else:
        _warn_string_attributes(layout, plugin_id, plugin_def.input_attrs)
    unique_id = uuid.uuid4()
    tensors = {}
    for arg in layout.tensor_args:
        if values[arg] is None:
            raise ValueError(
                f"{layout.op}: optional tensor argument '{arg}' is None; a TensorRT "
                f"plugin ({plugin_id}) needs a tensor for every input"
            )
        tensors[arg] = get_trt_tensor(ctx, values[arg], f"{arg}_{unique_id}")
    # QDP takes inputs, then attributes (by keyword), in the register function's order
    inputs = [tensors[arg] for arg in plugin_inputs]
    attrs = {attr: coerce_attr(attr, values[attr]) for attr in plugin_def.input_attrs}

    plugin_outputs = output_descs(plugin_def, inputs, attrs)
    layout.validate_aliasing(
        plugin_id, [a for _, a in plugin_outputs], return_lengths, plugin_inputs
    )
    _check_output_dtypes(layout, plugin_id, plugin_outputs, val, return_lengths)

    layer = ctx.net.add_plugin(plugin(*inputs, **attrs), aot=use_aot)
    assert layer, f"{plugin_id} plugin layer was not able to be created"
    layer.name = f"[{target}]-[{name}]"
    logger.debug(
        f"Added plugin {plugin_id} for {layout.op}: {layout.describe(return_lengths)}"
    )
    outputs = [layer.get_output(i) for i in range(layer.num_outputs)]
    return layout.group_outputs(outputs, return_lengths)
