"""``state.copy_(src)`` keeps the state's dtype and shape through lowering.

torch's decompositions take the source of a ``copy_`` that overwrites a whole
graph input as the input's new value, without converting it to the input's dtype
or broadcasting it to the input's shape (a bfloat16 buffer reset from float32
became float32, and every later read of it). Generated over destination kinds
(a buffer, a user input), dtypes and source shapes: the lowered program, run in
PyTorch, returns what eager returns (values, dtypes, shapes) and leaves each state
as eager leaves it; an engine built from such a program takes the eager dtypes
for its outputs and its state's new value.
"""

import itertools
import logging
import random
import unittest
import unittest.mock

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo._settings import CompilationSettings
from torch_tensorrt.dynamo.lowering import get_decompositions
from torch_tensorrt.dynamo.lowering.passes._aten_lowering_pass import (
    pre_export_lowering,
)

from .test_lower_auto_functionalized import CPU_BUILDER

LOGGER = logging.getLogger(__name__)
SEED = 4240
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int32)
STATE_SHAPE = (4, 8)
SOURCE_SHAPES = {"same": (4, 8), "row": (8,), "column": (4, 1), "scalar": ()}


def _tensor(shape, dtype, gen):
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    return torch.randint(-8, 8, shape, generator=gen).to(dtype)


class BufferReset(torch.nn.Module):
    """Writes part of a buffer, reads it, resets it by copy_, reads it again."""

    def __init__(self, dtype):
        super().__init__()
        self.register_buffer("state", torch.zeros(STATE_SHAPE, dtype=dtype))

    def forward(self, src, part):
        self.state[:, ::2] = part
        before = self.state * 2
        self.state.copy_(src)
        return before, self.state + 1, self.state.sum(-1)


class InputReset(torch.nn.Module):
    """Resets an input by copy_ and returns what it reads after."""

    def forward(self, state, src):
        state.copy_(src)
        return state * 3, state.sum()


def _cases():
    """(kind, state dtype, source dtype, source shape name, inputs), seeded."""
    gen = torch.Generator().manual_seed(SEED)
    rng = random.Random(SEED)
    LOGGER.info("generated copy_ cases from seed %d", SEED)
    for kind, dst, src, shape in itertools.product(
        ("buffer", "input"), DTYPES, DTYPES, SOURCE_SHAPES
    ):
        if rng.random() < 0.5 and dst != src and shape != "same":
            continue  # half of the mixed cases: every pair still meets each shape
        source = _tensor(SOURCE_SHAPES[shape], src, gen)
        if kind == "buffer":
            inputs = (source, _tensor((4, 4), dst, gen))
        else:
            inputs = (_tensor(STATE_SHAPE, dst, gen), source)
        yield kind, dst, src, shape, inputs


def _model(kind, dst):
    return BufferReset(dst) if kind == "buffer" else InputReset()


def _clone(inputs):
    return tuple(t.clone() for t in inputs)


def _lowered(model, inputs):
    """The exported program after the lowering before and the decompositions."""
    ep = torch.export.export(model, _clone(inputs))
    ep = pre_export_lowering(ep, CompilationSettings())
    return ep.run_decompositions(get_decompositions(False))


def _states(kind, module, inputs):
    return [module.state] if kind == "buffer" else [inputs[0]]


