# type: ignore
"""A state an engine writes in place is not copied onto itself after the engine.

``compile()``'s module wrote every new state value back (``aten.copy_``): in its
graph, in a PyTorch submodule or in the code that writes a lifted buffer back.
For a state the engine wrote in place the value is the state's own tensor, so
that was one copy onto itself, one dispatch per state, on every call. A state
copied back keeps its write-back, every written state stays known as written
(the argument check, the whole-graph CUDA-graph wrapper), and a caller's tensor
the engine did not write directly (moved to the device; on the C++ runtime, not
contiguous) receives what the engine wrote.

Engines are built by TensorRT-RTX on the CPU and their execution stood in.
"""

import unittest

import torch
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo.conversion._functionalized_op import is_write_back
from torch_tensorrt.dynamo.runtime._in_place_outputs import (
    callers_tensors_written,
    in_place_outputs,
    with_inputs_written_in_place,
)
from torch_tensorrt.dynamo.runtime._input_mutations import (
    mutated_buffers,
    mutated_inputs,
)

from ..lowering.test_compile_with_stand_in_engines import compile_on_cpu
from ..lowering.test_lower_auto_functionalized import (
    CPU_BUILDER,
    NEEDS_CPU_BUILDER,
)

ALIASED = {"state_new": ("state", "user")}
CACHE = (1, 2, 16, 8)
UPDATE = (1, 2, 1, 8)


class WritesInputStates(torch.nn.Module):
    """KV-cache steps on two input states: the engine writes both in place."""

    def forward(self, pos, u, k, v):
        k.index_copy_(2, pos, u)
        v.index_copy_(2, pos, u * 2)
        return u + 1


class WritesBufferStates(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("k", torch.zeros(CACHE))
        self.register_buffer("v", torch.zeros(CACHE))

    def forward(self, pos, u):
        self.k.index_copy_(2, pos, u)
        self.v.index_copy_(2, pos, u * 2)
        return u + 1


class InPlaceAndCopied(torch.nn.Module):
    """``k`` written in place; ``s`` written by an op the layer does not take."""

    def forward(self, pos, u, k, s):
        k.index_copy_(2, pos, u)
        s.mul_(2)
        return u + 1


class WritesOnlyItsState(torch.nn.Module):
    """Returns nothing: the engine's one output is the state it writes in place."""

    def forward(self, pos, u, k):
        k.index_copy_(2, pos, u)


def _write_backs(gm):
    """Write-backs in ``gm``'s graph and in its PyTorch submodules."""
    found = [n for n in gm.graph.nodes if is_write_back(n)]
    for _name, sub in gm.named_children():
        if isinstance(sub, torch.fx.GraphModule):
            found += _write_backs(sub)
    return found


def _arguments():
    return (torch.tensor([3]), torch.randn(UPDATE))


@unittest.skipIf(not CPU_BUILDER, NEEDS_CPU_BUILDER)
class TestNoCopyOntoItself(TestCase):
    def _three_calls_against_eager(self, trt, eager, make_states):
        states, eager_states = make_states(), make_states()
        for step in range(3):
            pos, u = torch.tensor([step]), torch.randn(UPDATE)
            out = trt(pos, u, *states)
            expected = eager(pos, u, *eager_states)
            self.assertEqual(out, expected)
            for got, want in zip(states, eager_states):
                self.assertEqual(got, want)

    def test_input_states_written_in_place_have_no_write_back(self):
        model = WritesInputStates()
        args = _arguments() + (torch.zeros(CACHE), torch.zeros(CACHE))
        trt, built = compile_on_cpu(self, model, args)
        self.assertEqual(len(built), 1)
        self.assertEqual(len(built[0].aliased_io), 2, msg="the engine writes both")
        self.assertEqual(_write_backs(trt), [])
        self.assertNotIn("copy_", trt.code)
        # still known as written: the check and the CUDA-graph wrapper use it
        self.assertEqual(mutated_inputs(trt), [2, 3])
        self._three_calls_against_eager(
            trt, WritesInputStates(), lambda: [torch.zeros(CACHE), torch.zeros(CACHE)]
        )

    def test_an_engine_whose_one_output_is_the_state_it_writes(self):
        # its module returns that output bare, not in a tuple
        args = _arguments() + (torch.zeros(CACHE),)
        trt, built = compile_on_cpu(self, WritesOnlyItsState(), args)
        self.assertEqual(len(built[0].aliased_io), 1)
        self.assertEqual(_write_backs(trt), [])
        modules = [n.target for n in trt.graph.nodes if n.op == "call_module"]
        self.assertEqual(modules, [built[0].name])
        self._three_calls_against_eager(
            trt, WritesOnlyItsState(), lambda: [torch.zeros(CACHE)]
        )

    def test_a_state_copied_back_keeps_its_write_back(self):
        model = InPlaceAndCopied()
        args = _arguments() + (torch.zeros(CACHE), torch.ones(3))
        trt, built = compile_on_cpu(self, model, args)
        self.assertEqual(
            sorted(a for a, _ in built[0].aliased_io.values()), ["k"], msg="k alone"
        )
        written = [str(n.args[0]) for n in _write_backs(trt)]
        self.assertEqual(len(written), 1, msg=f"write-backs: {written}")
        self.assertEqual(mutated_inputs(trt), [2, 3])
        self._three_calls_against_eager(
            trt, InPlaceAndCopied(), lambda: [torch.zeros(CACHE), torch.ones(3)]
        )

    def test_buffers_written_in_place_are_not_copied_onto_themselves(self):
        model = WritesBufferStates()
        trt, built = compile_on_cpu(self, model, _arguments())
        self.assertEqual(len(built[0].aliased_io), 2)
        self.assertNotIn(".copy_(", trt.code)
        self.assertEqual(mutated_buffers(trt), ["k", "v"])
        eager = WritesBufferStates()
        for step in range(3):
            pos, u = torch.tensor([step]), torch.randn(UPDATE)
            self.assertEqual(trt(pos, u), eager(pos, u))
            self.assertEqual(trt.k, eager.k)
            self.assertEqual(trt.v, eager.v)


class TestTheCallersTensors(TestCase):
    def test_a_moved_input_receives_what_the_engine_wrote(self):
        state = torch.zeros(4)
        written = in_place_outputs(["state_new"], ["state"], ALIASED)
        moved = torch.full((4,), 3.0)  # the tensor the engine was bound to
        again = with_inputs_written_in_place([], [state], written, [moved])
        self.assertIs(again[0], state)
        self.assertEqual(state, torch.full((4,), 3.0))

    def test_the_cpp_runtimes_outputs_become_the_callers_tensors(self):
        state = torch.zeros(3, 4)
        transposed = torch.zeros(4, 3).t()  # the C++ runtime binds a copy
        written = ((0, 0), (1, 1))
        view = state.view(3, 4)  # a contiguous input comes back as a view
        copy = transposed.contiguous() + 5
        result = callers_tensors_written([view, copy], [state, transposed], written)
        self.assertIs(result[0], state)
        self.assertIs(result[1], transposed)
        self.assertEqual(transposed, torch.full((3, 4), 5.0))


if __name__ == "__main__":
    run_tests()
