# type: ignore
"""``generate_plugin_converter`` against the real TensorRT 11.1 plugin code (no GPU).

What is real here: the TensorRT 11.1 Python bindings, ``tensorrt.plugin``
(QDP: ``@trtp.register`` / ``@trtp.impl`` / ``@trtp.aot_impl``, ``PluginDef``,
the plugin creator and the plugin classes), TensorRT's plugin registry and the
Torch-TensorRT C++ runtime library. What is not: there is no builder
(``trt.Builder()`` raises), hence no network, no engine and no CUDA device.

Where a network is needed, :class:`RecordingNetwork` stands in for it. It is a
recording stand-in that checks Torch-TensorRT's own calls only and proves
nothing about what TensorRT's builder accepts: its input tensors are
``trt.ITensor`` instances only so that QDP's type checks accept them, and its
``add_plugin(call, aot)`` does what TensorRT's Python binding does with a QDP
call object (``call(STRICT_AOT or STRICT_JIT)`` -> ``(inputs, shape_inputs,
plugin)``), so the plugin it receives is created by the real QDP creator
through the real registry, in the BUILD phase, and its outputs come from the
real plugin's ``get_output_data_types`` / ``get_aliased_input``.
"""

import operator
import os
import subprocess
import sys
import unittest
from typing import Any, Tuple

import numpy as np
import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt import ENABLED_FEATURES

try:
    import tensorrt as trt
    import tensorrt.plugin as trtp

    HAVE_QDP = ENABLED_FEATURES.qdp_plugin
except ImportError:
    HAVE_QDP = False

NEEDS_QDP = (
    "Needs TensorRT's Python plugin module (tensorrt.plugin, standard TensorRT "
    "flavour); this environment has TensorRT-RTX, which has no Python plugins."
)
NUMPY_PRE_2_4 = os.environ.get("TORCHTRT_PATCHSET_NUMPY_PRE_2_4")


