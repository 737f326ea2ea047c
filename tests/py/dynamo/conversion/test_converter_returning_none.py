# type: ignore
"""A converter that returns None for a value the graph uses is named at its op.

Before, such a converter (a forgotten ``return``) failed later, at the first
node that read the value ("unsupported operand type(s) for *: 'NoneType' and
'int' ... While executing %mul"), and a mutating op's converter returning None
for the new value of its argument was not refused at all. Engines are built by
TensorRT-RTX on the CPU.
"""

import unittest

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo.conversion import dynamo_tensorrt_converter

from ..lowering.test_lower_auto_functionalized import (
    CPU_BUILDER,
    NEEDS_CPU_BUILDER,
)


@torch.library.custom_op("none_returned::double", mutates_args=())
def double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@double.register_fake
def _(x):
    return torch.empty_like(x)


@torch.library.custom_op("none_returned::increment_", mutates_args=("x",))
def increment_(x: torch.Tensor) -> None:
    x.add_(1)


@increment_.register_fake
def _(x):
    return None


@dynamo_tensorrt_converter(torch.ops.none_returned.double.default)
def _forgot_to_return(ctx, target, args, kwargs, name):
    ctx.net.add_identity(args[0])  # the layer is made; its output is not returned


@dynamo_tensorrt_converter(torch.ops.none_returned.increment_.default)
def _forgot_to_return_the_new_value(ctx, target, args, kwargs, name):
    ctx.net.add_identity(args[0])


class UsesTheValue(torch.nn.Module):
    def forward(self, x):
        return torch.ops.none_returned.double(x) * 2


class Increments(torch.nn.Module):
    def forward(self, x):
        torch.ops.none_returned.increment_(x)
        return x * 2


def _build(module):
    x = torch.ones(2, 3)
    ep = torch.export.export(module, (x,))
    return torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
        ep, arg_inputs=[x], min_block_size=1
    )


@unittest.skipIf(not CPU_BUILDER, NEEDS_CPU_BUILDER)
class TestConverterReturningNone(TestCase):
    def test_the_op_is_named(self):
        with self.assertRaisesRegex(
            RuntimeError,
            r"converter for none_returned\.double\.default returned None for node "
            r"'double', whose value the graph uses",
        ):
            _build(UsesTheValue())

    def test_a_mutating_op_names_the_new_value_it_owes(self):
        with self.assertRaisesRegex(
            RuntimeError,
            r"converter for none_returned\.increment_\.default returned None for "
            r"new value of 'x'",
        ):
            _build(Increments())


if __name__ == "__main__":
    run_tests()
