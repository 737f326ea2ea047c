# type: ignore
"""Calls whose arguments share memory with an input written in place are refused.

A compiled module computes every new value from its inputs' values on entry, so
``def forward(self, a, b): a += 1; b *= 2`` called as ``m(x, x)`` would give 2.0
where eager PyTorch gives 4.0. The overlap test is checked against the element
addresses themselves; the compiled module's refusal on the CPU with engines
built by TensorRT-RTX and their execution stood in; the engines' own refusal
(both runtimes) and the whole-graph CUDA-graph wrapper's on a GPU.
"""

import inspect
import itertools
import random
import unittest
import unittest.mock

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo.runtime import _aliased_arguments
from torch_tensorrt.dynamo.runtime._aliased_arguments import (
    InPlaceArgumentsCheck,
    check_engine_inputs_distinct,
    check_in_place_arguments_distinct,
    tensors_overlap,
)
from torch_tensorrt.dynamo.runtime._TorchTensorRTModule import TorchTensorRTModule

from ..lowering.test_compile_with_stand_in_engines import (
    compile_on_cpu,
    engines_built_execution_stood_in,
)
from ..lowering.test_lower_auto_functionalized import (
    CPU_BUILDER,
    NEEDS_CPU_BUILDER,
)

NO_GPU = "Running TensorRT engines needs a CUDA device; this host has none."


def _addresses(t):
    """Every byte address an element of ``t`` occupies (the reference)."""
    start, size = t.data_ptr(), t.element_size()
    found = set()
    for index in itertools.product(*(range(n) for n in t.shape)):
        offset = sum(i * s for i, s in zip(index, t.stride()))
        first = start + offset * size
        found.update(range(first, first + size))
    return found


def _random_view(storage, rng):
    rank = rng.randint(1, 3)
    shape = [rng.randint(1, 4) for _ in range(rank)]
    stride = [rng.randint(1, 7) for _ in range(rank)]
    extent = sum((n - 1) * s for n, s in zip(shape, stride))
    offset = rng.randint(0, storage.numel() - extent - 1)
    return storage.as_strided(shape, stride, offset)


def _random_view_with_repeats(storage, rng):
    """A view with strides 0 to 7, sometimes expanded: addresses repeat."""
    view = _random_view(storage, rng)
    stride = [0 if rng.random() < 0.3 else s for s in view.stride()]
    extent = sum((n - 1) * s for n, s in zip(view.shape, stride))
    offset = rng.randint(0, storage.numel() - extent - 1)
    view = storage.as_strided(view.shape, stride, offset)
    if rng.random() < 0.3:
        view = view.unsqueeze(0).expand(rng.randint(2, 3), *view.shape)
    return view


def _first_overlap(values, written):
    """What the check must refuse: the first pair a double loop finds."""
    for w in written:
        for k, other in enumerate(values):
            if k == w or (k in written and k < w):
                continue
            if tensors_overlap(values[w], other):
                return w, k
    return None


