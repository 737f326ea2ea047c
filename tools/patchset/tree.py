"""Patched source trees: 2.14.0 base sources, series applied, ``py/`` overlay.

``base_sources`` extracts the Python sources of a verified base wheel into
upstream's layout (``py/torch_tensorrt/...``). ``patched_tree`` applies the
series and the overlay to them. ``materialize`` turns that into a git
repository with one commit per patch for editing; ``refresh`` turns such a
repository back into ``patches/``, ``py/`` and ``tests/py/``.
"""

import glob
import os
import re
import shutil
import subprocess
import tempfile
from typing import Dict, List, Optional, Tuple

from . import BASE_VERSION, REPO_ROOT, PatchsetError, base, series, wheelbuild

BASE_TAG = "patchset-base"
OVERLAY_SUBJECT = "overlay: new modules and tests of the patch set"
TESTS_ROOT = os.path.join(REPO_ROOT, "tests", "py")


def _git(args: List[str], cwd: str, input_text: Optional[str] = None) -> str:
    result = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, input=input_text
    )
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise PatchsetError(
            f"git {args[0]} failed in {cwd}: {detail[-1] if detail else result.returncode}"
        )
    return result.stdout


def _git_identity(cwd: str) -> None:
    for key, value in (("user.name", "patchset"), ("user.email", "patchset@localhost")):
        _git(["config", key, value], cwd)


def base_sources(
    dest: str,
    flavour: str = "standard",
    python_tag: Optional[str] = None,
    platform_tag: Optional[str] = None,
) -> List[str]:
    """Write the base wheel's ``.py`` files to ``dest/py/torch_tensorrt/...``; return their paths."""
    wheel = base.fetch_base_wheel(
        flavour,
        python_tag or base.current_python_tag(),
        platform_tag or base.current_platform_tag(),
    )
    work = tempfile.mkdtemp(prefix="patchset-src-")
    try:
        wheelbuild.run_wheel_cli(["unpack", "--dest", work, wheel], work)
        (root,) = glob.glob(os.path.join(work, f"*-{BASE_VERSION}"))
        files = []
        for path in sorted(
            glob.glob(
                os.path.join(root, "torch_tensorrt", "**", "*.py"), recursive=True
            )
        ):
            rel = "py/" + os.path.relpath(path, root).replace(os.sep, "/")
            target = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(path, target)
            files.append(rel)
        return files
    finally:
        shutil.rmtree(work, ignore_errors=True)


def copy_overlay(dest: str, with_tests: bool = True) -> List[str]:
    """Copy ``py/`` new modules (and ``tests/py``) into a tree in upstream layout."""
    copied = []
    for rel in wheelbuild.overlay_files():
        target = os.path.join(dest, "py", rel)
        if os.path.exists(target):
            raise PatchsetError(f"py/{rel} would overwrite an upstream file")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(wheelbuild.OVERLAY_ROOT, rel), target)
        copied.append("py/" + rel)
    if with_tests:
        for rel in wheelbuild.source_files(TESTS_ROOT):
            target = os.path.join(dest, "tests", "py", rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(os.path.join(TESTS_ROOT, rel), target)
            copied.append("tests/py/" + rel)
    return copied


def patched_tree(
    dest: str, flavour: str = "standard", with_tests: bool = False
) -> None:
    """Base sources of ``flavour`` + series + overlay, in upstream layout, at ``dest``."""
    base_sources(dest, flavour)
    series.apply_series(dest, strip=1)
    copy_overlay(dest, with_tests=with_tests)


def _empty_target(dest: str) -> None:
    if os.path.exists(dest) and (not os.path.isdir(dest) or os.listdir(dest)):
        raise PatchsetError(f"{dest} exists and is not an empty directory")


def materialize(dest: str, flavour: str = "standard") -> int:
    """Create a git repository at ``dest``: base commit, one commit per patch, overlay commit."""
    dest = os.path.abspath(dest)
    _empty_target(dest)
    parent = os.path.dirname(dest)
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".materialize-", dir=parent)
    try:
        _git(["init", "-q", "-b", "main"], work)
        _git_identity(work)
        base_sources(work, flavour)
        _git(["add", "-A"], work)
        _git(
            [
                "commit",
                "-q",
                "-m",
                f"base: torch-tensorrt {BASE_VERSION} wheel sources ({flavour})",
            ],
            work,
        )
        _git(["tag", BASE_TAG], work)
        patches = series.read_series()
        for patch in patches:
            series.apply_patch(patch, work, strip=1)
            _git(["add", "-A"], work)
            message = f"{patch.name}\n\n{patch.header.rstrip()}\n"
            _git(
                ["commit", "-q", "--allow-empty", "--cleanup=verbatim", "-F", "-"],
                work,
                message,
            )
        copy_overlay(work)
        _git(["add", "-A"], work)
        _git(["commit", "-q", "--allow-empty", "-m", OVERLAY_SUBJECT], work)
        if os.path.isdir(dest):
            os.rmdir(dest)
        os.rename(work, dest)
        return len(patches)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _changes(tree: str, commit: str) -> List[Tuple[str, str]]:
    out = _git(
        [
            "diff-tree",
            "--no-commit-id",
            "--no-renames",
            "-r",
            "--name-status",
            f"{commit}^",
            commit,
        ],
        tree,
    )
    return [tuple(line.split("\t", 1)) for line in out.splitlines() if line]  # type: ignore[misc]


