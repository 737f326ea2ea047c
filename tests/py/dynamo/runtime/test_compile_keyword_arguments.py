"""Unknown keyword arguments of the Dynamo compile entry points are errors.

``torch_tensorrt.dynamo.compile`` and
``convert_exported_program_to_serialized_trt_engine`` take ``**kwargs`` for
deprecated option names; any other unknown keyword used to be ignored, so a
misspelled option (or ``alias_map_path`` on a build without it) compiled
silently without it. Deprecated names keep working with their warnings.

``compile(dryrun=True)`` needs no GPU; the serialized-engine path builds an
engine, which on a host without a GPU needs TensorRT-RTX.
"""

import unittest
import warnings

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt import ENABLED_FEATURES

CAN_BUILD = torch.cuda.is_available() or ENABLED_FEATURES.tensorrt_rtx
NEEDS_BUILDER = (
    "Building an engine needs a CUDA device or TensorRT-RTX, which builds on the CPU."
)


class AddOne(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


def _export():
    x = torch.randn(2, 3)
    return torch.export.export(AddOne(), (x,)), [x]


def _dryrun(**kwargs):
    ep, inputs = _export()
    return torch_tensorrt.dynamo.compile(
        ep, arg_inputs=inputs, dryrun=True, min_block_size=1, **kwargs
    )


def _serialize(**kwargs):
    ep, inputs = _export()
    return torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
        ep, arg_inputs=inputs, **kwargs
    )


def _deprecation_messages(caught):
    return [str(w.message) for w in caught if w.category is DeprecationWarning]


class TestUnknownKeywordArguments(TestCase):
    def test_compile_rejects_an_option_it_does_not_have(self):
        # alias_map_path is an option of the serialized-engine path only
        with self.assertRaisesRegex(
            TypeError,
            r"torch_tensorrt\.dynamo\.compile\(\) got unexpected keyword argument "
            r"'alias_map_path'",
        ):
            _dryrun(alias_map_path="model.aliases.json")

    def test_compile_suggests_close_matches(self):
        with self.assertRaisesRegex(
            TypeError, r"'min_blok_size' \(did you mean 'min_block_size'"
        ):
            _dryrun(min_blok_size=3)

    def test_compile_lists_every_unknown_keyword(self):
        with self.assertRaises(TypeError) as caught:
            _dryrun(require_ful_compilation=True, frobnicate=1)
        message = str(caught.exception)
        self.assertIn("unexpected keyword arguments", message)
        self.assertIn("'require_ful_compilation' (did you mean", message)
        self.assertIn("'require_full_compilation'", message)
        self.assertIn("'frobnicate'", message)

    def test_serialized_engine_rejects_a_misspelled_option_before_building(self):
        with self.assertRaisesRegex(
            TypeError,
            r"convert_exported_program_to_serialized_trt_engine\(\) got unexpected "
            r"keyword argument 'lift_mutable_bufers' \(did you mean "
            r"'lift_mutable_buffers'",
        ):
            _serialize(lift_mutable_bufers=True)

    def test_serialized_engine_rejects_alias_map_pth(self):
        with self.assertRaisesRegex(TypeError, r"did you mean 'alias_map_path'"):
            _serialize(alias_map_pth="model.aliases.json")

    def test_through_torch_tensorrt_compile(self):
        ep, inputs = _export()
        with self.assertRaisesRegex(TypeError, r"'min_blok_size'"):
            torch_tensorrt.compile(
                ep, ir="dynamo", inputs=inputs, dryrun=True, min_blok_size=1
            )


class TestAcceptedKeywordArguments(TestCase):
    def test_deprecated_truncate_long_and_double_still_works(self):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # (True would truncate float64 weights, which dryrun does on the device)
            _dryrun(truncate_long_and_double=False)
        self.assertTrue(
            any("truncate_long_and_double" in m for m in _deprecation_messages(caught))
        )

    def test_deprecated_use_python_runtime_and_debug_still_work(self):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _dryrun(use_python_runtime=True, debug=True)
        messages = _deprecation_messages(caught)
        self.assertTrue(any("use_python_runtime" in m for m in messages))
        self.assertTrue(any("`debug` is deprecated" in m for m in messages))

    def test_deprecated_make_refittable_and_refit_reach_their_checks(self):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _dryrun(make_refittable=True, immutable_weights=False)
        self.assertTrue(
            any("make_refittable" in m for m in _deprecation_messages(caught))
        )
        # the existing conflict check, not an unknown-keyword error
        with self.assertRaisesRegex(ValueError, r"Flag `refit` is deprecated"):
            _dryrun(refit=True)

    def test_cross_compile_flag_keeps_its_error(self):
        with self.assertRaisesRegex(ValueError, r"cross_compile_for_windows"):
            _dryrun(enable_cross_compile_for_windows=True)

    def test_compile_rejects_the_serialized_engine_only_lift_option(self):
        # compile() always lifts mutated buffers; the option belongs to
        # convert_exported_program_to_serialized_trt_engine
        with self.assertRaisesRegex(
            TypeError,
            r"torch_tensorrt.dynamo.compile\(\) got unexpected keyword argument "
            r"'lift_mutable_buffers'",
        ):
            _dryrun(lift_mutable_buffers=True)

    def test_strict_from_torch_tensorrt_compile_is_accepted(self):
        # torch_tensorrt.compile(ir="dynamo") passes its kwargs to trace and compile
        ep, inputs = _export()
        torch_tensorrt.compile(ep, ir="dynamo", inputs=inputs, dryrun=True, strict=True)

    @unittest.skipIf(not CAN_BUILD, NEEDS_BUILDER)
    def test_serialized_engine_with_deprecated_option(self):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            engine = _serialize(truncate_long_and_double=True)
        self.assertIsInstance(engine, bytes)
        self.assertTrue(
            any("truncate_long_and_double" in m for m in _deprecation_messages(caught))
        )

    @unittest.skipIf(not CAN_BUILD, NEEDS_BUILDER)
    def test_settings_field_the_function_does_not_take_is_reported(self):
        with self.assertLogs(
            "torch_tensorrt.dynamo._keyword_arguments", level="WARNING"
        ) as logs:
            engine = _serialize(fallback_data_dependent_ops=True)
        self.assertIsInstance(engine, bytes)
        self.assertIn("['fallback_data_dependent_ops']", "\n".join(logs.output))
        self.assertIn("have no effect", "\n".join(logs.output))


if __name__ == "__main__":
    run_tests()
