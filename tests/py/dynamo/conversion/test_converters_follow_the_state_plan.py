# type: ignore
"""The KV-cache layer's converters take the state plan's word.

``view_state_writes_in_kv_cache_form`` marks each write the state plan put on
``IKVCacheUpdateLayer`` (``KV_STATE_WRITE``). The ``slice_scatter`` and
``index_copy`` converters put exactly the marked writes on the layer: an
unmarked write is a scatter, however much it looks like a cache update, and a
marked one the layer cannot take is raised, naming the write and its state,
instead of being turned into a scatter behind the plan's back. Engines are
built by TensorRT-RTX on the CPU.
"""

import unittest

import torch
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt import Input
from torch_tensorrt.dynamo._settings import CompilationSettings
from torch_tensorrt.dynamo.conversion._TRTInterpreter import TRTInterpreter
from torch_tensorrt.dynamo.conversion.aten_ops_converters import (
    _index_copy_kv_eligible,
)
from torch_tensorrt.dynamo.conversion.impl._kv_cache_layer import KV_STATE_WRITE

from ..lowering.test_lower_auto_functionalized import CPU_BUILDER

CPU_ONLY = (
    "Building engines without a CUDA device needs TensorRT-RTX on a host without "
    "a GPU; on a GPU the plan's writes run with real engines: the generated state "
    "programs run by tools/fuzz/state_programs.py."
)


class WritesAProduct(torch.nn.Module):
    """A slab write in the layer's form, of a tensor computed in the engine."""

    def forward(self, x, u):
        return torch.ops.aten.slice_scatter.default(x * 2, u, 2, 3, 4)


def _graph(module, args):
    gm = torch.export.export(module, args).run_decompositions().module()
    for node in list(gm.graph.nodes):
        if node.op == "call_module":  # export's guards, not part of an engine
            gm.graph.erase_node(node)
    gm.recompile()
    return gm


class TestTheIndexCopyValidator(TestCase):
    def test_only_a_marked_write_goes_on_the_layer(self):
        graph = torch.fx.Graph()
        cache, index, source = (graph.placeholder(n) for n in ("cache", "i", "u"))
        cache.meta["val"] = torch.empty(1, 8, 16, 64)
        source.meta["val"] = torch.empty(1, 8, 1, 64)
        # what 2.14.0's validator took for a cache update: a 4-D float input
        # written at one position along axis 2
        write = graph.call_function(
            torch.ops.aten.index_copy.default, (cache, 2, index, source)
        )
        self.assertFalse(_index_copy_kv_eligible(write, None))
        write.meta[KV_STATE_WRITE] = True
        self.assertTrue(_index_copy_kv_eligible(write, None))


@unittest.skipIf(not CPU_BUILDER, CPU_ONLY)
class TestAMarkedWriteTheLayerCannotTake(TestCase):
    def test_it_is_raised_naming_the_write_and_its_state(self):
        args = (torch.randn(1, 2, 8, 4), torch.randn(1, 2, 1, 4))
        gm = _graph(WritesAProduct(), args)
        (write,) = [
            n
            for n in gm.graph.nodes
            if n.target is torch.ops.aten.slice_scatter.default
        ]
        write.meta[KV_STATE_WRITE] = True
        interpreter = TRTInterpreter(
            gm,
            [Input.from_tensor(a) for a in args],
            compilation_settings=CompilationSettings(),
        )
        with self.assertRaisesRegex(
            Exception,
            rf"The state plan put {write.name} of {write.args[0].name} on "
            "IKVCacheUpdateLayer, but its cache is not an engine input",
        ):
            interpreter.run()

    def test_unmarked_it_is_a_scatter(self):
        args = (torch.randn(1, 2, 8, 4), torch.randn(1, 2, 1, 4))
        interpreter = TRTInterpreter(
            _graph(WritesAProduct(), args),
            [Input.from_tensor(a) for a in args],
            compilation_settings=CompilationSettings(),
        )
        result = interpreter.run()
        self.assertEqual(result.aliased_io, {})


if __name__ == "__main__":
    run_tests()
