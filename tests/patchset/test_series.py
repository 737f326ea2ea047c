"""Series hygiene, and that a patch which does not apply is reported by patch, file and hunk."""

import pytest
from patchset import PatchsetError, series, tree

GOOD_HEADER = """\
Description: fix(dynamo): demo
 Demo patch.
Author: Someone <someone@example.org>
Origin: other
Bug: https://github.com/pytorch/TensorRT/issues/4240
Forwarded: no
Last-Update: 2026-12-02
"""


def test_every_patch_has_a_complete_header_and_stays_in_the_package():
    problems = [
        p for patch in series.read_series() for p in series.header_problems(patch)
    ]
    assert problems == []


def _write_series(tmp_path, name, text):
    d = tmp_path / "patches"
    d.mkdir()
    (d / name).write_text(text)
    (d / "series").write_text(name + "\n")
    return series.read_series(str(d))


def test_every_file_a_header_cites_exists():
    """A header's "Tests:" (or any other mention of a file of this repository)
    names a file that is there: the headers become the exported commit messages."""
    import os
    import re

    missing = []
    for patch in series.read_series():
        header = patch.read().split("\ndiff --git", 1)[0]
        for path in re.findall(
            r"\b((?:tests|tools|examples|docsrc)/[\w/.\-]+\.\w+)", header
        ):
            if not os.path.exists(os.path.join(series.REPO_ROOT, path.rstrip("."))):
                missing.append(f"{patch.name}: {path}")
    assert not missing, missing


def test_no_header_carries_a_placeholder_author():
    """The commits take the exporting maintainer's identity; the headers name none."""
    authors = [
        f"{p.name}: {line}"
        for p in series.read_series()
        for line in p.header.splitlines()
        if line.startswith("Author:")
    ]
    assert authors == []


def test_header_checks_detect_missing_fields_and_bad_paths(tmp_path):
    (patch,) = _write_series(
        tmp_path,
        "0001-demo.patch",
        "Description: x\n\ndiff --git a/tests/py/x.py b/tests/py/x.py\n--- a/tests/py/x.py\n+++ b/tests/py/x.py\n",
    )
    problems = series.header_problems(patch)
    assert any("lacks 'Origin:'" in p for p in problems)
    assert any("lacks 'Bug:'" in p for p in problems)
    assert any("outside py/torch_tensorrt/" in p for p in problems)


def test_unlisted_or_misnamed_patches_are_errors(tmp_path):
    d = tmp_path / "patches"
    d.mkdir()
    (d / "series").write_text("")
    (d / "0001-x.patch").write_text(GOOD_HEADER)
    with pytest.raises(PatchsetError, match="not listed in series: 0001-x.patch"):
        series.read_series(str(d))
    (d / "series").write_text("fix.patch\n")
    with pytest.raises(PatchsetError, match="not NNNN-short-name.patch"):
        series.read_series(str(d))


def test_a_failing_hunk_is_named_and_nothing_is_half_applied(tmp_path):
    src = tmp_path / "src"
    tree.base_sources(str(src), "rtx")
    target = src / "py/torch_tensorrt/_version.py"
    original = target.read_text()
    other = src / "py/torch_tensorrt/_enums.py"
    other_original = other.read_text()
    first_line = other_original.splitlines()[0]
    text = (
        GOOD_HEADER
        + "\n"
        + "diff --git a/py/torch_tensorrt/_enums.py b/py/torch_tensorrt/_enums.py\n"
        + "--- a/py/torch_tensorrt/_enums.py\n+++ b/py/torch_tensorrt/_enums.py\n"
        + f"@@ -1 +1 @@\n-{first_line}\n+{first_line}  # changed\n"
        + "diff --git a/py/torch_tensorrt/_version.py b/py/torch_tensorrt/_version.py\n"
        + "--- a/py/torch_tensorrt/_version.py\n+++ b/py/torch_tensorrt/_version.py\n"
        + '@@ -1 +1 @@\n-__version__ = "9.9.9"\n+__version__ = "9.9.10"\n'
    )
    (patch,) = _write_series(tmp_path, "0007-bad.patch", text)
    with pytest.raises(PatchsetError) as info:
        series.apply_patch(patch, str(src), strip=1)
    message = str(info.value)
    assert "0007-bad.patch" in message
    assert "py/torch_tensorrt/_version.py hunk #1" in message
    # git apply is all-or-nothing: the hunk that would have applied was not applied either.
    assert target.read_text() == original
    assert other.read_text() == other_original


def test_a_new_module_may_not_overwrite_an_upstream_file(tmp_path, monkeypatch):
    from patchset import wheelbuild

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
