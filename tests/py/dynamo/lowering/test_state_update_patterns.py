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
from test_compile_with_stand_in_engines import compile_on_cpu
from test_lower_auto_functionalized import CPU_BUILDER, NEEDS_CPU_BUILDER, _clone
from torch.testing._internal.common_utils import TestCase, run_tests

IN_PLACE = "in place, `binding: engine`"
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
        self.register_buffer("cache", torch.zeros(2, 4, 16, 8, dtype=dtype))

    def forward(self, new):
        self.cache[:, :, 5:7, :] = new
        if self.read_after:
            return self.cache.sum(dim=2)
        return new * 2


class BufferIndexCopy(torch.nn.Module):
    def __init__(self, dtype=torch.float32):
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 4, 16, 8, dtype=dtype))

    def forward(self, position, new):
        self.cache.index_copy_(2, position, new)
        return self.cache.sum(dim=2)


class SliceWriteAxis1(torch.nn.Module):
    """Positions 5..6 of axis 1, for a state of any rank."""

    def forward(self, cache, new):
        cache[:, 5:7] = new
        return new * 2


class AddInPlace(torch.nn.Module):
    def forward(self, x, d):
        x.add_(d)


def _kv(batch=2, n=2, dtype=torch.float32):
    """A ``[batch, 4, 16, 8]`` cache and ``n`` new positions of it."""
    torch.manual_seed(0)
    new = torch.randn(batch, 4, n, 8) * 10
    return torch.zeros(batch, 4, 16, 8, dtype=dtype), new.to(dtype)


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
        COPY,
        "2.14.0's buffer lifting keeps a write that nothing reads alive as a "
        "copy-back output, and forbids the layer for it",
        LIFTED,
    ),
    Pattern(
        "`cache.index_copy_(2, pos, new)`",
        "4-D input, batch 2, one position",
        IndexCopy,
        lambda: _kv_at([3], batch=2),
        COPY,
        "2.14.0 takes batch 1 only: the layer needs one position per batch row",
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
        COPY,
        "2.14.0 makes the layer's write positions a constant of the batch size",
        dynamic={0: 0, 1: 0},
    ),
    Pattern(
        "`cache[:, :, p:p+1, :] = new`",
        "4-D input, `p` a dynamic size (`prefix.shape[2]`)",
        SliceAtLength,
        lambda: (torch.zeros(1, 4, 16, 8), torch.zeros(1, 4, 3, 8), _kv(1, 1)[1]),
        COPY,
        "2.14.0's lowering turns a slice with symbolic bounds into a scatter "
        "(`decompose_dynamic_slice_scatter`); `index_copy_` with a position tensor "
        "goes in place",
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
        COPY,
        "the layer takes caches of 4 dims only",
    ),
    Pattern(
        "`cache[:, p:p+n, :, :] = new`",
        "4-D input `[B, S, H, D]`, written along axis 1",
        SliceWriteAxis1,
        lambda: tuple(t.transpose(1, 2).contiguous() for t in _kv()),
        COPY,
        "the layer writes along axis 2 only",
    ),
    Pattern(
        "`state.index_copy_(0, rows, new)`",
        "2-D input `[N, D]`, two rows",
        lambda: IndexCopy(dim=0),
        lambda: (torch.zeros(64, 8), torch.tensor([3, 9]), torch.randn(2, 8)),
        COPY,
        "not a 4-D cache written along axis 2",
    ),
    Pattern(
        "`x.add_(d)`",
        "any input",
        AddInPlace,
        lambda: (torch.zeros(4, 16), torch.randn(4, 16)),
        COPY,
        "every element changes: the engine computes a new state (an in-place "
        "plugin writes it in place instead: binding `declared_alias` or "
        "`same_address`)",
    ),
]


def _export(pattern):
    args = pattern.args()
    module = pattern.module()
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
                    trt, _ = compile_on_cpu(
                        self, pattern.module(), args, **pattern.settings
                    )
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


@unittest.skipIf(
    not torch.cuda.is_available(),
    "Running TensorRT engines needs a CUDA device; this host has none.",
)
class TestStateUpdatePatternsOnGpu(TestCase):
    def _steps(self, pattern):
        """Three calls of the compiled module against eager, state included."""
        module = pattern.module().cuda()
        args = tuple(a.cuda() for a in pattern.args())
        ep = torch.export.export(copy.deepcopy(module), _clone(args))
        trt = torch_tensorrt.dynamo.compile(
            ep, arg_inputs=list(_clone(args)), min_block_size=1, **pattern.settings
        )
        eager = copy.deepcopy(module)
        compiled_args, eager_args = _clone(args), _clone(args)
        for step in range(3):
            self.assertEqual(
                trt(*compiled_args), eager(*eager_args), msg=f"step {step}"
            )
            self.assertEqual(compiled_args, eager_args, msg=f"step {step}")
        if "lift_mutable_buffers" in pattern.settings:
            self.assertEqual(dict(trt.named_buffers())["cache"], eager.cache)

    def test_each_static_pattern_matches_eager_over_several_steps(self):
        for pattern in PATTERNS:
            if pattern.dynamic is not None:
                continue
            with self.subTest(_label(pattern)):
                self._steps(pattern)

    def test_non_float_states_match_eager_over_several_steps(self):
        for dtype in NON_FLOAT:
            for pattern in _non_float_patterns(dtype):
                with self.subTest(f"{pattern.write} on {pattern.state}, {dtype}"):
                    self._steps(pattern)


if __name__ == "__main__":
    run_tests()
