"""A mutating op (``mutates_args``, ``-> None``) reaches its own converter (#4240).

``write_rows_``'s converter is no plugin: TensorRT's KV-cache update layer writes
the state in its memory, so it declares ``requires_aliased_plugin_io`` too.
"""

import unittest
from unittest import mock

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt import ENABLED_FEATURES
from torch_tensorrt.dynamo import _compiler
from torch_tensorrt.dynamo._SourceIR import SourceIR
from torch_tensorrt.dynamo.conversion import dynamo_tensorrt_converter, impl


@torch.library.custom_op("trt_mut::write_rows_", mutates_args=("cache",))
def write_rows_(cache: torch.Tensor, rows: torch.Tensor, pos: torch.Tensor) -> None:
    cache[:, :, pos : pos + rows.shape[2]] = rows


@torch.library.custom_op("trt_mut::swap_", mutates_args=("a", "b"))
def swap_(a: torch.Tensor, b: torch.Tensor) -> None:
    a.copy_(b.clone())


for op in (write_rows_, swap_):
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


class WriteRows(torch.nn.Module):
    def forward(self, cache, rows, pos):
        torch.ops.trt_mut.write_rows_(cache, rows, pos)
        return rows * 2


def _inputs(device="cpu"):
    torch.manual_seed(0)
    rows = torch.randn(1, 2, 1, 8, device=device)
    return (
        torch.zeros(1, 2, 16, 8, device=device),
        rows,
        torch.tensor([3], device=device),
    )


class TestLowerAutoFunctionalized(TestCase):
    def test_op_reaches_its_converter(self):
        class M(torch.nn.Module):
            def forward(self, cache, rows, pos):
                WriteRows()(cache, rows, pos)
                torch.ops.trt_mut.swap_(rows, rows)  # one tensor: stays in PyTorch

        ep = torch.export.export(M(), _inputs()).run_decompositions()
        gm = torch_tensorrt.dynamo.lowering.post_lowering(
            ep.module(), torch_tensorrt.dynamo.CompilationSettings()
        )
        targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        self.assertIn("FunctionalizedOp(trt_mut.write_rows_.default)", targets)
        self.assertIn("aten.copy_.default", targets)  # the write-backs are kept
        self.assertIn("auto_functionalized_v2", targets)  # swap_

    @unittest.skipIf(
        torch.cuda.is_available() or not ENABLED_FEATURES.tensorrt_rtx,
        "Builds the engine on a host without a GPU (TensorRT-RTX)",
    )
    def test_standalone_engine_records_the_alias(self):
        results, interpret = [], _compiler.interpret_module_to_result
        spy = lambda *a, **k: results.append(interpret(*a, **k)) or results[-1]
        ep = torch.export.export(WriteRows(), _inputs())
        with mock.patch.object(_compiler, "interpret_module_to_result", spy):
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep, arg_inputs=_inputs(), require_full_compilation=True
            )
        self.assertEqual(results[0].aliased_io, {"cache_new": ("cache", "user")})

    @unittest.skipIf(
        torch.cuda.is_available() or not ENABLED_FEATURES.tensorrt_rtx,
        "Builds the engines on a host without a GPU (TensorRT-RTX)",
    )
    def test_compiled_module_records_the_alias_under_either_partitioner(self):
        from test_compile_with_stand_in_engines import compile_on_cpu

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

    @unittest.skipIf(not torch.cuda.is_available(), "Runs an engine: needs a GPU")
    def test_compiled_module_updates_the_input_in_place(self):
        cache, rows, pos = _inputs("cuda")
        expected = cache.clone()
        WriteRows()(expected, rows, pos)
        ptr = cache.data_ptr()
        trt_mod = torch_tensorrt.dynamo.compile(
            torch.export.export(WriteRows(), (cache, rows, pos)),
            arg_inputs=[cache, rows, pos],
            require_full_compilation=True,
            min_block_size=1,
        )
        self.assertEqual(trt_mod(cache, rows, pos), rows * 2)
        self.assertEqual((cache, cache.data_ptr()), (expected, ptr))
        engine = next(m for n, m in trt_mod.named_children() if "_run_on_acc" in n)
        self.assertEqual([v[0] for v in engine.aliased_io.values()], ["cache"])


if __name__ == "__main__":
    run_tests()
