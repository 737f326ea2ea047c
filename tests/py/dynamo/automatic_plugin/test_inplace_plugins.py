"""QDP plugins with several outputs and in-place state, from the op schema (#4240).

TestPluginFromSchema needs ``tensorrt.plugin``, no GPU: the real QDP creator
makes each plugin for a stand-in network. TestIssue4240 is the issue's model.
"""

import unittest
from types import SimpleNamespace
from typing import List, Tuple

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo import CompilationSettings as Settings
from torch_tensorrt.dynamo.conversion import plugins
from torch_tensorrt.dynamo.conversion._ConversionContext import ConversionContext
from torch_tensorrt.dynamo.conversion._ConverterRegistry import DYNAMO_ATEN_CONVERTERS

QDP = torch_tensorrt.ENABLED_FEATURES.qdp_plugin
try:
    import triton
    import triton.language as tl
except ImportError:
    triton = None


@torch.library.custom_op("inplace_plugin::minmax", mutates_args=())
def minmax(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    return x.amin(0), x.amax(0)


@torch.library.custom_op("inplace_plugin::add_one_", mutates_args=("x",))
def add_one_(x: torch.Tensor) -> None:
    x.add_(1)


@torch.library.custom_op("inplace_plugin::step_", mutates_args=("a", "b"))
def step_(a: torch.Tensor, b: torch.Tensor) -> None:
    a.add_(b)
    b.mul_(2)


@torch.library.custom_op("inplace_plugin::axpy_", mutates_args=("y",))
def axpy_(x: torch.Tensor, alpha: float, y: torch.Tensor) -> torch.Tensor:
    y.add_(alpha * x)
    return x.sum(0)


minmax.register_fake(lambda x: (x.amin(0), x.amax(0)))
add_one_.register_fake(lambda x: None)
step_.register_fake(lambda a, b: None)
axpy_.register_fake(lambda x, alpha, y: x.sum(0))


@unittest.skipIf(not QDP, "Needs TensorRT's Python plugins (tensorrt.plugin)")
class TestPluginFromSchema(TestCase):
    @classmethod
    def setUpClass(cls):
        for op in ("minmax", "add_one_", "step_", "axpy_"):
            plugins.generate_plugin(f"inplace_plugin::{op}")
            plugins.generate_plugin_converter(f"inplace_plugin::{op}")

    def convert(self, op, *args):
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
        args = [tensor(a) if a is None else a for a in args]
        outputs = support.converter_implementation(ctx, op, args, {}, "op")
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)  # one: bare
        return tuple(map(tuple, outputs)), support.requires_aliased_plugin_io

    def test_outputs_and_aliases_follow_the_schema(self):
        ops = torch.ops.inplace_plugin
        for op, args, outputs in [
            (ops.minmax, [None], ((0, -1), (1, -1))),  # several outputs
            (ops.add_one_, [None], ((0, 0),)),  # -> None: the aliased x
            (ops.step_, [None, None], ((0, 0), (1, 1))),  # two mutated arguments
            (ops.axpy_, [None, 2.0, None], ((0, -1), (1, 1))),  # return, then y
        ]:
            mutates = op is not ops.minmax
            self.assertEqual(self.convert(op.default, *args), (outputs, mutates))

    def test_generated_plugin_with_list_return_is_refused(self):
        @torch.library.custom_op("inplace_plugin::halves", mutates_args=())
        def halves(x: torch.Tensor) -> List[torch.Tensor]:
            return list(x.chunk(2))

        with self.assertRaisesRegex(ValueError, r"halves.* returns (List|Tensor\[)"):
            plugins.generate_plugin("inplace_plugin::halves")
            plugins.generate_plugin_converter("inplace_plugin::halves")


if triton is not None and QDP:
    import tensorrt.plugin as trtp

    @triton.jit
    def add_one_kernel(x_ptr, n_elements, y_ptr, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < n_elements
        x = tl.load(x_ptr + offsets, mask=mask)
        tl.store(y_ptr + offsets, x + 1, mask=mask)

    @torch.library.custom_op("issue4240::add_one", mutates_args=("X",))
    def add_one(X: torch.Tensor) -> None:
        add_one_kernel[(triton.cdiv(X.numel(), 256),)](X, X.numel(), X, BLOCK_SIZE=256)

    add_one.register_fake(lambda X: None)

    @trtp.register("issue4240::add_one")
    def add_plugin_desc(X: trtp.TensorDesc) -> Tuple[trtp.TensorDesc]:
        return (X.aliased(),)

    @trtp.aot_impl("issue4240::add_one")
    def add_plugin_aot_impl(
        X: trtp.TensorDesc, outputs: Tuple[trtp.TensorDesc], tactic: int
    ) -> Tuple[str, str, trtp.KernelLaunchParams, trtp.SymExprs]:
        src = triton.compiler.ASTSource(
            fn=add_one_kernel,
            signature={"x_ptr": "*fp32", "n_elements": "i32", "y_ptr": "*fp32"},
            constexprs={"BLOCK_SIZE": 256},
        )
        kernel = triton.compile(src)
        launch = trtp.KernelLaunchParams()
        launch.grid_x = trtp.cdiv(X.shape_expr.numel(), 256)
        launch.block_x = kernel.metadata.num_warps * 32
        launch.shared_mem = kernel.metadata.shared
        extra_args = trtp.SymIntExprs(1)
        extra_args[0] = trtp.SymInt32(X.shape_expr.numel())
        return kernel.metadata.name, kernel.asm["ptx"], launch, extra_args

    torch_tensorrt.dynamo.conversion.plugins.generate_plugin_converter(
        "issue4240::add_one", use_aot_if_available=True
    )


class InplaceModel(torch.nn.Module):
    def forward(self, x):
        torch.ops.issue4240.add_one.default(x)


@unittest.skipIf(
    triton is None or not QDP or not torch.cuda.is_available(),
    "Builds and runs a QDP plugin engine: needs a GPU, Triton and TensorRT",
)
class TestIssue4240(TestCase):
    def test_the_state_is_updated_in_place(self):
        import tensorrt as trt

        x = torch.ones((100, 2), device="cuda")
        ptr, ep = x.data_ptr(), torch_tensorrt.dynamo.trace(InplaceModel(), (x,))
        trt_mod = torch_tensorrt.dynamo.compile(
            ep, arg_inputs=[x], require_full_compilation=True, min_block_size=1
        )
        trt_mod(x)
        self.assertEqual((x, x.data_ptr()), (torch.full_like(x, 2), ptr))
        engine = next(m for n, m in trt_mod.named_children() if "_run_on_acc" in n)
        self.assertEqual(list(engine.aliased_io.values()), [("x", "user")])

        # the standalone engine, bound as a C++ caller binds it
        engine_bytes = (
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep, arg_inputs=[x], require_full_compilation=True
            )
        )
        runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
        runtime.engine_host_code_allowed = True
        engine = runtime.deserialize_cuda_engine(engine_bytes)
        context = engine.create_execution_context()
        for i in range(engine.num_io_tensors):  # the state and its new value
            context.set_tensor_address(engine.get_tensor_name(i), x.data_ptr())
        context.execute_async_v3(torch.cuda.current_stream().cuda_stream)
        torch.cuda.synchronize()
        self.assertEqual(x, torch.full_like(x, 3))


if __name__ == "__main__":
    run_tests()
