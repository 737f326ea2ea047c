"""Symbolic shape capture for graphs with None outputs or missing node metadata.

``extract_symbolic_shape_expressions`` runs first in ``interpret_module_to_result``
(called by ``convert_module`` for every TensorRT partition of ``compile()`` and by
``convert_exported_program_to_serialized_trt_engine`` for the whole graph). It used
to fail with the bare "Failed to extract symbolic shape expressions from source FX
graph partition" for any output without metadata and for a ``None`` output
(https://github.com/pytorch/TensorRT/issues/4240).

Graphs are traced with ``make_fx`` (every node gets ``val`` and ``tensor_meta``),
then metadata is removed to reproduce what a late graph pass leaves behind. The
tests through ``interpret_module_to_result`` build a real engine: on a host without
a GPU this needs TensorRT-RTX.
"""

import unittest

import torch
import torch_tensorrt
from torch.fx.experimental.proxy_tensor import make_fx
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt import ENABLED_FEATURES
from torch_tensorrt.dynamo._settings import CompilationSettings
from torch_tensorrt.dynamo.conversion import convert_module, interpret_module_to_result
from torch_tensorrt.dynamo.conversion._symbolic_shape_capture import (
    extract_symbolic_shape_expressions,
)

CAN_BUILD = torch.cuda.is_available() or ENABLED_FEATURES.tensorrt_rtx
NEEDS_BUILDER = (
    "Building an engine needs a CUDA device or TensorRT-RTX, which builds on the CPU."
)


def _trace(fn, *shapes, tracing_mode="fake"):
    return make_fx(fn, tracing_mode=tracing_mode)(*(torch.randn(s) for s in shapes))


def _output_args(gm):
    return next(n for n in gm.graph.nodes if n.op == "output").args[0]


def _node(gm, name):
    return next(n for n in gm.graph.nodes if n.name == name)


def _inputs(*shapes):
    return [torch_tensorrt.Input(shape=s, dtype=torch.float32) for s in shapes]


def _two_outputs_with_none(x):
    return (x + 1) * 2, None


def _add_mul(x):
    return (x + 1) * 2


class TestNoneOutputs(TestCase):
    def test_literal_none_output_has_no_entry(self):
        gm = _trace(_two_outputs_with_none, (2, 3))
        self.assertIsNone(_output_args(gm)[1])
        info = extract_symbolic_shape_expressions(gm)
        self.assertEqual(
            info["outputs"], [{"shape_exprs": [2, 3], "dtype": torch.float32}]
        )

    def test_node_whose_value_is_none_has_no_entry(self):
        # e.g. an op that returns nothing: meta["val"] is None
        gm = _trace(lambda x: (x + 1, x * 2), (4,))
        _node(gm, "mul").meta["val"] = None
        info = extract_symbolic_shape_expressions(gm)
        self.assertEqual(len(info["outputs"]), 1)
        self.assertEqual(info["outputs"][0]["shape_exprs"], [4])

    def test_only_none_outputs_is_an_error_naming_the_partition(self):
        gm = _trace(lambda x: None, (4,))
        with self.assertRaisesRegex(
            RuntimeError, r"graph partition '_run_on_acc_3' has no tensor outputs"
        ):
            extract_symbolic_shape_expressions(gm, "_run_on_acc_3")

    @unittest.skipIf(not CAN_BUILD, NEEDS_BUILDER)
    def test_engine_has_no_binding_for_a_none_output(self):
        gm = _trace(_two_outputs_with_none, (2, 3))
        result = interpret_module_to_result(gm, _inputs((2, 3)), CompilationSettings())
        self.assertEqual(list(result.output_names), ["output0"])
        # one shape entry per engine output: the meta kernel returns as many tensors
        self.assertEqual(len(result.symbolic_shape_expressions["outputs"]), 1)
        self.assertGreater(len(result.serialized_engine), 1000)

    @unittest.skipIf(not CAN_BUILD, NEEDS_BUILDER)
    def test_none_output_keeps_the_other_binding_names(self):
        gm = _trace(lambda x: (None, x + 1, None, x * 2), (2, 3))
        result = interpret_module_to_result(
            gm,
            _inputs((2, 3)),
            CompilationSettings(),
            output_binding_names=["unused_a", "plus", "unused_b", "times"],
        )
        self.assertEqual(list(result.output_names), ["plus", "times"])
        self.assertEqual(len(result.symbolic_shape_expressions["outputs"]), 2)


