# type: ignore
"""Generated plugins (``generate_plugin``) run by the real QDP ``enqueue`` on a GPU.

What is real: the TensorRT 11.1 Python bindings and QDP (``tensorrt.plugin``:
registration, ``PluginDef.__call__``, the plugin creator, ``_TemplateJITPlugin``
with ``get_output_data_types``, ``get_aliased_input``,
``get_fields_to_serialize`` and ``enqueue``), TensorRT's plugin registry
(``trt.get_plugin_registry()``, from the lean runtime library), the project's
plugin generator, the CUDA device, PyTorch's CUDA kernels and Triton. The
plugin's kernels run on CUDA memory, on a CUDA stream passed to ``enqueue``
as TensorRT passes its stream.

What is stood in: there is no TensorRT builder on the machines this runs on
(standard TensorRT's builder library is not on PyPI; ``tools/gpu/prepare-standard``
packs stand-ins whose builder entry point returns NULL), so there is no network
and no engine, and ``enqueue`` is called directly, as TensorRT's runtime would
call it: the aliased output of an in-place op bound to its input's memory,
every other output to its own buffer. ``StandInITensor`` only passes
``PluginDef.__call__``'s ``isinstance(t, trt.ITensor)`` check; the
``PluginTensorDesc`` objects are real bindings objects filled in by hand.

Each buffer handed to ``enqueue`` is a slice of a larger allocation whose
guard regions hold a sentinel, so a write outside the tensors the plugin may
write is seen. Results are compared exactly with the op run eagerly by PyTorch
on copies of the inputs, and with closed-form values.

On the GPU machine (no TensorRT installed there):
``bash .gpu-std/run python3 -m pytest -q -rfEs -p no:cacheprovider
tests/py/dynamo/automatic_plugin/test_generated_plugins_on_gpu.py``.
"""

import importlib.util
import unittest

import numpy as np
import torch
from torch.testing._internal.common_utils import TestCase, run_tests

from .test_generated_plugins_qdp import (
    HAVE_QDP,
    generated,
    runtime_plugin,
    standin_itensor,
    tensor_desc,
    trt_dtype,
)

HAVE_CUDA = torch.cuda.is_available()
HAVE_TRITON = importlib.util.find_spec("triton") is not None
if HAVE_TRITON:
    try:
        import triton
        import triton.language as tl
    except Exception:  # installed but unusable: the Triton test says so
        HAVE_TRITON = False

if not HAVE_CUDA:
    REASON = (
        "There is no CUDA device: these tests run generated plugins' kernels on "
        "GPU memory through TensorRT's real QDP enqueue."
    )
elif not HAVE_QDP:
    REASON = (
        "TensorRT's Python plugin module (tensorrt.plugin) cannot be imported: only "
        "the standard TensorRT flavour has it (TensorRT-RTX has no Python plugins); "
        "on the GPU machine run these tests through .gpu-std/run "
        "(tools/gpu/prepare-standard)."
    )
else:
    REASON = ""
RUNNABLE = not REASON
TRITON_REASON = (
    "Triton cannot be imported here, so the Triton kernel cannot be the op's "
    "implementation."
)

# QDP refuses to register a plugin id twice per process: this file's own namespace
NS = "trt_generated_gpu"
SENTINEL = -7777.0  # exactly representable in float32 and distinct from any result
GUARD = 64  # elements of sentinel before and after each buffer


# --- the ops ------------------------------------------------------------------


@torch.library.custom_op(f"{NS}::axpy_", mutates_args=("x",))
def axpy_(x: torch.Tensor, y: torch.Tensor, alpha: float) -> None:
    x.add_(y, alpha=alpha)


@axpy_.register_fake
def _(x, y, alpha):
    return None


