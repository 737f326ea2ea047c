"""The TensorRT side of a schema-derived plugin converter (a thin layer on QDP).

Every decision (which argument is an input, which an attribute, how many outputs,
which output aliases which input, what the converter returns) is made by
:class:`~._plugin_layout.PluginLayout` from the op schema; this module only
reads the registered QDP plugin, checks it against that layout and adds the
layer.
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
    """Dtype and aliased input of each output of a QDP plugin, from its register function.

    Calls the register function the way QDP does at build time
    (``get_output_data_types``: one fresh ``TensorDesc`` per input, rank-only
    shapes) and matches ``output.get_aliased()`` against those descs by
    identity. ``Tensor.is_aliased`` and the runtime alias links of the QDP 11.1
    wrapper are not used: the first is inverted, the second links non-aliased
    outputs to the last input and is empty after deserialization.
    """
    from tensorrt.plugin import ShapeExprs, TensorDesc

    descs = []
    for tensor in inputs:
        desc = TensorDesc()
        desc.dtype = tensor.dtype
        # rank-only shape expressions, as QDP itself builds them at this point
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
    """Why QDP cannot create plugins with int/float/bool attributes here, or None.

    ``tensorrt.plugin`` before TensorRT 11.4 converts a scalar attribute by
    calling its annotated type on the field's one-element array, which NumPy 2.4 rejects
    ("only 0-dimensional arrays can be converted to Python scalars"): the plugin
    cannot be created at build time nor after deserialization. TensorRT 11.4
    reads ``field.data[0]``.
    """
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
    """Warn about ``str`` attributes of a JIT plugin (QDP 11.1 serializes them unsafely).

    ``get_fields_to_serialize`` of QDP 11.1 builds each ``str`` field from a
    temporary ``value.encode()`` that nothing keeps alive, so the plugin
    recreated from a serialized engine may read freed memory (seen on CPU: an
    attribute of NUL bytes now and then). ``bytes`` attributes are serialized
    from the stored value; AOT plugins are not recreated in Python.
    """
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

    QDP 11.1 passes all attributes positionally to ``aot_impl`` at build time
    (``_TemplateAOTPlugin.get_launch_params``), while its validation accepts a
    subset: with a subset, the kernel would get other attributes' values.
    """
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
    node: Optional[torch.fx.Node],
    return_lengths: Sequence[int],
) -> None:
    """Each plugin output's dtype must be the dtype of the op's (fake) result."""
    val = node.meta.get("val") if node is not None else None
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

    The registered plugin is checked against the op's layout first (inputs by
    name, attributes by name and type, output count, dtypes and aliasing), so
    a mismatch is an error naming the op and both layouts, never a plugin fed
    the wrong tensors.
    """
    values = layout.bind(args, kwargs)
    node = ctx.current_node
    return_lengths = layout.return_lengths(node.meta.get("val") if node else None)
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
    # QDP takes its inputs in its register function's order, and attributes as
    # keyword arguments in that order
    inputs = [tensors[arg] for arg in plugin_inputs]
    attrs = {attr: coerce_attr(attr, values[attr]) for attr in plugin_def.input_attrs}

    plugin_outputs = output_descs(plugin_def, inputs, attrs)
    layout.validate_aliasing(
        plugin_id, [a for _, a in plugin_outputs], return_lengths, plugin_inputs
    )
    _check_output_dtypes(layout, plugin_id, plugin_outputs, node, return_lengths)

    layer = ctx.net.add_plugin(plugin(*inputs, **attrs), aot=use_aot)
    assert layer, f"{plugin_id} plugin layer was not able to be created"
    layer.name = f"[{target}]-[{name}]"
    logger.debug(
        f"Added plugin {plugin_id} for {layout.op}: {layout.describe(return_lengths)}"
    )
    outputs = [layer.get_output(i) for i in range(layer.num_outputs)]
    return layout.group_outputs(outputs, return_lengths)
