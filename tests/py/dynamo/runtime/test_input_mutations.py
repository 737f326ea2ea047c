# type: ignore
"""Input mutations and aliased inputs under the CUDA graph modes and after reload.

The CPU tests check the bookkeeping: which inputs and buffers a compiled module
writes (from ``compile(dryrun=True)`` modules, which run in PyTorch), when an
aliased input moved, and that ``aliased_io`` survives ``state_dict``. The GPU
tests run the CUDA graph modes themselves.
"""

import copy
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
            for lift in (False, True):
                with self.subTest(use_fast_partitioner=fast, lift_mutable_buffers=lift):
                    gm = _dryrun(
                        BumpInputAndBuffer(),
                        args,
                        use_fast_partitioner=fast,
                        lift_mutable_buffers=lift,
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
        gm = _dryrun(BumpInputAndBuffer(), args, lift_mutable_buffers=True)
        with state_kept(gm):
            gm(*[a.clone() for a in args])
            self.assertEqual(gm.state, torch.ones(2, 4))
        self.assertEqual(gm.state, torch.zeros(2, 4))
        gm(*[a.clone() for a in args])
        self.assertEqual(gm.state, torch.ones(2, 4))


class TestAliasedInputAddresses(TestCase):
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
        names = ["x", "state"]
        x, state, other = torch.zeros(2), torch.zeros(4), torch.zeros(4)
        tracker.check("engine", names, [x, state], cudagraphs=True)
        tracker.check("engine", names, [torch.ones(2), state], cudagraphs=True)
        with self.assertRaisesRegex(
            RuntimeError,
            r"TensorRT engine 'engine' updates input\(s\) \['state'\] in place and "
            r"runs as a CUDA graph captured with their addresses",
        ):
            tracker.check("engine", names, [x, other], cudagraphs=True)
        # the graph is still the one captured with `state`
        tracker.check("engine", names, [x, state], cudagraphs=True)
        # new shapes: the runtime captures again, with the new tensors
        tracker.check("engine", names, [x, torch.zeros(5)], cudagraphs=True)
        # out of CUDA graph mode anything goes; back in, the runtime captures again
        tracker.check("engine", names, [x, other], cudagraphs=False)
        tracker.check("engine", names, [x, state], cudagraphs=True)

    def test_a_reloaded_tracker_forgets_the_addresses(self):
        import pickle

        state, other = torch.zeros(4), torch.zeros(4)
        tracker = AliasedInputAddresses([0])
        tracker.check("engine", ["state"], [state], cudagraphs=True)
        reloaded = pickle.loads(pickle.dumps(tracker))
        self.assertEqual(reloaded.positions, (0,))
        # a reloaded engine has no graph yet: it captures one with this tensor
        reloaded.check("engine", ["state"], [other], cudagraphs=True)
        with self.assertRaisesRegex(RuntimeError, "captured with their addresses"):
            tracker.check("engine", ["state"], [other], cudagraphs=True)

    def test_check_refuses_a_non_contiguous_aliased_input(self):
        tracker = AliasedInputAddresses([0])
        with self.assertRaisesRegex(
            RuntimeError, r"input 'state' in place .* is not contiguous"
        ):
            tracker.check("engine", ["state"], [torch.zeros(4, 2).t()], True)
        tracker.check("engine", ["state"], [torch.zeros(4, 2).t()], False)


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
        with unittest.mock.patch.object(
            torch.classes.tensorrt, "Engine", return_value=engine, create=True
        ), unittest.mock.patch(
            "torch_tensorrt.dynamo.runtime._TRTEngine.TRTEngine", return_value=engine
        ):
            loaded.set_extra_state(saved)
        self.assertEqual(loaded.aliased_io, self.ALIASED)
        if ENABLED_FEATURES.torch_tensorrt_runtime:
            self.assertEqual(loaded._captured_aliased_inputs.positions, (1,))


@unittest.skipIf(
    not torch.cuda.is_available(),
    "Running TensorRT engines and CUDA graphs needs a CUDA device; this host has none.",
)
class TestCudaGraphsOnGpu(TestCase):
    RUNTIMES = [("python", True)] + (
        [("cpp", False)] if ENABLED_FEATURES.torch_tensorrt_runtime else []
    )

    def _compile(self, use_python_runtime):
        args = (torch.randn(2, 4).cuda(), torch.randn(2, 4).cuda())
        ep = torch.export.export(BumpInputAndBuffer().cuda(), args)
        return torch_tensorrt.dynamo.compile(
            ep,
            arg_inputs=list(args),
            min_block_size=1,
            use_python_runtime=use_python_runtime,
            torch_executed_ops={torch.ops.aten.sin.default},
        )

    def test_whole_graph_mode_updates_inputs_and_keeps_state_through_warm_up(self):
        for runtime, use_python_runtime in self.RUNTIMES:
            with self.subTest(runtime=runtime):
                trt = self._compile(use_python_runtime)
                eager = BumpInputAndBuffer().cuda()
                x, y = torch.randn(2, 4).cuda(), torch.randn(2, 4).cuda()
                x_eager = x.clone()
                with torch_tensorrt.runtime.enable_cudagraphs(trt) as graphed:
                    for step in range(3):
                        self.assertEqual(
                            graphed(x, y), eager(x_eager, y), msg=f"{step}"
                        )
                        self.assertEqual(x, x_eager, msg=f"{step}")
                        self.assertEqual(trt.state, eager.state, msg=f"{step}")

    def test_per_engine_mode_with_a_moved_input(self):
        for runtime, use_python_runtime in self.RUNTIMES:
            with self.subTest(runtime=runtime):
                trt = self._compile(use_python_runtime)
                eager = BumpInputAndBuffer().cuda()
                y = torch.randn(2, 4).cuda()
                torch_tensorrt.runtime.set_cudagraphs_mode(True)
                try:
                    for step in range(3):
                        x = torch.randn(2, 4).cuda()  # a new tensor every call
                        x_eager = x.clone()
                        self.assertEqual(trt(x, y), eager(x_eager, y), msg=f"{step}")
                        self.assertEqual(x, x_eager, msg=f"{step}")
                finally:
                    torch_tensorrt.runtime.set_cudagraphs_mode(False)


if __name__ == "__main__":
    run_tests()
