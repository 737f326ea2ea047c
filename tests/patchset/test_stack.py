"""The stack of upstream PRs: patches/stack, check of every prefix, export --stack.

The real stack is checked against the real series; the error cases, the prefix
runner and ``export --stack`` use a fake series and a fake upstream checkout
(the real 2.14.0 sources in upstream layout, see test_export.py).
"""

import os
import shutil

import pytest
from patchset import PatchsetError, export, series, stack
from test_export import DOCS_INDEX, SUITES, git, header, mark

# ---------------------------------------------------------------- the real stack


def test_the_real_stack_is_the_series_in_order():
    pieces = stack.read_stack()
    assert [p.id for p in pieces] == [
        "cpu-only",
        "mutation-lowering",
        "plugins",
        "buffer-state",
        "runtime",
        "docs",
        "kv-state",
    ]
    assert [p.name for piece in pieces for p in piece.patches] == [
        p.name for p in series.read_series()
    ]
    listed = [f for piece in pieces for f in piece.files]
    assert sorted(listed) == sorted(stack.new_files())
    # the pieces that build on #4459 say so
    buffer = next(p for p in pieces if p.id == "buffer-state")
    assert buffer.depends_on == ["https://github.com/pytorch/TensorRT/pull/4459"]


def test_prefixes_accumulate_patches_modules_and_tests():
    pieces = stack.read_stack()
    prefixes = stack.prefixes(pieces)
    assert [p.id for p in prefixes] == [p.id for p in pieces]
    for k, prefix in enumerate(prefixes):
        assert prefix.patches == [p for piece in pieces[: k + 1] for p in piece.patches]
        assert prefix.tests == [t for piece in pieces[: k + 1] for t in piece.tests]
        later = [t for piece in pieces[k + 1 :] for t in piece.tests]
        assert not set(prefix.tests) & set(later)
    assert stack.find_prefix(pieces, "plugins").id == "plugins"
    assert stack.find_prefix(pieces, None).id == pieces[-1].id
    with pytest.raises(PatchsetError, match="no piece 'nope'"):
        stack.find_prefix(pieces, "nope")


# ---------------------------------------------------------------- a fake series

GOOD = "Forwarded: no\n"


def _patch(directory, name, piece, extra=""):
    text = header(f"feat: {name}").replace(
        GOOD, GOOD + (f"Stack: {piece}\n" if piece else "") + extra
    )
    (directory / name).write_text(text + "\ndiff --git a/py/x b/py/x\n")


@pytest.fixture
def fake(tmp_path):
    root = tmp_path / "repo"
    patches = root / "patches"
    patches.mkdir(parents=True)
    for rel in ("py/torch_tensorrt/a.py", "tests/py/test_a.py", "tests/py/test_b.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x = 1\n")
    _patch(patches, "0001-a.patch", "one")
    _patch(
        patches,
        "0002-b.patch",
        "two",
        "Depends-on: https://github.com/pytorch/TensorRT/pull/4459\n",
    )
    (patches / "series").write_text("0001-a.patch\n0002-b.patch\n")
    (patches / "stack").write_text(
        "# comment\n[one] First PR\npy/torch_tensorrt/a.py\ntests/py/test_a.py\n\n"
        "[two] Second PR  # trailing comment\ntests/py/test_b.py\n"
    )
    return root


def test_a_fake_stack(fake):
    one, two = stack.read_stack(str(fake / "patches"), str(fake))
    assert (one.id, one.title, [p.name for p in one.patches]) == (
        "one",
        "First PR",
        ["0001-a.patch"],
    )
    assert one.modules == ["torch_tensorrt/a.py"]
    assert one.tests == ["tests/py/test_a.py"]
    assert two.title == "Second PR"
    assert two.depends_on == ["https://github.com/pytorch/TensorRT/pull/4459"]


