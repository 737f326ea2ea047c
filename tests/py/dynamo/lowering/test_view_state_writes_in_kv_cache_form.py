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
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo import CompilationSettings
from torch_tensorrt.dynamo.conversion.impl._kv_cache_layer import (
    KV_STATE_WRITE,
    STATE_VIEW,
)
from torch_tensorrt.dynamo.lowering import get_decompositions, post_lowering
from torch_tensorrt.dynamo.lowering._kv_state_writes import (
    kv_layer_view,
    plan_kv_state_write,
)
from torch_tensorrt.dynamo.lowering._mutation_write_backs import (
    alias_map_entries,
    check_alias_map_against_engine,
)

from .test_lower_auto_functionalized import CPU_BUILDER, NEEDS_CPU_BUILDER, _clone
from .test_serialized_engine_alias_map import KvWrite, _alias_map, _kv_args

try:  # the next piece's single decision on what TensorRT writes in place
    from torch_tensorrt.dynamo.lowering import _state_plan  # noqa: F401

    STATE_PLAN = True
except ImportError:
    STATE_PLAN = False

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
    plan, reason = plan_kv_state_write(write, write.args[0])
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

    def test_a_functional_write_is_no_state_update(self):
        # its result is a new tensor: the input keeps its value, no plan is made
        gm = _lowered(FunctionalWrite(), (torch.zeros(2, 16, 8), torch.randn(2, 2, 8)))
        (write,) = _writes(gm)
        self.assertNotIn(KV_STATE_WRITE, write.meta)
        if STATE_PLAN:
            self.assertEqual(_state_plan.state_plan(gm), {})

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
        marked = {
            n.name: n.meta[STATE_VIEW]["role"]
            for n in gm.graph.nodes
            if STATE_VIEW in n.meta
        }
        if STATE_PLAN:
            # the state plan's boundary is a reshape: a view of a contiguous
            # state, a copy (written back) of one laid out otherwise
            self.assertExpectedInline(
                gm.code.strip(),
                """\
def forward(self, state, new):
    state, new, = fx_pytree.tree_flatten_spec(([state, new], {}), self._in_spec)
    contiguous_default = torch.ops.aten.contiguous.default(state)
    reshape_default = torch.ops.aten.reshape.default(contiguous_default, [2, 1, 16, 8]);  contiguous_default = None
    reshape_default_1 = torch.ops.aten.reshape.default(new, [2, 1, 2, 8])
    slice_scatter_default = torch.ops.aten.slice_scatter.default(reshape_default, reshape_default_1, 2, 5, 7);  reshape_default = reshape_default_1 = None
    view_default_1 = torch.ops.aten.view.default(slice_scatter_default, [2, 16, 8]);  slice_scatter_default = None
    mul = torch.ops.aten.mul.Tensor(new, 2);  new = None
    copy__default = torch.ops.aten.copy_.default(state, view_default_1);  state = view_default_1 = copy__default = None
    return pytree.tree_unflatten((mul,), self._out_spec)""",
            )
            self.assertEqual(
                marked,
                {
                    "contiguous_default": "layout",
                    "reshape_default": "input",
                    "view_default_1": "output",
                },
            )
        else:
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
            self.assertEqual(
                marked, {"view_default": "input", "view_default_2": "output"}
            )
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
        the views are PyTorch's, outside the one engine, with the flag or not."""
        from .test_compile_with_stand_in_engines import engines_built_execution_stood_in

        args = (torch.zeros(2, 16, 8), torch.randn(2, 2, 8))
        ep = torch.export.export(RowsWrite(), tuple(a.clone() for a in args))
        for full in (False, True):
            with self.subTest(require_full_compilation=full):
                with engines_built_execution_stood_in():
                    trt = torch_tensorrt.dynamo.compile(
                        ep,
                        arg_inputs=list(args),
                        min_block_size=1,
                        require_full_compilation=full,
                    )
                engines = [m for m in trt.modules() if hasattr(m, "aliased_io")]
                self.assertEqual(len(engines), 1)
                ((_, (_, kind)),) = engines[0].aliased_io.items()
                self.assertEqual(kind, "kv_cache_update")
                aten = torch.ops.aten
                views = (aten.view.default, aten.reshape.default)
                in_pytorch = [
                    n.target
                    for _, m in trt.named_children()
                    if isinstance(m, torch.fx.GraphModule)
                    for n in m.graph.nodes
                    if n.op == "call_function"
                ]
                self.assertEqual(len([t for t in in_pytorch if t in views]), 2)
                # besides the views: the state's layout, and its write-back (a
                # copy onto itself, skipped)
                others = {t for t in in_pytorch if t not in views}
                self.assertLessEqual(
                    others, {aten.contiguous.default, aten.copy_.default}
                )


