"""HuggingFace decoders with a static KV cache, as standalone engines.

Two steps, on two machines:

    # where transformers is installed (no GPU needed: TensorRT-RTX builds on the CPU)
    python tools/hf/static_cache_decoders.py build --out DIR [--steps 16]
    # where a GPU and TensorRT-RTX are, without transformers
    python tools/hf/static_cache_decoders.py run --dir DIR --out results.json

``build`` makes small decoders from ``GPT2Config``, ``LlamaConfig``,
``Qwen2Config``, ``MistralConfig`` and ``GemmaConfig`` (random weights, fixed
seeds, no downloads), wraps each in
``transformers.integrations.executorch.TorchExportableModuleWithStaticCache``,
exports it with ``torch.export`` (non-strict and strict) as HuggingFace
documents, and builds the standalone engine with
``convert_exported_program_to_serialized_trt_engine(..., lift_mutable_buffers=True)``.
Next to each engine (``NAME.engine.xz``) it writes its alias map
(``NAME.json``) and HuggingFace's own greedy decoding on the CPU
(``NAME.ref.pt``: the tokens and the logits of every step).

``run`` binds each engine from its alias map as a C++ caller would (raw
TensorRT: an ``in_place`` output gets its input's address, a ``copy`` output
its own memory, copied into the input after the run), decodes greedily from the
same first token, and records per engine: whether the tokens equal
HuggingFace's, the largest logit difference, whether TensorRT reports each
in-place cache aliased to its input, the bytes PyTorch allocated over the
decoding (the caches are allocated before), and the median time of a step.
The ``bench-*`` engines (2 layers of 8 KV heads of 128, float16, 4,096 and
65,536 positions: 32 and 512 MiB of caches) are only timed: the step with its
caches in place, and the same step followed by one copy of every cache, the
least a copy-back of the caches costs.
"""

import argparse
import json
import lzma
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import torch

sys.path.insert(
    0,
    str(Path(__file__).resolve().parents[2] / "tests" / "py" / "dynamo" / "models"),
)
from hf_static_cache_models import (  # noqa: E402
    BENCH,
    FIRST_TOKEN,
    MODELS,
    export,
    greedy,
    standalone_engine,
    wrapped,
)


def build(out_dir: str, steps: int, names: Sequence[str]) -> None:
    os.makedirs(out_dir, exist_ok=True)
    for name in names:
        family, mode, cache_len = {**MODELS, **BENCH}[name]
        module = wrapped(family, cache_len)
        initial = {n: b.clone() for n, b in module.named_buffers()}
        ep = export(module, mode)
        map_path = os.path.join(out_dir, f"{name}.json")
        start = time.perf_counter()
        engine = standalone_engine(ep, map_path)
        seconds = time.perf_counter() - start
        # every state starts at zero, as the caller's do in ``run``
        for buffer_name, value in initial.items():
            binding = "buf_" + buffer_name.replace(".", "_")
            if binding in open(map_path).read():
                assert not value.any(), f"{name}: state {buffer_name} is not zero"
        with lzma.open(os.path.join(out_dir, f"{name}.engine.xz"), "wb") as f:
            f.write(bytes(engine))
        if name in BENCH:
            print(f"{name}: engine {len(engine)} bytes in {seconds:.1f} s")
            continue
        reference = greedy(wrapped(family, cache_len), steps)
        torch.save(reference, os.path.join(out_dir, f"{name}.ref.pt"))
        print(
            f"{name}: engine {len(engine)} bytes in {seconds:.1f} s, tokens "
            f"{reference['tokens'].tolist()}"
        )


_DTYPES = {
    "FLOAT": torch.float32,
    "HALF": torch.float16,
    "BF16": torch.bfloat16,
    "INT32": torch.int32,
    "INT64": torch.int64,
    "BOOL": torch.bool,
}


def _torch_dtype(trt_dtype: Any) -> torch.dtype:
    return _DTYPES[str(trt_dtype).split(".")[-1]]


