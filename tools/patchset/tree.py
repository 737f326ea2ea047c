"""Patched source trees: ``materialize`` (``git am`` of each patch, which carries its
new files, a branch per piece) and back, ``refresh`` (``git format-patch``, a
``Patch-Name`` line naming each patch; a commit of new files only gives them to its
piece)."""

import filecmp
import glob
import os
import re
import shutil
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

from . import BASE_VERSION, REPO_ROOT, PatchsetError, base, git, run_git, series
from .wheelbuild import run_wheel_cli

BASE_TAG = "patchset-base"
PATCH_NAME = "Patch-Name"
# The author line of every mail, so that plain ``git am`` applies them; the tools
# author the commits they make with the git identity of whoever runs them.
MAIL_FROM = "Torch-TensorRT in-place state patch set <inplace-state-patches@invalid>"


def base_sources(dest: str, flavour: str = "standard") -> List[str]:
    """Write the base wheel's ``.py`` files to ``dest/py/...``; return their paths."""
    wheel = base.fetch_base_wheel(
        flavour, base.current_python_tag(), base.current_platform_tag()
    )
    work = tempfile.mkdtemp(prefix="patchset-src-")
    try:
        run_wheel_cli(["unpack", "--dest", work, wheel], work)
        (root,) = glob.glob(os.path.join(work, f"*-{BASE_VERSION}"))
        files = []
        pattern = os.path.join(root, "torch_tensorrt", "**", "*.py")
        for path in sorted(glob.glob(pattern, recursive=True)):
            rel = "py/" + os.path.relpath(path, root).replace(os.sep, "/")
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copyfile(path, os.path.join(dest, rel))
            files.append(rel)
        return files
    finally:
        shutil.rmtree(work, ignore_errors=True)


def copy_files(dest: str, files: Sequence[str], root: str = REPO_ROOT) -> None:
    """Copy new files (repository-relative) into ``dest``; never over an upstream file."""
    for rel in files:
        target = os.path.join(dest, rel)
        if os.path.lexists(target):
            raise PatchsetError(f"{rel} would overwrite an upstream file")
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.join(root, rel), target)


def patched_tree(
    dest: str, flavour: str = "standard", with_tests: bool = False
) -> None:
    """Base sources of ``flavour`` + series + new modules (and tests), at ``dest``."""
    pieces = series.read_series()
    base_sources(dest, flavour)
    patches = series.all_patches(pieces)
    series.apply_series(dest, 1, patches)
    carried = {f for patch in patches for f in patch.created_files()}
    files = [f for piece in pieces for f in piece.new_files if f not in carried]
    copy_files(dest, [f for f in files if with_tests or f.startswith("py/")])
    if not with_tests:
        for f in carried:
            if not f.startswith("py/"):
                os.unlink(os.path.join(dest, f))


def identity(repo: str) -> str:
    """``Name <email>`` of whoever runs the tools: the author of the commits they make."""
    ident = run_git(repo, ["var", "GIT_AUTHOR_IDENT"])
    if ident.returncode or run_git(repo, ["var", "GIT_COMMITTER_IDENT"]).returncode:
        raise PatchsetError("no git identity to commit with: set user.name, user.email")
    return ident.stdout.rsplit(" ", 2)[0]


