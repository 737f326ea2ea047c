# type: ignore
"""One state plan per graph: the programs around a state that broke it, by class.

Each model here is something ordinary a model does around its state, which the
earlier rules (the buffer lifting's prediction, the converters' own choice of
``IKVCacheUpdateLayer``, the view pass) decided differently. Each is built into
a standalone engine by TensorRT-RTX on the CPU (its alias map read), and run
through ``compile()`` with the engines' execution stood in, against eager over
three calls; outputs held across calls must keep their values. The same
programs, and generated ones, run with real engines on a GPU
(``tools/fuzz/state_programs.py``).
"""

import dataclasses
import importlib
import json
import logging
import tempfile
import unittest
from unittest import mock

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo.lowering._state_plan import (
    COPY,
    IN_PLACE,
    STATE_PLAN,
    StateUpdate,
    check_engine_against_state_plan,
    state_plan,
)

from .test_compile_with_stand_in_engines import engines_built_execution_stood_in
from .test_lower_auto_functionalized import CPU_BUILDER, _clone
from .test_serialized_engine_alias_map import KvWrite

CPU_ONLY = (
    "Building engines without a CUDA device needs TensorRT-RTX on a host without "
    "a GPU; on a GPU the same programs run with real engines: TestEveryClassOnGpu in this file."
)


class ReturnsACloneAfterTheWrite(torch.nn.Module):  # class 1
    def forward(self, cache, pos, u):
        cache.index_copy_(2, pos, u)
        return cache.clone()


class SnapshotBetweenWrites(torch.nn.Module):  # class 1
    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.arange(512.0).reshape(1, 4, 16, 8))

    def forward(self, u):
        self.cache[:, :, 3:4, :] = u
        snap = self.cache.clone()
        self.cache.mul_(0.5)
        return snap


class FunctionalWriteThenReset(torch.nn.Module):  # class 1
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.arange(512.0).reshape(1, 4, 16, 8))

    def forward(self, idx, u, z):
        y = torch.index_copy(self.buf, 2, idx, u)
        self.buf.copy_(z)
        return y


class ResetFromAnInput(torch.nn.Module):  # class 2
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(1, 4, 16, 8))

    def forward(self, z):
        self.buf.copy_(z)
        return z * 2


class WriteThenScale(torch.nn.Module):  # class 1: the slab write is not the last
    def forward(self, cache, u):
        cache[:, :, 5:7, :] = u
        cache.mul_(2)
        return u * 2


class Float64Slab(torch.nn.Module):  # class 5
    def forward(self, cache, u):
        cache[:, :, 5:6, :] = u
        return u * 2


class CastSlab(torch.nn.Module):  # class 4: an fp16 state, a float32 update
    def forward(self, state, u):
        state[:, 2:3] = u
        return u * 2


class RowsWrite(torch.nn.Module):  # class 3: written in the layer's form as a view
    def forward(self, state, u):
        state[:, 3:4, :] = u
        return u.sum()


def _args(name):
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    return {
        "clone": (torch.zeros(1, 4, 16, 8), torch.tensor([3]), r(1, 4, 1, 8)),
        "snapshot": (r(1, 4, 1, 8),),
        "functional": (torch.tensor([2]), r(1, 4, 1, 8), r(1, 4, 16, 8)),
        "reset": (r(1, 4, 16, 8),),
        "scale": (r(1, 4, 16, 8), r(1, 4, 2, 8)),
        "float64": (r(1, 4, 16, 8).double(), r(1, 4, 1, 8).double()),
        "cast": (r(2, 16, 8).half(), r(2, 1, 8)),
        "rows": (r(2, 16, 8), r(2, 1, 8)),
    }[name]


CASES = {
    "clone": ReturnsACloneAfterTheWrite,
    "snapshot": SnapshotBetweenWrites,
    "functional": FunctionalWriteThenReset,
    "reset": ResetFromAnInput,
    "scale": WriteThenScale,
    "float64": Float64Slab,
    "cast": CastSlab,
    "rows": RowsWrite,
}

