"""patches/series and the patch mails: the real series' rules, and how a bad one
is reported (by patch, piece or file)."""

import os
import re

import pytest
from patchset import PatchsetError, series, tree, wheelbuild
from test_export import mail

PIECE_LIMIT = 1500  # inserted lines outside tests per piece, for review


def test_every_patch_is_a_complete_mail_and_stays_in_the_package():
    patches = series.all_patches(series.read_series())
    assert [p for patch in patches for p in series.header_problems(patch)] == []


def test_the_real_series():
    pieces = series.read_series()
    assert [p.id for p in pieces] == [
        "cpu-only",
        "inplace-plugins",
        "mutation-lowering",
        "mutation-write-backs",
        "engine-outputs",
        "number-outputs",
        "missing-converter",
        "plugin-converters",
        "generated-plugins",
        "plugin-state-in-place",
        "qdp-flavour-named",
        "compat-plugins",
        "copy-into-state",
        "index-copy-dynamic",
        "load-names-its-file",
        "runtime-call-cost",
        "buffer-state",
        "alias-map",
        "alias-map-path",
        "in-place-engine-inputs",
        "cudagraphs-moved-inputs",
        "python-runtime-in-place-outputs",
        "compile-keyword-warnings",
        "aliased-outputs-returned",
        "aliased-io-records-checked",
        "overlapping-arguments-refused",
        "docs",
        "kv-layer-where-right",
        "graph-outputs-exact",
        "state-plan",
        "state-outputs-checked",
        "state-writes-lowered",
        "float64-in-pytorch",
        "sizes-next-to-users",
        "strided-view-writes",
        "no-copy-onto-itself",
        "per-call-checks",
        "hf-decoders",
        "cudagraphs-module-quiet",
        "converter-errors-named",
        "input-without-dtype-quiet",
        "state-steps",
        "layers-take-the-plan",
        "engines-checked-against-the-plan",
        "wrong-arguments-named",
        "unlifted-buffer-writes-refused",
        "converter-refusals-once",
    ]
    # the pieces that build on #4459 say so
    buffer = next(p for p in pieces if p.id == "buffer-state")
    assert buffer.depends_on == ["https://github.com/pytorch/TensorRT/pull/4459"]
    brought = [f for piece in pieces for f in piece.new_files]
    assert sorted(brought) == sorted(series.new_files())


def test_compat_pieces_are_small():
    """What 2.14.0 needs and upstream main does not: at most 300 changed lines in all."""
    pieces = [p for p in series.read_series() if p.is_compat]
    changed = sum(
        1
        for piece in pieces
        for patch in piece.patches
        for line in patch.text.split("\n\ndiff --git", 1)[-1].splitlines()
        if line[:1] in "+-" and not line.startswith(("+++ ", "--- "))
    )
    assert pieces and changed <= 300, changed


def test_every_piece_is_reviewable():
    """At most ~1.5k inserted lines outside tests: what its mails add (new files grow
    in the mails, so a file counts in each piece by what that piece adds to it), and
    its piece files."""
    sizes = {}
    for piece in series.read_series():
        added = sum(
            1
            for p in piece.patches
            for section in re.split(r"^(?=diff --git )", p.diff, flags=re.M)
            if not re.match(r"diff --git a/tests/", section)
            for line in section.splitlines()
            if line.startswith("+") and not line.startswith("+++")
        )
        for f in piece.files:
            if not f.startswith("tests/"):
                with open(os.path.join(series.REPO_ROOT, f), encoding="utf-8") as text:
                    added += len(text.read().splitlines())
        sizes[piece.id] = added
    assert {k: v for k, v in sizes.items() if v > PIECE_LIMIT} == {}, sizes


def test_a_test_file_arrives_with_a_patch_that_cites_it():
    """Every test file a patch adds is cited by that patch (with the tests that pass
    there: what it tests is that commit's), and the later citing patches grow it."""
    uncited = [
        f"{patch.name}: {test}"
        for patch in series.all_patches(series.read_series())
        for test in patch.adds
        if series.is_test(test) and test not in patch.description
    ]
    assert uncited == []


def test_every_file_a_patch_cites_exists():
    """The descriptions become the exported commit messages."""
    missing = []
    for patch in series.all_patches(series.read_series()):
        text = patch.text.split("\ndiff --git", 1)[0]
        for path in re.findall(
            r"\b((?:tests|tools|examples|docsrc)/[\w/.\-]+\.\w+)", text
        ):
            if not os.path.exists(os.path.join(series.REPO_ROOT, path.rstrip("."))):
                missing.append(f"{patch.name}: {path}")
    assert not missing, missing