if HAVE_QDP:
    from torch_tensorrt.dynamo._settings import CompilationSettings
    from torch_tensorrt.dynamo.conversion._ConversionContext import ConversionContext
    from torch_tensorrt.dynamo.conversion._ConverterRegistry import (
        DYNAMO_CONVERTERS,
    )
    from torch_tensorrt.dynamo.conversion._functionalized_op import (
        FunctionalizedOp,
        mutated_values,
    )
    from torch_tensorrt.dynamo.conversion.plugins import generate_plugin_converter
    from torch_tensorrt.dynamo.conversion.plugins._plugin_call import (
        qdp_output_descs,
        scalar_attributes_unsupported,
    )
    from torch_tensorrt.dynamo.lowering._state_plan import plan_state_updates

    class StandInTensor(trt.ITensor):
        """A ``trt.ITensor`` instance for QDP's isinstance checks: name, dtype, shape only.

        Made without a network (``trt.ITensor.__new__``); any other attribute of
        the real class would read unset native memory, so it raises instead.
        """

        _OWN = ("name", "dtype", "shape", "_info", "__class__", "__dict__")

        def __getattribute__(self, attr):
            if attr.startswith("__") or attr in StandInTensor._OWN:
                return object.__getattribute__(self, attr)
            raise AttributeError(f"stand-in tensor has no '{attr}'")

        name = property(lambda self: self._info[0])
        dtype = property(lambda self: self._info[1])
        shape = property(lambda self: self._info[2])

        @classmethod
        def make(cls, name, dtype, shape):
            tensor = trt.ITensor.__new__(cls)
            shape = None if shape is None else tuple(shape)
            object.__setattr__(tensor, "_info", (name, dtype, shape))
            return tensor

    class RecordingNetwork:
        """Recording stand-in for ``INetworkDefinition`` (see the module docstring)."""

        class Layer:
            type = trt.LayerType.PLUGIN_V3

            def __init__(self, outputs):
                self.outputs = outputs
                self.num_outputs = len(outputs)
                self.name = None

            def get_output(self, i):
                return self.outputs[i]

        def __init__(self, output_shapes=None):
            self.inputs = []
            self.plugins = []  # (aot, inputs, real plugin object)
            self.layers = []
            self.output_shapes = output_shapes or {}

        @property
        def num_layers(self):
            return len(self.layers)

        def get_layer(self, i):
            return self.layers[i]

        @property
        def num_inputs(self):
            return len(self.inputs)

        def get_input(self, i):
            return self.inputs[i]

        def add_input(self, name, dtype, shape):
            self.inputs.append(StandInTensor.make(name, dtype, shape))
            return self.inputs[-1]

        def add_plugin(self, call, aot=False):
            # what TensorRT's Python binding does with a QDP call object
            request = (
                trt.QuickPluginCreationRequest.STRICT_AOT
                if aot
                else trt.QuickPluginCreationRequest.STRICT_JIT
            )
            inputs, shape_inputs, plugin = call(request)
            assert shape_inputs == []
            self.plugins.append((aot, list(inputs), plugin))
            n = plugin.get_num_outputs()
            dtypes = plugin.get_output_data_types(
                [t.dtype for t in inputs], [len(t.shape) for t in inputs]
            )
            outputs = []
            for i in range(n):
                alias = plugin.get_aliased_input(i)
                shape = inputs[alias].shape if alias >= 0 else self.output_shapes.get(i)
                outputs.append(StandInTensor.make(f"plugin_out_{i}", dtypes[i], shape))
            self.layer = self.Layer(outputs)
            self.layers.append(self.layer)
            return self.layer

    def _creator(plugin_id):
        namespace, name = plugin_id.split("::")
        return trt.get_plugin_registry().get_creator(name, "1", namespace)

    def _runtime_plugin(plugin_id, build_plugin):
        """The plugin as TensorRT recreates it after deserialization (RUNTIME phase)."""
        namespace, name = plugin_id.split("::")
        return _creator(plugin_id).create_plugin(
            name,
            namespace,
            build_plugin.get_fields_to_serialize(),
            trt.TensorRTPhase.RUNTIME,
        )

    # ---- issue #4240, exactly as registered there (the Triton kernel is only
    # needed when TensorRT's builder calls aot_impl, which cannot happen here) ----
    @torch.library.custom_op("my::add_one", mutates_args=())
    def add_one(X: torch.Tensor) -> torch.Tensor:
        return X + 1

    @torch.library.register_fake("my::add_one")
    def _(X: torch.Tensor) -> torch.Tensor:
        return X

    @trtp.register("my::add_one")
    def add_plugin_desc(X: trtp.TensorDesc) -> tuple[trtp.TensorDesc]:
        return (X.aliased(),)

    def _issue_4240_aot_impl(X, outputs, tactic):
        import triton

        raise AssertionError(f"called by TensorRT's builder only ({triton})")

    @trtp.aot_impl("my::add_one")
    def add_plugin_aot_impl(
        X: trtp.TensorDesc, outputs: tuple[trtp.TensorDesc], tactic: int
    ) -> tuple[str | bytes, str | bytes, trtp.KernelLaunchParams, trtp.SymExprs]:
        return _issue_4240_aot_impl(X, outputs, tactic)

    # the same plugin for the op declared the torch way: in place, returns None
    @torch.library.custom_op("my::add_one_", mutates_args=("X",))
    def add_one_(X: torch.Tensor) -> None:
        X.add_(1)

    @add_one_.register_fake
    def _(X):
        return None

    @trtp.register("my::add_one_")
    def add_plugin_desc_(X: trtp.TensorDesc) -> tuple[trtp.TensorDesc]:
        return (X.aliased(),)

    @trtp.aot_impl("my::add_one_")
    def add_plugin_aot_impl_(
        X: trtp.TensorDesc, outputs: tuple[trtp.TensorDesc], tactic: int
    ) -> tuple[str | bytes, str | bytes, trtp.KernelLaunchParams, trtp.SymExprs]:
        return _issue_4240_aot_impl(X, outputs, tactic)

    # ---- an in-place op whose plugin declares no alias: it writes the state
    # through an ordinary output, which the converter refuses ----
    @torch.library.custom_op("qdp_conv::scatter_rows_", mutates_args=("state",))
    def scatter_rows_(state: torch.Tensor, rows: torch.Tensor) -> None:
        state[: rows.shape[0]] = rows

    @scatter_rows_.register_fake
    def _(state, rows):
        return None

    @trtp.register("qdp_conv::scatter_rows_")
    def _scatter_rows_desc(
        state: trtp.TensorDesc, rows: trtp.TensorDesc
    ) -> Tuple[trtp.TensorDesc]:
        return (state.like(),)

    @trtp.impl("qdp_conv::scatter_rows_")
    def _scatter_rows_impl(state, rows, outputs, stream):
        raise AssertionError("run by TensorRT only")

    # ---- a state update with an extra input and an attribute; the register
    # function lists its tensors in another order than the schema ----
    @torch.library.custom_op("qdp_conv::update", mutates_args=("state",))
    def update(
        state: torch.Tensor, x: torch.Tensor, *, alpha: float = 1.0
    ) -> torch.Tensor:
        state.add_(x, alpha=alpha)
        return state.sum(-1)

    @update.register_fake
    def _(state, x, *, alpha=1.0):
        return state.new_empty(state.shape[:-1])

    @trtp.register("qdp_conv::update")
    def _update_desc(
        x: trtp.TensorDesc,
        state: trtp.TensorDesc,
        alpha: np.ndarray[Any, np.dtype[np.float32]],
    ) -> Tuple[trtp.TensorDesc, trtp.TensorDesc]:
        return _reduced(state), state.aliased()

    @trtp.impl("qdp_conv::update")
    def _update_impl(x, state, alpha, outputs, stream):
        raise AssertionError("run by TensorRT only")

    def _state_update_registrations():
        """One op per bad registration: (outputs, output count, expected error)."""
        return {
            "too_few_outputs": (
                lambda x, state: (state.aliased(),),
                1,
                r"qdp_bad::too_few_outputs declares 1 output\(s\), but "
                r"qdp_bad.too_few_outputs.default needs 2: return 0, new state "
                r"\(aliases input 'state'\)",
            ),
            "missing_alias": (
                lambda x, state: (_reduced(state), state.like()),
                2,
                r"qdp_bad::missing_alias aliases no aliased outputs, but "
                r"qdp_bad.missing_alias.default needs output 1 -> input 'state'",
            ),
            "extra_alias": (
                lambda x, state: (x.aliased(), state.aliased()),
                2,
                r"qdp_bad::extra_alias aliases output 0 -> input 'x', output 1 -> "
                r"input 'state', but qdp_bad.extra_alias.default needs output 1 -> "
                r"input 'state'",
            ),
            "wrong_dtype": (
                lambda x, state: (_half(_reduced(state)), state.aliased()),
                2,
                r"qdp_bad.wrong_dtype.default: TensorRT plugin qdp_bad::wrong_dtype "
                r"declares return 0 as DataType.HALF, but the op's implementation "
                r"gives torch.float32",
            ),
        }

    def _reduced(desc):
        out = desc.like()
        out.shape_expr = trtp.ShapeExprs(len(desc.shape_expr) - 1)
        return out

    def _half(desc):
        desc.dtype = trt.float16
        return desc

    def _register_bad(name, outputs, n):
        torch.library.define(
            f"qdp_bad::{name}",
            "(Tensor(a!) state, Tensor x, *, float alpha=1.0) -> Tensor",
        )
        torch.library.register_fake(f"qdp_bad::{name}")(
            lambda state, x, *, alpha=1.0: state.new_empty(state.shape[:-1])
        )

        def desc(
            x: trtp.TensorDesc,
            state: trtp.TensorDesc,
            alpha: np.ndarray[Any, np.dtype[np.float32]],
        ) -> Tuple[(trtp.TensorDesc,) * n]:
            return outputs(x, state)

        trtp.register(f"qdp_bad::{name}")(desc)

    for _bad, (_outputs, _n, _) in _state_update_registrations().items():
        _register_bad(_bad, _outputs, _n)

    def _define_elementwise(qualname, schema):
        """A custom op whose (fake) result is shaped like its first argument."""
        torch.library.define(qualname, schema)
        torch.library.register_fake(qualname)(
            lambda *args, **kwargs: torch.empty_like(args[0])
        )

    # Tensor[] return, two mutated arguments and an optional tensor
    torch.library.define(
        "qdp_conv::chunk_update",
        "(Tensor(a!) a, Tensor(b!) b, Tensor? bias, int n) -> Tensor[]",
    )
    torch.library.register_fake("qdp_conv::chunk_update")(
        lambda a, b, bias, n: [c.new_empty(c.shape) for c in a.chunk(n, dim=-1)]
    )

    @trtp.register("qdp_conv::chunk_update")
    def _chunk_update_desc(
        b: trtp.TensorDesc,
        a: trtp.TensorDesc,
        bias: trtp.TensorDesc,
        n: np.ndarray[Any, np.dtype[np.int64]],
    ) -> Tuple[trtp.TensorDesc, trtp.TensorDesc, trtp.TensorDesc, trtp.TensorDesc]:
        return a.like(), a.like(), a.aliased(), b.aliased()

    @trtp.impl("qdp_conv::chunk_update")
    def _chunk_update_impl(b, a, bias, n, outputs, stream):
        raise AssertionError("run by TensorRT only")

    # attributes that do not match the op
    _define_elementwise(
        "qdp_bad::attr_missing", "(Tensor x, float alpha, int n) -> Tensor"
    )

    @trtp.register("qdp_bad::attr_missing")
    def _attr_missing_desc(
        x: trtp.TensorDesc, alpha: np.ndarray[Any, np.dtype[np.float32]]
    ) -> Tuple[trtp.TensorDesc]:
        return (x.like(),)

    _define_elementwise("qdp_bad::attr_type", "(Tensor x, float alpha) -> Tensor")

    @trtp.register("qdp_bad::attr_type")
    def _attr_type_desc(x: trtp.TensorDesc, alpha: str) -> Tuple[trtp.TensorDesc]:
        return (x.like(),)

    _define_elementwise("qdp_bad::input_names", "(Tensor state, Tensor x) -> Tensor")

    @trtp.register("qdp_bad::input_names")
    def _input_names_desc(
        inp0: trtp.TensorDesc, inp1: trtp.TensorDesc
    ) -> Tuple[trtp.TensorDesc]:
        return (inp0.like(),)

    # scalar (Python float) attribute: QDP 11.1 + NumPy >= 2.4 cannot create it
    _define_elementwise("qdp_conv::scale", "(Tensor x, float factor) -> Tensor")

    @trtp.register("qdp_conv::scale")
    def _scale_desc(x: trtp.TensorDesc, factor: float) -> Tuple[trtp.TensorDesc]:
        return (x.like(),)

    @trtp.impl("qdp_conv::scale")
    def _scale_impl(x, factor, outputs, stream):
        raise AssertionError("run by TensorRT only")

    # a str attribute on a JIT plugin
    _define_elementwise("qdp_conv::moded", "(Tensor x, str mode) -> Tensor")

    @trtp.register("qdp_conv::moded")
    def _moded_desc(x: trtp.TensorDesc, mode: str) -> Tuple[trtp.TensorDesc]:
        return (x.like(),)

    @trtp.impl("qdp_conv::moded")
    def _moded_impl(x, mode, outputs, stream):
        raise AssertionError("run by TensorRT only")

    # an aot_impl that declares a subset of the attributes
    _define_elementwise("qdp_conv::two_attrs", "(Tensor x, float a, float b) -> Tensor")

    @trtp.register("qdp_conv::two_attrs")
    def _two_attrs_desc(
        x: trtp.TensorDesc,
        a: np.ndarray[Any, np.dtype[np.float32]],
        b: np.ndarray[Any, np.dtype[np.float32]],
    ) -> Tuple[trtp.TensorDesc]:
        return (x.like(),)

    @trtp.impl("qdp_conv::two_attrs")
    def _two_attrs_impl(x, a, b, outputs, stream):
        raise AssertionError("run by TensorRT only")

    @trtp.aot_impl("qdp_conv::two_attrs")
    def _two_attrs_aot_impl(
        x: trtp.TensorDesc,
        b: np.ndarray[Any, np.dtype[np.float32]],
        outputs: Tuple[trtp.TensorDesc],
        tactic: int,
    ) -> Tuple[str, str, trtp.KernelLaunchParams, trtp.SymExprs]:
        raise AssertionError("called by TensorRT's builder only")


