# type: ignore
"""Models that return the state TensorRT writes in place: nothing is hidden.

The interpreter appends the aliased outputs of ``IKVCacheUpdateLayer`` that the
graph does not return, and ``TorchTensorRTModule`` drops those side effects;
a written state the model returns, last, is one of its outputs. A real
``compile()`` builds the engines with TensorRT-RTX on the CPU and stands in
for their execution (``test_compile_with_stand_in_engines.py``); the same
models run on the GPU in ``TestReturnedStatesOnGpu``.
"""

import unittest

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests

from .test_compile_with_stand_in_engines import compile_on_cpu
from .test_lower_auto_functionalized import CPU_BUILDER, NEEDS_CPU_BUILDER, _clone


class ReturnsWrittenBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(2, 4, 16, 8))

    def forward(self, u):
        self.cache[:, :, 3:4, :] = u
        return u * 2, self.cache


class ReturnsWrittenInput(torch.nn.Module):
    def forward(self, cache, u):
        cache[:, :, 3:4, :] = u
        return u * 2, cache


def _returned_state_cases():
    torch.manual_seed(0)
    cache, u = torch.zeros(2, 4, 16, 8), torch.randn(2, 4, 1, 8)
    return [
        (ReturnsWrittenBuffer, (u,)),
        (ReturnsWrittenInput, (cache, u)),
    ]


def _check_steps(testcase, trt, eager, args):
    """Three calls with a new update each, against eager: both outputs, the
    caller's arguments, and a returned input that is the caller's own tensor."""
    compiled_args, eager_args = _clone(args), _clone(args)
    for step in range(3):
        u = torch.randn_like(args[-1])
        compiled_args = compiled_args[:-1] + (u.clone(),)
        eager_args = eager_args[:-1] + (u.clone(),)
        out, expected = trt(*compiled_args), eager(*eager_args)
        testcase.assertEqual(len(out), 2, msg=f"step {step}")
        testcase.assertEqual(out, expected, msg=f"step {step}")
        testcase.assertEqual(compiled_args, eager_args, msg=f"step {step}")
        if isinstance(eager, ReturnsWrittenInput):
            testcase.assertIs(out[1], compiled_args[0])


@unittest.skipIf(not CPU_BUILDER, NEEDS_CPU_BUILDER)
class TestReturnedStates(TestCase):
    """A model that returns, last, the state TensorRT writes in place."""

    def test_compiled_module_returns_what_eager_returns(self):
        for cls, args in _returned_state_cases():
            with self.subTest(cls.__name__):
                trt, built = compile_on_cpu(self, cls(), args)
                # the state is written by IKVCacheUpdateLayer: an engine alias
                kinds = [k for e in built for _, k in e.aliased_io.values()]
                self.assertEqual(kinds, ["kv_cache_update"])
                _check_steps(self, trt, cls(), args)


@unittest.skipIf(
    not torch.cuda.is_available(),
    "Running TensorRT engines needs a CUDA device; this host has none.",
)
class TestReturnedStatesOnGpu(TestCase):
    def test_compiled_module_returns_what_eager_returns(self):
        for cls, args in _returned_state_cases():
            with self.subTest(cls.__name__):
                args = tuple(a.cuda() for a in args)
                ep = torch.export.export(cls().cuda(), _clone(args))
                trt = torch_tensorrt.dynamo.compile(
                    ep, arg_inputs=list(_clone(args)), min_block_size=1
                )
                _check_steps(self, trt, cls().cuda(), args)


if __name__ == "__main__":
    run_tests()
