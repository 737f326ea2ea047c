"""The TensorRT side of a schema-derived plugin converter (a thin layer on QDP).

Every decision (which argument is an input, which an attribute, how many outputs,
which output aliases which input, what the converter returns) is made by
:class:`~._plugin_layout.PluginLayout` from the op schema; this module only
reads the registered QDP plugin, checks it against that layout and adds the
layer.
"""

from __future__ import annotations

import logging
import operator
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorrt as trt
import torch
from torch.fx.node import Argument, Target
from torch_tensorrt._enums import dtype as _dtype
from torch_tensorrt.dynamo.conversion._ConversionContext import (
    AliasedOutput,
    AliasKind,
    ConversionContext,
)
from torch_tensorrt.dynamo.conversion._functionalized_op import (
    in_place_source,
    other_readers,
    updated_again,
)
from torch_tensorrt.dynamo.conversion.converter_utils import get_trt_tensor
from torch_tensorrt.dynamo.conversion.impl.slice_scatter import input_binding_name
from torch_tensorrt.dynamo.conversion.plugins._plugin_layout import PluginLayout

# in_place_plugin_binding for plugins that declare no alias (CompilationSettings)
SAME_ADDRESS = "same_address"

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
    same_address = (
        ctx.compilation_settings.in_place_plugin_binding == SAME_ADDRESS
        and bool(layout.mutated)
    )
    layout.validate_aliasing(
        plugin_id,
        [a for _, a in plugin_outputs],
        return_lengths,
        plugin_inputs,
        same_address,
    )
    _check_output_dtypes(layout, plugin_id, plugin_outputs, node, return_lengths)

    layer = ctx.net.add_plugin(plugin(*inputs, **attrs), aot=use_aot)
    assert layer, f"{plugin_id} plugin layer was not able to be created"
    layer.name = f"[{target}]-[{name}]"
    logger.debug(
        f"Added plugin {plugin_id} for {layout.op}: {layout.describe(return_lengths)}"
    )
    outputs = [layer.get_output(i) for i in range(layer.num_outputs)]
    if node is not None:
        _record_in_place_state(
            ctx, layout, node, tensors, outputs, return_lengths, same_address
        )
    elif same_address:
        raise ValueError(
            f"{layout.op}: with in_place_plugin_binding='same_address' the plugin "
            "writes its state through an output bound to the state's memory, which "
            "needs the FX node being converted (ConversionContext.current_node)"
        )
    return layout.group_outputs(outputs, return_lengths)


def _record_in_place_state(
    ctx: ConversionContext,
    layout: PluginLayout,
    node: torch.fx.Node,
    tensors: Dict[str, trt.ITensor],
    outputs: Sequence[Any],
    return_lengths: Sequence[int],
    same_address: bool = False,
) -> None:
    """Record plugin outputs that update an engine input in place.

    The runtimes then bind that output to the caller's tensor (``aliased_io``,
    kind ``user``; TensorRT does not report plugin aliases itself), so the state
    is updated where it lives. Recorded only when it is safe: the mutated
    argument is a network input (or the state an earlier in-place plugin of this
    engine updates, for a declared alias), the plugin is its only reader
    (otherwise TensorRT copies it first), and the new value is an output of this
    engine and the state's final value in it. Otherwise a declared alias keeps
    the copy-back path, with a warning; a ``same_address`` plugin writes only
    what it changes into its output, so anything but an in-place binding would
    lose the rest of the state, and that is an error.
    """
    fx_values = layout.bind(node.args, dict(node.kwargs))
    first_alias = len(layout.outputs(return_lengths)) - len(layout.mutated)
    for k, arg in enumerate(layout.mutated):
        state = fx_values[arg]
        if not isinstance(state, torch.fx.Node):
            continue

        network_input = tensors[arg]
        binding = input_binding_name(ctx, network_input)
        source = state
        if binding is None:
            # after other in-place plugins, this one writes the engine input the
            # first of them updates
            source = in_place_source(state)
            if same_address or source is None or source.op != "placeholder":
                if state.op == "placeholder" or same_address:
                    _not_in_place(
                        layout,
                        arg,
                        state,
                        same_address,
                        "it reaches the plugin through another layer, not as an "
                        "engine input",
                    )
                continue
            network_input = _network_input(ctx, source)
            binding = str(network_input.name)
        readers = other_readers(state, node)
        if readers:
            _not_in_place(
                layout,
                arg,
                state,
                same_address,
                f"engine input '{binding}' has other readers ({', '.join(readers)}), "
                "so TensorRT would copy it before the in-place plugin",
            )
            continue
        index = len(layout.returns) + k
        new_values = [
            user
            for user in node.users
            if user.target is operator.getitem and user.args[1] == index
        ]
        # bound only when it is an engine output and the state's final value in
        # the engine: an intermediate one would be overwritten in the caller's
        # memory by the final value's write-back
        if any(
            any(u.op == "output" for u in value.users) and not updated_again(value)
            for value in new_values
        ):
            output = outputs[first_alias + k]
            _check_in_place_binding(ctx, layout, arg, source, network_input, output)
            ctx.aliased_outputs.append(AliasedOutput(output, binding, AliasKind.USER))
        elif same_address and any(value.users for value in new_values):
            _not_in_place(
                layout,
                arg,
                state,
                same_address,
                "its new value is read inside the engine or updated again before "
                "it leaves the engine",
            )


