"""Command line: ``tools/upstream-tests CHECKOUT [PATHS...]`` (see CONTRIBUTING.md)."""

import argparse
import re
import sys
from typing import List

from patchset import PatchsetError

from . import run


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="upstream-tests", description=__doc__)
    parser.add_argument(
        "checkout", help="path of a pytorch/TensorRT checkout (its tests/py is used)"
    )
    parser.add_argument(
        "paths",
        nargs="*",
        help="test paths relative to the checkout (default: tests/py/dynamo)",
    )
    parser.add_argument("--report", help="write a JSON report here")
    parser.add_argument(
        "--known-failure",
        action="append",
        default=[],
        metavar="NODEID=REASON",
        help="deselect a test known to fail for a reason unrelated to the patch set "
        "(the reason is recorded in the report); repeatable",
    )
    args = parser.parse_args(argv)
    try:
        known = [run.parse_known_failure(k) for k in args.known_failure]
        summary = run.run(args.checkout, args.paths, args.report, known)
        print(summary)
    except PatchsetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    # exit status 1 when anything failed
    return 1 if re.search(r"\b[1-9]\d* (failed|error)", summary) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
