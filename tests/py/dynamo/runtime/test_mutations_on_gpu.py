# type: ignore
"""Compiled modules that update inputs and buffers, run on a GPU over several calls.

Every case runs several steps against eager PyTorch and checks the outputs, the
mutated inputs and the buffers: the runtime's in-place outputs through
``TorchTensorRTModule.forward`` (the KV-cache path, ``IKVCacheUpdateLayer``),
inputs the runtime has to stage (non-contiguous, on the CPU) and their write
back, save and reload, whole-graph and per-engine CUDA graphs, dynamic shapes.
They run on the runtime the install selects (the C++ runtime when
``torch_tensorrt/lib`` ships it, else the Python ``TRTEngine``).
"""

import copy
import os
import tempfile
import unittest

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt import ENABLED_FEATURES
from torch_tensorrt.dynamo._SourceIR import SourceIR
from torch_tensorrt.dynamo.conversion import dynamo_tensorrt_converter, impl
from torch_tensorrt.dynamo.runtime._CudaGraphsTorchTensorRTModule import (
    CudaGraphsTorchTensorRTModule,
)
from torch_tensorrt.dynamo.runtime._TorchTensorRTModule import TorchTensorRTModule

from .test_input_mutations import KvCache, whole_graph_refused_by_tensorrt_rtx

RUNTIME = "cpp" if ENABLED_FEATURES.torch_tensorrt_runtime else "python"
NO_GPU = "Running TensorRT engines needs a CUDA device; this host has none."
STEPS = 3
SENTINEL = 7.0
TORCH_BEFORE_2_14 = tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 14)


@torch.library.custom_op("trt_gpu_mut::scale_", mutates_args=("x",))
def scale_(x: torch.Tensor, factor: float) -> None:
    x.mul_(factor)


@scale_.register_fake
def _(x, factor):
    return None


@dynamo_tensorrt_converter(
    torch.ops.trt_gpu_mut.scale_.default, supports_dynamic_shapes=True
)
def _scale(ctx, target, args, kwargs, name):
    return impl.elementwise.mul(ctx, target, SourceIR.ATEN, name, args[0], args[1])


