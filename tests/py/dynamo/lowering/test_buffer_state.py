# type: ignore
"""Model state updated by custom ops: mutated buffers lifted into engine inputs.

``compile()`` copies a lifted buffer's new value back into the compiled module's
buffer after each call; a standalone engine returns it as ``buf_<name>_new``.
The CPU tests run ``compile(dryrun=True)`` modules, engines built by
TensorRT-RTX, and full ``compile()`` results whose engines TensorRT-RTX built and
whose execution is stood in (``test_compile_with_stand_in_engines.py``); the GPU
tests run compiled modules. The models and helpers are
those of ``test_lower_auto_functionalized.py``.
"""

import copy
import unittest

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt import ENABLED_FEATURES

from .test_compile_with_stand_in_engines import compile_on_cpu
from .test_lower_auto_functionalized import (
    BUFFER_CASES,
    CPU_BUILDER,
    NEEDS_CPU_BUILDER,
    MutateOverlappingViews,
    MutateRowState,
    MutateTransposedState,
    ReturnMutatedBuffer,
    _build_engine,
    _clone,
    _dryrun,
    _dryrun_dynamic,
    _inputs,
)

RUNTIME = "cpp" if ENABLED_FEATURES.torch_tensorrt_runtime else "python"


class TestBufferStateDryrunOnCpu(TestCase):
    def test_buffer_matrix_updates_the_module_state_like_eager(self):
        for name, cls in BUFFER_CASES:
            with self.subTest(name):
                x = _inputs(1)[0]
                gm = _dryrun(cls(), (x,), require_full_compilation=True)
                engines = [c for c, _ in gm.named_children() if "_run_on_acc" in c]
                self.assertEqual(engines, ["_run_on_acc_0"])
                eager = cls()
                for step in range(3):
                    self.assertEqual(gm(x.clone()), eager(x.clone()))
                    self.assertEqual(
                        gm.get_buffer("state"), eager.state, msg=f"step {step}"
                    )

    def test_dynamic_batch(self):
        gm = _dryrun_dynamic(MutateRowState(), 1)
        eager = MutateRowState()
        for batch_size in (2, 5):
            small = _inputs(1, batch=batch_size)
            compiled_args, eager_args = _clone(small), _clone(small)
            self.assertEqual(gm(*compiled_args), eager(*eager_args))
            self.assertEqual(compiled_args, eager_args)
            self.assertEqual(gm.get_buffer("state"), eager.state)

    def test_views_tensorrt_cannot_write_back_fall_back_to_pytorch(self):
        for cls in (MutateTransposedState, MutateOverlappingViews):
            with self.subTest(cls.__name__):
                x = _inputs(1)[0]
                gm = _dryrun(cls(), (x,))
                eager = cls()
                self.assertEqual(gm(x.clone()), eager(x.clone()))
                self.assertEqual(gm.get_buffer("state"), eager.state)


@unittest.skipIf(not CPU_BUILDER, NEEDS_CPU_BUILDER)
class TestBufferStateInSerializedEngines(TestCase):
    def test_lifted_buffer_state_leaves_the_engine(self):
        for name, cls in BUFFER_CASES:
            with self.subTest(name):
                x = _inputs(1)[0]
                _, gm, result = _build_engine(
                    cls(), (x,), lift_mutable_buffers=True, min_block_size=1
                )
                self.assertEqual(result.input_names, ["x", "buf_state"])
                # the state's new value: its own output, or the model's output
                # when the model returns the buffer
                state_output = (
                    "output0" if cls is ReturnMutatedBuffer else "buf_state_new"
                )
                self.assertEqual(result.output_names[-1], state_output)
                eager = cls()
                outputs = gm(x.clone(), torch.zeros(4, 16))
                eager_outputs = eager(x.clone())
                self.assertEqual(outputs[-1], eager.state)
                self.assertEqual(
                    outputs[: len(result.output_names) - 1],
                    [o for o in torch.utils._pytree.tree_leaves(eager_outputs)][
                        : len(result.output_names) - 1
                    ],
                )


@unittest.skipIf(not CPU_BUILDER, NEEDS_CPU_BUILDER)
class TestBufferStateWithStandInEngines(TestCase):
    """A real ``compile()``: engines built, execution stood in (see the helper)."""

    def test_buffer_matrix_over_several_calls(self):
        for name, cls in BUFFER_CASES:
            with self.subTest(name):
                x = _inputs(1)[0]
                trt, _ = compile_on_cpu(
                    self, cls(), (x,), require_full_compilation=True
                )
                eager = cls()
                for step in range(3):
                    self.assertEqual(trt(x.clone()), eager(x.clone()), msg=f"{step}")
                    self.assertEqual(
                        trt.get_buffer("state"), eager.state, msg=f"{step}"
                    )

    def test_the_user_input_spec_survives_buffer_lifting(self):
        """Whole-graph CUDA graphs rebuild (args, kwargs) with ``_in_spec``."""
        for name, cls in BUFFER_CASES:
            with self.subTest(name):
                x = _inputs(1)[0]
                trt, _ = compile_on_cpu(self, cls(), (x,))
                ep = torch.export.export(cls(), (x.clone(),))
                self.assertEqual(trt._in_spec, ep.call_spec.in_spec)
                # what CudaGraphsTorchTensorRTModule does with its input buffers
                args, kwargs = torch.utils._pytree.tree_unflatten(
                    [x.clone()], trt._in_spec
                )
                self.assertEqual(trt(*args, **kwargs), cls()(x.clone()))


class DictInputState(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.zeros(4, 16))

    def forward(self, inputs):
        self.state.add_(inputs["x"])
        return torch.relu(inputs["y"] + self.state)


