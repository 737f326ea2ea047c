# type: ignore
"""An engine's aliased I/O records are checked before an output is bound to an input.

Records restored from a serialized module (``set_extra_state``, unpickling) are
read strictly and checked against the engine's bindings; the Python runtime also
checks each pair against the deserialized engine and the tensor it binds on
every call, on the standard and the output-allocator paths. On the CPU the
engine class is stood in (a CUDA device is needed to deserialize one) and
``ICudaEngine`` by a recording stand-in that answers the four questions the
check asks; on a GPU the records of a real engine are tampered with.
"""

import pickle
import unittest
import unittest.mock

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt import ENABLED_FEATURES
from torch_tensorrt._Device import Device
from torch_tensorrt.dynamo._settings import CompilationSettings
from torch_tensorrt.dynamo.conversion._ConversionContext import AliasKind
from torch_tensorrt.dynamo.runtime._aliased_io_checks import (
    ALIAS_KINDS,
    AliasedIOError,
    check_aliased_io_against_engine,
    check_aliased_io_records,
    check_bound_alias,
    read_aliased_io_records,
)
from torch_tensorrt.dynamo.runtime._serialized_engine_layout import ALIASED_IO_IDX
from torch_tensorrt.dynamo.runtime._TorchTensorRTModule import (
    TorchTensorRTModule,
    deserialize_aliased_io,
    serialize_aliased_io,
)

NO_GPU = "Running TensorRT engines needs a CUDA device; this host has none."
PYTHON_RUNTIME_ONLY = (
    "The C++ runtime library is not patched by this patch set: it checks an "
    "aliased output's shape at bind time itself, and its dtype is not compared"
)

INPUTS, OUTPUTS = ["x", "state"], ["output0", "state_new"]
GOOD = {"state_new": ("state", "user")}


class TestReadingRecords(TestCase):
    def test_round_trip(self):
        records = {"a": ("x", "user"), "b": ("y", "kv_cache_update")}
        self.assertEqual(
            read_aliased_io_records(serialize_aliased_io(records), "e"), records
        )
        self.assertEqual(read_aliased_io_records("", "e"), {})

    def test_every_kind_conversion_records_is_read(self):
        """The runtime spells the kinds itself (it imports nothing from
        conversion); they must stay the values conversion records."""
        self.assertEqual(set(ALIAS_KINDS), {kind.value for kind in AliasKind})
        for kind in AliasKind:
            records = {"state_new": ("state", kind.value)}
            self.assertEqual(
                read_aliased_io_records(serialize_aliased_io(records), "e"), records
            )

    def test_what_2_14_0_skipped_or_kept_silently_is_an_error(self):
        cases = {
            "state_new@state": r"engine e has a malformed aliased I/O record 'state_new@state'",
            "state_new@@user": "malformed",
            "state_new@state@user%": "malformed aliased I/O record ''",
            "state_new@state@inplace": r"output 'state_new' .* unknown kind 'inplace'",
            "state_new@state@user%state_new@x@user": r"output 'state_new' aliased twice",
        }
        for text, message in cases.items():
            with self.subTest(text):
                with self.assertRaisesRegex(AliasedIOError, f"(?i){message}"):
                    read_aliased_io_records(text, "e")

    def test_2_14_0_s_reader_is_the_strict_one(self):
        """``deserialize_aliased_io`` (the exporter, the meta kernel and the
        ExecuTorch backend read records with it) skipped a malformed record."""
        records = {"a": ("x", "user"), "b": ("y", "kv_cache_update")}
        self.assertEqual(deserialize_aliased_io(serialize_aliased_io(records)), records)
        with self.assertRaisesRegex(
            AliasedIOError, "^An engine has a malformed aliased I/O record 'a@x'"
        ):
            deserialize_aliased_io("a@x")
        with self.assertRaisesRegex(AliasedIOError, "unknown kind 'inplace'"):
            deserialize_aliased_io("a@x@inplace")


