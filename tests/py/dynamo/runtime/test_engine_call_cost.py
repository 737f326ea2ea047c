# type: ignore
"""What a call of the Python runtime does besides launching its engine.

``TorchTensorRTModule`` runs a Python ``TRTEngine`` directly in eager mode
(``TRTEngine.run``: the engine's outputs, no input read), not through the
``tensorrt::execute_engine`` custom op (whose dispatch costs more than the engine's
launch), and through the op wherever torch traces or transforms the call. The engine stream
and the caller's are ordered by two events made once per device, not by an event
made and destroyed per wait. Stand-ins for the engine and the streams test this
glue on the CPU; the GPU tests run real engines through it.
"""

import types
import unittest.mock

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo.runtime import _TorchTensorRTModule as module
from torch_tensorrt.dynamo.runtime._TRTEngine import TRTEngine


class PythonEngine:
    """Stand-in for the Python runtime's engine (not a ``torch.ScriptObject``)."""

    def run(self, inputs):
        return list(inputs)


class TestRunsEagerly(TestCase):
    def test_plain_tensors_run_the_engine_directly(self):
        inputs = [torch.zeros(2), torch.ones(3)]
        self.assertTrue(module._runs_eagerly(PythonEngine(), inputs))

    def test_traced_or_transformed_calls_go_through_the_op(self):
        inputs = [torch.zeros(2)]
        with FakeTensorMode() as mode:
            fake = [mode.from_tensor(torch.zeros(2))]
            self.assertFalse(module._runs_eagerly(PythonEngine(), inputs))
        self.assertFalse(module._runs_eagerly(PythonEngine(), fake))
        seen = []
        torch.vmap(
            lambda x: seen.append(module._runs_eagerly(PythonEngine(), [x])) or x
        )(torch.zeros(2, 3))
        self.assertEqual(seen, [False])

    def test_the_cpp_runtime_engine_goes_through_the_op(self):
        script_object = unittest.mock.Mock(spec=torch.ScriptObject)
        self.assertFalse(module._runs_eagerly(script_object, [torch.zeros(2)]))
        # an engine without run (a stand-in of other tests) goes through the op
        self.assertFalse(module._runs_eagerly(object(), [torch.zeros(2)]))


class TestRun(TestCase):
    def test_the_engine_outputs_as_a_list(self):
        x, out = torch.arange(4.0), torch.zeros(3)
        engine = types.SimpleNamespace(execute=lambda inputs: out, in_place_outputs=())
        (returned,) = TRTEngine.run(engine, [x])
        self.assertIs(returned, out)

    def test_no_input_is_read_per_call(self):
        class NoStorage(torch.Tensor):
            def untyped_storage(self):
                raise AssertionError("run read an input's storage")

        inputs = [torch.zeros(2).as_subclass(NoStorage) for _ in range(3)]
        out = (torch.ones(1), torch.ones(2))
        engine = types.SimpleNamespace(execute=lambda inputs: out, in_place_outputs=())
        self.assertEqual(TRTEngine.run(engine, inputs), list(out))


class Recorded:
    """Stand-in for a CUDA event or stream: records what is asked of it."""

    def __init__(self, log, name, device_index=0):
        self.log, self.name, self.device_index = log, name, device_index

    def record(self, stream):
        self.log.append(("record", self.name, stream.name))

    def wait_event(self, event):
        self.log.append(("wait", self.name, event.name))


class TestStreamWaits(TestCase):
    def test_two_events_made_once_per_device(self):
        log, names = [], iter(f"event{k}" for k in range(100))

        def event():
            return Recorded(log, next(names))

        engine = types.SimpleNamespace(_stream_events=None)
        caller, pool = Recorded(log, "caller"), Recorded(log, "pool")
        with unittest.mock.patch.object(torch.cuda, "Event", event):
            for _ in range(3):  # three calls
                TRTEngine._wait(engine, pool, caller, 0)
                TRTEngine._wait(engine, caller, pool, 1)
            self.assertEqual(
                log,
                [
                    ("record", "event0", "caller"),
                    ("wait", "pool", "event0"),
                    ("record", "event1", "pool"),
                    ("wait", "caller", "event1"),
                ]
                * 3,
            )
            other = Recorded(log, "other", device_index=1)
            TRTEngine._wait(engine, pool, other, 0)
            self.assertEqual(
                log[-2:], [("record", "event2", "other"), ("wait", "pool", "event2")]
            )


if __name__ == "__main__":
    run_tests()
