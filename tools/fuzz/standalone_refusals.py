"""Why generated custom-op state programs are refused as standalone engines (CPU).

Each seed's program (tests/py/dynamo/lowering/state_programs.py) that calls a mutating
custom op is exported and built by
``convert_exported_program_to_serialized_trt_engine`` (``min_block_size=1``,
``lift_mutable_buffers=True``, with TensorRT-RTX on the CPU; no engine runs). A
refusal is classed by its first sentence; each class says whether it is a real
limit of a standalone engine:

    python tools/fuzz/standalone_refusals.py --seeds 0:2000 --out refusals.json

``limit``: the program runs an op in PyTorch (the custom op without a converter), which
a standalone engine cannot hold. ``other``: anything else, the refusal to look at.
The JSON holds the counts, each class's first seeds and messages, and the seeds.
"""

import argparse
import collections
import json
import os
import sys
from typing import Any, Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "py", "dynamo", "lowering"))

# a first sentence naming what only PyTorch can run: a real limit of an engine
LIMIT_MARKS = ("runs in PyTorch", "without a converter", "has no converter")


def first_sentence(message: str) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line.split(". ")[0]


def classify(program: Any, message: str) -> str:
    head = first_sentence(message)
    in_pytorch = "custom op in PyTorch" in program.features
    if in_pytorch and any(mark in head for mark in LIMIT_MARKS):
        return "limit"
    return "other"


def check(seed: int) -> Dict[str, Any]:
    import torch_tensorrt

    import state_programs

    program = state_programs.generate(seed)
    record: Dict[str, Any] = {"seed": seed, "features": program.features}
    try:
        ep = program.export(program.module())
    except Exception as e:  # eager's own refusal (an expanded write)
        record["outcome"] = "export_refused"
        record["why"] = first_sentence(f"{type(e).__name__}: {e}")[:300]
        return record
    try:
        torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
            ep,
            arg_inputs=program.compile_inputs(),
            min_block_size=1,
            lift_mutable_buffers=True,  # buffer state as engine I/O
        )
        record["outcome"] = "built"
    except Exception as e:
        record["outcome"] = "refused"
        record["class"] = classify(program, str(e))
        record["why"] = first_sentence(f"{type(e).__name__}: {e}")[:300]
    return record


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0:2000", help="first:count")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    import state_programs

    first, count = (int(v) for v in args.seeds.split(":"))
    seeds = [
        s
        for s in range(first, first + count)
        if any(f.startswith("custom op") for f in state_programs.generate(s).features)
    ]
    print(f"seeds {first}:{count}: {len(seeds)} programs call a custom op", flush=True)
    records = [check(s) for s in seeds]
    outcomes = collections.Counter(r["outcome"] for r in records)
    classes = collections.Counter(r.get("class") for r in records if "class" in r)
    examples: Dict[str, List[Any]] = collections.defaultdict(list)
    for r in records:
        if "class" in r and len(examples[r["class"]]) < 5:
            examples[r["class"]].append([r["seed"], r["why"]])
    summary = {
        "seeds": args.seeds,
        "programs": len(records),
        "outcomes": dict(outcomes),
        "refusal_classes": dict(classes),
        "examples": dict(examples),
        "records": records,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({k: summary[k] for k in ("outcomes", "refusal_classes")}))
    for cls, rows in examples.items():
        for seed, why in rows:
            print(f"{cls} seed {seed}: {why}")
    return 0 if not classes.get("other") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
