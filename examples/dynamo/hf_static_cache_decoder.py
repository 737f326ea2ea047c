"""
.. _hf_static_cache_decoder:

A HuggingFace decoder with a static KV cache, its caches written in place
==========================================================================

A stock HuggingFace causal LM, wrapped as HuggingFace exports it
(``TorchExportableModuleWithStaticCache``: ``forward(input_ids,
cache_position)`` with the caches as buffers), exported with ``torch.export``,
then:

- on a GPU: compiled with ``torch_tensorrt.dynamo.compile`` in one call, and
  decoded greedily; each call writes the step's keys and values into the caches
  in place (TensorRT's ``IKVCacheUpdateLayer``), nothing copies a cache;
- anywhere (TensorRT-RTX builds on the CPU): built into a standalone engine whose
  alias map says which input each cache output is written into, for a C++
  caller.

The model is small and random (no download); swap in
``AutoModelForCausalLM.from_pretrained(...)`` for a real one.
"""

import json
import os
import sys
import tempfile

import torch
import torch_tensorrt
import transformers
from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

CACHE_LEN = 64
STEPS = 16

# %%
# 1. A decoder with a static cache, wrapped for export
torch.manual_seed(0)
config = transformers.LlamaConfig(
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    hidden_size=32,
    intermediate_size=64,
    vocab_size=64,
    max_position_embeddings=CACHE_LEN,
    bos_token_id=0,
    eos_token_id=1,
    initializer_range=0.3,
)
model = transformers.LlamaForCausalLM(config).eval()
device = "cuda" if torch.cuda.is_available() else "cpu"
model.generation_config = transformers.GenerationConfig(
    use_cache=True,
    cache_implementation="static",
    cache_config={"batch_size": 1, "max_cache_len": CACHE_LEN, "device": device},
)
model = model.to(device)


def wrapped():
    return TorchExportableModuleWithStaticCache(
        model, batch_size=1, max_cache_len=CACHE_LEN, device=device
    )


def step(token, position):
    return {
        "input_ids": torch.tensor([[token]], device=device),
        "cache_position": torch.tensor([position], device=device),
    }


# %%
# 2. Export, as HuggingFace documents (strict=True works too)
ep = torch.export.export(wrapped(), (), step(3, 0), strict=False)

# %%
# 3. A standalone engine and its alias map (no GPU needed with TensorRT-RTX)
from torch_tensorrt import ENABLED_FEATURES  # noqa: E402

if torch.cuda.is_available() or ENABLED_FEATURES.tensorrt_rtx:
    with tempfile.TemporaryDirectory() as out_dir:
        map_path = os.path.join(out_dir, "decoder.aliases.json")
        engine = (
            torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
                ep,
                arg_inputs=(),
                kwarg_inputs=step(3, 0),
                min_block_size=1,
                lift_mutable_buffers=True,
                alias_map_path=map_path,
            )
        )
        with open(map_path) as f:
            aliases = json.load(f)["aliases"]
    print(f"Built a standalone engine of {len(engine)} bytes; alias map:")
    print(
        json.dumps([{k: a[k] for k in ("input", "update")} for a in aliases], indent=2)
    )
else:
    print(
        "Step 3 skipped: no TensorRT builder here (standard TensorRT builds on a "
        "GPU; TensorRT-RTX also on a CPU)."
    )

# %%
# 4. compile() in one call, then greedy decoding (runs engines: needs a GPU)
if not torch.cuda.is_available():
    print("Step 4 skipped: compile()'s module runs its engine on a GPU.")
    sys.exit(0)

trt_model = torch_tensorrt.dynamo.compile(
    ep, arg_inputs=(), kwarg_inputs=step(3, 0), min_block_size=1
)
eager = wrapped()  # HuggingFace's own step, with caches of its own
token, trt_tokens, eager_token, eager_tokens = 3, [], 3, []
for position in range(STEPS):
    token = int(trt_model(**step(token, position)).argmax())
    eager_token = int(eager(**step(eager_token, position)).argmax())
    trt_tokens.append(token)
    eager_tokens.append(eager_token)
print(f"Torch-TensorRT: {trt_tokens}")
print(f"HuggingFace:    {eager_tokens}")
assert trt_tokens == eager_tokens
