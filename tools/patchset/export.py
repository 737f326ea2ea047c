"""Export the patch set onto an upstream pytorch/TensorRT checkout as PR branches.

``export`` turns every patch of the series into one commit, then adds the new
modules (``py/``), our upstream-style tests (``tests/py/``), docs and examples.
``export_stack`` makes one branch per piece of ``patches/stack``, each on the
one before; a piece that does not apply ends the stack there: the pieces before
it are exported and the error names the piece and why.

Each commit stands alone: a new module goes into the commit of the first patch
that refers to it (with the new modules it imports), and after every commit
the changed Python files must byte-compile. The commit message is the patch
header's description, without the DEP-3 fields; the author is the caller's git
identity, an explicit ``--author``, or on request the patch headers' own
(``--author header``). ``export_stack`` can write a PR description per piece.

All of it happens in a temporary ``--shared`` clone of the checkout; the user's
checkout only receives finished branches, by a single ``git fetch``. A
2.14.0 checkout to export onto, whose base commit is the released sources, is
made by :func:`make_base`.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

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
    clash = branch_clash(path, branch)
    if clash:
        raise PatchsetError(clash)
    return path


def branch_clash(checkout: str, branch: str) -> Optional[str]:
    """Why ``branch`` cannot be created in ``checkout`` next to its branches, or None.

    Git cannot have both ``a`` and ``a/b``: a branch named like a directory of
    the new one, or below it, blocks it as surely as the same name.
    """
    existing = _git(
        checkout, ["for-each-ref", "--format=%(refname:strip=2)", "refs/heads/"]
    ).splitlines()
    if branch in existing:
        return (
            f"branch {branch} already exists in {checkout}; delete it or choose "
            "another with --branch"
        )
    parts = branch.split("/")
    for k in range(1, len(parts)):
        if "/".join(parts[:k]) in existing:
            return (
                f"branch {'/'.join(parts[:k])} exists in {checkout}, so branch "
                f"{branch} cannot be created; delete it or choose another --branch"
            )
    below = sorted(b for b in existing if b.startswith(branch + "/"))
    if below:
        return (
            f"branch {below[0]} exists in {checkout}, so branch {branch} cannot be "
            "created; delete it or choose another --branch"
        )
    return None


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
    """Git commit message and the header's ``Name <email>`` author (or None).

    The subject is the first line of ``Description:`` (or ``Subject:``); the
    body is the long description, de-indented (`` .`` lines become blank
    lines), then any free-form text. The other DEP-3 fields (``Origin:``,
    ``Forwarded:``, ``Stack:``, ...) are this repository's bookkeeping and stay
    out of the message; ``Stack:`` and ``Depends-on:`` go into the PR
    description (:func:`pr_description`). The author is the ``Author:`` field
    when it has the form ``Name <email>``; it is used only on request.
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
    paragraphs = ["\n".join(long_lines), "\n".join(free)]
    body = "\n\n".join(p.strip("\n") for p in paragraphs if p.strip())
    author_field = next((f for f in fields if f.key.lower() == "author"), None)
    m = _AUTHOR_RE.match(author_field.value) if author_field else None
    author = f"{m.group('name')} <{m.group('email')}>" if m else None
    message = f"{description.value}\n\n{body}\n" if body else f"{description.value}\n"
    return message, author


HEADER_AUTHOR = "header"


def resolve_author(option: Optional[str], checkout: str) -> Optional[str]:
    """The author of the exported commits, as ``Name <email>``.

    ``option`` is ``--author``: ``None`` means the caller's git identity (that
    of this repository, with the environment's ``GIT_AUTHOR_*``), else the
    checkout's; ``"header"`` returns None (each patch's ``Author:`` header, for
    the new-file commits the committer); anything else must be ``Name <email>``.
    """
    if option == HEADER_AUTHOR:
        return None
    if option is not None:
        m = _AUTHOR_RE.match(option.strip())
        if not m:
            raise PatchsetError(
                f"--author {option!r} is not 'Name <email>' (or '{HEADER_AUTHOR}' "
                "for the patch headers' own)"
            )
        return f"{m.group('name')} <{m.group('email')}>"
    for repo in (REPO_ROOT, checkout):
        ident = _run_git(repo, ["var", "GIT_AUTHOR_IDENT"])
        m = re.match(r"^(?P<who>.*>)\s+\d+\s+[-+]\d{4}$", ident.stdout.strip())
        if ident.returncode == 0 and m and _AUTHOR_RE.match(m.group("who")):
            return m.group("who")
    raise PatchsetError(
        "no git identity to author the commits: set git's user.name and "
        "user.email, or pass --author 'Name <email>'"
    )


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


