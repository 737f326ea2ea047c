# type: ignore
"""What the Python runtime does per call for an engine that writes inputs in place.

Each aliased output is checked against its bound input when the input shapes
change, not on every call.
"""

import types
import unittest.mock

import torch
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo.runtime import _TRTEngine
from torch_tensorrt.dynamo.runtime._aliased_io_checks import AliasedIOError


def _engine(bound):
    """The attributes ``TRTEngine.create_output_tensors`` reads, for two states."""
    return types.SimpleNamespace(
        name="e",
        out_binding_names=["k_new", "v_new"],
        aliased_io={
            "k_new": ("k", "kv_cache_update"),
            "v_new": ("v", "kv_cache_update"),
        },
        output_shapes=[(1, 2, 4, 8), (1, 2, 4, 8)],
        output_dtypes=[torch.float32, torch.float32],
        _bound_inputs_by_name=bound,
    )


class TestAliasedOutputsChecked(TestCase):
    def _create(self, engine, check_aliases):
        return _TRTEngine.TRTEngine.create_output_tensors(
            engine, check_aliases=check_aliases
        )

    def test_checked_when_the_shapes_change_only(self):
        k, v = torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 4, 8)
        engine = _engine({"k": k, "v": v})
        with unittest.mock.patch.object(
            _TRTEngine, "check_bound_alias", wraps=_TRTEngine.check_bound_alias
        ) as checked:
            outputs = self._create(engine, check_aliases=False)
            self.assertEqual(checked.call_count, 0)
            self.assertEqual([id(t) for t in outputs], [id(k), id(v)])
            self._create(engine, check_aliases=True)
            self.assertEqual(checked.call_count, 2)

    def test_a_wrong_binding_is_refused_when_checked(self):
        engine = _engine({"k": torch.zeros(1, 2, 4, 8), "v": torch.zeros(1, 2, 5, 8)})
        with self.assertRaisesRegex(AliasedIOError, "'v_new'.*'v'"):
            self._create(engine, check_aliases=True)

    def test_an_input_not_bound_is_refused_on_every_call(self):
        engine = _engine({"k": torch.zeros(1, 2, 4, 8)})
        with self.assertRaisesRegex(AliasedIOError, "'v'.*not bound"):
            self._create(engine, check_aliases=False)


if __name__ == "__main__":
    run_tests()