def am(
    work: str,
    patch: series.Patch,
    files: Sequence[str],
    message: Optional[str],
    root: str = REPO_ROOT,
    three_way: bool = False,
) -> List[str]:
    """``git am`` a patch, authored by :func:`identity` (not the mail's ``From``),
    and amend it with those of ``files`` the mail does not carry and ``message``
    (``+...``: appended to the mail's); return git's reasons if it does not apply
    (nothing committed). ``three_way``: merge where the context moved, given the
    blobs the patch was made against (a conflict is still a failure)."""
    first, _, rest = patch.text.partition("\n")
    head, _, body = rest.partition("\n\n")
    head = re.sub(r"^From: .*\n(?:[ \t].*\n)*", "", head + "\n", flags=re.M)
    mail = f"{first}\nFrom: {identity(work)}\n{head.rstrip()}\n\n{body}"
    carried = set(patch.created_files())
    files = [f for f in files if f not in carried]
    # -3 without -q: git names each file that conflicts on stdout ("CONFLICT ...")
    am_args = ["am", "--whitespace=nowarn"] + (["-3"] if three_way else ["-q"])
    result = run_git(work, am_args, mail)
    if result.returncode != 0:
        run_git(work, ["am", "--abort"])
        output = (result.stderr + result.stdout).strip().splitlines()
        reasons = [line[7:] for line in output if line.startswith("error: ")]
        reasons += [line for line in output if line.startswith("CONFLICT")]
        return reasons or output[-1:] or ["git am failed"]
    copy_files(work, files, root)
    if files:
        git(work, ["add", "--", *files])
    if message and message.startswith("+"):
        mail = git(work, ["log", "-1", "--format=%B"]).rstrip("\n")
        message = f"{mail}\n{message[1:]}"
    amend = ["commit", "-q", "--amend", "--no-verify", "--allow-empty"]
    amend += ["--cleanup=verbatim", "-F", "-"] if message else ["--no-edit"]
    git(work, amend, message)
    return []


def materialize(dest: str, flavour: str = "standard") -> int:
    """Create the git repository at ``dest``; return the number of patch commits."""
    dest = os.path.abspath(dest)
    if os.path.exists(dest) and (not os.path.isdir(dest) or os.listdir(dest)):
        raise PatchsetError(f"{dest} exists and is not an empty directory")
    pieces = series.read_series()
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    work = tempfile.mkdtemp(prefix=".materialize-", dir=os.path.dirname(dest))
    try:
        git(work, ["init", "-q", "-b", f"01-{pieces[0].id}"])
        identity(work)
        base_sources(work, flavour)
        git(work, ["add", "-A"])
        subject = f"base: torch-tensorrt {BASE_VERSION} wheel sources ({flavour})"
        git(work, ["commit", "-q", "-m", subject])
        git(work, ["tag", BASE_TAG])
        for k, piece in enumerate(pieces, 1):
            if k > 1:
                git(work, ["checkout", "-q", "-b", f"{k:02d}-{piece.id}"])
            for patch in piece.patches:
                failed = am(work, patch, patch.adds, f"+{PATCH_NAME}: {patch.name}\n")
                if failed:
                    reasons = "; ".join(failed)
                    raise PatchsetError(f"patch {patch.name} does not apply: {reasons}")
            if piece.files:
                copy_files(work, piece.files)
                git(work, ["add", "--", *piece.files])
                git(work, ["commit", "-q", "-m", f"{piece.id}: new files of the piece"])
        if os.path.isdir(dest):
            os.rmdir(dest)
        os.rename(work, dest)
        return len(series.all_patches(pieces))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _mail(tree: str, commit: str, paths: Sequence[str], adds: Sequence[str]) -> str:
    """``git format-patch`` of a commit (``paths``: its changes the mail carries),
    from :data:`MAIL_FROM`, without date and ``Patch-Name``, with ``Adds``."""
    args = ["format-patch", "-1", "--stdout", "--zero-commit", "--no-numbered"]
    args += ["--no-stat", "--no-signature", "--no-renames", commit, "--", *paths]
    head, _, rest = git(tree, args).partition("\n\n")
    head = re.sub(r"^(?:From|Date): .*\n(?:[ \t].*\n)*", "", head + "\n", flags=re.M)
    first, _, head = head.partition("\n")
    head = f"{first}\nFrom: {MAIL_FROM}\n{head}"
    body, diff = re.split(r"^(?=diff --git )", rest, maxsplit=1, flags=re.M)
    body = re.sub(rf"^(?:{PATCH_NAME}|Adds):.*\n(?:[ \t].*\n)*", "", body, flags=re.M)
    body = body.rstrip("\n") + ("\nAdds: " + "\n ".join(adds) if adds else "")
    return f"{head.rstrip()}\n\n{body}\n\n{diff}"


