"""export: the series becomes PR branches on an upstream checkout.

A fake upstream checkout (the real 2.14.0 sources in upstream layout, with the
shape of upstream's CI manifest and plugin docs index) stands in for
pytorch/TensorRT; the patch mails and new files are made in the test against
it, so the tests do not depend on what ``patches/`` holds.
"""

import os
import shutil
import subprocess
import sys

import pytest
from patchset import PatchsetError, export, series, tree

CALLER = "Test Caller <caller@example.org>"  # conftest: whoever exports
FIELDS = (
    "Origin: other\nBug: https://github.com/pytorch/TensorRT/issues/4240\n"
    "Forwarded: no\nLast-Update: 2026-12-02\n"
)


def mail(subject: str, diff: str, adds=(), description=None) -> str:
    """A patch as refresh stores it: git format-patch's mail without an identity
    or a date, the DEP-3 fields in the body."""
    if description is None:
        description = (
            "Longer explanation of the change,\nover two lines.\n\nSecond paragraph."
        )
    fields = FIELDS + ("Adds: " + "\n ".join(adds) + "\n" if adds else "")
    return (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
        f"Subject: [PATCH] {subject}\n\n{description}\n\n{fields}\n{diff}"
    )


# The shape of upstream's tests/ci/suites.py around the suite that lists files.
SUITES = """\
_L2 = [
    Suite(
        "plugins-automatic",
        tier="l2",
        paths=(
            "automatic_plugin/test_automatic_plugin.py",
        ),
        overrides={"rtx": {"paths": ("automatic_plugin/",)}},
    ),
]
"""


# The shape of upstream's plugin docs index (docsrc/tutorials/extensibility/plugins).
DOCS_INDEX = """\
Plugins
=======

.. toctree::
   :maxdepth: 1

   plugins
   Example: Auto-generate a Plugin <../../_rendered_examples/dynamo/auto_generate_plugins>
"""


def git(cwd, *args, input=None, check=True) -> str:
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=check,
        capture_output=True,
        text=True,
        input=input,
    ).stdout


def mark(root, rel: str, index: int, tag: str) -> None:
    path = os.path.join(root, "py", "torch_tensorrt", rel)
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    lines[index] += f"  # {tag}"
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


@pytest.fixture(scope="module")
def base_src(tmp_path_factory):
    dest = tmp_path_factory.mktemp("base")
    tree.base_sources(str(dest), "standard")
    return dest


@pytest.fixture
def upstream(base_src, tmp_path):
    """A clean fake pytorch/TensorRT checkout on branch main, with its own identity."""
    repo = tmp_path / "upstream"
    shutil.copytree(base_src / "py", repo / "py")
    (repo / "tests" / "py").mkdir(parents=True)
    (repo / "tests" / "py" / "x.txt").write_text("upstream test data\n")
    (repo / "tests" / "ci").mkdir()
    (repo / "tests" / "ci" / "suites.py").write_text(SUITES)
    docs = repo / "docsrc" / "tutorials" / "extensibility" / "plugins"
    docs.mkdir(parents=True)
    (docs / "index.rst").write_text(DOCS_INDEX)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Upstream Dev")
    git(repo, "config", "user.email", "dev@example.org")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "upstream")
    return repo


MODULE = "py/torch_tensorrt/dynamo/_inplace_plugins.py"
TEST = "tests/py/dynamo/test_inplace_plugins.py"
PLUGIN_TEST = "tests/py/dynamo/automatic_plugin/test_first.py"
PAGE = "docsrc/tutorials/extensibility/plugins/inplace.rst"
EXAMPLE = "examples/dynamo/inplace_example.py"
NEW_FILES = {
    MODULE: "X = 1\n",
    TEST: "def test_x():\n    pass\n",
    PLUGIN_TEST: "def test_y():\n    pass\n",
    PAGE: "In place\n========\n",
    EXAMPLE: '"""\n.. _inplace:\n\nIn-place plugins\n================\n"""\n',
}
# name -> (subject, [(file, line index to mark)], new files it brings)
PATCHES = {
    "0001-enums-two-hunks.patch": (
        "fix(enums): two distant changes",
        [("_enums.py", 2), ("_enums.py", 1400)],
        [],
    ),
    "0002-compile.patch": (
        "fix(compile): one change",
        [("_compile.py", 100)],
        [MODULE, TEST],
    ),
    "0003-settings.patch": (
        "feat(settings): one change",
        [("dynamo/_settings.py", 50)],
        [PLUGIN_TEST],
    ),
}
SERIES = """\
# comment
[first] The first piece
decide: something a reviewer decides
0001-enums-two-hunks.patch
0002-compile.patch

[second] The second piece
0003-settings.patch

[docs] Docs of both
docsrc/tutorials/extensibility/plugins/inplace.rst
examples/dynamo/inplace_example.py
"""


