"""The patch set as a stack of upstream PRs (``patches/stack``).

Upstream reviews small PRs one at a time, so the series is cut into *pieces*,
one per PR, in review order. ``patches/stack`` declares them::

    # comment
    [piece-id] Title of the PR
    decide: What a reviewer of this PR must decide (one line each)
    py/torch_tensorrt/dynamo/new_module.py
    tests/py/dynamo/test_new_module.py

Each patch names its piece in its DEP-3 header (``Stack: piece-id``) and any
upstream PR it builds on (``Depends-on: <PR URL>``); the new files of a piece
(modules under ``py/``, tests, ``docsrc/`` pages, ``examples/``) are listed
under its section. :func:`read_stack` checks that the series is the pieces'
patches in stack order, that every new file belongs to exactly one piece, and
that each listed file exists. Every prefix of the stack is then a series
prefix, so it applies wherever the series applies; :func:`prefixes` gives, for
each prefix, the patches, modules and tests that make it up, for building and
testing it alone.
"""

import os
import re
import subprocess
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from . import REPO_ROOT, PatchsetError, series, wheelbuild

STACK_FILE = "stack"
_SECTION_RE = re.compile(r"^\[(?P<id>[a-z0-9][a-z0-9-]*)\]\s+(?P<title>\S.*)$")
NEW_FILE_ROOTS = ("py", "tests/py", "tests/examples", "docsrc", "examples")
LOCAL_ONLY = ("tests/examples/",)  # tests of the examples, run by this repository


@dataclass(frozen=True)
class Piece:
    id: str
    title: str
    patches: Tuple[series.Patch, ...]
    files: Tuple[str, ...]  # repository-relative, in upstream's layout
    decisions: Tuple[str, ...] = ()  # what a reviewer must decide

    @property
    def exported_files(self) -> List[str]:
        """The files that go upstream (``tests/examples/`` is this repository's CI)."""
        return [f for f in self.files if not f.startswith(LOCAL_ONLY)]

    @property
    def modules(self) -> List[str]:
        """New modules, relative to ``py/`` (as ``wheelbuild`` names them)."""
        return [f[len("py/") :] for f in self.files if f.startswith("py/")]

    @property
    def tests(self) -> List[str]:
        return [
            f
            for f in self.files
            if f.startswith("tests/")
            and os.path.basename(f).startswith("test_")
            and f.endswith(".py")
        ]

    @property
    def depends_on(self) -> List[str]:
        found: List[str] = []
        for patch in self.patches:
            for value in header_values(patch, "Depends-on"):
                if value not in found:
                    found.append(value)
        return found


@dataclass(frozen=True)
class Prefix:
    """The first ``len(pieces)`` pieces: what a branch of the stack contains."""

    pieces: Tuple[Piece, ...]

    @property
    def id(self) -> str:
        return self.pieces[-1].id

    @property
    def patches(self) -> List[series.Patch]:
        return [p for piece in self.pieces for p in piece.patches]

    @property
    def modules(self) -> List[str]:
        return [m for piece in self.pieces for m in piece.modules]

    @property
    def tests(self) -> List[str]:
        return [t for piece in self.pieces for t in piece.tests]


def header_values(patch: series.Patch, field: str) -> List[str]:
    return [
        m.group(1).strip()
        for m in re.finditer(rf"^{re.escape(field)}:\s*(\S.*)$", patch.header, re.M)
    ]


def new_files(root: str = REPO_ROOT) -> List[str]:
    """Every file the patch set adds to upstream (not through a patch)."""
    files = []
    for sub in NEW_FILE_ROOTS:
        top = os.path.join(root, sub)
        if os.path.isdir(top):
            files += [f"{sub}/{rel}" for rel in wheelbuild.source_files(top)]
    return files


_DECIDE = "decide:"


