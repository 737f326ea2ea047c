"""Export the patch set onto an upstream pytorch/TensorRT checkout as a PR branch.

``export`` turns every patch of the series into one commit (message built from
the patch's DEP-3 header, author taken from its ``Author:`` field), then adds
one commit with the new modules (``py/``) and our upstream-style tests
(``tests/py/``). All of it happens in a temporary ``--shared`` clone of the
checkout; the user's checkout only receives the finished branch, by a single
``git fetch``, and only when every patch applied and every new file was free.
When something does not fit, every conflict of every patch is collected and
reported in one error, and the checkout is left exactly as it was.
"""

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from . import REPO_ROOT, PatchsetError, series, wheelbuild

TESTS_ROOT = os.path.join(REPO_ROOT, "tests", "py")
DEFAULT_IDENTITY = ("patchset", "patchset@localhost")

# Environment variables that would make git act on another repository, index
# or object store than the one named with ``-C`` (e.g. when run from a hook).
_GIT_LOCATION_VARS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
    "GIT_QUARANTINE_PATH",
)
_UPSTREAM_MARKERS = ("py/torch_tensorrt/dynamo", "tests/py")
_AUTHOR_RE = re.compile(r"^(?P<name>[^<>]*\S)\s*<(?P<email>[^<>\s]+@[^<>\s]+)>$")
_FIELD_RE = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9-]*):(?:\s+(?P<value>.*))?$")
_MAX_SUBJECT_NAMES = 3


def _git_env() -> Dict[str, str]:
    """The current environment without variables that redirect git elsewhere."""
    return {k: v for k, v in os.environ.items() if k not in _GIT_LOCATION_VARS}


def _run_git(
    repo: str, args: Sequence[str], input_text: Optional[str] = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-C", repo, *args],
        capture_output=True,
        text=True,
        input=input_text,
        env=_git_env(),
    )


def _succeeds(repo: str, args: Sequence[str]) -> bool:
    return _run_git(repo, args).returncode == 0


def _git(repo: str, args: Sequence[str], input_text: Optional[str] = None) -> str:
    """Run git in ``repo``; return stdout or raise naming the command and git's last line."""
    result = _run_git(repo, args, input_text)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        reason = detail[-1] if detail else f"exit status {result.returncode}"
        raise PatchsetError(f"git {args[0]} failed in {repo}: {reason}")
    return result.stdout


# --------------------------------------------------------------------------- checkout


def _validate_checkout(checkout: str, branch: str) -> str:
    """Return the checkout's top directory, or raise naming why it cannot be used."""
    path = os.path.abspath(checkout)
    if not os.path.isdir(path):
        raise PatchsetError(
            f"not a git work tree: {path} does not exist or is not a directory"
        )
    inside = _run_git(path, ["rev-parse", "--is-inside-work-tree"])
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        raise PatchsetError(f"not a git work tree: {path}")
    top = _git(path, ["rev-parse", "--show-toplevel"]).strip()
    if os.path.realpath(top) != os.path.realpath(path):
        raise PatchsetError(
            f"not the top of a git work tree: {path} (the top is {top})"
        )
    missing = [m for m in _UPSTREAM_MARKERS if not os.path.isdir(os.path.join(path, m))]
    if missing:
        raise PatchsetError(
            f"not a pytorch/TensorRT checkout: {path} has no {' or '.join(missing)}/"
        )
    if not _succeeds(path, ["rev-parse", "--verify", "-q", "HEAD^{commit}"]):
        raise PatchsetError(f"upstream checkout has no commits: {path}")
    status = _git(path, ["status", "--porcelain", "--untracked-files=all"]).splitlines()
    if status:
        more = f" (+{len(status) - 1} more)" if len(status) > 1 else ""
        raise PatchsetError(
            f"dirty upstream checkout: {path}: {status[0].strip()}{more}; commit or stash first"
        )
    if not _succeeds(path, ["check-ref-format", "--branch", branch]):
        raise PatchsetError(f"invalid branch name: {branch!r}")
    if _succeeds(path, ["show-ref", "--verify", "-q", f"refs/heads/{branch}"]):
        raise PatchsetError(
            f"branch {branch} already exists in {path}; choose another with --branch"
        )
    return path


