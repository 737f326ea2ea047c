# type: ignore
"""``state[:, :, p] = new`` (an index_put along one axis) is written as index_copy.

``index_put``'s converter failed the build for it ("Cannot broadcast (2, 1, 4)
to (1, 1, 2, 4)"), through ``compile()`` and a standalone engine alike. As an
``index_copy`` it is a scatter, or, for a float state updated at one position,
a write in place on IKVCacheUpdateLayer. Other index_puts are left as they are.
"""

import json
import tempfile
import unittest

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests

from .test_compile_with_stand_in_engines import compile_on_cpu
from .test_lower_auto_functionalized import (
    CPU_BUILDER,
    _clone,
    _lowered,
)

CPU_ONLY = (
    "Building engines without a CUDA device needs TensorRT-RTX on a host without "
    "a GPU; on a GPU the same programs run with real engines: the generated state programs run by tools/fuzz/state_programs.py."
)


class WriteAtPositions(torch.nn.Module):
    def forward(self, s, p, u):
        s[:, :, p] = u
        return u * 2


class RowsAtAPosition(torch.nn.Module):
    def forward(self, s, p, u):
        s[:, p] = u
        return u * 2


class BufferWriteAtAPosition(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("s", torch.zeros(2, 2, 8, 4))

    def forward(self, p, u):
        self.s[:, :, p] = u
        return self.s.sum(dim=2)


class Accumulates(torch.nn.Module):
    def forward(self, s, p, u):
        torch.ops.aten.index_put_.default(s, [None, None, p], u, True)
        return u * 2


class TwoIndexTensors(torch.nn.Module):
    def forward(self, s, p, q, u):
        s[:, p, q] = u
        return u * 2


def _args(dtype=torch.float32, n=1, broadcast=False):
    g = torch.Generator().manual_seed(n)
    u_shape = (4,) if broadcast else (2, 2, n, 4)
    return (
        torch.randn(2, 2, 8, 4, generator=g).to(dtype),
        torch.tensor([5, 2][:n]),
        torch.randn(*u_shape, generator=g).to(dtype),
    )


def _targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


class TestTheRewrite(TestCase):
    def test_along_one_axis_becomes_index_copy(self):
        gm = _lowered(WriteAtPositions(), _args())
        self.assertIn(torch.ops.aten.index_copy.default, _targets(gm))
        self.assertNotIn(torch.ops.aten.index_put.default, _targets(gm))

    def test_others_are_left_as_they_are(self):
        for name, model, args in (
            ("accumulate", Accumulates(), _args()),
            (
                "two index tensors",
                TwoIndexTensors(),
                (
                    torch.zeros(2, 3, 4),
                    torch.tensor([0, 1]),
                    torch.tensor([2, 3]),
                    torch.randn(2, 2),
                ),
            ),
        ):
            with self.subTest(name):
                targets = _targets(_lowered(model, args))
                self.assertIn(torch.ops.aten.index_put.default, targets)
                self.assertNotIn(torch.ops.aten.index_copy.default, targets)


@unittest.skipIf(not CPU_BUILDER, CPU_ONLY)
class TestItBuildsAndMatchesEager(TestCase):
    CASES = {
        "one position, float": (WriteAtPositions, lambda: _args()),
        "two positions, int32": (
            WriteAtPositions,
            lambda: _args(torch.int32, n=2),
        ),
        "broadcast values": (WriteAtPositions, lambda: _args(broadcast=True)),
        "batch 1": (
            WriteAtPositions,
            lambda: (
                torch.arange(64.0).reshape(1, 2, 8, 4),
                torch.tensor([3]),
                -torch.arange(8.0).reshape(1, 2, 1, 4),
            ),
        ),
        "a 3-D state along axis 1": (
            RowsAtAPosition,
            lambda: (
                torch.arange(64.0).reshape(2, 8, 4),
                torch.tensor([6]),
                -torch.arange(8.0).reshape(2, 1, 4),
            ),
        ),
    }

    def test_compile(self):
        for name, (cls, args) in self.CASES.items():
            with self.subTest(name):
                trt, _ = compile_on_cpu(self, cls(), args())
                compiled, eager = args(), args()
                for step in range(3):
                    self.assertEqual(trt(*compiled), cls()(*eager))
                    self.assertEqual(compiled[0], eager[0], msg=f"state, {step}")

    def test_a_buffer(self):
        args = (torch.tensor([3]), torch.randn(2, 2, 1, 4))
        trt, _ = compile_on_cpu(self, BufferWriteAtAPosition(), args)
        eager = BufferWriteAtAPosition()
        for step in range(3):
            self.assertEqual(trt(*_clone(args)), eager(*_clone(args)))
            self.assertEqual(trt.s, eager.s)

    def test_the_standalone_engine_writes_one_position_in_place(self):
        ep = torch.export.export(WriteAtPositions(), _args())
        with tempfile.TemporaryDirectory() as tmp:
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep,
                arg_inputs=list(_args()),
                min_block_size=1,
                alias_map_path=f"{tmp}/m.json",
            )
            with open(f"{tmp}/m.json") as f:
                (entry,) = json.load(f)["aliases"]
        self.assertEqual((entry["input"], entry["update"]), ("s", "in_place"))


if __name__ == "__main__":
    run_tests()