class KvCacheBuffer(torch.nn.Module):
    """The same write into a registered buffer (lifted into an engine input)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 4, 16, 8))

    def forward(self, update):
        self.cache[:, :, 3:4, :] = update
        return self.cache.sum(dim=2)


class KvCacheAt(torch.nn.Module):
    """One position of the cache, given at run time."""

    def forward(self, cache, position, update):
        cache.index_copy_(2, position, update)
        return cache.sum(dim=2)


class ScaleInput(torch.nn.Module):
    """A mutated input, nothing else; ``sin`` may be left to PyTorch."""

    def forward(self, x, y):
        torch.ops.trt_gpu_mut.scale_(x, 1.5)
        return torch.sin(x) + y


class ScaleBuffer(torch.nn.Module):
    """A mutated buffer, nothing else; ``sin`` may be left to PyTorch."""

    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.ones(2, 8))

    def forward(self, x):
        torch.ops.trt_gpu_mut.scale_(self.state, 1.5)
        return torch.sin(x) + self.state


class ScaleInputAndBuffer(ScaleBuffer):
    def forward(self, x, y):
        torch.ops.trt_gpu_mut.scale_(x, 2.0)
        torch.ops.trt_gpu_mut.scale_(self.state, 1.5)
        return torch.sin(x) * y + self.state


def _compile(module, args, **kwargs):
    ep = torch.export.export(copy.deepcopy(module), tuple(a.clone() for a in args))
    return torch_tensorrt.dynamo.compile(
        ep, arg_inputs=[a.clone() for a in args], min_block_size=1, **kwargs
    )


def _engines(trt):
    return [m for m in trt.modules() if isinstance(m, TorchTensorRTModule)]


def _kv_args():
    return (torch.zeros(1, 4, 16, 8).cuda(), torch.randn(1, 4, 1, 8).cuda())


class _Steps:
    def run_steps(self, trt, eager, make_args, buffers=(), steps=STEPS):
        """``steps`` calls of both, each on fresh inputs made by ``make_args``."""
        for step in range(steps):
            args = make_args(step)
            compiled_args = [a.clone() for a in args]
            eager_args = [a.clone() for a in args]
            self.assertEqual(trt(*compiled_args), eager(*eager_args), msg=f"{step}")
            self.assertEqual(compiled_args, eager_args, msg=f"inputs, step {step}")
            for name in buffers:
                self.assertEqual(
                    trt.get_buffer(name), eager.get_buffer(name), msg=f"{step}"
                )


@unittest.skipIf(not torch.cuda.is_available(), NO_GPU)
class TestKvCacheUpdatedInPlace(TestCase, _Steps):
    """The KV-cache path: ``IKVCacheUpdateLayer``, its output aliased to the cache."""

    def _check_in_place(self, trt, eager, state, eager_state, make_args):
        """Steps in which the engine writes the caller's ``state`` itself: it
        equals eager's, the sentinel outside the written slab survives, and the
        call allocates less than the state's size."""
        state.fill_(SENTINEL)
        eager_state.fill_(SENTINEL)
        for step in range(STEPS):
            args = make_args(step)
            torch.cuda.synchronize()
            before = torch.cuda.memory_stats()["allocated_bytes.all.allocated"]
            out = trt(state, *args)
            torch.cuda.synchronize()
            allocated = (
                torch.cuda.memory_stats()["allocated_bytes.all.allocated"] - before
            )
            self.assertEqual(out, eager(eager_state, *args), msg=f"{step}")
            self.assertEqual(state, eager_state, msg=f"{step}")
            untouched = (state == SENTINEL).sum().item()
            self.assertGreater(untouched, 0)
            self.assertEqual(untouched, (eager_state == SENTINEL).sum().item())
            self.assertLess(allocated, state.nbytes, msg=f"{step}")

    def test_the_caller_s_cache_is_written_in_place_over_several_steps(self):
        with self.subTest(runtime=RUNTIME):
            trt = _compile(KvCache().cuda(), _kv_args())
            (engine,) = _engines(trt)
            self.assertEqual(
                {i for i, _ in engine.aliased_io.values()}, {"cache"}, "no aliasing"
            )
            self._check_in_place(
                trt,
                KvCache(),
                torch.zeros(1, 4, 16, 8).cuda(),
                torch.zeros(1, 4, 16, 8).cuda(),
                lambda step: (torch.randn(1, 4, 1, 8).cuda(),),
            )

    def test_a_position_that_moves_every_step(self):
        position = torch.tensor([3]).cuda()
        args = (
            torch.zeros(1, 4, 16, 8).cuda(),
            position,
            torch.randn(1, 4, 1, 8).cuda(),
        )
        trt = _compile(KvCacheAt().cuda(), args)
        self.assertTrue(any(e.aliased_io for e in _engines(trt)), "no aliasing")
        with self.subTest(runtime=RUNTIME):
            self._check_in_place(
                trt,
                KvCacheAt(),
                torch.zeros(1, 4, 16, 8).cuda(),
                torch.zeros(1, 4, 16, 8).cuda(),
                lambda step: (
                    torch.tensor([2 + 5 * step]).cuda(),
                    torch.randn(1, 4, 1, 8).cuda(),
                ),
            )

    def test_a_buffer_cache_advances(self):
        with self.subTest(runtime=RUNTIME):
            trt = _compile(KvCacheBuffer().cuda(), (torch.randn(1, 4, 1, 8).cuda(),))
            self.assertTrue(any(e.aliased_io for e in _engines(trt)), "no aliasing")
            eager = KvCacheBuffer().cuda()
            trt.get_buffer("cache").fill_(SENTINEL)
            eager.cache.fill_(SENTINEL)
            self.run_steps(
                trt, eager, lambda s: (torch.randn(1, 4, 1, 8).cuda(),), ["cache"]
            )

    def test_staged_caches_receive_the_write(self):
        """Inputs the runtime must stage (non-contiguous, on the CPU), with the
        engine's own outputs and with the output allocator."""
        trt = _compile(KvCache().cuda(), _kv_args())
        caches = {
            "non_contiguous": lambda: torch.zeros(1, 4, 8, 16).cuda().transpose(2, 3),
            "on_the_cpu": lambda: torch.zeros(1, 4, 16, 8),
        }
        for allocator in (False, True):
            for name, make in caches.items():
                with self.subTest(name, output_allocator=allocator, runtime=RUNTIME):
                    cache = make()
                    expected = cache.clone()
                    for step in range(STEPS):
                        update = torch.randn(1, 4, 1, 8).cuda()
                        if allocator:
                            with torch_tensorrt.runtime.enable_output_allocator(trt):
                                out = trt(cache, update)
                        else:
                            out = trt(cache, update)
                        eager = KvCache()(expected, update.to(expected.device))
                        self.assertEqual(out.cpu(), eager.cpu(), msg=f"{step}")
                        self.assertEqual(cache, expected, msg=f"{step}")

    def test_dynamic_batch(self):
        batch = torch.export.Dim("batch", min=1, max=4)
        args = (torch.zeros(2, 4, 16, 8).cuda(), torch.randn(2, 4, 1, 8).cuda())
        ep = torch.export.export(
            KvCache().cuda(), args, dynamic_shapes=({0: batch}, {0: batch})
        )
        inputs = [
            torch_tensorrt.Input(
                min_shape=(1, 4, 16, 8),
                opt_shape=(2, 4, 16, 8),
                max_shape=(4, 4, 16, 8),
            ),
            torch_tensorrt.Input(
                min_shape=(1, 4, 1, 8), opt_shape=(2, 4, 1, 8), max_shape=(4, 4, 1, 8)
            ),
        ]
        trt = torch_tensorrt.dynamo.compile(ep, arg_inputs=inputs, min_block_size=1)
        for b in (1, 3, 4):
            with self.subTest(batch=b, runtime=RUNTIME):
                self.run_steps(
                    trt,
                    KvCache(),
                    lambda s: (
                        torch.zeros(b, 4, 16, 8).cuda(),
                        torch.randn(b, 4, 1, 8).cuda(),
                    ),
                )