def _functional_call(op, placeholders, kwargs=None):
    """FX graph of one call of a (functionalized) op, as its converter sees it.

    Every result of the call is a graph output (so new values are read), and
    each new value of a mutated argument is written back into it.
    """
    graph = torch.fx.Graph()
    nodes = [graph.placeholder(name) for name, _ in placeholders]
    mutating = any(
        a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments
    )
    target = FunctionalizedOp(op) if mutating else op
    call = graph.call_function(target, tuple(nodes), kwargs or {})
    with torch._subclasses.FakeTensorMode() as mode:
        for node, (_, value) in zip(nodes, placeholders):
            node.meta["val"] = mode.from_tensor(value)
        call.meta["val"] = target(*(n.meta["val"] for n in nodes), **(kwargs or {}))
    if isinstance(call.meta["val"], tuple):
        n = len(call.meta["val"])
        results = [graph.call_function(operator.getitem, (call, i)) for i in range(n)]
        if mutating:
            # each new value written back into its argument, and the state plan's
            # rows on the placeholders: the in-place record reads them
            for k, state in enumerate(mutated_values(call).values()):
                value = results[target.num_returns + k]
                graph.call_function(torch.ops.aten.copy_.default, (state, value))
        graph.output(tuple(results))
        if mutating:
            plan_state_updates(torch.fx.GraphModule(torch.nn.Module(), graph))
    else:
        graph.output(call)
    return call


