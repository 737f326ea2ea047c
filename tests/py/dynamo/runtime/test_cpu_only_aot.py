"""Ahead-of-time engine builds on a host without a CUDA device (TensorRT-RTX).

TensorRT-RTX builds engines without a GPU; deserializing and running them needs
one. These tests pin down what works on such a host (import, default settings,
serialized engines, ``dryrun``) and that everything else fails with a clear
error instead of a CUDA driver error.
"""

import unittest
import unittest.mock

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt import ENABLED_FEATURES, Device, DeviceType
from torch_tensorrt._utils import is_orin, is_tegra_platform, is_thor
from torch_tensorrt.dynamo import _defaults
from torch_tensorrt.dynamo._settings import CompilationSettings

NO_CUDA = not torch.cuda.is_available()
NEEDS_NO_CUDA = (
    "Checks the behaviour on a host without a CUDA device; this host has one."
)
NEEDS_CPU_BUILDER = (
    "Building engines without a CUDA device needs TensorRT-RTX; "
    "the standard TensorRT builder needs a GPU."
)


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def _export(dynamic: bool = False) -> torch.export.ExportedProgram:
    torch.manual_seed(0)
    x = torch.randn(4, 8)
    shapes = {"x": {0: torch.export.Dim("batch", min=1, max=16)}} if dynamic else None
    return torch.export.export(MLP().eval(), (x,), dynamic_shapes=shapes)


@unittest.skipIf(not NO_CUDA, NEEDS_NO_CUDA)
class TestDefaultsWithoutCuda(TestCase):
    def test_platform_probes_do_not_touch_the_driver(self):
        self.assertFalse(is_tegra_platform())
        self.assertFalse(is_orin())
        self.assertFalse(is_thor())

    def test_default_device_is_gpu_0(self):
        # Device has no __eq__: compare what identifies the target
        for device in (
            _defaults.default_device(),
            CompilationSettings().device,
            Device._from(None),
        ):
            self.assertEqual(
                (device.device_type, device.gpu_id), (DeviceType.GPU, 0), device
            )


@unittest.skipIf(not (NO_CUDA and ENABLED_FEATURES.tensorrt_rtx), NEEDS_CPU_BUILDER)
class TestSerializedEngineWithoutCuda(TestCase):
    def test_static_shape(self):
        ep = _export()
        engine = (
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep, arg_inputs=[torch.randn(4, 8)]
            )
        )
        self.assertIsInstance(engine, bytes)
        self.assertGreater(len(engine), 1000)
        # binding names are stored in the engine
        self.assertIn(b"x", engine)
        self.assertIn(b"output0", engine)

    def test_dynamic_batch(self):
        ep = _export(dynamic=True)
        static = (
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                _export(), arg_inputs=[torch.randn(4, 8)]
            )
        )
        engine = (
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep,
                arg_inputs=[
                    torch_tensorrt.Input(
                        min_shape=(1, 8), opt_shape=(4, 8), max_shape=(16, 8), name="x"
                    )
                ],
            )
        )
        self.assertIsInstance(engine, bytes)
        # a dynamic engine carries an optimization profile the static one lacks
        self.assertNotEqual(engine, static)

    def test_interpreter_result_keeps_the_serialized_engine(self):
        from torch_tensorrt.dynamo.conversion._conversion import (
            interpret_module_to_result,
        )
        from torch_tensorrt.dynamo.lowering import post_lowering

        settings = CompilationSettings(min_block_size=1)
        gm = post_lowering(_export().run_decompositions().module(), settings)
        inputs = [torch_tensorrt.Input.from_tensor(torch.randn(4, 8))]
        result = interpret_module_to_result(gm, inputs, settings)
        self.assertIsInstance(result.serialized_engine, bytes)
        self.assertEqual(result.input_names, ["x"])
        self.assertEqual(result.output_names, ["output0"])


@unittest.skipIf(not (NO_CUDA and ENABLED_FEATURES.tensorrt_rtx), NEEDS_CPU_BUILDER)
class TestCompileWithoutCuda(TestCase):
    def test_dryrun_partitions_into_one_engine(self):
        gm = torch_tensorrt.dynamo.compile(
            _export(), arg_inputs=[torch.randn(4, 8)], dryrun=True, min_block_size=1
        )
        self.assertEqual([name for name, _ in gm.named_children()], ["_run_on_acc_0"])

    def test_dryrun_with_default_arguments(self):
        gm = torch_tensorrt.dynamo.compile(
            _export(dynamic=True),
            arg_inputs=[
                torch_tensorrt.Input(
                    min_shape=(1, 8), opt_shape=(4, 8), max_shape=(16, 8), name="x"
                )
            ],
            dryrun=True,
        )
        self.assertIsInstance(gm, torch.fx.GraphModule)

    def test_running_needs_a_cuda_device(self):
        with self.assertRaisesRegex(RuntimeError, "needs a CUDA device.*dryrun=True"):
            torch_tensorrt.dynamo.compile(
                _export(), arg_inputs=[torch.randn(4, 8)], min_block_size=1
            )

    def test_engine_setup_needs_a_cuda_device(self):
        from torch_tensorrt.dynamo.runtime import TorchTensorRTModule

        engine = (
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                _export(), arg_inputs=[torch.randn(4, 8)]
            )
        )
        with self.assertRaisesRegex(RuntimeError, "a CUDA device is needed"):
            TorchTensorRTModule(
                serialized_engine=engine,
                input_binding_names=["x"],
                output_binding_names=["output0"],
                name="mlp",
            )


class TestTheFrontDoorWithoutCuda(TestCase):
    """``torch_tensorrt.compile(module, ir="dynamo")`` on a host without a CUDA device
    (stood in on any host): one sentence naming what works there, before tracing."""

    def test_compile_of_a_module_needs_a_cuda_device(self):
        with unittest.mock.patch("torch.cuda.is_available", return_value=False):
            with self.assertRaisesRegex(
                RuntimeError,
                r"^torch_tensorrt\.compile\(\.\.\., ir='dynamo'\) traces the module.*"
                r"convert_exported_program_to_serialized_trt_engine",
            ):
                torch_tensorrt.compile(
                    MLP(), ir="dynamo", arg_inputs=[torch.randn(4, 8)]
                )


class TestQuietImport(TestCase):
    """``import torch_tensorrt`` prints nothing the user did not ask for."""

    def test_import_prints_no_modelopt_notice_and_no_deprecation(self):
        import subprocess
        import sys

        done = subprocess.run(
            [sys.executable, "-c", "import torch_tensorrt"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        for noise in (
            "modelopt",
            "register_opaque_type is deprecated",
            "typ='reference' is deprecated",
            "torch._opaque_base is deprecated",
        ):
            self.assertNotIn(noise, done.stdout + done.stderr)

    def test_an_older_torch_gets_the_old_registration_names(self):
        import types
        import unittest.mock

        from torch_tensorrt.dynamo.runtime import _TRTEngine

        class Opaque:
            pass

        calls = []
        old_torch = types.SimpleNamespace(
            register_opaque_type=lambda cls, typ: calls.append((cls, typ))
        )
        with unittest.mock.patch.object(_TRTEngine, "opaque_object", old_torch):
            _TRTEngine._register_opaque_class(Opaque)
        self.assertEqual(calls, [(Opaque, "reference")])


if __name__ == "__main__":
    run_tests()
