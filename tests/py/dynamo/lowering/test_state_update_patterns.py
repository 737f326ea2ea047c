# type: ignore
"""Which state updates a TensorRT engine makes in place, and which it copies back.

``PATTERNS`` lists the ways a model writes a state that is an engine input (a
user input or a lifted buffer). For each one it gives how the standalone
engine's alias map files the write, and why. ``in place`` means the engine
writes the state's own memory: TensorRT's ``IKVCacheUpdateLayer`` does it and
the engine reports it (``binding: engine``). ``copy`` means the engine computes
a new state and the caller copies it back. The CPU tests build each engine
with TensorRT-RTX and read its alias map. The GPU tests run the engines over
several steps against eager.

The project's README shows ``PATTERNS`` as a table, and a test of the project
checks that the table is this list.
"""

import copy
import dataclasses
import json
import logging
import tempfile
import unittest
from typing import Callable, Dict, Optional, Tuple

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests

from .test_compile_with_stand_in_engines import compile_on_cpu
from .test_lower_auto_functionalized import CPU_BUILDER, NEEDS_CPU_BUILDER, _clone
from .test_standalone_engine_mutations import AddToSlab, TwoSlabs

try:  # the next piece's single decision on what TensorRT writes in place
    from torch_tensorrt.dynamo.lowering import _state_plan  # noqa: F401

    STATE_PLAN = True
except ImportError:
    STATE_PLAN = False

IN_PLACE = "in place, `binding: engine`"

# The length of the written axis: a state of 64 KiB at batch 2, so that a copy of
# it stands out from what an engine allocates per call.
S = 256
COPY = "copy"

# ----------------------------------------------------------------------------
# Models: each writes its state and returns something else, so that only the
# write is under test.


class SliceWrite(torch.nn.Module):
    def forward(self, cache, new):
        cache[:, :, 5:7, :] = new
        return new * 2


class SliceCopy(torch.nn.Module):
    def forward(self, cache, new):
        cache[:, :, 5:7, :].copy_(new)
        return new * 2


class SliceAtLength(torch.nn.Module):
    """Writes one position at the length of ``prefix``: a position known only at run time."""

    def forward(self, cache, prefix, new):
        p = prefix.shape[2]
        cache[:, :, p : p + 1, :] = new
        return new * 2


class IndexCopy(torch.nn.Module):
    def __init__(self, dim=2):
        super().__init__()
        self.dim = dim

    def forward(self, cache, position, new):
        cache.index_copy_(self.dim, position, new)
        return new * 2


class BufferSliceWrite(torch.nn.Module):
    def __init__(self, read_after=True, dtype=torch.float32):
        super().__init__()
        self.read_after = read_after
        self.register_buffer("cache", torch.zeros(2, 4, S, 8, dtype=dtype))

    def forward(self, new):
        self.cache[:, :, 5:7, :] = new
        if self.read_after:
            return self.cache.sum(dim=2)
        return new * 2


class BufferIndexCopy(torch.nn.Module):
    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 4, S, 8, dtype=dtype))

    def forward(self, position, new):
        self.cache.index_copy_(2, position, new)
        return self.cache.sum(dim=2)


class SliceWriteAxis1(torch.nn.Module):
    """Positions 5..6 of axis 1, for a state of any rank."""

    def forward(self, cache, new):
        cache[:, 5:7] = new
        return new * 2


class BufferSliceWriteAxis1(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(2, S, 4, 8))

    def forward(self, new):
        self.cache[:, 5:7] = new
        return self.cache.sum(dim=1)


class SliceRows(torch.nn.Module):
    def forward(self, state, new):
        state[5:7] = new
        return new * 2


class SliceWriteAxis3(torch.nn.Module):
    def forward(self, cache, new):
        cache[:, :, :, 5:7] = new
        return new * 2


class SliceWrite16(torch.nn.Module):
    def forward(self, cache, new):
        cache[:, :, 40:56, :] = new
        return new * 2


class StridedWrite(torch.nn.Module):
    def forward(self, cache, new):
        cache[:, :, 0:8:2, :] = new
        return new * 2


class BufferStridedWrite(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(2, 4, S, 8))

    def forward(self, new):
        self.cache[:, :, 0:8:2, :] = new
        return self.cache.sum(dim=2)


class BufferWrittenTwice(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(2, 4, S, 8))

    def forward(self, new):
        self.cache[:, :, 1:3, :] = new
        self.cache[:, :, 9:11, :] = new * 3
        return new * 2


