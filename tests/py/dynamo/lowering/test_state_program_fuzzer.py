# type: ignore
"""Generated state programs (``state_programs.py``), each built and run against eager.

For every seed: the program's standalone engine is built by TensorRT-RTX on the
CPU, or refused in one sentence (an op without a converter); a built engine's
alias map names engine tensors that exist, and files each state at most once.
Then ``compile()`` builds its engines and runs its module, with the engines'
execution stood in, over three calls against eager: outputs, written inputs and
buffers, and outputs held across calls. The seeds are fixed; a failure prints
the seed and the program. ``tools/fuzz/state_programs.py`` runs thousands of
seeds with real engines on a GPU. ``STATE_FUZZ_SEEDS=first:count`` runs others.
"""

import json
import os
import tempfile
import unittest
import unittest.mock

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo.conversion._TRTInterpreter import (
    UnsupportedOperatorException,
)

from . import state_programs
from .test_compile_with_stand_in_engines import engines_built_execution_stood_in
from .test_lower_auto_functionalized import CPU_BUILDER

SEEDS = range(*map(int, (os.environ.get("STATE_FUZZ_SEEDS", "0:100")).split(":")))


CPU_ONLY = (
    "Building engines without a CUDA device needs TensorRT-RTX on a host without "
    "a GPU; on a GPU the same programs run with real engines: the generated state programs run by tools/fuzz/state_programs.py."
)


def standalone(program):
    """``None`` when the engine builds and its map agrees with it, else why not."""
    from torch_tensorrt.dynamo import _compiler

    results = []
    real = _compiler.interpret_module_to_result

    def spy(gm, *args, **kwargs):
        results.append(real(gm, *args, **kwargs))
        return results[-1]

    ep = program.export(program.module())
    with tempfile.TemporaryDirectory() as tmp:
        try:
            with unittest.mock.patch.object(
                _compiler, "interpret_module_to_result", spy
            ):
                _compiler.convert_exported_program_to_serialized_trt_engine(
                    ep,
                    arg_inputs=program.compile_inputs(),
                    lift_mutable_buffers=True,
                    min_block_size=1,
                    alias_map_path=f"{tmp}/m.json",
                )
        except UnsupportedOperatorException as e:
            message = str(e)
            named = "no converter" in message or "all refuse it as called" in message
            if "\n" in message.strip() or not named:
                return f"refused, but not in one sentence: {message}"
            return None
        except RuntimeError as e:
            # a float64 constant (a buffer the program only reads): TensorRT has
            # no float64, and the error says to set truncate_double=True
            if "truncate_double=True" in str(e):
                return None
            raise
        with open(f"{tmp}/m.json") as f:
            aliases = json.load(f)["aliases"]
    (result,) = results
    for entry in aliases:
        if entry["output"] not in result.output_names:
            return f"the map names output {entry['output']}, not an engine output"
        if entry["input"] not in result.input_names:
            return f"the map names input {entry['input']}, not an engine input"
        if entry["update"] == "in_place" and entry["output"] not in result.aliased_io:
            return (
                f"{entry['output']} is filed in place but the engine does not alias it"
            )
    written = [entry["input"] for entry in aliases]
    if len(set(written)) != len(written):
        return f"a state is filed twice: {aliases}"
    for output, (input_name, kind) in result.aliased_io.items():
        if kind == "kv_cache_update" and (output, input_name) not in {
            (e["output"], e["input"]) for e in aliases
        }:
            return f"the engine aliases {output} to {input_name}, which the map omits"
    return None


def compiled_against_eager(program):
    """``None`` when ``compile()``'s module does what eager does, else why not."""
    eager = state_programs.run(program, program.module())
    ep = program.export(program.module())
    with engines_built_execution_stood_in():
        trt = torch_tensorrt.dynamo.compile(
            ep, arg_inputs=program.compile_inputs(), min_block_size=1
        )
    return state_programs.compare(program, eager, state_programs.run(program, trt))


@unittest.skipIf(not CPU_BUILDER, CPU_ONLY)
class TestGeneratedStatePrograms(TestCase):
    def test_each_program_builds_or_is_refused_and_matches_eager(self):
        for seed in SEEDS:
            program = state_programs.generate(seed)
            with self.subTest(seed=seed):
                why = standalone(program)
                self.assertIsNone(
                    why, f"standalone engine: {why}\n{program.describe()}"
                )
                why = compiled_against_eager(program)
                self.assertIsNone(why, f"compile(): {why}\n{program.describe()}")


class TestTheGenerator(TestCase):
    def test_a_seed_gives_one_program(self):
        self.assertEqual(
            state_programs.generate(7).source, state_programs.generate(7).source
        )

    def test_the_programs_cover_the_forms(self):
        features = set()
        dtypes, layouts, kinds = set(), set(), set()
        for seed in range(300):
            program = state_programs.generate(seed)
            features.update(
                f.split()[0] + " " + f.split()[-1] for f in program.features
            )
            for s in program.states:
                dtypes.add(s.dtype)
                kinds.add(s.kind)
                layouts.add(s.layout)
        self.assertEqual(dtypes, set(state_programs.DTYPES))
        self.assertEqual(layouts, set(state_programs.LAYOUTS))
        self.assertEqual(kinds, {"input", "buffer"})
        for form in ("slab past_end", "slab negative", "slab run", "slab tail"):
            self.assertIn(form, features)

    def test_the_comparison_can_fail(self):
        # a module that forgets the write, and one whose output is the state
        program = state_programs.generate(4)
        eager = state_programs.run(program, program.module())

        class Forgets(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = program.module()

            def forward(self, *args):
                saved = {n: b.clone() for n, b in self.inner.named_buffers()}
                out = self.inner(*[a.clone() for a in args])
                for n, b in saved.items():
                    getattr(self.inner, n).copy_(b)
                return out

        forgetful = Forgets()
        why = state_programs.compare(
            program,
            eager,
            state_programs.run(
                program, forgetful, buffers_of=lambda n: getattr(forgetful.inner, n)
            ),
        )
        self.assertIsNotNone(why)


if __name__ == "__main__":
    run_tests()
