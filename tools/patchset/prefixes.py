"""Each prefix of the stack built, installed and tested alone (upstream merges the
stack piece by piece, so each prefix's own wheel must pass its own tests).

A prefix runs the tests of the piece it ends with: those the piece brings and the
earlier ones it changes. Running every earlier piece's tests again at each prefix
made the check grow with the square of the stack (most of CI's hour); each test
still runs at the prefix that brings it and on the whole stack. What this no
longer catches: a piece that breaks an earlier piece's test that a later piece
mends."""

import os
import re
import shutil
import subprocess
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from . import REPO_ROOT, PatchsetError, git, series, wheelbuild

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


def _grown_tests(patches: Sequence[series.Patch]) -> List[str]:
    """Test files a mail changes after another mail created them."""
    created = {f for p in patches for f in p.created_files()}
    return sorted(
        {
            f
            for p in patches
            for f in p.touched_files()
            if f.startswith("tests/") and f in created and f not in p.created_files()
        }
    )


def _tests_of(piece: series.Piece, earlier: Sequence[series.Piece]) -> List[str]:
    """The tests ``piece`` brings, and those of ``earlier`` pieces it changes."""
    touched = {f for p in piece.patches for f in p.touched_files()}
    return piece.tests + [t for e in earlier for t in e.tests if t in touched]


def tests_view(
    patches: Sequence[series.Patch], prefix: Sequence[series.Patch], dest: str
) -> str:
    """This repository at ``dest`` with ``tests/`` as the mails of ``prefix`` leave
    it: its files (tracked, or new and not ignored: tests find the README, the
    examples and the tools beside them) without the tests the mails create, then
    ``prefix``'s mails applied (their tests only). A test a later mail grows is
    tested as it was."""
    shutil.rmtree(dest, ignore_errors=True)
    listed = git(
        REPO_ROOT, ["ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    )
    for rel in sorted(set(filter(None, listed.split("\0")))):
        source = os.path.join(REPO_ROOT, rel)
        if os.path.isfile(source):
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copy2(source, os.path.join(dest, rel))
    for f in {f for p in patches for f in p.created_files()}:
        if f.startswith("tests/"):
            os.unlink(os.path.join(dest, f))
    for patch in prefix:
        if any(f.startswith("tests/") for f in patch.touched_files()):
            series.apply_patch(patch, dest, 1, include=("tests/*",))
    return dest


def check_prefixes(
    pieces: List[series.Piece],
    python: str,
    flavour: str,
    out_dir: str,
    pytest_args: Sequence[str] = (),
    run: Runner = _run,
    build: Optional[Builder] = None,
    skip_whole: bool = False,
    through: Optional[str] = None,
) -> List[Tuple[str, str]]:
    """(piece, pytest summary) of each prefix (but the whole with ``skip_whole``;
    none after piece ``through``) installed in the venv of ``python``; raises
    naming each failing prefix."""
    build = build or wheelbuild.build_patched_wheel
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO_ROOT, "tools"))
    env["TORCHTRT_PATCHSET_ENV"] = "rtx" if flavour == "rtx" else "standard"
    install = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    install += ["--no-deps", "--force-reinstall"]
    pytest = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    pytest += ["-c", os.path.join(REPO_ROOT, "pyproject.toml"), "--rootdir", REPO_ROOT]
    results: List[Tuple[str, str]] = []
    failed: List[str] = []
    every = series.all_patches(pieces)
    grown = _grown_tests(every)
    checked = pieces[:-1] if skip_whole else pieces
    if through is not None:
        ids = [p.id for p in pieces]
        if through not in ids:
            raise PatchsetError(
                f"--through {through}: no such piece ({', '.join(ids)})"
            )
        checked = checked[: ids.index(through) + 1]
    try:
        for k, piece in enumerate(checked, 1):
            prefix, out = pieces[:k], os.path.join(out_dir, f"{k:02d}-{piece.id}")
            patches = series.all_patches(prefix)
            modules = [m for p in prefix for m in p.modules]
            wheel = build(
                flavour, out, label=f"stack{k}", patches=patches, modules=modules
            )
            code, output = run([*install, wheel], env)
            if code != 0:
                raise PatchsetError(
                    f"installing the wheel of prefix '{piece.id}' failed: "
                    f"{_summary(output)}"
                )
            tests = _tests_of(piece, pieces[: k - 1])
            if not tests:
                results.append((piece.id, "no tests"))
                continue
            argv = [*pytest, *pytest_args, *tests]
            if grown:  # each prefix's tests as its mails leave them
                view = tests_view(every, patches, os.path.join(out, "tests-view"))
                argv = [*pytest[:-1], view, *pytest_args]
                argv += [os.path.join(view, t) for t in tests]
            code, output = run(argv, env)
            results.append((piece.id, _summary(output)))
            if code != 0:
                failed.append(f"'{piece.id}' ({_summary(output)})")
    finally:
        run([*install, build(flavour, os.path.join(out_dir, "whole"))], env)
    if failed:
        raise PatchsetError(
            f"{len(failed)} stack prefix(es) fail their own tests: {'; '.join(failed)}"
        )
    return results