@pytest.fixture
def patch_set(upstream, tmp_path):
    """(patch dir, root of new files): PATCHES made against ``upstream``, in order."""
    scratch = tmp_path / "scratch"
    git(tmp_path, "clone", "-q", str(upstream), str(scratch))
    out = tmp_path / "patches"
    out.mkdir()
    for name, (subject, edits, adds) in PATCHES.items():
        for rel, index in edits:
            mark(scratch, rel, index, name[:4])
        (out / name).write_text(mail(subject, git(scratch, "diff", "--no-color"), adds))
        git(
            scratch, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qam", name
        )
    (out / "series").write_text(SERIES)
    root = tmp_path / "root"
    for rel, text in NEW_FILES.items():
        os.makedirs(os.path.dirname(root / rel), exist_ok=True)
        (root / rel).write_text(text)
    return str(out), str(root)


def snapshot(repo) -> tuple:
    """Everything export must leave alone: refs, HEAD, index and work tree state."""
    return (
        git(repo, "for-each-ref"),
        git(repo, "symbolic-ref", "HEAD"),
        git(repo, "rev-parse", "HEAD"),
        git(repo, "status", "--porcelain", "--untracked-files=all", "--ignored"),
        git(repo, "ls-files", "-s"),
    )


def names(repo, rev) -> list:
    return git(repo, "show", "--name-only", "--format=", rev).split()


def test_one_branch_per_piece_each_patch_a_commit_with_its_tests(
    upstream, patch_set, tmp_path
):
    before = snapshot(upstream)
    prs = tmp_path / "prs"
    summary = export.export(str(upstream), "inplace", True, *patch_set, pr_dir=str(prs))
    branches = ["inplace/01-first", "inplace/02-second", "inplace/03-docs"]
    assert summary.startswith(f"created 3 branch(es) in {upstream}")
    assert snapshot(upstream)[1:] == before[1:], "the checkout itself was touched"
    first = git(
        upstream,
        "log",
        "--reverse",
        "--format=%s|%an <%ae>|%cn",
        "main..inplace/01-first",
    )
    assert first.splitlines() == [
        f"fix(enums): two distant changes|{CALLER}|Upstream Dev",
        f"fix(compile): one change|{CALLER}|Upstream Dev",
    ]
    # the new module and its test travel in the commit of the patch that brings them
    assert names(upstream, "inplace/01-first") == [
        "py/torch_tensorrt/_compile.py",
        MODULE,
        TEST,
    ]
    message = git(upstream, "log", "-1", "--format=%B", "inplace/01-first")
    assert (
        message
        == "fix(compile): one change\n\nLonger explanation of the change,\nover two lines.\n\nSecond paragraph.\n\n"
    )
    second = git(
        upstream,
        "log",
        "--reverse",
        "--format=%s",
        "inplace/01-first..inplace/02-second",
    )
    assert second.splitlines() == [
        "feat(settings): one change",
        "ci: run the new plugin tests in plugins-automatic",
    ]
    assert '"automatic_plugin/test_first.py",' in git(
        upstream, "show", "inplace/02-second:tests/ci/suites.py"
    )
    docs = git(
        upstream,
        "log",
        "--reverse",
        "--format=%s",
        "inplace/02-second..inplace/03-docs",
    )
    assert docs.splitlines() == [
        "docs: add inplace and inplace_example",
        "docs: list the new plugin pages and examples",
    ]
    index = git(
        upstream,
        "show",
        f"{branches[2]}:docsrc/tutorials/extensibility/plugins/index.rst",
    )
    assert (
        "   inplace\n   Example: In-place plugins <../../_rendered_examples/dynamo/inplace_example>"
        in index
    )
    for k, branch in enumerate(branches[1:], 1):
        assert (
            git(
                upstream,
                "merge-base",
                "--is-ancestor",
                branches[k - 1],
                branch,
                check=False,
            )
            == ""
        )
    first_pr = (prs / "01-first.md").read_text()
    assert first_pr.startswith("# The first piece\n\nPR 1 of a stack of 3, on `")
    assert "- something a reviewer decides" in first_pr
    assert "The second piece" not in first_pr  # each PR speaks of itself
    assert f"python -m pytest {TEST}" in first_pr
    assert sorted(os.listdir(prs)) == ["01-first.md", "02-second.md", "03-docs.md"]


