# type: ignore
"""float64 tensors run in PyTorch unless ``truncate_double`` casts them.

TensorRT has no float64. With ``truncate_double=False`` (the default) an
engine whose input was float64 declared it float32, and every call of
``compile()``'s module was refused ("Dtype mismatch for input s. Expect
torch.float32, got torch.float64"): a float64 state, input or buffer, could
not be used at all. Nodes that read or make float64 tensors now run in
PyTorch; float32 work around them still goes to TensorRT. Engines are built
by TensorRT-RTX on the CPU and their execution stood in (the stand-in refuses
a tensor of another dtype than the engine's input, as the runtimes do).
"""

import unittest

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests

from ..lowering.test_compile_with_stand_in_engines import (
    engines_built_execution_stood_in,
)
from ..lowering.test_lower_auto_functionalized import (
    CPU_BUILDER,
    _clone,
)

CPU_ONLY = (
    "Building engines without a CUDA device needs TensorRT-RTX on a host without "
    "a GPU; on a GPU the same programs run with real engines: the generated state programs run by tools/fuzz/state_programs.py."
)


class Float64State(torch.nn.Module):
    def forward(self, s, p, u, x):
        s.index_copy_(2, p, u)
        return s.sum(dim=2), x * 2 + 1


class Float64Buffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(1, 2, 8, 4, dtype=torch.float64))

    def forward(self, u, x):
        self.buf[:, :, 3:4] = u
        return x * 3


def _compile(model, args, **settings):
    ep = torch.export.export(model, _clone(args))
    with engines_built_execution_stood_in() as built:
        trt = torch_tensorrt.dynamo.compile(
            ep, arg_inputs=list(_clone(args)), min_block_size=1, **settings
        )
    return trt, built


@unittest.skipIf(not CPU_BUILDER, CPU_ONLY)
class TestFloat64RunsInPyTorch(TestCase):
    def test_a_float64_state(self):
        args = (
            torch.zeros(1, 2, 8, 4, dtype=torch.float64),
            torch.tensor([3]),
            torch.ones(1, 2, 1, 4, dtype=torch.float64),
            torch.randn(2, 3),
        )
        trt, built = _compile(Float64State(), args)
        # the float32 work is still an engine's
        self.assertEqual(len(built), 1)
        compiled, eager = _clone(args), _clone(args)
        for step in range(3):
            self.assertEqual(trt(*compiled), Float64State()(*eager))
            self.assertEqual(compiled[0], eager[0])

    def test_a_float64_buffer(self):
        args = (torch.ones(1, 2, 1, 4, dtype=torch.float64), torch.randn(2, 3))
        trt, _ = _compile(Float64Buffer(), args)
        eager = Float64Buffer()
        for step in range(3):
            self.assertEqual(trt(*_clone(args)), eager(*_clone(args)))
            self.assertEqual(trt.buf, eager.buf)


if __name__ == "__main__":
    run_tests()
