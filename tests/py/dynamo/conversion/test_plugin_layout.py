# type: ignore
"""Plugin layouts derived from op schemas, and the glue that adds the plugin layer.

Runs without TensorRT's plugin module: the layout logic is pure Python over real
torch schemas and fake implementations. The glue tests need a real network
(TensorRT-RTX builds one on the CPU; in the standard-flavour environment, whose
TensorRT 11.1 has no builder, they skip) and use a recording stand-in for
``INetworkDefinition.add_plugin`` and a mock plugin definition (TensorRT-RTX has
no plugins): they check Torch-TensorRT's own calls and prove nothing about what
TensorRT accepts. The same glue against the real ``tensorrt.plugin`` is
``tests/py/dynamo/automatic_plugin/test_plugin_converter_qdp.py``.
"""

import operator
import types
import unittest
import unittest.mock

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt import ENABLED_FEATURES
from torch_tensorrt._version import __tensorrt_version__
from torch_tensorrt.dynamo._settings import CompilationSettings
from torch_tensorrt.dynamo._SourceIR import SourceIR
from torch_tensorrt.dynamo.conversion import dynamo_tensorrt_converter, impl
from torch_tensorrt.dynamo.conversion._ConversionContext import ConversionContext
from torch_tensorrt.dynamo.conversion._functionalized_op import (
    record_in_place_outputs,
)
from torch_tensorrt.dynamo.conversion._TRTInterpreter import TRTInterpreter
from torch_tensorrt.dynamo.conversion.plugins._plugin_call import add_plugin_for_op
from torch_tensorrt.dynamo.conversion.plugins._plugin_layout import PluginLayout
from torch_tensorrt.dynamo.lowering._state_plan import STATE_PLAN

# after torch_tensorrt, which makes `tensorrt` name TensorRT-RTX in the RTX flavour
import tensorrt as trt  # isort: skip


def _have_builder() -> bool:
    try:
        trt.Builder(trt.Logger())
    except TypeError:  # "factory function returned nullptr": no builder library
        return False
    return True


HAVE_BUILDER = _have_builder()
NEEDS_BUILDER = (
    "Needs a TensorRT network, which needs TensorRT's builder; this environment has "
    "the TensorRT 11.1 bindings without the builder library (the TensorRT-RTX "
    "environment runs these tests, and test_plugin_converter_qdp.py runs the glue "
    "against the real tensorrt.plugin here)."
)


@torch.library.custom_op("trt_layout::scale", mutates_args=())
def scale(x: torch.Tensor, factor: float = 2.0) -> torch.Tensor:
    return x * factor


@scale.register_fake
def _(x, factor=2.0):
    return torch.empty_like(x)


