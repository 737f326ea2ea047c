# type: ignore
"""A size of a graph input is computed next to each of its users.

A start taken from a prefix's length (``t = q.shape[1]``) and used after a
custom op that PyTorch runs was computed before the op and handed to the
engine after it as a shape-tensor input, which TensorRT-RTX failed to build
("setShapeInterval was not called for tensor"; compile() raised "engine
build failed"). Each user now computes the size itself, from the graph input,
and an engine that takes a size as a number from an earlier engine (the
partitioner places a size as soon as its input is ready) computes it itself.
"""

import unittest

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo._settings import CompilationSettings
from torch_tensorrt.dynamo.lowering.passes.sizes_next_to_their_users import (
    sizes_next_to_their_users,
)

from .test_compile_with_stand_in_engines import engines_built_execution_stood_in
from .test_lower_auto_functionalized import CPU_BUILDER

CPU_ONLY = (
    "Building engines without a CUDA device needs TensorRT-RTX on a host without "
    "a GPU; on a GPU the same programs run with real engines: the generated state programs run by tools/fuzz/state_programs.py."
)


@torch.library.custom_op("trt_sizes::bump_", mutates_args=("x",))
def bump_(x: torch.Tensor) -> None:
    x.add_(2)


@bump_.register_fake
def _(x):
    return None


class StartUsedAfterAnOpInPyTorch(torch.nn.Module):
    def forward(self, s, u, v, q):
        t = q.shape[1]
        s[:, t : t + 1] = u
        torch.ops.trt_sizes.bump_(s)
        s[:, t + 1 : t + 2] = v
        return s.sum(dim=1)


class SizesReadyBeforeAnOpInPyTorch(torch.nn.Module):
    # the partitioner puts the second size into the first engine, as soon as its
    # graph input is ready (generated state program 11785)
    def forward(self, s, u, v, q, r):
        s.add_(1)
        torch.ops.trt_sizes.bump_(s)
        t = q.shape[1]
        s[:, t : t + 1] = u
        w = r.shape[1]
        s[:, w : w + 1] = v
        return s.sum(dim=1)


def _args(length):
    return (
        torch.arange(32.0).reshape(1, 8, 4),
        torch.full((1, 1, 4), -1.0),
        torch.full((1, 1, 4), -2.0),
        torch.zeros(1, length),
    )


class TestThePass(TestCase):
    def test_each_user_gets_its_own_size(self):
        graph = torch.fx.Graph()
        q, x = graph.placeholder("q"), graph.placeholder("x")
        size = graph.call_function(torch.ops.aten.sym_size.int, (q, 1))
        end = graph.call_function(__import__("operator").add, (size, 1))
        first = graph.call_function(torch.ops.aten.slice.Tensor, (x, 0, size, end))
        second = graph.call_function(torch.ops.aten.slice.Tensor, (x, 0, 0, size))
        graph.output((first, second))
        gm = sizes_next_to_their_users(
            torch.fx.GraphModule(torch.nn.Module(), graph), CompilationSettings()
        )
        sizes = [n for n in gm.graph.nodes if n.target is torch.ops.aten.sym_size.int]
        self.assertEqual(len(sizes), 2)
        users = [next(iter(s.users)) for s in sizes]
        self.assertEqual(len(set(users)), 2)


@unittest.skipIf(not CPU_BUILDER, CPU_ONLY)
class TestCompile(TestCase):
    def _matches_eager(self, model, args, lengths):
        """``args(length)``: prefixes of that length and the next (dims 3, 4 on)."""
        length = torch.export.Dim("length", min=2, max=5)
        dims = ({1: length}, {1: length + 1})[: len(args(2)) - 3]
        ep = torch.export.export(model, args(2), dynamic_shapes=(None,) * 3 + dims)
        inputs = list(args(2))[:3] + [
            torch_tensorrt.Input(
                min_shape=(1, n), opt_shape=(1, n), max_shape=(1, n + 3)
            )
            for n in (2, 3)[: len(dims)]
        ]
        with engines_built_execution_stood_in():
            trt = torch_tensorrt.dynamo.compile(ep, arg_inputs=inputs, min_block_size=1)
        for n in lengths:
            compiled, eager = args(n), args(n)
            self.assertEqual(trt(*compiled), type(model)()(*eager))
            self.assertEqual(compiled[0], eager[0], msg=f"length {n}")

    def test_a_start_used_after_an_op_pytorch_runs(self):
        self._matches_eager(StartUsedAfterAnOpInPyTorch(), _args, (2, 4, 5))

    def test_a_size_the_partitioner_put_into_an_earlier_engine(self):
        args = lambda n: _args(n) + (torch.zeros(1, n + 1),)
        self._matches_eager(SizesReadyBeforeAnOpInPyTorch(), args, (2, 3, 5))


if __name__ == "__main__":
    run_tests()