@pytest.mark.parametrize(
    "change, error",
    [
        (
            lambda r: _patch(r / "patches", "0002-b.patch", None),
            r"0002-b.patch: needs exactly one 'Stack:' header naming its piece \(has 0\)",
        ),
        (
            lambda r: _patch(r / "patches", "0002-b.patch", "three"),
            r"'Stack: three' names no piece of stack \(one, two\)",
        ),
        (
            lambda r: (r / "patches" / "series").write_text(
                "0002-b.patch\n0001-a.patch\n"
            ),
            r"the series has the pieces in the order \['two', 'one'\], stack in the "
            r"order \['one', 'two'\]",
        ),
        (
            lambda r: (r / "tests/py/test_c.py").write_text("x = 1\n"),
            r"tests/py/test_c.py belongs to no piece of stack",
        ),
        (
            lambda r: (r / "tests/py/test_b.py").unlink(),
            r"tests/py/test_b.py \(piece 'two'\) does not exist",
        ),
        (
            lambda r: (r / "patches" / "stack").write_text(
                "[one] A\npy/torch_tensorrt/a.py\ntests/py/test_a.py\n"
                "[two] B\ntests/py/test_b.py\ntests/py/test_a.py\n"
            ),
            r"tests/py/test_a.py is listed under both 'one' and 'two'",
        ),
        (
            lambda r: (r / "patches" / "stack").write_text("py/x.py\n[one] A\n"),
            r"stack:1: 'py/x.py' before the first \[piece\]",
        ),
    ],
)
def test_stack_errors_name_the_patch_piece_or_file(fake, change, error):
    change(fake)
    with pytest.raises(PatchsetError, match=error):
        stack.read_stack(str(fake / "patches"), str(fake))


def test_pieces_must_be_contiguous(fake):
    _patch(fake / "patches", "0003-c.patch", "one")
    (fake / "patches" / "series").write_text(
        "0001-a.patch\n0002-b.patch\n0003-c.patch\n"
    )
    with pytest.raises(
        PatchsetError, match="patches of piece 'one' are not contiguous"
    ):
        stack.read_stack(str(fake / "patches"), str(fake))


# ---------------------------------------------------------------- prefix runner


class Recorder:
    """Stands in for building wheels, pip and pytest; records every call."""

    def __init__(self, failing=()):
        self.calls, self.failing = [], set(failing)

    def build(self, flavour, out_dir, label=None, patches=None, modules=None):
        self.calls.append(
            (
                "build",
                label,
                None if patches is None else [p.name for p in patches],
                modules,
            )
        )
        return f"{out_dir}/{label or 'whole'}.whl"

    def run(self, argv, env):
        if "pytest" in argv:
            tests = [a for a in argv if a.startswith("tests/")]
            self.calls.append(("pytest", tests, env["TORCHTRT_PATCHSET_ENV"]))
            if any(t in self.failing for t in tests):
                return 1, "FAILED x\n== 1 failed, 2 passed in 0.1s =="
            return 0, "== 3 passed in 0.1s =="
        self.calls.append(("pip", os.path.basename(argv[-1])))
        return 0, ""


def test_every_prefix_is_built_installed_and_tested_alone(fake):
    pieces = stack.read_stack(str(fake / "patches"), str(fake))
    rec = Recorder()
    results = stack.check_prefixes(
        pieces, "py", "rtx", "/out", run=rec.run, build=rec.build
    )
    assert results == [("one", "3 passed in 0.1s"), ("two", "3 passed in 0.1s")]
    assert rec.calls == [
        ("build", "stack1", ["0001-a.patch"], ["torch_tensorrt/a.py"]),
        ("pip", "stack1.whl"),
        ("pytest", ["tests/py/test_a.py"], "rtx"),
        ("build", "stack2", ["0001-a.patch", "0002-b.patch"], ["torch_tensorrt/a.py"]),
        ("pip", "stack2.whl"),
        ("pytest", ["tests/py/test_a.py", "tests/py/test_b.py"], "rtx"),
        ("build", None, None, None),  # the whole patch set back in the venv
        ("pip", "whole.whl"),
    ]


