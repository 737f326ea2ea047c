# type: ignore
"""State updates rewritten into ``IKVCacheUpdateLayer``'s form (the lowering pass).

What each form becomes in the lowered graph, why a write stays as it is, and how
a standalone engine declares a viewed state. Which engines these graphs give,
and how they run, is tested by ``test_state_update_patterns.py`` and
``test_serialized_engine_alias_map.py``.
"""

import unittest

import torch
import torch_tensorrt
from test_lower_auto_functionalized import CPU_BUILDER, NEEDS_CPU_BUILDER, _clone
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo import CompilationSettings
from torch_tensorrt.dynamo.lowering import get_decompositions, post_lowering
from torch_tensorrt.dynamo.conversion.impl._kv_cache_layer import (
    KV_STATE_WRITE,
    STATE_VIEW,
    kv_layer_view,
    plan_kv_state_write,
)
from torch_tensorrt.dynamo.lowering.passes.view_state_writes_in_kv_cache_form import (
    declare_state_views,
)


class RowsWrite(torch.nn.Module):
    def forward(self, state, new):
        state[:, 5:7] = new
        return new * 2


class IndexWrite(torch.nn.Module):
    def forward(self, state, position, new):
        state.index_copy_(2, position, new)
        return new * 2


class FunctionalWrite(torch.nn.Module):
    def forward(self, state, new):
        return torch.ops.aten.slice_scatter.default(state, new, 1, 5, 7) * 2


class StridedWrite(torch.nn.Module):
    def forward(self, state, new):
        state[:, 0:4:2] = new
        return new * 2


class ReadBefore(torch.nn.Module):
    def forward(self, state, new):
        old = state.sum()
        state[:, 5:7] = new
        return old


def _lowered(module, args):
    """``module``'s graph as compile() lowers it (Torch-TensorRT's decompositions)."""
    ep = torch.export.export(module, _clone(args))
    gm = ep.run_decompositions(get_decompositions(False)).module()
    return post_lowering(gm, CompilationSettings())


def _writes(gm):
    return [
        n
        for n in gm.graph.nodes
        if n.target
        in (torch.ops.aten.slice_scatter.default, torch.ops.aten.index_copy.default)
    ]


def _plan_reason(module, args):
    ep = torch.export.export(module, args)
    (write,) = _writes(ep.run_decompositions(get_decompositions(False)).module())
    plan, reason = plan_kv_state_write(write)
    return plan, reason


class TestLayerView(TestCase):
    def test_the_layer_form_of_each_state(self):
        cases = [
            ((2, 4, 16, 8), 2, (2, 4, 16, 8)),
            ((2, 16, 8), 1, (2, 1, 16, 8)),
            ((2, 16, 4, 8), 1, (2, 1, 16, 32)),
            ((16, 8), 0, (1, 1, 16, 8)),
            ((8, 16), 1, (8, 1, 16, 1)),
            ((16,), 0, (1, 1, 16, 1)),
            ((2, 3, 4, 16, 8), 3, (2, 12, 16, 8)),
        ]
        for shape, axis, view in cases:
            with self.subTest(shape=shape, axis=axis):
                self.assertEqual(kv_layer_view(shape, axis)[0], view)

    def test_a_dynamic_first_dimension_only(self):
        batch = object()  # a size that is no int: dynamic
        self.assertEqual(kv_layer_view((batch, 16, 8), 1)[0], (-1, 1, 16, 8))
        view, reason = kv_layer_view((2, batch, 8), 2)
        self.assertIsNone(view)
        self.assertIn("dimensions [1] of the state are dynamic", reason)
        view, reason = kv_layer_view((batch, 8), 0)
        self.assertIsNone(view)
        self.assertIn("the written axis 0 has a dynamic size", reason)


class TestWhatStaysAsItIs(TestCase):
    """Each write the layer cannot make, with the reason the debug log gives."""

    def test_reasons(self):
        state, new = torch.zeros(2, 16, 8), torch.randn(2, 2, 8)
        cases = [
            (FunctionalWrite(), (state, new), "is not written back into"),
            (StridedWrite(), (state, new), "a slice with step 2"),
            (ReadBefore(), (state, new), "also read by"),
            (
                RowsWrite(),
                (state.int(), new.int()),
                "IKVCacheUpdateLayer takes float32, float16 and bfloat16",
            ),
            (
                IndexWrite(),
                (
                    torch.zeros(1, 4, 16, 8),
                    torch.tensor([1, 2]),
                    torch.randn(1, 4, 2, 8),
                ),
                "positions given by a tensor of more than one",
            ),
        ]
        for module, args, reason in cases:
            with self.subTest(type(module).__name__):
                plan, why = _plan_reason(module, args)
                self.assertIsNone(plan)
                self.assertIn(reason, why)

    def test_a_plan_for_a_state_update(self):
        plan, reason = _plan_reason(
            RowsWrite(), (torch.zeros(2, 16, 8), torch.randn(2, 2, 8))
        )
        self.assertEqual((plan.axis, plan.start, plan.length), (1, 5, 2))
        self.assertEqual(plan.view, (2, 1, 16, 8))
        self.assertFalse(plan.in_layer_form)
        self.assertIn("seen as [2, 1, 16, 8]", reason)