class ReadBeforeWrite(torch.nn.Module):
    """Reads the old state, then writes it: the read must see the old values."""

    def forward(self, cache, new):
        old = cache.sum(dim=2)
        cache[:, :, 5:7, :] = new
        return old


class BufferReadBeforeWrite(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(2, 4, S, 8))

    def forward(self, new):
        old = self.cache.sum(dim=2)
        self.cache[:, :, 5:7, :] = new
        return old


class ReturnsState(torch.nn.Module):
    def forward(self, cache, new):
        cache[:, :, 5:7, :] = new
        return new * 2, cache


class ClonedWrite(torch.nn.Module):
    """Writes a clone: the caller's ``cache`` is not a state of the model."""

    def forward(self, cache, new):
        out = cache.clone()
        out[:, :, 5:7, :] = new
        return out * 1.5


class FunctionalWrite(torch.nn.Module):
    """A KV-form write on the input itself, functional: upstream takes the input
    for a cache handed to the engine."""

    def forward(self, cache, new):
        return torch.ops.aten.slice_scatter.default(cache, new, 2, 5, 7) * 1.5


class AddInPlace(torch.nn.Module):
    def forward(self, x, d):
        x.add_(d)


def _kv(batch=2, n=2, dtype=torch.float32):
    """A ``[batch, 4, S, 8]`` cache and ``n`` new positions of it."""
    torch.manual_seed(0)
    new = torch.randn(batch, 4, n, 8) * 10
    return torch.zeros(batch, 4, S, 8, dtype=dtype), new.to(dtype)


def _kv5(dtype=torch.float32):
    """A ``[2, 3, 2, S, 8]`` state and two new positions of it."""
    torch.manual_seed(0)
    new = torch.randn(2, 3, 2, 2, 8) * 10
    return torch.zeros(2, 3, 2, S, 8, dtype=dtype), new.to(dtype)


def _kv_at(position, batch=1, dtype=torch.float32):
    cache, new = _kv(batch, len(position), dtype)
    return cache, torch.tensor(position), new


@dataclasses.dataclass(frozen=True)
class Pattern:
    write: str  # the write, as the README's table shows it
    state: str  # what the state is
    module: Callable[[], torch.nn.Module]
    args: Callable[[], Tuple[torch.Tensor, ...]]
    result: str  # IN_PLACE or COPY
    why: str
    settings: Dict[str, object] = dataclasses.field(default_factory=dict)
    # {argument index: dim} made dynamic (1 to 8): a dynamic batch or size
    dynamic: Optional[Dict[int, int]] = None


LIFTED = {"lift_mutable_buffers": True}