# how the standalone engine's map files each state
EXPECTED_MAP = {
    "clone": [("cache_new", "cache", IN_PLACE)],
    "snapshot": [("buf_cache_new", "buf_cache", COPY)],
    "functional": [("buf_buf_new", "buf_buf", COPY)],
    "reset": [("buf_buf_new", "buf_buf", COPY)],
    "scale": [("cache_new", "cache", COPY)],
    "float64": [("cache_new", "cache", COPY)],
    "cast": [("state_new", "state", IN_PLACE)],
    "rows": [("state_new", "state", IN_PLACE)],
}


def _standalone_map(model, args):
    ep = torch.export.export(model, _clone(args))
    with tempfile.TemporaryDirectory() as tmp:
        torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
            ep,
            arg_inputs=list(_clone(args)),
            lift_mutable_buffers=True,
            min_block_size=1,
            alias_map_path=f"{tmp}/m.json",
        )
        with open(f"{tmp}/m.json") as f:
            return json.load(f)["aliases"]


def _matches_eager(testcase, cls, args, caller=None, **settings):
    ep = torch.export.export(cls(), _clone(args))
    with engines_built_execution_stood_in():
        trt = torch_tensorrt.dynamo.compile(
            ep, arg_inputs=list(_clone(args)), min_block_size=1, **settings
        )
    eager = cls()
    compiled_args = caller(_clone(args)) if caller else _clone(args)
    eager_args = _clone(args)
    held = []
    for step in range(3):
        out = trt(*compiled_args)
        expected = eager(*eager_args)
        testcase.assertEqual(out, expected, msg=f"step {step}")
        testcase.assertEqual(
            [a.contiguous() for a in compiled_args], eager_args, msg=f"step {step}"
        )
        for name, buffer in eager.named_buffers():
            testcase.assertEqual(getattr(trt, name), buffer, msg=f"{name}, {step}")
        held.append((out, out.clone() if isinstance(out, torch.Tensor) else out))
    for out, copy in held:
        if isinstance(out, torch.Tensor):
            testcase.assertEqual(out, copy, msg="an output changed after later calls")
    return trt


@unittest.skipIf(not CPU_BUILDER, CPU_ONLY)
class TestEveryClassHasOnePlan(TestCase):
    def test_the_standalone_map_files_each_state_once(self):
        for name, cls in CASES.items():
            with self.subTest(name):
                entries = _standalone_map(cls(), _args(name))
                self.assertEqual(
                    [(a["output"], a["input"], a["update"]) for a in entries],
                    EXPECTED_MAP[name],
                )
                # each copy says why it is not made in place
                for a in entries:
                    self.assertEqual(bool(a.get("reason")), a["update"] == "copy", a)

    def test_compile_matches_eager(self):
        for name, cls in CASES.items():
            with self.subTest(name):
                _matches_eager(self, cls, _args(name))

    def test_a_caller_state_laid_out_otherwise(self):
        # a transposed and a sliced caller tensor of the state written in place
        def transposed(args):
            state = args[0].transpose(0, -1).contiguous().transpose(0, -1)
            return (state,) + args[1:]

        def sliced(args):
            big = torch.zeros(*args[0].shape[:-1], args[0].shape[-1] + 3)
            big[..., : args[0].shape[-1]] = args[0]
            return (big[..., : args[0].shape[-1]],) + args[1:]

        for caller in (transposed, sliced):
            with self.subTest(caller.__name__):
                _matches_eager(self, RowsWrite, _args("rows"), caller=caller)
        # a first dimension of 1: reshaping the transposed state is a view with
        # another stride on that dimension, which the write-back refused as an
        # overlap of the state with itself (found on the GPU, seed 3822)
        with self.subTest("transposed, batch 1"):
            state, u = _args("rows")
            _matches_eager(
                self, RowsWrite, (state[:1].clone(), u[:1].clone()), caller=transposed
            )

    def test_require_full_compilation_changes_nothing_about_in_place(self):
        # one engine either way, writing the state (seen in the layer's form
        # through views PyTorch takes at its boundary) in place
        for full in (False, True):
            with self.subTest(require_full_compilation=full):
                trt = _matches_eager(
                    self, RowsWrite, _args("rows"), require_full_compilation=full
                )
                engines = [m for m in trt.modules() if hasattr(m, "aliased_io")]
                self.assertEqual(len(engines), 1)
                ((_, (_, kind)),) = engines[0].aliased_io.items()
                self.assertEqual(kind, "kv_cache_update")

    def test_the_plan_is_logged_once_per_state(self):
        with self.assertLogs(
            "torch_tensorrt.dynamo.lowering._state_plan", logging.DEBUG
        ) as logs:
            _standalone_map(SnapshotBetweenWrites(), _args("snapshot"))
        self.assertEqual(len(logs.output), 1, logs.output)
        self.assertIn("state buf_cache (float32): copy", logs.output[0])