class TestTensorsOverlap(TestCase):
    def test_never_misses_an_overlap_and_is_exact_for_equal_layouts(self):
        rng = random.Random(0)
        storage = torch.zeros(128)
        exact = 0
        for _ in range(3000):
            a = _random_view(storage, rng)
            if rng.random() < 0.5:  # the same layout elsewhere in the storage
                extent = sum((n - 1) * s for n, s in zip(a.shape, a.stride()))
                b = storage.as_strided(
                    a.shape, a.stride(), rng.randint(0, storage.numel() - extent - 1)
                )
            else:
                b = _random_view(storage, rng)
            truth = bool(_addresses(a) & _addresses(b))
            found = tensors_overlap(a, b)
            self.assertEqual(tensors_overlap(b, a), found)
            if truth:
                self.assertTrue(found, f"missed: {a.stride()} / {b.stride()}")
            if a.shape == b.shape and a.stride() == b.stride():
                exact += 1
                self.assertEqual(found, truth, f"{a.shape} {a.stride()}")
        self.assertGreater(exact, 1000)

    def test_stride_0_and_expanded_views(self):
        rng = random.Random(1)
        storage = torch.zeros(128)
        exact = 0
        for _ in range(3000):
            a = _random_view_with_repeats(storage, rng)
            if rng.random() < 0.5:  # the same layout elsewhere in the storage
                extent = sum((n - 1) * s for n, s in zip(a.shape, a.stride()))
                b = storage.as_strided(
                    a.shape, a.stride(), rng.randint(0, storage.numel() - extent - 1)
                )
            else:
                b = _random_view_with_repeats(storage, rng)
            truth = bool(_addresses(a) & _addresses(b))
            found = tensors_overlap(a, b)  # 2.14.0's patch: ZeroDivisionError
            self.assertEqual(tensors_overlap(b, a), found)
            if truth:
                self.assertTrue(found, f"missed: {a.stride()} / {b.stride()}")
            if a.shape == b.shape and a.stride() == b.stride():
                exact += 1
                self.assertEqual(found, truth, f"{a.shape} {a.stride()}")
        self.assertGreater(exact, 1000)
        x = torch.zeros(8, 4)
        self.assertFalse(tensors_overlap(x[0:1].expand(3, 4), x[1:2].expand(3, 4)))
        self.assertTrue(tensors_overlap(x[0:1].expand(3, 4), x[0:1].expand(3, 4)))
        self.assertTrue(tensors_overlap(x[:, :1].expand(8, 2), x[2:4]))

    def test_interleaved_halves_of_one_storage_are_distinct(self):
        kv = torch.zeros(3, 2, 4, 16, 8)  # K and V caches of 3 layers in one tensor
        self.assertFalse(tensors_overlap(kv[:, 0], kv[:, 1]))
        self.assertTrue(tensors_overlap(kv[:, 0], kv[:, 0, :, 3:5]))
        self.assertTrue(tensors_overlap(kv[:, 0], kv[:, :, 0]))

    def test_contiguous_slices_and_reinterpreted_bytes(self):
        x = torch.zeros(16)
        self.assertFalse(tensors_overlap(x[:8], x[8:]))
        self.assertTrue(tensors_overlap(x[:9], x[8:]))
        self.assertTrue(tensors_overlap(x, x.view(torch.int32)))
        self.assertTrue(tensors_overlap(x[4:6], x.view(torch.uint8)[23:24]))
        self.assertFalse(tensors_overlap(x[4:6], x.view(torch.uint8)[24:25]))
        self.assertFalse(tensors_overlap(x[:0], x))
        self.assertFalse(tensors_overlap(x, torch.zeros(16)))


class TestTheRefusal(TestCase):
    def test_one_sentence_names_both_arguments(self):
        x = torch.zeros(4)
        with self.assertRaisesRegex(
            RuntimeError,
            r"^Engine e writes input 'cache' in place and input 'update' shares "
            r"memory with it, .* a clone of the input 'update'\)\.$",
        ):
            check_in_place_arguments_distinct(
                "Engine e", [x, x[1:2]], ["cache", "update"], [0]
            )

    def test_only_written_inputs_are_compared(self):
        x = torch.zeros(4)
        # two inputs nobody writes may share memory
        check_in_place_arguments_distinct("m", [x, x, x[1:]], ["a", "b", "c"], [])
        # a written input next to distinct ones
        check_in_place_arguments_distinct(
            "m", [x[:2], x[2:], 3, None], ["a", "b", "n", "o"], [0, 1]
        )

    def test_generated_argument_sets_refused_as_every_pair_says(self):
        """Against a double loop over every pair, on generated calls."""
        rng = random.Random(2)
        refused = 0
        for case in range(600):
            storages = [torch.zeros(96) for _ in range(rng.randint(1, 2))]
            values = []
            for _ in range(rng.randint(2, 7)):
                make = _random_view_with_repeats if rng.random() < 0.4 else _random_view
                values.append(make(rng.choice(storages), rng))
            count = rng.randint(1, min(3, len(values)))
            written = sorted(rng.sample(range(len(values)), count))
            names = [f"v{i}" for i in range(len(values))]
            expected = _first_overlap(values, written)
            if expected is None:
                check_in_place_arguments_distinct("m", values, names, written)
                continue
            refused += 1
            w, k = expected
            with self.assertRaisesRegex(
                RuntimeError,
                rf"writes input 'v{w}' in place and input 'v{k}' shares memory",
                msg=f"case {case}",
            ):
                check_in_place_arguments_distinct("m", values, names, written)
        self.assertGreater(refused, 100)
        self.assertLess(refused, 550)

    def test_states_in_separate_allocations_are_not_compared_pairwise(self):
        """The address ranges are sorted: none meets another, no pair is compared."""
        compared = []
        real = _aliased_arguments.tensors_overlap

        def counted(a, b):
            compared.append((a, b))
            return real(a, b)

        states = [torch.zeros(16) for _ in range(256)]
        names = [f"s{i}" for i in range(256)] + ["x"]
        with unittest.mock.patch.object(_aliased_arguments, "tensors_overlap", counted):
            check_in_place_arguments_distinct(
                "m", states + [torch.zeros(4)], names, range(256)
            )
            self.assertEqual(compared, [])
            with self.assertRaisesRegex(RuntimeError, "input 's7' .* input 'x'"):
                check_in_place_arguments_distinct(
                    "m", states + [states[7][3:5]], names, range(256)
                )
        self.assertEqual(len(compared), 1)

    def test_fake_tensors_are_not_compared(self):
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            x = torch.zeros(4)
        check_in_place_arguments_distinct("m", [x, x], ["a", "b"], [0])


