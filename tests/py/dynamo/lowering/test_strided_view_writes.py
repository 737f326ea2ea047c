# type: ignore
"""A mutating op on a strided view of a state runs in TensorRT.

``auto_functionalized_v2`` passes a transposed, selected or stepped view of a
state as ``as_strided`` of its base; ``lower_auto_functionalized`` rebuilds the
new base with ``aten.as_strided_scatter``, whose converter scatters the view's
new value at its positions in the flattened base. The state is copied back (it
is not one slab write), so the model builds with
``require_full_compilation=True`` and as a standalone engine, and matches
eager over several calls: on the CPU with the engines built by TensorRT-RTX
and their execution stood in, on a GPU with real engines.
"""

import unittest

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo.conversion.aten_ops_converters import (
    as_strided_scatter_validator,
)
from torch_tensorrt.dynamo.conversion.impl.slice import strided_positions
from torch_tensorrt.dynamo.lowering._state_plan import COPY

from .test_lower_auto_functionalized import CPU_BUILDER, _clone
from .test_state_plan import _matches_eager, _standalone_map

CPU_ONLY = (
    "Building engines without a CUDA device needs TensorRT-RTX on a host without "
    "a GPU; on a GPU the same views run with real engines: TestStridedViewWritesOnGpu."
)


@torch.library.custom_op("trt_strided::scale_", mutates_args=("x",))
def scale_(x: torch.Tensor, s: float) -> None:
    x.mul_(s).add_(1)


@scale_.register_fake
def _(x, s):
    return None


@torch_tensorrt.dynamo.conversion.dynamo_tensorrt_converter(
    torch.ops.trt_strided.scale_.default
)
def _scale(ctx, target, args, kwargs, name):
    from torch_tensorrt.dynamo._SourceIR import SourceIR
    from torch_tensorrt.dynamo.conversion import impl

    scaled = impl.elementwise.mul(ctx, target, SourceIR.ATEN, name, args[0], args[1])
    return impl.elementwise.add(ctx, target, SourceIR.ATEN, f"{name}_1", scaled, 1.0)


VIEWS = {
    "transposed": lambda state: state.t()[:3],
    "selected": lambda state: state[1],
    "stepped": lambda state: state[:, ::2],
    "column": lambda state: state[:, 5],
}


def _model(view):
    class WritesAView(torch.nn.Module):
        def forward(self, state, x):
            torch.ops.trt_strided.scale_(VIEWS[view](state), 2.0)
            return state * x

    return WritesAView


def _args(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    return (
        torch.randn(4, 16, generator=g).to(dtype),
        torch.randn(4, 16, generator=g).to(dtype),
    )


class TestStridedPositions(TestCase):
    def test_the_positions_of_each_view_in_its_base(self):
        base = torch.arange(4 * 6 * 5).reshape(4, 6, 5)
        views = [
            base.transpose(0, 2),
            base[1],
            base[:, ::2, 1:],
            base[2, :, 3],
            base.permute(1, 2, 0)[::3],
            base[3, 5, 4],
        ]
        for view in views:
            with self.subTest(size=view.shape, stride=view.stride()):
                positions = strided_positions(
                    view.shape, view.stride(), view.storage_offset()
                )
                self.assertEqual(positions.tolist(), view.flatten().tolist())

    def test_the_converter_takes_each_element_once_in_a_static_base(self):
        graph = torch.fx.Graph()
        base, src = graph.placeholder("base"), graph.placeholder("src")
        base.meta["val"] = torch.zeros(4, 16)

        def takes(size, stride, offset, val=None):
            if val is not None:
                base.meta["val"] = val
            node = graph.call_function(
                torch.ops.aten.as_strided_scatter.default,
                (base, src, size, stride, offset),
            )
            return as_strided_scatter_validator(node)

        self.assertTrue(takes([16, 3], [1, 16], 0))  # transposed rows
        self.assertFalse(takes([4, 16], [0, 1], 0))  # one row written four times
        self.assertFalse(takes([4, 16], [16, 1], 16))  # past the end
        self.assertFalse(takes([3], [1], 0, torch.zeros(16, 4).t()))  # not contiguous


@unittest.skipIf(not CPU_BUILDER, CPU_ONLY)
class TestStridedViewWritesOnCpu(TestCase):
    def test_compile_matches_eager_in_one_engine(self):
        for view in VIEWS:
            for full in (False, True):
                with self.subTest(view, require_full_compilation=full):
                    trt = _matches_eager(
                        self, _model(view), _args(), require_full_compilation=full
                    )
                    engines = [n for n, _ in trt.named_children() if "_run_on_acc" in n]
                    self.assertEqual(engines, ["_run_on_acc_0"])

    def test_a_standalone_engine_copies_the_state_back_saying_why(self):
        for view in VIEWS:
            with self.subTest(view):
                (entry,) = _standalone_map(_model(view)(), _args())
                self.assertEqual((entry["input"], entry["update"]), ("state", COPY))
                self.assertIn("trt_strided.scale_.default", entry["reason"])


@unittest.skipIf(not torch.cuda.is_available(), "Runs engines: needs a CUDA device")
class TestStridedViewWritesOnGpu(TestCase):
    def test_compile_matches_eager_over_several_calls(self):
        for view in VIEWS:
            for dtype in (torch.float32, torch.float16):
                with self.subTest(view, dtype=dtype):
                    args = tuple(a.cuda() for a in _args(dtype))
                    ep = torch.export.export(_model(view)(), _clone(args))
                    trt = torch_tensorrt.dynamo.compile(
                        ep,
                        arg_inputs=list(_clone(args)),
                        min_block_size=1,
                        require_full_compilation=True,
                    )
                    compiled, eager = _clone(args), _clone(args)
                    for step in range(3):
                        out, expected = trt(*compiled), _model(view)()(*eager)
                        self.assertEqual(out, expected, msg=f"step {step}")
                        self.assertEqual(compiled, eager, msg=f"step {step}")


if __name__ == "__main__":
    run_tests()
