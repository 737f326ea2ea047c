"""Replace a run's machine paths in logs by placeholders, in place, before they leave
the machine that wrote them: ``<site-packages>``, ``<venv>``, ``<tmp>``, ``<home>``.

The GPU scripts call it on every log they write under ``$OUT``, so a log committed under
``results/`` needs no hand editing (``tests/patchset/test_no_machine_paths.py`` checks
what is tracked).

    python3 tools/gpu/scrub_paths.py FILE...
"""

import re
import sys

# an absolute path starting at one of these top-level folders (names only: the
# file itself names no path of any machine)
_START = r"(?<![\w.<])/"


def _under(*roots: str) -> str:
    return _START + "(?:" + "|".join(roots) + ")"


_RULES = [
    (re.compile(_START + r"[\w./+-]*?/site-packages(?=/|\b)"), "<site-packages>"),
    (
        re.compile(
            _under("opt", "root", r"home/\w+", "work") + r"/[\w.+-]*\.?venv[\w.-]*"
        ),
        "<venv>",
    ),
    (re.compile(_under("tmp") + r"/[\w.+-]+"), "<tmp>"),
    (
        re.compile(_under("root", r"home/[\w.-]+", r"Users/[\w.-]+") + r"(?=/|\b)"),
        "<home>",
    ),
    (re.compile(_under("opt", "work") + r"/[\w.+-]+"), "<machine>"),
]


def scrub(text: str) -> str:
    for pattern, placeholder in _RULES:
        text = pattern.sub(placeholder, text)
    return text


def main(paths: list[str]) -> None:
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        clean = scrub(text)
        if clean != text:
            with open(path, "w", encoding="utf-8") as f:
                f.write(clean)


if __name__ == "__main__":
    main(sys.argv[1:])