class SlabWrite3d(torch.nn.Module):
    """The same write on a 3-D state: the layer takes it seen as ``[B, 1, S, D]``."""

    def forward(self, cache, update):
        cache[:, 5:7, :] = update
        return update * 2


class RowAt(torch.nn.Module):
    """One row of a 2-D state, at a position given at run time."""

    def forward(self, state, row, update):
        state.index_copy_(0, row, update)
        return update * 2


@unittest.skipIf(not CPU_BUILDER, NEEDS_CPU_BUILDER)
class TestTheAliasMapGivesBothShapes(TestCase):
    """A standalone engine's input has the layer's form; the alias map says so."""

    def test_a_state_in_the_layers_form(self):
        _, aliases = _alias_map(KvWrite(), _kv_args())
        self.assertEqual(
            [(a["state_shape"], a["binding_shape"]) for a in aliases],
            [([2, 4, 16, 8], [2, 4, 16, 8])],
        )

    def test_a_state_of_another_form_is_bound_through_a_view(self):
        """The engine's input (and aliased output) has the layer's form; the map
        gives it beside the caller's shape, with require_full_compilation or not."""
        for full in (False, True):
            with self.subTest(require_full_compilation=full):
                self._bound_through_a_view(require_full_compilation=full)

    def _bound_through_a_view(self, **settings):
        cache, update = _kv_args()
        engine, aliases = _alias_map(
            SlabWrite3d(),
            (cache[:, 0].contiguous(), update[:, 0].contiguous()),
            **settings,
        )
        self.assertEqual(
            aliases,
            [
                {
                    "output": "cache_new",
                    "input": "cache",
                    "update": "in_place",
                    "binding": "engine",
                    "state_shape": [2, 16, 8],
                    "binding_shape": [2, 1, 16, 8],
                }
            ],
        )
        _, aliases = _alias_map(
            RowAt(),
            (torch.zeros(16, 8), torch.tensor([3]), torch.randn(1, 8)),
            **settings,
        )
        self.assertEqual(
            [(a["state_shape"], a["binding_shape"]) for a in aliases],
            [([16, 8], [1, 1, 16, 8])],
        )