PATTERNS = [
    Pattern(
        "`cache[:, :, p:p+n, :] = new`",
        "4-D input `[B, H, S, D]`, float32, batch 2, n = 2",
        SliceWrite,
        _kv,
        IN_PLACE,
        "the layer's own form: a float cache of 4 dims written along axis 2, "
        "bounds known when the engine is built",
    ),
    Pattern(
        "`cache[:, :, p:p+n, :].copy_(new)`",
        "the same",
        SliceCopy,
        _kv,
        IN_PLACE,
        "the same write after functionalization (`slice_scatter`)",
    ),
    Pattern(
        "`cache[:, :, p:p+n, :] = new`",
        "the same, float16",
        SliceWrite,
        lambda: _kv(dtype=torch.float16),
        IN_PLACE,
        "the layer takes float32, float16 and bfloat16 caches",
    ),
    Pattern(
        "`cache.index_copy_(2, pos, new)`",
        "4-D input, batch 1, one position, `pos` a tensor given at run time",
        IndexCopy,
        lambda: _kv_at([3]),
        IN_PLACE,
        "the position is read at run time by the layer",
    ),
    Pattern(
        "`self.cache[:, :, p:p+n, :] = new`",
        "lifted buffer (`lift_mutable_buffers=True`), read after the write",
        BufferSliceWrite,
        lambda: _kv()[1:],
        IN_PLACE,
        "a lifted buffer is an engine input like any other",
        LIFTED,
    ),
    Pattern(
        "`self.cache.index_copy_(2, pos, new)`",
        "lifted buffer, batch 1, one position",
        BufferIndexCopy,
        lambda: _kv_at([3])[1:],
        IN_PLACE,
        "as for an input",
        LIFTED,
    ),
    Pattern(
        "`self.cache[:, :, p:p+n, :] = new`",
        "lifted buffer, never read in the engine after the write",
        lambda: BufferSliceWrite(read_after=False),
        lambda: _kv()[1:],
        IN_PLACE,
        "kept alive as an output, which is the layer's and aliases the buffer "
        "(2.14.0's buffer lifting forbade the layer for it and copied it back)",
        LIFTED,
    ),
    Pattern(
        "`cache.index_copy_(2, pos, new)`",
        "4-D input, batch 2, one position",
        IndexCopy,
        lambda: _kv_at([3], batch=2),
        IN_PLACE,
        "the position is written in every batch row: the layer's write indices "
        "are the position repeated (2.14.0 took batch 1 only)",
    ),
    Pattern(
        "`cache.index_copy_(2, pos, new)`",
        "4-D input, batch 1, two positions",
        IndexCopy,
        lambda: _kv_at([3, 4]),
        COPY,
        "the positions need not be contiguous; the layer writes one contiguous "
        "run per batch row",
    ),
    Pattern(
        "`cache[:, :, p:p+n, :] = new`",
        "4-D input, dynamic batch",
        SliceWrite,
        _kv,
        IN_PLACE,
        "the write indices follow the batch size at run time (2.14.0 made them a "
        "constant of the batch size, and copied back)",
        dynamic={0: 0, 1: 0},
    ),
    Pattern(
        "`cache[:, :, p:p+1, :] = new`",
        "4-D input, `p` a dynamic size (`prefix.shape[2]`)",
        SliceAtLength,
        lambda: (torch.zeros(1, 4, S, 8), torch.zeros(1, 4, 3, 8), _kv(1, 1)[1]),
        IN_PLACE,
        "the layer reads the start at run time (2.14.0's lowering turned a slice "
        "with symbolic bounds into a scatter, `decompose_dynamic_slice_scatter`)",
        dynamic={1: 2},
    ),
    Pattern(
        "`cache[:, :, p:p+n, :] = new`",
        "4-D input, int32 (also int64, bool)",
        SliceWrite,
        lambda: _kv(dtype=torch.int32),
        COPY,
        "the layer refuses a cache of any type but float32, float16 and bfloat16 "
        '(in 2.14.0 the build fails: "Could not get tensor shape")',
    ),
    Pattern(
        "`cache[:, p:p+n, :] = new`",
        "3-D input `[B, S, D]`",
        SliceWriteAxis1,
        lambda: tuple(t[:, 0].contiguous() for t in _kv()),
        IN_PLACE,
        "seen as `[B, 1, S, D]`, the layer's form: the engine's input has that "
        "shape, a view of the caller's memory (2.14.0 took 4-D caches only)",
    ),
    Pattern(
        "`cache[:, p:p+n, :, :] = new`",
        "4-D input `[B, S, H, D]`, written along axis 1",
        SliceWriteAxis1,
        lambda: tuple(t.transpose(1, 2).contiguous() for t in _kv()),
        IN_PLACE,
        "seen as `[B, 1, S, H*D]` (2.14.0 took writes along axis 2 only)",
    ),
    Pattern(
        "`self.cache[:, p:p+n] = new`",
        "lifted buffer `[B, S, H, D]`, written along axis 1",
        lambda: BufferSliceWriteAxis1(),
        lambda: (_kv()[1].transpose(1, 2).contiguous(),),
        IN_PLACE,
        "as for an input",
        LIFTED,
    ),
    Pattern(
        "`state[p:p+n] = new`",
        "2-D input `[N, D]`, rows",
        SliceRows,
        lambda: (torch.zeros(S, 8), torch.randn(2, 8)),
        IN_PLACE,
        "seen as `[1, 1, N, D]`",
    ),
    Pattern(
        "`state.index_copy_(0, row, new)`",
        "2-D input `[N, D]`, one row, `row` a tensor given at run time",
        lambda: IndexCopy(dim=0),
        lambda: (torch.zeros(S, 8), torch.tensor([3]), torch.randn(1, 8)),
        IN_PLACE,
        "seen as `[1, 1, N, D]`, the row read at run time",
    ),
    Pattern(
        "`cache[:, :, :, p:p+n] = new`",
        "5-D input `[B, H1, H2, S, D]`, bfloat16, written along axis 3",
        SliceWriteAxis3,
        lambda: _kv5(torch.bfloat16),
        IN_PLACE,
        "seen as `[B, H1*H2, S, D]`",
    ),
    Pattern(
        "`cache[:, :, p:p+16, :] = new`",
        "4-D input, a run of 16 positions",
        SliceWrite16,
        lambda: _kv(n=16),
        IN_PLACE,
        "the layer writes a run of any length",
    ),
    Pattern(
        "`state.index_copy_(0, rows, new)`",
        "2-D input `[N, D]`, two rows",
        lambda: IndexCopy(dim=0),
        lambda: (torch.zeros(64, 8), torch.tensor([3, 9]), torch.randn(2, 8)),
        COPY,
        "positions given by a tensor of more than one need not be contiguous; the "
        "layer writes one run",
    ),
    Pattern(
        "`cache[:, :, 0:8:2, :] = new`",
        "4-D input, a strided slice (step 2)",
        StridedWrite,
        lambda: _kv(n=4),
        COPY,
        "the layer writes a contiguous run (2.14.0 put it on the layer and wrote "
        "positions 0-3)",
    ),
    Pattern(
        "`self.cache[:, :, 0:8:2, :] = new`",
        "lifted buffer, a strided slice",
        BufferStridedWrite,
        lambda: _kv(n=4)[1:],
        COPY,
        "as for an input",
        LIFTED,
    ),
    Pattern(
        "`cache[:, :, p:p+n, :] += new`",
        "4-D input",
        AddToSlab,
        _kv,
        COPY,
        "functionalization makes it a write and a rewrite of the same slab; the "
        "layer is kept for the last write of a state, whose cache is no longer "
        "an engine input",
    ),
    Pattern(
        "two slabs, `cache[:, :, a:b, :] = x; cache[:, :, c:d, :] = y`",
        "4-D input",
        TwoSlabs,
        _kv,
        COPY,
        "the same: the second write's cache is the first one's result",
    ),
    Pattern(
        "two slabs of `self.cache`",
        "lifted buffer",
        BufferWrittenTwice,
        lambda: _kv()[1:],
        COPY,
        "as for an input",
        LIFTED,
    ),
    Pattern(
        "`cache[:, :, p:p+n, :] = new; return ..., cache`",
        "4-D input, returned after the write",
        ReturnsState,
        _kv,
        IN_PLACE,
        "the returned state is the engine output aliased to the input, so the "
        "module returns the caller's tensor",
    ),
    Pattern(
        "`old = cache.sum(dim=2); cache[:, :, p:p+n, :] = new`",
        "4-D input, read before the write",
        ReadBeforeWrite,
        _kv,
        COPY,
        "the layer would write the state before the other layer reads it: TensorRT "
        "does not order them (in place, the read saw the new values)",
    ),
    Pattern(
        "`old = self.cache.sum(dim=2); self.cache[:, :, p:p+n, :] = new`",
        "lifted buffer, read before the write only",
        lambda: BufferReadBeforeWrite(),
        lambda: _kv()[1:],
        COPY,
        "nothing reads the new state in the engine: as for the buffer never read "
        "after the write",
        LIFTED,
    ),
    Pattern(
        "`x.add_(d)`",
        "any input",
        AddInPlace,
        lambda: (torch.zeros(4, 16), torch.randn(4, 16)),
        COPY,
        "every element changes: the engine computes a new state (an in-place "
        "plugin writes it in place instead: binding `declared_alias`)",
    ),
]


