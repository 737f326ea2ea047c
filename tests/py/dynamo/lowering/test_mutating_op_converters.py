"""A mutating op (``mutates_args``, ``-> None``) reaches its own converter (#4240).

``write_rows_``'s converter puts its write on IKVCacheUpdateLayer, which TensorRT-RTX
builds without a GPU, and declares ``requires_aliased_plugin_io`` as plugins do."""

import unittest
from unittest import mock

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt import ENABLED_FEATURES
from torch_tensorrt.dynamo import _compiler
from torch_tensorrt.dynamo._SourceIR import SourceIR
from torch_tensorrt.dynamo.conversion import dynamo_tensorrt_converter, impl
from torch_tensorrt.dynamo.conversion._symbolic_shape_capture import (
    extract_symbolic_shape_expressions,
)

CAN_BUILD = ENABLED_FEATURES.tensorrt_rtx or torch.cuda.is_available()
# The converter records a user alias; where the engine can be read back (a GPU), the
# check after the build takes TensorRT's own report of its KV-cache layer instead
KV_ALIAS = "kv_cache_update" if torch.cuda.is_available() else "user"


@torch.library.custom_op("trt_mut::write_rows_", mutates_args=("cache",))
def write_rows_(cache: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor) -> None:
    cache[:, :, pos : pos + rows.shape[2]] = rows


@torch.library.custom_op("trt_mut::swap_", mutates_args=("a", "b"))
def swap_(a: torch.Tensor, b: torch.Tensor) -> None:
    a.copy_(b.clone())


@torch.library.custom_op("trt_mut::scale_", mutates_args=("x",))
def scale_(x: torch.Tensor) -> None:
    x.mul_(2)


for op in (write_rows_, swap_, scale_):
    op.register_fake(lambda *args: None)


@dynamo_tensorrt_converter(
    torch.ops.trt_mut.write_rows_.default, requires_aliased_plugin_io=True
)
def _write_rows(ctx, target, args, kwargs, name):
    import tensorrt as trt  # torch_tensorrt's TensorRT (or TensorRT-RTX)

    cache, rows, pos = args
    pos = impl.cast.to_copy(ctx, target, SourceIR.ATEN, name, pos, torch.int32, False)
    layer = ctx.net.add_kv_cache_update(cache, rows, pos, trt.KVCacheMode.LINEAR)
    return layer.get_output(0)


@dynamo_tensorrt_converter(torch.ops.trt_mut.swap_.default)
def _new_tensors(ctx, target, args, kwargs, name):
    return impl.elementwise.mul(ctx, target, SourceIR.ATEN, name, args[0], args[1])


# Declares the flag but computes a new tensor: TensorRT would not write x in place
@dynamo_tensorrt_converter(
    torch.ops.trt_mut.scale_.default, requires_aliased_plugin_io=True
)
def _scale_out_of_place(ctx, target, args, kwargs, name):
    return impl.elementwise.mul(ctx, target, SourceIR.ATEN, name, args[0], 2.0)


class WriteRows(torch.nn.Module):
    def forward(self, cache, rows, pos):
        torch.ops.trt_mut.write_rows_(cache, rows, pos)


def _inputs(device="cpu", seed=0):
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randn(1, 2, 1, 8, generator=generator).to(device)
    return torch.zeros(1, 2, 16, 8, device=device), rows, torch.tensor([3]).to(device)


def _lowered(model, inputs):
    ep = torch.export.export(model, inputs).run_decompositions()
    settings = torch_tensorrt.dynamo.CompilationSettings()
    return torch_tensorrt.dynamo.lowering.post_lowering(ep.module(), settings)


def _built(model, inputs, **kwargs):
    results, interpret = [], _compiler.interpret_module_to_result
    spy = lambda *a, **k: results.append(interpret(*a, **k)) or results[-1]
    ep = torch.export.export(model, inputs)
    with mock.patch.object(_compiler, "interpret_module_to_result", spy):
        engine = (
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep, arg_inputs=list(inputs), min_block_size=1, **kwargs
            )
        )
    return engine, results[0]


