# type: ignore
"""A standalone engine's state outputs are checked against its network before
anything is returned or written, and its alias map gives each input's dtype.

The map's entries come from the write-backs the graph exposes and the aliases
the interpreter recorded; a disagreement between them (an entry naming a tensor
the engine lacks, a state filed twice) is a bug raised at build, never a map handed to a caller. The map's "inputs"
give every engine input's dtype as the caller has it: a float64 state is
computed in float32 (TensorRT has no float64), so the caller converts what it
copies back.
"""

import json
import tempfile
import unittest

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo.lowering._mutation_write_backs import (
    AliasMapError,
    WriteBack,
    network_in_place_updates,
    read_alias_map,
)

from .test_lower_auto_functionalized import CPU_BUILDER, _clone

CPU_ONLY = (
    "Building engines without a CUDA device needs TensorRT-RTX on a host without "
    "a GPU; on a GPU the same programs run with real engines: the generated state programs run by tools/fuzz/state_programs.py."
)


class SlabWrite(torch.nn.Module):
    def forward(self, cache, u):
        cache[:, :, 5:6, :] = u
        return u * 2


def _map(model, args):
    ep = torch.export.export(model, _clone(args))
    with tempfile.TemporaryDirectory() as tmp:
        torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
            ep,
            arg_inputs=list(_clone(args)),
            min_block_size=1,
            alias_map_path=f"{tmp}/m.json",
        )
        with open(f"{tmp}/m.json") as f:
            return json.load(f)


@unittest.skipIf(not CPU_BUILDER, CPU_ONLY)
class TestTheMapGivesEachInputsDtype(TestCase):
    def test_dtype_of_every_input(self):
        for dtype, update in (
            (torch.float16, "in_place"),
            (torch.float64, "copy"),
            (torch.int32, "copy"),
        ):
            with self.subTest(dtype):
                args = (
                    torch.zeros(1, 4, 16, 8, dtype=dtype),
                    torch.ones(1, 4, 1, 8, dtype=dtype),
                )
                written = _map(SlabWrite(), args)
                (entry,) = written["aliases"]
                self.assertEqual(entry["update"], update)
                name = str(dtype).replace("torch.", "")
                self.assertEqual(written["inputs"], {"cache": name, "u": name})
                self.assertEqual(len(read_alias_map(written)), 1)


class TestTheWriteBacksCheckedAgainstTheNetwork(TestCase):
    INPUTS = ["cache", "u"]
    OUTPUTS = ["output0", "cache_new"]
    KV = {"cache_new": ("cache", "kv_cache_update")}

    def updates(self, write_backs, aliased_io=None):
        return network_in_place_updates(
            write_backs,
            self.KV if aliased_io is None else aliased_io,
            self.INPUTS,
            self.OUTPUTS,
        )

    def test_what_agrees_passes(self):
        self.assertEqual(
            self.updates([WriteBack("cache", "cache_new")]),
            [WriteBack("cache", "cache_new", "in_place", "engine")],
        )
        self.assertEqual(
            self.updates([WriteBack("cache", "cache_new")], aliased_io={}),
            [WriteBack("cache", "cache_new")],
        )

    def test_each_disagreement_is_named(self):
        cases = {
            "'missing' is not an output of the engine": [WriteBack("cache", "missing")],
            "'x' is not an input of the engine": [WriteBack("x", "output0")],
            "input 'cache' has two entries": [
                WriteBack("cache", "cache_new"),
                WriteBack("cache", "output0"),
            ],
            # a copy of a state beside the output TensorRT aliases to it
            r"input 'cache' has two entries \('output0' and 'cache_new'\)": [
                WriteBack("cache", "output0")
            ],
        }
        for message, write_backs in cases.items():
            with self.subTest(message):
                with self.assertRaisesRegex(RuntimeError, message):
                    self.updates(write_backs)

    def test_bad_input_dtypes_in_a_map_are_refused(self):
        entry = {"output": "o", "input": "i", "update": "copy"}
        for inputs, message in (
            ({"i": 3}, r"'inputs' is \{'i': 3\}; expected an object of binding names"),
            (["float32"], "'inputs' is \\['float32'\\]"),
            (
                {"x": "float32"},
                r"'inputs' does not give the dtype of input\(s\) \['i'\]",
            ),
        ):
            with self.subTest(inputs):
                with self.assertRaisesRegex(AliasMapError, message):
                    read_alias_map(
                        {
                            "format": "torch_tensorrt.engine_io_aliases",
                            "version": 2,
                            "aliases": [entry],
                            "inputs": inputs,
                        }
                    )


if __name__ == "__main__":
    run_tests()