def _convert(op, network_inputs, kwargs=None):
    """Run the converter registered for ``op`` on a recording network."""
    node = _functional_call(op, network_inputs, kwargs)
    val = node.meta["val"]
    flat = []
    for v in val if isinstance(val, tuple) else (val,):
        flat += list(v) if isinstance(v, list) else [v]
    shapes = [tuple(v.shape) for v in flat]
    net = RecordingNetwork(dict(enumerate(shapes)))
    tensors = [
        net.add_input(name, trt.float32, tuple(value.shape))
        for name, value in network_inputs
    ]
    ctx = ConversionContext(net, CompilationSettings())
    ctx.current_node = node
    converter, _, info = DYNAMO_CONVERTERS.get(node)
    result = converter(ctx, node.target, tuple(tensors), kwargs or {}, "n")
    return net, ctx, result, info


@unittest.skipIf(not HAVE_QDP, NEEDS_QDP)
class TestIssue4240Registration(TestCase):
    """The registration of issue #4240, with the op declared both ways."""

    @classmethod
    def setUpClass(cls):
        generate_plugin_converter("my::add_one", use_aot_if_available=True)
        generate_plugin_converter("my::add_one_", use_aot_if_available=True)

    def test_functional_op_with_an_aliasing_plugin_is_a_clear_error(self):
        # mutates_args=(): the op returns a new tensor, the plugin writes its input
        with self.assertRaisesRegex(
            ValueError,
            r"TensorRT plugin my::add_one aliases output 0 -> input 'X', but "
            r"my.add_one.default needs no aliased outputs \(outputs: return 0\)",
        ):
            _convert(torch.ops.my.add_one.default, [("x", torch.randn(100, 2))])

    def test_in_place_op_becomes_an_aliased_aot_plugin(self):
        x = torch.randn(100, 2)
        net, ctx, result, info = _convert(torch.ops.my.add_one_.default, [("x", x)])
        self.assertTrue(info["requires_aliased_plugin_io"])
        ((aot, inputs, plugin),) = net.plugins
        # the real QDP creator made an AOT plugin in the BUILD phase
        self.assertTrue(aot)
        self.assertIsInstance(plugin, trt.IPluginV3QuickAOTBuild)
        self.assertEqual([t.name for t in inputs], ["x"])
        self.assertEqual(plugin.get_num_outputs(), 1)
        self.assertEqual(plugin.get_aliased_input(0), 0)
        # -> None in torch, the aliased tensor in TensorRT: the converter returns
        # the new value of X, which is recorded to update the engine input in place
        (new_x,) = result
        self.assertIs(new_x, net.layer.get_output(0))
        self.assertEqual(
            [(a.input_binding_name, a.kind.value) for a in ctx.aliased_outputs],
            [("x", "user")],
        )