class TestCheckingRecords(TestCase):
    def test_records_naming_what_the_engine_has(self):
        check_aliased_io_records("e", GOOD, INPUTS, OUTPUTS)
        check_aliased_io_records("e", {}, INPUTS, OUTPUTS)
        # the kind is checked once, by the reader of the records
        check_aliased_io_records("e", {"state_new": ("state", "?")}, INPUTS, OUTPUTS)

    def test_each_wrong_record(self):
        cases = [
            ({"nope": ("state", "user")}, "aliased output 'nope' it does not have"),
            ({"state_new": ("nope", "user")}, "input 'nope', which it does not have"),
            (
                {"output0": ("state", "user"), "state_new": ("state", "user")},
                "outputs 'output0' and 'state_new' both written into input 'state'",
            ),
        ]
        for records, message in cases:
            with self.subTest(message):
                with self.assertRaisesRegex(AliasedIOError, f"^Engine e .*{message}"):
                    check_aliased_io_records("e", records, INPUTS, OUTPUTS)


class RecordingEngineStandIn:
    """Stand-in for ``ICudaEngine``: answers mode, dtype and shape per binding name.

    It tests the check's own questions and messages, never what TensorRT builds.
    """

    def __init__(self, bindings):
        import tensorrt as trt

        self.bindings = bindings  # name -> (is_input, trt dtype, shape)
        self.asked = []
        self.modes = {True: trt.TensorIOMode.INPUT, False: trt.TensorIOMode.OUTPUT}

    def get_tensor_mode(self, name):
        self.asked.append(("mode", name))
        return self.modes[self.bindings[name][0]]

    def get_tensor_dtype(self, name):
        self.asked.append(("dtype", name))
        return self.bindings[name][1]

    def get_tensor_shape(self, name):
        self.asked.append(("shape", name))
        return self.bindings[name][2]


class TestAgainstTheEngine(TestCase):
    def _engine(self, **changes):
        import tensorrt as trt

        bindings = {
            "state": (True, trt.float32, (4, -1)),
            "x": (True, trt.int8, (4, 8)),
            "state_new": (False, trt.float32, (4, 8)),
            "output0": (False, trt.float32, (4, 8)),
        }
        bindings.update(changes)
        return RecordingEngineStandIn(bindings)

    def test_a_pair_of_one_dtype_and_shape(self):
        engine = self._engine()
        check_aliased_io_against_engine("e", GOOD, engine)
        self.assertIn(("dtype", "state"), engine.asked)

    def test_the_issue_s_fp32_output_onto_an_int8_input(self):
        with self.assertRaisesRegex(
            AliasedIOError,
            r"^Engine e cannot write output 'state_new' \(float32 4x8 \(128 bytes\)\) "
            r"into input 'x' \(int8 4x8 \(32 bytes\)\)",
        ):
            check_aliased_io_against_engine(
                "e", {"state_new": ("x", "user")}, self._engine()
            )

    def test_shapes_and_modes(self):
        import tensorrt as trt

        # a dimension dynamic in the input is compared at bind time
        check_aliased_io_against_engine(
            "e", GOOD, self._engine(state_new=(False, trt.float32, (4, 9)))
        )
        with self.assertRaisesRegex(AliasedIOError, "float32 4x9"):
            check_aliased_io_against_engine(
                "e",
                GOOD,
                self._engine(
                    state=(True, trt.float32, (4, 8)),
                    state_new=(False, trt.float32, (4, 9)),
                ),
            )
        with self.assertRaisesRegex(
            AliasedIOError, "needs its input's dtype and shape"
        ):
            check_aliased_io_against_engine(
                "e", GOOD, self._engine(state_new=(False, trt.float32, (4, 8, 1)))
            )
        with self.assertRaisesRegex(
            AliasedIOError, "not have them as an output and an input"
        ):
            check_aliased_io_against_engine(
                "e", {"state_new": ("output0", "user")}, self._engine()
            )


