# type: ignore
"""A wrong argument of a public entry point ends in one sentence naming it.

Each case hands a public function something of the wrong kind (a module where
an ExportedProgram is expected, the engine's bytes or the map's path where the
deserialized engine or the map's entries are expected, ...). The error must name
the function and the argument, say what it got and what to pass, in one line,
with no chained exception above it; before, most of these ended in an
``AttributeError`` inside Torch-TensorRT. No engine is built: every check runs
before anything is converted.
"""

import itertools
import json
import os
import tempfile

import torch
import torch_tensorrt
from parameterized import parameterized
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo import (
    check_alias_map_against_engine,
    check_in_place_bindings,
    read_alias_map,
)
from torch_tensorrt.dynamo.lowering._mutation_write_backs import (
    AliasMapError,
    WriteBack,
)

from . import test_state_steps


class WritesItsInput(torch.nn.Module):
    def forward(self, x):
        x.add_(1)
        return x * 2


MAP = {
    "format": "torch_tensorrt.engine_io_aliases",
    "version": 2,
    "aliases": [{"output": "x_new", "input": "x", "update": "copy"}],
}
ENTRIES = [WriteBack("x", "x_new")]
FILES = tempfile.mkdtemp()


def _file(name, data):
    """A file a user might hand read_alias_map by mistake."""
    path = os.path.join(FILES, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


ENGINE_BYTES = b"\x00" * 64


def _export():
    return torch.export.export(WritesItsInput(), (torch.zeros(2, 4),))


def _convert(exported, **kwargs):
    return torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
        exported, arg_inputs=[torch.zeros(2, 4)], min_block_size=1, **kwargs
    )


def _compile(exported):
    return torch_tensorrt.dynamo.compile(
        exported, arg_inputs=[torch.zeros(2, 4)], min_block_size=1, dryrun=True
    )


# (function called, argument named, call with the wrong value, what it got)
CASES = [
    (
        "torch_tensorrt.dynamo.compile",
        "exported_program",
        lambda: _compile(WritesItsInput()),
        "WritesItsInput",
    ),
    (
        "convert_exported_program_to_serialized_trt_engine",
        "exported_program",
        lambda: _convert(WritesItsInput()),
        "WritesItsInput",
    ),
    (
        "convert_exported_program_to_serialized_trt_engine",
        "exported_program",
        lambda: _convert(ENGINE_BYTES),
        "bytes",
    ),
    (
        "convert_exported_program_to_serialized_trt_engine",
        "alias_map_path",
        lambda: _convert(_export(), alias_map_path=3),
        "int",
    ),
    (
        "check_alias_map_against_engine",
        "engine",
        lambda: check_alias_map_against_engine(ENTRIES, ENGINE_BYTES),
        "64 bytes",
    ),
    (
        "check_alias_map_against_engine",
        "entries",
        lambda: check_alias_map_against_engine("model.aliases.json", None),
        "'model.aliases.json'",
    ),
    (
        "check_alias_map_against_engine",
        "entries",
        lambda: check_alias_map_against_engine(MAP, None),
        "dict",
    ),
    (
        "check_in_place_bindings",
        "aliases",
        lambda: check_in_place_bindings("model.aliases.json", {}),
        "'model.aliases.json'",
    ),
    (
        "check_in_place_bindings",
        "addresses",
        lambda: check_in_place_bindings(ENTRIES, [0x1000]),
        "list",
    ),
    (
        "read_alias_map",
        "",
        lambda: read_alias_map(ENGINE_BYTES),
        "64 bytes",
    ),
    (
        "read_alias_map",
        "",
        lambda: read_alias_map(os.path.join(tempfile.gettempdir(), "no", "m.json")),
        "No such file or directory",
    ),
    (
        "read_alias_map",
        "",
        lambda: read_alias_map(tempfile.gettempdir()),
        "Is a directory",
    ),
    (
        "read_alias_map",
        "",
        lambda: read_alias_map(_file("model.engine", b"ftrt\xff\x00\x9c" * 8)),
        "model.engine' is not text",
    ),
    (
        "read_alias_map",
        "",
        lambda: read_alias_map(_file("cut.json", json.dumps(MAP).encode()[:40])),
        "cut.json' is not JSON",
    ),
    (
        "read_alias_map",
        "",
        lambda: read_alias_map(
            _file("extra.json", json.dumps({**MAP, "engine": "m"}).encode())
        ),
        "extra.json': alias map has unknown key(s) ['engine']; expected only",
    ),
]


class TestWrongArgumentsAreNamed(TestCase):
    @parameterized.expand(
        [
            (f"{i}_{c[0].rsplit('.', 1)[-1]}_{c[1] or 'source'}", *c)
            for i, c in enumerate(CASES)
        ]
    )
    def test_one_sentence(self, _name, function, argument, call, got):
        with self.assertRaises((TypeError, AliasMapError)) as caught:
            call()
        error = caught.exception
        message = str(error)
        self.assertTrue(message.startswith(f"{function}: "), message)
        if argument:
            self.assertIn(f"argument '{argument}'", message)
        self.assertIn(got, message)
        self.assertNotIn("\n", message)
        # the sentence is what the user reads first: nothing chained above it
        self.assertTrue(
            error.__cause__ is None
            and error.__suppress_context__
            or error.__context__ is None,
            repr(error.__context__),
        )


