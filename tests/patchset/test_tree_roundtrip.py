"""materialize -> edit -> refresh gives back a series that builds the edited tree."""

import os
import subprocess

import pytest
from patchset import PatchsetError, series, tree


def git(cwd, *args, input=None):
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, input=input
    ).stdout


@pytest.fixture(scope="module")
def materialized(tmp_path_factory):
    dest = tmp_path_factory.mktemp("mt") / "tree"
    count = tree.materialize(str(dest))
    return dest, count


def test_one_commit_per_patch(materialized):
    dest, count = materialized
    assert count == len(series.read_series())
    subjects = git(dest, "log", "--reverse", "--format=%s").splitlines()
    assert subjects[0].startswith("base: torch-tensorrt 2.14.0")
    assert subjects[1 : 1 + count] == [p.name for p in series.read_series()]
    assert subjects[-1] == tree.OVERLAY_SUBJECT
    assert git(dest, "status", "--porcelain") == ""


def test_refresh_of_an_unchanged_tree_reproduces_the_repository(materialized, tmp_path):
    dest, _ = materialized
    out = tmp_path / "out"
    tree.refresh(str(dest), str(out))
    for patch in series.read_series():
        regenerated = (out / "patches" / patch.name).read_text()
        assert regenerated == patch.read(), f"{patch.name} changed on a no-op refresh"
    assert (out / "patches" / "series").read_text().split() == [
        p.name for p in series.read_series()
    ]


def test_refresh_in_place_keeps_the_stack(materialized, tmp_path):
    """A no-op refresh into a repository leaves its patches/ as it was, the stack
    included (a refresh once replaced patches/ whole and deleted it)."""
    dest, _ = materialized
    out = tmp_path / "repo"
    (out / "patches").mkdir(parents=True)
    for patch in series.read_series():
        (out / "patches" / patch.name).write_text(patch.read())
    with open(os.path.join(series.PATCH_DIR, "stack")) as f:
        stack = f.read()
    (out / "patches" / "stack").write_text(stack)
    (out / "patches" / "series").write_text("stale\n")
    tree.refresh(str(dest), str(out))
    assert (out / "patches" / "stack").read_text() == stack
    assert sorted(p.name for p in (out / "patches").iterdir()) == sorted(
        [p.name for p in series.read_series()] + ["series", "stack"]
    )


def test_new_patch_commit_and_new_module_round_trip(materialized, tmp_path):
    dest, _ = materialized
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(dest), str(work))
    git(work, "fetch", "-q", "origin", "tag", tree.BASE_TAG)
    git(work, "config", "user.name", "t")
    git(work, "config", "user.email", "t@example.org")
    enums = work / "py/torch_tensorrt/_enums.py"
    enums.write_text(enums.read_text() + "\n# demo change\n")
    (work / "py/torch_tensorrt/dynamo/_demo_new_module.py").write_text("X = 1\n")
    git(work, "add", "-A")
    header = "9999-demo-change.patch\n\nDescription: demo\nAuthor: t <t@example.org>\n"
    git(work, "commit", "-q", "--cleanup=verbatim", "-F", "-", input=header)
    out = tmp_path / "out"
    tree.refresh(str(work), str(out))
    names = (out / "patches" / "series").read_text().split()
    assert names[-1] == "9999-demo-change.patch"
    text = (out / "patches" / "9999-demo-change.patch").read_text()
    assert text.startswith(
        "Description: demo\nAuthor: t <t@example.org>\n\ndiff --git a/py/torch_tensorrt/_enums.py"
    )
    assert "+# demo change" in text
    assert "_demo_new_module" not in text, "a new module leaked into a patch"
    assert (
        out / "py/torch_tensorrt/dynamo/_demo_new_module.py"
    ).read_text() == "X = 1\n"


def test_refresh_refuses_unnamed_patch_commits_and_dirty_trees(materialized, tmp_path):
    dest, _ = materialized
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(dest), str(work))
    git(work, "fetch", "-q", "origin", "tag", tree.BASE_TAG)
    enums = work / "py/torch_tensorrt/_enums.py"
    enums.write_text(enums.read_text() + "\n# x\n")
    with pytest.raises(PatchsetError, match="uncommitted changes"):
        tree.refresh(str(work), str(tmp_path / "out"))
    git(
        work,
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@e",
        "commit",
        "-qam",
        "tweak enums",
    )
    with pytest.raises(
        PatchsetError, match="'tweak enums' is not a new NNNN-short-name.patch"
    ):
        tree.refresh(str(work), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists(), "a refused refresh wrote files"
