# type: ignore
"""A CudaGraphsTorchTensorRTModule whose construction failed is deleted quietly.

``__del__`` reset the captured graph through ``self.cudagraph``, which
``__init__`` had not set yet when it raised early (here: the module wrapped is
not one ``compile()`` returned), so every such failure also printed
"Exception ignored in ... AttributeError: 'CudaGraphsTorchTensorRTModule' object
has no attribute 'cudagraph'" when the object was collected.
"""

import gc
import sys

import torch
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt.dynamo.runtime._CudaGraphsTorchTensorRTModule import (
    CudaGraphsTorchTensorRTModule,
)


class TestDeletedQuietly(TestCase):
    def test_a_failed_construction_prints_nothing_when_collected(self):
        unraisable = []
        hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
        try:
            with self.assertRaises(AttributeError):
                CudaGraphsTorchTensorRTModule(torch.nn.Linear(2, 2))
            gc.collect()
        finally:
            sys.unraisablehook = hook
        self.assertEqual([repr(u.exc_value) for u in unraisable], [])


if __name__ == "__main__":
    run_tests()