def _export(pattern, device="cpu"):
    args = tuple(a.to(device) for a in pattern.args())
    module = pattern.module().to(device)
    if pattern.dynamic is None:
        ep = torch.export.export(copy.deepcopy(module), _clone(args))
        return module, ep, list(args)
    dims = {}
    for i, dim in pattern.dynamic.items():
        dims.setdefault(i, {})[dim] = torch.export.Dim("size", min=1, max=8)
    shapes = tuple(dims.get(i) for i in range(len(args)))
    ep = torch.export.export(copy.deepcopy(module), _clone(args), dynamic_shapes=shapes)
    inputs = []
    for i, a in enumerate(args):
        if i not in pattern.dynamic:
            inputs.append(a)
            continue
        shape = list(a.shape)
        lo, hi = list(shape), list(shape)
        lo[pattern.dynamic[i]], hi[pattern.dynamic[i]] = 1, 8
        inputs.append(
            torch_tensorrt.Input(
                min_shape=lo, opt_shape=shape, max_shape=hi, dtype=a.dtype
            )
        )
    return module, ep, inputs


def alias_map(pattern, **settings):
    """The standalone engine of ``pattern`` and its alias map's entries."""
    _, ep, inputs = _export(pattern)
    with tempfile.TemporaryDirectory() as tmp:
        engine = (
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep,
                arg_inputs=inputs,
                min_block_size=1,
                alias_map_path=f"{tmp}/aliases.json",
                **{**pattern.settings, **settings},
            )
        )
        with open(f"{tmp}/aliases.json") as f:
            return engine, json.load(f)["aliases"]


