# type: ignore
"""An engine has one output of its own for each output of its graph.

TensorRT marks a tensor as a network output once, and never a network input.
Two graph outputs can be one tensor when a converter returns its input's
tensor (``clone``, ``alias``): a snapshot returned beside the value it copies
gave the engine one output for the graph's two (the runtime then indexed past
its results: "index 1 is out of bounds"). A graph output that is an input (a
buffer overwritten from an input, ``self.buf.copy_(z)``) failed to be marked:
"Failed attempt to set a tensor ... as network-level output. It was previously
set as a network-level input". Each such output is now an identity layer's, a
copy, the node that made the tensor too (left the tensor itself beside three
copies of it, TensorRT-RTX 1.6 gave it a wrong value on an H100); the same node
returned twice stays one output. Engines are built by TensorRT-RTX on the CPU,
and run on a GPU in ``TestOnGpu``.
"""

import unittest
import unittest.mock

import torch
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo.conversion._TRTInterpreter import TRTInterpreter

from ..lowering.test_lower_auto_functionalized import (
    CPU_BUILDER,
    _build_engine,
)

CPU_ONLY = (
    "Building engines without a CUDA device needs TensorRT-RTX on a host without "
    "a GPU; on a GPU the same programs run with real engines: the generated state programs run by tools/fuzz/state_programs.py."
)


class SnapshotBesideItsValue(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        return y, y.clone()


class InputReturned(torch.nn.Module):
    def forward(self, x, z):
        return x * 2, z


class SameNodeTwice(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        return y, y


class OverwrittenFromAnInput(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(1, 4, 16, 8))

    def forward(self, z):
        self.buf.copy_(z)
        return z * 2


class SnapshotsOfAWrittenState(torch.nn.Module):
    """Generated state program 16491's form: its state came back wrong."""

    def forward(self, s, u, p):
        s.index_copy_(2, p, u)
        s.add_(1)
        return s.clone(), s.clone(), s.clone()


def _state_inputs():
    g = torch.Generator().manual_seed(16491)
    print("seed 16491")
    return (
        torch.randn(1, 2, 16, 4, generator=g),
        torch.randn(1, 2, 1, 4, generator=g),
        torch.tensor([5]),
    )


@unittest.skipIf(not CPU_BUILDER, CPU_ONLY)
class TestOneOutputPerGraphOutput(TestCase):
    def test_every_output_of_a_shared_tensor_is_a_copy(self):
        seen = []
        real = TRTInterpreter._one_tensor_per_output

        def spy(interpreter, outputs, fx_outputs):
            seen.append((outputs, real(interpreter, outputs, fx_outputs)))
            return seen[-1][1]

        with unittest.mock.patch.object(TRTInterpreter, "_one_tensor_per_output", spy):
            _, _, result = _build_engine(
                SnapshotsOfAWrittenState(), _state_inputs(), min_block_size=1
            )
        # the three snapshots and the state's new value (beside an output the
        # KV-cache layer may append, aliased to the state)
        returned = [n for n in result.output_names if n not in result.aliased_io]
        self.assertEqual(len(returned), 4)
        ((outputs, separated),) = seen
        left = [i for i, (o, t) in enumerate(zip(outputs, separated)) if t is o]
        self.assertEqual(left, [], "an output left the shared tensor itself")

    def test_a_snapshot_is_an_output_of_its_own(self):
        _, gm, result = _build_engine(
            SnapshotBesideItsValue(), (torch.randn(2, 3),), min_block_size=1
        )
        self.assertEqual(len(result.output_names), 2)

    def test_an_input_returned_is_an_output_of_its_own(self):
        _, _, result = _build_engine(
            InputReturned(), (torch.randn(2, 3), torch.randn(2, 3)), min_block_size=1
        )
        self.assertEqual(len(result.output_names), 2)
        self.assertEqual(len(set(result.output_names) & set(result.input_names)), 0)

    def test_a_buffer_overwritten_from_an_input(self):
        with self.assertLogs(level="DEBUG") as logs:
            _, _, result = _build_engine(
                OverwrittenFromAnInput(),
                (torch.randn(1, 4, 16, 8),),
                min_block_size=1,
                lift_mutable_buffers=True,
            )
        # TensorRT refused to mark the input as an output, and the build went on
        self.assertFalse([line for line in logs.output if "markOutput" in line])
        self.assertEqual(result.output_names[1:], ["buf_buf_new"])
        # the new value is an output of its own, not the input renamed
        self.assertEqual(result.input_names, ["z", "buf_buf"])
        self.assertEqual(set(result.output_names) & set(result.input_names), set())

    def test_the_same_node_twice_stays_one_output(self):
        _, _, result = _build_engine(
            SameNodeTwice(), (torch.randn(2, 3),), min_block_size=1
        )
        self.assertEqual(len(result.output_names), 1)


@unittest.skipIf(
    not torch.cuda.is_available(), "Running TensorRT engines needs a CUDA device"
)
class TestOnGpu(TestCase):
    def test_snapshots_of_a_written_state_against_eager(self):
        import torch_tensorrt

        inputs = [t.cuda() for t in _state_inputs()]
        ep = torch.export.export(SnapshotsOfAWrittenState(), tuple(inputs))
        compiled = torch_tensorrt.dynamo.compile(
            ep, arg_inputs=inputs, min_block_size=1
        )
        eager_state, state = inputs[0].clone(), inputs[0].clone()
        expected = SnapshotsOfAWrittenState()(eager_state, *inputs[1:])
        got = compiled(state, *inputs[1:])
        for k, (e, g) in enumerate(zip(expected, got)):
            torch.testing.assert_close(g, e, msg=f"snapshot {k}")
        torch.testing.assert_close(state, eager_state, msg="the state")


if __name__ == "__main__":
    run_tests()