@unittest.skipIf(not HAVE_QDP, NEEDS_QDP)
class TestInPlacePluginsDeclareTheirAlias(TestCase):
    @classmethod
    def setUpClass(cls):
        generate_plugin_converter("qdp_conv::scatter_rows_", use_aot_if_available=False)

    def test_a_plugin_that_declares_no_alias_for_a_mutated_argument_is_refused(self):
        with self.assertRaisesRegex(
            ValueError,
            r"TensorRT plugin qdp_conv::scatter_rows_ aliases no aliased outputs, "
            r"but qdp_conv.scatter_rows_.default needs output 0 -> input 'state'.*"
            r"return X.aliased\(\) from the register function",
        ):
            _convert(
                torch.ops.qdp_conv.scatter_rows_.default,
                [("state", torch.randn(16, 8)), ("rows", torch.randn(2, 8))],
            )


@unittest.skipIf(not HAVE_QDP, NEEDS_QDP)
class TestRegisteredPluginsAgainstTheSchema(TestCase):
    @classmethod
    def setUpClass(cls):
        generate_plugin_converter("qdp_conv::update", use_aot_if_available=False)
        for bad in list(_state_update_registrations()) + [
            "attr_missing",
            "attr_type",
            "input_names",
        ]:
            generate_plugin_converter(f"qdp_bad::{bad}", use_aot_if_available=False)

    def _state_inputs(self):
        return [("state", torch.randn(4, 8)), ("x", torch.randn(4, 8))]

    def test_inputs_are_matched_by_name_not_position(self):
        net, ctx, result, _ = _convert(
            torch.ops.qdp_conv.update.default, self._state_inputs(), {"alpha": 0.5}
        )
        ((aot, inputs, plugin),) = net.plugins
        self.assertFalse(aot)
        # the register function takes (x, state): the plugin gets them so
        self.assertEqual([t.name for t in inputs], ["x", "state"])
        self.assertEqual(plugin.get_aliased_input(1), 1)
        self.assertEqual(plugin.attrs["alpha"].tolist(), [0.5])
        total, new_state = result
        self.assertEqual(new_state.shape, (4, 8))
        self.assertEqual(
            [(a.input_binding_name, a.output_tensor.name) for a in ctx.aliased_outputs],
            [("state", "plugin_out_1")],
        )

    def test_tensor_list_return_two_mutated_args_and_an_optional_tensor(self):
        generate_plugin_converter("qdp_conv::chunk_update", use_aot_if_available=True)
        op = torch.ops.qdp_conv.chunk_update.default
        a, b, bias = torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 8)
        net, ctx, result, info = _convert(
            op, [("a", a), ("b", b), ("bias", bias)], {"n": 2}
        )
        self.assertTrue(info["requires_aliased_plugin_io"])
        ((aot, inputs, plugin),) = net.plugins
        self.assertFalse(aot)  # no aot_impl: JIT
        self.assertEqual([t.name for t in inputs], ["b", "a", "bias"])
        self.assertEqual(
            [plugin.get_aliased_input(i) for i in range(4)], [-1, -1, 1, 0]
        )
        self.assertEqual(plugin.attrs["n"].tolist(), [2])
        # the converter convention: the Tensor[] return as a list, then new a, new b
        chunks, new_a, new_b = result
        self.assertEqual([c.name for c in chunks], ["plugin_out_0", "plugin_out_1"])
        self.assertEqual((new_a.name, new_b.name), ("plugin_out_2", "plugin_out_3"))
        with self.assertRaisesRegex(
            ValueError,
            r"qdp_conv.chunk_update.default: optional tensor argument 'bias' is None",
        ):
            net = RecordingNetwork()
            ctx = ConversionContext(net, CompilationSettings())
            ctx.current_node = _functional_call(
                op, [("a", a), ("b", b), ("bias", bias)], {"n": 2}
            )
            converter, _, _ = DYNAMO_CONVERTERS.get(ctx.current_node)
            tensors = [net.add_input(n, trt.float32, (4, 8)) for n in ("a", "b")]
            converter(ctx, op, (*tensors, None), {"n": 2}, "n")

    def test_the_plugin_is_recreated_after_deserialization(self):
        net, *_ = _convert(
            torch.ops.qdp_conv.update.default, self._state_inputs(), {"alpha": 0.5}
        )
        ((_, _, plugin),) = net.plugins
        runtime = _runtime_plugin("qdp_conv::update", plugin)
        self.assertEqual(runtime.get_num_outputs(), 2)
        self.assertEqual(runtime.attrs["alpha"].tolist(), [0.5])
        # QDP 11.1 defect 3: the alias map is empty until get_output_data_types
        # runs, which TensorRT does not call after deserialization; Torch-TensorRT
        # takes aliasing from the register function at compile time instead
        with self.assertRaises(KeyError):
            runtime.get_aliased_input(1)

    def test_bad_registrations_name_the_op_the_argument_and_both_layouts(self):
        for bad, (_, _, message) in _state_update_registrations().items():
            with self.subTest(bad), self.assertRaisesRegex(ValueError, message):
                _convert(getattr(torch.ops.qdp_bad, bad).default, self._state_inputs())
        x = [("x", torch.randn(4, 8))]
        with self.assertRaisesRegex(
            ValueError,
            r"qdp_bad::attr_missing has attributes \['alpha'\], but "
            r"qdp_bad.attr_missing.default has non-tensor arguments \['alpha', 'n'\]; "
            r"missing: \['n'\]",
        ):
            _convert(torch.ops.qdp_bad.attr_missing.default, x, {"alpha": 1.0, "n": 2})
        with self.assertRaisesRegex(
            ValueError,
            r"qdp_bad::attr_type: attribute 'alpha' is declared str, but argument "
            r"'alpha' of qdp_bad.attr_type.default is float",
        ):
            _convert(torch.ops.qdp_bad.attr_type.default, x, {"alpha": 1.0})
        with self.assertRaisesRegex(
            ValueError,
            r"qdp_bad::input_names takes input tensors \['inp0', 'inp1'\] \(in this "
            r"order\), but qdp_bad.input_names.default has tensor arguments "
            r"\['state', 'x'\]",
        ):
            _convert(torch.ops.qdp_bad.input_names.default, self._state_inputs())

    def test_str_attributes_of_a_jit_plugin_are_warned_about(self):
        generate_plugin_converter("qdp_conv::moded", use_aot_if_available=True)
        with self.assertLogs(
            "torch_tensorrt.dynamo.conversion.plugins", "WARNING"
        ) as logs:
            net, *_ = _convert(
                torch.ops.qdp_conv.moded.default,
                [("x", torch.randn(4, 8))],
                {"mode": "nearest"},
            )
        ((_, _, plugin),) = net.plugins
        self.assertEqual(plugin.attrs["mode"], "nearest")
        self.assertRegex(
            logs.output[0],
            r"qdp_conv.moded.default: TensorRT plugin qdp_conv::moded has str "
            r"attributes \['mode'\] and runs its JIT implementation",
        )

    def test_aot_impl_with_a_subset_of_the_attributes_is_a_clear_error(self):
        op = torch.ops.qdp_conv.two_attrs.default
        generate_plugin_converter("qdp_conv::two_attrs", use_aot_if_available=True)
        x = [("x", torch.randn(4, 8))]
        with self.assertRaisesRegex(
            ValueError,
            r"qdp_conv.two_attrs.default: the aot_impl of TensorRT plugin "
            r"qdp_conv::two_attrs takes attributes \['b'\], but the plugin has "
            r"\['a', 'b'\]",
        ):
            _convert(op, x, {"a": 1.0, "b": 2.0})


