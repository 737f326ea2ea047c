# type: ignore
"""An ``Input`` given no dtype makes float32 example tensors without a warning.

``torch_tensorrt.Input(min_shape=..., opt_shape=..., max_shape=...)`` without a
dtype (documented default: float32) logged "Given dtype that does not have
direct mapping to torch (dtype.unknown), defaulting to torch.float" when it was
made, for every such input of every compile.
"""

import logging

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests


class TestInputWithoutADtype(TestCase):
    # the warning went to the root logger (torch's TestCase watches "torch")
    def test_a_dynamic_input_is_made_without_a_warning(self):
        with self.assertNoLogs(logging.getLogger(), "WARNING"):
            spec = torch_tensorrt.Input(
                min_shape=(1, 4), opt_shape=(2, 4), max_shape=(8, 4)
            )
            example = spec.example_tensor("max_shape")
        self.assertEqual(spec.torch_tensor.dtype, torch.float32)
        self.assertEqual(spec.torch_tensor.shape, (2, 4))
        self.assertEqual(example.dtype, torch.float32)
        self.assertEqual(example.shape, (8, 4))

    def test_a_static_input_is_made_without_a_warning(self):
        with self.assertNoLogs(logging.getLogger(), "WARNING"):
            spec = torch_tensorrt.Input(shape=(2, 3))
        self.assertEqual(spec.example_tensor().dtype, torch.float32)

    def test_a_given_dtype_is_kept(self):
        spec = torch_tensorrt.Input(
            min_shape=(1, 4), opt_shape=(2, 4), max_shape=(8, 4), dtype=torch.int32
        )
        self.assertEqual(spec.torch_tensor.dtype, torch.int32)
        self.assertEqual(spec.example_tensor("min_shape").dtype, torch.int32)


if __name__ == "__main__":
    run_tests()