class TestBoundAlias(TestCase):
    def test_the_input_is_returned_when_it_fits(self):
        state = torch.zeros(4, 8)
        self.assertIs(
            check_bound_alias("e", "o", (4, 8), torch.float32, "state", state), state
        )

    def test_every_mismatch_is_an_exception_not_an_assert(self):
        cases = [
            (None, "which was not bound in this call"),
            (torch.zeros(4, 8, dtype=torch.int8), r"int8 4x8 \(32 bytes\)"),
            (torch.zeros(4, 9), r"float32 4x9 \(144 bytes\)"),
            (torch.zeros(32), r"float32 32 \(128 bytes\)"),
            (torch.zeros(8, 4).t(), "not contiguous"),
        ]
        for bound, message in cases:
            with self.subTest(message):
                with self.assertRaisesRegex(AliasedIOError, f"^Engine e .*{message}"):
                    check_bound_alias("e", "o", (4, 8), torch.float32, "state", bound)


def _stand_in_engine_class():
    """Stand in for the engine class of this install's runtime; returns (patch, mock)."""
    engine = unittest.mock.MagicMock(requires_native_multidevice=False)
    if ENABLED_FEATURES.torch_tensorrt_runtime:
        cls = unittest.mock.patch.object(
            torch.classes.tensorrt, "Engine", return_value=engine
        )
    else:
        cls = unittest.mock.patch(
            "torch_tensorrt.dynamo.runtime._TRTEngine.TRTEngine", return_value=engine
        )
    return cls


class TestRestoredRecords(TestCase):
    """What ``set_extra_state`` and unpickling accept, before an engine is made."""

    def _module(self, aliased_io):
        return TorchTensorRTModule(
            serialized_engine=b"engine bytes",
            input_binding_names=list(INPUTS),
            output_binding_names=list(OUTPUTS),
            name="engine",
            settings=CompilationSettings(lazy_engine_init=True),
            aliased_io=aliased_io,
        )

    def _saved(self, records_text):
        with unittest.mock.patch.object(
            Device, "_to_serialized_rt_device", return_value="device"
        ), unittest.mock.patch(
            "torch_tensorrt.dynamo.runtime._TorchTensorRTModule.serialize_device_info",
            return_value="device",
        ):
            state = list(self._module(GOOD).get_extra_state())
        state[1] = list(state[1])
        state[1][ALIASED_IO_IDX] = records_text
        return tuple(state)

    def test_good_records_are_restored(self):
        loaded = self._module(None)
        with _stand_in_engine_class() as engine_class:
            loaded.set_extra_state(self._saved(serialize_aliased_io(GOOD)))
        self.assertEqual(loaded.aliased_io, GOOD)
        engine_class.assert_called_once()

    def test_tampered_records_are_refused_before_the_engine_is_made(self):
        cases = {
            "state_new@state@inplace": "unknown kind 'inplace'",
            "state_new@nope@user": "input 'nope', which it does not have",
            "nope@state@user": "aliased output 'nope' it does not have",
            "state_new@state@user%state_new@x@user": "aliased twice",
            "output0@state@user%state_new@state@user": "both written into input 'state'",
            "state_new": "malformed",
        }
        for text, message in cases.items():
            with self.subTest(text):
                loaded = self._module(None)
                with _stand_in_engine_class() as engine_class:
                    with self.assertRaisesRegex(
                        AliasedIOError, f"^Engine engine .*{message}"
                    ):
                        loaded.set_extra_state(self._saved(text))
                engine_class.assert_not_called()

    def test_setting_up_an_engine_checks_its_records(self):
        module = self._module({"state_new": ("nope", "user")})
        with unittest.mock.patch.object(
            torch.cuda, "is_available", return_value=True
        ), _stand_in_engine_class() as engine_class:
            with self.assertRaisesRegex(AliasedIOError, "input 'nope'"):
                module.setup_engine()
        engine_class.assert_not_called()

    def test_unpickled_records_are_checked(self):
        module = self._module(GOOD)
        self.assertEqual(pickle.loads(pickle.dumps(module)).aliased_io, GOOD)
        module.aliased_io = {"state_new": ("state", "inplace")}
        with self.assertRaisesRegex(AliasedIOError, "unknown kind 'inplace'"):
            pickle.loads(pickle.dumps(module))