def refresh(tree: str, out_root: str = REPO_ROOT) -> Tuple[int, int]:
    """Regenerate ``patches/``, ``py/`` and ``tests/py/`` from a materialized tree.

    Commits after the base that modify base files are patches: their message's
    first line is the patch file name, the rest its header. Files the base does
    not have are new modules or tests, taken from the tree's HEAD.
    ``out_root`` is the patch-set repository to write into (this one by default).
    Returns (number of patches, number of overlay files).
    """
    tree = os.path.abspath(tree)
    try:
        _git(["rev-parse", "--verify", "-q", BASE_TAG], tree)
    except PatchsetError:
        raise PatchsetError(
            f"{tree} is not a materialized tree (no '{BASE_TAG}' tag)"
        ) from None
    if _git(["status", "--porcelain"], tree).strip():
        raise PatchsetError(f"{tree} has uncommitted changes; commit them first")
    base_files = set(_git(["ls-tree", "-r", "--name-only", BASE_TAG], tree).split())
    staged = tempfile.mkdtemp(prefix="patchset-refresh-")
    try:
        names: List[str] = []
        for commit in _git(
            ["rev-list", "--reverse", f"{BASE_TAG}..HEAD"], tree
        ).split():
            touched = []
            for status, path in _changes(tree, commit):
                if path in base_files:
                    if status != "M":
                        raise PatchsetError(
                            f"commit {commit[:10]} {'deletes' if status == 'D' else 'changes mode of'} upstream file {path}"
                        )
                    touched.append(path)
            if not touched:
                continue
            message = _git(["log", "-1", "--format=%B", commit], tree)
            name, _, header = message.partition("\n")
            name = name.strip()
            if not series._NAME_RE.match(name) or name in names:
                raise PatchsetError(
                    f"commit {commit[:10]} changes upstream files but its first line {name!r} is not a "
                    "new NNNN-short-name.patch"
                )
            diff = _git(
                [
                    "diff",
                    "--no-color",
                    "--no-renames",
                    f"{commit}^",
                    commit,
                    "--",
                    *touched,
                ],
                tree,
            )
            diff = re.sub(r"^index [0-9a-f]+\.\.[0-9a-f]+.*\n", "", diff, flags=re.M)
            with open(os.path.join(staged, name), "w", encoding="utf-8") as f:
                f.write(header.strip("\n") + "\n\n" + diff)
            names.append(name)
        with open(os.path.join(staged, "series"), "w", encoding="utf-8") as f:
            f.write("".join(n + "\n" for n in names))
        head_files = _git(["ls-tree", "-r", "--name-only", "HEAD"], tree).split()
        overlay = [f for f in head_files if f not in base_files]
        for rel in overlay:
            if not (
                rel.startswith("py/torch_tensorrt/") or rel.startswith("tests/py/")
            ):
                raise PatchsetError(
                    f"{rel} is neither a new module under py/torch_tensorrt/ nor a test under tests/py/"
                )
        # Files of patches/ that no commit makes (the stack) stay as they are
        kept = os.path.join(out_root, "patches")
        for name in os.listdir(kept) if os.path.isdir(kept) else ():
            if name != "series" and not name.endswith(".patch"):
                if not os.path.exists(os.path.join(staged, name)):
                    shutil.copy2(os.path.join(kept, name), os.path.join(staged, name))
        # Everything is computed: now replace the repository's copies.
        _replace_dir(staged, kept)
        _sync_files(
            tree,
            [f for f in overlay if f.startswith("py/")],
            os.path.join(out_root, "py"),
            "py/",
        )
        _sync_files(
            tree,
            [f for f in overlay if f.startswith("tests/py/")],
            os.path.join(out_root, "tests", "py"),
            "tests/py/",
        )
        return len(names), len(overlay)
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def _replace_dir(src: str, dest: str) -> None:
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    old = dest + ".old"
    shutil.rmtree(old, ignore_errors=True)
    shutil.copytree(src, dest + ".new")
    if os.path.exists(dest):
        os.rename(dest, old)
    os.rename(dest + ".new", dest)
    shutil.rmtree(old, ignore_errors=True)


def _sync_files(tree: str, files: List[str], dest_root: str, prefix: str) -> None:
    staged = tempfile.mkdtemp(prefix="patchset-sync-")
    try:
        for rel in files:
            target = os.path.join(staged, rel[len(prefix) :])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(os.path.join(tree, rel), target)
        _replace_dir(staged, dest_root)
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def flavour_differences() -> Dict[str, str]:
    """Patched files that differ between the standard and RTX flavours (outside ``fx/``)."""
    trees = {}
    root = tempfile.mkdtemp(prefix="patchset-parity-")
    try:
        for flavour in ("standard", "rtx"):
            trees[flavour] = os.path.join(root, flavour)
            patched_tree(trees[flavour], flavour)
        differences = {}
        files = {f: wheelbuild.source_files(t) for f, t in trees.items()}
        all_files = set(files["standard"]) | set(files["rtx"])
        for rel in sorted(all_files):
            if rel.startswith("py/torch_tensorrt/fx/"):
                continue
            paths = [os.path.join(trees[f], rel) for f in ("standard", "rtx")]
            if not all(os.path.exists(p) for p in paths):
                differences[rel] = "present in one flavour only"
                continue
            with open(paths[0], "rb") as a, open(paths[1], "rb") as b:
                if a.read() != b.read():
                    differences[rel] = "content differs"
        return differences
    finally:
        shutil.rmtree(root, ignore_errors=True)
