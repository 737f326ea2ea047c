# type: ignore
"""A converter's refusal reaches the user once, its own sentence first.

A converter that refuses a call raises one sentence naming the user's op. The
standalone path chained it into a second exception repeating the message
("While interpreting the module got an error: ..."), and both entry points
printed it after some 40 lines of Torch-TensorRT's interpreter frames. The
entry point now raises the converter's own exception (its type kept) without
those frames or a chained cause; torch.fx's note naming the node and the line of
the user's model stays in the message.
"""

import traceback
import unittest

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo.conversion import dynamo_tensorrt_converter

from ..lowering.test_lower_auto_functionalized import CPU_BUILDER

SENTENCE = (
    "trt_refusal.scale_: argument 'x' is refused by its converter, in one sentence."
)


@torch.library.custom_op("trt_refusal::scale_", mutates_args=("x",))
def scale_(x: torch.Tensor) -> None:
    x.mul_(2)


@scale_.register_fake
def _(x):
    return None


@dynamo_tensorrt_converter(torch.ops.trt_refusal.scale_.default)
def _refusing_converter(ctx, target, args, kwargs, name):
    raise ValueError(SENTENCE)


class Model(torch.nn.Module):
    def forward(self, x):
        torch.ops.trt_refusal.scale_(x)
        return x + 1


def _exported():
    return torch.export.export(Model(), (torch.zeros(2, 4),))


def _printed(error):
    return "".join(traceback.format_exception(error))


class TestRaisedOnce(TestCase):
    def _check(self, error):
        self.assertIsInstance(error, ValueError)
        message = str(error)
        self.assertTrue(message.startswith(SENTENCE), message)
        # the line of the user's model that called the op is named
        self.assertIn("torch.ops.trt_refusal.scale_(x)", message)
        printed = _printed(error)
        self.assertEqual(printed.count(SENTENCE), 1, printed)
        self.assertIsNone(error.__cause__)
        self.assertTrue(error.__suppress_context__)
        self.assertNotIn("_TRTInterpreter.py", printed)
        self.assertLess(len(printed.splitlines()), 20, printed)

    @unittest.skipIf(
        not (CPU_BUILDER or torch.cuda.is_available()),
        "Building an engine needs a CUDA device, or TensorRT-RTX on a host without "
        "one; this host has neither (the standard flavour's builder here is a "
        "stand-in).",
    )
    def test_standalone_engine(self):
        with self.assertRaises(ValueError) as refused:
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                _exported(), arg_inputs=[torch.zeros(2, 4)], min_block_size=1
            )
        self._check(refused.exception)

    @unittest.skipIf(
        not torch.cuda.is_available(),
        "compile() builds and loads its engines on a CUDA device; this host has none "
        "(the standalone test above covers the same path on the CPU).",
    )
    def test_compile(self):
        with self.assertRaises(ValueError) as refused:
            torch_tensorrt.dynamo.compile(
                torch.export.export(Model().cuda(), (torch.zeros(2, 4).cuda(),)),
                arg_inputs=[torch.zeros(2, 4).cuda()],
                min_block_size=1,
            )
        self._check(refused.exception)


if __name__ == "__main__":
    run_tests()