class TestRecoveredMetadata(TestCase):
    def test_output_without_val_uses_tensor_meta(self):
        gm = _trace(_add_mul, (2, 3))
        del _node(gm, "mul").meta["val"]
        info = extract_symbolic_shape_expressions(gm)
        self.assertEqual(
            info["outputs"], [{"shape_exprs": [2, 3], "dtype": torch.float32}]
        )

    def test_tensor_meta_keeps_symbolic_dimensions(self):
        gm = _trace(_add_mul, (5, 3), tracing_mode="symbolic")
        expected = extract_symbolic_shape_expressions(gm)["outputs"]
        del _node(gm, "mul").meta["val"]
        info = extract_symbolic_shape_expressions(gm)
        self.assertEqual(info["outputs"], expected)
        self.assertFalse(isinstance(info["outputs"][0]["shape_exprs"][0], int))

    def test_input_without_val_uses_tensor_meta(self):
        gm = _trace(_add_mul, (2, 3))
        del _node(gm, "x_1").meta["val"]
        info = extract_symbolic_shape_expressions(gm)
        self.assertEqual(info["inputs"][0]["shape_exprs"], [2, 3])

    def test_output_without_any_metadata_is_derived_from_its_inputs(self):
        # the write-back copy_ that ExportedProgram.module() appends has no metadata
        def write_back(x, state):
            new = state + x
            return new, state.copy_(new)

        gm = _trace(write_back, (8,), (8,), tracing_mode="symbolic")
        copy = _node(gm, "copy_")
        expected = extract_symbolic_shape_expressions(gm)["outputs"]
        copy.meta.clear()
        info = extract_symbolic_shape_expressions(gm)
        self.assertEqual(info["outputs"], expected)
        # stored for later consumers (output dtypes, the interpreter)
        self.assertEqual(
            tuple(copy.meta["val"].shape), tuple(_node(gm, "add").meta["val"].shape)
        )

    @unittest.skipIf(not CAN_BUILD, NEEDS_BUILDER)
    def test_engine_built_for_output_without_metadata(self):
        gm = _trace(_add_mul, (2, 3))
        _node(gm, "mul").meta.clear()
        result = interpret_module_to_result(gm, _inputs((2, 3)), CompilationSettings())
        self.assertEqual(
            result.symbolic_shape_expressions["outputs"],
            [{"shape_exprs": [2, 3], "dtype": torch.float32}],
        )
        self.assertEqual(list(result.output_names), ["output0"])


class TestErrorsNameTheNode(TestCase):
    def _unrecoverable(self):
        gm = _trace(_add_mul, (2, 3))
        # neither the output nor its input has metadata: nothing to derive from
        _node(gm, "mul").meta.clear()
        _node(gm, "add").meta.clear()
        return gm

    def test_missing_metadata_names_node_op_and_partition(self):
        with self.assertRaisesRegex(
            RuntimeError,
            r"node 'mul' \(op aten\.mul\.Tensor\) in graph partition '_run_on_acc_0' "
            r"has no shape metadata",
        ):
            extract_symbolic_shape_expressions(self._unrecoverable(), "_run_on_acc_0")

    def test_convert_module_names_its_partition(self):
        # the call compile() makes for each TensorRT partition; fails before building
        with self.assertRaisesRegex(
            RuntimeError,
            r"node 'mul' \(op aten\.mul\.Tensor\) in graph partition '_run_on_acc_2'",
        ):
            convert_module(
                self._unrecoverable(),
                _inputs((2, 3)),
                CompilationSettings(),
                name="_run_on_acc_2",
            )

    def test_interpret_without_a_name_says_converted_graph(self):
        with self.assertRaisesRegex(
            RuntimeError, r"node 'mul' \(op aten\.mul\.Tensor\) in the converted graph"
        ):
            interpret_module_to_result(
                self._unrecoverable(), _inputs((2, 3)), CompilationSettings()
            )

    def test_input_without_metadata_names_the_placeholder(self):
        gm = _trace(_add_mul, (2, 3))
        _node(gm, "x_1").meta.clear()
        with self.assertRaisesRegex(
            RuntimeError, r"node 'x_1' \(op placeholder\) in graph partition 'p'"
        ):
            extract_symbolic_shape_expressions(gm, "p")

    def test_tuple_valued_output_names_node_and_type(self):
        gm = _trace(lambda x: torch.ops.aten.var_mean.correction(x, [0]), (4, 2))
        out = _output_args(gm)
        # make the multi-output node itself the graph output
        node = out[0].args[0]
        gm.graph.output_node().args = ((node,),)
        with self.assertRaisesRegex(
            RuntimeError,
            r"node 'var_mean' \(op aten\.var_mean\.correction\) in graph partition 'p' "
            r"has a value of type tuple",
        ):
            extract_symbolic_shape_expressions(gm, "p")


if __name__ == "__main__":
    run_tests()