@unittest.skipIf(
    not torch.cuda.is_available(),
    "Running the engines needs a CUDA device; the CPU variant is "
    "TestEveryClassHasOnePlan (engines built by TensorRT-RTX, execution stood in).",
)
class TestEveryClassOnGpu(TestCase):
    """The same programs with real engines: compile() on the GPU against eager."""

    def _against_eager(self, cls, args, caller=None):
        args = tuple(a.cuda() for a in args)
        model = cls().cuda()
        ep = torch.export.export(model, _clone(args))
        trt = torch_tensorrt.dynamo.compile(
            ep, arg_inputs=list(_clone(args)), min_block_size=1
        )
        eager = cls().cuda()
        compiled_args = caller(_clone(args)) if caller else _clone(args)
        eager_args = _clone(args)
        held = []
        for step in range(3):
            out, expected = trt(*compiled_args), eager(*eager_args)
            self.assertEqual(out, expected, msg=f"step {step}")
            self.assertEqual(
                [a.contiguous() for a in compiled_args], eager_args, msg=f"{step}"
            )
            for name, buffer in eager.named_buffers():
                self.assertEqual(getattr(trt, name), buffer, msg=f"{name}, {step}")
            held.append((out, out.clone()))
        for out, copy in held:
            self.assertEqual(out, copy, msg="an output changed after later calls")

    def test_compile_matches_eager(self):
        for name, cls in CASES.items():
            with self.subTest(name):
                self._against_eager(cls, _args(name))

    def test_a_caller_state_laid_out_otherwise(self):
        def transposed(args):
            state = args[0].transpose(0, -1).contiguous().transpose(0, -1)
            return (state,) + args[1:]

        self._against_eager(RowsWrite, _args("rows"), caller=transposed)


class FunctionalIndexCopy(torch.nn.Module):
    def forward(self, cache, index, update):
        return torch.ops.aten.index_copy.default(cache, 2, index, update)


@unittest.skipIf(not CPU_BUILDER, CPU_ONLY)
class TestUpstreamsFunctionalCacheContract(TestCase):
    """A functional KV write on an input nothing else reads stays in place where
    2.14.0 put it (upstream's test_index_copy_kv.py), with a warning saying so."""

    def test_batch_1_in_place_with_a_warning(self):
        args = (torch.zeros(1, 4, 16, 8), torch.tensor([3]), torch.ones(1, 4, 1, 8))
        with self.assertLogs(
            "torch_tensorrt.dynamo.lowering._state_plan", "WARNING"
        ) as logs:
            (entry,) = _standalone_map(FunctionalIndexCopy(), args)
            self.assertEqual(
                (entry["output"], entry["input"], entry["update"]),
                ("output0", "cache", IN_PLACE),
            )
        self.assertIn("writes input 'cache' functionally", logs.output[0])

    def test_a_wider_batch_is_a_scatter(self):
        args = (torch.zeros(4, 4, 16, 8), torch.tensor([3]), torch.ones(4, 4, 1, 8))
        self.assertEqual(_standalone_map(FunctionalIndexCopy(), args), [])


def _engine_module(rows, writes=()):
    """A graph whose placeholders carry ``rows`` (name -> StateUpdate or None) and
    that makes ``writes`` (node names)."""
    graph = torch.fx.Graph()
    for name, row in rows.items():
        placeholder = graph.placeholder(name)
        placeholder.meta["val"] = torch.empty(1)
        if row is not None:
            placeholder.meta[STATE_PLAN] = row
    for write in writes:
        graph.call_function(torch.ops.aten.clone.default, (placeholder,)).name = write
    graph.output(None)
    return torch.fx.GraphModule(torch.nn.Module(), graph)