def _identity_args(checkout: str) -> List[str]:
    """``-c user.name=... -c user.email=...``: the checkout's identity, or a default where it has none.

    The temporary clone does not inherit the checkout's own ``.git/config``, so
    its identity is passed on explicitly; ``GIT_AUTHOR_*``/``GIT_COMMITTER_*``
    in the environment still take precedence, as they would in the checkout.
    """
    args = []
    for key, default in zip(("user.name", "user.email"), DEFAULT_IDENTITY):
        value = _run_git(checkout, ["config", "--get", key]).stdout.strip()
        args += ["-c", f"{key}={value or default}"]
    return args


# --------------------------------------------------------------------------- messages


@dataclass
class _Field:
    """One DEP-3 header field: ``Key: value`` and its indented continuation lines."""

    key: str
    value: str
    lines: List[str]


def _header_fields(header: str) -> Tuple[List[_Field], List[str]]:
    """Split a DEP-3 header into its fields, in order, and any free-form lines.

    A field's first line is ``Key: value``; following lines indented by
    whitespace continue it. Anything else is free-form text, kept in order.
    """
    fields: List[_Field] = []
    free: List[str] = []
    current: Optional[_Field] = None
    for line in header.rstrip().splitlines():
        if line[:1] in (" ", "\t") and current is not None:
            current.lines.append(line)
            continue
        m = _FIELD_RE.match(line)
        if m:
            current = _Field(m.group("key"), (m.group("value") or "").strip(), [line])
            fields.append(current)
        else:
            current = None
            free.append(line)
    return fields, free


def commit_message(patch: series.Patch) -> Tuple[str, Optional[str]]:
    """Git commit message and ``Name <email>`` author (or None) from the patch's DEP-3 header.

    The subject is the first line of ``Description:`` (or ``Subject:``). The
    body is the long description, de-indented (`` .`` lines become blank
    lines), then any free-form text, then the other header fields as written.
    The author is the ``Author:`` field when it has the form ``Name <email>``.
    """
    fields, free = _header_fields(patch.header)
    description = next(
        (f for f in fields if f.key.lower() in ("description", "subject")), None
    )
    if description is None or not description.value:
        raise PatchsetError(
            f"{patch.name}: header lacks 'Description:'; cannot make a commit subject"
        )
    long_lines = []
    for line in description.lines[1:]:
        text = line[1:].rstrip()
        long_lines.append("" if text.strip() == "." else text)
    others = [line.rstrip() for f in fields if f is not description for line in f.lines]
    paragraphs = ["\n".join(long_lines), "\n".join(free), "\n".join(others)]
    body = "\n\n".join(p.strip("\n") for p in paragraphs if p.strip())
    author_field = next((f for f in fields if f.key.lower() == "author"), None)
    m = _AUTHOR_RE.match(author_field.value) if author_field else None
    author = f"{m.group('name')} <{m.group('email')}>" if m else None
    message = f"{description.value}\n\n{body}\n" if body else f"{description.value}\n"
    return message, author


def _name_list(names: List[str]) -> str:
    if len(names) > _MAX_SUBJECT_NAMES:
        names = names[:_MAX_SUBJECT_NAMES] + [f"{len(names) - _MAX_SUBJECT_NAMES} more"]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


_DOC_ROOTS = ("docsrc/", "examples/")


def overlay_message(modules: List[str], tests: List[str]) -> str:
    """Commit message of the overlay commit: subject naming what is added, body listing every file."""
    module_names = [
        (
            os.path.splitext(os.path.basename(m))[0]
            if m.endswith(".py")
            else os.path.basename(m)
        )
        for m in modules
    ]
    module_names = [n for n in module_names if n != "__init__"] or [
        os.path.basename(m) for m in modules
    ]
    test_names = [
        re.sub(r"^test_", "", os.path.splitext(os.path.basename(t))[0])
        for t in tests
        if re.match(r"test_.*\.py$", os.path.basename(t))
    ] or [os.path.basename(t) for t in tests]
    if modules and not tests and all(m.startswith(_DOC_ROOTS) for m in modules):
        subject = f"docs: add {_name_list(module_names)}"
    elif modules and tests:
        subject = f"feat: add {_name_list(module_names)}, with tests"
    elif modules:
        subject = f"feat: add {_name_list(module_names)}"
    else:
        subject = f"test: add tests for {_name_list(test_names)}"
    body = "New files of the patch set:\n\n" + "".join(
        f"  {f}\n" for f in modules + tests
    )
    return f"{subject}\n\n{body}"