class TwoWritten(torch.nn.Module):
    """The issue's example: eager gives 4.0 for ``m(x, x)`` with x = 1."""

    def forward(self, a, b):
        a += 1
        b *= 2


class TwoWrittenInAList(torch.nn.Module):
    def forward(self, x, states):
        states[0].add_(1)
        states[1].mul_(2)
        return x + states[0]


class WrittenAndRead(torch.nn.Module):
    def forward(self, a, b):
        torch.ops.trt_mut.add_one_(a)
        return a * b


class NothingWritten(torch.nn.Module):
    def forward(self, a, b):
        return a + b


class WritesItsBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.zeros(4, 16))

    def forward(self, x):
        torch.ops.trt_mut.add_one_(self.state)
        return x + self.state


def _ones(*shape):
    return torch.ones(*shape)


@unittest.skipIf(not CPU_BUILDER, NEEDS_CPU_BUILDER)
class TestCompiledModuleOnCpu(TestCase):
    """``compile()``'s module; engines built, their execution stood in."""

    def test_the_issue_s_example_is_refused_not_wrong(self):
        trt, _ = compile_on_cpu(self, TwoWritten(), (_ones(4, 16), _ones(4, 16)))
        x = _ones(4, 16)
        for call in (lambda: trt(x, x), lambda: trt(a=x, b=x), lambda: trt(x, b=x)):
            with self.assertRaisesRegex(
                RuntimeError, r"writes input 'a' in place and input 'b' shares memory"
            ):
                call()
        self.assertEqual(x, _ones(4, 16), msg="a refused call ran")
        # disjoint parts of one storage are separate arguments
        storage, eager = _ones(8, 16), _ones(8, 16)
        trt(storage[:4], storage[4:])
        TwoWritten()(eager[:4], eager[4:])
        self.assertEqual(storage, eager)

    def test_a_written_input_overlapping_one_only_read(self):
        trt, _ = compile_on_cpu(self, WrittenAndRead(), (_ones(4, 16), _ones(4, 16)))
        x = _ones(4, 16)
        with self.assertRaisesRegex(RuntimeError, "input 'a' in place and input 'b'"):
            trt(x, x[:, :])
        with self.assertRaisesRegex(RuntimeError, "input 'a' in place and input 'b'"):
            rows = _ones(5, 16)
            trt(rows[1:], rows[:4])
        a, b = _ones(4, 16), torch.full((4, 16), 3.0)
        self.assertEqual(trt(a, b), torch.full((4, 16), 6.0))

    def test_a_module_that_writes_nothing_is_not_checked(self):
        trt, _ = compile_on_cpu(self, NothingWritten(), (_ones(4, 16), _ones(4, 16)))
        self.assertFalse(
            [
                h
                for h in trt._forward_pre_hooks.values()
                if isinstance(h, InPlaceArgumentsCheck)
            ]
        )
        x = _ones(4, 16)
        self.assertEqual(trt(x, x), x + x)

    def test_the_whole_graph_wrapper_checks_the_caller_s_tensors(self):
        from torch_tensorrt.dynamo.runtime._CudaGraphsTorchTensorRTModule import (
            CudaGraphsTorchTensorRTModule,
        )

        trt, _ = compile_on_cpu(self, TwoWritten(), (_ones(4, 16), _ones(4, 16)))
        # constructing the wrapper captures on a GPU; the check runs before any
        # of that, so only what it reads is set (the GPU variant is TestOnGpu's)
        wrapper = CudaGraphsTorchTensorRTModule.__new__(CudaGraphsTorchTensorRTModule)
        torch.nn.Module.__init__(wrapper)
        wrapper.compiled_module = trt
        wrapper._in_place_arguments = InPlaceArgumentsCheck.of_module(trt)
        x = _ones(4, 16)
        with unittest.mock.patch.object(
            torch_tensorrt.runtime, "get_whole_cudagraphs_mode", return_value=True
        ):
            with self.assertRaisesRegex(
                RuntimeError, "input 'a' in place and input 'b' shares memory"
            ):
                wrapper(x, x)

    def test_an_argument_sharing_a_written_buffer(self):
        trt, _ = compile_on_cpu(self, WritesItsBuffer(), (_ones(4, 16),))
        with self.assertRaisesRegex(
            RuntimeError, r"writes buffer 'state' in place and input 'x' shares memory"
        ):
            trt(trt.state[1:])
        before = trt.state.clone()
        trt(_ones(4, 16))
        self.assertEqual(trt.state, before + 1)


