# type: ignore
"""Engine inputs updated in place by an in-place plugin are read by nothing else.

The partitioned graphs come from ``compile(dryrun=True)``; the in-place op's
converter uses standard layers and declares ``requires_aliased_plugin_io`` as a
plugin converter would. Where a test needs a graph no partitioner produces today
(a read of the old value scheduled after the engine), it moves that node in the
partitioned graph, as a different partitioning would. Graph snapshots use
expecttest (``EXPECTTEST_ACCEPT=1`` rewrites them).
"""

import dataclasses
import unittest.mock

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo._SourceIR import SourceIR
from torch_tensorrt.dynamo.conversion import dynamo_tensorrt_converter, impl
from torch_tensorrt.dynamo.lowering._state_plan import STATE_PLAN
from torch_tensorrt.dynamo.partitioning._in_place_engine_inputs import (
    in_place_engine_inputs,
    isolate_in_place_engine_inputs,
)


@torch.library.custom_op("trt_inplace_part::bump_", mutates_args=("state",))
def bump_(state: torch.Tensor) -> None:
    state.add_(1)


@bump_.register_fake
def _(state):
    return None


@dynamo_tensorrt_converter(
    torch.ops.trt_inplace_part.bump_.default, requires_aliased_plugin_io=True
)
def _bump_with_declared_aliasing(ctx, target, args, kwargs, name):
    return impl.elementwise.add(ctx, target, SourceIR.ATEN, name, args[0], 1.0)


@torch.library.custom_op("trt_inplace_part::halve_", mutates_args=("state",))
def halve_(state: torch.Tensor) -> None:
    state.mul_(0.5)


@halve_.register_fake
def _(state):
    return None


class ReadBeforeUpdate(torch.nn.Module):
    def forward(self, state, y):
        before = torch.sin(state)
        torch.ops.trt_inplace_part.bump_(state)
        return state * 2 + y, before


class OnlyTheEngine(torch.nn.Module):
    def forward(self, state, y):
        torch.ops.trt_inplace_part.bump_(state)
        return state * 2 + y


class ReadInEngine(torch.nn.Module):
    def forward(self, state, y):
        before = state * 3
        torch.ops.trt_inplace_part.bump_(state)
        return state * 2 + y, before


class UpdatedAgainInPyTorch(torch.nn.Module):
    """The engine's new state is not the final one: an op without a converter,
    run in PyTorch, writes the state after it."""

    def forward(self, state, y):
        torch.ops.trt_inplace_part.bump_(state)
        torch.ops.trt_inplace_part.halve_(state)
        return state + y


class StateAcrossEngines(torch.nn.Module):
    def forward(self, state, y):
        torch.ops.trt_inplace_part.bump_(state)
        between = torch.sin(state)
        torch.ops.trt_inplace_part.bump_(state)
        return state * between + y


def partitioned(module, fast, inputs=None):
    """The partitioned graph ``compile`` hands to the in-place input pass."""
    x = torch.randn(2, 4)
    inputs = [x, x] if inputs is None else inputs
    ep = torch.export.export(module, tuple(t.clone() for t in inputs))
    captured = []
    with unittest.mock.patch(
        "torch_tensorrt.dynamo.partitioning.isolate_in_place_engine_inputs",
        side_effect=captured.append,
    ):
        torch_tensorrt.dynamo.compile(
            ep,
            arg_inputs=inputs,
            min_block_size=1,
            dryrun=True,
            use_fast_partitioner=fast,
            torch_executed_ops={torch.ops.aten.sin.default},
        )
    (gm,) = captured
    return gm


def node(gm, name):
    return next(n for n in gm.graph.nodes if n.name == name)


def move_after(gm, name, anchor):
    """Schedule node ``name`` right after ``anchor`` (as another partitioning may)."""
    moved = node(gm, name)
    node(gm, anchor).append(moved)
    gm.graph.lint()
    gm.recompile()


