# type: ignore
"""Standalone engines of models with mutating ops: the new value of each mutated
input among the engine's outputs, the aliased outputs the interpreter appends
named, mutated tensor lists refused, and a complex state named.

The ops, models and helpers are those of test_lower_auto_functionalized.py.
"""

import copy
import unittest

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt import ENABLED_FEATURES
from torch_tensorrt.dynamo.lowering import _buffer_lifting

from .test_lower_auto_functionalized import (
    CPU_BUILDER,
    NEEDS_CPU_BUILDER,
    USER_INPUT_CASES,
    AddAll,
    MutateAndReturn,
    MutateBuffer,
    NoConverter,
    _build_engine,
    _clone,
    _dryrun,
    _inputs,
)


@unittest.skipIf(not CPU_BUILDER, NEEDS_CPU_BUILDER)
class TestSerializedEngineOnCpu(TestCase):
    """The standalone engine returns the new value of every mutated input."""

    def _build(self, module, args, **kwargs):
        return _build_engine(module, args, **kwargs)

    def _check_values(self, gm, module, args):
        """The engine's graph returns the model's outputs, then the new inputs."""
        compiled, eager_args = gm(*_clone(args)), _clone(args)
        eager = module(*eager_args)
        eager = [] if eager is None else [eager]
        compiled = list(compiled) if isinstance(compiled, (tuple, list)) else [compiled]
        return compiled, eager, eager_args

    def test_engine_io_per_pattern(self):
        expected_io = {
            "inplace_aten_not_returned": (["x"], ["output0", "x_new"]),
            "inplace_aten_returned": (["x"], ["output0"]),
            "mutate_input_not_returned": (["x", "y"], ["output0", "x_new"]),
            "mutate_input_returned": (["x"], ["output0"]),
            "mutate_input_return_nothing": (["x"], ["x_new"]),
            "add_in_place_return_nothing": (["x", "d"], ["x_new"]),
            "mutate_and_return": (["x", "y"], ["output0", "x_new"]),
            "two_mutated_args": (["x", "z"], ["output0", "x_new", "z_new"]),
        }
        for name, cls, n in USER_INPUT_CASES:
            if cls is NoConverter:
                continue
            with self.subTest(name):
                args = _inputs(n)
                _, gm, result = self._build(
                    cls(), args, require_full_compilation=True, min_block_size=1
                )
                self.assertEqual(
                    (result.input_names, result.output_names), expected_io[name]
                )
                outputs, eager, eager_args = self._check_values(gm, cls(), args)
                expected = eager + [
                    a for a, b in zip(eager_args, args) if not torch.equal(a, b)
                ]
                if name in ("inplace_aten_returned", "mutate_input_returned"):
                    expected = eager  # the returned input is its new value
                self.assertEqual(outputs, expected)

    def test_dynamic_batch(self):
        args = _inputs(2, batch=4)
        module = MutateAndReturn()
        batch = torch.export.Dim("batch", min=1, max=8)
        ep = torch.export.export(
            module, _clone(args), dynamic_shapes=({0: batch}, {0: batch})
        )
        inputs = [
            torch_tensorrt.Input(
                min_shape=(1, 16), opt_shape=(4, 16), max_shape=(8, 16), name=n
            )
            for n in ("x", "y")
        ]
        engine = (
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep, arg_inputs=inputs, min_block_size=1
            )
        )
        self.assertIn(b"x_new", engine)

    def test_an_unlifted_buffer_written_is_refused_in_one_sentence(self):
        # lift_mutable_buffers=False would make the buffer a constant of the
        # engine (2.14.0's engine), whose new value each run would lose
        with self.assertRaises(ValueError) as refused:
            self._build(MutateBuffer(), _inputs(1), min_block_size=1)
        message = str(refused.exception)
        self.assertRegex(
            message,
            r"^convert_exported_program_to_serialized_trt_engine: the model writes "
            r"buffer\(s\) \['state'\], .* would not keep between runs: pass "
            r"lift_mutable_buffers=True",
        )
        self.assertNotIn("\n", message)
        engine, gm, _ = self._build(
            MutateBuffer(), _inputs(1), min_block_size=1, lift_mutable_buffers=True
        )
        self.assertIn(b"buf_state_new", engine)

    def test_op_without_converter_is_reported(self):
        from torch_tensorrt.dynamo.conversion._TRTInterpreter import (
            UnsupportedOperatorException,
        )

        with self.assertRaisesRegex(UnsupportedOperatorException, "no_converter_"):
            self._build(NoConverter(), _inputs(1))