def _stem(dest: str) -> str:
    return os.path.splitext(os.path.basename(dest))[0]


def _refers_to(text: str, dest: str) -> bool:
    """Whether ``text`` names the module ``dest`` (its file name, as a word)."""
    return re.search(rf"(?<![\w]){re.escape(_stem(dest))}(?![\w])", text) is not None


def attach_new_modules(
    patches: Sequence[series.Patch], plan: Sequence[Tuple[str, str]]
) -> Dict[str, List[Tuple[str, str]]]:
    """Which new modules each patch commit must carry so that it stands alone.

    A new module (a ``py/`` file of ``plan``) goes with the first patch whose
    added lines name it, together with the new modules it names itself, and so
    on; the rest stays for the commit of new files. Returns patch name ->
    ``(source, destination)`` pairs.
    """
    modules = [
        (src, dest)
        for src, dest in plan
        if dest.startswith("py/") and dest.endswith(".py") and _stem(dest) != "__init__"
    ]
    sources = {}
    for src, dest in modules:
        with open(src, encoding="utf-8") as f:
            sources[dest] = f.read()
    attached: Dict[str, List[Tuple[str, str]]] = {}
    placed: set = set()
    for patch in patches:
        added = "\n".join(
            line[1:]
            for line in patch.diff.splitlines()
            if line.startswith("+") and not line.startswith("+++")
        )
        wanted = [m for m in modules if m[1] not in placed and _refers_to(added, m[1])]
        queue = list(wanted)
        while queue:
            _, dest = queue.pop()
            for m in modules:
                if (
                    m[1] not in placed
                    and m not in wanted
                    and _refers_to(sources[dest], m[1])
                ):
                    wanted.append(m)
                    queue.append(m)
        if wanted:
            attached[patch.name] = wanted
            placed.update(dest for _, dest in wanted)
    return attached


def _copy_in(work: str, pairs: Sequence[Tuple[str, str]]) -> None:
    for src, dest in pairs:
        target = os.path.join(work, dest)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(src, target)
    _git(work, ["add", "--", *[dest for _, dest in pairs]])


def _check_byte_compiles(work: str) -> None:
    """Every Python file the last commit changed under ``py/`` compiles."""
    changed = _git(
        work, ["diff-tree", "--no-commit-id", "--name-only", "-r", "--root", "HEAD"]
    ).splitlines()
    for rel in changed:
        path = os.path.join(work, rel)
        if rel.startswith("py/") and rel.endswith(".py") and os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                source = f.read()
            try:
                compile(source, rel, "exec")
            except SyntaxError as e:
                subject = _git(work, ["log", "-1", "--format=%s"]).strip()
                raise PatchsetError(
                    f"commit '{subject}' does not stand alone: {rel} does not "
                    f"byte-compile ({e.msg}, line {e.lineno})"
                ) from None


def _check_imports(work: str, python: str) -> None:
    """The modules the last commit changed under ``py/`` import, with ``py/`` first on the path.

    Meaningful on released sources (:func:`make_base`), whose ``py/`` is an
    importable package; ``python`` must have the package's dependencies.
    """
    changed = _git(
        work, ["diff-tree", "--no-commit-id", "--name-only", "-r", "--root", "HEAD"]
    ).splitlines()
    modules = [
        rel[len("py/") : -len(".py")].replace("/", ".").removesuffix(".__init__")
        for rel in changed
        if rel.startswith("py/")
        and rel.endswith(".py")
        and os.path.isfile(os.path.join(work, rel))
    ]
    if not modules:
        return
    env = dict(_git_env(), PYTHONPATH=os.path.join(work, "py"))
    result = subprocess.run(
        [python, "-c", "".join(f"import {m}\n" for m in modules)],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
    )
    if result.returncode != 0:
        subject = _git(work, ["log", "-1", "--format=%s"]).strip()
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise PatchsetError(
            f"commit '{subject}' does not stand alone: importing {', '.join(modules)} "
            f"fails: {last}"
        )