def run_one(
    engine_bytes: bytes,
    aliases: List[Any],
    reference: Optional[Dict[str, Any]],
    trt: Any,
) -> Dict[str, Any]:
    """Greedy decoding against ``reference``; without one, the step timed."""
    from torch_tensorrt.dynamo import (
        check_alias_map_against_engine,
    )

    runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
    engine = runtime.deserialize_cuda_engine(engine_bytes)
    check_alias_map_against_engine(aliases, engine)
    context = engine.create_execution_context()
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
    buffers: Dict[str, torch.Tensor] = {}
    for name in inputs:
        shape = tuple(engine.get_tensor_shape(name))
        buffers[name] = torch.zeros(
            shape, dtype=_torch_dtype(engine.get_tensor_dtype(name)), device="cuda"
        )
    copies = []
    in_place = {a.output_name: a.input_name for a in aliases if a.update == "in_place"}
    for a in aliases:
        if a.update == "in_place":
            buffers[a.output_name] = buffers[a.input_name]
        else:
            buffers[a.output_name] = torch.empty_like(buffers[a.input_name])
            copies.append((buffers[a.input_name], buffers[a.output_name]))
    for name in names:
        if name not in buffers:  # the logits
            buffers[name] = torch.empty(
                tuple(engine.get_tensor_shape(name)),
                dtype=_torch_dtype(engine.get_tensor_dtype(name)),
                device="cuda",
            )
        assert context.set_tensor_address(name, buffers[name].data_ptr()), name
    reported = {output: engine.get_aliased_input_tensor(output) for output in in_place}
    cache_bytes = sum(
        buffers[i].numel() * buffers[i].element_size() for i in in_place.values()
    )
    addresses = {i: buffers[i].data_ptr() for i in in_place.values()}
    stream = torch.cuda.Stream()
    state_outputs = {a.output_name for a in aliases}
    logits_name = next(n for n in names if n not in inputs and n not in state_outputs)
    token, tokens, logits, times = FIRST_TOKEN, [], [], []
    torch.cuda.synchronize()
    allocated_before = torch.cuda.memory_allocated()
    steps = len(reference["tokens"]) if reference is not None else 50

    def step(position: int, then: Sequence[Any] = ()) -> float:
        """One timed run at ``position``: the engine, the copy-backs, ``then``."""
        buffers["cache_position"].fill_(position)
        torch.cuda.synchronize()
        start = time.perf_counter()
        assert context.execute_async_v3(stream.cuda_stream)
        with torch.cuda.stream(stream):
            for dst, src in [*copies, *then]:
                dst.copy_(src)
        stream.synchronize()
        return (time.perf_counter() - start) * 1e6

    for position in range(steps):
        buffers["input_ids"].fill_(token)
        times.append(step(position))
        out = buffers[logits_name].reshape(-1).float().cpu()
        logits.append(out)
        token = int(out.argmax())
        tokens.append(token)
    torch.cuda.synchronize()
    allocated = torch.cuda.memory_allocated() - allocated_before
    common = {
        "caches_in_place": sorted(in_place.values()),
        "engine_reports_aliases": all(reported[o] == i for o, i in in_place.items()),
        "caches_not_moved": all(
            buffers[i].data_ptr() == a for i, a in addresses.items()
        ),
        "copied_back": sorted(a.input_name for a in aliases if a.update != "in_place"),
        "cache_bytes": cache_bytes,
        "bytes_allocated_while_decoding": allocated,
        "median_step_us": round(statistics.median(times[1:] or times), 2),
    }
    if reference is None:
        # the least a copy-back costs: the same step, then one copy of every
        # cache (2.14.0 would also have the engine write a whole new cache)
        cache_copies = [
            (buffers[i], torch.empty_like(buffers[i])) for i in in_place.values()
        ]
        copy_times = [step(position, cache_copies) for position in range(steps)]
        common["median_step_with_cache_copy_us"] = round(
            statistics.median(copy_times[1:]), 2
        )
        return common
    logits_t = torch.stack(logits)
    return {
        "tokens": tokens,
        "tokens_equal": tokens == reference["tokens"].tolist(),
        "max_logit_difference": float((logits_t - reference["logits"]).abs().max()),
        **common,
    }


def run(directory: str, out: str, tolerance: float) -> None:
    import tensorrt_rtx as trt
    from torch_tensorrt.dynamo import read_alias_map

    results: Dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "tolerance": tolerance,
        "models": {},
    }
    for name in list(MODELS) + list(BENCH):
        path = os.path.join(directory, f"{name}.engine.xz")
        if not os.path.exists(path):
            continue
        with lzma.open(path) as f:
            engine_bytes = f.read()
        aliases = read_alias_map(os.path.join(directory, f"{name}.json"))
        reference = None
        if name in MODELS:
            reference = torch.load(os.path.join(directory, f"{name}.ref.pt"))
        try:
            row = run_one(engine_bytes, aliases, reference, trt)
            if reference is not None:
                row["right"] = row["tokens_equal"] and (
                    row["max_logit_difference"] <= tolerance
                )
        except Exception as e:  # recorded; the other models still run
            row = {"error": f"{type(e).__name__}: {e}", "right": False}
        finally:
            torch.cuda.empty_cache()
        results["models"][name] = row
        print(name, json.dumps(row))
    with open(out, "w") as f:
        json.dump(results, f, indent=2)


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("--out", required=True)
    b.add_argument("--steps", type=int, default=16)
    b.add_argument(
        "--models",
        nargs="+",
        default=list(MODELS) + list(BENCH),
        choices=list(MODELS) + list(BENCH),
    )
    r = sub.add_parser("run")
    r.add_argument("--dir", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--tolerance", type=float, default=1e-3)
    args = parser.parse_args(argv)
    if args.command == "build":
        build(args.out, args.steps, args.models)
    else:
        run(args.dir, args.out, args.tolerance)


if __name__ == "__main__":
    main()