class _EngineThatChecks(torch.nn.Module):
    """Stands in for an engine that writes its first input: it checks its inputs
    as both runtimes' engines do, then runs the stand-in."""

    def __init__(self, stand_in):
        super().__init__()
        self.stand_in = stand_in

    def forward(self, *inputs):
        written = [
            self.stand_in.input_binding_names.index(i)
            for i, _ in self.stand_in.aliased_io.values()
        ]
        check_engine_inputs_distinct(
            self.stand_in.name, inputs, self.stand_in.input_binding_names, written
        )
        return self.stand_in(*inputs)


@unittest.skipIf(not CPU_BUILDER, NEEDS_CPU_BUILDER)
class TestOneCheckPerCall(TestCase):
    """What does not depend on the call is derived once; one check per call."""

    def test_the_signature_is_not_read_per_call(self):
        trt, _ = compile_on_cpu(self, TwoWritten(), (_ones(4, 16), _ones(4, 16)))
        reads = []
        real_signature, real_bind = inspect.signature, inspect.Signature.bind

        def signature(*args, **kwargs):
            reads.append("signature")
            return real_signature(*args, **kwargs)

        def bind(self, *args, **kwargs):
            reads.append("bind")
            return real_bind(self, *args, **kwargs)

        a, b = _ones(4, 16), _ones(4, 16)
        with unittest.mock.patch.object(
            inspect, "signature", signature
        ), unittest.mock.patch.object(inspect.Signature, "bind", bind):
            for _ in range(3):
                trt(a, b)
                trt(a, b=b)
                trt(b=b, a=a)
            with self.assertRaisesRegex(RuntimeError, "input 'a' in place"):
                trt(b=a, a=a)
        self.assertEqual(reads, [])
        self.assertEqual(a, torch.full((4, 16), 10.0))

    def test_a_list_of_states_is_bound_without_inspect_too(self):
        args = (_ones(4, 16), [_ones(4, 16), _ones(4, 16)])
        ep = torch.export.export(TwoWrittenInAList(), args)
        with engines_built_execution_stood_in():
            trt = torch_tensorrt.dynamo.compile(
                ep,
                arg_inputs=[_ones(4, 16), [_ones(4, 16), _ones(4, 16)]],
                min_block_size=1,
            )
        reads = []
        real_bind = inspect.Signature.bind

        def bind(self, *args, **kwargs):
            reads.append("bind")
            return real_bind(self, *args, **kwargs)

        x, a, b = _ones(4, 16), _ones(4, 16), _ones(4, 16)
        with unittest.mock.patch.object(inspect.Signature, "bind", bind):
            trt(x, [a, b])
            trt(x, states=[a, b])
            with self.assertRaisesRegex(
                RuntimeError, r"writes input '\w+' in place and input '\w+' shares"
            ):
                trt(x, [a, a[1:]])
        self.assertEqual(reads, [])
        self.assertEqual((a, b), (torch.full((4, 16), 3.0), torch.full((4, 16), 4.0)))

    def test_the_engine_does_not_check_again_within_a_checked_call(self):
        trt, built = compile_on_cpu(
            self, KvWrite(), (_ones(1, 4, 8, 8), _ones(1, 4, 1, 8))
        )
        (engine,) = [e for e in built if e.aliased_io]
        setattr(trt, engine.name, _EngineThatChecks(engine))
        sweeps = []
        real = _aliased_arguments._overlapping_pair

        def counted(tensors, written):
            sweeps.append(len(tensors))
            return real(tensors, written)

        cache = torch.zeros(1, 4, 8, 8)
        with unittest.mock.patch.object(
            _aliased_arguments, "_overlapping_pair", counted
        ):
            trt(cache, _ones(1, 4, 1, 8))
            self.assertEqual(len(sweeps), 1, "checked by the pre-hook and the engine")
            # refused by the pre-hook: the engine, called alone after it, checks
            with self.assertRaisesRegex(RuntimeError, "The compiled module writes"):
                trt(cache, cache[:, :, 5:6, :])
            inputs = [
                cache if n == engine.input_binding_names[0] else cache[:, :, 5:6, :]
                for n in engine.input_binding_names
            ]
            with self.assertRaisesRegex(RuntimeError, f"Engine {engine.name} writes"):
                getattr(trt, engine.name)(*inputs)
        self.assertEqual(len(sweeps), 3)
        self.assertEqual(_aliased_arguments._CHECKED_CALLS.get(), 0)


