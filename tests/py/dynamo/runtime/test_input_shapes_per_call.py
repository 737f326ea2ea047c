# type: ignore
"""The Python runtime compares a call's input shapes as shapes.

``TRTEngine.validate_input_shapes`` runs on every call; it built a string of
every input's shape to compare with the last call's (about 2 us per input on an
H200 host, the largest per-input cost of a call in the profile of
``tools/bench/state_check_overhead.py`` at 256 states). It compares the shapes
themselves now, with the same answers.
"""

import types

import torch
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo.runtime._TRTEngine import TRTEngine


def _engine():
    return types.SimpleNamespace(shape_key=None)


class TestInputShapes(TestCase):
    def _changed(self, engine, *shapes):
        return TRTEngine.validate_input_shapes(engine, [torch.empty(s) for s in shapes])

    def test_changed_only_when_a_shape_changes(self):
        engine = _engine()
        self.assertTrue(self._changed(engine, (2, 3), (4,)))
        self.assertFalse(self._changed(engine, (2, 3), (4,)))
        self.assertTrue(self._changed(engine, (3, 2), (4,)))
        self.assertTrue(self._changed(engine, (3, 2), (4, 1)))
        self.assertTrue(self._changed(engine, (3, 2)))
        self.assertFalse(self._changed(engine, (3, 2)))

    def test_no_string_per_input(self):
        engine = _engine()
        self._changed(engine, (2, 3))
        self.assertIsInstance(engine.shape_key, tuple)
        self.assertEqual(engine.shape_key, (torch.Size([2, 3]),))

    def test_a_reset_key_changes(self):
        engine = _engine()
        self._changed(engine, (2, 3))
        engine.shape_key = None  # what invalidating the context does
        self.assertTrue(self._changed(engine, (2, 3)))


if __name__ == "__main__":
    run_tests()
