# type: ignore
"""In-place and multi-output QDP plugins from op schemas (needs a GPU and TensorRT).

The scenario of issue #4240: a Triton kernel wrapped as a custom op that updates
its input in place (``mutates_args=("X",)``, returning ``None``), registered as
a TensorRT plugin whose output aliases that input, converted with
``generate_plugin_converter`` and compiled with ``require_full_compilation``.
The builder's aliased-plugin-I/O preview feature is not set by the test: the
converter declares it.
"""

import importlib.util
import unittest
from typing import Tuple

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt import ENABLED_FEATURES

HAVE_TRITON = importlib.util.find_spec("triton") is not None
RUNNABLE = torch.cuda.is_available() and ENABLED_FEATURES.qdp_plugin and HAVE_TRITON
# 2.14.0 picks the runtime once per process, when torch_tensorrt is imported:
# the C++ runtime if torch_tensorrt/lib holds libtorchtrt.so or
# libtorchtrt_runtime.so (_features.py, ENABLED_FEATURES.torch_tensorrt_runtime),
# else the Python TRTEngine; `use_python_runtime` has no effect.
RUNTIME = "cpp" if ENABLED_FEATURES.torch_tensorrt_runtime else "python"
REASON = (
    "Needs a CUDA device, TensorRT's Python plugin module (tensorrt.plugin; the "
    "standard TensorRT flavour) and Triton."
)

