"""materialize (git am) -> edit with git -> refresh (git format-patch) gives back
the series, and a new commit becomes a new patch with the new files it adds."""

import filecmp
import os
import shutil
import subprocess

import pytest
from conftest import CALLER
from patchset import PatchsetError, growth, series, tree


def git(cwd, *args, input=None):
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, input=input
    ).stdout


@pytest.fixture(scope="module")
def materialized(tmp_path_factory):
    dest = tmp_path_factory.mktemp("mt") / "tree"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("GIT_AUTHOR_NAME", CALLER[0])
        env.setenv("GIT_AUTHOR_EMAIL", CALLER[1])
        count = tree.materialize(str(dest))
    return dest, count


def repository_copy(dest):
    """What refresh writes into: patches/ and the new files' roots of this repository."""
    shutil.copytree(series.PATCH_DIR, dest / "patches")
    for root in series.NEW_FILE_ROOTS:
        if os.path.isdir(os.path.join(series.REPO_ROOT, root)):
            shutil.copytree(
                os.path.join(series.REPO_ROOT, root),
                dest / root,
                ignore=shutil.ignore_patterns("__pycache__"),
            )
    return dest


def test_one_commit_per_patch_with_its_files_one_branch_per_piece(materialized):
    dest, count = materialized
    pieces = series.read_series()
    assert count == len(series.all_patches(pieces))
    branches = git(dest, "branch", "--format=%(refname:short)").split()
    assert branches == [f"{k:02d}-{p.id}" for k, p in enumerate(pieces, 1)]
    previous = tree.BASE_TAG
    for branch, piece in zip(branches, pieces):
        commits = git(dest, "rev-list", "--reverse", f"{previous}..{branch}").split()
        assert len(commits) == len(piece.patches) + (1 if piece.files else 0)
        for commit, patch in zip(commits, piece.patches):
            assert (
                git(dest, "log", "-1", "--format=%s", commit).strip() == patch.subject
            )
            touched = git(dest, "show", "--name-only", "--format=", commit).split()
            assert touched == sorted(
                set(patch.touched_files() + patch.adds)
            ), patch.name
        previous = branch
    assert git(dest, "status", "--porcelain") == ""
    assert git(dest, "rev-parse", "--abbrev-ref", "HEAD").strip() == branches[-1]


def test_refresh_of_an_unchanged_tree_reproduces_the_repository(materialized, tmp_path):
    dest, _ = materialized
    out = repository_copy(tmp_path / "repo")
    (out / "patches" / "README").write_text("kept\n")
    tree.refresh(str(dest), str(out))
    comparison = filecmp.dircmp(series.PATCH_DIR, out / "patches")
    assert comparison.diff_files == [] and comparison.left_only == []
    assert comparison.right_only == [
        "README"
    ], "refresh touched another file of patches/"
    for rel in series.new_files():
        assert filecmp.cmp(os.path.join(series.REPO_ROOT, rel), out / rel, False), rel


@pytest.fixture
def work(materialized, tmp_path):
    dest, _ = materialized
    work = tmp_path / "work"
    shutil.copytree(dest, work)
    return work


def test_a_new_commit_is_a_new_patch_bringing_its_new_files(
    work, tmp_path, monkeypatch
):
    """Named from its subject, from the patch set (not the committer); its new
    module and test carried in the mail and named in its Adds; a test of this
    repository's own files it adds is a file of its piece instead."""
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Grace Hopper")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "grace@example.org")
    enums = work / "py/torch_tensorrt/_enums.py"
    enums.write_text(enums.read_text() + "\n# demo change\n")
    (work / "py/torch_tensorrt/dynamo/_demo_module.py").write_text("X = 1\n")
    (work / "tests/py/dynamo/test_demo_module.py").write_text(
        "def test_x():\n    pass\n"
    )
    # a test of this repository's own files: no mail carries it
    (work / "tests/examples/test_demo_readme.py").write_text(
        "def test_y():\n    pass\n"
    )
    git(work, "add", "-A")
    message = "fix(enums): a demo change\n\nWhy.\n\nOrigin: other\nForwarded: no\n"
    git(work, "commit", "-q", "-F", "-", input=message)
    out = repository_copy(tmp_path / "repo")
    tree.refresh(str(work), str(out))
    pieces = series.read_series(str(out / "patches"), str(out))
    last = series.all_patches(pieces)[-1]
    # numbered after the last patch (numbers of dropped patches are not reused)
    number = max(
        int(p[:4]) for p in os.listdir(series.PATCH_DIR) if p.endswith(".patch")
    )
    assert last.name == f"{number + 1:04d}-a-demo-change.patch"
    assert pieces[-1].patches[-1].name == last.name
    assert last.headers["from"] == tree.MAIL_FROM, "the committer went into the mail"
    assert "Grace" not in last.text
    assert last.subject == "fix(enums): a demo change"
    assert last.adds == [
        "py/torch_tensorrt/dynamo/_demo_module.py",
        "tests/py/dynamo/test_demo_module.py",
    ]
    assert last.touched_files() == [
        "py/torch_tensorrt/_enums.py",
        "py/torch_tensorrt/dynamo/_demo_module.py",
        "tests/py/dynamo/test_demo_module.py",
    ]
    assert last.created_files() == last.adds
    assert "tests/examples/test_demo_readme.py" in pieces[-1].files
    assert "Patch-Name" not in last.text and "\nDate: " not in last.text
    assert (out / "py/torch_tensorrt/dynamo/_demo_module.py").read_text() == "X = 1\n"


