"""Generated state programs against eager, with real engines on a GPU.

Each seed's program (tests/py/dynamo/lowering/state_programs.py) is exported,
compiled by torch_tensorrt.dynamo.compile (min_block_size=1) and run for three
calls on the GPU beside the same module in eager PyTorch; outputs, written
inputs and buffers, and outputs held across calls are compared. Every seed's
outcome goes to a JSON-lines log, so any failure replays from its seed:

    python tools/fuzz/state_programs.py --seeds 0:1000 --jobs 16 --out fuzz.jsonl

Outcomes: "right" (matches eager), "wrong" (runs and differs), "error"
(compile() or its module raised where eager did not), "both_refuse" (eager
raises too, e.g. a write into an expanded tensor), "refused" (the module
refuses a write into an input expanded over several rows, which eager's
index_put_ writes without checking), "refused_full" (with
--require-full-compilation: compile() refuses, naming the flag, a program with
an op only PyTorch can run).
"""

import argparse
import functools
import json
import multiprocessing
import os
import sys
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "py", "dynamo", "lowering"))


def check(seed, require_full_compilation=False):
    import torch
    import torch_tensorrt

    import state_programs

    program = state_programs.generate(seed)
    record = {"seed": seed, "features": program.features}
    start = time.time()
    try:
        eager_module = program.module().cuda()
        eager = state_programs.run(program, eager_module, device="cuda")
        ep = program.export(program.module().cuda(), device="cuda")
        try:
            trt = torch_tensorrt.dynamo.compile(
                ep,
                arg_inputs=program.compile_inputs("cuda"),
                min_block_size=1,
                require_full_compilation=require_full_compilation,
            )
        except Exception as e:
            if require_full_compilation and "require_full_compilation" in str(e):
                # a program with an op that can only run in PyTorch, refused
                record["outcome"] = "refused_full"
                record["why"] = f"{type(e).__name__}: {e}"[:300]
                return record
            raise
        compiled = state_programs.run(program, trt, device="cuda")
        if eager.error is not None and compiled.error is not None:
            record["outcome"] = "both_refuse"
        elif program.overlapping_write and compiled.error is not None:
            record["outcome"] = "refused"
            record["why"] = f"{type(compiled.error).__name__}: {compiled.error}"[:300]
        else:
            why = state_programs.compare(program, eager, compiled)
            record["outcome"] = (
                "right"
                if why is None
                else ("error" if compiled.error is not None else "wrong")
            )
            if why is not None:
                record["why"] = why
                record["program"] = program.describe()
    except Exception as e:  # compile() itself raised
        record["outcome"] = "error"
        record["why"] = f"{type(e).__name__}: {str(e)[:500]}"
        record["program"] = program.describe()
        record["trace"] = traceback.format_exc()[-1500:]
    record["seconds"] = round(time.time() - start, 2)
    return record


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0:1000", help="first:count")
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--require-full-compilation",
        action="store_true",
        help="compile with require_full_compilation=True; a refusal that names "
        "it (an op only PyTorch can run) is the outcome refused_full",
    )
    args = parser.parse_args()
    first, count = map(int, args.seeds.split(":"))
    counts = {}
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool, open(
        args.out, "w"
    ) as out:
        run = functools.partial(
            check, require_full_compilation=args.require_full_compilation
        )
        for record in pool.imap_unordered(run, range(first, first + count)):
            counts[record["outcome"]] = counts.get(record["outcome"], 0) + 1
            out.write(json.dumps(record) + "\n")
            out.flush()
    flag = args.require_full_compilation
    print(
        json.dumps(
            {
                "seeds": f"{first}:{count}",
                "require_full_compilation": flag,
                "outcomes": counts,
            }
        )
    )
    return 0 if counts.get("wrong", 0) == 0 and counts.get("error", 0) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