if RUNNABLE:
    import tensorrt as trt
    import tensorrt.plugin as trtp
    import triton
    import triton.language as tl

    @triton.jit
    def _add_one_kernel(x_ptr, n_elements, y_ptr, BLOCK_SIZE: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < n_elements
        tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)

    def _launch_add_one(x: torch.Tensor) -> None:
        grid = (triton.cdiv(x.numel(), 256),)
        _add_one_kernel[grid](x, x.numel(), x, BLOCK_SIZE=256)

    # --- in place, returns None: JIT and AOT (Triton-compiled PTX) plugins ---
    for variant in ("jit", "aot"):

        @torch.library.custom_op(
            f"inplace_test::add_one_{variant}_", mutates_args=("X",)
        )
        def _add_one_(X: torch.Tensor) -> None:
            _launch_add_one(X)

        @_add_one_.register_fake
        def _(X):
            return None

        @trtp.register(f"inplace_test::add_one_{variant}_")
        def _add_one_desc(X: trtp.TensorDesc) -> Tuple[trtp.TensorDesc]:
            return (X.aliased(),)

    @trtp.impl("inplace_test::add_one_jit_")
    def _add_one_jit_impl(X: trtp.Tensor, outputs: Tuple[trtp.Tensor], stream: int):
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            _launch_add_one(torch.as_tensor(X, device="cuda"))

    @trtp.aot_impl("inplace_test::add_one_aot_")
    def _add_one_aot_impl(
        X: trtp.TensorDesc, outputs: Tuple[trtp.TensorDesc], tactic: int
    ) -> Tuple[str, str, trtp.KernelLaunchParams, trtp.SymExprs]:
        pointer = "*fp32" if X.dtype == trt.float32 else "*fp16"
        src = triton.compiler.ASTSource(
            fn=_add_one_kernel,
            signature={"x_ptr": pointer, "n_elements": "i32", "y_ptr": pointer},
            constexprs={"BLOCK_SIZE": 256},
        )
        kernel = triton.compile(src)
        n = X.shape_expr.numel()
        params = trtp.KernelLaunchParams()
        params.grid_x = trtp.cdiv(n, 256)
        params.block_x = kernel.metadata.num_warps * 32
        params.shared_mem = kernel.metadata.shared
        extra = trtp.SymIntExprs(1)
        extra[0] = trtp.SymInt32(n)
        return kernel.metadata.name, kernel.asm["ptx"], params, extra

    # --- two outputs ---
    @torch.library.custom_op("inplace_test::sin_cos", mutates_args=())
    def _sin_cos(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return torch.sin(x), torch.cos(x)

    @_sin_cos.register_fake
    def _(x):
        return torch.empty_like(x), torch.empty_like(x)

    @trtp.register("inplace_test::sin_cos")
    def _sin_cos_desc(x: trtp.TensorDesc) -> Tuple[trtp.TensorDesc, trtp.TensorDesc]:
        return x.like(), x.like()

    @trtp.impl("inplace_test::sin_cos")
    def _sin_cos_impl(x: trtp.Tensor, outputs: Tuple[trtp.Tensor], stream: int):
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            t = torch.as_tensor(x, device="cuda")
            torch.as_tensor(outputs[0], device="cuda").copy_(torch.sin(t))
            torch.as_tensor(outputs[1], device="cuda").copy_(torch.cos(t))

    # --- Tensor[] return ---
    @torch.library.custom_op("inplace_test::steps", mutates_args=())
    def _steps(x: torch.Tensor) -> list[torch.Tensor]:
        return [x + 1, x + 2, x + 3]

    @_steps.register_fake
    def _(x):
        return [torch.empty_like(x) for _ in range(3)]

    @trtp.register("inplace_test::steps")
    def _steps_desc(
        x: trtp.TensorDesc,
    ) -> Tuple[trtp.TensorDesc, trtp.TensorDesc, trtp.TensorDesc]:
        return x.like(), x.like(), x.like()

    @trtp.impl("inplace_test::steps")
    def _steps_impl(x: trtp.Tensor, outputs: Tuple[trtp.Tensor], stream: int):
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            t = torch.as_tensor(x, device="cuda")
            for i, out in enumerate(outputs):
                torch.as_tensor(out, device="cuda").copy_(t + i + 1)

    # --- mutate and return; two mutated arguments ---
    @torch.library.custom_op("inplace_test::accumulate", mutates_args=("state",))
    def _accumulate(state: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        state.add_(x)
        return state * 2

    @_accumulate.register_fake
    def _(state, x):
        return torch.empty_like(state)

    @trtp.register("inplace_test::accumulate")
    def _accumulate_desc(
        state: trtp.TensorDesc, x: trtp.TensorDesc
    ) -> Tuple[trtp.TensorDesc, trtp.TensorDesc]:
        return state.like(), state.aliased()

    @trtp.impl("inplace_test::accumulate")
    def _accumulate_impl(
        state: trtp.Tensor, x: trtp.Tensor, outputs: Tuple[trtp.Tensor], stream: int
    ):
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            s = torch.as_tensor(state, device="cuda")
            s.add_(torch.as_tensor(x, device="cuda"))
            torch.as_tensor(outputs[0], device="cuda").copy_(s * 2)

    @torch.library.custom_op("inplace_test::bump_two_", mutates_args=("a", "b"))
    def _bump_two_(a: torch.Tensor, b: torch.Tensor) -> None:
        a.add_(1)
        b.sub_(1)

    @_bump_two_.register_fake
    def _(a, b):
        return None

    @trtp.register("inplace_test::bump_two_")
    def _bump_two_desc(
        a: trtp.TensorDesc, b: trtp.TensorDesc
    ) -> Tuple[trtp.TensorDesc, trtp.TensorDesc]:
        return a.aliased(), b.aliased()

    @trtp.impl("inplace_test::bump_two_")
    def _bump_two_impl(
        a: trtp.Tensor, b: trtp.Tensor, outputs: Tuple[trtp.Tensor], stream: int
    ):
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)):
            torch.as_tensor(a, device="cuda").add_(1)
            torch.as_tensor(b, device="cuda").sub_(1)

    # --- plugins generated by Torch-TensorRT from the op itself ---
    @torch.library.custom_op("inplace_test::auto_scale_", mutates_args=("x",))
    def _auto_scale_(x: torch.Tensor, factor: float) -> None:
        x.mul_(factor)

    @_auto_scale_.register_fake
    def _(x, factor):
        return None

    @torch.library.custom_op("inplace_test::auto_max", mutates_args=())
    def _auto_max(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        values, indices = x.max(dim=-1)
        return values, indices

    @_auto_max.register_fake
    def _(x):
        shape = x.shape[:-1]
        return x.new_empty(shape), x.new_empty(shape, dtype=torch.int64)

    for op in ("auto_scale_", "auto_max"):
        torch_tensorrt.dynamo.conversion.plugins.custom_op(
            f"inplace_test::{op}", supports_dynamic_shapes=True
        )

    generate = torch_tensorrt.dynamo.conversion.plugins.generate_plugin_converter
    for op in (
        "add_one_jit_",
        "sin_cos",
        "steps",
        "accumulate",
        "bump_two_",
    ):
        generate(
            f"inplace_test::{op}",
            supports_dynamic_shapes=True,
            use_aot_if_available=False,
        )
    generate(
        "inplace_test::add_one_aot_",
        supports_dynamic_shapes=True,
        use_aot_if_available=True,
    )


def _standalone_engine(model, x, **kwargs):
    """Serialized engine of ``model`` on ``x`` and its alias map's entries."""
    import json
    import tempfile

    ep = torch.export.export(model, (x.clone(),))
    with tempfile.TemporaryDirectory() as tmp:
        engine_bytes = (
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep,
                arg_inputs=[x.clone()],
                min_block_size=1,
                require_full_compilation=True,
                alias_map_path=f"{tmp}/aliases.json",
                **kwargs,
            )
        )
        with open(f"{tmp}/aliases.json") as f:
            return engine_bytes, json.load(f)["aliases"]