# --------------------------------------------------------------------------- patches


def _failing_hunks(patch: series.Patch, work: str) -> List[str]:
    """Each failing file/hunk of a patch that does not apply to ``work``."""
    if _succeeds(work, ["apply", "--check", "-R", "-p1", patch.path]):
        return ["already applied upstream (it reverse-applies cleanly)"]
    return series.rejected_hunks(patch, work, strip=1)


def _commit(
    work: str, identity: List[str], message: str, author: Optional[str]
) -> None:
    args = [*identity, "commit", "-q", "--no-verify", "--cleanup=whitespace", "-F", "-"]
    if author:
        args.append(f"--author={author}")
    result = _run_git(work, args, message)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise PatchsetError(
            f"git commit failed in {work}: {detail[-1] if detail else result.returncode}"
        )


def _apply_series(
    work: str, identity: List[str], patches: List[series.Patch]
) -> Tuple[int, List[str]]:
    """Apply and commit each patch; return (commits made, conflicts of the patches that failed)."""
    # Every header is checked before the first patch is applied.
    messages = [commit_message(p) for p in patches]
    commits, conflicts = 0, []
    for patch, (message, author) in zip(patches, messages):
        if not patch.diff.strip():
            conflicts.append(f"{patch.name}: contains no diff")
            continue
        result = _run_git(
            work, ["apply", "--index", "-p1", "--whitespace=nowarn", patch.path]
        )
        if result.returncode != 0:
            conflicts += [
                f"{patch.name}: {failure}" for failure in _failing_hunks(patch, work)
            ]
            continue
        _commit(work, identity, message, author)
        commits += 1
    return commits, conflicts


# --------------------------------------------------------------------------- overlay


def _overlay_plan(
    work: str, overlay_root: Optional[str], tests_root: Optional[str]
) -> Tuple[List[Tuple[str, str]], List[str]]:
    """(source, upstream path) pairs of new files, and the ones that would overwrite upstream files."""
    docs: List[Tuple[str, str]] = []
    if overlay_root is None:
        overlay_root, modules = wheelbuild.OVERLAY_ROOT, wheelbuild.overlay_files()
        # this repository's docs pages and examples go upstream too
        for sub in _DOC_ROOTS:
            top = os.path.join(REPO_ROOT, sub)
            if os.path.isdir(top):
                docs += [
                    (os.path.join(top, rel), sub + rel)
                    for rel in wheelbuild.source_files(top)
                ]
    else:
        modules = wheelbuild.source_files(overlay_root)
    tests_root = TESTS_ROOT if tests_root is None else tests_root
    tests = wheelbuild.source_files(tests_root) if os.path.isdir(tests_root) else []
    plan = [(os.path.join(overlay_root, rel), "py/" + rel) for rel in modules]
    plan += [(os.path.join(tests_root, rel), "tests/py/" + rel) for rel in tests]
    plan += docs
    clashes = [
        f"{dest} would overwrite an upstream file"
        for _, dest in plan
        if os.path.lexists(os.path.join(work, dest))
    ]
    return plan, clashes


def _commit_overlay(
    work: str, identity: List[str], plan: List[Tuple[str, str]]
) -> None:
    for src, dest in plan:
        target = os.path.join(work, dest)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(src, target)
    added = [dest for _, dest in plan]
    _git(work, ["add", "--", *added])
    message = overlay_message(
        [d for d in added if d.startswith("py/")],
        [d for d in added if d.startswith("tests/")],
    )
    _commit(work, identity, message, None)


SUITES_FILE = "tests/ci/suites.py"
PLUGIN_SUITE = '"plugins-automatic",'
PLUGIN_TESTS = "tests/py/dynamo/automatic_plugin/"


