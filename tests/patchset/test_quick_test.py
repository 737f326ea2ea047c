"""tools/quick-test runs from the install's environment or says in one line why not."""

import os
import subprocess
import sys
import venv

from patchset import REPO_ROOT


def _run(python):
    return subprocess.run(
        [os.path.join(REPO_ROOT, "tools", "quick-test"), "--collect-only"],
        env=dict(os.environ, PYTHON=python, VIRTUAL_ENV=""),
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_an_environment_without_the_wheel_is_named_in_one_line(tmp_path):
    venv.create(tmp_path / "env", with_pip=False)
    python = str(tmp_path / "env" / "bin" / "python")
    result = _run(python)
    assert result.returncode == 2, result
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(
        f"quick-test: {python} has none none, this tree builds 2.14.0+"
    )
    assert "build and install the wheel again (README, Install)" in line


def test_a_missing_python_is_named(tmp_path):
    result = _run(str(tmp_path / "nothing" / "python"))
    assert result.returncode == 2
    assert "no Python at" in result.stderr and "README" in result.stderr


def test_this_environment_collects_the_subset():
    """The wheel of this tree is installed here (tools/run-tests did it)."""
    result = _run(sys.executable)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "test_state_program_fuzzer" not in result.stdout
    assert "test_mutating_op_converters" in result.stdout
