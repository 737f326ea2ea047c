# type: ignore
"""Input mutations and aliased inputs under the CUDA graph modes and after reload.

The CPU tests check the bookkeeping: which inputs and buffers a compiled module
writes (from ``compile(dryrun=True)`` modules, which run in PyTorch), when an
aliased input moved, and that ``aliased_io`` survives ``state_dict``. The GPU
tests run the CUDA graph modes themselves.
"""

import copy
import types
import unittest
import unittest.mock

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt import ENABLED_FEATURES
from torch_tensorrt._Device import Device
from torch_tensorrt.dynamo._settings import CompilationSettings
from torch_tensorrt.dynamo._SourceIR import SourceIR
from torch_tensorrt.dynamo.conversion import dynamo_tensorrt_converter, impl
from torch_tensorrt.dynamo.runtime._input_mutations import (
    AliasedInputAddresses,
    engine_context_changes,
    engine_stream,
    mutated_buffers,
    mutated_inputs,
    state_kept,
)
from torch_tensorrt.dynamo.runtime._TorchTensorRTModule import TorchTensorRTModule


@torch.library.custom_op("trt_input_mut::bump_", mutates_args=("state",))
def bump_(state: torch.Tensor) -> None:
    state.add_(1)


@bump_.register_fake
def _(state):
    return None


@dynamo_tensorrt_converter(torch.ops.trt_input_mut.bump_.default)
def _bump(ctx, target, args, kwargs, name):
    return impl.elementwise.add(ctx, target, SourceIR.ATEN, name, args[0], 1.0)


class BumpInputAndBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.zeros(2, 4))

    def forward(self, x, y):
        torch.ops.trt_input_mut.bump_(x)
        torch.ops.trt_input_mut.bump_(self.state)
        return torch.sin(x) * y + self.state


def _dryrun(module, args, **kwargs):
    ep = torch.export.export(copy.deepcopy(module), tuple(a.clone() for a in args))
    return torch_tensorrt.dynamo.compile(
        ep, arg_inputs=list(args), min_block_size=1, dryrun=True, **kwargs
    )


class TestMutatedInputsAndBuffers(TestCase):
    def test_found_wherever_the_partitioner_puts_the_write_back(self):
        args = (torch.randn(2, 4), torch.randn(2, 4))
        for fast in (False, True):
            with self.subTest(use_fast_partitioner=fast):
                gm = _dryrun(
                    BumpInputAndBuffer(),
                    args,
                    use_fast_partitioner=fast,
                    torch_executed_ops={torch.ops.aten.sin.default},
                )
                self.assertEqual(mutated_inputs(gm), [0])
                self.assertEqual(mutated_buffers(gm), ["state"])

    def test_modules_without_mutations_or_graphs(self):
        class Plain(torch.nn.Module):
            def forward(self, x, y):
                return x * y

        args = (torch.randn(2, 4), torch.randn(2, 4))
        gm = _dryrun(Plain(), args)
        self.assertEqual((mutated_inputs(gm), mutated_buffers(gm)), ([], []))
        self.assertEqual(mutated_inputs(torch.nn.Linear(2, 2)), [])

    def test_state_kept_restores_what_a_warm_up_advances(self):
        args = (torch.randn(2, 4), torch.randn(2, 4))
        gm = _dryrun(BumpInputAndBuffer(), args)
        with state_kept(gm):
            gm(*[a.clone() for a in args])
            self.assertEqual(gm.state, torch.ones(2, 4))
        self.assertEqual(gm.state, torch.zeros(2, 4))
        gm(*[a.clone() for a in args])
        self.assertEqual(gm.state, torch.ones(2, 4))


