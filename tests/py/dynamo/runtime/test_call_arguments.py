# type: ignore
"""A compiled module called with an argument its engine cannot take names the
input, what it got and what to pass, in one sentence (a string, a list, an
array where a tensor goes; a tensor of another dtype or static shape; too many
or too few arguments)."""

import types
import unittest

import numpy as np
import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo.runtime import TorchTensorRTModule
from torch_tensorrt.dynamo.runtime._call_arguments import (
    check_scalar_argument,
    wrong_argument,
)
from torch_tensorrt.dynamo.runtime._TRTEngine import TRTEngine, _InputBindingInfo

NOT_NUMBERS = {
    "a str": "cache",
    "a list": [1.0, 2.0],
    "a ndarray": np.ones(3, dtype=np.float32),
    "None": None,
    "a complex": 1j,
}
RECORDED = {
    "inputs": [
        {"name": "x", "dtype": torch.float32, "shape_exprs": [2, 4]},
        {"name": "n", "dtype": torch.int64, "shape_exprs": [], "is_scalar": True},
        {"name": "y", "dtype": torch.float16, "shape_exprs": ["s0", 8]},
    ]
}
BINDINGS = ["x", "n", "y"]


def _args(x=None, y=None):
    return [
        torch.zeros(2, 4) if x is None else x,
        torch.tensor(3),
        torch.zeros(5, 8, dtype=torch.float16) if y is None else y,
    ]


class TestScalarArguments(TestCase):
    def test_what_is_not_a_number_is_named(self):
        for kind, value in NOT_NUMBERS.items():
            with self.subTest(kind):
                with self.assertRaisesRegex(
                    TypeError,
                    rf"^Input 'n' \(argument 1\) of TensorRT engine 'e' is {kind}; "
                    r"expected a torch.Tensor, or a number for a scalar input: pass ",
                ):
                    check_scalar_argument("e", "n", 1, value)

    def test_numbers_pass(self):
        for value in (3, 2.5, True, np.float32(1.5), np.int64(2)):
            with self.subTest(value):
                self.assertIsNone(check_scalar_argument("e", "n", 1, value))

    def test_the_module_refuses_it_before_the_engine_runs(self):
        module = TorchTensorRTModule.__new__(TorchTensorRTModule)
        torch.nn.Module.__init__(module)
        module.name, module.input_binding_names = "m", ["n", "x"]
        module.target_device = None
        module.engine = None  # never reached
        with self.assertRaisesRegex(TypeError, r"^Input 'n' \(argument 0\) .* a str"):
            module.forward("3", torch.zeros(2))
        with self.assertRaisesRegex(
            TypeError,
            r"^TensorRT engine 'm' takes 2 input\(s\) \(n, x\); got 3 argument\(s\): "
            "pass one per input, in that order$",
        ):
            module.forward(3, torch.zeros(2), torch.zeros(2))


class TestWrongTensors(TestCase):
    def test_each_mismatch_is_named(self):
        cases = {
            r"Input 'x' \(argument 0\) of TensorRT engine 'e' is a int32 tensor; the "
            r"engine takes float32: pass a float32 tensor \(e.g. with "
            r".to\(torch.float32\)\)$": _args(x=torch.zeros(2, 4, dtype=torch.int32)),
            r"Input 'x' \(argument 0\) .* has shape \[3, 4\]; the engine takes "
            r"\[2, 4\]: pass a tensor of that shape": _args(x=torch.zeros(3, 4)),
            r"Input 'x' .* has shape \[2, 4, 1\]": _args(x=torch.zeros(2, 4, 1)),
            r"Input 'y' \(argument 2\) .* has shape \[5, 7\]; the engine takes "
            r"\['s0', 8\]": _args(y=torch.zeros(5, 7, dtype=torch.float16)),
        }
        for message, args in cases.items():
            with self.subTest(message):
                self.assertRegex(wrong_argument("e", BINDINGS, args, RECORDED), message)

    def test_what_the_engine_takes_passes(self):
        for args in (_args(), _args(y=torch.zeros(9, 8, dtype=torch.float16))):
            self.assertIsNone(wrong_argument("e", BINDINGS, args, RECORDED))
        # nothing recorded (an engine from before the records): nothing to say
        self.assertIsNone(wrong_argument("e", BINDINGS, _args(x=torch.zeros(1)), None))


