# type: ignore
"""Engine inputs updated in place by an in-place plugin are not read afterwards.

The partitioned graphs come from ``compile(dryrun=True)``; the in-place op's
converter uses standard layers and declares ``requires_aliased_plugin_io`` as a
plugin converter would. Where a test needs a graph no partitioner produces today
(a read of the old value scheduled after the engine), it moves that node in the
partitioned graph, as a different partitioning would. Graph snapshots use
expecttest (``EXPECTTEST_ACCEPT=1`` rewrites them).
"""

import unittest.mock

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo._SourceIR import SourceIR
from torch_tensorrt.dynamo.conversion import dynamo_tensorrt_converter, impl
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


class ReadBeforeUpdate(torch.nn.Module):
    def forward(self, state, y):
        before = torch.sin(state)
        torch.ops.trt_inplace_part.bump_(state)
        return state * 2 + y, before


class ReadInEngine(torch.nn.Module):
    def forward(self, state, y):
        before = state * 3
        torch.ops.trt_inplace_part.bump_(state)
        return state * 2 + y, before


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


class TestInPlaceEngineInputs(TestCase):
    def test_engine_inputs_written_in_place(self):
        gm = partitioned(ReadBeforeUpdate(), fast=False)
        self.assertEqual(in_place_engine_inputs(gm._run_on_acc_0), [0])
        # another reader inside the engine: TensorRT copies, nothing is in place
        gm = partitioned(ReadInEngine(), fast=False)
        self.assertEqual(in_place_engine_inputs(gm._run_on_acc_0), [])

    def test_reads_before_the_engine_keep_the_update_in_place(self):
        for fast in (False, True):
            gm = partitioned(ReadBeforeUpdate(), fast)
            before = gm.code
            with self.assertNoLogs("torch_tensorrt.dynamo.partitioning", "WARNING"):
                isolate_in_place_engine_inputs(gm)
            self.assertEqual(gm.code, before)

    def test_state_crossing_engines_stays_in_place(self):
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
            before = gm.code
            with self.assertNoLogs("torch_tensorrt.dynamo.partitioning", "WARNING"):
                isolate_in_place_engine_inputs(gm)
            self.assertEqual(gm.code, before)

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
        self.assertIn("read afterwards by sin (old value)", message)
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
        self.assertIn(
            "read afterwards by _run_on_gpu_0.sin (old value)", logs.output[0]
        )
        self.assertEqual(
            node(gm, "_run_on_acc_1").args[0].target, torch.ops.aten.clone.default
        )

    def test_view_taken_before_and_read_after_the_engine(self):
        gm = partitioned(ReadBeforeUpdate(), fast=False)
        graph, engine = gm.graph, node(gm, "_run_on_acc_0")
        with graph.inserting_before(engine):
            view = graph.call_function(
                torch.ops.aten.select.int, (node(gm, "state"), 0, 0)
            )
        with graph.inserting_after(engine):
            read = graph.call_function(torch.ops.aten.neg.default, (view,))
        output = node(gm, "output")
        output.args = ((*output.args[0], read),)
        gm.recompile()
        with self.assertLogs("torch_tensorrt.dynamo.partitioning", "WARNING") as logs:
            isolate_in_place_engine_inputs(gm)
        self.assertIn(f"read afterwards by {read.name}", logs.output[0])

    def test_reads_after_the_write_back_see_the_new_value(self):
        gm = partitioned(ReadBeforeUpdate(), fast=False)
        graph = gm.graph
        with graph.inserting_after(node(gm, "copy__default")):
            read = graph.call_function(torch.ops.aten.neg.default, (node(gm, "state"),))
        output = node(gm, "output")
        output.args = ((*output.args[0], read),)
        gm.recompile()
        before = gm.code
        with self.assertNoLogs("torch_tensorrt.dynamo.partitioning", "WARNING"):
            isolate_in_place_engine_inputs(gm)
        self.assertEqual(gm.code, before)

    def test_new_state_read_after_the_memory_is_overwritten(self):
        # after the engine, its new state *is* the input's memory: a write-back
        # of something else before a read of the new state would change it
        gm = partitioned(ReadBeforeUpdate(), fast=False)
        graph, engine = gm.graph, node(gm, "_run_on_acc_0")
        new_state = node(gm, "copy__default").args[1]
        with graph.inserting_after(new_state):
            overwrite = graph.call_function(
                torch.ops.aten.copy_.default, (node(gm, "state"), node(gm, "y"))
            )
        with graph.inserting_after(overwrite):
            read = graph.call_function(torch.ops.aten.neg.default, (new_state,))
        output = node(gm, "output")
        output.args = ((*output.args[0], read),)
        gm.recompile()
        with self.assertLogs("torch_tensorrt.dynamo.partitioning", "WARNING") as logs:
            isolate_in_place_engine_inputs(gm)
        self.assertIn(
            f"read afterwards by {read.name} (new value, after {overwrite.name})",
            logs.output[0],
        )
        self.assertEqual(engine.args[0].target, torch.ops.aten.clone.default)

    def test_intermediate_states_in_one_engine_are_not_bound(self):
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
        # the state between the updates (getitem) is not bound to `state`: the
        # write-back in _run_on_gpu_1 would change it before _run_on_acc_2 reads it
        before = gm.code
        with self.assertNoLogs("torch_tensorrt.dynamo.partitioning", "WARNING"):
            isolate_in_place_engine_inputs(gm)
        self.assertEqual(gm.code, before)

    def test_another_engine_input_sharing_the_memory(self):
        gm = partitioned(ReadBeforeUpdate(), fast=False)
        engine = node(gm, "_run_on_acc_0")
        with gm.graph.inserting_before(engine):
            view = gm.graph.call_function(
                torch.ops.aten.view.default, (node(gm, "state"), [2, 4])
            )
        engine.update_arg(1, view)
        gm.recompile()
        with self.assertLogs("torch_tensorrt.dynamo.partitioning", "WARNING") as logs:
            isolate_in_place_engine_inputs(gm)
        self.assertIn("_run_on_acc_0 (another input)", logs.output[0])


if __name__ == "__main__":
    run_tests()