class TestAliasedInputAddresses(TestCase):
    NAMES = ["x", "state"]

    def _check(self, tracker, inputs, cudagraphs=True, stream="pool", **kwargs):
        # the C++ runtime's manual graph path (standard TensorRT) unless told
        kwargs.setdefault("internal_capture", False)
        tracker.check("engine", self.NAMES, inputs, cudagraphs, stream=stream, **kwargs)

    def test_only_engines_with_aliased_inputs_are_tracked(self):
        self.assertIsNone(AliasedInputAddresses.of_engine(["x", "y"], set()))
        tracker = AliasedInputAddresses.of_engine(["x", "state", "y"], {"state"})
        self.assertEqual(tracker.positions, (1,))

    def test_moved_compares_with_the_previous_call(self):
        tracker = AliasedInputAddresses([1])
        x, state, other = torch.zeros(2), torch.zeros(4), torch.zeros(4)
        self.assertFalse(tracker.moved([x, state]))
        self.assertFalse(tracker.moved([torch.zeros(2), state]))
        self.assertTrue(tracker.moved([x, other]))
        self.assertFalse(tracker.moved([x, other]))

    def test_check_refuses_a_moved_input_while_the_graph_is_kept(self):
        tracker = AliasedInputAddresses([1])
        x, state, other = torch.zeros(2), torch.zeros(4), torch.zeros(4)
        self._check(tracker, [x, state])
        # other inputs may move: the runtime copies them into its staging buffers
        self._check(tracker, [torch.ones(2), state])
        with self.assertRaisesRegex(
            RuntimeError,
            r"TensorRT engine 'engine' updates input\(s\) \['state'\] in place and "
            r"runs as a CUDA graph captured with their addresses",
        ):
            self._check(tracker, [x, other])
        # the refused call did not run: the graph is still the one captured with
        # `state`, and moving on to `other` is refused again
        self._check(tracker, [x, state])
        with self.assertRaisesRegex(RuntimeError, "captured with their addresses"):
            self._check(tracker, [x, other])

    def test_a_moved_input_is_fine_where_the_cpp_runtime_records_again(self):
        """Each condition under which set_runtime_states records lets the input move."""
        x, state = torch.zeros(2), torch.zeros(4)
        profile_engine = types.SimpleNamespace(_active_profile_index=0)
        cases = {
            # _validate_shapes: any input's shape, not only the aliased one's
            "shape of another input": {"inputs": lambda moved: [torch.zeros(3), moved]},
            "shape of the aliased input": {"inputs": lambda _: [x, torch.zeros(5)]},
            # execute_engine: a new engine stream sets context_changed
            "caller on another stream": {"stream": 7},
            # old_cudagraphs is false
            "CUDA graphs were off": {
                "before": lambda t: self._check(t, [x, torch.zeros(4)], False)
            },
            # execution context recreated, optimization profile switched
            "context changed": {"before": lambda t: t.context_changed()},
            "weight-streaming budget set": {
                "before": lambda t: engine_context_changes(t, profile_engine)
            },
            "another optimization profile": {
                "before": lambda t: engine_context_changes(t, profile_engine, 1)
            },
        }
        for case, how in cases.items():
            with self.subTest(case):
                tracker = AliasedInputAddresses([1])
                self._check(tracker, [x, state])
                self._check(tracker, [x, state])
                how.get("before", lambda t: None)(tracker)
                inputs = how.get("inputs", lambda moved: [x, moved])(torch.zeros(4))
                stream = how.get("stream", "pool")
                self._check(tracker, inputs, stream=stream)  # records
                self._check(tracker, inputs, stream=stream)  # replays
                # the graph kept now is the one recorded with the moved tensor
                with self.assertRaisesRegex(RuntimeError, "captured with their"):
                    self._check(tracker, [inputs[0], inputs[1].clone()], stream=stream)

    def test_the_active_optimization_profile_again_is_no_new_graph(self):
        # set_active_profile_with_stream returns early for the active profile
        x, state = torch.zeros(2), torch.zeros(4)
        tracker = AliasedInputAddresses([1])
        self._check(tracker, [x, state])
        engine_context_changes(
            tracker, types.SimpleNamespace(_active_profile_index=1), 1
        )
        with self.assertRaisesRegex(RuntimeError, "captured with their addresses"):
            self._check(tracker, [x, torch.zeros(4)])
        engine_context_changes(None, object())  # no tracker: nothing to tell

    def test_first_call_records(self):
        tracker = AliasedInputAddresses([1])
        self._check(tracker, [torch.zeros(2), torch.zeros(4)])
        self.assertEqual(tracker._bound, (tracker._bound[0],))

    def test_a_stream_change_alone_is_not_a_new_graph_on_the_same_stream(self):
        tracker = AliasedInputAddresses([1])
        x, state = torch.zeros(2), torch.zeros(4)
        self._check(tracker, [x, state], stream=7)
        self._check(tracker, [x, state], stream=7)
        with self.assertRaisesRegex(RuntimeError, "captured with their addresses"):
            self._check(tracker, [x, torch.zeros(4)], stream=7)
        # back on the default stream: the pool stream, a different engine stream
        self._check(tracker, [x, torch.zeros(4)], stream="pool")

    def test_internal_capture_never_replays_stale_addresses(self):
        """TensorRT-RTX captures inside enqueueV3 with the addresses bound per call."""
        tracker = AliasedInputAddresses([1])
        x = torch.zeros(2)
        for _ in range(3):
            self._check(tracker, [x, torch.zeros(4)], internal_capture=True)
        # a later manual-graph call records first (old_cudagraphs is false)
        self._check(tracker, [x, torch.zeros(4)])
        with self.assertRaisesRegex(
            RuntimeError, r"input 'state' in place .* is not contiguous"
        ):
            self._check(tracker, [x, torch.zeros(2, 2).t()], internal_capture=True)

    def test_default_capture_follows_the_tensorrt_flavour(self):
        tracker = AliasedInputAddresses([1])
        x = torch.zeros(2)
        tracker.check("engine", self.NAMES, [x, torch.zeros(4)], True, stream="pool")
        moved = [x, torch.zeros(4)]
        if ENABLED_FEATURES.tensorrt_rtx:
            tracker.check("engine", self.NAMES, moved, True, stream="pool")
        else:
            with self.assertRaisesRegex(RuntimeError, "captured with their"):
                tracker.check("engine", self.NAMES, moved, True, stream="pool")

    def test_default_cudagraphs_mode_is_the_per_engine_mode(self):
        tracker = AliasedInputAddresses([1])
        x = torch.zeros(2)
        for _ in range(2):  # per-engine CUDA graphs are off: nothing is kept
            tracker.check("engine", self.NAMES, [x, torch.zeros(4)])

    def test_engine_stream_keys(self):
        default, other = unittest.mock.Mock(cuda_stream=0), unittest.mock.Mock(
            cuda_stream=1234, device_index=0
        )
        with unittest.mock.patch.object(
            torch.cuda, "default_stream", return_value=default
        ), unittest.mock.patch.object(
            torch.cuda, "current_device", return_value=0
        ), unittest.mock.patch.object(
            torch.cuda, "current_stream", side_effect=[default, other]
        ):
            self.assertEqual(engine_stream([torch.zeros(1)]), "pool")
            self.assertEqual(engine_stream([torch.zeros(1)]), (0, 1234))

    def test_a_reloaded_tracker_forgets_the_addresses(self):
        import pickle

        state, other = torch.zeros(4), torch.zeros(4)
        tracker = AliasedInputAddresses([0])
        self.NAMES = ["state"]
        self._check(tracker, [state])
        reloaded = pickle.loads(pickle.dumps(tracker))
        self.assertEqual(reloaded.positions, (0,))
        # a reloaded engine has no graph yet: it captures one with this tensor
        self._check(reloaded, [other])
        with self.assertRaisesRegex(RuntimeError, "captured with their addresses"):
            self._check(tracker, [other])

    def test_a_tracker_pickled_by_the_previous_version_loads(self):
        tracker = AliasedInputAddresses.__new__(AliasedInputAddresses)
        tracker.__setstate__({"positions": (0,), "_bound": (1,), "_shapes": None})
        self.assertEqual(tracker.positions, (0,))
        self.NAMES = ["state"]
        self._check(tracker, [torch.zeros(4)])

    def test_check_refuses_a_non_contiguous_aliased_input(self):
        tracker = AliasedInputAddresses([0])
        self.NAMES = ["state"]
        with self.assertRaisesRegex(
            RuntimeError, r"input 'state' in place .* is not contiguous"
        ):
            self._check(tracker, [torch.zeros(4, 2).t()])
        self._check(tracker, [torch.zeros(4, 2).t()], False)