def _patch_name(tree: str, commit: str, taken: List[str], used: List[str]) -> str:
    """The ``Patch-Name`` of ``commit``, or a new name from its subject."""
    message = git(tree, ["log", "-1", "--format=%B", commit])
    m = re.search(rf"^{PATCH_NAME}: (\S+)$", message, re.M)
    number = max((int(n[:4]) for n in taken + used), default=0) + 1
    subject = message.partition("\n")[0].lower().split(":", 1)[-1]
    slug = re.sub(r"[^a-z0-9]+", "-", subject).strip("-")[:50].rstrip("-")
    name = m[1] if m else f"{number:04d}-{slug or 'patch'}.patch"
    if not series.NAME_RE.match(name) or name in used:
        raise PatchsetError(
            f"commit {commit[:10]}: {name!r} is not a new NNNN-short-name.patch"
        )
    used.append(name)
    return name


def _refuse_to_lose_work(out_root: str, tree: str, final: List[str]) -> None:
    """Refuse a refresh that would delete or overwrite work only ``out_root`` has.

    Refresh replaces the new files' roots of ``out_root`` with the tree's new
    files: a file there that the tree lacks would be deleted, and an uncommitted
    edit (``out_root`` being a git checkout) that the tree does not have would be
    overwritten.
    """
    wanted = set(final)
    lost = []
    for root in series.NEW_FILE_ROOTS:
        for folder, dirs, files in os.walk(os.path.join(out_root, root)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                rel = os.path.relpath(os.path.join(folder, name), out_root)
                if rel not in wanted and not name.endswith(".pyc"):
                    if rel not in series.UPSTREAM_TEST_PACKAGES:
                        lost.append(rel)
    if lost:
        raise PatchsetError(
            f"refresh would delete {sorted(lost)}, which the tree {tree} lacks: "
            "commit them there (listed in a piece of the series), or remove them here"
        )
    if run_git(out_root, ["rev-parse", "--git-dir"]).returncode != 0:
        return
    changed = run_git(
        out_root, ["status", "--porcelain", "--", *series.NEW_FILE_ROOTS]
    ).stdout.splitlines()
    changed = [c for c in changed if c[3:] not in series.UPSTREAM_TEST_PACKAGES]
    overwritten = []
    for line in changed:
        rel = line[3:].strip()
        here, there = os.path.join(out_root, rel), os.path.join(tree, rel)
        if os.path.isfile(here) and not (
            os.path.isfile(there) and filecmp.cmp(here, there, False)
        ):
            overwritten.append(rel)
    if overwritten:
        raise PatchsetError(
            f"refresh would overwrite uncommitted changes to {sorted(overwritten)} "
            f"with the tree's versions: commit them in the tree {tree} first"
        )


def refresh(tree: str, out_root: str = REPO_ROOT) -> Tuple[int, int]:
    """Regenerate ``patches/`` and the new files of ``out_root``; return their counts."""
    tree = os.path.abspath(tree)
    if run_git(tree, ["rev-parse", "--verify", "-q", BASE_TAG]).returncode != 0:
        raise PatchsetError(f"{tree} is not a materialized tree (no '{BASE_TAG}' tag)")
    if git(tree, ["status", "--porcelain"]).strip():
        raise PatchsetError(f"{tree} has uncommitted changes; commit them first")
    patch_dir = os.path.join(out_root, "patches")
    pieces = series.sections(os.path.join(patch_dir, series.SERIES))
    branches = [f"{k:02d}-{piece[0]}" for k, piece in enumerate(pieces, 1)]
    base_files = set(git(tree, ["ls-tree", "-r", "--name-only", BASE_TAG]).split())
    head_files = git(tree, ["ls-tree", "-r", "--name-only", "HEAD"]).split()
    final = [f for f in head_files if f not in base_files]
    for f in final:
        if not f.startswith(tuple(r + "/" for r in series.NEW_FILE_ROOTS)):
            roots = ", ".join(series.NEW_FILE_ROOTS)
            raise PatchsetError(f"{f} is a new file outside {roots}")
    # First pass: the commit (and piece) bringing each new file, each patch's name.
    owner: Dict[str, Tuple[int, str]] = {}
    patches: List[Tuple[int, str, str, List[str]]] = []  # piece, commit, name, paths
    taken = [n for n in os.listdir(patch_dir) if series.NAME_RE.match(n)]
    used: List[str] = []
    previous = BASE_TAG
    diff_tree = ["diff-tree", "-r", "--no-renames", "--name-status"]
    for k, branch in enumerate(branches):
        if run_git(tree, ["merge-base", "--is-ancestor", previous, branch]).returncode:
            raise PatchsetError(
                f"branch {branch} is missing or not on {previous}: the tree has one "
                f"branch per piece of {series.SERIES}, each on the one before"
            )
        revs = git(tree, ["rev-list", "--reverse", f"{previous}..{branch}"]).split()
        for commit in revs:
            changes = git(tree, [*diff_tree, f"{commit}^", commit])
            upstream, grown, added = [], [], []
            for status, path in (line.split("\t", 1) for line in changes.splitlines()):
                if path in base_files and status[0] != "M":
                    raise PatchsetError(
                        f"commit {commit[:10]} deletes or retypes upstream file {path}"
                    )
                if path in base_files:
                    upstream.append(path)
                elif status[0] == "A":
                    owner[path] = (k, commit)
                    added.append(path)
                else:  # a new file a later commit changes: that commit's mail
                    grown.append(path)
            if upstream or grown:
                name = _patch_name(tree, commit, taken, used)
                carried = [f for f in added if not f.startswith(series.LOCAL_ONLY)]
                patches.append((k, commit, name, upstream + grown + carried))
        previous = branch
    if git(tree, ["rev-parse", "HEAD"]) != git(tree, ["rev-parse", branches[-1]]):
        raise PatchsetError(
            f"HEAD is not the last piece's branch {branches[-1]}: check it out"
        )
    # Second pass: the mails and the series, made in memory, then written in one go.
    mails: Dict[str, str] = {}
    sections = []
    for k, (piece_id, title, notes, _) in enumerate(pieces):
        brought = {p[1]: p[2] for p in patches if p[0] == k}

        def in_a_mail(f: str) -> bool:
            # this repository's own tests travel in no mail: files of the piece
            return owner[f][1] in brought and not f.startswith(series.LOCAL_ONLY)

        for _, commit, name, paths in (p for p in patches if p[0] == k):
            adds = [f for f in final if owner.get(f) == (k, commit) and in_a_mail(f)]
            mails[name] = _mail(tree, commit, paths, adds)
        entries = list(brought.values())
        entries += [f for f in final if owner[f][0] == k and not in_a_mail(f)]
        sections.append((piece_id, title, notes, entries))
    _refuse_to_lose_work(out_root, tree, final)
    for name in os.listdir(patch_dir):
        if name.endswith(".patch"):
            os.unlink(os.path.join(patch_dir, name))
    for name, text in mails.items():
        with open(os.path.join(patch_dir, name), "w", encoding="utf-8") as out:
            out.write(text)
    series.write_series(os.path.join(patch_dir, series.SERIES), sections)
    for root in series.NEW_FILE_ROOTS:
        shutil.rmtree(os.path.join(out_root, root), ignore_errors=True)
    for rel in final:
        os.makedirs(os.path.dirname(os.path.join(out_root, rel)), exist_ok=True)
        shutil.copyfile(os.path.join(tree, rel), os.path.join(out_root, rel))
    series.write_test_packages(out_root)  # not ours: upstream's layout
    return len(patches), len(final)


def flavour_differences() -> Dict[str, str]:
    """Patched files that differ between the standard and RTX flavours (outside ``fx/``)."""
    root = tempfile.mkdtemp(prefix="patchset-parity-")
    try:
        std, rtx = os.path.join(root, "standard"), os.path.join(root, "rtx")
        patched_tree(std, "standard")
        patched_tree(rtx, "rtx")
        a, b = set(series.source_files(std)), set(series.source_files(rtx))
        differences = {}
        for rel in sorted(a | b):
            if rel.startswith("py/torch_tensorrt/fx/"):
                continue
            if rel not in a or rel not in b:
                differences[rel] = "present in one flavour only"
            elif not filecmp.cmp(os.path.join(std, rel), os.path.join(rtx, rel), False):
                differences[rel] = "content differs"
        return differences
    finally:
        shutil.rmtree(root, ignore_errors=True)