class TestTheEngineCheckedAgainstThePlan(TestCase):
    ROWS = {
        "cache": StateUpdate("cache", COPY, "it is also read by sum", "float32"),
        "kv": StateUpdate("kv", IN_PLACE, "a slab", "float16", "write"),
        "s": StateUpdate("s", IN_PLACE, "its op", "float32", "w", by_its_op=True),
        "x": None,
    }

    def _check(self, aliased_io, writes=()):
        module = _engine_module(self.ROWS, writes)
        check_engine_against_state_plan(module, list(self.ROWS), aliased_io)

    def test_aliases_the_plan_made(self):
        self._check({})  # the in-place writes are another engine's, or PyTorch's
        self._check({"o1": ("kv", "kv_cache_update"), "o2": ("s", "user")})
        # a converter of its own on the layer: TensorRT reports the alias
        self._check({"o2": ("s", "kv_cache_update")})

    def test_an_alias_the_plan_did_not_make_is_a_bug(self):
        cases = [
            (
                {"o1": ("cache", "kv_cache_update")},
                "'cache' (output 'o1'; planned: it is also read by sum)",
            ),
            ({"o1": ("x", "kv_cache_update")}, "'x' (output 'o1'; it is no state)"),
            ({"o1": ("kv", "user")}, "'kv' (output 'o1', a converter's alias"),
        ]
        for aliased_io, named in cases:
            with self.subTest(aliased_io=aliased_io):
                with self.assertRaises(RuntimeError) as raised:
                    self._check(aliased_io)
                message = str(raised.exception)
                self.assertTrue(
                    message.startswith(
                        "The engine writes in place what the state plan copies back: "
                    ),
                    message,
                )
                self.assertIn(named, message)

    def test_an_in_place_write_the_engine_makes_elsewhere_is_a_bug(self):
        aliases = {"o1": ("kv", "kv_cache_update"), "o2": ("s", "user")}
        self._check(aliases, writes=["write", "w"])
        for aliased_io, named in [
            ({"o2": ("s", "user")}, "'kv' (write 'write'; planned: a slab)"),
            ({"o1": ("kv", "kv_cache_update")}, "'s' (write 'w'; planned: its op)"),
        ]:
            with self.subTest(aliased_io=aliased_io):
                with self.assertRaises(RuntimeError) as raised:
                    self._check(aliased_io, writes=["write", "w"])
                message = str(raised.exception)
                self.assertTrue(
                    message.startswith(
                        "The engine makes, but not in place, the writes the state "
                        "plan puts in place: "
                    ),
                    message,
                )
                self.assertIn(named, message)
                self.assertEqual(message.count("(write "), 1, message)

    def test_an_engine_from_the_cache_is_checked_too(self):
        from torch_tensorrt.dynamo import CompilationSettings
        from torch_tensorrt.dynamo.conversion import _conversion

        module = _engine_module(self.ROWS, writes=["write"])
        cached = _conversion.SerializedInterpreterResult(
            serialized_engine=b"",
            input_names=list(self.ROWS),
            output_names=[],
            requires_output_allocator=False,
            symbolic_shape_expressions={},
            requires_native_multidevice=False,
            aliased_io={},
        )
        settings = CompilationSettings(
            reuse_cached_engines=True, immutable_weights=False
        )
        cache = mock.Mock()
        with mock.patch.object(_conversion, "pull_cached_engine", return_value=cached):
            features = _conversion.ENABLED_FEATURES._replace(refit=True)
            with mock.patch.object(_conversion, "ENABLED_FEATURES", features):
                with self.assertRaisesRegex(RuntimeError, r"'kv' \(write 'write'"):
                    _conversion.interpret_module_to_result(
                        module, [], settings, engine_cache=cache
                    )

    def test_a_state_its_ops_converter_writes_in_place(self):
        """The converter of a mutating op (#4240: ``-> None``) that computes the
        state in its memory: the plan puts it in place, so the layer's alias a GPU
        engine reports, or the converter's ``user`` record, agrees with the plan."""
        from .test_lower_auto_functionalized import _lowered
        from .test_mutating_op_converters import WriteRows, _inputs

        gm = _lowered(WriteRows(), _inputs(), require_full_compilation=True)
        plan = state_plan(gm)
        self.assertEqual(
            (plan["cache"].update, plan["cache"].by_its_op), (IN_PLACE, True)
        )
        self.assertIn("trt_mut.write_rows_", plan["cache"].reason)
        names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        for kind in ("kv_cache_update", "user"):
            check_engine_against_state_plan(gm, names, {"o": ("cache", kind)})