@unittest.skipIf(not HAVE_QDP, NEEDS_QDP)
class TestQdpDefectsWeDoNotDependOn(TestCase):
    def test_aliasing_is_read_by_desc_identity(self):
        # what the converter uses: which input desc each output of the register
        # function aliases (not Tensor.is_aliased nor the enqueue-time links)
        tensors = [
            StandInTensor.make("x", trt.float32, (4, 8)),
            StandInTensor.make("state", trt.float32, (4, 8)),
        ]
        self.assertEqual(
            qdp_output_descs(
                trtp.op.qdp_conv.update, tensors, {"alpha": np.float32([1.0])}
            ),
            [(trt.float32, None), (trt.float32, 1)],
        )

    def test_enqueue_alias_links_are_wrong(self):
        # QDP 11.1 defects 1 and 2, shown on the real _TemplateJITPlugin.enqueue;
        # Torch-TensorRT reads neither (the generated JIT impls neither)
        seen = []

        def impl(x, state, alpha, outputs, stream):
            seen.append(
                [o.get_aliased() for o in outputs]
                + [x, state]
                + [o.is_aliased for o in outputs]
            )

        net = RecordingNetwork()
        net.add_plugin(
            trtp.op.qdp_conv.update(
                StandInTensor.make("x", trt.float32, (4, 8)),
                StandInTensor.make("state", trt.float32, (4, 8)),
                alpha=np.float32([1.0]),
            ),
            aot=False,
        )
        ((_, _, jit),) = net.plugins
        jit.impl_function = impl

        def desc(shape):
            d = trt.PluginTensorDesc()
            d.dims = trt.Dims(shape)
            d.type = trt.float32
            d.format = trt.TensorFormat.LINEAR
            return d

        jit.enqueue(
            [desc((4, 8)), desc((4, 8))],
            [desc((4,)), desc((4, 8))],
            [1024, 2048],
            [4096, 2048],
            [(8, 1), (8, 1)],
            [(1,), (8, 1)],
            0,
        )
        ((out0_alias, out1_alias, x, state, out0_flag, out1_flag),) = seen
        self.assertIs(out1_alias, state)  # the real alias
        # defect 2: not aliased, but linked to the last input
        self.assertIs(out0_alias, state)
        # defect 1: Tensor.is_aliased is inverted (here False for the aliased one)
        self.assertFalse(out1_flag)


