"""What TensorRT-RTX's output allocator sees for an engine with a KV-cache output.

Run on the GPU (bash .gpu/run python3 tools/gpu/output_allocator_probe.py): compiles
``cache[:, :, 3:4, :] = update; return cache.sum()`` and runs the Python runtime's
output-allocator path with a contiguous, a non-contiguous and a CPU cache, each on
a fresh module and after a run of the standard path, logging every
``reallocate_output_async`` / ``notify_shape`` call and the engine's bindings.
Diagnoses the "Could not infer dtype of NoneType" of the staged subtests.
"""

import traceback

import torch
import torch_tensorrt
from torch_tensorrt.dynamo.runtime import _TRTEngine
from torch_tensorrt.dynamo.runtime._TorchTensorRTModule import TorchTensorRTModule

calls = []
_realloc = _TRTEngine.DynamicOutputAllocator.reallocate_output_async
_notify = _TRTEngine.DynamicOutputAllocator.notify_shape


def reallocate_output_async(self, name, memory, size, alignment, stream):
    calls.append(("reallocate", name, size))
    return _realloc(self, name, memory, size, alignment, stream)


def notify_shape(self, name, shape):
    calls.append(("notify_shape", name, tuple(shape)))
    return _notify(self, name, shape)


_TRTEngine.DynamicOutputAllocator.reallocate_output_async = reallocate_output_async
_TRTEngine.DynamicOutputAllocator.notify_shape = notify_shape


class KvCache(torch.nn.Module):
    def forward(self, cache, update):
        cache[:, :, 3:4, :] = update
        return cache.sum()


def compiled():
    args = (torch.zeros(1, 4, 16, 8).cuda(), torch.randn(1, 4, 1, 8).cuda())
    ep = torch.export.export(KvCache(), tuple(a.clone() for a in args))
    return torch_tensorrt.dynamo.compile(ep, arg_inputs=list(args), min_block_size=1)


CACHES = {
    "contiguous": lambda: torch.zeros(1, 4, 16, 8).cuda(),
    "non_contiguous": lambda: torch.zeros(1, 4, 8, 16).cuda().transpose(2, 3),
    "on_the_cpu": lambda: torch.zeros(1, 4, 16, 8),
}


def main():
    trt = compiled()
    engine = next(m for m in trt.modules() if isinstance(m, TorchTensorRTModule))
    e = engine.engine
    print("inputs", e.in_binding_names, "outputs", e.out_binding_names)
    print("aliased_io", e.aliased_io, "in_place_outputs", e.in_place_outputs)
    for first_standard in (False, True):
        for name, make in CACHES.items():
            trt = compiled()
            if first_standard:
                trt(make(), torch.randn(1, 4, 1, 8).cuda())
            cache = make()
            expected = cache.clone()
            update = torch.randn(1, 4, 1, 8).cuda()
            del calls[:]
            try:
                with torch_tensorrt.runtime.enable_output_allocator(trt):
                    out = trt(cache, update)
                expected[:, :, 3:4, :] = update.to(expected.device)
                print(
                    f"{name} standard-first={first_standard}: ok,",
                    "out",
                    float(out),
                    "expected",
                    float(expected.sum()),
                    "cache updated",
                    bool(torch.equal(cache, expected)),
                )
            except Exception as error:
                print(f"{name} standard-first={first_standard}: {error!r}")
                traceback.print_exc(limit=-2)
            print("   allocator calls:", calls)


if __name__ == "__main__":
    main()
