"""export: the series becomes a PR branch on an upstream checkout, or nothing changes at all.

A fake upstream checkout (the real 2.14.0 sources in upstream layout, plus
``tests/py``) stands in for pytorch/TensorRT; the patches are made in the
test against it, so the tests do not depend on what ``patches/`` holds.
"""

import os
import shutil
import subprocess

import pytest
from patchset import PatchsetError, export, series, tree

AUTHOR = "Ada Lovelace <ada@example.org>"


def header(description: str, author: str = AUTHOR) -> str:
    return (
        f"Description: {description}\n"
        " Longer explanation of the change,\n"
        " over two lines.\n"
        " .\n"
        " Second paragraph.\n"
        f"Author: {author}\n"
        "Origin: other\n"
        "Bug: https://github.com/pytorch/TensorRT/issues/4240\n"
        "Forwarded: no\n"
        "Last-Update: 2026-12-02\n"
    )


# name -> (description, [(file, line index to mark)])
PATCHES = {
    "0001-enums-two-hunks.patch": (
        "fix(enums): two distant changes",
        [("_enums.py", 2), ("_enums.py", 1400)],
    ),
    "0002-compile.patch": ("fix(compile): one change", [("_compile.py", 100)]),
    "0003-settings.patch": (
        "feat(settings): one change",
        [("dynamo/_settings.py", 50)],
    ),
}


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


@pytest.fixture
def patch_dir(upstream, tmp_path):
    """A series of PATCHES made against ``upstream``, each on top of the previous one."""
    scratch = tmp_path / "scratch"
    git(tmp_path, "clone", "-q", str(upstream), str(scratch))
    out = tmp_path / "patches"
    out.mkdir()
    for name, (description, edits) in PATCHES.items():
        for rel, index in edits:
            mark(scratch, rel, index, name[:4])
        diff = git(scratch, "diff", "--no-color")
        (out / name).write_text(header(description) + "\n" + diff)
        git(
            scratch, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qam", name
        )
    (out / "series").write_text("".join(n + "\n" for n in PATCHES))
    return out


@pytest.fixture
def overlay(tmp_path):
    """New modules and tests to add: (overlay_root, tests_root)."""
    mods = tmp_path / "overlay"
    (mods / "torch_tensorrt" / "dynamo").mkdir(parents=True)
    (mods / "torch_tensorrt" / "dynamo" / "_inplace_plugins.py").write_text("X = 1\n")
    (mods / "torch_tensorrt" / "dynamo" / "__pycache__").mkdir()
    (mods / "torch_tensorrt" / "dynamo" / "__pycache__" / "x.pyc").write_bytes(b"junk")
    tests = tmp_path / "tests-py"
    (tests / "dynamo").mkdir(parents=True)
    (tests / "dynamo" / "test_inplace_plugins.py").write_text(
        "def test_x():\n    pass\n"
    )
    return mods, tests


def caller_identity() -> str:
    """The git identity of whoever runs the tests, in this repository."""
    ident = git(series.REPO_ROOT, "var", "GIT_AUTHOR_IDENT").strip()
    return ident.rsplit(" ", 2)[0]


def snapshot(repo) -> tuple:
    """Everything export must leave alone: refs, HEAD, index and work tree state."""
    return (
        git(repo, "for-each-ref"),
        git(repo, "symbolic-ref", "HEAD"),
        git(repo, "rev-parse", "HEAD"),
        git(repo, "status", "--porcelain", "--untracked-files=all", "--ignored"),
        git(repo, "ls-files", "-s"),
    )