class WriteThenScale(torch.nn.Module):
    """A KV write whose result the graph reads (``mul``) but does not return."""

    def forward(self, cache, u):
        cache[:, :, 3:4, :] = u
        cache.mul_(2)
        return u * 2


class AddToSlab(torch.nn.Module):
    def forward(self, cache, u):
        cache[:, :, 4:6, :] += u
        return u * 2


class TwoSlabs(torch.nn.Module):
    def forward(self, cache, u):
        cache[:, :, 1:3, :] = u
        cache[:, :, 8:10, :] = u + 1
        return u * 2


def _cache_and_update(n=2):
    torch.manual_seed(0)
    return torch.zeros(2, 4, 16, 8), torch.randn(2, 4, n, 8)


@unittest.skipIf(not CPU_BUILDER, NEEDS_CPU_BUILDER)
class TestMutatedTensorLists(TestCase):
    """``Tensor(a!)[]``: run in PyTorch by compile(), refused by a standalone engine."""

    REASON = (
        "trt_mut.add_all_.default: its mutated argument 'xs' is a list of tensors "
        "(Tensor(a!)[]), whose new values a converter cannot return"
    )

    def test_compile_runs_the_op_in_pytorch(self):
        from .test_compile_with_stand_in_engines import compile_on_cpu

        args = (torch.zeros(4), torch.zeros(4), torch.arange(4.0))
        with self.assertLogs("torch_tensorrt", level="WARNING") as logs:
            trt, _ = compile_on_cpu(self, AddAll(), args)
        self.assertIn(f"{self.REASON}; the op runs in PyTorch", "\n".join(logs.output))
        compiled_args, eager_args = _clone(args), _clone(args)
        for step in range(2):
            self.assertEqual(trt(*compiled_args), AddAll()(*eager_args))
            self.assertEqual(compiled_args, eager_args, msg=f"step {step}")

    def test_a_standalone_engine_refuses_it_in_one_sentence(self):
        args = (torch.zeros(4), torch.zeros(4), torch.ones(4))
        with self.assertRaises(ValueError) as refused:
            _build_engine(AddAll(), args, min_block_size=1)
        self.assertEqual(
            str(refused.exception),
            f"{self.REASON}, and a standalone engine cannot run the op in PyTorch",
        )
        with self.assertRaisesRegex(
            ValueError, "require_full_compilation=True forbids"
        ):
            _dryrun(AddAll(), args, require_full_compilation=True)


# a later piece's single decision on what TensorRT writes in place: the
# converters take only planned writes, and buffer lifting predicts nothing
STATE_PLAN = not hasattr(_buffer_lifting, "assert_predicted_kv_aliased")


