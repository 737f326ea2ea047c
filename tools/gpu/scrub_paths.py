"""Replace a run's machine paths in logs by placeholders, in place, before they leave
the machine that wrote them: ``<site-packages>``, ``<venv>``, ``<tmp>``, ``<home>``.

The GPU scripts call it on every log they write under ``$OUT``, so a log committed under
``results/`` needs no hand editing (``tests/patchset/test_no_machine_paths.py`` checks
what is tracked).

    python3 tools/gpu/scrub_paths.py FILE...
"""

import re
import sys

_RULES = [
    (re.compile(r"(?<![\w.<])/[\w./+-]*?/site-packages(?=/|\b)"), "<site-packages>"),
    (
        re.compile(r"(?<![\w.<])/(?:opt|root|home/\w+|work)/[\w.+-]*\.?venv[\w.-]*"),
        "<venv>",
    ),
    (re.compile(r"(?<![\w.<])/tmp/[\w.+-]+"), "<tmp>"),
    (re.compile(r"(?<![\w.<])/(?:root|home/[\w.-]+|Users/[\w.-]+)(?=/|\b)"), "<home>"),
    (re.compile(r"(?<![\w.<])/(?:opt|work)/[\w.+-]+"), "<machine>"),
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