@torch.library.custom_op("trt_layout::topk_pair", mutates_args=())
def topk_pair(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    values, indices = torch.topk(x, k)
    return values, indices


@topk_pair.register_fake
def _(x, k):
    shape = (*x.shape[:-1], k)
    return x.new_empty(shape), x.new_empty(shape, dtype=torch.int64)


@torch.library.custom_op("trt_layout::chunks", mutates_args=())
def chunks(x: torch.Tensor, n: int) -> list[torch.Tensor]:
    return [c.clone() for c in x.chunk(n, dim=-1)]


@chunks.register_fake
def _(x, n):
    return [c.new_empty(c.shape) for c in x.chunk(n, dim=-1)]


@torch.library.custom_op("trt_layout::add_one_", mutates_args=("X",))
def add_one_(X: torch.Tensor) -> None:
    X.add_(1)


@add_one_.register_fake
def _(X):
    return None


@torch.library.custom_op("trt_layout::update_and_read", mutates_args=("state", "count"))
def update_and_read(
    state: torch.Tensor, x: torch.Tensor, count: torch.Tensor, *, alpha: float = 1.0
) -> torch.Tensor:
    state.add_(x, alpha=alpha)
    count.add_(1)
    return state.sum(-1)


@update_and_read.register_fake
def _(state, x, count, *, alpha=1.0):
    return state.new_empty(state.shape[:-1])


class TestLayoutFromSchema(TestCase):
    def _layout(self, op):
        layout = PluginLayout.from_op(op)
        return (
            layout.tensor_args,
            layout.attr_args,
            layout.returns,
            layout.mutated,
            layout.requires_aliased_plugin_io,
        )

    def test_layouts(self):
        ops = torch.ops.trt_layout
        self.assertEqual(
            self._layout(ops.scale.default),
            (("x",), ("factor",), ("Tensor",), (), False),
        )
        self.assertEqual(
            self._layout(ops.topk_pair.default),
            (("x",), ("k",), ("Tensor", "Tensor"), (), False),
        )
        self.assertEqual(
            self._layout(ops.chunks.default), (("x",), ("n",), ("Tensor[]",), (), False)
        )
        self.assertEqual(
            self._layout(ops.add_one_.default), (("X",), (), (), ("X",), True)
        )
        self.assertEqual(
            self._layout(ops.update_and_read.default),
            (
                ("state", "x", "count"),
                ("alpha",),
                ("Tensor",),
                ("state", "count"),
                True,
            ),
        )

    def test_output_layouts(self):
        ops = torch.ops.trt_layout
        lines = []
        for op, lengths in (
            (ops.scale.default, [1]),
            (ops.topk_pair.default, [1, 1]),
            (ops.chunks.default, [3]),
            (ops.add_one_.default, []),
            (ops.update_and_read.default, [1]),
        ):
            lines.append(f"{op}: {PluginLayout.from_op(op).describe(lengths)}")
        self.assertExpectedInline(
            "\n".join(lines),
            """\
trt_layout.scale.default: return 0
trt_layout.topk_pair.default: return 0, return 1
trt_layout.chunks.default: return 0[0], return 0[1], return 0[2]
trt_layout.add_one_.default: new X (aliases input 'X')
trt_layout.update_and_read.default: return 0, new state (aliases input 'state'), new count (aliases input 'count')""",
        )

    def test_unsupported_schemas_are_named(self):
        lib = torch.library.Library("trt_layout_bad", "FRAGMENT")
        lib.define("list_arg(Tensor[] xs) -> Tensor")
        lib.define("int_ret(Tensor x) -> int")
        with self.assertRaisesRegex(
            ValueError,
            r"trt_layout_bad.list_arg.default: argument 'xs' has type List\[Tensor\]",
        ):
            PluginLayout.from_op(torch.ops.trt_layout_bad.list_arg.default)
        with self.assertRaisesRegex(
            ValueError, r"int_ret.default: return 0 has type int"
        ):
            PluginLayout.from_op(torch.ops.trt_layout_bad.int_ret.default)
        with self.assertRaisesRegex(ValueError, r"aten.add_.Tensor: return 0 aliases"):
            PluginLayout.from_op(torch.ops.aten.add_.Tensor)

    def test_bind_by_name_with_defaults_and_keyword_only(self):
        layout = PluginLayout.from_op(torch.ops.trt_layout.update_and_read.default)
        self.assertEqual(
            layout.bind(("s", "x", "c"), {}),
            {"state": "s", "x": "x", "count": "c", "alpha": 1.0},
        )
        self.assertEqual(
            layout.bind(("s",), {"x": "x", "count": "c", "alpha": 3.0})["alpha"], 3.0
        )
        with self.assertRaisesRegex(ValueError, "no value for argument 'count'"):
            layout.bind(("s", "x"), {})

    def test_tensor_list_length_comes_from_the_fake_implementation(self):
        class Model(torch.nn.Module):
            def forward(self, x):
                a, b, c = torch.ops.trt_layout.chunks(x, 3)
                return a + b + c

        ep = torch.export.export(Model(), (torch.randn(2, 6),))
        node = next(
            n for n in ep.graph.nodes if n.target is torch.ops.trt_layout.chunks.default
        )
        layout = PluginLayout.from_op(torch.ops.trt_layout.chunks.default)
        self.assertEqual(layout.return_lengths(node.meta["val"]), [3])
        # the functional form of a mutating op carries (returns..., new values)
        mutating = PluginLayout.from_op(torch.ops.trt_layout.update_and_read.default)
        self.assertEqual(mutating.return_lengths(("r", "s", "c")), [1])

    def test_fake_outputs_give_each_plugin_output_its_dtype_and_shape(self):
        from torch._subclasses.fake_tensor import FakeTensorMode

        ops = torch.ops.trt_layout
        with FakeTensorMode():
            x = torch.empty(2, 6)
            pair = PluginLayout.from_op(ops.topk_pair.default).fake_outputs([x, 3], {})
            parts = PluginLayout.from_op(ops.chunks.default).fake_outputs([x, 3], {})
            state, count = torch.empty(2, 6, dtype=torch.float16), torch.empty(
                2, dtype=torch.int32
            )
            mutating = PluginLayout.from_op(ops.update_and_read.default).fake_outputs(
                [state, x, count], {"alpha": 2.0}
            )
        self.assertEqual(
            [(tuple(t.shape), t.dtype) for t in pair],
            [((2, 3), torch.float32), ((2, 3), torch.int64)],
        )
        self.assertEqual([tuple(t.shape) for t in parts], [(2, 2)] * 3)
        # own return, then the new values of the mutated arguments
        self.assertEqual(
            [(tuple(t.shape), t.dtype) for t in mutating],
            [((2,), torch.float16), ((2, 6), torch.float16), ((2,), torch.int32)],
        )

    def test_plugin_checks_name_op_and_layouts(self):
        layout = PluginLayout.from_op(torch.ops.trt_layout.update_and_read.default)
        attrs = {"alpha": float}
        self.assertEqual(
            layout.validate_plugin("ns::p", ["state", "x", "count"], attrs, 3, [1]),
            ("state", "x", "count"),
        )
        # inputs by name: any order, case-insensitively when unambiguous
        self.assertEqual(
            layout.validate_plugin("ns::p", ["X", "Count", "state"], attrs, 3, [1]),
            ("x", "count", "state"),
        )
        with self.assertRaisesRegex(
            ValueError,
            r"ns::p declares 1 output\(s\), but trt_layout.update_and_read.default "
            r"needs 3: return 0, new state \(aliases input 'state'\), new count",
        ):
            layout.validate_plugin("ns::p", ["state", "x", "count"], attrs, 1, [1])
        with self.assertRaisesRegex(ValueError, r"takes input tensors \['state'\]"):
            layout.validate_plugin("ns::p", ["state"], attrs, 3, [1])
        with self.assertRaisesRegex(
            ValueError,
            r"ns::p has attributes \['beta'\], but trt_layout.update_and_read.default "
            r"has non-tensor arguments \['alpha'\]; missing: \['alpha'\]; not "
            r"arguments of the op: \['beta'\]",
        ):
            layout.validate_plugin(
                "ns::p", ["state", "x", "count"], {"beta": float}, 3, [1]
            )
        with self.assertRaisesRegex(
            ValueError,
            r"ns::p: attribute 'alpha' is declared int, but argument 'alpha' of "
            r"trt_layout.update_and_read.default is float",
        ):
            layout.validate_plugin(
                "ns::p", ["state", "x", "count"], {"alpha": int}, 3, [1]
            )

    def test_aliasing_checks(self):
        layout = PluginLayout.from_op(torch.ops.trt_layout.update_and_read.default)
        layout.validate_aliasing("ns::p", [None, 0, 2], [1])
        with self.assertRaisesRegex(
            ValueError,
            r"ns::p aliases output 1 -> input 'state', but "
            r"trt_layout.update_and_read.default needs output 1 -> input 'state', "
            r"output 2 -> input 'count'",
        ):
            layout.validate_aliasing("ns::p", [None, 0, None], [1])
        # the issue #4240 pattern: a functional op whose plugin writes in place
        functional = PluginLayout.from_op(torch.ops.trt_layout.scale.default)
        with self.assertRaisesRegex(
            ValueError,
            r"aliases output 0 -> input 'x', but .* needs no aliased outputs",
        ):
            functional.validate_aliasing("ns::p", [0], [1])

    def test_grouping_follows_the_converter_convention(self):
        ops = torch.ops.trt_layout
        self.assertEqual(
            PluginLayout.from_op(ops.scale.default).group_outputs(["y"], [1]), "y"
        )
        self.assertEqual(
            PluginLayout.from_op(ops.chunks.default).group_outputs(["a", "b"], [2]),
            ["a", "b"],
        )
        self.assertEqual(
            PluginLayout.from_op(ops.add_one_.default).group_outputs(["x1"], []),
            ("x1",),
        )
        self.assertEqual(
            PluginLayout.from_op(ops.update_and_read.default).group_outputs(
                ["r", "s1", "c1"], [1]
            ),
            ("r", "s1", "c1"),
        )
        with self.assertRaisesRegex(RuntimeError, "has 1 output"):
            PluginLayout.from_op(ops.update_and_read.default).group_outputs(["r"], [1])


class RecordingNetwork:
    """Recording stand-in: a real TensorRT(-RTX) network plus a recorded ``add_plugin``.

    TensorRT-RTX has no plugin layers; this only checks which calls
    Torch-TensorRT's glue makes, not that TensorRT accepts them.
    """

    class Layer:
        type = trt.LayerType.PLUGIN_V3

        def __init__(self, outputs):
            self.num_outputs = len(outputs)
            self.outputs = outputs
            self.name = None

        def get_output(self, i):
            return self.outputs[i]

    def __init__(self, net, num_outputs, output_types=None):
        self._net = net
        # stand-in output tensors: a name, a dtype and a shape
        self.output_types = output_types or [(trt.float32, (2, 4))] * num_outputs
        self.calls = []
        self.layers = []  # the recorded plugin layers, after the network's own

    def __getattr__(self, name):
        return getattr(self._net, name)

    @property
    def num_layers(self):
        return self._net.num_layers + len(self.layers)

    def get_layer(self, i):
        n = self._net.num_layers
        return self._net.get_layer(i) if i < n else self.layers[i - n]

    def add_plugin(self, plugin_call, aot):
        self.calls.append((plugin_call, aot))
        self.layer = self.Layer(
            [
                types.SimpleNamespace(name=f"plugin output {i}", dtype=d, shape=s)
                for i, (d, s) in enumerate(self.output_types)
            ]
        )
        self.layers.append(self.layer)
        return self.layer


@unittest.skipIf(not HAVE_BUILDER, NEEDS_BUILDER)
class TestPluginGlue(TestCase):
    def setUp(self):
        builder = trt.Builder(trt.Logger())
        self.net = builder.create_network(
            1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
            if hasattr(trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED")
            else 0
        )
        self.inputs = {
            n: self.net.add_input(n, trt.float32, (2, 4))
            for n in ("state", "x", "count")
        }

    def _convert(self, num_outputs, aliased, args, kwargs):
        recording = RecordingNetwork(self.net, num_outputs)
        ctx = ConversionContext(recording, CompilationSettings())
        plugin_def = unittest.mock.Mock(
            input_tensor_names=["state", "x", "count"],
            input_attrs={"alpha": float},
            num_outputs=num_outputs,
            aot_impl_func=None,
        )

        def plugin(*tensors, **attrs):
            return ("plugin call", tensors, attrs)

        result = add_plugin_for_op(
            ctx,
            "trt_layout.update_and_read",
            args,
            kwargs,
            "node",
            PluginLayout.from_op(torch.ops.trt_layout.update_and_read.default),
            "trt_layout::update_and_read",
            plugin,
            plugin_def,
            use_aot=True,
            coerce_attr=lambda name, value: ("coerced", name, value),
            output_descs=lambda plugin_def, inputs, attrs: [
                (trt.float32, a) for a in aliased
            ],
        )
        return recording, result

    def test_inputs_by_schema_attrs_by_name_outputs_by_convention(self):
        i = self.inputs
        recording, result = self._convert(
            3, [None, 0, 2], (i["state"], i["x"]), {"count": i["count"], "alpha": 0.5}
        )
        ((call, aot),) = recording.calls
        self.assertTrue(aot)
        self.assertEqual(call[1], (i["state"], i["x"], i["count"]))
        self.assertEqual(call[2], {"alpha": ("coerced", "alpha", 0.5)})
        self.assertEqual(recording.layer.name, "[trt_layout.update_and_read]-[node]")
        self.assertEqual(
            [r.name for r in result],
            ["plugin output 0", "plugin output 1", "plugin output 2"],
        )

    def _planned(self, graph, declared=True):
        """``graph`` with the state plan's rows, as the converter meets it; the
        op's converter declares ``requires_aliased_plugin_io`` when ``declared``."""
        from torch_tensorrt.dynamo.conversion._ConverterRegistry import (
            DYNAMO_CONVERTERS,
        )
        from torch_tensorrt.dynamo.lowering._state_plan import plan_state_updates

        for placeholder in graph.find_nodes(op="placeholder"):
            placeholder.meta["val"] = torch.empty(2, 4)
        gm = torch.fx.GraphModule(torch.nn.Module(), graph)
        flags = {"requires_aliased_plugin_io": declared}
        with unittest.mock.patch.object(
            DYNAMO_CONVERTERS, "get", return_value=(None, None, flags)
        ):
            plan_state_updates(gm)
        return gm

    @staticmethod
    def _write_back(graph, state, value):
        graph.call_function(torch.ops.aten.copy_.default, (state, value))

    def _node(self, extra_reader=False, keep_new_state=True):
        """FX graph of the functional call, as the converter sees it."""
        from torch_tensorrt.dynamo.conversion._functionalized_op import (
            FunctionalizedOp,
        )

        graph = torch.fx.Graph()
        state, x, count = (graph.placeholder(n) for n in ("state", "x", "count"))
        call = graph.call_function(
            FunctionalizedOp(torch.ops.trt_layout.update_and_read.default),
            (state, x, count),
        )
        outputs = [graph.call_function(operator.getitem, (call, i)) for i in range(3)]
        if keep_new_state:
            self._write_back(graph, state, outputs[1])
            self._write_back(graph, count, outputs[2])
        returned = outputs[:1]
        if extra_reader:
            returned.append(graph.call_function(torch.ops.aten.neg.default, (state,)))
        graph.output(tuple(returned))
        self._planned(graph)
        return call

    def _chained_node(self, declared=True):
        """A second in-place call on the new values of the first, as the converter sees it."""
        from torch_tensorrt.dynamo.conversion._functionalized_op import (
            FunctionalizedOp,
        )

        op = FunctionalizedOp(torch.ops.trt_layout.update_and_read.default)
        graph = torch.fx.Graph()
        state, x, count = (graph.placeholder(n) for n in ("state", "x", "count"))
        first = graph.call_function(op, (state, x, count))
        new_state, new_count = (
            graph.call_function(operator.getitem, (first, i)) for i in (1, 2)
        )
        second = graph.call_function(op, (new_state, x, new_count))
        outputs = [graph.call_function(operator.getitem, (second, i)) for i in range(3)]
        self._write_back(graph, state, outputs[1])
        self._write_back(graph, count, outputs[2])
        graph.output((outputs[0],))
        self._planned(graph, declared)
        return second

    def _recorded(
        self,
        node,
        output_types=None,
        recorded=(),
        args=None,
        aliased=(None, 0, 2),
    ):
        i = self.inputs
        recording = RecordingNetwork(self.net, 3, output_types)
        ctx = ConversionContext(recording, CompilationSettings())
        ctx.aliased_outputs.extend(recorded)
        ctx.current_node = node
        plugin_def = unittest.mock.Mock(
            input_tensor_names=["state", "x", "count"],
            input_attrs={"alpha": float},
            num_outputs=3,
        )
        args = args or (i["state"], i["x"], i["count"])
        outputs = add_plugin_for_op(
            ctx,
            "t",
            args,
            {},
            "node",
            PluginLayout.from_op(torch.ops.trt_layout.update_and_read.default),
            "trt_layout::update_and_read",
            lambda *t, **a: None,
            plugin_def,
            use_aot=False,
            coerce_attr=lambda name, value: value,
            output_descs=lambda plugin_def, inputs, attrs: [
                (trt.float32, a) for a in aliased
            ],
        )
        record_in_place_outputs(ctx, node, outputs)
        return [
            (a.output_tensor.name, a.input_binding_name, a.kind.value)
            for a in ctx.aliased_outputs
        ]

    def test_state_updated_in_place_is_recorded_as_a_user_alias(self):
        self.assertEqual(
            self._recorded(self._node()),
            [
                ("plugin output 1", "state", "user"),
                ("plugin output 2", "count", "user"),
            ],
        )

    def test_other_readers_or_unread_new_values_keep_the_copy_back(self):
        # the plan copies a state something else reads: its row says so
        node = self._node(extra_reader=True)
        self.assertEqual(self._recorded(node), [("plugin output 2", "count", "user")])
        state = node.args[0]
        self.assertIn("also read by neg_default", state.meta[STATE_PLAN].reason)
        # new values not written back are no state's: nothing to bind
        self.assertEqual(self._recorded(self._node(keep_new_state=False)), [])

    def test_chained_in_place_plugins_update_the_first_ones_input(self):
        i = self.inputs
        # the first plugin's new values, as the second plugin's converter gets them
        first_state = self.net.add_identity(i["state"]).get_output(0)
        first_count = self.net.add_identity(i["count"]).get_output(0)
        args = (first_state, i["x"], first_count)
        self.assertEqual(
            self._recorded(self._chained_node(), args=args),
            [
                ("plugin output 1", "state", "user"),
                ("plugin output 2", "count", "user"),
            ],
        )
        # without the first plugin updating in place the plan copies them
        self.assertEqual(
            self._recorded(self._chained_node(declared=False), args=args), []
        )

    def test_a_state_updated_again_in_the_engine_is_not_bound(self):
        # the first call's new values are updated again: the plan names the
        # second call's as the states' new values, and the first call binds none
        second = self._chained_node()
        first = second.args[0].args[0]
        self.assertEqual(self._recorded(first), [])
        self.assertEqual(len(self._recorded(second)), 2)

    def test_outputs_that_cannot_alias_their_input_are_rejected(self):
        f32, f16 = trt.float32, trt.float16
        with self.assertRaisesRegex(
            ValueError,
            r"update_and_read.default: the output updating argument 'state' in place "
            r"is DataType.HALF \(2, 4\), but engine input 'state' is "
            r"DataType.FLOAT \(2, 4\)",
        ):
            self._recorded(self._node(), [(f32, (2,)), (f16, (2, 4)), (f32, (2, 4))])
        with self.assertRaisesRegex(
            ValueError, r"input 'count' is DataType.FLOAT \(2, 4\)"
        ):
            self._recorded(self._node(), [(f32, (2,)), (f32, (2, 4)), (f32, (4, 2))])

    def test_non_contiguous_state_is_rejected(self):
        node = self._node()
        state = node.args[0]
        state.meta["val"] = torch.empty(4, 2).t()
        with self.assertRaisesRegex(
            ValueError,
            r"update_and_read.default: argument 'state' \(engine input 'state'\) is "
            r"updated in place, but the example tensor is not contiguous "
            r"\(strides \(1, 2\)\)",
        ):
            self._recorded(node)
        state.meta["val"] = torch.empty(2, 4)
        self.assertEqual(len(self._recorded(node)), 2)

    def test_two_outputs_aliasing_one_input_are_rejected(self):
        from torch_tensorrt.dynamo.conversion._ConversionContext import (
            AliasedOutput,
            AliasKind,
        )

        earlier = types.SimpleNamespace(name="cache_out")
        with self.assertRaisesRegex(
            ValueError,
            r"engine input 'count' \(argument 'count'\) would be updated in place by "
            r"two outputs \('cache_out' and this one\)",
        ):
            self._recorded(
                self._node(),
                recorded=[AliasedOutput(earlier, "count", AliasKind.KV_CACHE_UPDATE)],
            )

    def test_wrong_plugin_is_reported_before_the_layer_is_added(self):
        i = self.inputs
        with self.assertRaisesRegex(ValueError, "declares 2 output"):
            self._convert(2, [None, 0], (i["state"], i["x"], i["count"]), {})
        with self.assertRaisesRegex(ValueError, "needs output 1 -> input 'state'"):
            self._convert(3, [None, None, None], (i["state"], i["x"], i["count"]), {})


@dynamo_tensorrt_converter(
    torch.ops.trt_layout.add_one_.default, requires_aliased_plugin_io=True
)
def _add_one_with_declared_aliasing(ctx, target, args, kwargs, name):
    # standard layers, declaring aliased plugin I/O as a plugin converter would
    return impl.elementwise.add(ctx, target, SourceIR.ATEN, name, args[0], 1.0)


@unittest.skipIf(
    torch.cuda.is_available() or not ENABLED_FEATURES.tensorrt_rtx,
    "Builds engines without a CUDA device, which needs TensorRT-RTX on a host "
    "without a GPU.",
)
class TestAliasedPluginIoBuilderFlag(TestCase):
    def _preview_flag(self, module, args):
        configs = []
        real = TRTInterpreter._populate_trt_builder_config

        def spy(self, *a, **kw):
            configs.append(real(self, *a, **kw))
            return configs[-1]

        ep = torch.export.export(module, args)
        with unittest.mock.patch.object(
            TRTInterpreter, "_populate_trt_builder_config", spy
        ):
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep, arg_inputs=list(args), min_block_size=1
            )
        (config,) = configs
        return config.get_preview_feature(trt.PreviewFeature.ALIASED_PLUGIN_IO_10_03)

    def test_set_only_when_a_converter_declares_it(self):
        class Mutating(torch.nn.Module):  # an intermediate: no input in place
            def forward(self, x):
                y = x * 2
                torch.ops.trt_layout.add_one_(y)
                return y

        class Plain(torch.nn.Module):
            def forward(self, x):
                return x * 2

        x = torch.randn(2, 4)
        self.assertTrue(self._preview_flag(Mutating(), (x,)))
        self.assertFalse(self._preview_flag(Plain(), (x,)))


class TestWithoutQdp(TestCase):
    """What ``generate_plugin_converter`` says where ``tensorrt.plugin`` is missing."""

    def _refusal(self, **features):
        from torch_tensorrt import _features

        flavour = _features.ENABLED_FEATURES._replace(qdp_plugin=False, **features)
        with unittest.mock.patch.object(_features, "ENABLED_FEATURES", flavour):
            with self.assertRaises(NotImplementedError) as refused:
                _features.needs_qdp_plugin(generate_plugin_converter_stand_in)("x::y")
        return str(refused.exception)

    def test_the_rtx_flavour_says_it_has_no_plugins(self):
        message = self._refusal(tensorrt_rtx=True)
        self.assertIn(
            "generate_plugin_converter needs TensorRT's Python plugins", message
        )
        self.assertIn("TensorRT-RTX does not have", message)
        self.assertIn(
            f"install the standard flavour (torch_tensorrt, with TensorRT "
            f"{__tensorrt_version__})",
            message,
        )

    def test_the_standard_flavour_names_the_version(self):
        # the version the README names: the one this release is built for
        message = self._refusal(tensorrt_rtx=False)
        self.assertIn("generate_plugin_converter needs TensorRT QDP", message)
        self.assertIn(f"is built for ({__tensorrt_version__})", message)
        self.assertNotIn("10.7", message)

    @unittest.skipIf(
        ENABLED_FEATURES.qdp_plugin, "This install has tensorrt.plugin (QDP)."
    )
    def test_the_real_function_on_this_install(self):
        with self.assertRaisesRegex(NotImplementedError, "generate_plugin_converter"):
            torch_tensorrt.dynamo.conversion.plugins.generate_plugin_converter(
                "trt_layout::never_registered"
            )


def generate_plugin_converter_stand_in(op):
    """A function named as the one ``needs_qdp_plugin`` wraps (its name is in the message)."""
    return op


generate_plugin_converter_stand_in.__name__ = "generate_plugin_converter"


if __name__ == "__main__":
    run_tests()