# Definitions of new files that no file of the patched tree uses: the model sizes
# that tools/hf/static_cache_decoders.py benchmarks.
UNUSED_AT_THE_END = ["tests/py/dynamo/models/hf_static_cache_models.py: BENCH"]

PLAIN_GIT_AM = """\
grep '\\.patch$' patches/series | sed 's|^|patches/|' | xargs cat | git -C ../sources am
"""


def test_contributing_s_plain_git_am_applies_the_series_to_the_2_14_0_sources(tmp_path):
    """No tool of ours: CONTRIBUTING's command, onto a repository of the base sources,
    gives every new module and test, each in the commit of its patch."""
    with open(os.path.join(series.REPO_ROOT, "CONTRIBUTING.md"), encoding="utf-8") as f:
        assert PLAIN_GIT_AM in f.read()
    base = tmp_path / "sources"
    tree.base_sources(str(base), "rtx")
    git(base, "init", "-q")
    git(base, "add", "-A")
    git(base, "commit", "-qm", "2.14.0")
    command = PLAIN_GIT_AM.replace("../sources", str(base))
    subprocess.run(["bash", "-ec", command], cwd=series.REPO_ROOT, check=True)
    patches = series.all_patches(series.read_series())
    log = git(base, "log", "--reverse", "--format=%s|%an", f"HEAD~{len(patches)}..")
    author = tree.MAIL_FROM.split(" <")[0]
    assert log.splitlines() == [f"{p.subject}|{author}" for p in patches]
    revs = git(base, "rev-list", "--reverse", f"HEAD~{len(patches)}..").split()
    for rev, patch in zip(revs, patches):
        added = git(base, "show", "--diff-filter=A", "--name-only", "--format=", rev)
        assert sorted(added.split()) == sorted(
            f for f in patch.adds if not f.startswith(series.LOCAL_ONLY)
        ), patch.name
    for rel in series.new_files():
        if rel.startswith(("py/", "tests/py/")):
            assert filecmp.cmp(os.path.join(series.REPO_ROOT, rel), base / rel), rel
    # each definition of a new file arrives with the first commit that uses it
    unused = growth.unused_by_commit(str(base), revs[0] + "~")
    assert unused[revs[-1]] == UNUSED_AT_THE_END
    for rev, patch in zip(revs, patches):
        assert set(unused[rev]) <= set(UNUSED_AT_THE_END), (patch.name, unused[rev])
    ahead = growth.docstrings_ahead(str(base), revs[0] + "~")
    assert {
        patch.name: ahead[rev] for rev, patch in zip(revs, patches) if ahead[rev]
    } == {}


def test_refresh_refuses_dirty_trees_and_stray_heads(work, tmp_path):
    out = repository_copy(tmp_path / "repo")
    enums = work / "py/torch_tensorrt/_enums.py"
    enums.write_text(enums.read_text() + "\n# x\n")
    with pytest.raises(PatchsetError, match="uncommitted changes"):
        tree.refresh(str(work), str(out))
    git(work, "checkout", "-q", "--", ".")
    git(work, "checkout", "-q", "01-cpu-only")
    with pytest.raises(PatchsetError, match="HEAD is not the last piece's branch"):
        tree.refresh(str(work), str(out))
    git(work, "branch", "-q", "-D", "03-mutation-lowering")
    with pytest.raises(PatchsetError, match="branch 03-mutation-lowering is missing"):
        tree.refresh(str(work), str(out))
    assert filecmp.dircmp(series.PATCH_DIR, out / "patches").diff_files == []


def test_refresh_refuses_to_delete_files_the_tree_lacks(materialized, tmp_path):
    """A file listed here but never committed in the tree used to be deleted."""
    dest, _ = materialized
    out = repository_copy(tmp_path / "repo")
    stray = out / "examples" / "dynamo" / "not_in_the_tree.py"
    stray.write_text("print('mine')\n")
    with pytest.raises(PatchsetError, match=r"delete \['examples/dynamo/not_in_the"):
        tree.refresh(str(dest), str(out))
    assert stray.read_text() == "print('mine')\n"
    assert filecmp.dircmp(series.PATCH_DIR, out / "patches").diff_files == []


def test_refresh_refuses_to_overwrite_uncommitted_edits(materialized, tmp_path):
    dest, _ = materialized
    out = repository_copy(tmp_path / "repo")
    git(out, "init", "-q")
    git(out, "add", "-A")
    git(out, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-q", "-m", "x")
    edited = out / series.new_files()[0]
    edited.write_text(edited.read_text() + "\n# an edit made here\n")
    with pytest.raises(PatchsetError, match="overwrite uncommitted changes"):
        tree.refresh(str(dest), str(out))
    assert edited.read_text().endswith("# an edit made here\n")
    # committed, it is the tree's version that refresh writes
    git(out, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qam", "y")
    tree.refresh(str(dest), str(out))
    assert filecmp.cmp(os.path.join(dest, series.new_files()[0]), edited, False)