def _check_environment(work: str, python: str) -> None:
    """Refuse, as the environment's fault, a ``python`` that cannot import the
    unpatched package of ``work`` (so that no patch is blamed for it later)."""
    if not os.path.isfile(os.path.join(work, "py", "torch_tensorrt", "__init__.py")):
        return  # nothing importable to try: checked commit by commit
    env = dict(_git_env(), PYTHONPATH=os.path.join(work, "py"))
    result = subprocess.run(
        [python, "-c", "import torch_tensorrt"],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
    )
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise PatchsetError(
            f"{python} cannot import the sources the patches go onto, before any "
            f"patch ({last}): this is the environment, not a patch. Give "
            "--verify-imports/--test-pieces a Python with torch_tensorrt's "
            "dependencies (torch, TensorRT-RTX), e.g. the one the patched RTX wheel "
            "is installed in (CONTRIBUTING, step 6)."
        )


def _check_commit(work: str, verify_python: Optional[str]) -> None:
    _check_byte_compiles(work)
    if verify_python:
        _check_imports(work, verify_python)


def _executable(python: Optional[str]) -> Optional[str]:
    """``python`` usable from any directory: a path made absolute, a name looked up."""
    if not python:
        return None
    if os.sep in python:
        return os.path.abspath(python)
    return shutil.which(python) or python


def _test_piece(work: str, python: str, tests: Sequence[str]) -> Optional[str]:
    """Run ``tests`` in ``work`` with its ``py/`` first on the path; why they fail, or None.

    Onto released sources (:func:`make_base`) of the RTX flavour, ``py/`` runs
    as it is: ``torch_tensorrt`` without its C++ libraries uses its Python
    runtime, and TensorRT-RTX builds engines on the CPU.
    """
    if not tests:
        return None
    env = dict(_git_env(), PYTHONPATH=os.path.join(work, "py"))
    result = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=work,
        capture_output=True,
        text=True,
        env=env,
    )
    if result.returncode == 0:
        return None
    lines = [line for line in result.stdout.strip().splitlines() if line.strip()]
    return lines[-1].strip("= ") if lines else f"pytest exit status {result.returncode}"


def _apply_series(
    work: str,
    identity: List[str],
    patches: List[series.Patch],
    author: Optional[str] = None,
    plan: Sequence[Tuple[str, str]] = (),
    verify_python: Optional[str] = None,
) -> Tuple[int, List[str], List[Tuple[str, str]]]:
    """Apply and commit each patch, each with the new modules it needs.

    Returns (commits made, conflicts of the patches that failed, the entries of
    ``plan`` no patch carried). ``author`` overrides the headers' authors.
    """
    # Every header is checked before the first patch is applied.
    messages = [commit_message(p) for p in patches]
    attached = attach_new_modules(patches, plan)
    carried: set = set()
    commits, conflicts = 0, []
    for patch, (message, header_author) in zip(patches, messages):
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
        modules = attached.get(patch.name, [])
        if modules:
            _copy_in(work, modules)
            carried.update(dest for _, dest in modules)
        _commit(work, identity, message, author or header_author)
        _check_commit(work, verify_python)
        commits += 1
    return commits, conflicts, [pair for pair in plan if pair[1] not in carried]


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
    work: str,
    identity: List[str],
    plan: List[Tuple[str, str]],
    author: Optional[str] = None,
    verify_python: Optional[str] = None,
) -> None:
    _copy_in(work, plan)
    added = [dest for _, dest in plan]
    tests = [d for d in added if d.startswith("tests/")]
    message = overlay_message([d for d in added if d not in tests], tests)
    _commit(work, identity, message, author)
    _check_commit(work, verify_python)


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