def _not_in_place(
    layout: PluginLayout,
    arg: str,
    state: torch.fx.Node,
    same_address: bool,
    why: str,
) -> None:
    """Warn that ``arg`` is copied back, or raise for a ``same_address`` plugin."""
    if same_address:
        raise ValueError(
            f"{layout.op}: argument '{arg}' ({state.name}) cannot be bound in "
            f"place: {why}. With in_place_plugin_binding='same_address' the "
            "plugin writes only what it changes into its output, so that "
            "output must be bound to the state's own memory: the state must "
            "be an engine input read by this plugin alone, and its new value "
            "an engine output that nothing else in the engine updates. Use "
            "in_place_plugin_binding='declared_alias' with a plugin that "
            "declares X.aliased() otherwise"
        )
    logger.warning(
        f"{layout.op}: argument '{arg}' ({state.name}) is not updated in "
        f"place: {why}; its new value is copied back instead"
    )


def _network_input(ctx: ConversionContext, placeholder: torch.fx.Node) -> trt.ITensor:
    """The network input of ``placeholder`` (the interpreter adds one per placeholder)."""
    placeholders = [n for n in placeholder.graph.nodes if n.op == "placeholder"]
    return ctx.net.get_input(placeholders.index(placeholder))


def _check_in_place_binding(
    ctx: ConversionContext,
    layout: PluginLayout,
    arg: str,
    state: torch.fx.Node,
    network_input: trt.ITensor,
    output: trt.ITensor,
) -> None:
    """Raise if ``output`` cannot be bound to the memory of ``network_input``."""
    binding = network_input.name
    if output.dtype != network_input.dtype or tuple(output.shape) != tuple(
        network_input.shape
    ):
        raise ValueError(
            f"{layout.op}: the plugin output aliasing argument '{arg}' is "
            f"{output.dtype} {tuple(output.shape)}, but engine input '{binding}' is "
            f"{network_input.dtype} {tuple(network_input.shape)}; an output updating "
            "an input in place must have the input's dtype and shape"
        )
    fake = state.meta.get("val")
    if isinstance(fake, torch.Tensor) and not fake.is_contiguous():
        raise ValueError(
            f"{layout.op}: argument '{arg}' (engine input '{binding}') is updated in "
            f"place, but the example tensor is not contiguous (strides {fake.stride()})"
            "; TensorRT binds contiguous memory, so the update would reach a copy. "
            "Compile and call with a contiguous tensor (e.g. .contiguous())"
        )
    for entry in ctx.aliased_outputs:
        if entry.input_binding_name == binding:
            raise ValueError(
                f"{layout.op}: engine input '{binding}' (argument '{arg}') would be "
                f"updated in place by two outputs ('{entry.output_tensor.name}' and "
                "this plugin's); an input can be aliased by one output only"
            )