@unittest.skipIf(not CPU_BUILDER, NEEDS_CPU_BUILDER)
class TestAppendedAliasedOutputs(TestCase):
    """An aliased output the interpreter appends (a KV write the graph does not
    return) gets a name of its own when the engine's outputs are named."""

    def _check_names(self, result, graph_outputs):
        names = result.output_names
        self.assertEqual(len(set(names)), len(names), names)
        # every output past the graph's own is an aliased side effect
        for name in names[len(graph_outputs) :]:
            self.assertIn(name, result.aliased_io)
        self.assertEqual(names[: len(graph_outputs)], graph_outputs)

    def test_output_binding_names_with_an_appended_output(self):
        args = _cache_and_update(1)
        _, gm, result = _build_engine(
            WriteThenScale(),
            args,
            min_block_size=1,
            output_binding_names="output2",  # the model returns one tensor
        )
        self._check_names(result, ["output2", "cache_new"])
        if STATE_PLAN:
            # with the state plan (kv-state piece), the slab write, which is not
            # the state's last, is a scatter: nothing is aliased or appended
            self.assertEqual(result.output_names, ["output2", "cache_new"])
            self.assertEqual(result.aliased_io, {})
            return
        # the appended output's default name, output2, is taken: made unique
        self.assertEqual(result.output_names, ["output2", "cache_new", "_output2"])
        self.assertEqual(result.aliased_io, {"_output2": ("cache", "kv_cache_update")})
        # the graph's outputs are flat: the engine's extra output is the
        # interpreter's, not the graph's
        eager_args = _clone(args)
        expected = WriteThenScale()(*eager_args)
        self.assertEqual(list(gm(*_clone(args))), [expected, eager_args[0]])

    def test_states_written_more_than_once_build(self):
        for module in (AddToSlab(), TwoSlabs()):
            with self.subTest(type(module).__name__):
                args = _cache_and_update()
                _, gm, result = _build_engine(module, args, min_block_size=1)
                self._check_names(result, ["output0", "cache_new"])
                outputs = gm(*_clone(args))
                eager_args = _clone(args)
                expected = module(*eager_args)
                self.assertEqual(list(outputs[:2]), [expected, eager_args[0]])


@unittest.skipIf(
    not torch.cuda.is_available(),
    "Running TensorRT engines needs a CUDA device; this host has none.",
)
class TestMutationsOnGpu(TestCase):
    """Compiled modules equal eager over several calls, on the runtime installed.

    2.14.0 picks the runtime once per process, when torch_tensorrt is imported:
    the C++ runtime if torch_tensorrt/lib holds libtorchtrt.so or
    libtorchtrt_runtime.so (``_features.py``, ``ENABLED_FEATURES.torch_tensorrt_runtime``),
    else the Python ``TRTEngine``; ``use_python_runtime`` has no effect. These
    tests cover the Python runtime in an install without the C++ runtime library.
    """

    RUNTIME = "cpp" if ENABLED_FEATURES.torch_tensorrt_runtime else "python"

    def _compile(self, module, args):
        ep = torch.export.export(copy.deepcopy(module), _clone(args))
        return torch_tensorrt.dynamo.compile(
            ep,
            arg_inputs=list(_clone(args)),
            min_block_size=1,
            # an op without a converter runs in PyTorch
            require_full_compilation=not isinstance(module, NoConverter),
        )

    def test_user_input_matrix(self):
        for name, cls, n in USER_INPUT_CASES:
            with self.subTest(name, runtime=self.RUNTIME):
                args = tuple(a.cuda() for a in _inputs(n))
                trt = self._compile(cls(), args)
                compiled_args, eager_args = _clone(args), _clone(args)
                for step in range(3):
                    self.assertEqual(
                        trt(*compiled_args), cls()(*eager_args), msg=f"{step}"
                    )
                    self.assertEqual(compiled_args, eager_args, msg=f"{step}")


class ComplexState(torch.nn.Module):
    def forward(self, z):
        z.mul_(2)
        return z.abs()


@unittest.skipIf(not CPU_BUILDER, NEEDS_CPU_BUILDER)
class TestErrorsNameWhatTheUserWrote(TestCase):
    """One or two sentences naming the input and what to do (an op without a
    converter: test_unsupported_ops.py)."""

    def _serialized(self, module, args):
        ep = torch.export.export(copy.deepcopy(module), _clone(args))
        return torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
            ep, arg_inputs=list(_clone(args)), min_block_size=1
        )

    def test_a_complex_state_written_in_a_standalone_engine(self):
        z = torch.randn(4, 8, dtype=torch.complex64)
        with self.assertRaisesRegex(
            RuntimeError,
            r"The model writes its complex input 'z' in place\. TensorRT has no "
            r"complex tensors.*torch\.view_as_real\(z\)",
        ):
            self._serialized(ComplexState(), (z,))


if __name__ == "__main__":
    run_tests()