def test_without_stack_one_branch_or_nothing(upstream, patch_set, tmp_path):
    export.export(str(upstream), "all", False, *patch_set)
    assert git(upstream, "rev-list", "--count", "main..all").strip() == "6"
    (tmp_path / "patches" / "0003-settings.patch").write_text(
        mail(
            "feat(settings): stale",
            "diff --git a/py/torch_tensorrt/_enums.py b/py/torch_tensorrt/_enums.py\n--- a/py/torch_tensorrt/_enums.py\n+++ b/py/torch_tensorrt/_enums.py\n@@ -1 +1 @@\n-no such line\n+x\n",
            [PLUGIN_TEST],
        )
    )
    with pytest.raises(PatchsetError) as refused:
        export.export(str(upstream), "other", False, *patch_set)
    assert "no branch created" in str(refused.value)
    assert (
        "piece 'second' (2 of 3) does not apply onto the pieces before it (1 conflict(s)): 0003-settings.patch: patch failed: py/torch_tensorrt/_enums.py:1"
        in str(refused.value)
    )
    assert "other" not in git(upstream, "branch")


def test_the_stack_ends_before_the_first_piece_that_does_not_apply(upstream, patch_set):
    mark(upstream, "dynamo/_settings.py", 50, "upstream moved on")
    git(upstream, "commit", "-qam", "upstream moved on")
    with pytest.raises(PatchsetError) as refused:
        export.export(str(upstream), "inplace", True, *patch_set)
    message = str(refused.value)
    assert message.startswith(f"created 1 branch(es) in {upstream}")
    assert "piece 'second' (2 of 3) does not apply" in message
    assert (
        "0003-settings.patch: patch failed: py/torch_tensorrt/dynamo/_settings.py:"
        in message
    )
    assert git(upstream, "branch", "--list", "inplace/*").split() == [
        "inplace/01-first"
    ]


def test_a_compat_piece_is_exported_only_onto_the_released_sources(upstream, patch_set):
    """A ``compat-`` piece (what 2.14.0 needs, main does not) is left out unless asked."""
    series_file = os.path.join(patch_set[0], "series")
    with open(series_file) as f:
        text = f.read()
    with open(series_file, "w") as f:
        f.write(text.replace("[second]", "[compat-second]"))
    export.export(str(upstream), "onto-main", True, *patch_set)
    assert git(upstream, "branch", "--list", "onto-main/*").split() == [
        "onto-main/01-first",
        "onto-main/02-docs",
    ]
    export.export(str(upstream), "base", True, *patch_set, with_compat=True)
    assert git(upstream, "branch", "--list", "base/*").split() == [
        "base/01-first",
        "base/02-compat-second",
        "base/03-docs",
    ]


def test_a_patch_already_merged_upstream_is_named_as_such(upstream, patch_set):
    series.apply_patch(
        series.Patch(os.path.join(patch_set[0], "0001-enums-two-hunks.patch")),
        str(upstream),
        1,
    )
    git(upstream, "commit", "-qam", "merged upstream")
    with pytest.raises(
        PatchsetError, match="0001-enums-two-hunks.patch: already applied upstream"
    ):
        export.export(str(upstream), "inplace", True, *patch_set)