@unittest.skipIf(
    not torch.cuda.is_available(),
    "Running TensorRT engines needs a CUDA device; this host has none.",
)
class TestViewedStatesOnGpu(TestCase):
    def _run_viewed(self, module, state, steps, dynamic_batch=None, full=False):
        """Build ``module``'s engine, and run it as a C++ caller would from the map:
        the state's own memory bound with ``binding_shape``, for the input and for
        its aliased output. ``steps`` gives the other arguments of each step."""
        import json
        import tempfile

        import tensorrt as trt

        inputs = [state] + list(steps[0])
        if dynamic_batch is not None:
            # export at another batch (it specializes a batch of 1), run at this one
            inputs = [
                t[:1].expand(dynamic_batch, *t.shape[1:]).contiguous() for t in inputs
            ]
        if dynamic_batch is None:
            engine_bytes, aliases = _alias_map(
                module, inputs, require_full_compilation=full
            )
        else:
            batch = torch.export.Dim("batch", min=1, max=8)
            ep = torch.export.export(
                module,
                tuple(inputs),
                dynamic_shapes=tuple({0: batch} for _ in inputs),
            )
            specs = [
                torch_tensorrt.Input(
                    min_shape=(1,) + tuple(t.shape[1:]),
                    opt_shape=tuple(t.shape),
                    max_shape=(8,) + tuple(t.shape[1:]),
                )
                for t in inputs
            ]
            with tempfile.TemporaryDirectory() as tmp:
                engine_bytes = torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                    ep,
                    arg_inputs=specs,
                    min_block_size=1,
                    alias_map_path=f"{tmp}/a.json",
                    require_full_compilation=full,
                )
                with open(f"{tmp}/a.json") as f:
                    aliases = json.load(f)["aliases"]
        (alias,) = aliases
        self.assertEqual((alias["update"], alias["binding"]), ("in_place", "engine"))
        self.assertEqual(alias["state_shape"][1:], list(state.shape[1:]))
        engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(engine_bytes)
        check_alias_map_against_engine(alias_map_entries(aliases), engine)
        # TensorRT itself reports the alias the map gives
        self.assertEqual(
            engine.get_aliased_input_tensor(alias["output"]), alias["input"]
        )
        self.assertEqual(
            list(engine.get_tensor_shape(alias["input"])), alias["binding_shape"]
        )
        context = engine.create_execution_context()
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        is_output = {
            n: engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT for n in names
        }
        shape = [state.shape[0] if d == -1 else d for d in alias["binding_shape"]]
        view = state.view(shape)  # the caller's memory, no copy
        state.fill_(7)
        eager_state = state.clone()
        for step, args in enumerate(steps):
            bound = dict(zip([n for n in names if not is_output[n]], [view, *args]))
            for n, t in bound.items():
                self.assertTrue(context.set_input_shape(n, tuple(t.shape)))
            bound[alias["output"]] = view
            out = {
                n: torch.empty(tuple(context.get_tensor_shape(n)), device="cuda")
                for n in names
                if is_output[n] and n != alias["output"]
            }
            for n, t in {**bound, **out}.items():
                self.assertTrue(context.set_tensor_address(n, t.data_ptr()))
            stream = torch.cuda.current_stream()
            self.assertTrue(context.execute_async_v3(stream.cuda_stream))
            stream.synchronize()
            expected = module(eager_state, *args)
            self.assertEqual(out["output0"], expected, msg=f"step {step}")
            self.assertEqual(state, eager_state, msg=f"step {step}")
            self.assertGreater((state == 7).sum().item(), 0, msg="the sentinel")

    def test_states_of_other_forms_run_in_place_through_a_view(self):
        torch.manual_seed(0)
        for full in (False, True):
            with self.subTest(require_full_compilation=full):
                self._run_viewed(
                    SlabWrite3d(),
                    torch.zeros(2, 16, 8, device="cuda"),
                    [(torch.randn(2, 2, 8, device="cuda") + s,) for s in range(3)],
                    full=full,
                )
                self._run_viewed(
                    RowAt(),
                    torch.zeros(64, 8, device="cuda"),
                    [
                        (
                            torch.tensor([p], device="cuda"),
                            torch.randn(1, 8, device="cuda"),
                        )
                        for p in (3, 40, 63)
                    ],
                    full=full,
                )

    def test_a_dynamic_batch_runs_in_place(self):
        for batch, full in ((2, False), (5, False), (2, True), (5, True)):
            with self.subTest(batch=batch, require_full_compilation=full):
                cache, update = _kv_args(batch)
                self._run_viewed(
                    SlabWrite3d(),
                    cache[:, 0].contiguous().cuda(),
                    [(update[:, 0].contiguous().cuda() + s,) for s in range(2)],
                    dynamic_batch=3,
                    full=full,
                )


if __name__ == "__main__":
    run_tests()