class TestLoweredProgramMatchesEager(TestCase):
    def test_generated_copies(self):
        count = 0
        for kind, dst, src, shape, inputs in _cases():
            with self.subTest(kind=kind, state=dst, source=src, shape=shape):
                eager, lowered = _model(kind, dst), _lowered(_model(kind, dst), inputs)
                module = lowered.module()
                eager_inputs, lowered_inputs = _clone(inputs), _clone(inputs)
                expected = eager(*eager_inputs)
                got = module(*lowered_inputs)
                self.assertEqual(len(got), len(expected))
                for g, e in zip(got, expected):
                    self.assertEqual(g.dtype, e.dtype)
                    self.assertEqual(g.shape, e.shape)
                    self.assertEqual(g, e)  # a sum may add in another order
                for g, e in zip(
                    _states(kind, module, lowered_inputs),
                    _states(kind, eager, eager_inputs),
                ):
                    self.assertEqual(g.dtype, e.dtype)
                    self.assertEqual(g, e, atol=0, rtol=0)
                count += 1
        self.assertGreater(count, 60)

    def test_only_a_differing_source_is_converted(self):
        """The rewrite adds a conversion for a dtype and a broadcast for a shape
        that differ, and nothing for a source that matches."""

        def added(src_dtype, shape):
            model = InputReset()
            inputs = (
                torch.zeros(STATE_SHAPE),
                torch.zeros(SOURCE_SHAPES[shape], dtype=src_dtype),
            )
            ep = torch.export.export(model, inputs)
            targets = [n.target for n in ep.graph.nodes]
            pre_export_lowering(ep, CompilationSettings())
            after = [n.target for n in ep.graph.nodes]
            return [t for t in after if t not in targets]

        self.assertEqual(added(torch.float32, "same"), [])
        self.assertEqual(
            added(torch.bfloat16, "same"), [torch.ops.aten._to_copy.default]
        )
        self.assertEqual(added(torch.float32, "row"), [torch.ops.aten.expand.default])
        self.assertEqual(
            added(torch.float16, "scalar"),
            [torch.ops.aten._to_copy.default, torch.ops.aten.expand.default],
        )


@unittest.skipUnless(
    torch.cuda.is_available() or CPU_BUILDER,
    "Building an engine needs a CUDA device, or TensorRT-RTX on a host without one.",
)
class TestEngineDtypes(TestCase):
    """A standalone engine's outputs, the state's new value included, have eager's
    dtypes (a bfloat16 input reset from a float32 row)."""

    def test_a_bfloat16_input_reset_from_float32(self):
        import tensorrt as trt

        device = "cuda" if torch.cuda.is_available() else "cpu"
        inputs = (
            torch.randn(STATE_SHAPE, device=device).bfloat16(),
            torch.randn(STATE_SHAPE[-1:], device=device),
        )
        expected = [t.dtype for t in InputReset()(*_clone(inputs))]
        marked = []
        mark_output = trt.INetworkDefinition.mark_output

        def recording(network, tensor):
            marked.append((tensor.name, tensor.dtype))
            return mark_output(network, tensor)

        ep = torch.export.export(InputReset(), _clone(inputs))
        with unittest.mock.patch.object(
            trt.INetworkDefinition, "mark_output", recording
        ):
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep, arg_inputs=list(inputs), min_block_size=1
            )
        dtypes = dict(marked)
        self.assertEqual(
            [dtypes["output0"], dtypes["output1"]],
            [torch_tensorrt.dtype._from(d).to(trt.DataType) for d in expected],
        )
        self.assertEqual(dtypes["state_new"], trt.DataType.BF16)


@unittest.skipUnless(
    torch.cuda.is_available(), "compile() runs its engines on a CUDA device."
)
class TestCompileOnGpu(TestCase):
    """compile()'s module of a buffer reset by copy_ returns eager's outputs and
    dtypes, for each state dtype from a float32 or int32 source (the buffer's value
    across calls is the buffer-state tests' to check)."""

    def test_buffer_resets(self):
        gen = torch.Generator().manual_seed(SEED)
        for dst, src, shape in itertools.product(
            DTYPES, (torch.float32, torch.int32), ("same", "row")
        ):
            with self.subTest(state=dst, source=src, shape=shape):
                args = (
                    _tensor(SOURCE_SHAPES[shape], src, gen).cuda(),
                    _tensor((4, 4), dst, gen).cuda(),
                )
                expected = BufferReset(dst).cuda()(*_clone(args))
                ep = torch.export.export(BufferReset(dst).cuda(), _clone(args))
                compiled = torch_tensorrt.dynamo.compile(
                    ep, arg_inputs=list(args), min_block_size=1
                )
                got = compiled(*_clone(args))
                for g, e in zip(got, expected):
                    self.assertEqual(g.dtype, e.dtype)
                    self.assertEqual(g, e, atol=2e-2, rtol=2e-2)


if __name__ == "__main__":
    run_tests()
