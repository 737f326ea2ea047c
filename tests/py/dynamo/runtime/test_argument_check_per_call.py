# type: ignore
"""The argument check of ``compile()``'s module compares a call's tensors once.

The next call with the same tensors, each of the same version and address (what
a decoding loop passes), is not compared again; a tensor changed in place
(``set_``, ``.data =``) is, and so is every call with inference tensors, which
have no version.
"""

import copy
import pickle
import unittest.mock

import torch
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo.runtime import _aliased_arguments
from torch_tensorrt.dynamo.runtime._aliased_arguments import InPlaceArgumentsCheck


def _check(n):
    names = ["pos", "u"] + [f"state_{i}" for i in range(n)]
    return InPlaceArgumentsCheck(names, list(range(2, 2 + n)), [])


class TestOneComparisonForTheSameTensors(TestCase):
    def _counted(self):
        return unittest.mock.patch.object(
            _aliased_arguments,
            "_overlapping_pair",
            wraps=_aliased_arguments._overlapping_pair,
        )

    def test_the_same_tensors_are_compared_once(self):
        check, module = _check(8), torch.nn.Module()
        values = [torch.tensor([1]), torch.zeros(3)] + [
            torch.zeros(4, 4) for _ in range(8)
        ]
        with self._counted() as compared:
            for _ in range(5):
                check.check(module, values)
        self.assertEqual(compared.call_count, 1)
        # a new tensor in one place: compared again
        with self._counted() as compared:
            check.check(module, values[:-1] + [torch.zeros(4, 4)])
        self.assertEqual(compared.call_count, 1)

    def test_a_tensor_changed_in_place_is_compared_again(self):
        check, module = _check(2), torch.nn.Module()
        storage = torch.zeros(8)
        a, b = storage[:4], storage[4:]
        values = [torch.tensor([1]), torch.zeros(3), a, b]
        check.check(module, values)  # disjoint halves
        b.set_(storage.untyped_storage(), 2, (4,))  # now overlaps a
        with self.assertRaisesRegex(RuntimeError, "'state_0'.*'state_1'"):
            check.check(module, values)

    def test_a_tensor_given_other_memory_is_compared_again(self):
        check, module = _check(2), torch.nn.Module()
        a, b = torch.zeros(4), torch.zeros(4)
        values = [torch.tensor([1]), torch.zeros(3), a, b]
        check.check(module, values)
        b.data = a  # no new version: a new address
        with self.assertRaisesRegex(RuntimeError, "'state_0'.*'state_1'"):
            check.check(module, values)

    def test_a_refused_call_is_refused_again(self):
        check, module = _check(2), torch.nn.Module()
        x = torch.zeros(4)
        for _ in range(2):
            with self.assertRaisesRegex(RuntimeError, "shares memory"):
                check.check(module, [torch.tensor([1]), torch.zeros(3), x, x])

    def test_inference_tensors_are_compared_on_every_call(self):
        check, module = _check(2), torch.nn.Module()
        with torch.inference_mode():
            values = [torch.tensor([1]), torch.zeros(3), torch.zeros(4), torch.zeros(4)]
        with self._counted() as compared:
            for _ in range(3):
                check.check(module, values)
        self.assertEqual(compared.call_count, 3)

    def test_copies_and_pickles_do_not_carry_the_last_call(self):
        check, module = _check(1), torch.nn.Module()
        check.check(module, [torch.tensor([1]), torch.zeros(3), torch.zeros(4)])
        self.assertTrue(check._passed_tensors)
        for other in (copy.deepcopy(check), pickle.loads(pickle.dumps(check))):
            self.assertIsNone(other._passed)
            self.assertEqual(other._passed_tensors, [])


if __name__ == "__main__":
    run_tests()
