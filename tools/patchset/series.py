"""The series: ``patches/series`` (the stack of upstream PRs, each a ``[piece-id]
Title`` line, ``decide:`` lines, its patches and new files) and the patch mails,
whose DEP-3 fields (``Adds``: the new files of its commit) end the body. A mail
carries its new files as ordinary additions (all but this repository's own
tests, ``LOCAL_ONLY``), so plain ``git am`` of the series gives the whole tree."""

import os
import re
import subprocess
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

from . import REPO_ROOT, PatchsetError

PATCH_DIR = os.path.join(REPO_ROOT, "patches")
SERIES = "series"
PACKAGE_PREFIX = "py/torch_tensorrt/"
NEW_FILE_ROOTS = ("py", "tests/py", "tests/examples", "docsrc", "examples")
LOCAL_ONLY = ("tests/examples/",)  # tests of this repository's README and example
# The test packages upstream has (an empty ``__init__.py`` each): kept here so that
# our tests run as upstream's CI imports them (``from .harness import ...``), never
# a new file of ours
UPSTREAM_TEST_PACKAGES = tuple(
    f"tests/py/dynamo{sub}/__init__.py"
    for sub in (
        "",
        "/automatic_plugin",
        "/conversion",
        "/lowering",
        "/models",
        "/partitioning",
        "/runtime",
    )
)
REQUIRED_FIELDS = ("Origin", "Forwarded", "Last-Update")


def write_test_packages(root: str) -> None:
    """Give a tree at ``root`` upstream's test packages (an empty ``__init__.py``
    each, where it has none)."""
    for marker in UPSTREAM_TEST_PACKAGES:
        os.makedirs(os.path.dirname(os.path.join(root, marker)), exist_ok=True)
        open(os.path.join(root, marker), "a").close()


NAME_RE = re.compile(r"^\d{4}-[a-z0-9][a-z0-9-]*\.patch$")
_SECTION_RE = re.compile(r"^\[(?P<id>[a-z0-9][a-z0-9-]*)\]\s+(?P<title>\S.*)$")
_FIELD_RE = re.compile(r"^(?P<key>[A-Z][A-Za-z0-9-]*):(?:[ \t]+(?P<value>.*))?$")
_CACHE_DIRS = ("__pycache__", ".pytest_cache", ".mypy_cache")

# What a piece's PR says beyond its patches, one line each under the piece:
# what its reviewer must decide, the behaviour it changes, its risk and
# compatibility, where it was verified (and what never ran), and the upstream
# work it overlaps
NOTE_KEYS = ("decide", "change", "risk", "verified", "overlap")

Note = Tuple[str, str]  # key, text
Section = Tuple[str, str, List[Note], List[str]]  # id, title, notes, entries


def source_files(root: str) -> List[str]:
    """Files below ``root`` (relative, ``/``-separated, sorted), without caches."""
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _CACHE_DIRS)
        for name in sorted(filenames):
            if not name.endswith((".pyc", ".pyo")):
                full = os.path.join(dirpath, name)
                files.append(os.path.relpath(full, root).replace(os.sep, "/"))
    return files


def new_files(root: str = REPO_ROOT) -> List[str]:
    """Every file the patch set adds to upstream, repository-relative."""
    roots = [r for r in NEW_FILE_ROOTS if os.path.isdir(os.path.join(root, r))]
    found = [f"{r}/{f}" for r in roots for f in source_files(os.path.join(root, r))]
    return [f for f in found if f not in UPSTREAM_TEST_PACKAGES]


def is_test(path: str) -> bool:
    return bool(re.match(r"tests/(.*/)?test_[^/]*\.py$", path))