class TestAliasedIoAfterReload(TestCase):
    """``aliased_io`` travels in the engine info and comes back with ``load_state_dict``."""

    ALIASED = {"state_new": ("state", "user")}

    def _module(self, aliased_io):
        return TorchTensorRTModule(
            serialized_engine=b"engine bytes",
            input_binding_names=["x", "state"],
            output_binding_names=["output0", "state_new"],
            name="engine",
            settings=CompilationSettings(lazy_engine_init=True),
            aliased_io=aliased_io,
        )

    def test_set_extra_state_restores_aliased_io(self):
        # the device fields need a CUDA device to describe; their content is not
        # what this test is about
        with unittest.mock.patch.object(
            Device, "_to_serialized_rt_device", return_value="device"
        ), unittest.mock.patch(
            "torch_tensorrt.dynamo.runtime._TorchTensorRTModule.serialize_device_info",
            return_value="device",
        ):
            saved = self._module(self.ALIASED).get_extra_state()
        loaded = self._module(None)
        self.assertEqual(loaded.aliased_io, {})
        engine = unittest.mock.MagicMock(requires_native_multidevice=False)
        # only the engine class of the runtime this install runs is stood in:
        # torch.classes.tensorrt cannot even be looked at without the C++ library
        if ENABLED_FEATURES.torch_tensorrt_runtime:
            stand_in = unittest.mock.patch.object(
                torch.classes.tensorrt, "Engine", return_value=engine
            )
        else:
            stand_in = unittest.mock.patch(
                "torch_tensorrt.dynamo.runtime._TRTEngine.TRTEngine",
                return_value=engine,
            )
        with stand_in:
            loaded.set_extra_state(saved)
        self.assertEqual(loaded.aliased_io, self.ALIASED)
        if ENABLED_FEATURES.torch_tensorrt_runtime:
            self.assertEqual(loaded._captured_aliased_inputs.positions, (1,))


