"""The README's table of state updates is the list the engine-building test checks.

``tests/py/dynamo/lowering/test_state_update_patterns.py`` builds one engine per
pattern of ``PATTERNS`` and checks how its alias map files the write. The README
shows the same patterns as a table ("Which state updates the engine writes in
place without plugins"); this test fails when the two differ, row by row.
"""

import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import state_table  # noqa: E402  (tools/state_table.py, the table's generator)

HEADING = state_table.HEADING


def readme_text():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return f.read()


def table_rows(text):
    """The cells of the section's table, one tuple per row."""
    assert HEADING in text, f"the README has no section {HEADING!r}"
    section = text.split(HEADING, 1)[1].split("\n#", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    assert lines[:2] == state_table.HEADER, lines[:2]
    return [
        tuple(cell.strip() for cell in re.split(r" \| ", line.strip("| ")))
        for line in lines[2:]
    ]


def mismatches(text, patterns):
    """Rows of the table and of ``patterns`` that differ, as pairs."""
    expected = [(p.write, p.state, p.result, p.why) for p in patterns]
    rows = table_rows(text)
    pairs = [(r, e) for r, e in zip(rows, expected) if r != e]
    if len(rows) != len(expected):
        pairs.append((f"{len(rows)} rows", f"{len(expected)} patterns"))
    return pairs


@pytest.fixture(scope="module")
def patterns():
    pytest.importorskip("torch_tensorrt")
    return state_table.patterns()


def test_the_table_is_the_tested_list(patterns):
    assert mismatches(readme_text(), patterns) == []


def test_a_row_whose_result_differs_is_reported(patterns):
    text = readme_text()
    copied = next(p for p in patterns if p.result == "copy")
    row = f"| {copied.write} | {copied.state} | copy | {copied.why} |"
    assert row in text
    changed = text.replace(row, row.replace("| copy |", "| in place |"), 1)
    ((found, expected),) = mismatches(changed, patterns)
    assert found[2] == "in place" and expected[2] == "copy"
    assert found[:2] == (copied.write, copied.state)


def test_a_missing_row_is_reported(patterns):
    text = readme_text()
    last = patterns[-1]
    row = f"| {last.write} | {last.state} | {last.result} | {last.why} |\n"
    assert row in text
    assert mismatches(text.replace(row, ""), patterns) == [
        (f"{len(patterns) - 1} rows", f"{len(patterns)} patterns")
    ]


def test_the_generator_writes_exactly_the_tested_list(patterns):
    text = readme_text()
    assert state_table.replaced(text, state_table.table(patterns)) == text
    # a stale table is rewritten to the list, the rest of the README kept
    stale = text.replace(state_table.table(patterns)[-1] + "\n", "", 1)
    assert mismatches(stale, patterns) != []
    assert state_table.replaced(stale, state_table.table(patterns)) == text
