# type: ignore
"""A real ``compile()`` on a host without a GPU: engines built, their execution stood in.

``compile(dryrun=True)`` returns before any engine exists, so nothing that runs
after the build is reached on the CPU: ``compile_module``'s loop over the output
node, the buffers inlined back into the module, the write-backs, the compiled
module's generated ``forward`` and its input spec. Here ``compile()`` runs its
non-dryrun path with two things stood in:

- its own "needs a CUDA device" guard (the first ``torch.cuda.is_available()``
  call made by ``compile()``) is answered True; every other call gets the real
  answer;
- ``convert_module`` builds each engine with the real interpreter (TensorRT-RTX,
  on the CPU) and returns a :class:`StandInEngineModule` instead of a
  ``TorchTensorRTModule``, which cannot deserialize an engine without a GPU.

``StandInEngineModule`` stands in for engine *execution* only and says so: it
computes the engine's outputs by running, in PyTorch, the partition the engine
was built from, binds them to the engine's output names, and writes each output
that the engine's ``aliased_io`` declares in place into its input, as both
runtimes do. It proves nothing about TensorRT; it lets the code around the
engines run, so every mutation of the matrix is checked end to end, against
eager, over several calls. The same matrix runs on the GPU with real engines
(``TestMutationsOnGpu``).
"""

import contextlib
import copy
import sys
import unittest
import unittest.mock

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo import _compiler
from torch_tensorrt.dynamo.conversion import interpret_module_to_result
from torch_tensorrt.dynamo.runtime._TorchTensorRTModule import user_output_count

from .test_lower_auto_functionalized import (
    CPU_BUILDER,
    NEEDS_CPU_BUILDER,
    USER_INPUT_CASES,
    AddInPlaceReturnNothing,
    NoConverter,
    _clone,
    _inputs,
)

try:  # the runtime's boundary rule, where it reads the source graph's outputs
    from torch_tensorrt.dynamo.runtime._TorchTensorRTModule import graph_output_count
except ImportError:
    graph_output_count = None


class StandInEngineModule(torch.nn.Module):
    """Stand-in for a ``TorchTensorRTModule`` whose engine was really built.

    Holds the real build result (serialized engine, binding names,
    ``aliased_io``); runs the source partition in PyTorch in place of the engine.
    """

    def __init__(self, partition, result, name, input_dtypes=None):
        super().__init__()
        self.name = name
        # the engine's input dtypes, which the runtimes require of the tensors
        self.input_dtypes = list(input_dtypes or [])
        self.partition = partition
        self.serialized_engine = result.serialized_engine
        self.input_binding_names = list(result.input_names)
        self.output_binding_names = list(result.output_names)
        self.aliased_io = dict(result.aliased_io or {})
        self.symbolic_shape_expressions = result.symbolic_shape_expressions
        self.output_tensors_unowned = False

    def setup_engine(self):
        pass

    def set_output_tensors_as_unowned(self, enabled):
        self.output_tensors_unowned = enabled

    def forward(self, *inputs):
        if len(inputs) != len(self.input_binding_names):
            raise AssertionError(
                f"{self.name}: {len(inputs)} inputs for the engine inputs "
                f"{self.input_binding_names}"
            )
        for name, tensor, expected in zip(
            self.input_binding_names, inputs, self.input_dtypes
        ):
            if isinstance(tensor, torch.Tensor) and tensor.dtype != expected:
                # what both runtimes refuse (TRTEngine's "Dtype mismatch")
                raise AssertionError(
                    f"Dtype mismatch for input {name}. Expect {expected}, got "
                    f"{tensor.dtype}."
                )
        values = self.partition(*inputs)
        if not isinstance(values, (list, tuple)):
            values = [values]
        if len(values) != len(self.output_binding_names):
            raise AssertionError(
                f"{self.name}: the partition gives {len(values)} values for the "
                f"engine outputs {self.output_binding_names}; the stand-in cannot "
                "tell which is which"
            )
        by_name = dict(zip(self.input_binding_names, inputs))
        outputs = []
        for name, value in zip(self.output_binding_names, values):
            if name in self.aliased_io:
                # the engine writes this output into its input's memory
                target = by_name[self.aliased_io[name][0]]
                target.copy_(value)
                value = target
            outputs.append(value)
        boundary = (self.output_binding_names, self.aliased_io)
        if graph_output_count is not None:
            boundary += (graph_output_count(self.symbolic_shape_expressions),)
        outputs = outputs[: user_output_count(*boundary)]
        if len(outputs) == 1:
            return outputs[0]
        return tuple(outputs)