# 2.14.0 picks the runtime once per process, when torch_tensorrt is imported:
# the C++ runtime if torch_tensorrt/lib holds libtorchtrt.so or
# libtorchtrt_runtime.so (_features.py, ENABLED_FEATURES.torch_tensorrt_runtime),
# else the Python TRTEngine. `use_python_runtime` has no effect. A compiled module
# runs on that runtime; with the C++ one loaded, the Python TRTEngine can only be
# driven directly, from the module's engine info, as upstream's
# test_aliased_io.py::TestPythonRuntimeAliasedIO does.
RUNTIME = "cpp" if ENABLED_FEATURES.torch_tensorrt_runtime else "python"
NO_GPU = (
    "Running TensorRT engines and CUDA graphs needs a CUDA device; this host has none."
)


def _python_engine(trt_module):
    """The Python TRTEngine of ``trt_module``'s engine with aliased I/O."""
    from torch_tensorrt.dynamo.runtime._TRTEngine import TRTEngine

    for _, module in trt_module.named_modules():
        if isinstance(module, TorchTensorRTModule) and module.aliased_io:
            if isinstance(module.engine, TRTEngine):
                return module.engine
            return TRTEngine(module._pack_engine_info())
    raise AssertionError("the compiled module has no engine with aliased I/O")


