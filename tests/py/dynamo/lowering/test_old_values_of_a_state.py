# type: ignore
"""A state's old value, read or returned, is its old value after the state is written.

Two ways it was not, found by the generated state programs:

- a snapshot of a buffer returned before the buffer is reset from an input
  (``snap = self.buf.clone(); self.buf.copy_(z); return snap``): lowering
  removed the clone (``remove_input_alias_fixing_clones``), so the module
  returned the buffer itself, which then held the new value;
- a read of a state before a mutating custom op that runs in PyTorch
  (``r = s.sum(dim=2); my_op_(s)``): the partitioners order submodules by
  their data, and the PyTorch submodule that runs the op and writes its result
  back into ``s`` has no users, so it ran before the engine that reads ``s``,
  which read the new value.

Each runs through ``compile()`` with its engines built by TensorRT-RTX and
their execution stood in, against eager over three calls, outputs held.
"""

import unittest

import torch
from torch.testing._internal.common_utils import TestCase, run_tests

from .test_compile_with_stand_in_engines import compile_on_cpu
from .test_lower_auto_functionalized import CPU_BUILDER, _clone

CPU_ONLY = (
    "Building engines without a CUDA device needs TensorRT-RTX on a host without "
    "a GPU; on a GPU the same programs run with real engines: the generated state programs run by tools/fuzz/state_programs.py."
)


@torch.library.custom_op("trt_old_values::bump_", mutates_args=("x",))
def bump_(x: torch.Tensor) -> None:
    x.add_(2)


@bump_.register_fake
def _(x):
    return None


class SnapshotThenReset(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.arange(64.0).reshape(1, 2, 8, 4))

    def forward(self, z):
        snapshot = self.buf.clone()
        self.buf.copy_(z)
        return snapshot


class ReadThenOpInPyTorch(torch.nn.Module):
    def forward(self, s, p, u):
        before = s.sum(dim=2)
        written = torch.index_copy(s, 2, p, u)
        torch.ops.trt_old_values.bump_(s)
        return before, written


@unittest.skipIf(not CPU_BUILDER, CPU_ONLY)
class TestOldValues(TestCase):
    def _check(self, model, make_args, buffers=()):
        trt, _ = compile_on_cpu(self, model(), make_args(0))
        eager = model()
        held = []
        for step in range(3):
            compiled_args, eager_args = make_args(step), make_args(step)
            out, expected = trt(*compiled_args), eager(*eager_args)
            self.assertEqual(out, expected, msg=f"step {step}")
            self.assertEqual(compiled_args, eager_args, msg=f"inputs, step {step}")
            for name in buffers:
                self.assertEqual(getattr(trt, name), getattr(eager, name))
            held.append((out, _clone(out if isinstance(out, tuple) else (out,))))
        for out, copy in held:
            self.assertEqual(out if isinstance(out, tuple) else (out,), copy)

    def test_a_snapshot_of_a_buffer_reset_from_an_input(self):
        self._check(
            SnapshotThenReset,
            lambda step: (torch.full((1, 2, 8, 4), float(step + 1)),),
            buffers=("buf",),
        )

    def test_a_read_before_an_op_pytorch_runs(self):
        self._check(
            ReadThenOpInPyTorch,
            lambda step: (
                torch.arange(64.0).reshape(1, 2, 8, 4),
                torch.tensor([step]),
                torch.ones(1, 2, 1, 4),
            ),
        )


if __name__ == "__main__":
    run_tests()