@unittest.skipIf(not HAVE_QDP, NEEDS_QDP)
class TestScalarAttributesAndNumPy(TestCase):
    """QDP 11.1 defect 4: NumPy >= 2.4 breaks int/float/bool plugin attributes."""

    def test_guard_matches_the_real_defect(self):
        generate_plugin_converter("qdp_conv::scale", use_aot_if_available=False)
        x = [("x", torch.randn(4, 8))]
        numpy_2_4 = np.lib.NumpyVersion(np.__version__) >= "2.4.0"
        self.assertEqual(scalar_attributes_unsupported() is not None, numpy_2_4)
        if numpy_2_4:
            with self.assertRaisesRegex(
                RuntimeError,
                r"qdp_conv.scale.default: TensorRT plugin qdp_conv::scale has scalar "
                r"attributes \['factor'\]; tensorrt.plugin of TensorRT 11.1.0.106 "
                r"cannot create a plugin with int, float or bool attributes under "
                r"NumPy 2\.4.*\(fixed in TensorRT 11.4\).*one-element array, "
                r"numpy\.ndarray\[typing\.Any, numpy\.dtype\[numpy\.float32\]\]",
            ):
                _convert(torch.ops.qdp_conv.scale.default, x, {"factor": 2.0})
            # the defect itself, in the real creator: what the guard prevents
            with self.assertRaisesRegex(TypeError, "only 0-dimensional arrays"):
                _creator("qdp_conv::scale").create_plugin(
                    "scale",
                    "qdp_conv",
                    trt.PluginFieldCollection(
                        [
                            trt.PluginField(
                                "factor",
                                np.array([2.0]),
                                trt.PluginFieldType.FLOAT64,
                            )
                        ]
                    ),
                    trt.TensorRTPhase.BUILD,
                )
        else:
            net, *_ = _convert(torch.ops.qdp_conv.scale.default, x, {"factor": 2.0})
            ((_, _, plugin),) = net.plugins
            self.assertEqual(plugin.attrs["factor"], 2.0)
            self.assertEqual(
                _runtime_plugin("qdp_conv::scale", plugin).attrs["factor"], 2.0
            )

    @unittest.skipIf(
        not NUMPY_PRE_2_4,
        "Needs NumPy < 2.4 in a side directory (TORCHTRT_PATCHSET_NUMPY_PRE_2_4, "
        "prepared by tools/run-tests) to run this module's NumPy-version test again.",
    )
    def test_with_numpy_before_2_4(self):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([NUMPY_PRE_2_4] + sys.path))
        env.pop("TORCHTRT_PATCHSET_NUMPY_PRE_2_4")
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                f"{__file__}::TestScalarAttributesAndNumPy::test_guard_matches_the_real_defect",
                "-o",
                "addopts=",
                "--rootdir",
                os.path.dirname(__file__),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        self.assertEqual(proc.returncode, 0, proc.stdout[-3000:] + proc.stderr[-3000:])
        probe = subprocess.run(
            [sys.executable, "-c", "import numpy; print(numpy.__version__)"],
            env=env,
            capture_output=True,
            text=True,
        )
        self.assertLess(np.lib.NumpyVersion(probe.stdout.strip()), "2.4.0")

    def test_array_attributes_work_with_any_numpy(self):
        net, *_ = _convert(
            torch.ops.qdp_conv.update.default,
            [("state", torch.randn(4, 8)), ("x", torch.randn(4, 8))],
            {"alpha": 0.25},
        )
        ((_, _, plugin),) = net.plugins
        self.assertEqual(plugin.attrs["alpha"].dtype, np.float32)
        self.assertEqual(
            _runtime_plugin("qdp_conv::update", plugin).attrs["alpha"].tolist(),
            [0.25],
        )


if __name__ == "__main__":
    run_tests()