class ManyStates(torch.nn.Module):
    """``n`` states, each updated in place, then read by a later op."""

    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, *states):
        for state in states:
            torch.ops.trt_inplace_part.bump_(state)
        return states[0].sin() * 2


class TestLinearInTheStates(TestCase):
    """The pass looks at each state and each node a bounded number of times.

    Counted, not timed: the converter registry's lookups, each of which runs
    the capability validators, the pass's dearest step. Before, they grew with
    the square of the number of states (tools/bench/in_place_pass_scaling.py
    times the pass).
    """

    def _counts(self, n):
        from torch_tensorrt.dynamo.conversion._ConverterRegistry import (
            DYNAMO_CONVERTERS,
        )

        gm = partitioned(ManyStates(n), False, [torch.zeros(2, 4) for _ in range(n)])
        lookups = unittest.mock.patch.object(
            type(DYNAMO_CONVERTERS),
            "get",
            autospec=True,
            side_effect=type(DYNAMO_CONVERTERS).get,
        )
        with lookups as get:
            isolate_in_place_engine_inputs(gm)
        # the copies the pass made: none, each state's new value is what is read
        clones = [n for n in gm.graph.nodes if n.target is torch.ops.aten.clone.default]
        return get.call_count, len(clones)

    def test_registry_lookups_grow_linearly(self):
        small, clones_small = self._counts(8)
        large, clones_large = self._counts(32)
        self.assertEqual((clones_small, clones_large), (0, 0))
        self.assertGreater(small, 0)
        # linear: 4x the states, at most ~4x the lookups (quadratic was ~16x)
        self.assertLessEqual(large, 4.5 * small, (small, large))


def assert_isolated(test, gm):
    """Every engine input written in place is a copy made for it, or a state the
    plan put in place by its op, which only that engine reads (write-backs of its
    new value aside)."""
    for call in gm.graph.nodes:
        if call.op != "call_module" or "_run_on_acc" not in str(call.target):
            continue
        for position in in_place_engine_inputs(getattr(gm, str(call.target))):
            value = call.args[position]
            if value.target is torch.ops.aten.clone.default:
                test.assertEqual(list(value.users), [call])
                continue
            test.assertEqual(value.op, "placeholder", call.name)
            plan = value.meta[STATE_PLAN]
            test.assertTrue(plan.in_place and plan.by_its_op, plan)
            for user in value.users:
                if user is not call:
                    submodule = getattr(gm, str(user.target), None)
                    test.assertFalse(
                        _reads(submodule, user, value), (call.name, user.name)
                    )


def _reads(submodule, user, value):
    """Whether ``user`` (a node or a submodule call) reads ``value``."""
    if submodule is None:
        return (
            user.target is not torch.ops.aten.copy_.default or user.args[0] is not value
        )
    inputs = [n for n in submodule.graph.nodes if n.op == "placeholder"]
    return any(
        u.target is not torch.ops.aten.copy_.default or u.args[0] is not inputs[i]
        for i, arg in enumerate(user.args)
        if arg is value
        for u in inputs[i].users
    )


def assert_same_as_eager(test, gm, module):
    state, y = torch.randn(2, 4), torch.randn(2, 4)
    eager_state = state.clone()
    expected = module(eager_state, y)
    actual = gm(state, y)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(state, eager_state)