def test_no_patch_carries_a_person_s_identity():
    """Every mail is from the patch set (so plain git am applies it), with no Date:
    or Author:; materialize and export author the commits with the identity of
    whoever runs them."""
    for patch in series.all_patches(series.read_series()):
        assert patch.headers.get("from") == tree.MAIL_FROM, patch.name
        assert "date" not in patch.headers, patch.name
        assert not patch.field("Author"), patch.name


def test_the_mails_carry_the_working_view_s_new_files():
    """py/ and tests/py/ are the mails' new files as the last patch leaves them."""
    carried = {}
    for patch in series.all_patches(series.read_series()):
        # Adds names only what the mail carries: this repository's own tests
        # (LOCAL_ONLY) are files of a piece, which plain git am does not give
        assert sorted(patch.created_files()) == sorted(patch.adds), patch.name
        for section in re.split(r"^(?=diff --git )", patch.diff, flags=re.M):
            m = re.match(r"diff --git a/(\S+) \S+\nnew file mode ", section)
            if m:
                hunks = section.split("\n@@", 1)[1].split("\n", 1)[1]
                lines = [line[1:] for line in hunks.splitlines() if line[:1] == "+"]
                carried[m[1]] = "\n".join(lines) + "\n" if lines else ""
            elif section.startswith("diff --git"):
                # a module a later patch grows: compared by the plain git am test
                carried.pop(section.split()[2][2:], None)
    for rel in series.new_files():
        if rel.startswith(("py/", "tests/py/")) and rel in carried:
            with open(os.path.join(series.REPO_ROOT, rel), encoding="utf-8") as f:
                assert carried.get(rel) == f.read(), rel


LATER = re.compile(
    r'(tests/[\w/]+\.py)(\s+\(it comes with the later commit "([^"]+)"\))?'
)


def test_a_cited_test_file_is_there_or_said_to_come_later():
    """A test file a mail's description cites is in the tree its commit makes, or the
    citation names the later commit that brings it (by that commit's subject)."""
    patches = series.all_patches(series.read_series())
    creator = {f: p for p in patches for f in p.created_files()}
    there = set()
    for patch in patches:
        there |= set(patch.created_files())
        text = re.sub(r"\s+", " ", patch.description)
        for path, later, subject in LATER.findall(text):
            if not path.startswith("tests/py/") or path not in creator:
                continue
            if path in there:
                assert not later, (patch.name, path, "is there already")
            else:
                assert subject == creator[path].subject, (patch.name, path)


def test_a_mail_is_parsed_into_subject_description_fields_and_diff(tmp_path):
    text = mail(
        "fix(x): a subject folded\n over two lines",
        "diff --git a/py/torch_tensorrt/x.py b/py/torch_tensorrt/x.py\n",
        ["py/torch_tensorrt/new.py", "tests/py/test_new.py"],
    )
    path = tmp_path / "0001-x.patch"
    path.write_text(text.replace("Forwarded: no\n", "Forwarded: no\nDepends-on: u\n"))
    patch = series.Patch(str(path))
    assert patch.subject == "fix(x): a subject folded over two lines"
    assert patch.description.startswith("Longer explanation")
    assert patch.adds == ["py/torch_tensorrt/new.py", "tests/py/test_new.py"]
    assert patch.field("Depends-on") == ["u"]
    assert patch.touched_files() == ["py/torch_tensorrt/x.py"]
    assert "Origin" not in patch.message and patch.message.endswith(
        "Second paragraph.\n"
    )


def write(tmp_path, series_text, patches=(), files=()):
    d = tmp_path / "patches"
    d.mkdir(exist_ok=True)
    for name, adds in patches:
        (d / name).write_text(mail(f"feat: {name}", "", adds))
    for f in files:
        os.makedirs(os.path.dirname(tmp_path / f), exist_ok=True)
        (tmp_path / f).write_text("x\n")
    (d / "series").write_text(series_text)
    return str(d), str(tmp_path)