class KvCache(torch.nn.Module):
    """TensorRT writes ``cache`` in place (kind ``kv_cache_update``)."""

    def forward(self, cache, position, update):
        cache.index_copy_(2, position, update)
        return cache.sum(dim=2)


@unittest.skipIf(not torch.cuda.is_available(), NO_GPU)
class TestARealEngineOnGpu(TestCase):
    def setUp(self):
        self.cache = torch.zeros(1, 4, 16, 8, device="cuda")
        self.position = torch.tensor([3], device="cuda")
        self.update = torch.randn(1, 4, 1, 8, device="cuda")
        args = (self.cache, self.position, self.update)
        ep = torch.export.export(KvCache(), tuple(a.clone() for a in args))
        self.trt = torch_tensorrt.dynamo.compile(
            ep, arg_inputs=[a.clone() for a in args], min_block_size=1
        )
        self.engine = next(
            m
            for m in self.trt.modules()
            if isinstance(m, TorchTensorRTModule) and m.aliased_io
        )
        ((self.out, (self.cache_in, _)),) = self.engine.aliased_io.items()

    def _reloaded(self, text):
        state = list(self.engine.get_extra_state())
        state[1] = list(state[1])
        state[1][ALIASED_IO_IDX] = text
        loaded = TorchTensorRTModule()
        loaded.set_extra_state(tuple(state))
        return loaded

    def _other_input(self, dtype_is_float):
        for name, dtype in zip(
            self.engine.input_binding_names, self.engine.engine.input_dtypes
        ):
            if name != self.cache_in and dtype.is_floating_point == dtype_is_float:
                return name
        self.skipTest("the engine has no such input")

    def test_the_real_records_reload_and_run(self):
        loaded = self._reloaded(serialize_aliased_io(self.engine.aliased_io))
        self.assertEqual(loaded.aliased_io, self.engine.aliased_io)

    def test_tampered_records_are_refused_on_load(self):
        cases = {
            f"{self.out}@{self.cache_in}@inplace": "unknown kind 'inplace'",
            f"{self.out}@nope@user": "input 'nope', which it does not have",
            f"{self.out}@{self.cache_in}@user%{self.out}@{self.cache_in}@user": "aliased twice",
        }
        for text, message in cases.items():
            with self.subTest(text):
                with self.assertRaisesRegex(AliasedIOError, message):
                    self._reloaded(text)

    @unittest.skipIf(ENABLED_FEATURES.torch_tensorrt_runtime, PYTHON_RUNTIME_ONLY)
    def test_a_pair_the_engine_cannot_alias_is_refused_on_load(self):
        position = self._other_input(dtype_is_float=False)
        with self.assertRaisesRegex(
            AliasedIOError,
            rf"cannot write output '{self.out}' .* into input '{position}'",
        ):
            self._reloaded(f"{self.out}@{position}@user")
        update = self._other_input(dtype_is_float=True)
        with self.assertRaisesRegex(AliasedIOError, "1x4x1x8"):
            self._reloaded(f"{self.out}@{update}@user")

    @unittest.skipIf(ENABLED_FEATURES.torch_tensorrt_runtime, PYTHON_RUNTIME_ONLY)
    def test_binding_checks_on_the_standard_and_the_allocator_paths(self):
        update = self._other_input(dtype_is_float=True)
        # a record the load check would refuse reaches the bind, as if that
        # check were absent: the bind refuses it on its own
        with unittest.mock.patch(
            "torch_tensorrt.dynamo.runtime._TRTEngine.check_aliased_io_against_engine"
        ):
            loaded = self._reloaded(f"{self.out}@{update}@user")
        inputs = {
            self.cache_in: self.cache,
            update: self.update,
        }
        args = [inputs.get(name, self.position) for name in loaded.input_binding_names]
        for allocator in (False, True):
            with self.subTest(output_allocator=allocator):
                loaded.set_use_output_allocator(allocator)
                with self.assertRaisesRegex(
                    AliasedIOError,
                    rf"cannot write output '{self.out}' \(float32 1x4x16x8 .*\) into "
                    rf"input '{update}' \(float32 1x4x1x8",
                ):
                    loaded(*args)


if __name__ == "__main__":
    run_tests()
