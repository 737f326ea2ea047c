# type: ignore
"""Stock HuggingFace decoders with a static KV cache compile, every cache in place.

``TorchExportableModuleWithStaticCache`` (HuggingFace's export wrapper) with
GPT-2, Llama and Qwen2, exported non-strict and strict as HuggingFace documents,
keyword inputs ``input_ids`` and ``cache_position``. Upstream marks this model
as failing (``tests/py/dynamo/runtime/test_hf_static_cache_xfail.py``; issue
#4162): ``run_decompositions`` failed on the lifted constants that alias the
caches, then the lifted buffers were given the keyword inputs' places.

On the CPU: each standalone engine (built by TensorRT-RTX) has every key and
value cache ``in_place`` with ``binding: engine`` in its alias map and the
``cumulative_length`` counters copied back; ``compile()`` makes one engine for
the decoder step and, its execution stood in, decodes as HuggingFace does. On a
GPU: ``compile()`` for real, 16 greedy tokens against HuggingFace.
"""

import json
import os
import tempfile
import unittest

import torch
import torch_tensorrt
from parameterized import parameterized
from torch.testing._internal.common_utils import TestCase, run_tests

from ..lowering.test_compile_with_stand_in_engines import (
    engines_built_execution_stood_in,
)
from ..lowering.test_lower_auto_functionalized import (
    CPU_BUILDER,
    NEEDS_CPU_BUILDER,
)

try:
    import transformers  # noqa: F401

    HAVE_TRANSFORMERS = True
except ImportError:
    HAVE_TRANSFORMERS = False
NO_TRANSFORMERS = "transformers is not installed (tests/requirements.txt installs it)"

if HAVE_TRANSFORMERS:
    from .hf_static_cache_models import (
        FIRST_TOKEN,
        MODELS,
        export,
        greedy,
        standalone_engine,
        step_inputs,
        wrapped,
    )

STANDALONE = ["gpt2-nonstrict", "gpt2-strict", "llama-nonstrict", "qwen2-strict"]
COMPILED = ["gpt2-nonstrict", "llama-strict"]


def _compile(name, **kwargs):
    family, mode, cache_len = MODELS[name]
    ep = export(wrapped(family, cache_len), mode)
    return torch_tensorrt.dynamo.compile(
        ep,
        arg_inputs=(),
        kwarg_inputs=step_inputs(FIRST_TOKEN, 0),
        min_block_size=1,
        **kwargs,
    )


@unittest.skipIf(not HAVE_TRANSFORMERS, NO_TRANSFORMERS)
@unittest.skipIf(not CPU_BUILDER, NEEDS_CPU_BUILDER)
class TestOnCpu(TestCase):
    @parameterized.expand(STANDALONE)
    def test_standalone_engine_writes_every_cache_in_place(self, name):
        family, mode, cache_len = MODELS[name]
        ep = export(wrapped(family, cache_len), mode)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "aliases.json")
            engine = standalone_engine(ep, path)
            with open(path) as f:
                written = json.load(f)
        aliases = written["aliases"]
        self.assertGreater(len(engine), 0)
        caches = sorted(a["input"] for a in aliases if "_cache_" in a["input"])
        self.assertEqual(
            caches,
            [f"buf_{kv}_cache_{layer}" for kv in ("key", "value") for layer in (0, 1)],
        )
        for a in aliases:
            if "_cache_" in a["input"]:
                self.assertEqual(
                    (a["update"], a.get("binding")), ("in_place", "engine")
                )
            else:  # the counters, rank 0
                self.assertRegex(a["input"], r"^buf_cumulative_length_\d$")
                self.assertEqual(
                    (a["update"], written["inputs"][a["input"]]), ("copy", "int64")
                )

    @parameterized.expand(COMPILED)
    def test_compile_is_one_engine_that_decodes_as_huggingface(self, name):
        family, _, cache_len = MODELS[name]
        with engines_built_execution_stood_in() as built:
            trt = _compile(name, require_full_compilation=True)
        self.assertEqual(len(built), 1)
        in_place = sorted(i for i, _ in built[0].aliased_io.values())
        self.assertEqual(len(in_place), 4, msg=f"caches in place: {in_place}")
        eager = wrapped(family, cache_len)
        token = FIRST_TOKEN
        for position in range(4):
            got = trt(**step_inputs(token, position))
            want = eager(**step_inputs(token, position))
            self.assertEqual(got, want, atol=1e-5, rtol=1e-5)
            token = int(want.reshape(-1).argmax())


@unittest.skipIf(not HAVE_TRANSFORMERS, NO_TRANSFORMERS)
@unittest.skipIf(not torch.cuda.is_available(), "compile() runs engines on a GPU")
class TestOnGpu(TestCase):
    @parameterized.expand(COMPILED)
    def test_sixteen_greedy_tokens_as_huggingface(self, name):
        family, _, cache_len = MODELS[name]
        reference = greedy(wrapped(family, cache_len), 16)
        trt = _compile(name)
        token, tokens = FIRST_TOKEN, []
        for position in range(16):
            inputs = {k: v.cuda() for k, v in step_inputs(token, position).items()}
            logits = trt(**inputs).reshape(-1).float().cpu()
            self.assertEqual(
                logits, reference["logits"][position], atol=1e-3, rtol=1e-3
            )
            token = int(logits.argmax())
            tokens.append(token)
        self.assertEqual(tokens, reference["tokens"].tolist())


if __name__ == "__main__":
    run_tests()
