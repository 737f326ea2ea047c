"""Facts of the GPU machine's TensorRT-RTX + Python-runtime setup, for the README.

Run on the GPU with the unpatched and the patched wheel; each line is a fact or the
exception, on a model with no mutation at all, so what it shows is not caused by
the patch set:
- whether whole-graph CUDA graphs (``enable_cudagraphs`` on a module with a
  PyTorch segment) accept the TensorRT-RTX engine: ``is_stream_capturable`` of its
  execution context on a side stream, before and after a first run;
- whether ``torch_tensorrt.save`` (ExportedProgram) works with the Python runtime.
"""

import os
import tempfile

import torch
import torch_tensorrt
from torch_tensorrt.dynamo.runtime._TorchTensorRTModule import TorchTensorRTModule
from upstream_bug_repros import report  # run as tools/gpu/rtx_limits.py


class Plain(torch.nn.Module):
    def forward(self, x):
        return torch.sin(x + 1) * 2


def main():
    x = torch.randn(4, 16).cuda()
    ep = torch.export.export(Plain().cuda(), (x,))
    mixed = torch_tensorrt.dynamo.compile(
        ep,
        arg_inputs=[x],
        min_block_size=1,
        torch_executed_ops={torch.ops.aten.sin.default},
    )
    engine = next(m for m in mixed.modules() if isinstance(m, TorchTensorRTModule))

    def capturable():
        side = torch.cuda.Stream()
        before = engine.engine.context.is_stream_capturable(side.cuda_stream)
        mixed(x)
        torch.cuda.synchronize()
        after = engine.engine.context.is_stream_capturable(side.cuda_stream)
        return f"is_stream_capturable before a run {before}, after {after}"

    def whole_graph():
        with torch_tensorrt.runtime.enable_cudagraphs(mixed) as graphed:
            ok = all(torch.allclose(graphed(x), Plain()(x)) for _ in range(3))
        return f"ok, equal to eager: {ok}"

    def save_and_load():
        full = torch_tensorrt.dynamo.compile(ep, arg_inputs=[x], min_block_size=1)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "plain.ep")
            torch_tensorrt.save(full, path, arg_inputs=[x])
            loaded = torch_tensorrt.load(path).module()
        return f"ok, equal to eager: {torch.allclose(loaded(x), Plain()(x))}"

    report("TensorRT-RTX engine context, stream capture", capturable)
    report("enable_cudagraphs, whole-graph mode, no mutation", whole_graph)
    report("torch_tensorrt.save/load (ExportedProgram), Python runtime", save_and_load)


if __name__ == "__main__":
    main()