def test_the_whole_stack_can_be_left_to_the_caller(fake):
    pieces = stack.read_stack(str(fake / "patches"), str(fake))
    rec = Recorder()
    results = stack.check_prefixes(
        pieces, "py", "rtx", "/out", run=rec.run, build=rec.build, skip_whole=True
    )
    assert results == [("one", "3 passed in 0.1s")]
    assert [c for c in rec.calls if c[0] == "pytest"] == [
        ("pytest", ["tests/py/test_a.py"], "rtx")
    ]
    assert rec.calls[-1] == ("pip", "whole.whl")


def test_a_failing_prefix_is_named_and_the_venv_restored(fake):
    pieces = stack.read_stack(str(fake / "patches"), str(fake))
    rec = Recorder(failing={"tests/py/test_a.py"})
    with pytest.raises(
        PatchsetError,
        match=r"2 stack prefix\(es\) fail their own tests: 'one' \(1 failed, 2 passed",
    ):
        stack.check_prefixes(
            pieces, "py", "standard", "/out", run=rec.run, build=rec.build
        )
    assert rec.calls[-1] == ("pip", "whole.whl")
    assert ("pytest", ["tests/py/test_a.py"], "standard") in rec.calls


# ---------------------------------------------------------------- export --stack


@pytest.fixture
def stacked(tmp_path):
    """A fake upstream checkout and a two-piece stack made against it."""
    from patchset import tree

    base = tmp_path / "base"
    tree.base_sources(str(base), "standard")
    repo = tmp_path / "upstream"
    shutil.copytree(base / "py", repo / "py")
    (repo / "tests" / "py").mkdir(parents=True)
    (repo / "tests" / "ci").mkdir()
    (repo / "tests" / "ci" / "suites.py").write_text(SUITES)
    docs = repo / "docsrc/tutorials/extensibility/plugins"
    docs.mkdir(parents=True)
    (docs / "index.rst").write_text(DOCS_INDEX)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Upstream Dev")
    git(repo, "config", "user.email", "dev@example.org")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "upstream")

    root = tmp_path / "patchset"
    patches = root / "patches"
    patches.mkdir(parents=True)
    scratch = tmp_path / "scratch"
    git(tmp_path, "clone", "-q", str(repo), str(scratch))
    for name, piece, rel, index in (
        ("0001-enums.patch", "first", "_enums.py", 2),
        ("0002-compile.patch", "second", "_compile.py", 100),
    ):
        mark(scratch, rel, index, name[:4])
        diff = git(scratch, "diff", "--no-color")
        text = header(f"feat: {name[5:-6]}").replace(
            "Forwarded: no\n", f"Forwarded: no\nStack: {piece}\n"
        )
        (patches / name).write_text(text + "\n" + diff)
        git(
            scratch, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qam", name
        )
    (patches / "series").write_text("0001-enums.patch\n0002-compile.patch\n")
    files = {
        "py/torch_tensorrt/dynamo/_first.py": "X = 1\n",
        "tests/py/dynamo/automatic_plugin/test_first.py": "def test_x():\n    pass\n",
        "docsrc/tutorials/extensibility/plugins/inplace_plugins.rst": "Page\n====\n",
        "examples/dynamo/inplace_state_plugin.py": '"""\n.. _x:\n\nUpdating a State\n================\n"""\n',
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (patches / "stack").write_text(
        "[first] First\npy/torch_tensorrt/dynamo/_first.py\n"
        "tests/py/dynamo/automatic_plugin/test_first.py\n"
        "[second] Second\ndocsrc/tutorials/extensibility/plugins/inplace_plugins.rst\n"
        "examples/dynamo/inplace_state_plugin.py\n"
    )
    return repo, root


def test_export_stack_makes_one_branch_per_piece_on_the_one_before(stacked):
    repo, root = stacked
    head = git(repo, "rev-parse", "HEAD")
    summary = export.export_stack(
        str(repo), "inplace", str(root / "patches"), str(root)
    )
    assert "inplace/01-first, inplace/02-second" in summary
    first = git(repo, "log", "--reverse", "--format=%s", "main..inplace/01-first")
    assert first.splitlines() == [
        "feat: enums",
        "feat: add _first, with tests",
        "ci: run the new plugin tests in plugins-automatic",
    ]
    # the second branch is the first plus its own piece
    assert git(repo, "merge-base", "inplace/01-first", "inplace/02-second") == git(
        repo, "rev-parse", "inplace/01-first"
    )
    second = git(
        repo, "log", "--reverse", "--format=%s", "inplace/01-first..inplace/02-second"
    )
    assert second.splitlines() == [
        "feat: compile",
        "docs: add inplace_plugins.rst and inplace_state_plugin",
        "docs: list the new plugin pages and examples",
    ]
    message = git(repo, "log", "-1", "--format=%B", "inplace/01-first~2")
    assert "Stack:" not in message and "Forwarded:" not in message
    suites = git(repo, "show", "inplace/01-first:tests/ci/suites.py")
    assert '"automatic_plugin/test_first.py",' in suites
    index = git(
        repo,
        "show",
        "inplace/02-second:docsrc/tutorials/extensibility/plugins/index.rst",
    )
    assert index.splitlines()[-2:] == [
        "   inplace_plugins",
        "   Example: Updating a State <../../_rendered_examples/dynamo/inplace_state_plugin>",
    ]
    files = git(repo, "ls-tree", "-r", "--name-only", "inplace/01-first")
    assert "examples/dynamo/inplace_state_plugin.py" not in files
    assert git(repo, "rev-parse", "HEAD") == head  # the checkout itself is untouched


def test_export_stack_conflicts_create_no_branch(stacked):
    repo, root = stacked
    (repo / "py/torch_tensorrt/dynamo/_first.py").write_text("upstream has it\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "upstream adds the module")
    with pytest.raises(
        PatchsetError,
        match=r"^no branch created in .*; piece 'first' \(1 of 2\) does not apply "
        r"onto main \(1 conflict\(s\)\): py/torch_tensorrt/dynamo/_first.py would "
        r"overwrite an upstream file$",
    ):
        export.export_stack(str(repo), "inplace", str(root / "patches"), str(root))
    assert "inplace/" not in git(repo, "branch", "--list")


def test_export_stack_exports_the_longest_prefix_that_applies(stacked, tmp_path):
    repo, root = stacked
    path = repo / "py/torch_tensorrt/_compile.py"
    lines = path.read_text().split("\n")
    lines[100] += "  # upstream changed this line"
    path.write_text("\n".join(lines))
    git(repo, "commit", "-qam", "upstream moves on")
    with pytest.raises(PatchsetError) as caught:
        export.export_stack(
            str(repo),
            "inplace",
            str(root / "patches"),
            str(root),
            pr_dir=str(tmp_path / "prs"),
        )
    message = str(caught.value)
    assert (
        message.startswith(f"created 1 stacked branch(es) in {repo} on ")
        and message.count("\n") == 0
    )
    assert "inplace/01-first; PR descriptions in" in message
    assert "piece 'second' (2 of 2) does not apply onto the branches above" in message
    assert "0002-compile.patch: py/torch_tensorrt/_compile.py" in message
    assert git(repo, "branch", "--list", "inplace/*").split() == ["inplace/01-first"]
    assert sorted(os.listdir(tmp_path / "prs")) == ["01-first.md"]


def test_pr_descriptions_per_piece(stacked, tmp_path):
    repo, root = stacked
    stack_file = root / "patches" / "stack"
    stack_file.write_text(
        stack_file.read_text().replace(
            "[first] First\n", "[first] First\ndecide: whether #4279 goes first\n"
        )
    )
    export.export_stack(
        str(repo), "pr", str(root / "patches"), str(root), pr_dir=str(tmp_path / "d")
    )
    first = (tmp_path / "d" / "01-first.md").read_text()
    second = (tmp_path / "d" / "02-second.md").read_text()
    assert first.startswith(
        "# First\n\nPart 1 of 2 of a stack of PRs: branch `pr/01-first`, on top of `main`."
    )
    assert (
        "- **feat: enums** Longer explanation of the change, over two lines." in first
    )
    assert "## What a reviewer must decide\n\n- whether #4279 goes first\n" in first
    assert "python -m pytest tests/py/dynamo/automatic_plugin/test_first.py" in first
    assert "- https://github.com/pytorch/TensorRT/issues/4240" in first
    assert "on top of `pr/01-first` (review that one first)." in second
    assert "- `examples/dynamo/inplace_state_plugin.py`" in second


def test_a_summary_that_announces_a_reproduction_brings_it():
    import types

    piece = types.SimpleNamespace(
        title="T", decisions=[], exported_files=[], tests=[], depends_on=[], patches=[]
    )
    message = (
        "fix: a bug\n\nIt fails. Minimal reproduction on a GPU:\n\n"
        "  class M(torch.nn.Module):\n      def forward(self, x):\n"
        "          return x, None\n\nThe fix."
    )
    text = export.pr_description(piece, "b/01-t", "main", (1, 1), [message])
    assert (
        "- **fix: a bug** It fails. Minimal reproduction on a GPU:\n\n"
        "  ```python\n  class M(torch.nn.Module):\n      def forward(self, x):\n"
        "          return x, None\n  ```\n"
    ) in text
    # a summary that announces nothing keeps to its paragraph
    plain = export.pr_description(piece, "b", "main", (1, 1), ["s\n\nOne.\n\n  x"])
    assert "```" not in plain


def test_export_stack_onto_the_released_2_14_0_sources(stacked, tmp_path):
    _, root = stacked
    base = tmp_path / "v2.14.0"
    summary = export.make_base(str(base), "standard")
    assert "branch v2.14.0" in summary
    assert git(base, "rev-list", "--count", "HEAD").strip() == "1"
    export.export_stack(str(base), "inplace", str(root / "patches"), str(root))
    # nothing to register in: the base has no CI manifest nor docs index
    first = git(base, "log", "--reverse", "--format=%s", "v2.14.0..inplace/01-first")
    assert first.splitlines() == ["feat: enums", "feat: add _first, with tests"]
    # each patch commit's diff is its patch
    patch = (root / "patches" / "0001-enums.patch").read_text()
    diff = git(base, "diff", "v2.14.0", "inplace/01-first~1")
    assert diff.split("@@", 1)[1] == patch.split("@@", 1)[1]
    with pytest.raises(PatchsetError, match="already exists"):
        export.make_base(str(base), "standard")


def test_export_stack_runs_each_piece_s_tests_at_its_last_commit(stacked):
    import sys

    repo, root = stacked
    summary = export.export_stack(
        str(repo),
        "tested",
        str(root / "patches"),
        str(root),
        test_python=sys.executable,
    )
    assert "tested/01-first, tested/02-second" in summary
    (root / "tests/py/dynamo/automatic_plugin/test_first.py").write_text(
        "def test_x():\n    assert False, 'broken'\n"
    )
    with pytest.raises(PatchsetError) as caught:
        export.export_stack(
            str(repo),
            "broken",
            str(root / "patches"),
            str(root),
            test_python=sys.executable,
        )
    assert str(caught.value).startswith(f"no branch created in {repo}")
    assert (
        "piece 'first' (1 of 2) applies but its tests fail at its last commit: "
        "1 failed" in str(caught.value)
    )
    assert "broken/" not in git(repo, "branch", "--list")