def result_of(aliases):
    """The table's word for the alias map's one entry."""
    if len(aliases) != 1:
        raise AssertionError(f"expected one state in the alias map, got {aliases}")
    (alias,) = aliases
    if alias["update"] == "in_place" and alias.get("binding") == "engine":
        return IN_PLACE
    if alias["update"] == "copy":
        return COPY
    return f"{alias['update']}, binding {alias.get('binding')}"


def _label(pattern):
    return f"{pattern.write} on {pattern.state}"


# Non-float states in the KV form, through every route: each must build and be
# copied back (patch 0029; 2.14.0 fails the build).
NON_FLOAT = (torch.int32, torch.int64, torch.bool)


def _non_float_patterns(dtype):
    def state(batch=2, n=2):
        cache, new = _kv(batch, n)
        if dtype is torch.bool:
            new = new > 0
        return cache.to(dtype), new.to(dtype)

    def at(position):
        cache, new = state(1, len(position))
        return cache, torch.tensor(position), new

    return [
        Pattern("slice", "input", SliceWrite, state, COPY, ""),
        Pattern("index_copy", "input", IndexCopy, lambda: at([3]), COPY, ""),
        Pattern(
            "slice",
            "lifted buffer",
            lambda: BufferSliceWrite(dtype=dtype),
            lambda: state()[1:],
            COPY,
            "",
            LIFTED,
        ),
        Pattern(
            "index_copy",
            "lifted buffer",
            lambda: BufferIndexCopy(dtype=dtype),
            lambda: at([3])[1:],
            COPY,
            "",
            LIFTED,
        ),
    ]