class TestWhatTheCheckersTake(TestCase):
    """Both forms of a map's entries are taken: read_alias_map's and the raw list."""

    def test_read_entries_and_the_raw_list(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.json")
            with open(path, "w") as f:
                json.dump(MAP, f)
            entries = read_alias_map(path)
        self.assertEqual(entries, ENTRIES)
        # a copy binds nothing in place: both forms pass with any addresses
        check_in_place_bindings(entries, {"x": 1, "x_new": 2})
        check_in_place_bindings(MAP["aliases"], {"x": 1, "x_new": 2})
        in_place = [WriteBack("x", "x_new", "in_place", "declared_alias")]
        with self.assertRaisesRegex(ValueError, "bind it to the input's address"):
            check_in_place_bindings(in_place, {"x": 1, "x_new": 2})


class TwoInputs(torch.nn.Module):
    def forward(self, x, y):
        return x * 2 + y


# the check runs before anything the entry points build
ENTRY_POINTS = {
    "torch_tensorrt.dynamo.compile": test_state_steps._compile,
    "convert_exported_program_to_serialized_trt_engine": test_state_steps._convert,
    "cross_compile_for_windows": test_state_steps._cross_compile,
}

# example inputs of a program exported with two float32 [2, 4] inputs, and what
# the sentence must name
Y = torch.zeros(2, 4)
MISMATCHES = {
    "no_inputs": (
        [],
        "takes 2 input(s), but arg_inputs gives 0",
    ),
    "one_input": ([Y], "gives 1"),
    "three_inputs": ([Y, Y, Y], "gives 3"),
    "fixed_dim": ([torch.zeros(3, 4), Y], "arg_inputs[0] (input 'x') has shape (3, 4)"),
    "rank": ([Y, torch.zeros(8)], "arg_inputs[1] (input 'y') has shape (8,)"),
    "text": (
        [Y, "y"],
        "arg_inputs[1] (input 'y') is a str ('y'); expected a torch.Tensor",
    ),
    "none": ([None, Y], "arg_inputs[0] (input 'x') is None; expected a torch.Tensor"),
    "dtype": ([Y, torch.zeros(2, 4, dtype=torch.int32)], "is torch.int32"),
    "input_dtype": (
        [torch_tensorrt.Input((2, 4), dtype=torch.float16), Y],
        "is torch.float16, but the program was exported with torch.float32",
    ),
    "input_range": (
        [
            torch_tensorrt.Input(min_shape=(1, 4), opt_shape=(2, 4), max_shape=(3, 4)),
            Y,
        ],
        "has shape (1, 4), but the program was exported with shape (2, 4)",
    ),
}


class TestExamplesMustFitTheProgram(TestCase):
    """Example inputs the exported program was not traced for are refused before
    anything is built: an engine for another shape or dtype would take what eager
    refuses (and no inputs at all ended in an internal IndexError)."""

    @parameterized.expand(
        [
            (f"{entry.rsplit('.', 1)[-1]}_{mistake}", entry, mistake)
            for entry, mistake in itertools.product(ENTRY_POINTS, MISMATCHES)
        ]
    )
    def test_one_sentence(self, _name, entry, mistake):
        inputs, named = MISMATCHES[mistake]
        exported = torch.export.export(TwoInputs(), (Y, Y))
        with self.assertRaises(ValueError) as caught:
            ENTRY_POINTS[entry](exported, inputs)
        message = str(caught.exception)
        self.assertTrue(message.startswith(f"{entry}: "), message)
        self.assertIn(named, message)
        self.assertNotIn("\n", message)

    def test_dynamic_dimensions_take_their_range(self):
        batch = torch.export.Dim("batch", min=1, max=8)
        exported = torch.export.export(
            TwoInputs(), (Y, Y), dynamic_shapes=({0: batch}, {0: batch})
        )
        ranged = torch_tensorrt.Input(
            min_shape=(1, 4), opt_shape=(2, 4), max_shape=(8, 4)
        )
        ENTRY_POINTS["torch_tensorrt.dynamo.compile"](exported, [ranged, ranged])

    def test_numbers_among_the_inputs_are_counted(self):
        class Scaled(torch.nn.Module):
            def forward(self, x, n: int):
                return x * n

        exported = torch.export.export(Scaled(), (Y, 3))
        ENTRY_POINTS["torch_tensorrt.dynamo.compile"](exported, [Y, 3])
        with self.assertRaisesRegex(ValueError, "takes 2 input"):
            ENTRY_POINTS["torch_tensorrt.dynamo.compile"](exported, [Y])


class TestTheFrontDoorNamesTheArgument(TestCase):
    """``torch_tensorrt.compile`` of a module (and the other front doors) names an
    example that does not fit ``forward`` before tracing: no torch.export error."""

    FRONT_DOORS = {
        "torch_tensorrt.compile": lambda m, a: torch_tensorrt.compile(
            m, ir="dynamo", arg_inputs=a
        ),
        "torch_tensorrt.convert_method_to_trt_engine": (
            lambda m, a: torch_tensorrt.convert_method_to_trt_engine(
                m, ir="dynamo", arg_inputs=a
            )
        ),
    }
    MISTAKES = {
        "missing": ([Y], "do not fit TwoInputs.forward(x, y): missing a required"),
        "extra": ([Y, Y, Y], "do not fit TwoInputs.forward(x, y): too many"),
        "text": (
            [Y, "y"],
            "arg_inputs[1] (parameter 'y' of TwoInputs.forward) is a str",
        ),
    }

    @parameterized.expand(
        [
            (f"{door.rsplit('.', 1)[-1]}_{mistake}", door, mistake)
            for door, mistake in itertools.product(FRONT_DOORS, MISTAKES)
        ]
    )
    def test_one_sentence(self, _name, door, mistake):
        inputs, named = self.MISTAKES[mistake]
        with self.assertRaises(ValueError) as caught:
            self.FRONT_DOORS[door](TwoInputs(), inputs)
        message = str(caught.exception)
        self.assertTrue(message.startswith(f"{door}: "), message)
        self.assertIn(named, message)
        self.assertNotIn("\n", message)


if __name__ == "__main__":
    run_tests()
