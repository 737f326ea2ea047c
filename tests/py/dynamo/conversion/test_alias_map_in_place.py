# type: ignore
"""``in_place`` in a standalone engine's alias map only where the built network proves it.

Engines are built by TensorRT-RTX on the CPU (it has no plugin layers, so a
converter stands in for the plugin converter's ``user`` alias record); the
plugin converter's record itself is tested against the real
``tensorrt.plugin`` in ``tests/py/dynamo/automatic_plugin/test_plugin_converter_qdp.py``.
"""

import unittest
import unittest.mock

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt import ENABLED_FEATURES
from torch_tensorrt.dynamo._SourceIR import SourceIR
from torch_tensorrt.dynamo.conversion import (
    _functionalized_op,
    dynamo_tensorrt_converter,
    impl,
)


@torch.library.custom_op("trt_alias_map::add_two_", mutates_args=("X",))
def add_two_(X: torch.Tensor) -> None:
    X.add_(2)


@add_two_.register_fake
def _(X):
    return None


@dynamo_tensorrt_converter(
    torch.ops.trt_alias_map.add_two_.default, requires_aliased_plugin_io=True
)
def _add_two(ctx, target, args, kwargs, name):
    # stand-in for a plugin converter (TensorRT-RTX has no plugin layers): the
    # wrapper of the functionalized op records its user alias
    return impl.elementwise.add(ctx, target, SourceIR.ATEN, name, args[0], 2.0)


@unittest.skipIf(
    torch.cuda.is_available() or not ENABLED_FEATURES.tensorrt_rtx,
    "Builds engines without a CUDA device, which needs TensorRT-RTX on a host "
    "without a GPU.",
)
class TestInPlaceUpdatesInTheAliasMap(TestCase):
    """``in_place`` in a standalone engine's alias map only where the network proves it.

    ``trt_layout::add_two_``'s converter is a stand-in for a plugin converter
    (TensorRT-RTX has no plugin layers): ordinary layers, declaring
    ``requires_aliased_plugin_io``, so the functionalized op's converter wrapper
    records the ``user`` alias (``record_in_place_outputs``, tested against the
    real ``tensorrt.plugin`` in ``test_plugin_converter_qdp.py``). It checks
    Torch-TensorRT's glue from that record to the map, nothing about TensorRT.
    """

    def setUp(self):
        # the stand-in's layers are taken for the plugin layer they stand in for
        stand_in = unittest.mock.patch.object(
            _functionalized_op, "why_not_written_in_place", return_value=""
        )
        stand_in.start()
        self.addCleanup(stand_in.stop)

    def _map(self, module, args, **kwargs):
        import json
        import tempfile

        ep = torch.export.export(module, args)
        with tempfile.TemporaryDirectory() as tmp:
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep,
                arg_inputs=list(args),
                min_block_size=1,
                alias_map_path=f"{tmp}/aliases.json",
                **kwargs,
            )
            with open(f"{tmp}/aliases.json") as f:
                return json.load(f)

    def _aliases(self, module, args, **kwargs):
        return [
            (a["input"], a["output"], a["update"], a.get("binding"))
            for a in self._map(module, args, **kwargs)["aliases"]
        ]

    def test_proven_sole_reader_is_in_place_with_the_chosen_binding(self):
        class Model(torch.nn.Module):
            def forward(self, x):
                torch.ops.trt_alias_map.add_two_(x)
                return x * 2

        x = torch.randn(2, 4)
        alias_map = self._map(Model(), (x,))
        self.assertEqual(alias_map["version"], 2)
        self.assertEqual(
            # the state's dtype (recorded by a later piece) is not checked here
            [
                {k: v for k, v in a.items() if k != "dtype"}
                for a in alias_map["aliases"]
            ],
            [
                {
                    "output": "x_new",
                    "input": "x",
                    "update": "in_place",
                    "binding": "declared_alias",
                }
            ],
        )

    def test_lifted_state_is_in_place(self):
        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("state", torch.zeros(2, 4))

            def forward(self, x):
                torch.ops.trt_alias_map.add_two_(self.state)
                return x * 2

        self.assertEqual(
            self._aliases(Model(), (torch.randn(2, 4),), lift_mutable_buffers=True),
            [("buf_state", "buf_state_new", "in_place", "declared_alias")],
        )

    def test_other_readers_fall_back_to_copy_with_a_warning(self):
        class Model(torch.nn.Module):
            def forward(self, x):
                before = x + 1
                torch.ops.trt_alias_map.add_two_(x)
                return x * before

        with self.assertLogs("torch_tensorrt.dynamo", "WARNING") as logs:
            aliases = self._aliases(Model(), (torch.randn(2, 4),))
        self.assertEqual(aliases, [("x", "x_new", "copy", None)])
        # said once, by the converter that would have written it in place
        warnings = [m for m in logs.output if "other readers" in m]
        self.assertEqual(len(warnings), 1, logs.output)


if __name__ == "__main__":
    run_tests()
