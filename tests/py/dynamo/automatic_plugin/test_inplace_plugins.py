"""In-place QDP plugins from the op schema (#4240). TestPluginFromSchema needs
``tensorrt.plugin``, no GPU: the real QDP creator makes each plugin for a stand-in
network. TestIssue4240 builds the issue's model with TensorRT and runs it on a GPU."""

import unittest
from types import SimpleNamespace
from typing import Tuple

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo import CompilationSettings as Settings
from torch_tensorrt.dynamo.conversion import plugins
from torch_tensorrt.dynamo.conversion._ConversionContext import ConversionContext
from torch_tensorrt.dynamo.conversion._ConverterRegistry import DYNAMO_ATEN_CONVERTERS

QDP = torch_tensorrt.ENABLED_FEATURES.qdp_plugin


def _add_one(x: torch.Tensor) -> None:
    x.add_(1)


add_one_, forgets_ = (
    torch.library.custom_op(f"inplace_plugin::{name}", _add_one, mutates_args=("x",))
    for name in ("add_one_", "forgets_")
)


@torch.library.custom_op("inplace_plugin::axpy_", mutates_args=("y",))
def axpy_(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    y.add_(x)
    return x.sum(0)


axpy_.register_fake(lambda x, y: x.sum(0))
for op in (add_one_, forgets_):
    op.register_fake(lambda *args: None)


if QDP:
    import tensorrt.plugin as trtp

    @trtp.register("inplace_plugin::add_one_")
    def _(x: trtp.TensorDesc) -> Tuple[trtp.TensorDesc]:
        return (x.aliased(),)

    @trtp.register("inplace_plugin::axpy_")
    def _(
        x: trtp.TensorDesc, y: trtp.TensorDesc
    ) -> Tuple[trtp.TensorDesc, trtp.TensorDesc]:
        return x.like(), y.aliased()

    @trtp.register("inplace_plugin::forgets_")  # x's new value not declared aliased
    def _(x: trtp.TensorDesc) -> Tuple[trtp.TensorDesc]:
        return (x.like(),)

    @trtp.impl("inplace_plugin::add_one_")  # outputs[0] is x's memory
    def _(x: trtp.Tensor, outputs: Tuple[trtp.Tensor], stream: int) -> None:
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            torch.as_tensor(outputs[0], device="cuda").add_(1)

    @trtp.impl("inplace_plugin::axpy_")
    def _(
        x: trtp.Tensor, y: trtp.Tensor, outputs: Tuple[trtp.Tensor], stream: int
    ) -> None:
        raise AssertionError("not run")


@unittest.skipIf(not QDP, "Needs TensorRT's Python plugins (tensorrt.plugin)")
class TestPluginFromSchema(TestCase):
    @classmethod
    def setUpClass(cls):
        for op in ("add_one_", "axpy_", "forgets_"):  # JIT: no aot_impl
            plugins.generate_plugin_converter(f"inplace_plugin::{op}")

    def convert(self, op, n_inputs):
        """The generated converter's outputs: (output index, aliased input)"""
        import tensorrt as trt

        def add_plugin(call, aot=False):
            inputs, _, plugin = call(trt.QuickPluginCreationRequest.STRICT_JIT)
            plugin.get_output_data_types([t.dtype for t in inputs], [2] * len(inputs))
            get_output = lambda i: [i, plugin.get_aliased_input(i)]
            return SimpleNamespace(
                num_outputs=plugin.get_num_outputs(), get_output=get_output
            )

        def tensor(name):
            attrs = {"dtype": trt.float32, "name": name, "shape": (2,)}
            return trt.ITensor.__new__(type("StandIn", (trt.ITensor,), attrs))

        support = DYNAMO_ATEN_CONVERTERS[op][-1]
        ctx = ConversionContext(SimpleNamespace(add_plugin=add_plugin), Settings())
        args = [tensor(f"in{i}") for i in range(n_inputs)]
        outputs = support.converter_implementation(ctx, op, args, {}, "op")
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)  # one: bare
        return tuple(map(tuple, outputs)), support.requires_aliased_plugin_io

    def test_outputs_and_aliases_follow_the_schema(self):
        ops = torch.ops.inplace_plugin
        for op, n_inputs, outputs in [
            (ops.add_one_, 1, ((0, 0),)),  # -> None: the aliased x
            (ops.axpy_, 2, ((0, -1), (1, 1))),  # its return, then y
        ]:
            with self.subTest(op=str(op)):
                self.assertEqual(self.convert(op.default, n_inputs), (outputs, True))

    def test_mutated_argument_not_declared_aliased_is_refused(self):
        with self.assertRaisesRegex(
            ValueError,
            r"^TensorRT plugin inplace_plugin::forgets_ aliases no aliased outputs, "
            r"but inplace_plugin\.forgets_\.default needs output 0 -> input 'x'",
        ):
            self.convert(torch.ops.inplace_plugin.forgets_.default, 1)


class InplaceModel(torch.nn.Module):  # the issue's model
    def forward(self, x):
        torch.ops.inplace_plugin.add_one_(x)


@unittest.skipIf(
    not QDP or not torch.cuda.is_available(),
    "Builds and runs a QDP plugin engine: needs a GPU and TensorRT",
)
class TestIssue4240(TestCase):
    def test_compiled_module_updates_the_state_in_place(self):
        x = torch.zeros((100, 2), device="cuda")
        ptr, ep = x.data_ptr(), torch.export.export(InplaceModel(), (x,))
        trt_mod = torch_tensorrt.dynamo.compile(
            ep, arg_inputs=[x], require_full_compilation=True, min_block_size=1
        )
        # One engine, and no PyTorch copy of the state after it
        calls = [n for n in trt_mod.graph.nodes if n.op == "call_module"]
        self.assertEqual(len(calls), 1)
        self.assertFalse([n for n in trt_mod.graph.nodes if "copy" in str(n.target)])
        engine = getattr(trt_mod, str(calls[0].target))
        self.assertEqual(list(engine.aliased_io.values()), [("x", "user")])
        for step in range(1, 4):
            self.assertIsNone(trt_mod(x))
            self.assertEqual((x, x.data_ptr()), (torch.full_like(x, step), ptr))
        context = getattr(engine, "context", None)  # the Python runtime's
        if context is not None:
            output = next(iter(engine.aliased_io))
            self.assertEqual(context.get_tensor_address(output), ptr)


if __name__ == "__main__":
    run_tests()
