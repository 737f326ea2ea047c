"""Keyword arguments that the Dynamo compile entry points ignore are reported.

``torch_tensorrt.dynamo.compile`` and
``convert_exported_program_to_serialized_trt_engine`` take ``**kwargs`` for
deprecated option names and ignore every other keyword. Options of older
releases (``enabled_precisions``, ``ir``) must keep working, as upstream's own
tests pass them; a misspelled option (or ``alias_map_path`` where it does not
exist) compiled silently without it. Each now gets a ``UserWarning`` naming the
function, the keyword and the closest accepted names. Deprecated names keep
working with their warnings.

``compile(dryrun=True)`` needs no GPU; the serialized-engine path builds an
engine, which on a host without a GPU needs TensorRT-RTX.
"""

import os
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


def _user_warnings(caught):
    return [str(w.message) for w in caught if w.category is UserWarning]


class TestUnknownKeywordArguments(TestCase):
    def test_compile_reports_an_option_it_does_not_have(self):
        # alias_map_path is an option of the serialized-engine path only
        with self.assertWarnsRegex(
            UserWarning,
            r"torch_tensorrt\.dynamo\.compile\(\) ignores the unknown keyword "
            r"argument 'alias_map_path': compiling without it",
        ):
            _dryrun(alias_map_path="model.aliases.json")

    def test_compile_suggests_close_matches_and_still_compiles(self):
        with self.assertWarnsRegex(
            UserWarning, r"'min_blok_size' \(did you mean 'min_block_size'"
        ):
            compiled = _dryrun(min_blok_size=3)
        self.assertIsInstance(compiled, torch.fx.GraphModule)

    def test_compile_lists_every_unknown_keyword_in_one_warning(self):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _dryrun(require_ful_compilation=True, frobnicate=1)
        messages = [m for m in _user_warnings(caught) if "unknown keyword" in m]
        self.assertEqual(len(messages), 1, messages)
        self.assertIn("unknown keyword arguments", messages[0])
        self.assertIn("'require_ful_compilation' (did you mean", messages[0])
        self.assertIn("'require_full_compilation'", messages[0])
        self.assertIn("'frobnicate': compiling without them", messages[0])

    def test_options_of_older_releases_keep_compiling(self):
        # upstream's own tests still pass both; unpatched 2.14.0 ignores them
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compiled = _dryrun(enabled_precisions={torch.float32}, ir="dynamo")
        self.assertIsInstance(compiled, torch.fx.GraphModule)
        messages = [m for m in _user_warnings(caught) if "unknown keyword" in m]
        self.assertEqual(len(messages), 1, messages)
        self.assertIn("'enabled_precisions', 'ir'", messages[0])
        # no far-fetched suggestion for a removed option
        self.assertNotIn("did you mean", messages[0])

    def test_the_warning_points_at_the_caller(self):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _dryrun(frobnicate=1)
        (warning,) = [w for w in caught if "frobnicate" in str(w.message)]
        # _dryrun, in this file, called compile()
        self.assertEqual(os.path.basename(warning.filename), os.path.basename(__file__))

    @unittest.skipIf(not CAN_BUILD, NEEDS_BUILDER)
    def test_serialized_engine_reports_a_misspelled_option(self):
        with self.assertWarnsRegex(
            UserWarning,
            r"convert_exported_program_to_serialized_trt_engine\(\) ignores the "
            r"unknown keyword argument 'lift_mutable_bufers' \(did you mean "
            r"'lift_mutable_buffers'",
        ):
            engine = _serialize(lift_mutable_bufers=True)
        self.assertIsInstance(engine, bytes)

    @unittest.skipIf(not CAN_BUILD, NEEDS_BUILDER)
    def test_serialized_engine_reports_alias_map_pth(self):
        with self.assertWarnsRegex(UserWarning, r"did you mean 'alias_map_path'"):
            _serialize(alias_map_pth="model.aliases.json")

    def test_through_torch_tensorrt_compile(self):
        ep, inputs = _export()
        with self.assertWarnsRegex(UserWarning, r"'min_blok_size'"):
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

    def test_compile_reports_the_serialized_engine_only_lift_option(self):
        # compile() always lifts mutated buffers; the option belongs to
        # convert_exported_program_to_serialized_trt_engine
        with self.assertWarnsRegex(
            UserWarning,
            r"torch_tensorrt.dynamo.compile\(\) ignores the unknown keyword "
            r"argument 'lift_mutable_buffers'",
        ):
            _dryrun(lift_mutable_buffers=True)

    def test_strict_from_torch_tensorrt_compile_is_accepted(self):
        # torch_tensorrt.compile(ir="dynamo") passes its kwargs to trace and compile
        ep, inputs = _export()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch_tensorrt.compile(
                ep, ir="dynamo", inputs=inputs, dryrun=True, strict=True
            )
        self.assertEqual(
            [m for m in _user_warnings(caught) if "unknown keyword" in m], []
        )

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
