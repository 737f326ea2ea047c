"""
.. _model_with_state:

A model with state: a standalone engine and a compiled module
=============================================================

A cache written at a position and a norm that a custom op decays in place, compiled
into a standalone engine with its alias map (TensorRT-RTX builds it without a GPU)
and, on a GPU, into a module whose buffers advance every call.
"""

import json

import torch
import torch_tensorrt
from torch_tensorrt.dynamo._SourceIR import SourceIR
from torch_tensorrt.dynamo.conversion import dynamo_tensorrt_converter, impl


# An in-place op, the torch way: it writes `state` and returns None
@torch.library.custom_op("my::decay_", mutates_args=("state",))
def decay_(state: torch.Tensor, factor: float) -> None:
    state.mul_(factor)


@decay_.register_fake
def _(state, factor):
    return None


# Its converter returns the op's returns (none here), then the new value of
# each argument it mutates
@dynamo_tensorrt_converter(torch.ops.my.decay_.default, supports_dynamic_shapes=True)
def decay_converter(ctx, target, args, kwargs, name):
    return impl.elementwise.mul(ctx, target, SourceIR.ATEN, name, args[0], args[1])


class Model(torch.nn.Module):
    """A model with state: a cache written at a position, a norm the op decays."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 8, 256, 64))
        self.register_buffer("norm", torch.ones(64))

    def forward(self, pos, k):
        self.cache.index_copy_(2, pos, k)  # TensorRT writes it in place
        torch.ops.my.decay_(self.norm, 0.5)  # the engine returns the new norm
        return self.cache.sum(dim=2) * self.norm


pos, k = torch.tensor([3]), torch.randn(1, 8, 1, 64)
ep = torch.export.export(Model().eval(), (pos, k))

# A standalone engine for a C++ runtime (builds without a GPU with the RTX
# flavour), and its alias map: which output updates which input, and how
engine = torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
    ep,
    arg_inputs=[pos, k],
    lift_mutable_buffers=True,
    alias_map_path="model.aliases.json",
    min_block_size=1,
)
with open("model.engine", "wb") as f:
    f.write(engine)
print("wrote model.engine and model.aliases.json")
with open("model.aliases.json") as f:
    for a in json.load(f)["aliases"]:  # buf_cache: in_place, buf_norm: copy (why)
        print(f"{a['input']}: {a['update']}", a.get("reason", ""))

# Or a module run from Python (needs a GPU): its buffers advance every call
if torch.cuda.is_available():
    args = (pos.cuda(), k.cuda())
    ep = torch.export.export(Model().eval().cuda(), args)
    trt_model = torch_tensorrt.dynamo.compile(
        ep, arg_inputs=list(args), min_block_size=1
    )
    for call in range(3):  # trt_model.cache and trt_model.norm hold the new state
        out = trt_model(*args)
        print(f"call {call}: norm[0] = {trt_model.norm[0].item()}")  # 0.5, 0.25, ...
else:
    print("skipped the compiled module: it runs on a GPU, and this machine has none")
