"""Tests of the patch-set tooling (tools/patchset): build, pins, series, trees.

They import ``patchset`` from tools/ (tools/run-tests puts it on PYTHONPATH) and
never import torch_tensorrt from the source tree.
"""

import os
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
