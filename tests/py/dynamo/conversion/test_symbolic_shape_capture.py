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
import unittest.mock

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

    def test_only_none_outputs_give_no_output_entry(self):
        # an in-place model: its engine's outputs are the aliased ones alone
        gm = _trace(lambda x: None, (4,))
        info = extract_symbolic_shape_expressions(gm, "_run_on_acc_3")
        self.assertEqual((len(info["inputs"]), info["outputs"]), (1, []))

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


# ----------------------------------------------------------------------------
# Numbers as outputs (https://github.com/pytorch/TensorRT/issues/4677)


class SumAndLength(torch.nn.Module):
    """#4677's model: a tensor and ``y.shape[0]`` (a SymInt with a dynamic
    dimension, the literal 12 with a static one)."""

    def forward(self, x):
        y = x * 2.0
        return y.sum(dim=0), y.shape[0]


class Literals(torch.nn.Module):
    def forward(self, x):
        return x + 1, 2.5, True


class NumbersAndNone(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        return None, y, y.shape[0], None, 7


class Nested(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        return (y, (y.shape[0], None)), y.shape[1]


class HalfLength(torch.nn.Module):
    """A SymFloat output."""

    def forward(self, x):
        return x * 2, x.shape[0] / 2


NUMBER_MODELS = [SumAndLength, Literals, NumbersAndNone, Nested, HalfLength]
DYNAMIC_ROWS = (2, 12, 64)


def _export(model, dynamic):
    x = torch.randn(12, 8)
    dims = ({0: torch.export.Dim("rows", min=2, max=64)},) if dynamic else None
    ep = torch.export.export(model, (x,), dynamic_shapes=dims)
    spec = (
        torch_tensorrt.Input(min_shape=(2, 8), opt_shape=(12, 8), max_shape=(64, 8))
        if dynamic
        else torch_tensorrt.Input(shape=(12, 8))
    )
    return ep, [spec]


def _built(model, dynamic):
    """The recorded outputs and the network's, of the serialized engine of ``model``.

    The network's are the ITensors ``TRTInterpreter.output`` marks (read from the
    real TensorRT network, not stood in)."""
    from torch_tensorrt.dynamo.conversion import _conversion
    from torch_tensorrt.dynamo.conversion._TRTInterpreter import TRTInterpreter

    seen = {}
    real_output = TRTInterpreter.output
    real_extract = _conversion.extract_symbolic_shape_expressions

    def output(self, target, args, kwargs):
        marked = real_output(self, target, args, kwargs)
        seen["network"] = [(len(t.shape), str(t.dtype)) for t in marked]
        return marked

    def extract(module, name=""):
        seen["recorded"] = real_extract(module, name)
        return seen["recorded"]

    ep, inputs = _export(model, dynamic)
    with unittest.mock.patch.object(
        TRTInterpreter, "output", output
    ), unittest.mock.patch.object(
        _conversion, "extract_symbolic_shape_expressions", extract
    ):
        engine = (
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep, arg_inputs=inputs, min_block_size=1
            )
        )
    return engine, seen["recorded"], seen["network"]


_TRT_DTYPE = {
    torch.float32: "DataType.FLOAT",
    torch.int64: "DataType.INT64",
    torch.bool: "DataType.BOOL",
}


@unittest.skipIf(not CAN_BUILD, NEEDS_BUILDER)
class TestNumbersAsOutputs(TestCase):
    def test_every_output_kind_builds_and_the_record_is_the_network(self):
        for model in NUMBER_MODELS:
            for dynamic in (False, True):
                with self.subTest(model.__name__, dynamic=dynamic):
                    engine, recorded, network = _built(model(), dynamic)
                    self.assertGreater(len(engine), 0)
                    self.assertEqual(
                        [
                            (len(o["shape_exprs"]), _TRT_DTYPE[o["dtype"]])
                            for o in recorded["outputs"]
                        ],
                        network,
                    )

    def test_numbers_are_rank_0_and_marked_scalar(self):
        expected = {
            SumAndLength: [(1, None), (0, torch.int64)],
            Literals: [(2, None), (0, torch.float32), (0, torch.bool)],
            NumbersAndNone: [(2, None), (0, torch.int64), (0, torch.int64)],
            Nested: [(2, None), (0, torch.int64), (0, torch.int64)],
            HalfLength: [(2, None), (0, torch.float32)],
        }
        for model, outputs in expected.items():
            with self.subTest(model.__name__):
                _, recorded, _ = _built(model(), dynamic=True)
                self.assertEqual(
                    [
                        (
                            len(o["shape_exprs"]),
                            o["dtype"] if o.get("is_scalar") else None,
                        )
                        for o in recorded["outputs"]
                    ],
                    outputs,
                )

    def test_the_record_of_a_literal_needs_no_node(self):
        gm = _trace(lambda x: (x + 1, None), (4, 2))
        gm.graph.output_node().args = ((_output_args(gm)[0], 3, 0.5, False),)
        recorded = extract_symbolic_shape_expressions(gm, "p")["outputs"]
        self.assertEqual(
            [(o["shape_exprs"], o["dtype"], o.get("is_scalar")) for o in recorded],
            [
                ([4, 2], torch.float32, None),
                ([], torch.int64, True),
                ([], torch.float32, True),
                ([], torch.bool, True),
            ],
        )

    def test_output_dtypes_count_every_number(self):
        from torch_tensorrt._enums import dtype
        from torch_tensorrt.dynamo.utils import get_output_dtypes

        gm = _trace(lambda x: x + 1, (4, 2))
        (node,) = [_output_args(gm)]
        self.assertEqual(
            get_output_dtypes((node, 3, None, 0.5, True)),
            [dtype.float32, dtype.int64, dtype.float32, dtype.bool],
        )


class TestNumbersComeBackAsNumbers(TestCase):
    """``TorchTensorRTModule.forward`` with ``tensorrt::execute_engine`` replaced
    by a function that returns what an engine returns: rank-0 tensors."""

    def test_forward_returns_python_numbers_where_the_graph_had_numbers(self):
        from torch_tensorrt.dynamo.runtime._TorchTensorRTModule import (
            TorchTensorRTModule,
        )

        recorded = {
            "inputs": [{"shape_exprs": [4], "dtype": torch.float32, "name": "x"}],
            "outputs": [
                {"shape_exprs": [4], "dtype": torch.float32},
                {"shape_exprs": [], "dtype": torch.int64, "is_scalar": True},
                {"shape_exprs": [], "dtype": torch.float32, "is_scalar": True},
                {"shape_exprs": [], "dtype": torch.bool, "is_scalar": True},
            ],
        }
        module = TorchTensorRTModule(
            name="m",
            input_binding_names=["x"],
            output_binding_names=["output0", "output1", "output2", "output3"],
            symbolic_shape_expressions=recorded,
        )
        module.engine = object()
        y = torch.ones(4)
        engine_outputs = [y, torch.tensor(12), torch.tensor(2.5), torch.tensor(True)]
        with unittest.mock.patch.object(
            torch.ops.tensorrt,
            "execute_engine",
            lambda inputs, engine: list(engine_outputs),
            create=True,
        ), unittest.mock.patch.object(torch.Tensor, "is_cuda", True):
            result = module(torch.zeros(4))
        self.assertIs(result[0], y)
        self.assertEqual(result[1:], (12, 2.5, True))
        self.assertEqual([type(r) for r in result[1:]], [int, float, bool])

    def test_numbers_of_the_input_shapes_are_computed_on_the_host(self):
        """As eager computes them: a SymFloat in float64 (the engine carries
        float32), its engine output not read (no ``.item()``, no synchronization)."""
        import pickle

        from torch_tensorrt.dynamo.runtime._TorchTensorRTModule import (
            TorchTensorRTModule,
        )

        ep, _ = _export(ShapeNumbers(), dynamic=True)
        recorded = extract_symbolic_shape_expressions(ep.graph_module)
        self.assertEqual(
            [o.get("is_scalar", False) for o in recorded["outputs"]],
            [False, True, True, True, True],
        )
        module = TorchTensorRTModule(
            name="m",
            input_binding_names=["x"],
            output_binding_names=[f"output{i}" for i in range(5)],
            symbolic_shape_expressions=recorded,
        )
        module.engine = object()
        x = torch.zeros(7, 8)
        third = torch.tensor(7 / 3, dtype=torch.float32)  # what the engine holds
        engine_outputs = [x * 2, third, torch.tensor(3), torch.tensor(True), third]
        read = []
        real_item = torch.Tensor.item

        def item(t):
            read.append(t)
            return real_item(t)

        with unittest.mock.patch.object(
            torch.ops.tensorrt,
            "execute_engine",
            lambda inputs, engine: list(engine_outputs),
            create=True,
        ), unittest.mock.patch.object(
            torch.Tensor, "is_cuda", True
        ), unittest.mock.patch.object(
            torch.Tensor, "item", item
        ):
            result = module(x)
            # the functions are made again from the records of a pickled module
            reloaded = pickle.loads(pickle.dumps(module._scalar_outputs))
            self.assertEqual(tuple(reloaded), (1, 2, 3, 4))
            self.assertEqual(
                reloaded.returned(engine_outputs, [x])[1:], list(result[1:])
            )
        self.assertEqual(read, [], "a number of the input shapes was read")
        eager = ShapeNumbers()(x)
        self.assertEqual([type(r) for r in result[1:]], [float, int, bool, float])
        self.assertEqual(result[1:], eager[1:])
        self.assertEqual(result[1], 2.3333333333333335)  # float32: 2.3333332538604736
        self.assertEqual(result[4], eager[4])

    def test_numbers_read_from_the_device_cost_one_synchronization(self):
        from torch_tensorrt.dynamo.runtime._number_outputs import (
            numbers_from_device,
        )

        class OnDevice:
            device = torch.device("cuda")

            def __init__(self, value):
                self.value = value

            def to(self, device, non_blocking=False):
                assert device == "cpu" and non_blocking
                return torch.tensor(self.value)

            def item(self):
                raise AssertionError("each .item() on the device synchronizes")

        synchronized = []
        stream = unittest.mock.Mock(synchronize=lambda: synchronized.append(1))
        with unittest.mock.patch.object(
            torch.cuda, "current_stream", return_value=stream
        ):
            values = numbers_from_device([OnDevice(4), OnDevice(2.5), OnDevice(True)])
        self.assertEqual(values, [4, 2.5, True])
        self.assertEqual(len(synchronized), 1)


class ShapeNumbers(torch.nn.Module):
    """Numbers that are functions of the input shapes, one a chain of floats."""

    def forward(self, x):
        y = x * 2
        n = y.shape[0]
        return y, n / 3, n // 2, n > 3, (n / 3) * 0.7 + 0.25


@unittest.skipIf(not torch.cuda.is_available(), "Running engines needs a CUDA device.")
class TestNumbersAsOutputsOnGpu(TestCase):
    """``compile()`` against eager at several input shapes, real engines."""

    def _check(self, model, dynamic):
        from torch_tensorrt.dynamo.runtime._TorchTensorRTModule import (
            TorchTensorRTModule,
        )

        ep, inputs = _export(model, dynamic)
        trt = torch_tensorrt.dynamo.compile(ep, arg_inputs=inputs, min_block_size=1)
        for rows in DYNAMIC_ROWS if dynamic else (12,):
            x = torch.randn(rows, 8, device="cuda")
            got, expected = trt(x), model(x)
            self.assertEqual(
                torch.utils._pytree.tree_structure(got),
                torch.utils._pytree.tree_structure(expected),
                msg=f"rows {rows}",
            )
            for g, e in zip(
                torch.utils._pytree.tree_leaves(got),
                torch.utils._pytree.tree_leaves(expected),
            ):
                self.assertEqual(type(g), type(e), msg=f"rows {rows}: {g!r} / {e!r}")
                self.assertEqual(g, e, msg=f"rows {rows}")
        # each engine's outputs have the ranks its record says
        engines = [m for m in trt.modules() if isinstance(m, TorchTensorRTModule)]
        self.assertTrue(engines)
        for engine in engines:
            shapes = getattr(engine.engine, "output_shapes", None)
            if shapes is None:
                continue  # the C++ engine does not expose them
            recorded = engine.symbolic_shape_expressions["outputs"]
            self.assertEqual(
                [len(s) for s in shapes[: len(recorded)]],
                [len(o["shape_exprs"]) for o in recorded],
            )

    def test_every_output_kind_against_eager(self):
        for model in NUMBER_MODELS:
            for dynamic in (False, True):
                with self.subTest(model.__name__, dynamic=dynamic):
                    self._check(model().cuda(), dynamic)


if __name__ == "__main__":
    run_tests()
