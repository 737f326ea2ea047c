"""Tests of the patch-set tooling (tools/patchset): build, pins, series, trees.

They import ``patchset`` from tools/ (tools/run-tests puts it on PYTHONPATH) and
never import torch_tensorrt from the source tree.
"""

import os
import subprocess
import sys

TOOLS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "tools",
)
if TOOLS not in sys.path:
    sys.path.insert(0, TOOLS)


import importlib.util  # noqa: E402

import pytest  # noqa: E402

BENCH = os.path.join(TOOLS, "bench")

CALLER = ("Test Caller", "caller@example.org")


def git_as_caller(cwd, *args, input=None):
    """git in a throwaway repository, as the caller, with no configuration of the host."""
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        input=input,
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_AUTHOR_NAME": CALLER[0],
            "GIT_AUTHOR_EMAIL": CALLER[1],
            "GIT_COMMITTER_NAME": CALLER[0],
            "GIT_COMMITTER_EMAIL": CALLER[1],
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_CONFIG_NOSYSTEM": "1",
        },
    ).stdout


def new_repository(path, files):
    """A git repository at ``path`` with one commit of ``files``, tagged ``base``."""
    path.mkdir(parents=True)
    git_as_caller(path, "init", "-q", "-b", "main")
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    git_as_caller(path, "add", "-A")
    git_as_caller(path, "commit", "-qm", "base")
    git_as_caller(path, "tag", "base")
    return path


@pytest.fixture(autouse=True)
def caller_identity(monkeypatch):
    """The git identity of whoever exports: a fresh CI machine has none configured."""
    monkeypatch.setenv("GIT_AUTHOR_NAME", CALLER[0])
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", CALLER[1])


@pytest.fixture(scope="session")
def bench_script():
    """Loads a benchmark script of tools/bench by name, as a module."""

    def load(name):
        spec = importlib.util.spec_from_file_location(
            f"bench_{name}", os.path.join(BENCH, f"{name}.py")
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load
