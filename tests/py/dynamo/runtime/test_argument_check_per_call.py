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

    def test_numbers_that_change_keep_the_call_the_same(self):
        # a decoding loop's position given as a Python number: a new object
        # on each call, not memory, so not a reason to compare again
        check, module = _check(2), torch.nn.Module()
        values = [None, torch.zeros(3), torch.zeros(4), torch.zeros(4)]
        with self._counted() as compared:
            for step in range(1000, 1004):
                check.check(module, [step] + values[1:])
        self.assertEqual(compared.call_count, 1)

    def test_a_number_that_becomes_a_tensor_is_compared(self):
        check, module = _check(2), torch.nn.Module()
        u, a, b = torch.zeros(3), torch.zeros(4), torch.zeros(4)
        check.check(module, [3, u, a, b])
        with self.assertRaisesRegex(RuntimeError, "'state_0'.*'pos'"):
            check.check(module, [a[1:], u, a, b])

    def _with_buffers(self, n):
        root = torch.nn.Module()
        for i in range(n):
            layer = torch.nn.Module()
            layer.register_buffer("k", torch.zeros(4))
            layer.register_buffer("v", torch.zeros(4))
            root.add_module(f"layer_{i}", layer)
        names = [f"layer_{i}.{kv}" for i in range(n) for kv in "kv"]
        return root, InPlaceArgumentsCheck(["pos", "u"], [], names)

    def test_the_same_buffers_are_compared_once(self):
        root, check = self._with_buffers(4)
        values = [torch.tensor([1]), torch.zeros(3)]
        with self._counted() as compared:
            for _ in range(4):
                check.check(root, values)
        self.assertEqual(compared.call_count, 1)

    def test_a_buffer_replaced_between_calls_is_compared_again(self):
        root, check = self._with_buffers(2)
        u = torch.zeros(3)
        check.check(root, [torch.tensor([1]), u])
        root.layer_1.v = u  # the buffer now is the argument u
        with self.assertRaisesRegex(RuntimeError, "'layer_1.v'.*'u'"):
            check.check(root, [torch.tensor([1]), u])

    def test_a_submodule_replaced_between_calls_is_compared_again(self):
        root, check = self._with_buffers(2)
        u = torch.zeros(3)
        check.check(root, [torch.tensor([1]), u])
        layer = torch.nn.Module()
        layer.register_buffer("k", u[1:])
        layer.register_buffer("v", torch.zeros(4))
        root.layer_0 = layer
        with self.assertRaisesRegex(RuntimeError, "'layer_0.k'.*'u'"):
            check.check(root, [torch.tensor([1]), u])

    def test_two_buffers_overlapping_in_a_call_of_numbers_are_named(self):
        root, check = self._with_buffers(1)
        root.layer_0.v = root.layer_0.k[1:]
        with self.assertRaisesRegex(
            RuntimeError, "buffer 'layer_0.k' in place and buffer 'layer_0.v' shares"
        ):
            check.check(root, [1, 2.0])

    def test_copies_and_pickles_do_not_carry_the_last_call(self):
        check, module = _check(1), torch.nn.Module()
        check.check(module, [torch.tensor([1]), torch.zeros(3), torch.zeros(4)])
        self.assertTrue(check._passed_tensors)
        for other in (copy.deepcopy(check), pickle.loads(pickle.dumps(check))):
            self.assertIsNone(other._passed)
            self.assertEqual(other._passed_tensors, [])


if __name__ == "__main__":
    run_tests()
