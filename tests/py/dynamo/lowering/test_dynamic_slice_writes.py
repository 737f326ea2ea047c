# type: ignore
"""Slice writes at starts known only at run time (a prefix's length).

The last such write of a state goes on IKVCacheUpdateLayer; an earlier one is
decomposed into a scatter (``decompose_dynamic_slice_scatter``), which lost
its result's metadata, so the next write of the same state was skipped by the
decomposition and reached the converter, which raised "slice_scatter with
dynamic start/end/step is not yet supported" and failed the build. Now the
decomposition keeps the metadata, and a slice write with run-time bounds that
is not a planned state update is not the converter's (compile() runs it in
PyTorch; a standalone engine names it).
"""

import unittest

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo.conversion.impl._kv_cache_layer import KV_STATE_WRITE

from .test_compile_with_stand_in_engines import engines_built_execution_stood_in
from .test_lower_auto_functionalized import CPU_BUILDER

CPU_ONLY = (
    "Building engines without a CUDA device needs TensorRT-RTX on a host without "
    "a GPU; on a GPU the same programs run with real engines: the generated state programs run by tools/fuzz/state_programs.py."
)


class TwoWritesAtRunTimeStarts(torch.nn.Module):
    def forward(self, s, u, q, v, r):
        a = q.shape[1]
        s[:, :, a : a + 1] = u
        b = r.shape[1]
        s[:, :, b : b + 1] = v
        return s.sum(dim=1)


def _args(a, b):
    g = torch.Generator().manual_seed(a * 10 + b)
    return (
        torch.randn(2, 2, 8, 4, generator=g),
        torch.randn(2, 2, 1, 4, generator=g),
        torch.zeros(1, a),
        torch.randn(2, 2, 1, 4, generator=g),
        torch.zeros(1, b),
    )


def _export():
    dims = {
        "q": {1: torch.export.Dim("a", min=2, max=7)},
        "r": {1: torch.export.Dim("b", min=2, max=7)},
    }
    ep = torch.export.export(
        TwoWritesAtRunTimeStarts(),
        _args(2, 3),
        dynamic_shapes=(None, None, dims["q"], None, dims["r"]),
    )
    inputs = list(_args(2, 3))
    inputs[2] = torch_tensorrt.Input(
        min_shape=(1, 2), opt_shape=(1, 2), max_shape=(1, 7), dtype=torch.float32
    )
    inputs[4] = torch_tensorrt.Input(
        min_shape=(1, 2), opt_shape=(1, 3), max_shape=(1, 7), dtype=torch.float32
    )
    return ep, inputs


@unittest.skipIf(not CPU_BUILDER, CPU_ONLY)
class TestTwoWritesAtRunTimeStarts(TestCase):
    def test_compile_matches_eager(self):
        ep, inputs = _export()
        with engines_built_execution_stood_in():
            trt = torch_tensorrt.dynamo.compile(ep, arg_inputs=inputs, min_block_size=1)
        for a, b in ((2, 3), (5, 2), (7, 7)):
            compiled, eager = _args(a, b), _args(a, b)
            self.assertEqual(trt(*compiled), TwoWritesAtRunTimeStarts()(*eager))
            self.assertEqual(compiled[0], eager[0], msg=f"state, starts {a}, {b}")

    def test_a_standalone_engine_builds(self):
        ep, inputs = _export()
        engine = (
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep, arg_inputs=inputs, min_block_size=1
            )
        )
        self.assertGreater(len(engine), 0)


class TestTheConverterTakesRunTimeBoundsOnTheLayerOnly(TestCase):
    def test_the_validator(self):
        graph = torch.fx.Graph()
        s, u, q = (graph.placeholder(n) for n in "suq")
        start = graph.call_function(torch.ops.aten.sym_size.int, (q, 1))
        static = graph.call_function(
            torch.ops.aten.slice_scatter.default, (s, u, 2, 3, 4)
        )
        dynamic = graph.call_function(
            torch.ops.aten.slice_scatter.default, (s, u, 2, start, 9)
        )
        from torch_tensorrt.dynamo.conversion.aten_ops_converters import (
            _slice_scatter_bounds_supported as validator,
        )

        self.assertTrue(validator(static, None))
        self.assertFalse(validator(dynamic, None))
        dynamic.meta[KV_STATE_WRITE] = True
        self.assertTrue(validator(dynamic, None))


if __name__ == "__main__":
    run_tests()