@contextlib.contextmanager
def engines_built_execution_stood_in():
    """``compile()`` builds real engines on the CPU; yields the stand-ins it made."""
    built = []

    def convert_module(module, inputs, settings=None, name="", engine_cache=None):
        # copied before the interpreter, which may free what it put in the engine
        partition = copy.deepcopy(module)
        result = interpret_module_to_result(
            module, inputs, settings, engine_cache=engine_cache, name=name
        )
        # TensorRT has no float64: such an engine input is float32
        dtypes = [
            {torch.float64: torch.float32}.get(d, d)
            for d in (
                i.dtype.to(torch.dtype) if hasattr(i, "dtype") else None for i in inputs
            )
        ]
        built.append(StandInEngineModule(partition, result, name, dtypes))
        return built[-1]

    real_is_available = torch.cuda.is_available
    guard = {"answered": False}

    def is_available():
        caller = sys._getframe(1).f_code
        if (
            not guard["answered"]
            and caller.co_name == "compile"
            and caller.co_filename == _compiler.__file__
        ):
            guard["answered"] = True
            return True
        return real_is_available()

    with unittest.mock.patch.object(
        _compiler, "convert_module", convert_module
    ), unittest.mock.patch.object(torch.cuda, "is_available", is_available):
        yield built
    if not guard["answered"]:
        raise AssertionError(
            "compile() asked torch.cuda.is_available() nothing: its GPU guard moved, "
            "update this stand-in"
        )


def compile_on_cpu(testcase, module, args, **kwargs):
    """``compile()`` without dryrun; asserts engines were built and stood in."""
    ep = torch.export.export(copy.deepcopy(module), _clone(args))
    with engines_built_execution_stood_in() as built:
        trt = torch_tensorrt.dynamo.compile(
            ep, arg_inputs=list(_clone(args)), min_block_size=1, **kwargs
        )
    testcase.assertTrue(built, "no engine was built")
    for engine in built:
        testcase.assertIsInstance(engine.serialized_engine, bytes)
        testcase.assertGreater(len(engine.serialized_engine), 0)
        testcase.assertIs(getattr(trt, engine.name), engine)
    return trt, built


class ReturnsNone(torch.nn.Module):
    """Upstream's minimal reproduction for patch 0004 (no mutation at all)."""

    def forward(self, x):
        return x * 2, None


@unittest.skipIf(not CPU_BUILDER, NEEDS_CPU_BUILDER)
class TestCompileWithStandInEngines(TestCase):
    def test_user_input_matrix_matches_eager_over_several_calls(self):
        for name, cls, n in USER_INPUT_CASES:
            with self.subTest(name):
                args = _inputs(n)
                trt, built = compile_on_cpu(
                    self,
                    cls(),
                    args,
                    require_full_compilation=cls is not NoConverter,
                )
                compiled_args, eager_args = _clone(args), _clone(args)
                for step in range(3):
                    self.assertEqual(
                        trt(*compiled_args), cls()(*eager_args), msg=f"step {step}"
                    )
                    self.assertEqual(
                        compiled_args, eager_args, msg=f"mutation lost, step {step}"
                    )

    def test_output_tensors_of_returned_engines_are_unowned(self):
        trt, built = compile_on_cpu(self, ReturnsNone(), _inputs(1))
        x = _inputs(1)[0]
        out, none = trt(x.clone())
        self.assertEqual(out, x * 2)
        self.assertIsNone(none)
        # the engine's output is the model's: compile_module marked it unowned
        self.assertEqual([e.output_tensors_unowned for e in built], [True])

    def test_nothing_returned_gives_nothing_back(self):
        trt, _ = compile_on_cpu(self, AddInPlaceReturnNothing(), _inputs(2))
        x, d = _inputs(2)
        expected = x + d
        self.assertIsNone(trt(x, d))
        self.assertEqual(x, expected)


if __name__ == "__main__":
    run_tests()
