"""Writes the README's table of state updates from the list the tests check.

``tests/py/dynamo/lowering/test_state_update_patterns.py`` builds one engine per
entry of ``PATTERNS`` and checks how its alias map files the write;
``tests/patchset/test_readme_state_patterns.py`` fails when the README's table
("Which state updates the engine writes in place without plugins") is not that
list. This rewrites the table from the list:

    python tools/state_table.py           # print the table
    python tools/state_table.py --write   # replace it in README.md

Needs torch_tensorrt (the test module imports it).
"""

import argparse
import importlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests", "py")  # the root of the test packages
HEADING = "### Which state updates the engine writes in place without plugins"
HEADER = ["| write | state | alias map | why |", "|---|---|---|---|"]


def patterns():
    sys.path.insert(0, TESTS)
    try:
        module = "dynamo.lowering.test_state_update_patterns"
        return importlib.import_module(module).PATTERNS
    finally:
        sys.path.remove(TESTS)


def table(rows):
    return HEADER + [f"| {p.write} | {p.state} | {p.result} | {p.why} |" for p in rows]


def replaced(text, lines):
    """``text`` with the section's table replaced by ``lines``."""
    head, section = text.split(HEADING, 1)
    body, rest = (section.split("\n#", 1) + [""])[:2]
    old = body.splitlines()
    first = next(i for i, line in enumerate(old) if line.startswith("|"))
    last = max(i for i, line in enumerate(old) if line.startswith("|"))
    trailing = "\n" if body.endswith("\n") else ""
    body = "\n".join(old[:first] + lines + old[last + 1 :]) + trailing
    return head + HEADING + body + ("\n#" + rest if rest else "")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="update README.md")
    args = parser.parse_args(argv)
    lines = table(patterns())
    if not args.write:
        print("\n".join(lines))
        return
    path = os.path.join(ROOT, "README.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    with open(path, "w", encoding="utf-8") as f:
        f.write(replaced(text, lines))


if __name__ == "__main__":
    main()
