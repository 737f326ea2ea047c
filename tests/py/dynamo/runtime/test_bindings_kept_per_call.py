# type: ignore
"""The Python runtime keeps the execution context's bindings of an unchanged call.

An execution context holds each input's shape and address until they are set
again. When the input shapes, the context and its optimization profile are the
last call's, ``TRTEngine.setup_input_tensors`` sets the shape and address of an
input only if its memory moved: a decoding loop passes its caches at the same
addresses on every call, and each was two TensorRT calls per call before.

The context below is a recording stand-in (it tests this glue, not what
TensorRT accepts); real engines run these paths in the GPU tests.
"""

import types

import torch
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo.runtime._TRTEngine import TRTEngine, _InputBindingInfo


class RecordingContext:
    """Stand-in for ``IExecutionContext``: records what is set."""

    def __init__(self):
        self.calls = []

    def set_input_shape(self, name, shape):
        self.calls.append(("shape", name, tuple(shape)))
        return True

    def set_tensor_address(self, name, address):
        self.calls.append(("address", name, address))
        return True


def _engine(names):
    return types.SimpleNamespace(
        _input_binding_infos=[
            _InputBindingInfo(n, torch.float32, False, False) for n in names
        ],
        _bound_addresses=[],
        _empty_tensor_placeholder=None,
        _input_buffers=[None] * len(names),
        context=RecordingContext(),
    )


def _setup(engine, inputs, keep):
    TRTEngine.setup_input_tensors(engine, inputs, False, False, keep)
    calls, engine.context.calls = engine.context.calls, []
    return calls


class TestBindingsKept(TestCase):
    def test_unchanged_inputs_are_not_bound_again(self):
        engine = _engine(["x", "k", "v"])
        inputs = [torch.zeros(2), torch.zeros(4, 4), torch.zeros(4, 4)]
        self.assertEqual(len(_setup(engine, inputs, keep=False)), 6)
        self.assertEqual(_setup(engine, inputs, keep=True), [])
        # still handed to the outputs that alias them
        self.assertEqual(
            [id(t) for t in engine._bound_inputs_by_name.values()],
            [id(t) for t in inputs],
        )

    def test_an_input_that_moved_is_bound_again(self):
        engine = _engine(["x", "k"])
        inputs = [torch.zeros(2), torch.zeros(4, 4)]
        _setup(engine, inputs, keep=False)
        moved = [inputs[0], torch.zeros(4, 4)]
        self.assertEqual(
            _setup(engine, moved, keep=True),
            [
                ("shape", "k", (4, 4)),
                ("address", "k", moved[1].data_ptr()),
            ],
        )

    def test_without_keep_everything_is_bound(self):
        engine = _engine(["x", "k"])
        inputs = [torch.zeros(2), torch.zeros(4, 4)]
        _setup(engine, inputs, keep=False)
        self.assertEqual(len(_setup(engine, inputs, keep=False)), 4)

    def test_under_cuda_graphs_nothing_is_kept(self):
        engine = _engine(["x"])
        inputs = [torch.zeros(2)]
        engine._input_buffers = [torch.zeros(2)]
        TRTEngine.setup_input_tensors(engine, inputs, True, False, True)
        TRTEngine.setup_input_tensors(engine, inputs, True, False, True)
        self.assertEqual([c[0] for c in engine.context.calls], ["shape", "address"] * 2)


if __name__ == "__main__":
    run_tests()
