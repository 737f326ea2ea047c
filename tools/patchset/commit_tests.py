"""Each commit's tests at that commit: a test file, as a commit of a patched tree has
it, run against that commit's Python code.

The prefix check (``check --prefixes``) builds a wheel at each piece's end; inside a
piece a commit is only byte-compiled and imported. This runs chosen test files at
every commit that has them, without building: the commit's ``py/torch_tensorrt``
``.py`` files over a copy of an installed (or unpacked) patched package, whose
compiled libraries every commit shares (the patches change Python only).
"""

import glob
import os
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from typing import Dict, List, Optional, Sequence, Tuple

from . import REPO_ROOT, PatchsetError, git, series

# what a commit's tests read beside tests/ (this repository's files)
_BESIDE = ("README.md", "docs", "examples", "tools", "pyproject.toml")


def _extract(repo: str, commit: str, paths: Sequence[str], dest: str) -> None:
    archive = subprocess.run(
        ["git", "-C", repo, "archive", commit, *paths],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)


def commit_root(repo: str, commit: str, package: str, dest: str) -> Tuple[str, str]:
    """``(pythonpath, rootdir)`` of ``commit``: its package and its tests at ``dest``."""
    site = os.path.join(dest, "site")
    shutil.copytree(
        package,
        os.path.join(site, "torch_tensorrt"),
        ignore=shutil.ignore_patterns("*.py", "__pycache__"),
    )
    root = os.path.join(dest, "root")
    os.makedirs(root)
    _extract(repo, commit, ["py/torch_tensorrt", "tests"], root)
    src = os.path.join(root, "py", "torch_tensorrt")
    for f in glob.glob(os.path.join(src, "**", "*.py"), recursive=True):
        target = os.path.join(site, "torch_tensorrt", os.path.relpath(f, src))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(f, target)
    shutil.rmtree(os.path.join(root, "py"))
    if os.path.isdir(os.path.join(root, "tests", "py", "dynamo")):
        series.write_test_packages(root)  # as upstream's tree has them
    for name in _BESIDE:
        if os.path.exists(os.path.join(REPO_ROOT, name)):
            os.symlink(os.path.join(REPO_ROOT, name), os.path.join(root, name))
    return site, root


def outcomes(xml_path: str) -> Dict[str, str]:
    """``{test id: pass | fail | skip}`` of a JUnit XML report."""
    found: Dict[str, str] = {}
    if not os.path.exists(xml_path):
        return found
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        status = "pass"
        for child in case:
            if child.tag in ("failure", "error"):
                status = "fail"
            elif child.tag == "skipped" and status == "pass":
                status = "skip"
        found[f"{case.get('classname')}::{case.get('name')}"] = status
    return found


def run_at_commits(
    repo: str,
    base: str,
    tests: Sequence[str],
    package: str,
    python: str,
    until: Optional[Dict[str, str]] = None,
) -> List[Tuple[str, str, Dict[str, str], str]]:
    """Run each of ``tests`` at every commit of ``base..HEAD`` that has it (up to the
    commit ``until[test]`` where given); ``(commit, test, outcomes, summary)`` each,
    a run that collects nothing counting as a failure."""
    revs = git(repo, ["rev-list", "--reverse", f"{base}..HEAD"]).split()
    if os.sep in python:  # the tests run from each commit's own directory
        python = os.path.abspath(python)
    results = []
    with tempfile.TemporaryDirectory(prefix="commit-tests-") as work:
        roots: Dict[str, Tuple[str, str]] = {}
        for test in tests:
            stop = revs.index(until[test]) if until and test in until else len(revs) - 1
            for commit in revs[: stop + 1]:
                if test not in git(
                    repo, ["ls-tree", "-r", "--name-only", commit, test]
                ):
                    continue
                if commit not in roots:
                    dest = os.path.join(work, commit[:12])
                    roots[commit] = commit_root(repo, commit, package, dest)
                site, root = roots[commit]
                xml_path = os.path.join(work, f"{commit[:12]}-{len(results)}.xml")
                env = dict(os.environ, PYTHONPATH=site)
                proc = subprocess.run(
                    [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
                    + ["-c", "pyproject.toml", "--rootdir", ".", test]
                    + [f"--junitxml={xml_path}"],
                    cwd=root,
                    env=env,
                    capture_output=True,
                    text=True,
                )
                found = outcomes(xml_path)
                lines = proc.stdout.strip().splitlines()
                summary = lines[-1] if lines else f"exit status {proc.returncode}"
                if proc.returncode not in (0, 5) and "fail" not in found.values():
                    found["<collection>"] = "fail"
                results.append((commit, test, found, summary))
    return results


def installed_package(python: str) -> str:
    """The directory of the ``torch_tensorrt`` package ``python`` imports."""
    proc = subprocess.run(
        [
            python,
            "-c",
            "import torch_tensorrt, os; print(os.path.dirname(torch_tensorrt.__file__))",
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise PatchsetError(
            f"{python} cannot import torch_tensorrt: install the patched wheel"
        )
    return proc.stdout.strip().splitlines()[-1]
