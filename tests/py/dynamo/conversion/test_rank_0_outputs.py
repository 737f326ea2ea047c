# type: ignore
"""A rank-0 tensor output of the graph is a rank-0 engine output.

Converters often give a rank-0 value as a shape ``[1]`` tensor (an element
taken with ``select``, ``pos[-1] + 1``). Marked as it was, the engine output had
rank 1 where the graph's value has rank 0, and ``compile()``'s module, copying
the new value of a rank-0 state back (HuggingFace's ``cumulative_length``
counters), failed on every call: "output with shape [] doesn't match the
broadcast shape [1]". The network's outputs are read from the real TensorRT
network the interpreter marks.
"""

import unittest
import unittest.mock

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests

from ..lowering.test_lower_auto_functionalized import (
    CPU_BUILDER,
    NEEDS_CPU_BUILDER,
)


class Counter(torch.nn.Module):
    """Keeps the position after the last one written, as HuggingFace's cache does."""

    def __init__(self):
        super().__init__()
        self.register_buffer("length", torch.zeros((), dtype=torch.int64))

    def forward(self, pos, x):
        self.length.copy_(pos[-1] + 1)
        return x * 2


class ReturnsAnElement(torch.nn.Module):
    def forward(self, pos, x):
        return x * 2, pos[-1] + 1


def _network_output_ranks(module, **kwargs):
    from torch_tensorrt.dynamo.conversion._TRTInterpreter import TRTInterpreter

    seen = {}
    real_output = TRTInterpreter.output

    def output(self, target, args, kw):
        marked = real_output(self, target, args, kw)
        seen["ranks"] = [len(t.shape) for t in marked]
        return marked

    args = (torch.tensor([0, 1, 2]), torch.ones(2, 3))
    ep = torch.export.export(module, args)
    with unittest.mock.patch.object(TRTInterpreter, "output", output):
        torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
            ep, arg_inputs=list(args), min_block_size=1, **kwargs
        )
    return seen["ranks"]


@unittest.skipIf(not CPU_BUILDER, NEEDS_CPU_BUILDER)
class TestRank0Outputs(TestCase):
    def test_a_rank_0_state_s_new_value(self):
        ranks = _network_output_ranks(Counter(), lift_mutable_buffers=True)
        self.assertEqual(ranks, [2, 0])

    def test_a_returned_element(self):
        self.assertEqual(_network_output_ranks(ReturnsAnElement()), [2, 0])


if __name__ == "__main__":
    run_tests()
