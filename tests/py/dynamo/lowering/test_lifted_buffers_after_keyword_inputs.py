# type: ignore
"""A standalone engine's lifted buffers follow every user input, keyword ones too.

``lift_mutable_buffers=True`` lifts written buffers into placeholders after the
user inputs. The inputs given for them were appended to ``arg_inputs``, so with
keyword inputs they came before the keyword inputs, and each input was built
with another's shape and dtype: a float buffer where the model's int64
position was ("The `embedding` op requires int32 or int64 indices, but
received DataType.FLOAT" for HuggingFace's static-cache decoders).
"""

import json
import os
import tempfile
import unittest

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests

from .test_lower_auto_functionalized import (
    CPU_BUILDER,
    NEEDS_CPU_BUILDER,
)


class Decoder(torch.nn.Module):
    """An embedding looked up at a position, written into a cache buffer."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(16, 4)
        self.register_buffer("cache", torch.zeros(1, 1, 8, 4))

    def forward(self, input_ids, cache_position):
        x = self.embed(input_ids).reshape(1, 1, 1, 4)
        self.cache.index_copy_(2, cache_position, x)
        return self.cache.sum(2)


def _kwargs():
    return {
        "input_ids": torch.tensor([[3]]),
        "cache_position": torch.tensor([2]),
    }


@unittest.skipIf(not CPU_BUILDER, NEEDS_CPU_BUILDER)
class TestKeywordInputs(TestCase):
    def _build(self, **inputs):
        ep = torch.export.export(Decoder().eval(), (), _kwargs())
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "aliases.json")
            engine = (
                torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                    ep,
                    min_block_size=1,
                    lift_mutable_buffers=True,
                    alias_map_path=path,
                    **inputs,
                )
            )
            with open(path) as f:
                return engine, json.load(f)

    def test_keyword_inputs_then_the_buffers(self):
        engine, written = self._build(arg_inputs=(), kwarg_inputs=_kwargs())
        self.assertGreater(len(engine), 0)
        self.assertEqual([a["input"] for a in written["aliases"]], ["buf_cache"])
        self.assertEqual(written["inputs"]["buf_cache"], "float32")


if __name__ == "__main__":
    run_tests()