class Patch:
    """One patch mail: subject, description, DEP-3 fields and diff."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.name = os.path.basename(path)
        with open(path, encoding="utf-8") as f:
            self.text = f.read()
        head, _, rest = self.text.partition("\n\n")
        self.headers: Dict[str, str] = {}
        for line in head.splitlines():
            if line[:1] in (" ", "\t") and self.headers:
                self.headers[list(self.headers)[-1]] += " " + line.strip()
            elif ":" in line and not line.startswith("From "):
                key, _, value = line.partition(":")
                self.headers[key.strip().lower()] = value.strip()
        cut = re.search(r"^diff --git ", rest, re.M)
        self.diff = rest[cut.start() :] if cut else ""
        body = (rest[: cut.start()] if cut else rest).rstrip()
        body = re.sub(r"\n?^---$\Z", "", body, flags=re.M).strip("\n")
        paragraphs = body.split("\n\n") if body else []
        self.fields: List[Tuple[str, str]] = []
        if paragraphs and _FIELD_RE.match(paragraphs[-1].partition("\n")[0]):
            for line in paragraphs.pop().splitlines():
                m = _FIELD_RE.match(line)
                if m:
                    self.fields.append((m["key"], (m["value"] or "").strip()))
                elif self.fields and line[:1] in (" ", "\t"):
                    key, value = self.fields[-1]
                    self.fields[-1] = (key, f"{value}\n{line.strip()}".strip())
        self.description = "\n\n".join(paragraphs)

    @property
    def subject(self) -> str:
        return re.sub(r"^\[PATCH[^\]]*\]\s*", "", self.headers.get("subject", ""))

    def field(self, key: str) -> List[str]:
        return [value for k, value in self.fields if k.lower() == key.lower()]

    @property
    def adds(self) -> List[str]:
        return [path for value in self.field("Adds") for path in value.split()]

    @property
    def message(self) -> str:
        """The commit message upstream gets: subject and description, no DEP-3 fields."""
        if not self.subject:
            raise PatchsetError(f"{self.name}: the mail has no Subject")
        body = f"\n\n{self.description}" if self.description else ""
        return f"{self.subject}{body}\n"

    def touched_files(self) -> List[str]:
        return re.findall(r"^diff --git a/(\S+) b/\S+$", self.diff, re.M)

    def created_files(self) -> List[str]:
        """The files the mail's diff creates (the new files it carries)."""
        return re.findall(r"^diff --git a/(\S+) b/\S+\nnew file mode ", self.diff, re.M)


COMPAT_PREFIX = "compat-"


@dataclass(frozen=True)
class Piece:
    """One upstream PR: its patches, in order, and the new files they bring."""

    id: str
    title: str
    notes: Tuple[Note, ...]
    patches: Tuple[Patch, ...]
    files: Tuple[str, ...]  # new files of the piece that no patch brings

    def note(self, key: str) -> List[str]:
        return [text for k, text in self.notes if k == key]

    @property
    def decisions(self) -> List[str]:
        return self.note("decide")

    @property
    def new_files(self) -> List[str]:
        return [f for p in self.patches for f in p.adds] + list(self.files)

    @property
    def is_compat(self) -> bool:
        """A ``compat-`` piece: what 2.14.0 needs and upstream main does not; the
        wheel's series applies it, the export onto main skips it."""
        return self.id.startswith(COMPAT_PREFIX)

    @property
    def exported_files(self) -> List[str]:
        return [f for f in self.new_files if not f.startswith(LOCAL_ONLY)]

    @property
    def modules(self) -> List[str]:
        """New modules, relative to ``py/`` (as they go into the wheel)."""
        return [f[len("py/") :] for f in self.new_files if f.startswith("py/")]

    @property
    def tests(self) -> List[str]:
        return [f for f in self.new_files if is_test(f)]

    @property
    def depends_on(self) -> List[str]:
        found: List[str] = []
        for patch in self.patches:
            found += [v for v in patch.field("Depends-on") if v not in found]
        return found


def sections(path: str) -> List[Section]:
    """The sections of a series file: (id, title, decisions, entries)."""
    sections: List[Section] = []
    with open(path, encoding="utf-8") as f:
        for lineno, raw in enumerate(f, 1):
            line = raw.strip()
            key = line.split(":", 1)[0]
            if key in NOTE_KEYS and ":" in line and sections:
                sections[-1][2].append((key, line.split(":", 1)[1].strip()))
                continue
            line = line.split("#", 1)[0].strip()
            if m := _SECTION_RE.match(line):
                sections.append((m["id"], m["title"], [], []))
            elif line and (line.startswith("[") or not sections):
                raise PatchsetError(
                    f"{SERIES}:{lineno}: {line!r} is not '[piece-id] Title' or an "
                    "entry of a piece"
                )
            elif line:
                sections[-1][3].append(line)
    return sections