def is_released_sources(work: str) -> bool:
    """A 2.14.0 base made from the released sources has no CI manifest or docs."""
    return not any(
        os.path.exists(os.path.join(work, f)) for f in (SUITES_FILE, DOCS_INDEX)
    )


def _register_new_files(
    work: str, identity: List[str], added: List[str], author: Optional[str] = None
) -> int:
    """Commit the registration of new plugin tests and docs; return the commits made.

    On a base of released sources (:func:`make_base`) there is nothing to
    register them in.
    """
    if is_released_sources(work):
        return 0
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
            _commit(work, identity, f"{subject}\n\n{body}", author)
            commits += 1
    return commits


# --------------------------------------------------------------------------- entry point


def export(
    checkout: str,
    branch: str,
    patch_dir: Optional[str] = None,
    overlay_root: Optional[str] = None,
    tests_root: Optional[str] = None,
    author: Optional[str] = None,
    verify_python: Optional[str] = None,
) -> str:
    """Create ``branch`` in the upstream ``checkout``: one commit per patch, then one for new files.

    ``patch_dir`` (a directory with ``series``), ``overlay_root`` (files to add
    under ``py/``) and ``tests_root`` (files to add under ``tests/py/``) default
    to this repository's ``patches/``, ``py/`` and ``tests/py/``. A new module
    goes into the commit of the first patch that needs it. ``author`` is
    ``--author`` (see :func:`resolve_author`); with ``verify_python``, every
    commit's changed modules must import (:func:`_check_imports`). The checkout's HEAD, current
    branch, index and work tree are never changed; on any failure no branch is
    created. Returns a one-line summary.
    """
    top = _validate_checkout(checkout, branch)
    verify_python = _executable(verify_python)
    patches = series.read_series(patch_dir) if patch_dir else series.read_series()
    identity = _identity_args(top)
    who = resolve_author(author, top)
    head = _git(top, ["rev-parse", "HEAD^{commit}"]).strip()
    scratch = tempfile.mkdtemp(prefix="patchset-export-")
    work = os.path.join(scratch, "clone")
    try:
        _git(scratch, ["clone", "-q", "--shared", "--no-checkout", top, work])
        _git(work, ["checkout", "-q", "-b", branch, head])
        if verify_python:
            _check_environment(work, verify_python)
        plan, clashes = _overlay_plan(work, overlay_root, tests_root)
        commits, conflicts, rest = _apply_series(
            work, identity, patches, who, plan, verify_python
        )
        conflicts += [f"overlay: {c}" for c in clashes]
        if conflicts:
            raise PatchsetError(
                f"{len(conflicts)} conflict(s) exporting onto {top} at {head[:10]}, no branch created: "
                + "; ".join(conflicts)
            )
        if rest:
            _commit_overlay(work, identity, rest, who, verify_python)
            commits += 1
        if plan:
            commits += _register_new_files(work, identity, [d for _, d in plan], who)
        if commits == 0:
            raise PatchsetError(
                "nothing to export: the series is empty and there are no new modules or tests"
            )
        _git(top, ["fetch", "-q", work, f"refs/heads/{branch}:refs/heads/{branch}"])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    overlay = f" + 1 commit with {len(rest)} new file(s)" if rest else ""
    carried = len(plan) - len(rest)
    with_modules = f", {carried} new module(s) in the patch commits" if carried else ""
    return (
        f"created branch {branch} in {top}: {commits} commit(s) on {head[:10]} "
        f"({len(patches)} patch commit(s){with_modules}{overlay})"
    )


def _progress(line: str) -> None:
    """One line on stderr while a long export runs (stdout holds its summary)."""
    print(f"export: {line}", file=sys.stderr, flush=True)


def _dedented(paragraph: str) -> List[str]:
    rows = paragraph.split("\n")
    indent = min((len(r) - len(r.lstrip()) for r in rows if r.strip()), default=0)
    return [r[indent:] for r in rows]


