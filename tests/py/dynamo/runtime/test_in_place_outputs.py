# type: ignore
"""The Python runtime returns an engine input written in place without cloning it.

The CPU tests check the bookkeeping the Python runtime's ``tensorrt::execute_engine``
(``op_outputs``, the fake kernel's ``returned_outputs``) and
``TorchTensorRTModule.forward`` share. The GPU test drives the Python
``TRTEngine`` of a compiled module (the C++ runtime, when its library ships, owns
``tensorrt::execute_engine``) and checks that the state it returns is the
caller's tensor, updated in place.
"""

import unittest
import unittest.mock

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo.runtime._in_place_outputs import (
    copy_staged_inputs_back,
    in_place_outputs,
    op_outputs,
    returned_outputs,
    with_inputs_written_in_place,
)
from torch_tensorrt.dynamo.runtime._TorchTensorRTModule import TorchTensorRTModule

NO_GPU = "Running TensorRT engines needs a CUDA device; this host has none."

OUTPUTS = ["output0", "state_new", "output1", "cache_new"]
INPUTS = ["x", "cache", "state"]
ALIASED = {
    "state_new": ("state", "user"),
    "cache_new": ("cache", "kv_cache_update"),
}


class TestBookkeeping(TestCase):
    def test_positions_of_outputs_written_into_inputs(self):
        self.assertEqual(in_place_outputs(OUTPUTS, INPUTS, ALIASED), ((1, 2), (3, 1)))
        self.assertEqual(in_place_outputs(OUTPUTS, INPUTS, {}), ())

    def test_an_alias_of_a_missing_input_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "'state_new'.*'gone'.*not an input"):
            in_place_outputs(OUTPUTS, INPUTS, {"state_new": ("gone", "user")})

    def test_left_out_and_put_back(self):
        x, cache, state = torch.zeros(2), torch.zeros(3), torch.zeros(4)
        written = in_place_outputs(OUTPUTS, INPUTS, ALIASED)
        out0, out1 = torch.ones(1), torch.ones(5)
        engine_outputs = [out0, state, out1, cache]
        returned = returned_outputs(engine_outputs, written)
        self.assertEqual(len(returned), 2)
        self.assertIs(returned[0], out0)
        self.assertIs(returned[1], out1)
        again = with_inputs_written_in_place(returned, [x, cache, state], written)
        self.assertEqual([id(t) for t in again], [id(t) for t in engine_outputs])

    def test_the_op_clones_nothing(self):
        x, cache, state = torch.zeros(2), torch.zeros(3), torch.zeros(4)
        written = in_place_outputs(OUTPUTS, INPUTS, ALIASED)
        out0, fresh = torch.ones(1), torch.ones(5)
        result = op_outputs([out0, state, fresh, cache], [x, cache, state], written)
        # the in-place outputs left out, the others the engine's own tensors
        self.assertEqual([id(t) for t in result], [id(out0), id(fresh)])

    def test_a_single_tensor_output(self):
        state = torch.zeros(4)
        written = in_place_outputs(["state_new"], ["state"], ALIASED)
        self.assertEqual(op_outputs(state, [state], written), [])
        self.assertEqual(with_inputs_written_in_place([], [state], written), [state])

    def test_a_staged_input_receives_what_the_engine_wrote(self):
        state = torch.zeros(4, 3).t()  # not contiguous: the engine binds a copy
        x = torch.zeros(2)
        bound = [x, state.contiguous() + 7]
        copy_staged_inputs_back([x, state], bound, ((0, 1),))
        self.assertEqual(state, torch.full((3, 4), 7.0))
        self.assertEqual(x, torch.zeros(2))


class TestForwardOnThePythonRuntime(TestCase):
    """``forward`` puts the inputs back where the Python runtime's op left them out."""

    def _module(self, in_place):
        module = TorchTensorRTModule(
            name="m",
            input_binding_names=INPUTS,
            output_binding_names=OUTPUTS,
        )
        module.aliased_io = dict(ALIASED)
        module._in_place_outputs = in_place
        module.engine = object()
        return module

    def test_forward_returns_the_inputs_it_left_out(self):
        x, cache, state = (torch.zeros(2), torch.zeros(3), torch.zeros(4))
        out0, out1 = torch.ones(1), torch.ones(5)
        module = self._module(in_place_outputs(OUTPUTS, INPUTS, ALIASED))

        def op(inputs, engine):
            return [out0, out1]

        with unittest.mock.patch.object(
            torch.ops.tensorrt, "execute_engine", op, create=True
        ), unittest.mock.patch.object(torch.Tensor, "is_cuda", True):
            result = module(x, cache, state)
        # the trailing kv_cache_update output stays hidden, as before
        self.assertEqual(len(result), 3)
        self.assertIs(result[0], out0)
        self.assertIs(result[1], state)
        self.assertIs(result[2], out1)

    def test_the_cpp_runtime_returns_every_output_itself(self):
        x, cache, state = (torch.zeros(2), torch.zeros(3), torch.zeros(4))
        outputs = [torch.ones(1), state, torch.ones(5), cache]
        module = self._module(())
        with unittest.mock.patch.object(
            torch.ops.tensorrt,
            "execute_engine",
            lambda inputs, engine: list(outputs),
            create=True,
        ), unittest.mock.patch.object(torch.Tensor, "is_cuda", True):
            result = module(x, cache, state)
        self.assertEqual([id(t) for t in result], [id(t) for t in outputs[:3]])