def test_success_one_commit_per_patch_plus_overlay(upstream, patch_dir, overlay):
    before = snapshot(upstream)
    enums_before = (upstream / "py/torch_tensorrt/_enums.py").read_text()
    summary = export.export(
        str(upstream), "pr-branch", str(patch_dir), str(overlay[0]), str(overlay[1])
    )
    assert "\n" not in summary and "pr-branch" in summary and "4 commit(s)" in summary

    subjects = git(
        upstream, "log", "--reverse", "--format=%s", "main..pr-branch"
    ).splitlines()
    assert subjects == [d for d, _ in PATCHES.values()] + [
        "feat: add _inplace_plugins, with tests"
    ]
    assert git(upstream, "rev-parse", "pr-branch~4") == git(
        upstream, "rev-parse", "main"
    )

    first = git(upstream, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%B", "pr-branch~3")
    author, committer, message = first.split("|", 2)
    assert author == caller_identity(), "the caller's git identity is the default"
    assert (
        committer == "Upstream Dev <dev@example.org>"
    ), "the checkout's identity was not used"
    assert message == (
        "fix(enums): two distant changes\n\nLonger explanation of the change,\n"
        "over two lines.\n\nSecond paragraph.\n\n"
    ), "the message is the description alone, without the DEP-3 fields"

    enums = git(upstream, "show", "pr-branch:py/torch_tensorrt/_enums.py")
    assert "# 0001" in enums.split("\n")[2] and "# 0001" in enums.split("\n")[1400]
    files = git(upstream, "show", "--name-status", "--format=", "pr-branch").split("\n")
    assert files[:2] == [
        "A\tpy/torch_tensorrt/dynamo/_inplace_plugins.py",
        "A\ttests/py/dynamo/test_inplace_plugins.py",
    ], "byte code or caches were exported, or files are missing"

    assert (
        snapshot(upstream)[1:] == before[1:]
    ), "HEAD, index or work tree of the checkout changed"
    assert (upstream / "py/torch_tensorrt/_enums.py").read_text() == enums_before


def test_without_new_files_there_is_no_overlay_commit(upstream, patch_dir, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    summary = export.export(
        str(upstream), "only-patches", str(patch_dir), str(empty), str(empty)
    )
    assert "3 commit(s)" in summary
    assert git(upstream, "rev-list", "--count", "main..only-patches").strip() == "3"


def test_conflicts_of_every_patch_are_reported_and_nothing_is_created(
    upstream, patch_dir, overlay
):
    mark(upstream, "_enums.py", 1400, "upstream moved on")  # breaks 0001 hunk #2 only
    mark(upstream, "_compile.py", 100, "upstream moved on")  # breaks 0002 hunk #1
    git(upstream, "commit", "-qam", "upstream moves on")
    clash = upstream / "py/torch_tensorrt/dynamo/_inplace_plugins.py"
    clash.write_text("# upstream has this module now\n")
    git(upstream, "add", "-A")
    git(upstream, "commit", "-qm", "upstream adds a module")
    before = snapshot(upstream)

    with pytest.raises(PatchsetError) as info:
        export.export(
            str(upstream), "pr-branch", str(patch_dir), str(overlay[0]), str(overlay[1])
        )
    message = str(info.value)
    assert "\n" not in message
    assert "0001-enums-two-hunks.patch: py/torch_tensorrt/_enums.py hunk #2" in message
    assert "hunk #1" not in message.split("0002")[0], "a hunk that applies was reported"
    assert "0002-compile.patch: py/torch_tensorrt/_compile.py hunk #1" in message
    assert "0003-settings.patch" not in message, "a patch that applies was reported"
    assert (
        "overlay: py/torch_tensorrt/dynamo/_inplace_plugins.py would overwrite an upstream file"
        in message
    )
    assert "no branch created" in message
    assert snapshot(upstream) == before, "the checkout changed although export failed"


def test_a_patch_already_merged_upstream_is_named_as_such(upstream, patch_dir):
    mark(upstream, "_compile.py", 100, "0002")
    git(upstream, "commit", "-qam", "upstream merged our 0002")
    with pytest.raises(
        PatchsetError, match=r"0002-compile.patch: already applied upstream"
    ):
        export.export(str(upstream), "pr-branch", str(patch_dir))


def test_dirty_checkouts_are_refused(upstream, patch_dir):
    (upstream / "untracked.txt").write_text("x\n")
    with pytest.raises(
        PatchsetError, match=r"^dirty upstream checkout: .*untracked.txt"
    ):
        export.export(str(upstream), "b", str(patch_dir))
    os.unlink(upstream / "untracked.txt")
    mark(upstream, "_enums.py", 2, "local edit")
    with pytest.raises(PatchsetError, match=r"^dirty upstream checkout: .*_enums.py"):
        export.export(str(upstream), "b", str(patch_dir))
    assert "refs/heads/b" not in git(upstream, "for-each-ref")


def test_non_checkouts_are_refused(tmp_path, patch_dir):
    plain = tmp_path / "plain"
    (plain / "py/torch_tensorrt/dynamo").mkdir(parents=True)
    (plain / "tests/py").mkdir(parents=True)
    with pytest.raises(PatchsetError, match=r"^not a git work tree: "):
        export.export(str(plain), "b", str(patch_dir))
    with pytest.raises(PatchsetError, match=r"^not a git work tree: .*does not exist"):
        export.export(str(tmp_path / "missing"), "b", str(patch_dir))
    other = tmp_path / "other"
    other.mkdir()
    (other / "README").write_text("x\n")
    git(other, "init", "-q")
    git(other, "add", "-A")
    git(other, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "x")
    with pytest.raises(
        PatchsetError,
        match=r"^not a pytorch/TensorRT checkout: .*py/torch_tensorrt/dynamo",
    ):
        export.export(str(other), "b", str(patch_dir))


def test_existing_or_invalid_branches_are_refused(upstream, patch_dir):
    git(upstream, "branch", "taken")
    with pytest.raises(PatchsetError, match=r"^branch taken already exists"):
        export.export(str(upstream), "taken", str(patch_dir))
    with pytest.raises(PatchsetError, match=r"^invalid branch name"):
        export.export(str(upstream), "bad..name", str(patch_dir))


def test_without_any_identity_author_is_required_and_committer_defaults(
    upstream, patch_dir, monkeypatch, tmp_path
):
    empty = tmp_path / "empty"
    empty.mkdir()
    git(upstream, "config", "--unset", "user.name")
    git(upstream, "config", "--unset", "user.email")
    monkeypatch.setenv("HOME", str(tmp_path))  # no global identity either
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in (
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "EMAIL",
    ):
        monkeypatch.delenv(var, raising=False)
    if git(series.REPO_ROOT, "config", "--get", "user.email", check=False).strip():
        pytest.skip("this repository's own git config names an author")
    monkeypatch.setenv(
        "GIT_DIR", str(tmp_path / "elsewhere")
    )  # must not redirect export's git calls
    args = (str(patch_dir), str(empty), str(empty))
    with pytest.raises(PatchsetError, match=r"^no git identity to author the commits"):
        export.export(str(upstream), "pr-branch", *args)
    export.export(str(upstream), "pr-branch", *args, author="A U <a@u.org>")
    monkeypatch.delenv("GIT_DIR")
    assert (
        git(upstream, "log", "-1", "--format=%an <%ae>|%cn <%ce>", "pr-branch").strip()
        == "A U <a@u.org>|patchset <patchset@localhost>"
    )


def test_author_option(upstream, patch_dir, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    args = (str(patch_dir), str(empty), str(empty))
    export.export(str(upstream), "given", *args, author="Grace Hopper <gh@example.org>")
    assert git(upstream, "log", "--format=%an <%ae>", "main..given").splitlines() == [
        "Grace Hopper <gh@example.org>"
    ] * len(PATCHES)
    export.export(str(upstream), "from-header", *args, author="header")
    assert git(
        upstream, "log", "--format=%an <%ae>", "main..from-header"
    ).splitlines() == [AUTHOR] * len(PATCHES)
    with pytest.raises(PatchsetError, match=r"--author 'nobody' is not 'Name <email>'"):
        export.export(str(upstream), "bad", *args, author="nobody")
    assert "bad" not in git(upstream, "branch")


def test_a_new_module_goes_with_the_first_patch_that_needs_it(upstream, tmp_path):
    scratch = tmp_path / "scratch"
    git(tmp_path, "clone", "-q", str(upstream), str(scratch))
    out = tmp_path / "patches"
    out.mkdir()
    names = []
    for k, line in enumerate(
        ["from ._helper import X", "pass  # unrelated", "from ._other import Y"], 1
    ):
        path = scratch / "py/torch_tensorrt/_compile.py"
        path.write_text(path.read_text() + line + "\n")
        name = f"000{k}-p{k}.patch"
        (out / name).write_text(
            header(f"feat: p{k}") + "\n" + git(scratch, "diff", "--no-color")
        )
        git(
            scratch, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qam", name
        )
        names.append(name)
    (out / "series").write_text("".join(n + "\n" for n in names))
    mods = tmp_path / "overlay"
    (mods / "torch_tensorrt").mkdir(parents=True)
    (mods / "torch_tensorrt" / "_helper.py").write_text("from ._util import Z\nX = Z\n")
    (mods / "torch_tensorrt" / "_util.py").write_text("Z = 1\n")
    (mods / "torch_tensorrt" / "_other.py").write_text("Y = 2\n")
    (mods / "torch_tensorrt" / "_unused.py").write_text("W = 3\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    summary = export.export(str(upstream), "pr", str(out), str(mods), str(empty))
    assert "3 new module(s) in the patch commits" in summary

    def added(rev):
        return sorted(
            git(upstream, "show", "--name-status", "--format=", rev).split()[1::2]
        )

    assert added("pr~3") == [
        "py/torch_tensorrt/_compile.py",
        "py/torch_tensorrt/_helper.py",
        "py/torch_tensorrt/_util.py",
    ], "the module, and the new module it imports, come with the patch"
    assert added("pr~2") == ["py/torch_tensorrt/_compile.py"]
    assert added("pr~1") == [
        "py/torch_tensorrt/_compile.py",
        "py/torch_tensorrt/_other.py",
    ]
    assert added("pr") == ["py/torch_tensorrt/_unused.py"]


def test_a_commit_that_does_not_byte_compile_is_refused(upstream, tmp_path):
    mods = tmp_path / "overlay"
    (mods / "torch_tensorrt").mkdir(parents=True)
    (mods / "torch_tensorrt" / "_broken.py").write_text("def f(:\n")
    empty = tmp_path / "patches"
    empty.mkdir()
    (empty / "series").write_text("")
    with pytest.raises(
        PatchsetError,
        match=r"does not stand alone: py/torch_tensorrt/_broken.py does not "
        r"byte-compile",
    ):
        export.export(str(upstream), "pr", str(empty), str(mods), str(tmp_path / "n"))
    assert "pr" not in git(upstream, "branch")


def test_a_branch_blocked_by_another_is_a_one_line_error(upstream, patch_dir):
    git(upstream, "branch", "inplace")
    with pytest.raises(PatchsetError) as caught:
        export.export(str(upstream), "inplace/01-x", str(patch_dir))
    assert str(caught.value) == (
        f"branch inplace exists in {upstream}, so branch inplace/01-x cannot be "
        "created; delete it or choose another --branch"
    )
    git(upstream, "branch", "pr/one")
    with pytest.raises(
        PatchsetError, match=r"^branch pr/one exists in .*, so branch pr "
    ):
        export.export(str(upstream), "pr", str(patch_dir))


def test_commit_message_from_dep3_header(tmp_path):
    path = tmp_path / "0001-x.patch"
    path.write_text(
        "Description: fix(x): subject line\n"
        " Body line.\n"
        "Author: Someone Else\n"
        "Bug: https://example.org/1\n"
        "\n"
        "diff --git a/py/torch_tensorrt/a.py b/py/torch_tensorrt/a.py\n"
    )
    message, author = export.commit_message(series.Patch("0001-x.patch", str(path)))
    assert message == "fix(x): subject line\n\nBody line.\n"
    assert author is None, "an Author without <email> cannot be a git author"
    path.write_text(
        "Origin: other\n\ndiff --git a/py/torch_tensorrt/a.py b/py/torch_tensorrt/a.py\n"
    )
    with pytest.raises(
        PatchsetError, match=r"0001-x.patch: header lacks 'Description:'"
    ):
        export.commit_message(series.Patch("0001-x.patch", str(path)))


def test_the_repository_patch_set_exports_onto_the_2_14_0_sources(upstream):
    """With this repository's own patches/, py/ and tests/py/ (whatever they hold now)."""
    patches = series.read_series()
    try:
        summary = export.export(str(upstream), "inplace-plugins")
    except PatchsetError as e:
        assert not patches and str(e).startswith("nothing to export"), str(e)
        return
    assert f"{len(patches)} patch commit(s)" in summary
    subjects = git(
        upstream, "log", "--reverse", "--format=%s", "main..inplace-plugins"
    ).splitlines()
    assert subjects[: len(patches)] == [
        export.commit_message(p)[0].split("\n")[0] for p in patches
    ]
    if os.path.isdir(os.path.join(series.REPO_ROOT, "docsrc")):
        assert subjects[-1] == "docs: list the new plugin pages and examples"
        index = git(
            upstream,
            "show",
            "inplace-plugins:docsrc/tutorials/extensibility/plugins/index.rst",
        )
        assert "   inplace_plugins\n" in index


def plugin_test_only(tmp_path):
    """(tests root with one new automatic_plugin test, an empty patch directory)."""
    tests = tmp_path / "tests-py"
    (tests / "dynamo" / "automatic_plugin").mkdir(parents=True)
    (tests / "dynamo" / "automatic_plugin" / "test_new_plugin.py").write_text("")
    empty = tmp_path / "patches"
    empty.mkdir()
    (empty / "series").write_text("")
    return tests, empty


def test_new_plugin_tests_are_registered_in_the_suite_manifest(upstream, tmp_path):
    mods = tmp_path / "overlay"
    (mods / "torch_tensorrt").mkdir(parents=True)
    (mods / "torch_tensorrt" / "_new_module.py").write_text("X = 1\n")
    tests, empty = plugin_test_only(tmp_path)
    export.export(str(upstream), "pr", str(empty), str(mods), str(tests))
    assert git(upstream, "log", "-1", "--format=%s", "pr") == (
        "ci: run the new plugin tests in plugins-automatic\n"
    )
    suites = git(upstream, "show", "pr:tests/ci/suites.py")
    assert suites == SUITES.replace(
        '            "automatic_plugin/test_automatic_plugin.py",\n',
        '            "automatic_plugin/test_automatic_plugin.py",\n'
        '            "automatic_plugin/test_new_plugin.py",\n',
    )


def test_a_manifest_without_the_suite_is_a_conflict_not_a_silent_skip(
    upstream, tmp_path
):
    git(upstream, "rm", "-q", "tests/ci/suites.py")
    git(upstream, "commit", "-q", "-m", "no manifest")
    tests, empty = plugin_test_only(tmp_path)
    with pytest.raises(
        PatchsetError, match="cannot find the paths=.*plugins-automatic"
    ):
        export.export(
            str(upstream), "pr", str(empty), str(tmp_path / "none"), str(tests)
        )
    assert "pr" not in git(upstream, "branch")


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
    """A commit whose module imports a new module only a later commit adds."""
    import sys

    repo = mini_checkout(tmp_path)
    scratch = tmp_path / "scratch"
    git(tmp_path, "clone", "-q", str(repo), str(scratch))
    target = scratch / "py" / "torch_tensorrt" / "dynamo" / "__init__.py"
    target.write_text("from torch_tensorrt.dynamo import helper_module_b\n")
    out = tmp_path / "patches"
    out.mkdir()
    (out / "0001-x.patch").write_text(
        header("feat: use the helper") + "\n" + git(scratch, "diff", "--no-color")
    )
    (out / "series").write_text("0001-x.patch\n")
    mods = tmp_path / "overlay"
    (mods / "torch_tensorrt" / "dynamo").mkdir(parents=True)
    # named in the patch only through another name: nothing attaches it
    (mods / "torch_tensorrt" / "dynamo" / "helper_module_b.py").write_text("B = 1\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    args = (str(out), str(tmp_path / "no-overlay"), str(empty))
    with pytest.raises(
        PatchsetError,
        match=r"commit 'feat: use the helper' does not stand alone: importing "
        r"torch_tensorrt.dynamo fails: ImportError",
    ):
        export.export(str(repo), "pr", *args, verify_python=sys.executable)
    assert "pr" not in git(repo, "branch")
    # with the module in the series' new files it goes into that commit and imports
    export.export(
        str(repo), "pr", str(out), str(mods), str(empty), verify_python=sys.executable
    )
    assert git(repo, "rev-list", "--count", "main..pr").strip() == "1"
    assert git(repo, "show", "--name-only", "--format=", "pr").split() == [
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
    empty = tmp_path / "empty"
    empty.mkdir()
    import sys

    with pytest.raises(
        PatchsetError,
        match=r"cannot import the sources the patches go onto, before any patch "
        r"\(ModuleNotFoundError: No module named 'a_dependency_this_python_lacks'\): "
        r"this is the environment, not a patch",
    ):
        export.export(
            str(repo),
            "pr",
            str(out),
            str(empty),
            str(empty),
            verify_python=sys.executable,
        )
    assert "pr" not in git(repo, "branch")