class KvCache(torch.nn.Module):
    """TensorRT updates ``cache`` in place (kind ``kv_cache_update``)."""

    def forward(self, cache, update):
        cache[:, :, 3:4, :] = update
        return cache.sum()


def whole_graph_refused_by_tensorrt_rtx(trt):
    """Why upstream's whole-graph mode would refuse ``trt`` here, or None.

    On TensorRT-RTX, ``CudaGraphsTorchTensorRTModule`` captures only engines whose
    execution context reports ``is_stream_capturable``; an RTX engine that does
    not is refused with or without mutations (tools/gpu/rtx_limits.py shows it
    on a model without any).
    """
    if not ENABLED_FEATURES.tensorrt_rtx:
        return None
    stream = torch.cuda.Stream()
    for name, module in trt.named_modules():
        check = getattr(
            getattr(module, "engine", None), "_is_monolithic_capturable", None
        )
        if isinstance(module, TorchTensorRTModule) and check and not check(stream):
            return (
                f"TensorRT-RTX reports engine '{name}' not stream-capturable on this "
                "GPU (IExecutionContext.is_stream_capturable), so whole-graph CUDA "
                "graphs refuse it whatever the model does"
            )
    return None


@unittest.skipIf(not torch.cuda.is_available(), NO_GPU)
class TestCudaGraphsOnGpu(TestCase):
    def setUp(self):
        torch_tensorrt.runtime.set_cudagraphs_mode(False)

    def tearDown(self):
        torch_tensorrt.runtime.set_cudagraphs_mode(False)

    def _compile(self):
        args = (torch.randn(2, 4).cuda(), torch.randn(2, 4).cuda())
        ep = torch.export.export(BumpInputAndBuffer().cuda(), args)
        return torch_tensorrt.dynamo.compile(
            ep,
            arg_inputs=list(args),
            min_block_size=1,
            torch_executed_ops={torch.ops.aten.sin.default},
        )

    def test_whole_graph_mode_updates_inputs_and_keeps_state_through_warm_up(self):
        with self.subTest(runtime=RUNTIME):
            trt = self._compile()
            refused = whole_graph_refused_by_tensorrt_rtx(trt)
            if refused:
                self.skipTest(refused)
            eager = BumpInputAndBuffer().cuda()
            x, y = torch.randn(2, 4).cuda(), torch.randn(2, 4).cuda()
            x_eager = x.clone()
            with torch_tensorrt.runtime.enable_cudagraphs(trt) as graphed:
                for step in range(3):
                    self.assertEqual(graphed(x, y), eager(x_eager, y), msg=f"{step}")
                    self.assertEqual(x, x_eager, msg=f"{step}")
                    self.assertEqual(trt.state, eager.state, msg=f"{step}")

    def test_per_engine_mode_with_a_moved_input(self):
        """Inputs written back by copy (not aliased) may move: no error on either runtime."""
        with self.subTest(runtime=RUNTIME):
            trt = self._compile()
            eager = BumpInputAndBuffer().cuda()
            y = torch.randn(2, 4).cuda()
            torch_tensorrt.runtime.set_cudagraphs_mode(True)
            for step in range(3):
                x = torch.randn(2, 4).cuda()  # a new tensor every call
                x_eager = x.clone()
                self.assertEqual(trt(x, y), eager(x_eager, y), msg=f"{step}")
                self.assertEqual(x, x_eager, msg=f"{step}")


