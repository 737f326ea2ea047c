"""Small HuggingFace decoders with a static KV cache, as users export them.

Random weights from fixed seeds, no downloads: ``GPT2Config``, ``LlamaConfig``,
``Qwen2Config``, ``MistralConfig`` and ``GemmaConfig`` models wrapped in
``transformers.integrations.executorch.TorchExportableModuleWithStaticCache``
(``forward(input_ids, cache_position)``), exported non-strict or strict. Used by
``test_hf_static_cache.py`` and ``tools/hf/static_cache_decoders.py``.
"""

from typing import Any, Dict

import torch

FIRST_TOKEN = 3
VOCAB = 64

# name -> (family, export mode, cache positions)
MODELS = {
    "gpt2-nonstrict": ("gpt2", "nonstrict", 32),
    "gpt2-strict": ("gpt2", "strict", 32),
    "llama-nonstrict": ("llama", "nonstrict", 32),
    "llama-strict": ("llama", "strict", 32),
    "qwen2-nonstrict": ("qwen2", "nonstrict", 32),
    "qwen2-strict": ("qwen2", "strict", 32),
    "mistral-nonstrict": ("mistral", "nonstrict", 32),
    "gemma-nonstrict": ("gemma", "nonstrict", 32),
    "llama-65536-nonstrict": ("llama", "nonstrict", 65536),
}

# the decode-step benchmark: 2 layers of 8 KV heads of 128, float16; at 65,536
# positions the caches are 512 MiB. Timing only: the weights are rounded to a few
# values so that the engines compress (the work is the same)
BENCH = {
    f"bench-llama-fp16-{n}": ("llama-bench", "nonstrict", n) for n in (4096, 65536)
}


# the decoders other than GPT-2: transformers' config and model class names and
# their sizes beside _SMALL
_SMALL = dict(
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    hidden_size=32,
    intermediate_size=64,
)
_DECODERS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"head_dim": 8}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {"head_dim": 8}),
    # the benchmark's: 8 KV heads of 128, float16
    "llama-bench": (
        "LlamaConfig",
        "LlamaForCausalLM",
        dict(
            num_attention_heads=8,
            num_key_value_heads=8,
            head_dim=128,
            hidden_size=64,
            intermediate_size=128,
            torch_dtype=torch.float16,
        ),
    ),
}


def _model(family: str, cache_len: int) -> Any:
    import transformers

    torch.manual_seed(0)
    # weights wide enough that greedy decoding does not repeat one token
    common = dict(
        vocab_size=VOCAB, bos_token_id=0, eos_token_id=1, initializer_range=0.3
    )
    if family == "gpt2":
        config = transformers.GPT2Config(
            n_layer=2, n_head=4, n_embd=32, n_positions=cache_len, **common
        )
        model = transformers.GPT2LMHeadModel(config)
    elif family in _DECODERS:
        config_name, model_name, sizes = _DECODERS[family]
        config = getattr(transformers, config_name)(
            **{**_SMALL, **sizes}, max_position_embeddings=cache_len, **common
        )
        model = getattr(transformers, model_name)(config)
        if family == "llama-bench":
            # timing only: weights rounded to a few values compress (same work)
            with torch.no_grad():
                for parameter in model.parameters():
                    parameter.copy_((parameter * 4).round() / 4)
            model = model.half()
    else:
        raise ValueError(f"unknown model family {family!r}")
    model.eval()
    model.generation_config = transformers.GenerationConfig(
        use_cache=True,
        cache_implementation="static",
        cache_config={"batch_size": 1, "max_cache_len": cache_len, "device": "cpu"},
    )
    return model


def wrapped(family: str, cache_len: int) -> Any:
    """The model as HuggingFace exports it: ``forward(input_ids, cache_position)``."""
    from transformers.integrations.executorch import (
        TorchExportableModuleWithStaticCache,
    )

    return TorchExportableModuleWithStaticCache(
        _model(family, cache_len), batch_size=1, max_cache_len=cache_len, device="cpu"
    )


def step_inputs(token: int, position: int) -> Dict[str, torch.Tensor]:
    return {
        "input_ids": torch.tensor([[token]], dtype=torch.long),
        "cache_position": torch.tensor([position], dtype=torch.long),
    }


def export(module: Any, mode: str) -> torch.export.ExportedProgram:
    return torch.export.export(
        module, (), step_inputs(FIRST_TOKEN, 0), strict=(mode == "strict")
    )


def greedy(module: Any, steps: int) -> Dict[str, torch.Tensor]:
    """HuggingFace's own decoding: the token and the logits of every step."""
    token, tokens, logits = FIRST_TOKEN, [], []
    with torch.no_grad():
        for position in range(steps):
            out = module(**step_inputs(token, position))
            logits.append(out.reshape(-1).float())
            token = int(out.reshape(-1).argmax())
            tokens.append(token)
    return {"tokens": torch.tensor(tokens), "logits": torch.stack(logits)}


def standalone_engine(ep: torch.export.ExportedProgram, map_path: str) -> bytes:
    """The decoder step's standalone engine, its alias map written to ``map_path``."""
    import torch_tensorrt

    return bytes(
        torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
            ep,
            arg_inputs=(),
            kwarg_inputs=step_inputs(FIRST_TOKEN, 0),
            min_block_size=1,
            lift_mutable_buffers=True,
            alias_map_path=map_path,
        )
    )
