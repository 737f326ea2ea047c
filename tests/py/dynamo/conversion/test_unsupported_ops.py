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

    def test_full_compilation_names_the_op_without_a_converter(self):
        from test_compile_with_stand_in_engines import compile_on_cpu

        with self.assertRaisesRegex(
            AssertionError,
            r"^compile\(require_full_compilation=True\) converts every op to "
            r"TensorRT, and this op has no converter: trt_unsupported\.triple_ "
            r"\(writes 'x' in place\)\. Register one",
        ):
            compile_on_cpu(self, Triple(), _inputs(), require_full_compilation=True)


if __name__ == "__main__":
    run_tests()