@pytest.mark.parametrize(
    "spoil, error",
    [
        (lambda r: (r / "py" / "new.txt").write_text("x"), "dirty upstream checkout"),
        (
            lambda r: git(r, "branch", "inplace/02-second"),
            "branch inplace/02-second already exists",
        ),
        (
            lambda r: git(r, "branch", "inplace"),
            "branch inplace exists in .*, so branch inplace/01-first cannot be created",
        ),
    ],
)
def test_checkouts_and_branches_in_the_way_are_one_line_errors(
    upstream, patch_set, spoil, error
):
    spoil(upstream)
    with pytest.raises(PatchsetError, match=error):
        export.export(str(upstream), "inplace", True, *patch_set)
    assert "inplace/01-first" not in git(upstream, "branch")


def test_non_checkouts_are_refused(tmp_path, patch_set):
    with pytest.raises(PatchsetError, match="not a git work tree"):
        export.export(str(tmp_path / "missing"), "x", False, *patch_set)
    (tmp_path / "plain").mkdir()
    git(tmp_path / "plain", "init", "-q")
    with pytest.raises(PatchsetError, match="not a pytorch/TensorRT checkout"):
        export.export(str(tmp_path / "plain"), "x", False, *patch_set)


def test_a_commit_that_does_not_byte_compile_is_refused(upstream, patch_set):
    (tmp := os.path.join(patch_set[1], MODULE)) and open(tmp, "w").write(
        "def broken(:\n"
    )
    with pytest.raises(
        PatchsetError,
        match=r"commit 'fix\(compile\): one change' does not stand alone: py/torch_tensorrt/dynamo/_inplace_plugins.py does not byte-compile",
    ):
        export.export(str(upstream), "inplace", True, *patch_set)


def test_a_piece_whose_tests_fail_ends_the_stack(upstream, patch_set):
    with open(os.path.join(patch_set[1], PLUGIN_TEST), "w") as f:
        f.write("def test_y():\n    assert False, 'broken'\n")
    with pytest.raises(
        PatchsetError,
        match="piece 'second' .2 of 3. applies but its tests fail at its last commit: 1 failed",
    ):
        export.export(
            str(upstream), "inplace", True, *patch_set, test_python=sys.executable
        )
    assert git(upstream, "branch", "--list", "inplace/*").split() == [
        "inplace/01-first"
    ]


def test_a_pr_description_is_whole(tmp_path):
    """Each commit's whole description (its reproduction and its last paragraph
    included, not its Tests: line), the piece's notes under their headings, patch
    numbers said as the commits of the stack, Bug and Bug-Related links."""
    description = (
        "It failed before.\nMinimal reproduction on a GPU:\n\n    import torch\n"
        "    m(x)\n\nA last paragraph, cut before.\n\nTests: tests/py/test_x.py."
    )
    (tmp_path / "0001-x.patch").write_text(mail("fix: x", "", description=description))
    (tmp_path / "0002-y.patch").write_text(
        mail("fix: y", "", description="Why y, after 0001 (0001-0002).").replace(
            "Bug: ", "Bug-Related: "
        )
    )
    (tmp_path / "series").write_text(
        "[x] X\ndecide: whether 0002 stays\nchange: x is refused\n"
        "risk: none for models without x\nverified: CPU only\n"
        "overlap: #1 does part of 0001\n0001-x.patch\n0002-y.patch\n"
    )
    pieces = series.read_series(str(tmp_path), str(tmp_path / "none"))
    text = export.pr_description(pieces, 1, ["b/01-x"], "main")
    assert "### 1. fix: x\n\nIt failed before." in text
    assert "    import torch\n    m(x)\n\nA last paragraph, cut before.\n" in text
    assert "Tests: tests/py/test_x.py" not in text
    assert (
        "### 2. fix: y\n\nWhy y, after commit 1 of this PR (commit 1 of this PR to "
        "commit 2 of this PR).\n" in text
    )
    for heading, line in (
        ("Risk", "- none for models without x"),
        ("What a reviewer must decide", "- whether commit 2 of this PR stays"),
        ("Upstream work it overlaps", "- #1 does part of commit 1 of this PR"),
        ("Verified", "- CPU only"),
    ):
        assert f"## {heading}\n\n{line}\n" in text, heading
    assert "x is refused" not in text  # the behaviour change is the mails' to say
    assert text.count("https://github.com/pytorch/TensorRT/issues/") >= 1
    one = export.pr_description(pieces, 1, ["all"], "main", stack=False)
    assert "PR 1 of" not in one and "branch `all`" in one


