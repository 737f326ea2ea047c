# type: ignore
"""An op without a converter is named as the user wrote it, in one sentence.

No graph dump, no traceback logged before the exception raised, and the
``dynamo_tensorrt_converter`` call that would add the missing converter.
"""

import unittest

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt import ENABLED_FEATURES

# the lowering tests' helpers (compile_on_cpu), also when this file runs alone

CPU_BUILDER = not torch.cuda.is_available() and ENABLED_FEATURES.tensorrt_rtx


@torch.library.custom_op("trt_unsupported::triple_", mutates_args=("x",))
def triple_(x: torch.Tensor) -> None:
    x.mul_(3)


@triple_.register_fake
def _(x):
    return None


class Triple(torch.nn.Module):
    def forward(self, x):
        torch.ops.trt_unsupported.triple_(x)
        return x + 1


def _inputs():
    torch.manual_seed(0)
    return (torch.randn(4, 16),)


@unittest.skipIf(
    not CPU_BUILDER,
    "Building engines without a CUDA device needs TensorRT-RTX on a host without "
    "a GPU; on a GPU host the same errors are raised by the same code.",
)
class TestErrorsNameWhatTheUserWrote(TestCase):
    def test_a_standalone_engine_names_the_op_without_a_converter(self):
        from torch_tensorrt.dynamo.conversion._TRTInterpreter import (
            UnsupportedOperatorException,
        )

        ep = torch.export.export(Triple(), _inputs())
        with self.assertNoLogs("torch_tensorrt", "ERROR"), self.assertRaises(
            UnsupportedOperatorException
        ) as refused:
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep, arg_inputs=list(_inputs()), min_block_size=1
            )
        message = str(refused.exception)
        self.assertIn(
            "this op has no converter: trt_unsupported.triple_ (writes 'x' in place)",
            message,
        )
        self.assertIn(
            "dynamo_tensorrt_converter(torch.ops.trt_unsupported.triple_.default)",
            message,
        )
        self.assertNotIn("GraphModule", message)
        self.assertNotIn("auto_functionalized", message)
        self.assertIsNone(refused.exception.__cause__)
        self.assertTrue(refused.exception.__suppress_context__)

    def test_an_op_whose_converters_refuse_the_call_is_named_with_its_tensors(self):
        # a sort along 4,096 values: aten.sort has a converter, which refuses
        # more than TensorRT's top-k takes (it was "this op has no converter")
        from torch_tensorrt.dynamo.conversion._TRTInterpreter import (
            UnsupportedOperatorException,
        )

        class Sort(torch.nn.Module):
            def forward(self, x):
                return torch.sort(x, dim=-1).values * 2

        x = torch.randn(2, 4096)
        ep = torch.export.export(Sort(), (x,))
        with self.assertRaises(UnsupportedOperatorException) as refused:
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep, arg_inputs=[x], min_block_size=1
            )
        message = str(refused.exception)
        self.assertIn(
            "the converters of aten.sort all refuse it as called with "
            "float32 [2, 4096]",
            message,
        )
        self.assertNotIn("no converter", message)
        self.assertIn("require_full_compilation=False", message)

    def test_a_tensor_read_as_a_number_is_named_as_such(self):
        from torch_tensorrt.dynamo.conversion._TRTInterpreter import (
            UnsupportedOperatorException,
        )

        class ItemPosition(torch.nn.Module):
            def forward(self, cache, pos, u):
                p = pos.item()
                torch._check(p >= 0)
                torch._check(p < 16)
                cache[:, :, p : p + 1] = u
                return u * 2

        args = (torch.zeros(1, 8, 16, 64), torch.tensor(3), torch.ones(1, 8, 1, 64))
        ep = torch.export.export(ItemPosition(), args)
        with self.assertRaises(UnsupportedOperatorException) as refused:
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep, arg_inputs=list(args), min_block_size=1
            )
        message = str(refused.exception)
        self.assertIn("reads a tensor as a Python number", message)
        self.assertIn(".item()", message)
        self.assertIn("Keep the value a tensor", message)
        self.assertNotIn("Register one", message)

    def test_full_compilation_names_the_op_without_a_converter(self):
        from ..lowering.test_compile_with_stand_in_engines import compile_on_cpu

        with self.assertRaisesRegex(
            AssertionError,
            r"^compile\(require_full_compilation=True\) converts every op to "
            r"TensorRT, and this op has no converter: trt_unsupported\.triple_ "
            r"\(writes 'x' in place\)\. Register one",
        ):
            compile_on_cpu(self, Triple(), _inputs(), require_full_compilation=True)


if __name__ == "__main__":
    run_tests()