@pytest.mark.parametrize(
    "series_text, patches, files, error",
    [
        (
            "[a] A\n",
            [("0001-x.patch", [])],
            [],
            "0001-x.patch is in patches/ but not in series",
        ),
        ("[a] A\nfix.patch\n", [], [], "'fix.patch' is not NNNN-short-name.patch"),
        ("[a] A\n0002-y.patch\n", [], [], "0002-y.patch .piece 'a'. does not exist"),
        ("0001-x.patch\n", [("0001-x.patch", [])], [], "is not '\\[piece-id\\] Title'"),
        ("[a] A\n[a] B\n", [], [], "piece 'a' is declared twice"),
        (
            "[a] A\n0001-x.patch\n0001-x.patch\n",
            [("0001-x.patch", [])],
            [],
            "0001-x.patch is listed twice",
        ),
        (
            "[a] A\n0001-x.patch\n[b] B\npy/m.py\n",
            [("0001-x.patch", ["py/m.py"])],
            ["py/m.py"],
            "py/m.py is brought by both 0001-x.patch and piece 'b'",
        ),
        (
            "[a] A\n",
            [],
            ["tests/py/test_m.py"],
            "tests/py/test_m.py is brought by no patch",
        ),
        (
            "[a] A\n0001-x.patch\n",
            [("0001-x.patch", ["py/gone.py"])],
            [],
            "py/gone.py .brought by 0001-x.patch. does not exist",
        ),
    ],
)
def test_series_errors_name_the_patch_piece_or_file(
    tmp_path, series_text, patches, files, error
):
    with pytest.raises(PatchsetError, match=error):
        series.read_series(*write(tmp_path, series_text, patches, files))


def test_header_checks_detect_missing_fields_and_bad_paths(tmp_path):
    path = tmp_path / "0001-demo.patch"
    path.write_text(
        "Subject: [PATCH] x\n\nWhy.\n\nForwarded: no\n\n"
        "diff --git a/tests/py/x.py b/tests/py/x.py\nnew file mode 100644\n"
    )
    problems = series.header_problems(series.Patch(str(path)))
    assert any("lacks the DEP-3 field 'Origin:'" in p for p in problems)
    assert any("lacks 'Bug:'" in p for p in problems)
    assert any(
        "creates tests/py/x.py without naming it in its Adds" in p for p in problems
    )


def test_a_patch_that_does_not_apply_is_named_and_nothing_is_half_applied(tmp_path):
    src = tmp_path / "src"
    tree.base_sources(str(src), "rtx")
    target = src / "py/torch_tensorrt/_version.py"
    original = target.read_text()
    other = src / "py/torch_tensorrt/_enums.py"
    other_original = other.read_text()
    first_line = other_original.splitlines()[0]
    diff = (
        "diff --git a/py/torch_tensorrt/_enums.py b/py/torch_tensorrt/_enums.py\n"
        "--- a/py/torch_tensorrt/_enums.py\n+++ b/py/torch_tensorrt/_enums.py\n"
        f"@@ -1 +1 @@\n-{first_line}\n+{first_line}  # changed\n"
        "diff --git a/py/torch_tensorrt/_version.py b/py/torch_tensorrt/_version.py\n"
        "--- a/py/torch_tensorrt/_version.py\n+++ b/py/torch_tensorrt/_version.py\n"
        '@@ -1 +1 @@\n-__version__ = "9.9.9"\n+__version__ = "9.9.10"\n'
    )
    (tmp_path / "0007-bad.patch").write_text(mail("fix: bad", diff))
    with pytest.raises(PatchsetError) as info:
        series.apply_patch(series.Patch(str(tmp_path / "0007-bad.patch")), str(src), 1)
    assert str(info.value).startswith("patch 0007-bad.patch does not apply: ")
    assert "patch failed: py/torch_tensorrt/_version.py:1" in str(info.value)
    # git apply is all-or-nothing: the hunk that would have applied was not applied either.
    assert target.read_text() == original
    assert other.read_text() == other_original


def test_a_new_module_may_not_overwrite_an_upstream_file(tmp_path, monkeypatch):
    overlay = tmp_path / "py"
    (overlay / "torch_tensorrt").mkdir(parents=True)
    (overlay / "torch_tensorrt" / "_enums.py").write_text("X = 1\n")
    monkeypatch.setattr(wheelbuild, "OVERLAY_ROOT", str(overlay))
    tree_dir = tmp_path / "wheel"
    (tree_dir / "torch_tensorrt").mkdir(parents=True)
    (tree_dir / "torch_tensorrt" / "_enums.py").write_text("upstream\n")
    with pytest.raises(
        PatchsetError, match="py/torch_tensorrt/_enums.py would overwrite"
    ):
        wheelbuild.apply_overlay(str(tree_dir))
    assert (tree_dir / "torch_tensorrt" / "_enums.py").read_text() == "upstream\n"