def _engines(trt_module):
    return [n for n, _ in trt_module.named_children() if "_run_on_acc" in n]


def _allocated_during(call):
    """``call()``'s result and the bytes PyTorch allocated on the GPU during it."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocated_bytes.all.allocated"]
    result = call()
    torch.cuda.synchronize()
    return result, torch.cuda.memory_stats()["allocated_bytes.all.allocated"] - before


@unittest.skipIf(not RUNNABLE, REASON)
class TestInplacePlugins(TestCase):
    def _compile(self, module, args, dynamic_shapes=None, inputs=None, **kwargs):
        ep = torch.export.export(
            module, tuple(a.clone() for a in args), dynamic_shapes=dynamic_shapes
        )
        trt_module = torch_tensorrt.dynamo.compile(
            ep,
            arg_inputs=inputs or [a.clone() for a in args],
            min_block_size=1,
            require_full_compilation=True,
            **kwargs,
        )
        self.assertEqual(len(_engines(trt_module)), 1)
        return trt_module

    def _check_in_place(self, op_name):
        class Model(torch.nn.Module):
            def forward(self, x):
                getattr(torch.ops.inplace_test, op_name)(x)
                return x * 2

        x = torch.randn(64, 33, device="cuda")
        trt_module = self._compile(Model(), (x,))
        # the state is bound in place, not copied back
        (engine,) = _engines(trt_module)
        self.assertIn(("x", "user"), getattr(trt_module, engine).aliased_io.values())
        compiled_x, eager_x = x.clone(), x.clone()
        for _ in range(3):
            out, allocated = _allocated_during(lambda: trt_module(compiled_x))
            self.assertEqual(out, Model()(eager_x))
            self.assertEqual(compiled_x, eager_x)
            # the model's own output is the state's size; a copy of the state
            # (an engine output copied back) would double it
            self.assertLess(allocated, 2 * compiled_x.nbytes)

    def test_user_scenario_aot_triton_plugin_in_place(self):
        self._check_in_place("add_one_aot_")

    def test_jit_plugin_in_place(self):
        self._check_in_place("add_one_jit_")

    def test_engine_cache_keeps_the_in_place_binding(self):
        import tempfile

        class Model(torch.nn.Module):
            def forward(self, x):
                torch.ops.inplace_test.add_one_jit_(x)
                return x * 2

        x = torch.randn(64, 33, device="cuda")
        with tempfile.TemporaryDirectory() as tmp:
            cache = torch_tensorrt.dynamo._engine_cache.DiskEngineCache(tmp, 1 << 30)
            built, reused = (
                self._compile(
                    Model(),
                    (x,),
                    cache_built_engines=True,
                    reuse_cached_engines=True,
                    custom_engine_cache=cache,
                    immutable_weights=False,  # the engine cache needs refittable engines
                )
                for _ in range(2)
            )
        for trt_module in (built, reused):
            (engine,) = _engines(trt_module)
            self.assertIn(
                ("x", "user"), getattr(trt_module, engine).aliased_io.values()
            )
            compiled_x, eager_x = x.clone(), x.clone()
            for _ in range(2):
                out, allocated = _allocated_during(lambda: trt_module(compiled_x))
                self.assertEqual(out, Model()(eager_x))
                self.assertEqual(compiled_x, eager_x)
                self.assertLess(allocated, 2 * compiled_x.nbytes)

    def test_cuda_graphs_with_state_updated_in_place(self):
        """Both CUDA graph modes on the runtime this install selects (see RUNTIME)."""

        class Model(torch.nn.Module):
            def forward(self, x):
                torch.ops.inplace_test.add_one_jit_(x)
                return x * 2

        x = torch.randn(64, 33, device="cuda")
        trt_module = self._compile(Model(), (x,))
        # whole-graph mode: the caller's tensor is updated after each replay
        compiled_x, eager_x = x.clone(), x.clone()
        with torch_tensorrt.runtime.enable_cudagraphs(trt_module) as graphed:
            for _ in range(3):
                self.assertEqual(graphed(compiled_x), Model()(eager_x))
                self.assertEqual(compiled_x, eager_x)
        # per-engine mode: the graph writes the tensor it was captured with
        torch_tensorrt.runtime.set_cudagraphs_mode(True)
        try:
            for _ in range(2):
                self.assertEqual(trt_module(compiled_x), Model()(eager_x))
                self.assertEqual(compiled_x, eager_x)
            moved, moved_eager = x.clone(), x.clone()
            if RUNTIME == "python":  # captured again for the new tensor
                self.assertEqual(trt_module(moved), Model()(moved_eager))
                self.assertEqual(moved, moved_eager)
            else:  # same shape and stream: the C++ runtime would replay
                with self.assertRaisesRegex(
                    RuntimeError, "captured with their addresses"
                ):
                    trt_module(moved)
                self.assertEqual(moved, x)  # nothing was written
                # on another stream the C++ runtime records again: no error
                with torch.cuda.stream(torch.cuda.Stream()):
                    self.assertEqual(trt_module(moved), Model()(moved_eager))
                    torch.cuda.current_stream().synchronize()
                self.assertEqual(moved, moved_eager)
        finally:
            torch_tensorrt.runtime.set_cudagraphs_mode(False)

    @unittest.skipIf(
        not ENABLED_FEATURES.torch_tensorrt_runtime,
        "The compiled module already runs on the Python runtime (see the test above).",
    )
    def test_python_runtime_captures_again_for_a_moved_state(self):
        """Patch 0025's re-capture, on the Python TRTEngine beside the C++ runtime.

        With the C++ runtime library loaded, a compiled module always runs on it;
        the Python TRTEngine is driven directly from the module's engine info, as
        upstream's TestPythonRuntimeAliasedIO does.
        """
        from torch_tensorrt.dynamo.runtime._TRTEngine import TRTEngine

        class Model(torch.nn.Module):
            def forward(self, x):
                torch.ops.inplace_test.add_one_jit_(x)
                return x * 2

        x = torch.randn(64, 33, device="cuda")
        trt_module = self._compile(Model(), (x,))
        (name,) = _engines(trt_module)
        engine = TRTEngine(getattr(trt_module, name)._pack_engine_info())
        self.assertEqual(list(engine.in_binding_names), ["x"])
        torch_tensorrt.runtime.set_cudagraphs_mode(True)
        try:
            first, first_eager = x.clone(), x.clone()
            for _ in range(2):  # captured with `first`, then replayed
                engine.execute([first])
                torch.cuda.synchronize()
                first_eager += 1
                self.assertEqual(first, first_eager)
            moved, moved_eager = x.clone(), x.clone()
            engine.execute([moved])  # moved: captured again with `moved`
            torch.cuda.synchronize()
            self.assertEqual(moved, moved_eager + 1)
            self.assertEqual(first, first_eager)  # the old tensor is left alone
        finally:
            torch_tensorrt.runtime.set_cudagraphs_mode(False)

    def test_module_state_updated_in_place(self):
        class Stateful(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("state", torch.zeros(128, device="cuda"))

            def forward(self, x):
                torch.ops.inplace_test.add_one_jit_(self.state)
                return x + self.state

        x = torch.randn(128, device="cuda")
        trt_module = self._compile(Stateful(), (x,))
        eager = Stateful()
        for _ in range(3):
            self.assertEqual(trt_module(x), eager(x))
            self.assertEqual(trt_module.get_buffer("state"), eager.state)

    def test_two_outputs(self):
        class Model(torch.nn.Module):
            def forward(self, x):
                s, c = torch.ops.inplace_test.sin_cos(x)
                return s * c

        x = torch.randn(8, 16, device="cuda")
        self.assertEqual(self._compile(Model(), (x,))(x), Model()(x))

    def test_tensor_list_output(self):
        class Model(torch.nn.Module):
            def forward(self, x):
                a, b, c = torch.ops.inplace_test.steps(x)
                return a * b - c

        x = torch.randn(8, 16, device="cuda")
        self.assertEqual(self._compile(Model(), (x,))(x), Model()(x))

    def test_mutate_and_return(self):
        class Model(torch.nn.Module):
            def forward(self, state, x):
                return torch.ops.inplace_test.accumulate(state, x) + 1

        state, x = torch.randn(8, 16, device="cuda"), torch.randn(8, 16, device="cuda")
        trt_module = self._compile(Model(), (state, x))
        compiled_state, eager_state = state.clone(), state.clone()
        for _ in range(3):
            self.assertEqual(trt_module(compiled_state, x), Model()(eager_state, x))
            self.assertEqual(compiled_state, eager_state)

    def test_two_mutated_args(self):
        class Model(torch.nn.Module):
            def forward(self, a, b):
                torch.ops.inplace_test.bump_two_(a, b)
                return a * b

        a, b = torch.randn(8, 16, device="cuda"), torch.randn(8, 16, device="cuda")
        trt_module = self._compile(Model(), (a, b))
        ca, cb, ea, eb = a.clone(), b.clone(), a.clone(), b.clone()
        self.assertEqual(trt_module(ca, cb), Model()(ea, eb))
        self.assertEqual((ca, cb), (ea, eb))

    def test_dynamic_batch(self):
        class Model(torch.nn.Module):
            def forward(self, x):
                torch.ops.inplace_test.add_one_jit_(x)
                return x * 2

        x = torch.randn(4, 33, device="cuda")
        batch = torch.export.Dim("batch", min=1, max=16)
        inputs = [
            torch_tensorrt.Input(
                min_shape=(1, 33), opt_shape=(4, 33), max_shape=(16, 33)
            )
        ]
        trt_module = self._compile(
            Model(), (x,), dynamic_shapes=({0: batch},), inputs=inputs
        )
        for n in (1, 7, 16):
            y = torch.randn(n, 33, device="cuda")
            compiled_y, eager_y = y.clone(), y.clone()
            self.assertEqual(trt_module(compiled_y), Model()(eager_y))
            self.assertEqual(compiled_y, eager_y)

    def test_generated_plugin_in_place(self):
        class Model(torch.nn.Module):
            def forward(self, x):
                torch.ops.inplace_test.auto_scale_(x, 3.0)
                return x + 1

        x = torch.randn(16, 8, device="cuda")
        trt_module = self._compile(Model(), (x,))
        compiled_x, eager_x = x.clone(), x.clone()
        for _ in range(3):
            self.assertEqual(trt_module(compiled_x), Model()(eager_x))
            self.assertEqual(compiled_x, eager_x)

    def test_generated_plugin_output_dtypes_follow_the_fake_implementation(self):
        class Model(torch.nn.Module):
            def forward(self, x):
                return torch.ops.inplace_test.auto_max(x)

        x = torch.randn(16, 8, device="cuda")
        values, indices = self._compile(Model(), (x,))(x)
        self.assertEqual(indices.dtype, torch.int64)
        self.assertEqual((values, indices), Model()(x))

    def test_standalone_engine_binds_the_state_in_place(self):
        """The issue's load_and_test_engine, using the alias map instead of
        get_aliased_input_tensor (which TensorRT leaves empty for plugins)."""

        class Model(torch.nn.Module):
            def forward(self, x):
                torch.ops.inplace_test.add_one_aot_(x)
                return x * 2

        x = torch.randn(64, 33, device="cuda")
        engine_bytes, aliases = _standalone_engine(Model(), x)
        self.assertEqual(
            aliases,
            [
                {
                    "output": "x_new",
                    "input": "x",
                    "update": "in_place",
                    "binding": "declared_alias",
                }
            ],
        )

        runtime = trt.Runtime(trt.Logger())
        runtime.engine_host_code_allowed = True
        engine = runtime.deserialize_cuda_engine(engine_bytes)
        context = engine.create_execution_context()
        state, eager_state = x.clone(), x.clone()
        out = torch.empty_like(x)
        context.set_tensor_address("x", state.data_ptr())
        context.set_tensor_address("x_new", state.data_ptr())  # "in_place"
        context.set_tensor_address("output0", out.data_ptr())
        stream = torch.cuda.current_stream()
        for _ in range(3):
            self.assertTrue(context.execute_async_v3(stream.cuda_stream))
            stream.synchronize()
            self.assertEqual(out, Model()(eager_state))
            self.assertEqual(state, eager_state)

    def test_python_runtime_returns_the_state_without_a_copy(self):
        """Patch 0026 on the Python TRTEngine (driven directly beside the C++ runtime)."""
        from torch_tensorrt.dynamo.runtime._in_place_outputs import op_outputs
        from torch_tensorrt.dynamo.runtime._TRTEngine import TRTEngine

        class Model(torch.nn.Module):
            def forward(self, x):
                torch.ops.inplace_test.add_one_jit_(x)
                return x * 2

        x = torch.randn(64, 33, device="cuda")
        trt_module = self._compile(Model(), (x,))
        (name,) = _engines(trt_module)
        engine = TRTEngine(getattr(trt_module, name)._pack_engine_info())
        self.assertEqual(len(engine.in_place_outputs), 1)
        ((o, i),) = engine.in_place_outputs
        state, eager_state = x.clone(), x.clone()
        outputs = list(engine.execute([state]))
        torch.cuda.synchronize()
        Model()(eager_state)
        self.assertEqual(state, eager_state)
        self.assertEqual(outputs[o].data_ptr(), state.data_ptr())
        returned = op_outputs(outputs, [state], engine.in_place_outputs)
        self.assertEqual(len(returned), len(outputs) - 1)
        self.assertTrue(all(r.data_ptr() != state.data_ptr() for r in returned))

    def test_functional_op_with_aliasing_plugin_is_rejected(self):
        @torch.library.custom_op("inplace_test::sneaky", mutates_args=())
        def sneaky(x: torch.Tensor) -> torch.Tensor:
            return x + 1

        @sneaky.register_fake
        def _(x):
            return torch.empty_like(x)

        @trtp.register("inplace_test::sneaky")
        def _(x: trtp.TensorDesc) -> Tuple[trtp.TensorDesc]:
            return (x.aliased(),)

        @trtp.impl("inplace_test::sneaky")
        def _(x: trtp.Tensor, outputs: Tuple[trtp.Tensor], stream: int):
            pass

        generate("inplace_test::sneaky", use_aot_if_available=False)

        class Model(torch.nn.Module):
            def forward(self, x):
                return torch.ops.inplace_test.sneaky(x)

        with self.assertRaisesRegex(Exception, "needs no aliased outputs"):
            self._compile(Model(), (torch.randn(4, device="cuda"),))


if __name__ == "__main__":
    run_tests()