class TestOutputAllocatorOnTheCppRuntime(TestCase):
    """The C++ runtime gives every output an allocator on that path, an aliased
    one included: an engine with aliased outputs keeps the allocator off there."""

    def _module(self, aliased_io):
        import types

        module = TorchTensorRTModule(
            name="m", input_binding_names=INPUTS, output_binding_names=OUTPUTS
        )
        module.aliased_io = dict(aliased_io)
        module.engine = types.SimpleNamespace(use_output_allocator_outputs=False)
        return module

    def _enable(self, module, cpp_runtime):
        from torch_tensorrt.dynamo.runtime import _TorchTensorRTModule as runtime

        features = runtime.ENABLED_FEATURES._replace(torch_tensorrt_runtime=cpp_runtime)
        with unittest.mock.patch.object(runtime, "ENABLED_FEATURES", features):
            module.set_use_output_allocator(True)
        return module.engine.use_output_allocator_outputs

    def test_an_aliased_engine_keeps_the_allocator_off_with_a_warning(self):
        module = self._module(ALIASED)
        with self.assertLogs(
            "torch_tensorrt.dynamo.runtime._TorchTensorRTModule", "WARNING"
        ) as logs:
            self.assertFalse(self._enable(module, cpp_runtime=True))
        self.assertRegex(
            logs.output[0], r"Engine m writes inputs in place.*cache_new.*allocator off"
        )

    def test_other_engines_and_the_python_runtime_get_the_allocator(self):
        self.assertTrue(self._enable(self._module({}), cpp_runtime=True))
        # the Python runtime binds aliased outputs itself on that path (0028)
        self.assertTrue(self._enable(self._module(ALIASED), cpp_runtime=False))
        module = self._module(ALIASED)
        module.set_use_output_allocator(False)
        self.assertFalse(module.engine.use_output_allocator_outputs)


class BumpState(torch.nn.Module):
    """Updates ``state`` in place through a KV-cache write TensorRT aliases
    (``IKVCacheUpdateLayer``: a 4-D state written along axis 2)."""

    def forward(self, state, update):
        state[:, :, 3:4, :] = update
        return state.sum()


def _in_binding_order(module, state, update):
    """The engine's inputs: by binding name when the names are the model's, else
    in the model's order (the graph's placeholders)."""
    by_name = {"state": state, "update": update}
    names = list(module.input_binding_names)
    if sorted(names) == sorted(by_name):
        return [by_name[n] for n in names]
    return [state, update]


SENTINEL = 7.0


def _state_and_update():
    return torch.full((2, 4, 16, 8), SENTINEL).cuda(), torch.ones(2, 4, 1, 8).cuda()


@unittest.skipIf(not torch.cuda.is_available(), NO_GPU)
class TestPythonEngineOnGpu(TestCase):
    def _engine(self):
        from torch_tensorrt.dynamo.runtime._TRTEngine import TRTEngine

        args = _state_and_update()
        ep = torch.export.export(BumpState().cuda(), args)
        trt = torch_tensorrt.dynamo.compile(ep, arg_inputs=list(args), min_block_size=1)
        aliased = [
            m
            for m in trt.modules()
            if isinstance(m, TorchTensorRTModule) and m.aliased_io
        ]
        self.assertEqual(len(aliased), 1, "IKVCacheUpdateLayer did not alias the state")
        (module,) = aliased
        engine = module.engine
        if not isinstance(engine, TRTEngine):
            engine = TRTEngine(module._pack_engine_info())
        return module, engine

    def _check_state(self, state):
        """Position 3 of axis 2 holds the update; every other element the sentinel."""
        self.assertEqual(state[:, :, 3], torch.ones(2, 4, 8).cuda())
        rest = torch.cat([state[:, :, :3], state[:, :, 4:]], dim=2)
        self.assertEqual(rest, torch.full_like(rest, SENTINEL))

    def test_the_state_comes_back_without_a_copy(self):
        module, engine = self._engine()
        self.assertTrue(engine.in_place_outputs)
        state, update = _state_and_update()
        ordered = _in_binding_order(module, state, update)
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()["allocated_bytes.all.allocated"]
        outputs = engine.execute(ordered)
        torch.cuda.synchronize()
        allocated = torch.cuda.memory_stats()["allocated_bytes.all.allocated"] - before
        outputs = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
        for o, i in engine.in_place_outputs:
            # the engine's output is the caller's memory, not a copy of it
            self.assertEqual(outputs[o].data_ptr(), ordered[i].data_ptr())
        returned = op_outputs(outputs, ordered, engine.in_place_outputs)
        self.assertEqual(len(returned), len(outputs) - len(engine.in_place_outputs))
        self._check_state(state)
        # nothing of the state's size was allocated for the call
        self.assertLess(allocated, state.nbytes)

    def test_a_non_contiguous_state_is_still_updated(self):
        module, engine = self._engine()
        state = torch.full((2, 4, 8, 16), SENTINEL).cuda().transpose(2, 3)
        update = torch.ones(2, 4, 1, 8).cuda()
        engine.execute(_in_binding_order(module, state, update))
        self._check_state(state)


if __name__ == "__main__":
    run_tests()