class KeywordInputState(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.zeros(4, 16))

    def forward(self, x, *, scale):
        self.state.add_(x * scale)
        return self.state * 2


def _model_argument_cases(device="cpu"):
    """(model, args, kwargs) whose inputs are not one flat tensor per argument."""
    x, y, scale = (t.to(device) for t in _inputs(3))
    return [
        (DictInputState, ({"x": x, "y": y},), {}),
        (KeywordInputState, (x,), {"scale": scale}),
    ]


def _copy(tree):
    return torch.utils._pytree.tree_map(torch.clone, tree)


def _compile_with_kwargs(module, args, kwargs, device="cpu"):
    ep = torch.export.export(copy.deepcopy(module), _copy(args), _copy(kwargs))
    return torch_tensorrt.dynamo.compile(
        ep,
        arg_inputs=list(_copy(args)),
        kwarg_inputs=_copy(kwargs),
        min_block_size=1,
    )


def _check_model_arguments(testcase, trt, eager, args, kwargs):
    """Called as eager is, and per ``_in_spec`` (whole-graph CUDA graphs)."""
    for step in range(3):
        testcase.assertEqual(
            trt(*_copy(args), **_copy(kwargs)),
            eager(*_copy(args), **_copy(kwargs)),
            msg=f"step {step}",
        )
        testcase.assertEqual(trt.get_buffer("state"), eager.state)
    flat = torch.utils._pytree.tree_leaves((_copy(args), _copy(kwargs)))
    spec_args, spec_kwargs = torch.utils._pytree.tree_unflatten(flat, trt._in_spec)
    testcase.assertEqual(
        trt(*spec_args, **spec_kwargs), eager(*_copy(args), **_copy(kwargs))
    )


@unittest.skipIf(not CPU_BUILDER, NEEDS_CPU_BUILDER)
class TestModelArgumentsWithLiftedBuffers(TestCase):
    """The compiled module of a model that writes a buffer takes the model's own
    arguments (a dict, keyword arguments), as its ExportedProgram's module does."""

    def test_called_as_the_model_and_per_its_input_spec(self):
        from .test_compile_with_stand_in_engines import engines_built_execution_stood_in

        for cls, args, kwargs in _model_argument_cases():
            with self.subTest(cls.__name__):
                with engines_built_execution_stood_in() as built:
                    trt = _compile_with_kwargs(cls(), args, kwargs)
                self.assertTrue(built, "no engine was built")
                ep = torch.export.export(cls(), _copy(args), _copy(kwargs))
                self.assertEqual(trt._in_spec, ep.call_spec.in_spec)
                _check_model_arguments(self, trt, cls(), args, kwargs)


class TestCompiledModuleArguments(TestCase):
    """``hide_copyback_outputs`` on a plain graph: the forward it generates."""

    def _gm(self):
        class Add(torch.nn.Module):
            def forward(self, x, y):
                return (x + y,)

        return torch.fx.symbolic_trace(Add())

    def test_the_model_arguments_when_the_spec_matches(self):
        from torch_tensorrt.dynamo.lowering._buffer_lifting import hide_copyback_outputs

        gm = self._gm()
        x, y = torch.ones(2), torch.full((2,), 2.0)
        _, in_spec = torch.utils._pytree.tree_flatten((({"x": x, "y": y},), {}))
        gm._in_spec = in_spec
        hide_copyback_outputs(gm, 0, [], None, ["inputs"], in_spec)
        self.assertEqual(gm({"x": x, "y": y}), (x + y,))

    def test_a_flat_forward_otherwise(self):
        from torch_tensorrt.dynamo.lowering._buffer_lifting import hide_copyback_outputs

        x, y = torch.ones(2), torch.full((2,), 2.0)
        _, out_spec = torch.utils._pytree.tree_flatten(x)
        _, three_leaves = torch.utils._pytree.tree_flatten(((x, y, x), {}))
        for in_args, in_spec in ((None, None), (["a", "b", "c"], three_leaves)):
            with self.subTest(in_spec=in_spec):
                gm = self._gm()
                # the model returned a bare tensor: out_spec gives it back
                hide_copyback_outputs(gm, 0, [], out_spec, in_args, in_spec)
                gm.recompile()
                self.assertEqual(gm(x, y), x + y)


@unittest.skipIf(
    not torch.cuda.is_available(),
    "Running TensorRT engines needs a CUDA device; this host has none.",
)
class TestBufferStateOnGpu(TestCase):
    def test_model_arguments(self):
        for cls, args, kwargs in _model_argument_cases("cuda"):
            with self.subTest(cls.__name__, runtime=RUNTIME):
                trt = _compile_with_kwargs(cls().cuda(), args, kwargs)
                _check_model_arguments(self, trt, cls().cuda(), args, kwargs)

    def _compile(self, module, args):
        ep = torch.export.export(copy.deepcopy(module), _clone(args))
        return torch_tensorrt.dynamo.compile(
            ep,
            arg_inputs=list(_clone(args)),
            min_block_size=1,
            require_full_compilation=True,
        )

    def test_buffer_matrix(self):
        for name, cls in BUFFER_CASES:
            with self.subTest(name, runtime=RUNTIME):
                x = _inputs(1)[0].cuda()
                trt = self._compile(cls().cuda(), (x,))
                eager = cls().cuda()
                for step in range(3):
                    self.assertEqual(trt(x.clone()), eager(x.clone()))
                    self.assertEqual(
                        trt.get_buffer("state"), eager.state, msg=f"{step}"
                    )


if __name__ == "__main__":
    run_tests()
