# type: ignore
"""``clone`` and ``_to_copy`` of an engine input convert at dynamic shapes.

Where a ``clone`` is the only op on an engine input and its result an output,
a converter of its own forces a layer (an engine input cannot be an output).
That converter did not declare dynamic shapes, so with a dynamic batch the
partitioner, which had seen the clone's input inside the graph (another
converter, which does), put it in an engine whose input it then was, and the
build raised "Conversion of function aten::clone not currently supported": a
snapshot of a state, taken between a write and a custom op run in PyTorch,
failed ``compile()``.
"""

import unittest

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests

from ..lowering.test_compile_with_stand_in_engines import (
    engines_built_execution_stood_in,
)
from ..lowering.test_lower_auto_functionalized import CPU_BUILDER

CPU_ONLY = (
    "Building engines without a CUDA device needs TensorRT-RTX on a host without "
    "a GPU; on a GPU the same programs run with real engines: the generated state programs run by tools/fuzz/state_programs.py."
)


@torch.library.custom_op("trt_copy_dyn::bump_", mutates_args=("x",))
def bump_(x: torch.Tensor) -> None:
    x.add_(2)


@bump_.register_fake
def _(x):
    return None


class SnapshotThenOpInPyTorch(torch.nn.Module):
    def forward(self, s, u, p):
        s.index_copy_(2, p, u)
        snapshot = s.clone()
        torch.ops.trt_copy_dyn.bump_(s)
        return snapshot


def _args(batch):
    g = torch.Generator().manual_seed(batch)
    return (
        torch.randn(batch, 1, 16, 4, generator=g),
        torch.randn(batch, 1, 1, 4, generator=g),
        torch.tensor([5]),
    )


@unittest.skipIf(not CPU_BUILDER, CPU_ONLY)
class TestCopyOfAnInputAtDynamicShapes(TestCase):
    def test_compile_with_a_dynamic_batch_matches_eager(self):
        batch = torch.export.Dim("batch", min=1, max=8)
        ep = torch.export.export(
            SnapshotThenOpInPyTorch(),
            _args(2),
            dynamic_shapes=({0: batch}, {0: batch}, None),
        )
        inputs = [
            torch_tensorrt.Input(
                min_shape=(1,) + tuple(t.shape[1:]),
                opt_shape=tuple(t.shape),
                max_shape=(8,) + tuple(t.shape[1:]),
                dtype=t.dtype,
            )
            for t in _args(2)[:2]
        ] + [_args(2)[2]]
        with engines_built_execution_stood_in():
            trt = torch_tensorrt.dynamo.compile(ep, arg_inputs=inputs, min_block_size=1)
        for batch in (2, 3):
            compiled, eager = _args(batch), _args(batch)
            self.assertEqual(trt(*compiled), SnapshotThenOpInPyTorch()(*eager))
            self.assertEqual(compiled[0], eager[0])


if __name__ == "__main__":
    run_tests()