def pr_description(
    piece: Any, branch: str, base: str, position: Tuple[int, int], messages: List[str]
) -> str:
    """The description of the PR of one piece of the stack, in Markdown."""
    k, n = position
    lines = [
        f"# {piece.title}",
        "",
        f"Part {k} of {n} of a stack of PRs: branch `{branch}`, on top of `{base}`"
        + (" (review that one first)." if k > 1 else "."),
        "",
        "## Summary",
        "",
    ]
    for message in messages:
        subject, _, body = message.partition("\n")
        paragraphs = body.strip().split("\n\n") if body.strip() else [""]
        first = paragraphs[0].replace("\n", " ")
        lines.append(f"- **{subject}**" + (f" {first}" if first else ""))
        if first.endswith(":") and len(paragraphs) > 1:
            # what the paragraph announces (a reproduction, a list) comes with it
            lines += ["", "  ```python"]
            lines += [f"  {line}".rstrip() for line in _dedented(paragraphs[1])]
            lines += ["  ```", ""]
    lines += ["", "## What a reviewer must decide", ""]
    lines += [f"- {d}" for d in piece.decisions] or ["- (nothing beyond the code)"]
    new = [f for f in piece.exported_files if f not in piece.tests]
    if new:
        lines += ["", "## New files", ""] + [f"- `{f}`" for f in new]
    lines += ["", "## Tests", ""]
    if piece.tests:
        lines += [f"- `{t}`" for t in piece.tests if t in piece.exported_files]
        lines += [
            "",
            "```sh",
            "python -m pytest "
            + " ".join(t for t in piece.tests if t in piece.exported_files),
            "```",
        ]
    else:
        lines.append("- none of its own; the tests of the pieces after it use it")
    related = list(piece.depends_on)
    for patch in piece.patches:
        for url in re.findall(r"^Bug:\s*(\S+)", patch.header, re.M):
            if url not in related:
                related.append(url)
    if related:
        lines += ["", "## Related", ""] + [f"- {url}" for url in related]
    return "\n".join(lines) + "\n"