class ProfileContext:
    """Stand-in for ``IExecutionContext``: takes only the shapes of a profile."""

    def __init__(self, low, high):
        self.low, self.high = low, high

    def set_input_shape(self, name, shape):
        return all(lo <= n <= hi for lo, n, hi in zip(self.low, shape, self.high))

    def set_tensor_address(self, name, address):
        return True


class TestShapeTheEngineRefuses(TestCase):
    """The Python runtime stops at a shape TensorRT refuses; the engine would
    read the shape it last took out of the tensor (stand-in context and
    engine: TensorRT's own refusal runs in ``TestCompiledModuleCall``)."""

    def _engine(self, low, high):
        return types.SimpleNamespace(
            name="e",
            _input_binding_infos=[_InputBindingInfo("x", torch.float32, False, False)],
            _bound_addresses=[],
            _empty_tensor_placeholder=None,
            _input_buffers=[None],
            _active_profile_index=0,
            shape_key=((2, 4),),
            context=ProfileContext(low, high),
            cuda_engine=types.SimpleNamespace(
                get_tensor_profile_shape=lambda name, profile: (low, low, high)
            ),
        )

    def test_a_shape_outside_the_profile_is_named(self):
        for low, high, shape in (((2, 4), (2, 4), (3, 4)), ((1, 4), (8, 4), (9, 4))):
            with self.subTest(shape=shape):
                engine = self._engine(low, high)
                with self.assertRaisesRegex(
                    RuntimeError,
                    rf"^Input 'x' of TensorRT engine 'e' has shape \[{shape[0]}, 4\], "
                    rf"outside the engine's profile \(min \[{low[0]}, 4\], max "
                    rf"\[{high[0]}, 4\]\): pass a tensor of a shape within it$",
                ):
                    TRTEngine.setup_input_tensors(
                        engine, [torch.zeros(shape)], False, False, False
                    )
                self.assertIsNone(engine.shape_key)

    def test_a_shape_inside_it_is_bound(self):
        engine = self._engine((1, 4), (8, 4))
        x = torch.zeros(5, 4)
        TRTEngine.setup_input_tensors(engine, [x], False, False, False)
        self.assertIs(engine._bound_inputs_by_name["x"], x)


class AddScaled(torch.nn.Module):
    def forward(self, x, y):
        return x * 2 + y


class Doubled(torch.nn.Module):
    def forward(self, x):
        return x * 2


@unittest.skipIf(not torch.cuda.is_available(), "Running an engine needs a CUDA device")
class TestCompiledModuleCall(TestCase):
    def test_a_wrong_call_is_named_and_a_right_one_runs(self):
        x, y = torch.randn(2, 4).cuda(), torch.randn(2, 4).cuda()
        trt = torch_tensorrt.compile(
            AddScaled().eval().cuda(), ir="dynamo", inputs=(x, y), min_block_size=1
        )
        torch.testing.assert_close(trt(x, y), x * 2 + y)
        wrong = {
            r"Input 'x' \(argument 0\) of TensorRT engine .* is a int32 tensor; the "
            r"engine takes float32": (x.int(), y),
            r"Input 'y' \(argument 1\) .* has shape \[3, 4\]; the engine takes \[2, 4\]": (
                x,
                torch.randn(3, 4).cuda(),
            ),
        }
        for message, args in wrong.items():
            with self.subTest(message):
                with self.assertRaisesRegex(TypeError, message):
                    trt(*args)
        engine = next(m for m in trt.modules() if isinstance(m, TorchTensorRTModule))
        for kind, value in NOT_NUMBERS.items():
            with self.subTest(kind):
                with self.assertRaisesRegex(TypeError, rf"argument 1\) .* is {kind};"):
                    engine(x, value)

        torch.testing.assert_close(trt(x, y), x * 2 + y)

    def test_a_shape_outside_the_profile_is_named(self):
        rows = torch_tensorrt.Input(
            min_shape=(1, 4), opt_shape=(2, 4), max_shape=(4, 4), dtype=torch.float32
        )
        trt = torch_tensorrt.compile(
            Doubled().eval().cuda(), ir="dynamo", inputs=[rows], min_block_size=1
        )
        x = torch.randn(3, 4).cuda()
        torch.testing.assert_close(trt(x), x * 2)
        with self.assertRaisesRegex(
            RuntimeError,
            r"^Input 'x' of TensorRT engine .* has shape \[5, 4\], outside the "
            r"engine's profile \(min \[1, 4\], max \[4, 4\]\)",
        ):
            trt(torch.randn(5, 4).cuda())
        torch.testing.assert_close(trt(x), x * 2)


if __name__ == "__main__":
    run_tests()