def read_series(
    patch_dir: str = PATCH_DIR, root: str = REPO_ROOT, check_files: bool = True
) -> List[Piece]:
    """The pieces of ``patch_dir/series``, checked against patches and new files."""
    path = os.path.join(patch_dir, SERIES)
    if not os.path.exists(path):
        raise PatchsetError(f"missing {path}")
    problems: List[str] = []
    pieces: List[Piece] = []
    brought: Dict[str, str] = {}
    listed: List[str] = []
    for piece_id, title, notes, entries in sections(path):
        if any(p.id == piece_id for p in pieces):
            problems.append(f"piece '{piece_id}' is declared twice")
        patches: List[Patch] = []
        files: List[str] = []
        for entry in entries:
            if not entry.endswith(".patch"):
                files.append(entry)
            elif not NAME_RE.match(entry):
                problems.append(f"{entry!r} is not NNNN-short-name.patch")
            elif not os.path.exists(os.path.join(patch_dir, entry)):
                problems.append(f"{entry} (piece '{piece_id}') does not exist")
            elif entry in listed:
                problems.append(f"{entry} is listed twice")
            else:
                patches.append(Patch(os.path.join(patch_dir, entry)))
                listed.append(entry)
        owners = [(p.name, p.adds) for p in patches] + [(f"piece '{piece_id}'", files)]
        for owner, paths in owners:
            for f in paths:
                if f in brought:
                    problems.append(f"{f} is brought by both {brought[f]} and {owner}")
                brought.setdefault(f, owner)
                if check_files and not os.path.isfile(os.path.join(root, f)):
                    problems.append(f"{f} (brought by {owner}) does not exist")
        pieces.append(
            Piece(piece_id, title, tuple(notes), tuple(patches), tuple(files))
        )
    for name in sorted(os.listdir(patch_dir)):
        if name.endswith(".patch") and name not in listed:
            problems.append(f"{name} is in patches/ but not in {SERIES}")
    for f in new_files(root) if check_files else []:
        if f not in brought:
            problems.append(
                f"{f} is brought by no patch (its Adds field) and no piece of {SERIES}"
            )
    if problems:
        raise PatchsetError(f"{SERIES}: " + "; ".join(problems))
    return pieces


def all_patches(pieces: Sequence[Piece]) -> List[Patch]:
    return [p for piece in pieces for p in piece.patches]


def write_series(
    path: str, sections: Sequence[Tuple[str, str, Sequence[Note], Sequence[str]]]
) -> None:
    """Write sections to the series file at ``path``, keeping its leading comments."""
    preamble = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip() and not line.startswith("#"):
                    break
                preamble.append(line)
    lines = []
    for piece_id, title, notes, entries in sections:
        lines += [f"[{piece_id}] {title}", *[f"{k}: {text}" for k, text in notes]]
        lines += [*entries, ""]
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(preamble) + "\n".join(lines))


def header_problems(patch: Patch) -> List[str]:
    """What is missing from a patch's mail and DEP-3 fields (empty when complete)."""
    problems = [] if patch.subject else [f"{patch.name}: the mail has no Subject"]
    problems += [
        f"{patch.name}: lacks the DEP-3 field '{key}:'"
        for key in REQUIRED_FIELDS
        if not any(patch.field(key))
    ]
    if not any(k == "Bug" or k.startswith("Bug-") for k, v in patch.fields if v):
        problems.append(f"{patch.name}: lacks 'Bug:' (the upstream issue or PR)")
    created = patch.created_files()
    for path in patch.touched_files():
        new_root = path.startswith(tuple(r + "/" for r in NEW_FILE_ROOTS))
        if path in created and (not new_root or path.startswith(LOCAL_ONLY)):
            problems.append(
                f"{patch.name}: creates {path}, which is not a new module, test, "
                "doc page or example of the upstream tree"
            )
        elif path not in created and not (
            path.startswith(PACKAGE_PREFIX)
            or (new_root and not path.startswith(LOCAL_ONLY))
        ):
            # an upstream file under the package, or a new file an earlier mail created
            problems.append(f"{patch.name}: touches {path}, outside {PACKAGE_PREFIX}")
        if path.startswith(PACKAGE_PREFIX + "fx/"):
            problems.append(f"{patch.name}: touches {path}; the RTX wheel has no fx/")
    for path in created:
        if path not in patch.adds:
            problems.append(
                f"{patch.name}: creates {path} without naming it in its Adds field"
            )
    return problems


def apply_patch(
    patch: Patch, tree: str, strip: int, include: Sequence[str] = ()
) -> None:
    """Apply one patch to ``tree`` completely (only the paths ``include`` matches,
    after ``strip``, when given), or raise with git's reasons."""
    argv = ["git", "apply", "--whitespace=nowarn", f"-p{strip}"]
    argv += [f"--include={pattern}" for pattern in include] + [patch.path]
    env = {**os.environ, "GIT_DIR": os.devnull}
    result = subprocess.run(argv, cwd=tree, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        errors = result.stderr.splitlines()
        reasons = [line[7:] for line in errors if line.startswith("error: ")]
        raise PatchsetError(
            f"patch {patch.name} does not apply: {'; '.join(reasons) or result.stderr}"
        )


def apply_series(
    tree: str, strip: int, patches: Sequence[Patch], include: Sequence[str] = ()
) -> None:
    """Apply ``patches`` in order; ``strip`` is 1 for upstream layout, 2 for a wheel
    (with ``include=("torch_tensorrt/*",)``: the package, not the tests)."""
    for patch in patches:
        apply_patch(patch, tree, strip, include)