class TestLowerAutoFunctionalized(TestCase):
    def test_op_reaches_its_converter(self):
        class M(torch.nn.Module):
            def forward(self, cache, rows, pos):
                WriteRows()(cache, rows, pos)
                torch.ops.trt_mut.swap_(rows, rows)  # one tensor: stays in PyTorch

        targets = [
            str(n.target)
            for n in _lowered(M(), _inputs()).graph.nodes
            if n.op == "call_function"
        ]
        self.assertIn("FunctionalizedOp(trt_mut.write_rows_.default)", targets)
        self.assertIn("auto_functionalized_v2", targets)  # swap_, and its write-back
        self.assertEqual(targets.count("aten.copy_.default"), 2)

    def test_plain_aten_write_into_an_input_is_kept(self):
        class M(torch.nn.Module):
            def forward(self, x):
                x.add_(1)
                return x * 2

        targets = [str(n.target) for n in _lowered(M(), (torch.ones(4),)).graph.nodes]
        self.assertIn("aten.copy_.default", targets)

    def test_none_among_the_outputs_has_no_shape_entry(self):
        class M(torch.nn.Module):
            def forward(self, cache, rows, pos):
                WriteRows()(cache, rows, pos)
                return None, rows * 2

        shapes = extract_symbolic_shape_expressions(_lowered(M(), _inputs()))
        self.assertEqual([o["shape_exprs"] for o in shapes["outputs"]], [[1, 2, 1, 8]])

    @unittest.skipIf(
        torch.cuda.is_available() or not ENABLED_FEATURES.tensorrt_rtx,
        "Builds the engines on a host without a GPU (TensorRT-RTX)",
    )
    def test_compiled_module_records_the_alias_under_either_partitioner(self):
        from .test_compile_with_stand_in_engines import compile_on_cpu

        for full in (True, False):
            for fast in (True, False):
                with self.subTest(require_full_compilation=full, fast_partitioner=fast):
                    _, built = compile_on_cpu(
                        self,
                        WriteRows(),
                        _inputs(),
                        require_full_compilation=full,
                        use_fast_partitioner=fast,
                    )
                    aliases = [v for e in built for v in e.aliased_io.values()]
                    self.assertEqual(aliases, [("cache", "user")])


@unittest.skipIf(not CAN_BUILD, "Builds engines: needs TensorRT-RTX or a GPU")
class TestStandaloneEngines(TestCase):
    def test_engine_records_the_alias(self):
        _, result = _built(WriteRows(), _inputs(), require_full_compilation=True)
        self.assertEqual(result.aliased_io, {"cache_new": ("cache", KV_ALIAS)})

    def test_flag_on_a_converter_that_writes_a_new_tensor_is_refused(self):
        class M(torch.nn.Module):
            def forward(self, x):
                torch.ops.trt_mut.scale_(x)

        with self.assertRaisesRegex(
            ValueError,
            r"^The converter of trt_mut\.scale_\.default declares "
            r"requires_aliased_plugin_io, but computes the new value of input 'x' "
            r"with a ELEMENTWISE layer",
        ):
            _built(M(), (torch.ones(4),))


@unittest.skipIf(not torch.cuda.is_available(), "Runs an engine: needs a GPU")
class TestInPlaceOnTheGPU(TestCase):
    def test_compiled_module_updates_the_input_in_place(self):
        cache, rows, pos = _inputs("cuda")
        expected, ptr = cache.clone(), cache.data_ptr()
        trt_mod = torch_tensorrt.dynamo.compile(
            torch.export.export(WriteRows(), (cache, rows, pos)),
            arg_inputs=[cache, rows, pos],
            require_full_compilation=True,
            min_block_size=1,
        )
        # One engine, and no PyTorch copy of the state after it
        calls = [n for n in trt_mod.graph.nodes if n.op == "call_module"]
        self.assertEqual(len(calls), 1)
        self.assertFalse([n for n in trt_mod.graph.nodes if "copy" in str(n.target)])
        engine = getattr(trt_mod, str(calls[0].target))
        self.assertEqual(list(engine.aliased_io.values()), [("cache", KV_ALIAS)])
        for step in range(3):  # each call writes the next position of the cache
            pos = torch.tensor([3 + step], device="cuda")
            rows = _inputs("cuda", seed=step + 1)[1]
            WriteRows()(expected, rows, pos)
            self.assertIsNone(trt_mod(cache, rows, pos))
            self.assertEqual((cache, cache.data_ptr()), (expected, ptr))
        context = getattr(engine, "context", None)  # the Python runtime's
        if context is not None:
            output = next(iter(engine.aliased_io))
            self.assertEqual(context.get_tensor_address(output), ptr)


if __name__ == "__main__":
    run_tests()
