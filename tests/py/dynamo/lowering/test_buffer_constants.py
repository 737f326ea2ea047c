# type: ignore
"""A lifted constant that is a buffer's own tensor is folded into the buffer.

The model below reaches its buffer through a plain Python object as well, as
HuggingFace's static cache does: non-strict ``torch.export`` lifts what it
reaches that way as a constant aliasing the buffer, and the write goes to the
constant. Without the fold, ``run_decompositions`` fails ("expected compiled_fn
to be GraphModule"), in ``compile()`` and in
``convert_exported_program_to_serialized_trt_engine`` alike.
"""

import json
import os
import tempfile
import unittest

import torch
import torch_tensorrt
from torch.export.graph_signature import InputKind, OutputKind
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo.lowering._buffer_constants import (
    fold_constants_aliasing_buffers,
)

from .test_compile_with_stand_in_engines import (
    engines_built_execution_stood_in,
)
from .test_lower_auto_functionalized import (
    CPU_BUILDER,
    NEEDS_CPU_BUILDER,
)

CACHE = (1, 2, 8, 4)


class Holder:
    """Not a module: what it holds is not module state to ``torch.export``."""


class WritesThroughAnotherObject(torch.nn.Module):
    def __init__(self, part=False):
        super().__init__()
        self.register_buffer("cache", torch.zeros(CACHE), persistent=False)
        self.holder = Holder()
        # the buffer's tensor itself, or only a part of it
        self.holder.t = self.cache[:, :1] if part else self.cache

    def forward(self, pos, u):
        self.holder.t.index_copy_(2, pos, u[:, : self.holder.t.shape[1]])
        return u + 1


def _args():
    return (torch.tensor([1]), torch.ones(1, 2, 1, 4))


def _export(module):
    return torch.export.export(module, _args(), strict=False)


def _kinds(ep):
    return [(s.kind, s.target) for s in ep.graph_signature.input_specs]


class TestTheFold(TestCase):
    def test_the_constant_becomes_the_buffer(self):
        ep = _export(WritesThroughAnotherObject())
        constants = [t for k, t in _kinds(ep) if k == InputKind.CONSTANT_TENSOR]
        self.assertEqual(len(constants), 1, msg="export lifts the alias as a constant")
        self.assertEqual(fold_constants_aliasing_buffers(ep), [(constants[0], "cache")])
        self.assertNotIn(InputKind.CONSTANT_TENSOR, [k for k, _ in _kinds(ep)])
        self.assertNotIn(constants[0], ep.constants)
        # the write is now a mutation of the buffer
        ep = ep.run_decompositions()
        mutated = [
            s.target
            for s in ep.graph_signature.output_specs
            if s.kind == OutputKind.BUFFER_MUTATION
        ]
        self.assertEqual(mutated, ["cache"])

    def test_a_part_of_a_buffer_is_left_as_it_is(self):
        ep = _export(WritesThroughAnotherObject(part=True))
        before = _kinds(ep)
        self.assertEqual(fold_constants_aliasing_buffers(ep), [])
        self.assertEqual(_kinds(ep), before)

    def test_nothing_to_fold(self):
        class Plain(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("cache", torch.zeros(CACHE))

            def forward(self, pos, u):
                self.cache.index_copy_(2, pos, u)
                return u + 1

        ep = _export(Plain())
        before = _kinds(ep)
        self.assertEqual(fold_constants_aliasing_buffers(ep), [])
        self.assertEqual(_kinds(ep), before)


@unittest.skipIf(not CPU_BUILDER, NEEDS_CPU_BUILDER)
class TestBothEntryPoints(TestCase):
    def test_standalone_engine_writes_the_buffer_in_place(self):
        ep = _export(WritesThroughAnotherObject())
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "aliases.json")
            engine = (
                torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                    ep,
                    arg_inputs=list(_args()),
                    min_block_size=1,
                    lift_mutable_buffers=True,
                    alias_map_path=path,
                )
            )
            with open(path) as f:
                aliases = json.load(f)["aliases"]
        self.assertGreater(len(engine), 0)
        self.assertEqual(
            [(a["input"], a["update"], a.get("binding")) for a in aliases],
            [("buf_cache", "in_place", "engine")],
        )

    def test_compile_matches_eager(self):
        ep = _export(WritesThroughAnotherObject())
        with engines_built_execution_stood_in() as built:
            trt = torch_tensorrt.dynamo.compile(
                ep, arg_inputs=list(_args()), min_block_size=1
            )
        self.assertEqual(len(built), 1)
        eager = WritesThroughAnotherObject()
        for step in range(3):
            pos, u = torch.tensor([step]), torch.randn(1, 2, 1, 4)
            self.assertEqual(trt(pos, u), eager(pos, u))
            self.assertEqual(trt.cache, eager.cache)


if __name__ == "__main__":
    run_tests()
