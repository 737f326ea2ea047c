"""Compare upstream's tests on the unpatched and the patched wheel (GPU runs).

    python tools/gpu/upstream_table.py upstream-base.log upstream-patched.log

Reads the ``pytest -v`` lines of tools/gpu/upstream_compare.sh and prints, per
directory, how many tests ran, passed, failed and were skipped with each wheel
(only tests that ran to an outcome with both, so a deadline cuts both alike), then
every test whose outcome differs.
"""

import re
import sys
from collections import Counter, defaultdict

_LINE = re.compile(
    r"^(tests/py/dynamo/(\w+)/[^:\s]+::.+?) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b"
)
# the same line from pytest-xdist workers (-n): "[gw3] PASSED tests/...", with
# "[ 12%] " after the worker in pytest's progress style
_XDIST_LINE = re.compile(
    r"^\[gw\d+\] (?:\[\s*\d+%\] )?(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) "
    r"(tests/py/dynamo/(\w+)/[^:\s]+::\S+)"
)
_KIND = {"XFAIL": "SKIPPED", "XPASS": "PASSED", "ERROR": "FAILED"}


def outcomes(path):
    """test id -> (directory, outcome); a test's last reported outcome wins."""
    found = {}
    with open(path, errors="replace") as f:
        for line in f:
            m = _LINE.match(line.strip())
            if m:
                found[m.group(1)] = (m.group(2), _KIND.get(m.group(3), m.group(3)))
                continue
            m = _XDIST_LINE.match(line.strip())
            if m:
                found[m.group(2)] = (m.group(3), _KIND.get(m.group(1), m.group(1)))
    return found


def main(base_log, patched_log):
    base, patched = outcomes(base_log), outcomes(patched_log)
    both = sorted(set(base) & set(patched))
    table = defaultdict(lambda: {"base": Counter(), "patched": Counter()})
    for test in both:
        directory = base[test][0]
        table[directory]["base"][base[test][1]] += 1
        table[directory]["patched"][patched[test][1]] += 1
    print("| directory | ran | passed (base / patched) | failed | skipped |")
    print("|---|---|---|---|---|")
    for directory, counts in sorted(table.items()):
        b, p = counts["base"], counts["patched"]
        ran = sum(b.values())
        print(
            f"| {directory} | {ran} | {b['PASSED']} / {p['PASSED']} | "
            f"{b['FAILED']} / {p['FAILED']} | {b['SKIPPED']} / {p['SKIPPED']} |"
        )
    only = len(set(base) ^ set(patched))
    print(
        f"\n{len(both)} tests reached an outcome with both wheels; {only} with one only."
    )
    differ = [t for t in both if base[t][1] != patched[t][1]]
    print(f"{len(differ)} outcome(s) differ:")
    for test in differ:
        print(f"- {test}: base {base[test][1]}, patched {patched[test][1]}")
    worse = [t for t in differ if base[t][1] == "PASSED" and patched[t][1] == "FAILED"]
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