@unittest.skipIf(not torch.cuda.is_available(), NO_GPU)
class TestSaveAndReload(TestCase, _Steps):
    """``torch_tensorrt.save``/``load`` keeps every mutation and the outputs' order."""

    CASES = [
        ("input_and_buffer", ScaleInputAndBuffer, 2, ["state"]),
        ("buffer", ScaleBuffer, 1, ["state"]),
        ("kv_cache", KvCache, None, []),
        ("kv_cache_buffer", KvCacheBuffer, None, ["cache"]),
    ]

    @staticmethod
    def _args(cls, n):
        if cls is KvCache:
            return _kv_args()
        if cls is KvCacheBuffer:
            return (torch.randn(1, 4, 1, 8).cuda(),)
        return tuple(torch.randn(2, 8).cuda() for _ in range(n))

    def test_round_trip_through_an_exported_program(self):
        if RUNTIME == "python" and TORCH_BEFORE_2_14:
            self.skipTest(
                f"torch {torch.__version__}: saving the Python runtime's TRTEngine "
                "needs the opaque-object support of the torch 2.14 this wheel is "
                "built for (torch.export's lift_constants_pass rejects it even for a "
                "model without mutations: tools/gpu/rtx_limits.py)"
            )
        for name, cls, n, buffers in self.CASES:
            with self.subTest(name, runtime=RUNTIME):
                args = self._args(cls, n)
                trt = _compile(cls().cuda(), args)
                with tempfile.TemporaryDirectory() as tmp:
                    path = os.path.join(tmp, "trt.ep")
                    torch_tensorrt.save(trt, path, arg_inputs=[a.clone() for a in args])
                    loaded = torch_tensorrt.load(path).module()
                eager = cls().cuda()
                self.run_steps(
                    loaded, eager, lambda s: self._args(cls, n), buffers=buffers
                )


@unittest.skipIf(not torch.cuda.is_available(), NO_GPU)
class TestCudaGraphsWithMutations(TestCase, _Steps):
    CASES = [
        ("input_only", ScaleInput, 2, []),
        ("buffer_only", ScaleBuffer, 1, ["state"]),
        ("input_and_buffer", ScaleInputAndBuffer, 2, ["state"]),
    ]

    def setUp(self):
        torch_tensorrt.runtime.set_cudagraphs_mode(False)

    def tearDown(self):
        torch_tensorrt.runtime.set_cudagraphs_mode(False)

    def _cases(self, **kwargs):
        for name, cls, n, buffers in self.CASES:
            args = tuple(torch.randn(2, 8).cuda() for _ in range(n))
            yield name, cls, buffers, args, _compile(cls().cuda(), args, **kwargs)

    def _steps(self, run, trt, eager, args, buffers):
        # the same input tensors every call, as CUDA graphs want them
        fixed = [a.clone() for a in args]
        eager_args = [a.clone() for a in fixed]
        for step in range(STEPS):
            self.assertEqual(run(*fixed), eager(*eager_args), msg=f"{step}")
            self.assertEqual(fixed, eager_args, msg=f"inputs {step}")
            for b in buffers:
                self.assertEqual(trt.get_buffer(b), eager.get_buffer(b), msg=f"{step}")

    def test_whole_graph_mode(self):
        """``enable_cudagraphs`` on a module with PyTorch segments."""
        in_torch = {"torch_executed_ops": {torch.ops.aten.sin.default}}
        for name, cls, buffers, args, trt in self._cases(**in_torch):
            with self.subTest(name, runtime=RUNTIME):
                refused = whole_graph_refused_by_tensorrt_rtx(trt)
                if refused:
                    self.skipTest(refused)
                with torch_tensorrt.runtime.enable_cudagraphs(trt) as graphed:
                    self.assertIsInstance(graphed, CudaGraphsTorchTensorRTModule)
                    self._steps(graphed, trt, cls().cuda(), args, buffers)

    def test_per_engine_mode(self):
        """``set_cudagraphs_mode(True)``: each engine records its own graph."""
        for name, cls, buffers, args, trt in self._cases():
            with self.subTest(name, runtime=RUNTIME):
                torch_tensorrt.runtime.set_cudagraphs_mode(True)
                self._steps(trt, trt, cls().cuda(), args, buffers)
                torch_tensorrt.runtime.set_cudagraphs_mode(False)


if __name__ == "__main__":
    run_tests()
