# type: ignore
"""Every entry point runs the state steps of lowering, from one function.

``compile``, ``convert_exported_program_to_serialized_trt_engine``,
``cross_compile_for_windows``, the ``torch.compile`` backend and refit each
lower a graph with ``lower_states``. The model clones its input and writes a
slab of the clone in the KV-cache layer's form: lowering removes the clone, and
without the clone veto the layer would write the caller's input. Each entry
point is stopped right after its state steps (nothing is built, no GPU), and
the write it lowered must carry the veto.
"""

import contextlib
import unittest
import unittest.mock

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo import _compiler, _refit
from torch_tensorrt.dynamo._settings import CompilationSettings
from torch_tensorrt.dynamo.backend import backends
from torch_tensorrt.dynamo.lowering import _state_steps

# the entry points create TensorRT's builder or runtime before their lowering
# (refit makes a trt.Runtime): TensorRT-RTX on the CPU, or any flavour on a GPU
TENSORRT_RUNS_HERE = torch.cuda.is_available() or (
    torch_tensorrt.ENABLED_FEATURES.tensorrt_rtx
)
NO_TENSORRT_HERE = (
    "The standard flavour's TensorRT libraries cannot run on a host without a GPU "
    "(tensorrt-cu13-libs is a stub here); this runs with TensorRT-RTX or on a GPU."
)

KV_WRITES = (torch.ops.aten.slice_scatter.default, torch.ops.aten.index_copy.default)


class ClonesThenWrites(torch.nn.Module):
    def forward(self, cache, u):
        c = cache.clone()
        c[:, :, 2:3, :] = u
        return c * 2


def _inputs():
    return torch.zeros(1, 2, 8, 4), torch.ones(1, 2, 1, 4)


class _Stop(Exception):
    pass


@contextlib.contextmanager
def _stopped_after_the_state_steps(module):
    """``module.lower_states`` recorded, then the entry point stopped."""
    seen = []

    def recorded(gm, settings, *, lift_buffers):
        seen.append(_state_steps.lower_states(gm, settings, lift_buffers=lift_buffers))
        raise _Stop

    with unittest.mock.patch.object(module, "lower_states", recorded):
        yield seen


def _compile(ep, inputs):
    # dryrun: on a host without a GPU compile() builds nothing (stopped
    # before that anyway)
    torch_tensorrt.dynamo.compile(
        ep, arg_inputs=list(inputs), min_block_size=1, dryrun=True
    )


def _convert(ep, inputs):
    torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
        ep, arg_inputs=list(inputs), min_block_size=1
    )


def _cross_compile(ep, inputs):
    # the feature is Linux x86-64 with the standard flavour only: stopped
    # before any engine, its lowering runs wherever it is turned on
    features = torch_tensorrt._features.ENABLED_FEATURES._replace(
        windows_cross_compile=True
    )
    with unittest.mock.patch.object(
        torch_tensorrt._features, "ENABLED_FEATURES", features
    ):
        torch_tensorrt.dynamo.cross_compile_for_windows(
            ep, arg_inputs=list(inputs), min_block_size=1
        )


def _refit_weights(ep, inputs):
    # a compiled module as refit reads it: one engine submodule with settings
    compiled = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())
    engine = torch.nn.Module()
    engine.settings = CompilationSettings(immutable_weights=False)
    compiled.add_module("_run_on_acc_0", engine)
    torch_tensorrt.dynamo.refit_module_weights(compiled, ep)


ENTRY_POINTS = {
    "compile": (_compiler, _compile),
    "convert_exported_program_to_serialized_trt_engine": (_compiler, _convert),
    "cross_compile_for_windows": (_compiler, _cross_compile),
    "refit_module_weights": (_refit, _refit_weights),
}


@unittest.skipIf(not TENSORRT_RUNS_HERE, NO_TENSORRT_HERE)
class TestEveryEntryPoint(TestCase):
    def _check_lowered(self, seen, entry_point):
        self.assertEqual(len(seen), 1, f"{entry_point} did not run lower_states")
        writes = [n for n in seen[0].gm.graph.nodes if n.target in KV_WRITES]
        self.assertTrue(writes, seen[0].gm.graph)
        for write in writes:
            self.assertTrue(
                write.meta.get("_trt_no_kv_alias"),
                f"{entry_point}: {write.name} writes a clone of an input without "
                "the veto; the KV-cache layer would write the caller's input",
            )

    def test_exported_program_entry_points(self):
        for entry_point, (module, call) in ENTRY_POINTS.items():
            with self.subTest(entry_point):
                ep = torch.export.export(ClonesThenWrites(), _inputs())
                with _stopped_after_the_state_steps(module) as seen:
                    with self.assertRaises(_Stop):
                        call(ep, _inputs())
                self._check_lowered(seen, entry_point)

    def test_torch_compile_backend(self):
        torch._dynamo.reset()
        compiled = torch.compile(
            ClonesThenWrites(),
            backend="torch_tensorrt",
            options={"min_block_size": 1, "pass_through_build_failures": True},
        )
        with _stopped_after_the_state_steps(backends) as seen:
            with self.assertRaises(Exception) as raised:
                compiled(*_inputs())
        # dynamo wraps what the backend raised
        self.assertIn(_Stop.__name__, str(raised.exception))
        self._check_lowered(seen, "the torch.compile backend")
        torch._dynamo.reset()


if __name__ == "__main__":
    run_tests()