@unittest.skipIf(not CPU_BUILDER, NEEDS_CPU_BUILDER)
class TestStateUpdatePatternsOnCpu(TestCase):
    def test_each_pattern_is_filed_as_the_table_says(self):
        for pattern in PATTERNS:
            with self.subTest(_label(pattern)):
                _, aliases = alias_map(pattern)
                self.assertEqual(result_of(aliases), pattern.result)

    def test_a_cloned_input_is_never_written(self):
        """A write on a clone of an input: lowering removes the clone, the layer
        must not write the caller's tensor (no alias, through both entry points)."""
        pattern = Pattern("", "", ClonedWrite, _kv, "", "")
        _, aliases = alias_map(pattern)
        self.assertEqual(aliases, [])
        args = _kv()
        trt, built = compile_on_cpu(self, ClonedWrite(), args)
        self.assertEqual([e.aliased_io for e in built], [{}])
        compiled_args = _clone(args)
        for step in range(3):
            new = _args_at_step(pattern, step)[1]
            compiled_args = (compiled_args[0], new)
            self.assertEqual(trt(*compiled_args), ClonedWrite()(args[0], new))
            self.assertEqual(compiled_args[0], args[0])

    def test_a_write_directly_on_an_input_is_taken_for_a_cache(self):
        """Upstream's behaviour, kept (its test_single_position_write_aliased):
        a functional KV-form write on the input itself is in place."""
        _, aliases = alias_map(Pattern("", "", FunctionalWrite, _kv, "", ""))
        self.assertEqual(
            [(a["input"], a["update"], a.get("binding")) for a in aliases],
            [("cache", "in_place", "engine")],
        )

    def test_the_cache_type_check_takes_any_dtype(self):
        from torch_tensorrt._enums import dtype
        from torch_tensorrt.dynamo.conversion.impl._kv_cache_layer import (
            kv_cache_dtype_eligible,
        )

        self.assertTrue(kv_cache_dtype_eligible(torch.bfloat16)[0])
        for value in (dtype.unknown, "float32", None):
            with self.subTest(value):
                eligible, reason = kv_cache_dtype_eligible(value)
                self.assertFalse(eligible)
                self.assertIn("is not a tensor dtype", reason)

    def test_a_write_written_again_is_not_final(self):
        from torch_tensorrt.dynamo.lowering._kv_state_writes import kv_write_is_final

        ep = torch.export.export(TwoSlabs(), _kv())
        lowered = ep.run_decompositions({}).module()
        scatters = [
            n
            for n in lowered.graph.nodes
            if n.target is torch.ops.aten.slice_scatter.default
        ]
        self.assertEqual(len(scatters), 2, lowered.code)
        self.assertEqual(
            [kv_write_is_final(n)[0] for n in scatters], [False, True], lowered.code
        )

    def test_only_a_write_that_is_its_caches_only_reader(self):
        from torch_tensorrt.dynamo.lowering._kv_state_writes import (
            kv_cache_has_no_other_reader,
        )

        def write_of(module):
            ep = torch.export.export(module, _kv())
            graph = ep.run_decompositions({}).module().graph
            (write,) = [
                n
                for n in graph.nodes
                if n.target is torch.ops.aten.slice_scatter.default
            ]
            return write, write.args[0]

        # slice assignment reads only the slab's shape (aten.copy's first argument)
        self.assertTrue(kv_cache_has_no_other_reader(*write_of(SliceWrite()))[0])
        sole, reason = kv_cache_has_no_other_reader(*write_of(ReadBeforeWrite()))
        self.assertFalse(sole)
        self.assertIn("also read by", reason)

    def test_non_float_states_in_the_kv_form_build_and_are_copied_back(self):
        for dtype in NON_FLOAT:
            for pattern in _non_float_patterns(dtype):
                with self.subTest(f"{pattern.write} on {pattern.state}, {dtype}"):
                    engine, aliases = alias_map(pattern)
                    self.assertGreater(len(engine), 0)
                    self.assertEqual(result_of(aliases), COPY)

    def test_the_reason_is_logged_at_debug_level(self):
        pattern, index_pattern = _non_float_patterns(torch.int32)[:2]
        with self.assertLogs("torch_tensorrt", level=logging.DEBUG) as logs:
            alias_map(pattern)
            alias_map(index_pattern)
        reason = (
            "cache dtype is int32; IKVCacheUpdateLayer takes float32, float16 "
            "and bfloat16 caches only"
        )
        if STATE_PLAN:
            # the state plan's decision, once per state, with its reason
            plan_lines = [
                line for line in logs.output if "state cache (int32): copy" in line
            ]
            self.assertEqual(len(plan_lines), 2, logs.output)
            for line in plan_lines:
                self.assertIn(reason, line)
            return
        self.assertTrue(
            any(
                "slice_scatter: KV fast path skipped" in line and reason in line
                for line in logs.output
            ),
            logs.output,
        )
        self.assertTrue(
            any(
                "index_copy: KV fast path skipped" in line and reason in line
                for line in logs.output
            ),
            logs.output,
        )

    def test_non_float_states_match_eager_through_compile(self):
        """``compile()`` with engines built and their execution stood in: the
        copy-back of a non-float state reaches the caller's tensor and the buffer."""
        for dtype in (torch.int32, torch.bool):
            for pattern in _non_float_patterns(dtype):
                with self.subTest(f"{pattern.write} on {pattern.state}, {dtype}"):
                    args = pattern.args()
                    trt, _ = compile_on_cpu(self, pattern.module(), args)
                    eager = pattern.module()
                    compiled_args, eager_args = _clone(args), _clone(args)
                    for step in range(3):
                        self.assertEqual(
                            trt(*compiled_args), eager(*eager_args), msg=f"step {step}"
                        )
                        self.assertEqual(compiled_args, eager_args)
                    if "lift_mutable_buffers" in pattern.settings:
                        self.assertEqual(
                            dict(trt.named_buffers())["cache"], eager.cache
                        )


SENTINEL = 7


def _args_at_step(pattern, step, device="cpu"):
    """The pattern's arguments for one step: new values every step, and where the
    position is an input (a position tensor, a prefix's length), a new position."""
    args = list(pattern.args())
    generator = torch.Generator().manual_seed(100 + step)
    new = args[-1]
    if new.is_floating_point():
        args[-1] = (torch.randn(new.shape, generator=generator) * 10).to(new.dtype)
    elif new.dtype is torch.bool:
        args[-1] = torch.rand(new.shape, generator=generator) > 0.5
    else:
        args[-1] = torch.randint(-99, 99, new.shape, generator=generator).to(new.dtype)
    for i, arg in enumerate(args[:-1]):
        if arg.dtype is torch.int64 and arg.dim() == 1:  # write positions
            args[i] = arg + 2 * step
        elif pattern.module is SliceAtLength and i == 1:  # the prefix
            args[i] = torch.zeros(1, 4, 3 + step, 8)
    return tuple(a.to(device) for a in args)


