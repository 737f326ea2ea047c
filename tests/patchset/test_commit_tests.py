"""commit_tests: a test file run at every commit that has it, against that commit's code."""

import sys

from conftest import git_as_caller as git
from conftest import new_repository
from patchset import commit_tests

INIT = "py/torch_tensorrt/__init__.py"
TEST = "tests/py/test_value.py"


def installed(tmp_path, init):
    """An installed package: its compiled part (here a data file) is shared by every
    commit, its .py files are the commit's."""
    package = tmp_path / "installed" / "torch_tensorrt"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(init)
    (package / "_compiled.txt").write_text("shared\n")
    return package


def commit(repo, subject, files):
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", subject)
    return git(repo, "rev-parse", "HEAD").strip()


def test_each_commit_s_tests_run_against_that_commit_s_code(tmp_path):
    package = installed(tmp_path, "VALUE = 'installed'\n")
    repo = new_repository(tmp_path / "tree", {INIT: "VALUE = 1\n"})
    test_one = (
        "import os\n\nimport torch_tensorrt\n\n\n"
        "def test_one():\n    assert torch_tensorrt.VALUE >= 1\n"
        "    here = os.path.dirname(torch_tensorrt.__file__)\n"
        "    assert open(os.path.join(here, '_compiled.txt')).read() == 'shared\\n'\n"
    )
    first = commit(repo, "a test", {TEST: test_one})
    test_two = test_one + "\n\ndef test_two():\n    assert torch_tensorrt.VALUE == 2\n"
    second = commit(repo, "a test before its change", {TEST: test_two})
    third = commit(repo, "the change", {INIT: "VALUE = 2\n"})
    runs = commit_tests.run_at_commits(
        str(repo), "base", [TEST], str(package), sys.executable
    )
    by_commit = {c: found for c, _, found, _ in runs}
    assert list(by_commit) == [first, second, third]
    assert set(by_commit[first].values()) == {"pass"}
    assert sorted(by_commit[second].values()) == ["fail", "pass"]
    assert set(by_commit[third].values()) == {"pass"}
    assert len(by_commit[third]) == 2
    # up to a commit only
    runs = commit_tests.run_at_commits(
        str(repo), "base", [TEST], str(package), sys.executable, {TEST: second}
    )
    assert [c for c, _, _, _ in runs] == [first, second]


def test_a_file_that_does_not_collect_is_a_failure(tmp_path):
    package = installed(tmp_path, "")
    repo = new_repository(tmp_path / "tree", {INIT: "VALUE = 1\n"})
    commit(
        repo,
        "a test of a later helper",
        {TEST: "from torch_tensorrt import LATER\n\n\ndef test_x():\n    pass\n"},
    )
    ((_, _, found, _),) = commit_tests.run_at_commits(
        str(repo), "base", [TEST], str(package), sys.executable
    )
    assert "fail" in found.values()