def _register_plugin_tests(work: str, added: List[str]) -> List[str]:
    """Add new ``automatic_plugin/`` test files to upstream's ``plugins-automatic`` suite.

    That suite lists its files one by one on the standard variant (every other
    directory we add tests to is globbed whole), so a new plugin test would not
    run in upstream CI without this. Returns the entries added.
    """
    new = [
        d[len("tests/py/dynamo/") :]
        for d in added
        if d.startswith(PLUGIN_TESTS) and d.endswith(".py") and "/test_" in d
    ]
    if not new:
        return []
    path = os.path.join(work, SUITES_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        start = next(i for i, line in enumerate(lines) if line.strip() == PLUGIN_SUITE)
        paths = next(
            i for i in range(start, len(lines)) if lines[i].strip() == "paths=("
        )
        end = next(i for i in range(paths, len(lines)) if lines[i].strip() == "),")
    except (OSError, StopIteration):
        raise PatchsetError(
            f"{SUITES_FILE}: cannot find the paths=( ... ) of the {PLUGIN_SUITE[:-1]} "
            f"suite to register {new}"
        ) from None
    indent = lines[end - 1][: len(lines[end - 1]) - len(lines[end - 1].lstrip())]
    lines[end:end] = [f'{indent}"{entry}",' for entry in new]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return new


DOCS_INDEX = "docsrc/tutorials/extensibility/plugins/index.rst"
_DOCS_DIR = "docsrc/tutorials/extensibility/plugins/"
_EXAMPLES_DIR = "examples/dynamo/"


def _example_title(path: str) -> str:
    """The title of a sphinx-gallery example: the docstring line above its ``===``."""
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip() for line in f.read().split("\n")]
    for i in range(1, len(lines)):
        if lines[i] and set(lines[i]) == {"="} and lines[i - 1].strip():
            return lines[i - 1].strip()
    raise PatchsetError(f"{path}: no sphinx-gallery title (a line underlined with '=')")


def _register_docs(work: str, added: List[str]) -> List[str]:
    """Add new plugin pages and examples to the toctree of upstream's plugin docs.

    A page under ``docsrc/tutorials/extensibility/plugins/`` is listed by name; an
    example under ``examples/dynamo/`` as ``Example: <title> <rendered path>``,
    the way the index lists the other plugin examples. Returns the entries added.
    """
    entries = []
    for dest in added:
        name, ext = os.path.splitext(os.path.basename(dest))
        if dest.startswith(_DOCS_DIR) and ext == ".rst" and name != "index":
            entries.append(f"   {name}")
        elif dest.startswith(_EXAMPLES_DIR) and ext == ".py":
            title = _example_title(os.path.join(work, dest))
            entries.append(
                f"   Example: {title} <../../_rendered_examples/dynamo/{name}>"
            )
    if not entries:
        return []
    path = os.path.join(work, DOCS_INDEX)
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        start = next(
            i for i, line in enumerate(lines) if line.strip() == ".. toctree::"
        )
    except (OSError, StopIteration):
        raise PatchsetError(
            f"{DOCS_INDEX}: cannot find its '.. toctree::' to list {entries}"
        ) from None
    last = start
    for i in range(start + 1, len(lines)):
        if lines[i].startswith("   ") and lines[i].strip():
            last = i
        elif lines[i].strip():
            break
    lines[last + 1 : last + 1] = entries
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return [e.strip() for e in entries]


def _register_new_files(work: str, identity: List[str], added: List[str]) -> int:
    """Commit the registration of new plugin tests and docs; return the commits made."""
    commits = 0
    for path, subject, entries in (
        (
            SUITES_FILE,
            "ci: run the new plugin tests in plugins-automatic",
            _register_plugin_tests(work, added),
        ),
        (
            DOCS_INDEX,
            "docs: list the new plugin pages and examples",
            _register_docs(work, added),
        ),
    ):
        if entries:
            _git(work, ["add", "--", path])
            body = "\n".join(f"- {entry}" for entry in entries)
            _commit(work, identity, f"{subject}\n\n{body}", None)
            commits += 1
    return commits


# --------------------------------------------------------------------------- entry point