def _lifted(pattern):
    return "lift_mutable_buffers" in pattern.settings


def _state(module, args, pattern):
    """The state the pattern writes: the module's buffer or its first argument."""
    return module.cache if _lifted(pattern) else args[0]


def _sentinel(state):
    return True if state.dtype is torch.bool else SENTINEL


class StateSteps:
    """Runs a compiled pattern for several steps against eager (see the GPU class)."""

    device = "cpu"

    def compile(self, pattern):
        raise NotImplementedError

    def engines(self, trt):
        """The engine modules of ``trt``: whatever carries an ``aliased_io``."""
        return [m for m in trt.modules() if hasattr(m, "aliased_io")]

    def allocated(self):
        """Bytes allocated so far on the device (None where not measured)."""
        return None

    def steps(self, pattern):
        module, trt = self.compile(pattern)
        eager = copy.deepcopy(module)
        first = _args_at_step(pattern, 0, self.device)
        compiled_args, eager_args = _clone(first), _clone(first)
        for m, a in ((eager, eager_args), (trt, compiled_args)):
            state = _state(m, a, pattern)
            state.fill_(_sentinel(state))
        address = _state(trt, compiled_args, pattern).data_ptr()
        engines = self.engines(trt)
        self.assertTrue(engines, "no engine was built")
        aliased = {i for e in engines for i, _ in e.aliased_io.values()}
        if pattern.result == IN_PLACE:
            self.assertTrue(aliased, "no engine writes the state in place")
        else:
            self.assertFalse(aliased, f"an engine writes {aliased} in place")
        for step in range(3):
            if step:  # the state stays, the rest moves on
                moved = _args_at_step(pattern, step, self.device)
                keep = 0 if not _lifted(pattern) else -1
                compiled_args = tuple(
                    a if i == keep else moved[i].clone()
                    for i, a in enumerate(compiled_args)
                )
                eager_args = tuple(
                    a if i == keep else moved[i].clone()
                    for i, a in enumerate(eager_args)
                )
            before = self.allocated()
            out = trt(*compiled_args)
            after = self.allocated()
            msg = f"step {step}"
            self.assertEqual(out, eager(*eager_args), msg=msg)
            state = _state(trt, compiled_args, pattern)
            eager_state = _state(eager, eager_args, pattern)
            # the caller's own memory holds the new state
            self.assertEqual(state.data_ptr(), address, msg=msg)
            self.assertEqual(state, eager_state, msg=msg)
            if pattern.module is not AddInPlace:  # a slab: the rest is untouched
                sentinels = (state == _sentinel(state)).sum().item()
                self.assertGreater(sentinels, 0, msg=msg)
                expected = (eager_state == _sentinel(state)).sum().item()
                self.assertEqual(sentinels, expected, msg=msg)
            if pattern.result == IN_PLACE and before is not None:
                # nothing of the state's size was allocated (a copy, a new state)
                self.assertLess(after - before, state.nbytes, msg=msg)


@unittest.skipIf(not CPU_BUILDER, NEEDS_CPU_BUILDER)
class TestStateUpdatePatternsWithStandInEngines(StateSteps, TestCase):
    """The same steps through a real ``compile()`` whose engines TensorRT-RTX
    builds and whose execution is stood in: the glue around the engines (what is
    aliased, what is written back, the buffers), not TensorRT."""

    def compile(self, pattern):
        from .test_compile_with_stand_in_engines import engines_built_execution_stood_in

        module, ep, inputs = _export(pattern)
        with engines_built_execution_stood_in():
            trt = torch_tensorrt.dynamo.compile(ep, arg_inputs=inputs, min_block_size=1)
        return module, trt

    def test_each_static_pattern_over_several_steps(self):
        for pattern in PATTERNS:
            if pattern.dynamic is not None:
                continue
            if _lifted(pattern) and pattern.result == IN_PLACE:
                # the buffer's new state leaves the engine only as an output the
                # interpreter appends, which the stand-in cannot compute: only
                # compile (which checks its prediction against the engines)
                with self.subTest(_label(pattern)):
                    _, trt = self.compile(pattern)
                    aliased = [e.aliased_io for e in self.engines(trt)]
                    self.assertTrue(any(aliased), "no engine writes the buffer")
                continue
            with self.subTest(_label(pattern)):
                self.steps(pattern)