def test_a_one_patch_pr_description_is_its_mail(tmp_path):
    """A piece of one patch: its title, then the mail's description, no heading."""
    (tmp_path / "0001-x.patch").write_text(mail("fix: x", "", description="Why x."))
    (tmp_path / "series").write_text("[x] The x fix\nverified: CPU\n0001-x.patch\n")
    pieces = series.read_series(str(tmp_path), str(tmp_path / "none"))
    text = export.pr_description(pieces, 1, ["b/01-x"], "main")
    assert text.startswith(
        "# The x fix\n\nPR 1 of a stack of 1, on `main`.\n\nWhy x.\n"
    )
    assert "###" not in text and "## Risk" not in text


def mini_checkout(tmp_path, package_init=""):
    """The smallest pytorch/TensorRT-shaped repository, one commit on main."""
    repo = tmp_path / "mini"
    (repo / "py" / "torch_tensorrt" / "dynamo").mkdir(parents=True)
    (repo / "py" / "torch_tensorrt" / "__init__.py").write_text(package_init)
    (repo / "py" / "torch_tensorrt" / "dynamo" / "__init__.py").write_text("")
    (repo / "tests" / "py").mkdir(parents=True)
    (repo / "tests" / "py" / "README").write_text("x\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=u", "-c", "user.email=u@e", "commit", "-qm", "base")
    return repo


def test_verify_imports_names_the_commit_that_does_not_import(tmp_path):
    """A commit whose module imports a new module that a later patch brings."""
    repo = mini_checkout(tmp_path)
    scratch = tmp_path / "scratch"
    git(tmp_path, "clone", "-q", str(repo), str(scratch))
    init = scratch / "py" / "torch_tensorrt" / "dynamo" / "__init__.py"
    init.write_text("from torch_tensorrt.dynamo import helper_module_b\n")
    out = tmp_path / "patches"
    out.mkdir()
    (out / "0001-x.patch").write_text(
        mail("feat: use the helper", git(scratch, "diff"))
    )
    (out / "series").write_text("[x] X\n0001-x.patch\n")
    root = tmp_path / "root"
    (root / "py" / "torch_tensorrt" / "dynamo").mkdir(parents=True)
    (root / "py" / "torch_tensorrt" / "dynamo" / "helper_module_b.py").write_text(
        "B = 1\n"
    )
    (root / "tests" / "py").mkdir(parents=True)
    (out / "series").write_text(
        "[x] X\n0001-x.patch\npy/torch_tensorrt/dynamo/helper_module_b.py\n"
    )
    with pytest.raises(
        PatchsetError,
        match=r"commit 'feat: use the helper' does not stand alone: importing "
        r"torch_tensorrt.dynamo fails: ImportError",
    ):
        export.export(
            str(repo), "pr", False, str(out), str(root), verify_python=sys.executable
        )
    assert "pr" not in git(repo, "branch")
    # brought by the patch (its Adds field), the module is in that commit and imports
    (out / "0001-x.patch").write_text(
        mail(
            "feat: use the helper",
            git(scratch, "diff"),
            ["py/torch_tensorrt/dynamo/helper_module_b.py"],
        )
    )
    (out / "series").write_text("[x] X\n0001-x.patch\n")
    export.export(
        str(repo), "pr", False, str(out), str(root), verify_python=sys.executable
    )
    assert names(repo, "pr") == [
        "py/torch_tensorrt/dynamo/__init__.py",
        "py/torch_tensorrt/dynamo/helper_module_b.py",
    ]


def test_a_python_that_cannot_import_the_base_is_the_environment_s_fault(tmp_path):
    """--verify-imports with a Python lacking the package's dependencies is
    refused before any patch, saying so (it used to blame the first patch)."""
    repo = mini_checkout(tmp_path, "import a_dependency_this_python_lacks\n")
    out = tmp_path / "patches"
    out.mkdir()
    (out / "series").write_text("")
    with pytest.raises(
        PatchsetError,
        match=r"cannot import the sources the patches go onto, before any patch "
        r"\(ModuleNotFoundError: No module named 'a_dependency_this_python_lacks'\): "
        r"this is the environment, not a patch",
    ):
        export.export(
            str(repo),
            "pr",
            False,
            str(out),
            str(tmp_path / "none"),
            verify_python=sys.executable,
        )
    assert "pr" not in git(repo, "branch")


