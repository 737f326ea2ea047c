"""Upstream runs ``black --check`` and isort on every PR: patched files, new modules and our
tests pass them."""

import os
import subprocess
import sys

import pytest
from patchset import REPO_ROOT, series, tree, wheelbuild


@pytest.fixture(scope="module")
def patched(tmp_path_factory):
    dest = tmp_path_factory.mktemp("styled")
    tree.patched_tree(str(dest), "standard", with_tests=True)
    return dest


def test_patched_files_new_modules_and_tests_are_black_clean(patched):
    files = sorted(
        {f for p in series.all_patches(series.read_series()) for f in p.touched_files()}
        | {"py/" + f for f in wheelbuild.overlay_files() if f.endswith(".py")}
        | {
            os.path.relpath(os.path.join(d, f), patched)
            for d, _, fs in os.walk(patched / "tests")
            for f in fs
            if f.endswith(".py")
        }
    )
    assert files, "nothing to check"
    result = subprocess.run(
        [sys.executable, "-m", "black", "--check", "--quiet", *files],
        cwd=patched,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


# upstream's pyproject.toml [tool.isort], run where upstream runs it: the
# repository root, whose packaging/ folder makes ``packaging`` first-party
ISORT_SETTINGS = '[tool.isort]\nprofile = "black"\npy_version = 311\n'


def _isort_unclean(root, files):
    (root / "pyproject.toml").write_text(ISORT_SETTINGS)
    (root / "packaging").mkdir(exist_ok=True)
    result = subprocess.run(
        [sys.executable, "-m", "isort", "--check-only", "--quiet", *files],
        cwd=root,
        capture_output=True,
        text=True,
    )
    return {
        os.path.relpath(line.split()[1], root)
        for line in (result.stdout + result.stderr).splitlines()
        if line.startswith("ERROR: ")
    }


def test_patched_files_new_modules_and_tests_are_isort_clean(patched, tmp_path):
    """isort (upstream's pre-commit) passes on every patched file it passes on in
    the 2.14.0 sources, and on every new module and test."""
    pieces = series.read_series()
    touched = {f for p in series.all_patches(pieces) for f in p.touched_files()}
    files = sorted(f for f in touched if f.endswith(".py"))
    base = tmp_path / "base"
    tree.base_sources(str(base), "standard")
    already = _isort_unclean(base, [f for f in files if (base / f).exists()])
    unclean = _isort_unclean(patched, files) - already
    assert unclean == set(), f"isort would reorder imports in {sorted(unclean)}"


def test_tools_are_black_clean():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "black",
            "--check",
            "--quiet",
            "tools",
            "setup.py",
            "tests/patchset",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


# upstream's settings (pyproject.toml [tool.mypy] / [tool.ruff]) for py/torch_tensorrt
MYPY_FLAGS = [
    "--strict",
    "--no-implicit-optional",
    "--ignore-missing-imports",
    "--follow-imports=skip",
    "--disable-error-code=attr-defined",
    "--python-version=3.11",
    f"--cache-dir={os.devnull}",
]
RUFF_FLAGS = [
    "--select=B,C4,E,F,G,W,SIM1,PERF,PLE",
    "--ignore=E501,G004,F841,B904",
]


def _new_modules():
    return [
        os.path.join("py", f) for f in wheelbuild.overlay_files() if f.endswith(".py")
    ]


def test_new_modules_pass_upstream_mypy():
    result = subprocess.run(
        [sys.executable, "-m", "mypy", *MYPY_FLAGS, *_new_modules()],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_new_modules_pass_upstream_ruff():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--no-cache",
            *RUFF_FLAGS,
            *_new_modules(),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