@unittest.skipIf(
    not torch.cuda.is_available(),
    "Running TensorRT engines needs a CUDA device; this host has none.",
)
class TestStateUpdatePatternsOnGpu(StateSteps, TestCase):
    """Each pattern compiled and run for several steps against eager.

    The state starts as a sentinel; positions move between steps where the model
    takes them at run time. After every step the caller's own state (its tensor,
    or the compiled module's buffer, at the same address) equals eager's, the
    sentinel outside the written slab survives, and a pattern filed in place has
    an engine aliasing the state and allocates less than the state's size during
    the call: nothing of the state's size is written but the state itself.
    """

    device = "cuda"

    def compile(self, pattern):
        # compile() lifts mutated buffers itself: the pattern's settings are for
        # the serialized-engine path
        module, ep, inputs = _export(pattern, "cuda")
        trt = torch_tensorrt.dynamo.compile(ep, arg_inputs=inputs, min_block_size=1)
        return module, trt

    def engines(self, trt):
        from torch_tensorrt.dynamo.runtime import TorchTensorRTModule

        return [m for m in trt.modules() if isinstance(m, TorchTensorRTModule)]

    def allocated(self):
        torch.cuda.synchronize()
        return torch.cuda.memory_stats()["allocated_bytes.all.allocated"]

    def test_each_pattern_matches_eager_over_several_steps(self):
        for pattern in PATTERNS:
            with self.subTest(_label(pattern)):
                self.steps(pattern)

    def test_non_float_states_match_eager_over_several_steps(self):
        for dtype in NON_FLOAT:
            for pattern in _non_float_patterns(dtype):
                with self.subTest(f"{pattern.write} on {pattern.state}, {dtype}"):
                    self.steps(pattern)

    def test_a_dynamic_batch_at_several_sizes(self):
        """One compiled module, run at batch sizes other than the example's: the
        write indices follow the batch, and the state is written in place."""
        for module, state_of in (
            (SliceWrite(), lambda b: _kv(b)),
            (SliceWriteAxis1(), lambda b: tuple(t[:, 0].contiguous() for t in _kv(b))),
        ):
            with self.subTest(type(module).__name__):
                args = tuple(a.cuda() for a in state_of(2))
                batch = torch.export.Dim("batch", min=1, max=8)
                ep = torch.export.export(
                    copy.deepcopy(module),
                    _clone(args),
                    dynamic_shapes=({0: batch}, {0: batch}),
                )
                inputs = [
                    torch_tensorrt.Input(
                        min_shape=(1,) + a.shape[1:],
                        opt_shape=a.shape,
                        max_shape=(8,) + a.shape[1:],
                    )
                    for a in args
                ]
                trt = torch_tensorrt.dynamo.compile(
                    ep, arg_inputs=inputs, min_block_size=1
                )
                aliased = [m.aliased_io for m in self.engines(trt)]
                self.assertTrue(any(aliased), "no engine writes the state in place")
                # export specializes a batch of 1 (the engine's least is 2)
                for b in (2, 3, 8):
                    cache, new = (a.cuda() for a in state_of(b))
                    cache.fill_(SENTINEL)
                    expected = cache.clone()
                    before = self.allocated()
                    out = trt(cache, new)
                    after = self.allocated()
                    self.assertEqual(out, module(expected, new), msg=f"batch {b}")
                    self.assertEqual(cache, expected, msg=f"batch {b}")
                    self.assertGreater((cache == SENTINEL).sum().item(), 0)
                    self.assertLess(after - before, cache.nbytes, msg=f"batch {b}")

    def test_a_cloned_input_is_left_alone(self):
        pattern = Pattern("", "", ClonedWrite, _kv, "", "")
        args = tuple(a.cuda() for a in _kv())
        ep = torch.export.export(ClonedWrite().cuda(), _clone(args))
        trt = torch_tensorrt.dynamo.compile(
            ep, arg_inputs=list(_clone(args)), min_block_size=1
        )
        self.assertEqual([e.aliased_io for e in self.engines(trt)], [{}])
        cache = args[0].fill_(SENTINEL)
        for step in range(3):
            new = _args_at_step(pattern, step, "cuda")[1]
            expected_cache = torch.full_like(cache, SENTINEL)
            out = trt(cache, new)
            self.assertEqual(out, ClonedWrite()(expected_cache, new), msg=f"{step}")
            self.assertEqual(cache, expected_cache, msg=f"step {step}")


if __name__ == "__main__":
    run_tests()