def export(
    checkout: str,
    branch: str,
    patch_dir: Optional[str] = None,
    overlay_root: Optional[str] = None,
    tests_root: Optional[str] = None,
) -> str:
    """Create ``branch`` in the upstream ``checkout``: one commit per patch, then one for new files.

    ``patch_dir`` (a directory with ``series``), ``overlay_root`` (files to add
    under ``py/``) and ``tests_root`` (files to add under ``tests/py/``) default
    to this repository's ``patches/``, ``py/`` and ``tests/py/``. The checkout's
    HEAD, current branch, index and work tree are never changed; on any
    failure no branch is created. Returns a one-line summary.
    """
    top = _validate_checkout(checkout, branch)
    patches = series.read_series(patch_dir) if patch_dir else series.read_series()
    identity = _identity_args(top)
    head = _git(top, ["rev-parse", "HEAD^{commit}"]).strip()
    scratch = tempfile.mkdtemp(prefix="patchset-export-")
    work = os.path.join(scratch, "clone")
    try:
        _git(scratch, ["clone", "-q", "--shared", "--no-checkout", top, work])
        _git(work, ["checkout", "-q", "-b", branch, head])
        commits, conflicts = _apply_series(work, identity, patches)
        plan, clashes = _overlay_plan(work, overlay_root, tests_root)
        conflicts += [f"overlay: {c}" for c in clashes]
        if conflicts:
            raise PatchsetError(
                f"{len(conflicts)} conflict(s) exporting onto {top} at {head[:10]}, no branch created: "
                + "; ".join(conflicts)
            )
        if plan:
            _commit_overlay(work, identity, plan)
            commits += 1
            commits += _register_new_files(work, identity, [d for _, d in plan])
        if commits == 0:
            raise PatchsetError(
                "nothing to export: the series is empty and there are no new modules or tests"
            )
        _git(top, ["fetch", "-q", work, f"refs/heads/{branch}:refs/heads/{branch}"])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    overlay = f" + 1 commit with {len(plan)} new file(s)" if plan else ""
    return (
        f"created branch {branch} in {top}: {commits} commit(s) on {head[:10]} "
        f"({len(patches)} patch commit(s){overlay})"
    )


def export_stack(
    checkout: str,
    branch_prefix: str,
    patch_dir: Optional[str] = None,
    root: Optional[str] = None,
) -> str:
    """One branch per piece of the stack (``patches/stack``) in the upstream ``checkout``.

    Branch ``<branch_prefix>/<NN>-<piece>`` holds that piece on top of the
    branch before it: one commit per patch (message from its header), then one
    commit with the piece's new files, then, where needed, one registering its
    plugin tests in ``tests/ci/suites.py`` and its pages and examples in the
    plugin docs' toctree. ``patch_dir`` and ``root`` (where the listed new files
    are) default to this repository. As with :func:`export`, the checkout gets
    the branches only when every piece fits, and is otherwise left untouched.
    """
    from . import stack

    patch_dir = patch_dir or series.PATCH_DIR
    root = root or REPO_ROOT
    pieces = stack.read_stack(patch_dir, root)
    branches = [f"{branch_prefix}/{k:02d}-{p.id}" for k, p in enumerate(pieces, 1)]
    top = None
    for branch in branches:
        top = _validate_checkout(checkout, branch)
    assert top is not None
    identity = _identity_args(top)
    head = _git(top, ["rev-parse", "HEAD^{commit}"]).strip()
    scratch = tempfile.mkdtemp(prefix="patchset-export-")
    work = os.path.join(scratch, "clone")
    try:
        _git(scratch, ["clone", "-q", "--shared", "--no-checkout", top, work])
        _git(work, ["checkout", "-q", "-b", branches[0], head])
        conflicts: List[str] = []
        for piece, branch in zip(pieces, branches):
            if branch != branches[0]:
                _git(work, ["checkout", "-q", "-b", branch])
            _, failed = _apply_series(work, identity, list(piece.patches))
            conflicts += [f"[{piece.id}] {c}" for c in failed]
            plan = [(os.path.join(root, f), f) for f in piece.exported_files]
            conflicts += [
                f"[{piece.id}] {dest} would overwrite an upstream file"
                for _, dest in plan
                if os.path.lexists(os.path.join(work, dest))
            ]
            if conflicts or not plan:
                continue
            for src, dest in plan:
                target = os.path.join(work, dest)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copy2(src, target)
            added = [dest for _, dest in plan]
            _git(work, ["add", "--", *added])
            tests = [d for d in added if d.startswith("tests/")]
            _commit(
                work,
                identity,
                overlay_message([d for d in added if d not in tests], tests),
                None,
            )
            _register_new_files(work, identity, added)
        if conflicts:
            raise PatchsetError(
                f"{len(conflicts)} conflict(s) exporting the stack onto {top} at "
                f"{head[:10]}, no branch created: " + "; ".join(conflicts)
            )
        _git(
            top,
            ["fetch", "-q", work]
            + [f"refs/heads/{b}:refs/heads/{b}" for b in branches],
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return (
        f"created {len(branches)} stacked branch(es) in {top} on {head[:10]}: "
        + ", ".join(branches)
    )