class TestInPlaceEngineInputs(TestCase):
    def test_engine_inputs_written_in_place(self):
        gm = partitioned(ReadBeforeUpdate(), fast=False)
        self.assertEqual(in_place_engine_inputs(gm._run_on_acc_0), [0])
        # another reader inside the engine: TensorRT copies, nothing is in place
        gm = partitioned(ReadInEngine(), fast=False)
        self.assertEqual(in_place_engine_inputs(gm._run_on_acc_0), [])

    def test_a_state_only_the_engine_reads_stays_in_place(self):
        for fast in (False, True):
            gm = partitioned(ManyStates(3), fast, [torch.zeros(2, 4) for _ in range(3)])
            engines = [m for n, m in gm.named_children() if "_run_on_acc" in n]
            written = sum(len(in_place_engine_inputs(m)) for m in engines)
            self.assertEqual(written, 3)
            before = gm.code
            with self.assertNoLogs("torch_tensorrt.dynamo.partitioning", "WARNING"):
                isolate_in_place_engine_inputs(gm)
            self.assertEqual(gm.code, before)

    def test_reads_before_the_engine_get_the_engine_a_copy(self):
        # whether a reader runs before or after the engine is the partitioner's
        # order, not the program's: the engine gets a copy either way
        for fast in (False, True):
            gm = partitioned(ReadBeforeUpdate(), fast)
            with self.assertLogs(
                "torch_tensorrt.dynamo.partitioning", "WARNING"
            ) as logs:
                isolate_in_place_engine_inputs(gm)
            (message,) = logs.output
            self.assertIn("the state is also read by sin", message)
            assert_isolated(self, gm)
            assert_same_as_eager(self, gm, ReadBeforeUpdate())

    def test_state_crossing_engines(self):
        for fast in (False, True):
            gm = partitioned(StateAcrossEngines(), fast)
            # global: one engine per update, the second takes the first one's new
            # state; fast: both updates in one engine, which also outputs the
            # state between them for the PyTorch `sin` (a second engine does the rest)
            in_place = sorted(
                in_place_engine_inputs(module)
                for name, module in gm.named_children()
                if "_run_on_acc" in name
            )
            self.assertEqual(in_place, [[], [0]] if fast else [[0], [0]])
            isolate_in_place_engine_inputs(gm)
            assert_isolated(self, gm)
            assert_same_as_eager(self, gm, StateAcrossEngines())

    def test_a_state_written_after_the_engine_gets_the_engine_a_copy(self):
        # the engine's new value would be bound to the state's memory, into which
        # the write-back copies the op's later value, maybe before a reader of it
        for fast in (False, True):
            gm = partitioned(UpdatedAgainInPyTorch(), fast)
            with self.assertLogs(
                "torch_tensorrt.dynamo.partitioning", "WARNING"
            ) as logs:
                isolate_in_place_engine_inputs(gm)
            self.assertIn("the state plan copies it back", logs.output[0])
            assert_isolated(self, gm)
            assert_same_as_eager(self, gm, UpdatedAgainInPyTorch())

    def test_read_after_the_engine_gets_the_engine_a_copy(self):
        gm = partitioned(ReadBeforeUpdate(), fast=False)
        move_after(gm, "sin", "_run_on_acc_0")
        with self.assertLogs("torch_tensorrt.dynamo.partitioning", "WARNING") as logs:
            isolate_in_place_engine_inputs(gm)
        self.assertExpectedInline(
            str(gm.graph).strip(),
            """\
graph():
    %state : [num_users=3] = placeholder[target=state]
    %y : [num_users=1] = placeholder[target=y]
    %clone_default : [num_users=1] = call_function[target=torch.ops.aten.clone.default](args = (%state,), kwargs = {})
    %_run_on_acc_0 : [num_users=2] = call_module[target=_run_on_acc_0](args = (%clone_default, %y), kwargs = {})
    %sin : [num_users=1] = call_function[target=torch.ops.aten.sin.default](args = (%state,), kwargs = {})
    %getitem : [num_users=1] = call_function[target=operator.getitem](args = (%_run_on_acc_0, 0), kwargs = {})
    %getitem_2 : [num_users=1] = call_function[target=operator.getitem](args = (%_run_on_acc_0, 1), kwargs = {})
    %copy__default : [num_users=0] = call_function[target=torch.ops.aten.copy_.default](args = (%state, %getitem), kwargs = {})
    return (getitem_2, sin)""",
        )
        (message,) = logs.output
        self.assertIn("Input 'state' of TensorRT engine '_run_on_acc_0'", message)
        self.assertIn("the state is also read by sin", message)
        # the copy changes nothing the graph computes
        state, y = torch.randn(2, 4), torch.randn(2, 4)
        eager_state = state.clone()
        expected = ReadBeforeUpdate()(eager_state, y)
        actual = gm(state, y)
        torch.testing.assert_close(actual, expected)
        torch.testing.assert_close(state, eager_state)

    def test_read_inside_a_pytorch_submodule_after_the_engine(self):
        gm = partitioned(ReadBeforeUpdate(), fast=True)
        move_after(gm, "_run_on_gpu_0", "_run_on_acc_1")
        with self.assertLogs("torch_tensorrt.dynamo.partitioning", "WARNING") as logs:
            isolate_in_place_engine_inputs(gm)
        self.assertIn("the state is also read by sin", logs.output[0])
        self.assertEqual(
            node(gm, "_run_on_acc_1").args[0].target, torch.ops.aten.clone.default
        )

    def test_a_state_read_between_two_updates_is_copied(self):
        # fast partitioner: both updates in one engine, which also outputs the
        # state between them; a write-back runs before a later engine reads it
        class ReadBetweenUpdates(torch.nn.Module):
            def forward(self, state, y):
                torch.ops.trt_inplace_part.bump_(state)
                a = torch.sin(state)
                m = state * a
                torch.ops.trt_inplace_part.bump_(state)
                return m + state + y

        gm = partitioned(ReadBetweenUpdates(), fast=True)
        self.assertExpectedInline(
            str(gm.graph).strip(),
            """\
graph():
    %state : [num_users=2] = placeholder[target=state]
    %y : [num_users=1] = placeholder[target=y]
    %_run_on_acc_0 : [num_users=2] = call_module[target=_run_on_acc_0](args = (%state,), kwargs = {})
    %getitem : [num_users=2] = call_function[target=operator.getitem](args = (%_run_on_acc_0, 0), kwargs = {})
    %getitem_1 : [num_users=2] = call_function[target=operator.getitem](args = (%_run_on_acc_0, 1), kwargs = {})
    %_run_on_gpu_1 : [num_users=1] = call_module[target=_run_on_gpu_1](args = (%getitem, %state, %getitem_1), kwargs = {})
    %_run_on_acc_2 : [num_users=1] = call_module[target=_run_on_acc_2](args = (%getitem, %_run_on_gpu_1, %getitem_1, %y), kwargs = {})
    return (_run_on_acc_2,)""",
        )
        # the state is read between its updates: the plan copies it back, and the
        # first engine, which writes it in place, gets a copy
        with self.assertLogs("torch_tensorrt.dynamo.partitioning", "WARNING") as logs:
            isolate_in_place_engine_inputs(gm)
        self.assertIn(
            "Input 'state' of TensorRT engine '_run_on_acc_0'", logs.output[0]
        )
        self.assertIn("the state plan copies it back", logs.output[0])
        assert_isolated(self, gm)
        assert_same_as_eager(self, gm, ReadBetweenUpdates())

    def test_the_plan_decides(self):
        # the pass does what the state's plan says, and nothing else
        for module, in_place in ((OnlyTheEngine(), False), (ReadBeforeUpdate(), True)):
            gm = partitioned(module, fast=False)
            state = node(gm, "state")
            forged = dataclasses.replace(
                state.meta[STATE_PLAN],
                update="in_place" if in_place else "copy",
                by_its_op=in_place,
                reason="forged for the test",
            )
            state.meta[STATE_PLAN] = forged
            isolate_in_place_engine_inputs(gm)
            engine = next(n for n in gm.graph.nodes if "_run_on_acc" in str(n.target))
            copied = engine.args[0].target is torch.ops.aten.clone.default
            self.assertEqual(copied, not in_place, type(module).__name__)


if __name__ == "__main__":
    run_tests()
