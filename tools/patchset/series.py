"""The quilt-style series: reading it, checking headers, applying patches.

Patches use upstream's layout (``a/py/torch_tensorrt/...``) and may only touch
files under ``py/torch_tensorrt/`` (whole new code goes into ``py/`` as new
modules, never into a patch). A patch is applied with ``git apply``, which
applies a patch entirely or not at all; on failure the patch is re-tried with
``--reject`` in a scratch copy to name each failing file and hunk.
"""

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from typing import List, Optional, Sequence

from . import REPO_ROOT, PatchsetError

PATCH_DIR = os.path.join(REPO_ROOT, "patches")
SERIES_FILE = os.path.join(PATCH_DIR, "series")
PACKAGE_PREFIX = "py/torch_tensorrt/"

_NAME_RE = re.compile(r"^\d{4}-[a-z0-9][a-z0-9-]*\.patch$")
# No "Author": the exported commits are authored by the maintainer who exports
# them (export --author, by default their git identity)
REQUIRED_HEADER_FIELDS = ("Description", "Origin", "Forwarded", "Last-Update")


@dataclass(frozen=True)
class Patch:
    name: str
    path: str

    def read(self) -> str:
        with open(self.path, encoding="utf-8") as f:
            return f.read()

    @property
    def header(self) -> str:
        text = self.read()
        cut = _first_diff_line(text)
        return text[:cut]

    @property
    def diff(self) -> str:
        text = self.read()
        return text[_first_diff_line(text) :]

    def touched_files(self) -> List[str]:
        return [
            m.group(1)
            for m in re.finditer(r"^diff --git a/(\S+) b/\S+$", self.diff, re.M)
        ]


def _first_diff_line(text: str) -> int:
    m = re.search(r"^diff --git ", text, re.M)
    if m is None:
        m = re.search(r"^--- ", text, re.M)
    return m.start() if m else len(text)


def read_series(patch_dir: str = PATCH_DIR) -> List[Patch]:
    series = os.path.join(patch_dir, "series")
    if not os.path.exists(series):
        raise PatchsetError(f"missing {series}")
    patches = []
    with open(series, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            name = line.split("#", 1)[0].strip()
            if not name:
                continue
            if not _NAME_RE.match(name):
                raise PatchsetError(
                    f"series:{lineno}: {name!r} is not NNNN-short-name.patch"
                )
            path = os.path.join(patch_dir, name)
            if not os.path.exists(path):
                raise PatchsetError(
                    f"series:{lineno}: {name} does not exist in patches/"
                )
            patches.append(Patch(name, path))
    listed = {p.name for p in patches}
    unlisted = sorted(
        n for n in os.listdir(patch_dir) if n.endswith(".patch") and n not in listed
    )
    if unlisted:
        raise PatchsetError(f"patches not listed in series: {', '.join(unlisted)}")
    return patches


def header_problems(patch: Patch) -> List[str]:
    """What is missing from a patch's DEP-3 header (empty when it is complete)."""
    header = patch.header
    problems = [
        f"{patch.name}: header lacks '{field}:'"
        for field in REQUIRED_HEADER_FIELDS
        if not re.search(rf"^{field}: \S", header, re.M)
    ]
    if not re.search(r"^(Bug|Bug-[A-Za-z]+): \S", header, re.M):
        problems.append(
            f"{patch.name}: header lacks 'Bug:' (the related upstream issue or PR)"
        )
    for path in patch.touched_files():
        if not path.startswith(PACKAGE_PREFIX):
            problems.append(f"{patch.name}: touches {path}, outside {PACKAGE_PREFIX}")
        elif path.startswith(PACKAGE_PREFIX + "fx/"):
            problems.append(
                f"{patch.name}: touches {path}; fx/ is not shipped by the RTX flavour"
            )
    if re.search(r"^new file mode", patch.diff, re.M):
        problems.append(
            f"{patch.name}: creates a file; new modules belong in py/, not in a patch"
        )
    return problems


def _git_apply(args: Sequence[str], cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "apply", "--whitespace=nowarn", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "GIT_DIR": os.devnull},
    )


def rejected_hunks(patch: Patch, tree: str, strip: int) -> List[str]:
    """Name each file/hunk of ``patch`` that does not apply to ``tree``.

    The files the patch touches are copied into a scratch directory and the patch
    is re-applied there with ``--reject --verbose``, whose report names every
    rejected hunk; ``tree`` itself stays untouched.
    """
    scratch = tempfile.mkdtemp(prefix="patchset-reject-")
    try:
        for path in patch.touched_files():
            rel = path.split("/", strip - 1)[-1]
            src = os.path.join(tree, rel)
            if os.path.isfile(src):
                dest = os.path.join(scratch, rel)
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                shutil.copyfile(src, dest)
        result = _git_apply(
            [f"-p{strip}", "--reject", "--verbose", patch.path], scratch
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    failures = []
    current = "?"
    for line in (result.stderr + result.stdout).splitlines():
        m = re.match(
            r"(?:Checking|Applying) patch (\S+?)(?:\.\.\.| with \d+ rejects?\.\.\.)$",
            line,
        )
        if m:
            current = m.group(1)
            continue
        m = re.match(r"Rejected hunk #(\d+)\.$", line)
        if m:
            failures.append(f"{current} hunk #{m.group(1)}")
            continue
        m = re.match(
            r"error: (\S+): (?:No such file or directory|does not exist in index)$",
            line,
        )
        if m:
            failures.append(f"{m.group(1)}: does not exist")
            continue
        m = re.match(
            r"error: (\S+): already exists in (?:working directory|index)$", line
        )
        if m:
            failures.append(f"{m.group(1)}: already exists")
    return failures or [(result.stderr or result.stdout).strip().splitlines()[-1]]


def apply_patch(patch: Patch, tree: str, strip: int) -> None:
    """Apply one patch to ``tree`` completely, or raise naming patch, file and hunk."""
    result = _git_apply([f"-p{strip}", patch.path], tree)
    if result.returncode != 0:
        failures = rejected_hunks(patch, tree, strip)
        raise PatchsetError(f"patch {patch.name} does not apply: {'; '.join(failures)}")


def apply_series(
    tree: str, strip: int, patches: Optional[List[Patch]] = None
) -> List[Patch]:
    """Apply the whole series in order; ``strip`` is 1 for upstream layout, 2 for a wheel."""
    patches = read_series() if patches is None else patches
    for patch in patches:
        apply_patch(patch, tree, strip)
    return patches