def _every_state_filed_as_copy(plan_state_updates):
    """``plan_state_updates``, its writes still made in place but its rows copies:
    a stage doing other than the plan says."""

    def plan(gm):
        result = plan_state_updates(gm)
        for node in gm.graph.nodes:
            if STATE_PLAN in node.meta:
                node.meta[STATE_PLAN] = dataclasses.replace(
                    node.meta[STATE_PLAN], update=COPY, reason="filed as a copy"
                )
        return result

    return plan


@unittest.skipIf(not CPU_BUILDER, CPU_ONLY)
class TestEveryEngineCheckedWhereItIsBuilt(TestCase):
    """The check runs where every entry point converts (``interpret_module_to_result``):
    an engine writing in place what its rows copy is refused by ``compile()``,
    whose engines are partitioned submodules (a state in the layer's form is a
    view there), and by a standalone engine."""

    MODELS = [
        (KvWrite, lambda: (torch.zeros(1, 4, 16, 8), torch.randn(1, 4, 2, 8))),
        (RowsWrite, lambda: _args("rows")),
    ]

    def _entry_points(self, model, args):
        ep = torch.export.export(model(), _clone(args))

        def compiled():
            with engines_built_execution_stood_in():
                torch_tensorrt.dynamo.compile(
                    ep, arg_inputs=list(_clone(args)), min_block_size=1
                )

        def standalone():
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep, arg_inputs=list(_clone(args)), min_block_size=1
            )

        return {"compile": compiled, "standalone": standalone}

    def test_an_engine_against_its_rows_is_refused(self):
        # the package exports the pass under its module's name: the module itself
        view_pass = importlib.import_module(
            "torch_tensorrt.dynamo.lowering.passes.view_state_writes_in_kv_cache_form"
        )

        for model, args in self.MODELS:
            for entry, run in self._entry_points(model, args()).items():
                with self.subTest(model=model.__name__, entry=entry):
                    run()  # the plan's own rows: the engine agrees
                    tampered = _every_state_filed_as_copy(view_pass.plan_state_updates)
                    with mock.patch.object(view_pass, "plan_state_updates", tampered):
                        with self.assertRaisesRegex(
                            RuntimeError,
                            r"writes in place what the state plan copies back: "
                            r"'\w+' \(output '\w+'; planned: filed as a copy\)",
                        ):
                            run()


@unittest.skipIf(not CPU_BUILDER, CPU_ONLY)
class TestAnInPlaceConvertersAliasIsThePlans(TestCase):
    """A converter declaring ``requires_aliased_plugin_io`` gets its ``user`` alias
    recorded from its state's row, in ``compile()``'s partitioned engine (the row
    travels with the placeholder) and in a standalone engine, under both values
    of ``require_full_compilation``."""

    def test_recorded_from_the_row(self):
        from .test_mutating_op_converters import WriteRows, _inputs

        ep = torch.export.export(WriteRows(), _inputs())
        for full in (True, False):
            with self.subTest(require_full_compilation=full):
                with engines_built_execution_stood_in():
                    trt = torch_tensorrt.dynamo.compile(
                        ep,
                        arg_inputs=list(_inputs()),
                        min_block_size=1,
                        require_full_compilation=full,
                    )
                aliased = [
                    m.aliased_io for n, m in trt.named_children() if "_run_on_acc" in n
                ]
                self.assertEqual(aliased, [{"output0": ("cache", "user")}])
        (entry,) = _standalone_map(WriteRows(), _inputs())
        self.assertEqual(
            (entry["input"], entry["update"], entry["binding"]),
            ("cache", IN_PLACE, "declared_alias"),
        )


if __name__ == "__main__":
    run_tests()