def _parse(path: str) -> List[Tuple[str, str, List[str], List[str]]]:
    sections: List[Tuple[str, str, List[str], List[str]]] = []
    with open(path, encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.strip()
            if line.startswith(_DECIDE) and sections:
                # free text: '#' there is an issue number, not a comment
                sections[-1][3].append(line[len(_DECIDE) :].strip())
                continue
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            m = _SECTION_RE.match(line)
            if m:
                sections.append((m.group("id"), m.group("title"), [], []))
            elif line.startswith("["):
                raise PatchsetError(
                    f"{STACK_FILE}:{lineno}: {line!r} is not '[piece-id] Title'"
                )
            elif not sections:
                raise PatchsetError(
                    f"{STACK_FILE}:{lineno}: {line!r} before the first [piece]"
                )
            else:
                sections[-1][2].append(line)
    return sections


def read_stack(patch_dir: str = series.PATCH_DIR, root: str = REPO_ROOT) -> List[Piece]:
    """The pieces of ``patch_dir/stack``, checked against the series and ``root``."""
    path = os.path.join(patch_dir, STACK_FILE)
    if not os.path.exists(path):
        raise PatchsetError(f"missing {path}")
    sections = _parse(path)
    problems: List[str] = []
    ids = [s[0] for s in sections]
    for dup in sorted({i for i in ids if ids.count(i) > 1}):
        problems.append(f"piece '{dup}' is declared twice")
    patches = series.read_series(patch_dir)
    by_piece: Dict[str, List[series.Patch]] = {i: [] for i in ids}
    order: List[str] = []
    for patch in patches:
        values = header_values(patch, "Stack")
        if len(values) != 1:
            problems.append(
                f"{patch.name}: needs exactly one 'Stack:' header naming its piece "
                f"(has {len(values)})"
            )
            continue
        if values[0] not in by_piece:
            problems.append(
                f"{patch.name}: 'Stack: {values[0]}' names no piece of {STACK_FILE} "
                f"({', '.join(ids)})"
            )
            continue
        by_piece[values[0]].append(patch)
        if not order or order[-1] != values[0]:
            order.append(values[0])
    for piece_id in sorted({i for i in order if order.count(i) > 1}):
        problems.append(
            f"the patches of piece '{piece_id}' are not contiguous in the series"
        )
    expected = [i for i in ids if by_piece[i]]
    if len(set(order)) == len(order) and order != expected:
        problems.append(
            f"the series has the pieces in the order {order}, {STACK_FILE} in the "
            f"order {expected}"
        )
    listed: Dict[str, str] = {}
    for piece_id, _, files, _ in sections:
        for f in files:
            if f in listed:
                problems.append(
                    f"{f} is listed under both '{listed[f]}' and '{piece_id}'"
                )
            listed.setdefault(f, piece_id)
            if not os.path.isfile(os.path.join(root, f)):
                problems.append(f"{f} (piece '{piece_id}') does not exist")
    for f in new_files(root):
        if f not in listed:
            problems.append(f"{f} belongs to no piece of {STACK_FILE}")
    if problems:
        raise PatchsetError("stack: " + "; ".join(problems))
    return [
        Piece(piece_id, title, tuple(by_piece[piece_id]), tuple(files), tuple(decide))
        for piece_id, title, files, decide in sections
    ]


def prefixes(pieces: List[Piece]) -> List[Prefix]:
    """Each prefix of the stack, shortest first."""
    return [Prefix(tuple(pieces[: k + 1])) for k in range(len(pieces))]


def find_prefix(pieces: List[Piece], piece_id: Optional[str]) -> Prefix:
    """The prefix that ends with ``piece_id`` (the whole stack for None)."""
    all_prefixes = prefixes(pieces)
    if piece_id is None:
        return all_prefixes[-1]
    for prefix in all_prefixes:
        if prefix.id == piece_id:
            return prefix
    raise PatchsetError(
        f"no piece '{piece_id}' in the stack ({', '.join(p.id for p in pieces)})"
    )


# --------------------------------------------------------------------------- prefix tests

Runner = Callable[[List[str], Dict[str, str]], Tuple[int, str]]
Builder = Callable[..., str]


def _run(argv: List[str], env: Dict[str, str]) -> Tuple[int, str]:
    result = subprocess.run(
        argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    return result.returncode, result.stdout + result.stderr


def _summary(output: str) -> str:
    lines = [
        line.strip("= ")
        for line in output.splitlines()
        if re.search(r"\b(passed|failed|errors?|skipped|no tests ran)\b.* in ", line)
    ]
    return lines[-1] if lines else (output.strip().splitlines() or ["no output"])[-1]


def check_prefixes(
    pieces: List[Piece],
    python: str,
    flavour: str,
    out_dir: str,
    pytest_args: Sequence[str] = (),
    run: Runner = _run,
    build: Optional[Builder] = None,
    skip_whole: bool = False,
) -> List[Tuple[str, str]]:
    """Build, install and test every prefix of the stack alone, in the venv of ``python``.

    For each prefix: the wheel of ``flavour`` with only that prefix's patches and
    modules, installed without dependencies, then pytest on that prefix's tests
    (the tests of later pieces are not collected). The venv gets the whole patch
    set back at the end. Returns (piece, pytest summary) per prefix; raises when
    any prefix fails, naming each failing prefix. ``skip_whole`` leaves out the
    last prefix, the whole stack (for a caller that tests it anyway).
    """
    build = wheelbuild.build_patched_wheel if build is None else build
    env = {
        **os.environ,
        "PYTHONPATH": os.path.join(REPO_ROOT, "tools"),
        "TORCHTRT_PATCHSET_ENV": "rtx" if flavour == "rtx" else "standard",
    }
    install = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    install += ["--no-deps", "--force-reinstall"]
    results: List[Tuple[str, str]] = []
    failed: List[str] = []
    try:
        chosen = prefixes(pieces)[:-1] if skip_whole else prefixes(pieces)
        for k, prefix in enumerate(chosen, 1):
            wheel = build(
                flavour,
                os.path.join(out_dir, f"{k:02d}-{prefix.id}"),
                label=f"stack{k}",
                patches=prefix.patches,
                modules=prefix.modules,
            )
            code, output = run([*install, wheel], env)
            if code != 0:
                raise PatchsetError(
                    f"installing the wheel of prefix '{prefix.id}' failed: {_summary(output)}"
                )
            if not prefix.tests:
                results.append((prefix.id, "no tests"))
                continue
            code, output = run(
                [
                    python,
                    "-m",
                    "pytest",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    "-c",
                    os.path.join(REPO_ROOT, "pyproject.toml"),
                    "--rootdir",
                    REPO_ROOT,
                    *pytest_args,
                    *prefix.tests,
                ],
                env,
            )
            results.append((prefix.id, _summary(output)))
            if code != 0:
                failed.append(f"'{prefix.id}' ({_summary(output)})")
    finally:
        wheel = build(flavour, os.path.join(out_dir, "whole"))
        run([*install, wheel], env)
    if failed:
        raise PatchsetError(
            f"{len(failed)} stack prefix(es) fail their own tests: {'; '.join(failed)}"
        )
    return results