class KvWrite(torch.nn.Module):
    """TensorRT writes ``cache`` in place (IKVCacheUpdateLayer)."""

    def forward(self, cache, update):
        cache[:, :, 3:4, :] = update
        return cache.sum()


class TwoKvWrites(torch.nn.Module):
    def forward(self, k, v, update):
        k[:, :, 3:4, :] = update
        v[:, :, 3:4, :] = update * 2
        return k.sum() + v.sum()


def _engine_with_aliased_io(trt):
    for _, module in trt.named_modules():
        if isinstance(module, TorchTensorRTModule) and module.aliased_io:
            return module
    raise AssertionError("no engine writes an input in place")


@unittest.skipIf(not torch.cuda.is_available(), NO_GPU)
class TestOnGpu(TestCase):
    """Real engines, on the runtime this install runs."""

    def _compiled(self, module, args):
        ep = torch.export.export(module, tuple(a.clone() for a in args))
        return torch_tensorrt.dynamo.compile(
            ep, arg_inputs=[a.clone() for a in args], min_block_size=1
        )

    def _kv(self):
        cache = torch.zeros(1, 4, 16, 8, device="cuda")
        update = torch.randn(1, 4, 1, 8, device="cuda")
        return cache, update

    def test_module_and_engine_refuse_an_update_inside_the_cache(self):
        cache, update = self._kv()
        trt = self._compiled(KvWrite(), (cache, update))
        engine = _engine_with_aliased_io(trt)
        inside = cache[:, :, 5:6, :]
        with self.assertRaisesRegex(
            RuntimeError, "input 'cache' in place and input 'update' shares memory"
        ):
            trt(cache, inside)
        # the engine alone, as a loaded program or another graph would call it
        names = engine.input_binding_names
        args = [cache if "update" not in n else inside for n in names]
        with self.assertRaisesRegex(
            RuntimeError, rf"Engine {engine.name}\w* writes input '\w+' in place"
        ):
            engine(*args)
        self.assertEqual(cache, torch.zeros_like(cache), msg="a refused call ran")
        # a separate update is written, as eagerly
        expected = cache.clone()
        KvWrite()(expected, update)
        trt(cache, update)
        self.assertEqual(cache, expected)

    def test_interleaved_caches_of_one_storage_are_accepted(self):
        kv = torch.zeros(1, 2, 4, 16, 8, device="cuda")
        update = torch.randn(1, 4, 1, 8, device="cuda")
        trt = self._compiled(TwoKvWrites(), (kv[:, 0], kv[:, 1], update))
        eager = kv.clone()
        for step in range(3):
            out = trt(kv[:, 0], kv[:, 1], update)
            ref = TwoKvWrites()(eager[:, 0], eager[:, 1], update)
            self.assertEqual(out, ref, msg=f"step {step}")
            self.assertEqual(kv, eager, msg=f"step {step}")
        with self.assertRaisesRegex(RuntimeError, "input 'k' in place and input 'v'"):
            trt(kv[:, 0], kv[:, 0], update)

    def test_whole_graph_cuda_graphs_check_the_caller_s_tensors(self):
        from .test_input_mutations import whole_graph_refused_by_tensorrt_rtx

        cache, update = self._kv()
        trt = self._compiled(KvWrite(), (cache, update))
        refused = whole_graph_refused_by_tensorrt_rtx(trt)
        if refused:
            self.skipTest(refused)
        with torch_tensorrt.runtime.enable_cudagraphs(trt) as graphed:
            with self.assertRaisesRegex(RuntimeError, "input 'cache' in place"):
                graphed(cache, cache[:, :, 5:6, :])
            graphed(cache, update)
        expected = torch.zeros_like(cache)
        KvWrite()(expected, update)
        self.assertEqual(cache, expected)


if __name__ == "__main__":
    run_tests()