def export_stack(
    checkout: str,
    branch_prefix: str,
    patch_dir: Optional[str] = None,
    root: Optional[str] = None,
    author: Optional[str] = None,
    pr_dir: Optional[str] = None,
    verify_python: Optional[str] = None,
    test_python: Optional[str] = None,
) -> str:
    """One branch per piece of the stack (``patches/stack``) in the upstream ``checkout``.

    Branch ``<branch_prefix>/<NN>-<piece>`` holds that piece on top of the
    branch before it: one commit per patch (message from its header, carrying
    the new modules it needs), then one commit with the piece's other new files,
    then, where the checkout has them, one registering its plugin tests in
    ``tests/ci/suites.py`` and its pages and examples in the plugin docs'
    toctree. ``patch_dir`` and ``root`` (where the listed new files are) default
    to this repository. The longest prefix of pieces that applies is exported;
    if a piece does not apply, the error names it and why, after the branches
    of the pieces before it were created. ``pr_dir`` receives one PR
    description per exported piece (``<NN>-<piece>.md``). With
    ``verify_python``, every commit's changed modules must import; with
    ``test_python``, each piece's tests must pass at its last commit (else the
    stack ends before that piece, as for a conflict).
    """
    from . import stack

    patch_dir = patch_dir or series.PATCH_DIR
    root = root or REPO_ROOT
    pieces = stack.read_stack(patch_dir, root)
    verify_python, test_python = _executable(verify_python), _executable(test_python)
    branches = [f"{branch_prefix}/{k:02d}-{p.id}" for k, p in enumerate(pieces, 1)]
    top = None
    for branch in branches:
        top = _validate_checkout(checkout, branch)
    assert top is not None
    identity = _identity_args(top)
    who = resolve_author(author, top)
    head = _git(top, ["rev-parse", "HEAD^{commit}"]).strip()
    base_name = _git(top, ["rev-parse", "--abbrev-ref", "HEAD"]).strip()
    if base_name == "HEAD":
        base_name = head[:10]
    scratch = tempfile.mkdtemp(prefix="patchset-export-")
    work = os.path.join(scratch, "clone")
    done: List[str] = []
    stopped = ""
    try:
        _git(scratch, ["clone", "-q", "--shared", "--no-checkout", top, work])
        _git(work, ["checkout", "-q", "--detach", head])
        if verify_python:
            _check_environment(work, verify_python)
        descriptions = []
        for k, (piece, branch) in enumerate(zip(pieces, branches), 1):
            _progress(f"piece {k} of {len(pieces)}, {piece.id}: applying")
            _git(work, ["checkout", "-q", "-b", branch])
            plan = [(os.path.join(root, f), f) for f in piece.exported_files]
            clashes = [
                f"{dest} would overwrite an upstream file"
                for _, dest in plan
                if os.path.lexists(os.path.join(work, dest))
            ]
            failed: List[str] = []
            if not clashes:
                _, failed, rest = _apply_series(
                    work, identity, list(piece.patches), who, plan, verify_python
                )
            conflicts = failed + clashes
            if conflicts:
                stopped = (
                    f"piece '{piece.id}' ({k} of {len(pieces)}) does not apply onto "
                    f"{'the branches above' if done else base_name} "
                    f"({len(conflicts)} conflict(s)): " + "; ".join(conflicts)
                )
                break
            if rest:
                _commit_overlay(work, identity, rest, who, verify_python)
            _register_new_files(work, identity, [d for _, d in plan], who)
            if test_python:
                tests = [t for t in piece.tests if t in piece.exported_files]
                _progress(
                    f"piece {k} of {len(pieces)}, {piece.id}: {len(tests)} test file(s)"
                )
                failure = _test_piece(work, test_python, tests)
                if failure:
                    stopped = (
                        f"piece '{piece.id}' ({k} of {len(pieces)}) applies but its "
                        f"tests fail at its last commit: {failure}"
                    )
                    break
            messages = [commit_message(p)[0] for p in piece.patches]
            descriptions.append(
                (
                    f"{k:02d}-{piece.id}.md",
                    pr_description(
                        piece,
                        branch,
                        done[-1] if done else base_name,
                        (k, len(pieces)),
                        messages,
                    ),
                )
            )
            done.append(branch)
        if done:
            _git(
                top,
                ["fetch", "-q", work]
                + [f"refs/heads/{b}:refs/heads/{b}" for b in done],
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if pr_dir and descriptions:
        os.makedirs(pr_dir, exist_ok=True)
        for name, text in descriptions:
            with open(os.path.join(pr_dir, name), "w", encoding="utf-8") as f:
                f.write(text)
    created = (
        f"created {len(done)} stacked branch(es) in {top} on {head[:10]}: "
        + ", ".join(done)
        if done
        else f"no branch created in {top} at {head[:10]}"
    )
    if pr_dir and descriptions:
        created += f"; PR descriptions in {pr_dir}"
    if stopped:
        raise PatchsetError(f"{created}; {stopped}")
    return created


def make_base(dest: str, flavour: str = "standard") -> str:
    """A git repository at ``dest`` whose one commit is the released 2.14.0 sources.

    Its ``py/`` tree is the wheel's ``torch_tensorrt`` package (``flavour``), in
    upstream's layout, with an empty ``tests/py/``: exported onto it, every patch
    commit's diff is exactly its patch. It has no CI manifest and no docs, so
    nothing is registered there.
    """
    from . import tree

    if os.path.lexists(dest):
        raise PatchsetError(f"{dest} already exists; choose a new directory")
    tree.base_sources(dest, flavour)
    keep = os.path.join(dest, "tests", "py", "README")
    os.makedirs(os.path.dirname(keep))
    with open(keep, "w", encoding="utf-8") as f:
        f.write(
            "Upstream's tests are not in the released wheel; ours are added here.\n"
        )
    _git(dest, ["init", "-q", "-b", "v2.14.0"])
    _git(dest, ["add", "-A"])
    identity = _identity_args(dest)
    _commit(
        dest,
        identity,
        f"Torch-TensorRT 2.14.0: the released sources ({flavour} wheel, py/ tree)\n",
        None,
    )
    return f"made {dest}: branch v2.14.0, one commit with the 2.14.0 {flavour} sources"
