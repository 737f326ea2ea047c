# type: ignore
"""A slice write's bounds are clamped to its axis, as PyTorch clamps them.

``c[:, :, 14:20, :] = u`` on an axis of 16 writes positions 14 and 15, and
``c[:, :, -1:, :] = u`` the last one. The scatter that ``slice_scatter``
becomes (when the write is copied back) took the bounds unclamped and failed
the build: "operands could not be broadcast together with remapped shapes
(1,1,0,1) and requested shape (1,4,1,8)". Each model here is built into a
standalone engine with TensorRT-RTX, and run through ``compile()`` with the
engine's execution stood in, against eager over several calls.
"""

import unittest

import torch
from torch.testing._internal.common_utils import TestCase, run_tests

from .test_compile_with_stand_in_engines import compile_on_cpu
from .test_lower_auto_functionalized import (
    CPU_BUILDER,
    _build_engine,
)

CPU_ONLY = (
    "Building engines without a CUDA device needs TensorRT-RTX on a host without "
    "a GPU; on a GPU the same programs run with real engines: the generated state programs run by tools/fuzz/state_programs.py."
)


class PastTheEnd(torch.nn.Module):
    def forward(self, c, u):
        c[:, :, 14:20, :] = u
        return c.sum()


class LastPosition(torch.nn.Module):
    def forward(self, c, u):
        c[:, :, -1:, :] = u
        return u * 2


class SlidingWindow(torch.nn.Module):
    def forward(self, c, u):
        c[:, :, :-1] = c[:, :, 1:].clone()
        c[:, :, -1:] = u
        return c * 1


CASES = [
    # an int32 state: the write is a scatter, copied back
    ("past_the_end_int32", PastTheEnd, torch.int32, 2),
    ("last_position_int32", LastPosition, torch.int32, 1),
    ("past_the_end_float", PastTheEnd, torch.float32, 2),
    ("sliding_window", SlidingWindow, torch.float32, 1),
]


def _args(dtype, n):
    c = torch.arange(1 * 4 * 16 * 8).reshape(1, 4, 16, 8).to(dtype)
    u = (torch.arange(1 * 4 * n * 8).reshape(1, 4, n, 8) * 7 % 5).to(dtype)
    return c, u


class TestTheBoundsResolved(TestCase):
    def test_as_python_clamps_them(self):
        import sys

        from torch_tensorrt.dynamo.conversion.impl.slice_scatter import (
            KVWriteStatus,
            resolve_slice_scatter_write,
        )

        end = sys.maxsize  # an open end, as export writes it
        for size, start, stop in (
            (16, 14, 20),
            (16, -1, end),
            (2, -3, end),  # more negative than the axis: all of it
            (8, -3, end),
            (8, 2, -1),
            (8, -20, 3),
        ):
            with self.subTest(size=size, start=start, stop=stop):
                expected = range(size)[slice(start, stop)]
                got = resolve_slice_scatter_write((1, size, 4), 1, start, stop, 1)
                self.assertEqual(got[:2], (expected.start, expected.stop))
                whole = expected.start == 0 and expected.stop == size
                self.assertEqual(
                    got[3],
                    KVWriteStatus.FULL_OVERWRITE if whole else KVWriteStatus.OK,
                )


@unittest.skipIf(not CPU_BUILDER, CPU_ONLY)
class TestSliceWriteBounds(TestCase):
    def test_a_standalone_engine_builds(self):
        for name, cls, dtype, n in CASES:
            with self.subTest(name):
                engine, _, result = _build_engine(
                    cls(), _args(dtype, n), min_block_size=1
                )
                self.assertGreater(len(engine), 0)
                self.assertIn("c_new", result.output_names)

    def test_compile_matches_eager_over_several_calls(self):
        for name, cls, dtype, n in CASES:
            with self.subTest(name):
                trt, _ = compile_on_cpu(self, cls(), _args(dtype, n))
                compiled, eager = _args(dtype, n), _args(dtype, n)
                for step in range(3):
                    self.assertEqual(trt(*compiled), cls()(*eager), msg=f"step {step}")
                    self.assertEqual(compiled, eager, msg=f"state, step {step}")


if __name__ == "__main__":
    run_tests()