@torch.library.custom_op(f"{NS}::scaled_and_positives", mutates_args=())
def scaled_and_positives(
    x: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    return x * scale, (x > 0).sum(-1)


@scaled_and_positives.register_fake
def _(x, scale):
    return torch.empty_like(x), x.new_empty(x.shape[:-1], dtype=torch.int64)


if HAVE_TRITON:

    @triton.jit
    def _axpy_kernel(x_ptr, y_ptr, n_elements, alpha, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < n_elements
        x = tl.load(x_ptr + offsets, mask=mask)
        y = tl.load(y_ptr + offsets, mask=mask)
        tl.store(x_ptr + offsets, x + alpha * y, mask=mask)


@torch.library.custom_op(f"{NS}::triton_axpy_", mutates_args=("x",))
def triton_axpy_(x: torch.Tensor, y: torch.Tensor, alpha: float) -> None:
    # contiguous tensors only (the test passes contiguous ones)
    n = x.numel()
    _axpy_kernel[(triton.cdiv(n, 256),)](x, y, n, alpha, BLOCK_SIZE=256)


@triton_axpy_.register_fake
def _(x, y, alpha):
    return None


# --- plugins through the real registry ----------------------------------------


def plugins(name, inputs, attrs):
    """(phase, plugin) for the BUILD phase and the RUNTIME phase of NS::name.

    BUILD: through QDP's own ``PluginDef.__call__`` (which takes the creator from
    the registry), then ``get_output_data_types`` as TensorRT calls it while
    building. RUNTIME: the registry's creator given the BUILD plugin's serialized
    fields, as after engine deserialization (QDP 11.1 leaves its alias map empty).
    """
    plugin_def = generated(name, NS)
    array_attrs = {k: np.array([v], dtype=np.float64) for k, v in attrs.items()}
    _, _, build = plugin_def(*[standin_itensor() for _ in inputs], **array_attrs)()
    build.get_output_data_types(
        [trt_dtype(t.dtype) for t in inputs], [t.dim() for t in inputs]
    )
    return [("BUILD", build), ("RUNTIME", runtime_plugin(name, build, NS))]


def enqueue(plugin, ins, outs, stream):
    """The real QDP enqueue with CUDA buffers, on ``stream``, then wait for it."""
    stream.wait_stream(torch.cuda.current_stream())
    plugin.enqueue(
        [tensor_desc(t) for t in ins],
        [tensor_desc(t) for t in outs],
        [t.data_ptr() for t in ins],
        [t.data_ptr() for t in outs],
        [t.stride() for t in ins],
        [t.stride() for t in outs],
        stream.cuda_stream,
    )
    stream.synchronize()


def guarded(values):
    """(buffer, view): ``values`` copied into the middle of a sentinel-filled buffer."""
    n = values.numel()
    buffer = torch.full(
        (GUARD + n + GUARD,), SENTINEL, dtype=values.dtype, device="cuda"
    )
    view = buffer[GUARD : GUARD + n].view(values.shape)
    view.copy_(values)
    return buffer, view


def sentinel_like(shape, dtype):
    return guarded(torch.full(shape, SENTINEL, dtype=dtype, device="cuda"))


@unittest.skipIf(not RUNNABLE, REASON)
class TestGeneratedPluginsOnGpu(TestCase):
    def setUp(self):
        self.stream = torch.cuda.Stream()  # a real, non-default stream, as TensorRT's

    def assertExactly(self, got, want, msg=None):
        self.assertEqual(got, want, atol=0, rtol=0, exact_dtype=True, msg=msg)

    def assertGuardsIntact(self, buffer, msg):
        sentinel = torch.full((GUARD,), SENTINEL, dtype=buffer.dtype, device="cuda")
        self.assertExactly(buffer[:GUARD], sentinel, msg=f"{msg}: written before")
        self.assertExactly(buffer[-GUARD:], sentinel, msg=f"{msg}: written after")

    def check_in_place(self, name, op):
        """x += alpha * y through the plugin, twice, on x's own memory."""
        alpha = 2.0
        rows, cols = 3, 1000  # more than one 256-element block
        # integer-valued float32: every result is exact whatever the kernel
        x0 = torch.arange(rows * cols, dtype=torch.float32, device="cuda")
        x0 = (x0 % 97 - 48).view(rows, cols)
        y0 = (torch.arange(rows * cols, device="cuda") % 13 - 6).to(torch.float32)
        y0 = y0.view(rows, cols)
        for phase, plugin in plugins(name, [x0, y0], {"alpha": alpha}):
            with self.subTest(phase=phase):
                if phase == "BUILD":
                    # what TensorRT asks the plugin: output 0 aliases input 0 (x)
                    self.assertEqual(plugin.get_num_outputs(), 1)
                    self.assertEqual(plugin.get_aliased_input(0), 0)
                x_buffer, x = guarded(x0)
                y_buffer, y = guarded(y0)
                y_buffer_before = y_buffer.clone()

                expected = x0.clone()
                op(expected, y0.clone(), alpha)  # the op, eagerly, on copies
                self.assertExactly(expected, x0 + alpha * y0)

                # TensorRT binds the aliased output to its input's memory
                enqueue(plugin, [x, y], [x], self.stream)
                self.assertExactly(x, expected, msg="state after one step")
                enqueue(plugin, [x, y], [x], self.stream)
                self.assertExactly(x, x0 + 2 * alpha * y0, msg="after two steps")

                # x is a view into x_buffer: the values above were written there
                self.assertGuardsIntact(x_buffer, "state buffer")
                self.assertExactly(y_buffer, y_buffer_before, msg="read-only input")

    def test_in_place_op(self):
        self.check_in_place("axpy_", torch.ops.trt_generated_gpu.axpy_)

    @unittest.skipIf(not HAVE_TRITON, TRITON_REASON)
    def test_in_place_triton_kernel(self):
        self.check_in_place("triton_axpy_", torch.ops.trt_generated_gpu.triton_axpy_)

    def test_two_outputs_of_different_dtypes(self):
        scale = 0.5
        rows, cols = 4, 300
        x0 = (torch.arange(rows * cols, device="cuda") % 11 - 5).to(torch.float32)
        x0 = x0.view(rows, cols)
        # the op, eagerly, on a copy; and the closed form
        want_scaled, want_count = scaled_and_positives(x0.clone(), scale)
        self.assertEqual(want_count.dtype, torch.int64)
        self.assertExactly(want_scaled, x0 * 0.5)
        self.assertExactly(want_count, (x0 > 0).to(torch.int64).sum(-1))
        for phase, plugin in plugins("scaled_and_positives", [x0], {"scale": scale}):
            with self.subTest(phase=phase):
                if phase == "BUILD":
                    self.assertEqual(plugin.get_num_outputs(), 2)
                    self.assertEqual(
                        [plugin.get_aliased_input(i) for i in range(2)], [-1, -1]
                    )
                x_buffer, x = guarded(x0)
                x_buffer_before = x_buffer.clone()
                scaled_buffer, scaled = sentinel_like((rows, cols), torch.float32)
                count_buffer, count = sentinel_like((rows,), torch.int64)
                enqueue(plugin, [x], [scaled, count], self.stream)

                self.assertExactly(scaled, want_scaled)
                self.assertExactly(count, want_count)
                self.assertGuardsIntact(scaled_buffer, "output 0")
                self.assertGuardsIntact(count_buffer, "output 1")
                self.assertExactly(x_buffer, x_buffer_before, msg="input changed")


if __name__ == "__main__":
    run_tests()
