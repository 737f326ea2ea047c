"""``aten.index_copy`` converts at dynamic shapes (2.14.0's converter refused them).

Generated over ranks, the copy's axis and which axis is dynamic (seeded, logged):
a standalone engine holds every such ``index_copy`` (before, it refused the op as
having no converter for dynamic shapes), and on a GPU ``compile()``'s module returns
what eager returns at two sizes of the dynamic axis.
"""

import logging
import random
import unittest

import torch
import torch_tensorrt
from torch.export import Dim
from torch.testing._internal.common_utils import TestCase, run_tests

from ..lowering.test_lower_auto_functionalized import CPU_BUILDER

LOGGER = logging.getLogger(__name__)
SEED = 4240


class IndexCopy(torch.nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x, index, src):
        return torch.index_copy(x, self.dim, index, src) * 2


def _cases(count):
    """(rank, copy axis, dynamic axis, positions written); where the dynamic axis is
    the copy's own, every position is written (0: as many as the axis has)."""
    rng = random.Random(SEED)
    LOGGER.info("seed %d", SEED)
    cases = set()
    while len(cases) < count:
        rank = rng.choice((2, 3, 4))
        dim, dynamic = rng.randrange(rank), rng.randrange(rank)
        cases.add((rank, dim, dynamic, 0 if dim == dynamic else rng.choice((1, 2))))
    return sorted(cases)


def _arguments(rank, dim, dynamic, written, size, device):
    shape = [3] * rank
    shape[dynamic] = size
    src_shape = list(shape)
    src_shape[dim] = written or size
    index = torch.randperm(shape[dim], device=device)[: src_shape[dim]]
    return (
        torch.randn(shape, device=device),
        index,
        torch.randn(src_shape, device=device),
    )


def _input(t, axes):
    """``t`` as an Input whose ``axes`` range over 4 to 16."""

    def bound(v):
        return [v if a in axes else s for a, s in enumerate(t.shape)]

    return torch_tensorrt.Input(
        min_shape=bound(4), opt_shape=list(t.shape), max_shape=bound(16), dtype=t.dtype
    )


def _export(rank, dim, dynamic, written, device):
    args = _arguments(rank, dim, dynamic, written, 8, device)
    axes = ({dynamic}, {0} if written == 0 else set(), {dynamic})
    size = Dim("size", min=4, max=16)
    shapes = tuple({a: size for a in ax} or None for ax in axes)
    ep = torch.export.export(IndexCopy(dim), args, dynamic_shapes=shapes)
    return ep, [_input(t, ax) for t, ax in zip(args, axes)]


@unittest.skipUnless(
    torch.cuda.is_available() or CPU_BUILDER,
    "Building an engine needs a CUDA device, or TensorRT-RTX on a host without one.",
)
class TestStandaloneEngine(TestCase):
    def test_generated_index_copies_are_converted(self):
        device = "cuda" if torch.cuda.is_available() else "cpu"
        for rank, dim, dynamic, written in _cases(10):
            with self.subTest(rank=rank, dim=dim, dynamic=dynamic, written=written):
                ep, inputs = _export(rank, dim, dynamic, written, device)
                engine = torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                    ep, arg_inputs=inputs, min_block_size=1
                )
                self.assertGreater(len(engine), 0)


@unittest.skipUnless(
    torch.cuda.is_available(), "compile() runs its engines on a CUDA device."
)
class TestCompileOnGpu(TestCase):
    def test_generated_index_copies_match_eager(self):
        for rank, dim, dynamic, written in _cases(10):
            with self.subTest(rank=rank, dim=dim, dynamic=dynamic, written=written):
                ep, inputs = _export(rank, dim, dynamic, written, "cuda")
                compiled = torch_tensorrt.dynamo.compile(
                    ep, arg_inputs=inputs, min_block_size=1
                )
                for size in (5, 12):
                    args = _arguments(rank, dim, dynamic, written, size, "cuda")
                    self.assertEqual(compiled(*args), IndexCopy(dim)(*args))


if __name__ == "__main__":
    run_tests()