@unittest.skipIf(not torch.cuda.is_available(), NO_GPU)
class TestPerEngineCudaGraphsWithAnAliasedInput(TestCase):
    """An engine that updates ``cache`` in place, under set_cudagraphs_mode(True)."""

    def setUp(self):
        torch_tensorrt.runtime.set_cudagraphs_mode(False)
        cache = torch.zeros(1, 4, 16, 8, device="cuda")
        update = torch.ones(1, 4, 1, 8, device="cuda")
        ep = torch.export.export(KvCache().cuda(), (cache.clone(), update.clone()))
        self.trt = torch_tensorrt.dynamo.compile(
            ep, arg_inputs=[cache, update], min_block_size=1
        )
        # IKVCacheUpdateLayer aliases the cache: what this class is about
        self.assertTrue(
            any(
                isinstance(m, TorchTensorRTModule) and m.aliased_io
                for m in self.trt.modules()
            ),
            "TensorRT did not alias the cache update (no aliased_io)",
        )

    def tearDown(self):
        torch_tensorrt.runtime.set_cudagraphs_mode(False)

    @staticmethod
    def _update(value):
        return torch.full((1, 4, 1, 8), float(value), device="cuda")

    def _assert_written(self, cache, value):
        expected = torch.zeros(1, 4, 16, 8, device="cuda")
        expected[:, :, 3:4, :] = value
        self.assertEqual(cache, expected)

    def test_python_runtime_captures_again_for_a_moved_cache(self):
        """Patch 0025's re-capture in the Python TRTEngine (its manual graph path;
        on TensorRT-RTX the engine switches to RTX native graphs instead)."""
        engine = _python_engine(self.trt)
        names = list(engine.in_binding_names)

        def run(cache, value):
            inputs = {"cache": cache, "update": self._update(value)}
            engine.execute([inputs[n] for n in names])
            torch.cuda.synchronize()

        torch_tensorrt.runtime.set_cudagraphs_mode(True)
        first = torch.zeros(1, 4, 16, 8, device="cuda")
        run(first, 1)  # captured with `first`
        run(first, 2)  # replayed
        self._assert_written(first, 2)
        moved = torch.zeros(1, 4, 16, 8, device="cuda")
        run(moved, 3)  # moved: captured again with `moved`
        self._assert_written(moved, 3)
        self._assert_written(first, 2)  # the old tensor is left alone
        run(moved, 4)
        self._assert_written(moved, 4)

    @unittest.skipIf(
        not ENABLED_FEATURES.torch_tensorrt_runtime,
        "The C++ runtime library is not installed (lib/libtorchtrt_runtime.so).",
    )
    def test_cpp_runtime_refuses_a_moved_cache_only_when_it_would_replay(self):
        torch_tensorrt.runtime.set_cudagraphs_mode(True)
        first = torch.zeros(1, 4, 16, 8, device="cuda")
        self.trt(first, self._update(1))  # recorded with `first`
        self.trt(first, self._update(2))  # replayed
        self._assert_written(first, 2)
        moved = torch.zeros(1, 4, 16, 8, device="cuda")
        if ENABLED_FEATURES.tensorrt_rtx:
            # TensorRT-RTX captures inside enqueueV3 with this call's addresses
            self.trt(moved, self._update(3))
            self._assert_written(moved, 3)
        else:
            # same shapes, same stream: the C++ runtime would replay into `first`
            with self.assertRaisesRegex(RuntimeError, "captured with their addresses"):
                self.trt(moved, self._update(3))
            self._assert_written(first, 2)  # nothing was written
            self._assert_written(moved, 0)
        # the C++ runtime records again in each of these cases: no error
        moved = torch.zeros(1, 4, 16, 8, device="cuda")
        with torch.cuda.stream(torch.cuda.Stream()):  # another engine stream
            self.trt(moved, self._update(4))
            torch.cuda.current_stream().synchronize()
        self._assert_written(moved, 4)
        torch_tensorrt.runtime.set_cudagraphs_mode(False)
        self.trt(moved, self._update(5))
        torch_tensorrt.runtime.set_cudagraphs_mode(True)
        moved = torch.zeros(1, 4, 16, 8, device="cuda")
        self.trt(moved, self._update(6))  # graphs were off in the previous call
        self._assert_written(moved, 6)


if __name__ == "__main__":
    run_tests()