class TestRewrite(TestCase):
    def test_a_3d_state_is_viewed_at_the_engine_boundary(self):
        gm = _lowered(RowsWrite(), (torch.zeros(2, 16, 8), torch.randn(2, 2, 8)))
        self.assertExpectedInline(
            gm.code.strip(),
            """\
def forward(self, state, new):
    state, new, = fx_pytree.tree_flatten_spec(([state, new], {}), self._in_spec)
    view_default = torch.ops.aten.view.default(state, [2, 1, 16, 8])
    reshape_default = torch.ops.aten.reshape.default(new, [2, 1, 2, 8])
    slice_scatter_default = torch.ops.aten.slice_scatter.default(view_default, reshape_default, 2, 5, 7);  view_default = reshape_default = None
    view_default_2 = torch.ops.aten.view.default(slice_scatter_default, [2, 16, 8]);  slice_scatter_default = None
    mul = torch.ops.aten.mul.Tensor(new, 2);  new = None
    copy__default = torch.ops.aten.copy_.default(state, view_default_2);  state = view_default_2 = copy__default = None
    return pytree.tree_unflatten((mul,), self._out_spec)""",
        )
        marked = {
            n.name: n.meta[STATE_VIEW]["role"]
            for n in gm.graph.nodes
            if STATE_VIEW in n.meta
        }
        self.assertEqual(marked, {"view_default": "input", "view_default_2": "output"})
        self.assertEqual(
            [bool(w.meta.get(KV_STATE_WRITE)) for w in _writes(gm)], [True]
        )

    def test_a_4d_index_write_keeps_its_form_and_is_marked(self):
        gm = _lowered(
            IndexWrite(),
            (torch.zeros(3, 4, 16, 8), torch.tensor([4]), torch.randn(3, 4, 1, 8)),
        )
        self.assertFalse(any(STATE_VIEW in n.meta for n in gm.graph.nodes))
        (write,) = _writes(gm)
        self.assertTrue(write.meta[KV_STATE_WRITE])
        self.assertEqual(write.args[0].op, "placeholder")

    def test_a_functional_write_is_left_alone(self):
        gm = _lowered(FunctionalWrite(), (torch.zeros(2, 16, 8), torch.randn(2, 2, 8)))
        (write,) = _writes(gm)
        self.assertNotIn(KV_STATE_WRITE, write.meta)


class TestStandaloneEngineInputs(TestCase):
    def test_the_placeholder_becomes_the_view(self):
        gm = _lowered(RowsWrite(), (torch.zeros(2, 16, 8), torch.randn(2, 2, 8)))
        specs = [
            torch_tensorrt.Input(
                min_shape=(1, 16, 8), opt_shape=(2, 16, 8), max_shape=(8, 16, 8)
            ),
            torch_tensorrt.Input(shape=(2, 2, 8)),
        ]
        shapes = declare_state_views(gm, specs)
        self.assertEqual(shapes, {0: ([2, 16, 8], [2, 1, 16, 8])})
        self.assertEqual(
            specs[0].shape,
            {
                "min_shape": (1, 1, 16, 8),
                "opt_shape": (2, 1, 16, 8),
                "max_shape": (8, 1, 16, 8),
            },
        )
        self.assertEqual(specs[1].shape, (2, 2, 8))
        state = next(n for n in gm.graph.nodes if n.op == "placeholder")
        self.assertEqual(tuple(state.meta["val"].shape), (2, 1, 16, 8))
        self.assertFalse(any(STATE_VIEW in n.meta for n in gm.graph.nodes))
        (write,) = _writes(gm)
        self.assertIs(write.args[0], state)


@unittest.skipIf(not CPU_BUILDER, NEEDS_CPU_BUILDER)
class TestCompiledModule(TestCase):
    def test_the_views_run_in_pytorch_around_the_engine(self):
        """compile(): the engine takes the state's view and writes it in place;
        the views are PyTorch's, outside any engine."""
        from test_compile_with_stand_in_engines import engines_built_execution_stood_in

        args = (torch.zeros(2, 16, 8), torch.randn(2, 2, 8))
        ep = torch.export.export(RowsWrite(), tuple(a.clone() for a in args))
        with engines_built_execution_stood_in():
            trt = torch_tensorrt.dynamo.compile(
                ep, arg_inputs=list(args), min_block_size=1
            )
        engines = [m for m in trt.modules() if hasattr(m, "aliased_io")]
        self.assertEqual(len(engines), 1)
        ((_, (_, kind)),) = engines[0].aliased_io.items()
        self.assertEqual(kind, "kv_cache_update")
        engine_inputs = (
            [n for n in engines[0].graph.nodes if n.op == "placeholder"]
            if hasattr(engines[0], "graph")
            else []
        )
        for node in engine_inputs:
            self.assertNotIn(STATE_VIEW, node.meta)
        views = [
            n
            for _, m in trt.named_children()
            if isinstance(m, torch.fx.GraphModule)
            for n in m.graph.nodes
            if n.target is torch.ops.aten.view.default
        ]
        self.assertEqual(len(views), 2, trt.graph)


if __name__ == "__main__":
    run_tests()