def test_the_repository_series_exports_onto_the_released_2_14_0_sources(tmp_path):
    """This repository's own series: a branch per piece, each patch's tests in its commit."""
    base = tmp_path / "base"
    export.make_base(str(base), "standard")
    pieces = series.read_series()
    assert any(p.is_compat for p in pieces)
    export.export(str(base), "inplace", True, with_compat=True)
    branches = git(
        base, "branch", "--list", "inplace/*", "--format=%(refname:short)"
    ).split()
    assert branches == [f"inplace/{k:02d}-{p.id}" for k, p in enumerate(pieces, 1)]
    subjects = git(
        base, "log", "--reverse", "--format=%s", f"v2.14.0..{branches[-1]}"
    ).splitlines()
    assert [s for s in subjects if not s.startswith("docs: add")] == [
        p.subject for p in series.all_patches(pieces)
    ]
    for patch in series.all_patches(pieces):
        rev = git(
            base,
            "log",
            "--format=%H",
            "--fixed-strings",
            f"--grep={patch.subject}",
            branches[-1],
        ).split()[0]
        brought = [f for f in patch.adds if not f.startswith(series.LOCAL_ONLY)]
        assert names(base, rev) == sorted(
            set(patch.touched_files() + brought)
        ), patch.name


def test_a_base_that_fails_at_import_for_its_own_reason_is_left_to_the_patches(
    tmp_path,
):
    """The released sources raise at import on a host without a GPU, which the
    first patch fixes: that is not the environment's fault, and the export goes on."""
    repo = mini_checkout(tmp_path, 'raise RuntimeError("Found no NVIDIA driver")\n')
    scratch = tmp_path / "scratch"
    git(tmp_path, "clone", "-q", str(repo), str(scratch))
    (scratch / "py" / "torch_tensorrt" / "__init__.py").write_text("X = 1\n")
    out = tmp_path / "patches"
    out.mkdir()
    (out / "0001-x.patch").write_text(mail("fix: import", git(scratch, "diff")))
    (out / "series").write_text("[x] X\n0001-x.patch\n")
    summary = export.export(
        str(repo), "pr", False, str(out), str(tmp_path), verify_python=sys.executable
    )
    assert summary.startswith(f"created 1 branch(es) in {repo}")


def test_three_way_merges_a_moved_context_and_names_a_real_conflict(tmp_path):
    """``tree.am(three_way=True)``: a patch made on one version applies to another
    whose lines near the hunk moved; a hunk whose own lines changed is a conflict,
    named with its file (the export onto upstream main relies on both)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "made")
    git(repo, "config", "user.name", "t")
    git(repo, "config", "user.email", "t@e")
    rel = "py/torch_tensorrt/m.py"
    os.makedirs(repo / "py/torch_tensorrt")
    lines = [f"x{k} = {k}\n" for k in range(30)]
    (repo / rel).write_text("".join(lines))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "made on")
    (repo / rel).write_text("".join(lines[:20] + ["x20 = 'patched'\n"] + lines[21:]))
    patch_file = tmp_path / "0001-p.patch"
    patch_file.write_text(mail("feat: p", git(repo, "diff", "--no-color")))
    git(repo, "checkout", "-q", "--", rel)
    patch = series.Patch(str(patch_file))

    def upstream(edit_line: int, name: str) -> None:
        git(repo, "checkout", "-q", "-b", name, "made")
        moved = list(lines)
        moved[edit_line] = f"x{edit_line} = 'upstream'\n"
        (repo / rel).write_text("".join(moved))
        git(repo, "commit", "-qam", f"upstream {name}")

    upstream(18, "moved")  # inside the hunk's context: plain am refuses
    assert tree.am(str(repo), patch, [], None)
    assert tree.am(str(repo), patch, [], None, three_way=True) == []
    assert "x20 = 'patched'" in (repo / rel).read_text()
    assert "x18 = 'upstream'" in (repo / rel).read_text()

    upstream(20, "changed")  # the hunk's own line: a real conflict
    failed = tree.am(str(repo), patch, [], None, three_way=True)
    assert any(rel in reason and "CONFLICT" in reason for reason in failed), failed
    assert git(repo, "status", "--porcelain") == ""
