"""Export the patch set onto an upstream pytorch/TensorRT checkout as PR branches,
made in a temporary ``--shared`` clone and fetched into the checkout when done."""

import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Callable, List, Optional, Sequence, Tuple

from . import REPO_ROOT, PatchsetError, git, git_env, run_git, series, tree

_UPSTREAM_MARKERS = ("py/torch_tensorrt/dynamo", "tests/py")
_MAX_SUBJECT_NAMES = 3
_DOC_ROOTS = ("docsrc/", "examples/")
SUITES_FILE = "tests/ci/suites.py"
PLUGIN_SUITE = '"plugins-automatic",'
PLUGIN_TESTS = "tests/py/dynamo/automatic_plugin/"
DOCS_INDEX = "docsrc/tutorials/extensibility/plugins/index.rst"
_DOCS_DIR = "docsrc/tutorials/extensibility/plugins/"
_EXAMPLES_DIR = "examples/dynamo/"
Finder = Callable[[List[str]], Tuple[int, str]]  # where to insert, with what indent


def _validate_checkout(checkout: str, branch: str) -> str:
    """Return the checkout's top directory, or raise naming why it cannot be used."""
    path = os.path.abspath(checkout)
    if not os.path.isdir(path):
        raise PatchsetError(
            f"not a git work tree: {path} does not exist or is not a directory"
        )
    inside = run_git(path, ["rev-parse", "--is-inside-work-tree"])
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        raise PatchsetError(f"not a git work tree: {path}")
    top = git(path, ["rev-parse", "--show-toplevel"]).strip()
    if os.path.realpath(top) != os.path.realpath(path):
        raise PatchsetError(
            f"not the top of a git work tree: {path} (the top is {top})"
        )
    missing = [m for m in _UPSTREAM_MARKERS if not os.path.isdir(os.path.join(path, m))]
    if missing:
        raise PatchsetError(
            f"not a pytorch/TensorRT checkout: {path} has no {' or '.join(missing)}/"
        )
    if run_git(path, ["rev-parse", "--verify", "-q", "HEAD^{commit}"]).returncode:
        raise PatchsetError(f"upstream checkout has no commits: {path}")
    status = git(path, ["status", "--porcelain", "--untracked-files=all"]).splitlines()
    if status:
        more = f" (+{len(status) - 1} more)" if len(status) > 1 else ""
        raise PatchsetError(
            f"dirty upstream checkout: {path}: {status[0].strip()}{more}; "
            "commit or stash first"
        )
    if run_git(path, ["check-ref-format", "--branch", branch]).returncode:
        raise PatchsetError(f"invalid branch name: {branch!r}")
    if clash := branch_clash(path, branch):
        raise PatchsetError(clash)
    return path


def branch_clash(checkout: str, branch: str) -> Optional[str]:
    """Why ``branch`` cannot be created next to the checkout's (``a`` vs ``a/b``), or None."""
    refs = ["for-each-ref", "--format=%(refname:strip=2)", "refs/heads/"]
    existing = git(checkout, refs).splitlines()
    if branch in existing:
        return (
            f"branch {branch} already exists in {checkout}; delete it or choose "
            "another with --branch"
        )
    parts = branch.split("/")
    above = ["/".join(parts[:k]) for k in range(1, len(parts))]
    below = sorted(b for b in existing if b.startswith(branch + "/"))
    if others := [b for b in above if b in existing] + below:
        return (
            f"branch {others[0]} exists in {checkout}, so branch {branch} cannot be "
            "created; delete it or choose another --branch"
        )
    return None


def files_message(files: List[str]) -> str:
    """Message of a piece's commit of new files that no patch brings (docs, examples)."""
    names = [os.path.splitext(os.path.basename(f))[0] for f in files]
    if len(names) > _MAX_SUBJECT_NAMES:
        names = names[:_MAX_SUBJECT_NAMES] + [f"{len(names) - _MAX_SUBJECT_NAMES} more"]
    listed = (
        names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    )
    docs = all(f.startswith(_DOC_ROOTS + ("tests/",)) for f in files)
    body = "".join(f"  {f}\n" for f in files)
    return f"{'docs' if docs else 'feat'}: add {listed}\n\nNew files:\n\n{body}"


def _commit(work: str, message: str) -> None:
    args = ["commit", "-q", "--no-verify", "--cleanup=whitespace", "-F", "-"]
    git(work, args, message)


def _run_python(work: str, argv: List[str]) -> "subprocess.CompletedProcess[str]":
    """Run ``argv`` in ``work`` with its ``py/`` first on the path."""
    env = dict(git_env(), PYTHONPATH=os.path.join(work, "py"))
    return subprocess.run(argv, cwd=work, capture_output=True, text=True, env=env)


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or ["no output"])[-1]


def _check_commit(work: str, verify_python: Optional[str]) -> None:
    """The Python files HEAD changed under ``py/`` byte-compile (and import)."""
    args = ["diff-tree", "--no-commit-id", "--name-only", "-r", "--root", "HEAD"]
    py = [r for r in git(work, args).splitlines() if re.match(r"py/.*\.py$", r)]
    files = [r for r in py if os.path.isfile(os.path.join(work, r))]
    subject = git(work, ["log", "-1", "--format=%s"]).strip()
    for rel in files:
        with open(os.path.join(work, rel), encoding="utf-8") as f:
            source = f.read()
        try:
            compile(source, rel, "exec")
        except SyntaxError as e:
            raise PatchsetError(
                f"commit '{subject}' does not stand alone: {rel} does not "
                f"byte-compile ({e.msg}, line {e.lineno})"
            ) from None
    if not verify_python or not files:
        return
    modules = [
        rel[len("py/") : -len(".py")].replace("/", ".").removesuffix(".__init__")
        for rel in files
    ]
    code = "".join(f"import {m}\n" for m in modules)
    result = _run_python(work, [verify_python, "-c", code])
    if result.returncode != 0:
        raise PatchsetError(
            f"commit '{subject}' does not stand alone: importing {', '.join(modules)} "
            f"fails: {_last_line(result.stderr)}"
        )


def _check_environment(work: str, python: str) -> None:
    """Refuse a ``python`` lacking a module the base imports (not a patch's fault)."""
    result = _run_python(work, [python, "-c", "import torch_tensorrt"])
    last = _last_line(result.stderr)
    missing = re.match(r"ModuleNotFoundError: No module named '(\w+)", last)
    if result.returncode and missing and missing[1] != "torch_tensorrt":
        raise PatchsetError(
            f"{python} cannot import the sources the patches go onto, before any "
            f"patch ({last}): this is the environment, not a "
            "patch; use a Python with torch_tensorrt's deps (CONTRIBUTING, step 5)"
        )


def _executable(python: Optional[str]) -> Optional[str]:
    """``python`` usable from any directory (a path made absolute, a name looked up)."""
    return os.path.abspath(shutil.which(python) or python) if python else None


def _test_piece(work: str, python: str, tests: Sequence[str]) -> Optional[str]:
    """Run ``tests`` with ``work``'s ``py/`` first on the path; why they fail, or None."""
    argv = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]
    result = _run_python(work, argv) if tests else None
    if result is None or result.returncode == 0:
        return None
    lines = [line for line in result.stdout.strip().splitlines() if line.strip()]
    return lines[-1].strip("= ") if lines else f"pytest exit status {result.returncode}"


def _example_title(path: str) -> str:
    """The title of a sphinx-gallery example: the line above its ``===``."""
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip() for line in f.read().split("\n")]
    for above, line in zip(lines, lines[1:]):
        if line and set(line) == {"="} and above.strip():
            return above.strip()
    raise PatchsetError(f"{path}: no sphinx-gallery title (a line underlined with '=')")


def _insert(work: str, rel: str, new: List[str], find: Finder, missing: str) -> None:
    """Insert ``new`` into ``rel`` where (and with the indent) ``find`` says."""
    try:
        with open(os.path.join(work, rel), encoding="utf-8") as f:
            lines = f.read().split("\n")
        at, indent = find(lines)
    except (OSError, StopIteration):
        raise PatchsetError(f"{rel}: cannot find {missing}") from None
    lines[at:at] = [indent + line for line in new]
    with open(os.path.join(work, rel), "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def _end_of_suite(lines: List[str]) -> Tuple[int, str]:
    start = next(i for i, line in enumerate(lines) if line.strip() == PLUGIN_SUITE)
    paths = next(i for i in range(start, len(lines)) if lines[i].strip() == "paths=(")
    end = next(i for i in range(paths, len(lines)) if lines[i].strip() == "),")
    return end, lines[end - 1][: len(lines[end - 1]) - len(lines[end - 1].lstrip())]


def _end_of_toctree(lines: List[str]) -> Tuple[int, str]:
    last = next(i for i, line in enumerate(lines) if line.strip() == ".. toctree::")
    for i in range(last + 1, len(lines)):
        if lines[i].startswith("   ") and lines[i].strip():
            last = i
        elif lines[i].strip():
            break
    return last + 1, "   "


def _register_new_files(work: str, added: List[str]) -> None:
    """Commit new plugin tests into upstream's CI suite, new pages into its toctree."""
    if not any(
        os.path.exists(os.path.join(work, f)) for f in (SUITES_FILE, DOCS_INDEX)
    ):
        return  # a base of released sources (``make_base``)
    tests = [
        d[len("tests/py/dynamo/") :]
        for d in added
        if d.startswith(PLUGIN_TESTS) and d.endswith(".py") and "/test_" in d
    ]
    docs = []
    for dest in added:
        name, ext = os.path.splitext(os.path.basename(dest))
        if dest.startswith(_DOCS_DIR) and ext == ".rst" and name != "index":
            docs.append(name)
        elif dest.startswith(_EXAMPLES_DIR) and ext == ".py":
            title = _example_title(os.path.join(work, dest))
            docs.append(f"Example: {title} <../../_rendered_examples/dynamo/{name}>")
    if tests:
        where = (
            f"the paths=( ... ) of the {PLUGIN_SUITE[:-1]} suite to register {tests}"
        )
        _insert(work, SUITES_FILE, [f'"{t}",' for t in tests], _end_of_suite, where)
    if docs:
        where = f"its '.. toctree::' to list {[f'   {e}' for e in docs]}"
        _insert(work, DOCS_INDEX, docs, _end_of_toctree, where)
    for path, subject, entries in (
        (SUITES_FILE, "ci: run the new plugin tests in plugins-automatic", tests),
        (DOCS_INDEX, "docs: list the new plugin pages and examples", docs),
    ):
        if entries:
            git(work, ["add", "--", path])
            body = "\n".join(f"- {entry}" for entry in entries)
            _commit(work, f"{subject}\n\n{body}")


def _fetch_preimages(
    work: str, scratch: str, patch_dir: Optional[str], root: str
) -> bool:
    """Give ``work`` the blobs each patch was made against (the series materialized on
    the 2.14.0 sources), so that ``git am -3`` merges a hunk whose context upstream
    main moved, and only a real conflict stops the export; False for another series,
    which applies as it is."""
    if patch_dir or root != REPO_ROOT:
        return False
    made = os.path.join(scratch, "materialized")
    tree.materialize(made)
    git(work, ["fetch", "-q", made, "refs/heads/*:refs/materialized/*"])
    return True


def _export_piece(
    work: str,
    piece: series.Piece,
    verify: Optional[str],
    root: str,
    three_way: bool = False,
) -> List[str]:
    """Commit ``piece`` onto ``work``'s HEAD; return its conflicts (none: all committed)."""
    conflicts = [
        f"{f} would overwrite an upstream file"
        for f in piece.exported_files
        if os.path.lexists(os.path.join(work, f))
    ]
    if conflicts:
        return conflicts
    for patch in piece.patches:
        adds = [f for f in patch.adds if f in piece.exported_files]
        failed = tree.am(work, patch, adds, patch.message, root, three_way)
        reverse = ["apply", "--check", "-R", patch.path]
        if failed and run_git(work, reverse).returncode == 0:
            failed = ["already applied upstream (it reverse-applies cleanly)"]
        if failed:
            conflicts.append(f"{patch.name}: {', '.join(failed)}")
        else:
            _check_commit(work, verify)
    if conflicts:
        return conflicts
    files = [f for f in piece.files if f in piece.exported_files]
    if files:
        tree.copy_files(work, files, root)
        git(work, ["add", "--", *files])
        _commit(work, files_message(files))
        _check_commit(work, verify)
    _register_new_files(work, piece.exported_files)
    return []


def export(
    checkout: str,
    branch: str,
    stack: bool = False,
    patch_dir: Optional[str] = None,
    root: Optional[str] = None,
    pr_dir: Optional[str] = None,
    verify_python: Optional[str] = None,
    test_python: Optional[str] = None,
    with_compat: bool = False,
) -> str:
    """Create ``branch`` (``stack``: ``branch/NN-piece`` per piece) in ``checkout``;
    ``compat-`` pieces only ``with_compat`` (a checkout of the 2.14.0 sources)."""
    root = root or REPO_ROOT
    everything = series.read_series(patch_dir or series.PATCH_DIR, root)
    pieces = [p for p in everything if with_compat or not p.is_compat]
    verify_python, test_python = _executable(verify_python), _executable(test_python)
    names = [f"{branch}/{k:02d}-{p.id}" for k, p in enumerate(pieces, 1)]
    top = ""
    for name in names if stack else [branch]:
        top = _validate_checkout(checkout, name)
    head = git(top, ["rev-parse", "HEAD^{commit}"]).strip()
    base_name = git(top, ["rev-parse", "--abbrev-ref", "HEAD"]).strip()
    base_name = head[:10] if base_name == "HEAD" else base_name
    scratch = tempfile.mkdtemp(prefix="patchset-export-")
    work, done, stopped = os.path.join(scratch, "clone"), [], ""
    try:
        git(scratch, ["clone", "-q", "--shared", "--no-checkout", top, work])
        for key in ("user.name", "user.email"):
            if value := run_git(top, ["config", "--get", key]).stdout.strip():
                git(work, ["config", key, value])
        tree.identity(work)
        three_way = _fetch_preimages(work, scratch, patch_dir, root)
        git(work, ["checkout", "-q", "--detach", head])
        if verify_python:
            _check_environment(work, verify_python)
        for k, piece in enumerate(pieces, 1):
            where = f"piece '{piece.id}' ({k} of {len(pieces)})"
            print(f"export: {where}: applying", file=sys.stderr, flush=True)
            conflicts = _export_piece(work, piece, verify_python, root, three_way)
            tests = [t for t in piece.tests if t in piece.exported_files]
            failure = None
            if not conflicts and test_python:
                failure = _test_piece(work, test_python, tests)
            if conflicts:
                onto = "the pieces before it" if k > 1 else base_name
                stopped = f"{where} does not apply onto {onto} ({len(conflicts)} "
                stopped += "conflict(s)): " + "; ".join(conflicts)
                break
            if failure:
                stopped = f"{where} applies but its tests fail at its last commit: "
                stopped += failure
                break
            if stack:
                git(work, ["branch", names[k - 1]])
                done.append(names[k - 1])
        if not stack and not stopped:
            git(work, ["branch", branch])
            done.append(branch)
        if done:
            refspecs = [f"refs/heads/{b}:refs/heads/{b}" for b in done]
            git(top, ["fetch", "-q", work, *refspecs])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    summary = f"no branch created in {top} at {head[:10]}"
    if done:
        summary = f"created {len(done)} branch(es) in {top} on {head[:10]}: "
        summary += ", ".join(done)
    if pr_dir and done:
        os.makedirs(pr_dir, exist_ok=True)
        for k in range(1, (len(done) if stack else len(pieces)) + 1):
            path = os.path.join(pr_dir, f"{k:02d}-{pieces[k - 1].id}.md")
            with open(path, "w", encoding="utf-8") as f:
                f.write(
                    pr_description(
                        pieces, k, names if stack else [branch], base_name, stack
                    )
                )
        summary += f"; PR descriptions in {pr_dir}"
    if stopped:
        raise PatchsetError(f"{summary}; {stopped}")
    return summary


def _cited(text: str, pieces: Sequence[series.Piece], k: int) -> str:
    """``text`` with each patch number (``0045``) said as upstream sees it: the
    commit of this PR or of another PR of the stack."""

    def commit(number: str) -> str:
        for j, piece in enumerate(pieces, 1):
            for i, patch in enumerate(piece.patches, 1):
                if patch.name.startswith(number + "-"):
                    where = "this PR" if j == k else f"PR {j}, `{piece.id}`"
                    return f"commit {i} of {where}"
        return number

    # a range (0005-0009) first: its ends as commits, "to" between them
    text = re.sub(
        r"(?<![\w.])(00\d\d)-(00\d\d)\b",
        lambda m: f"{commit(m[1])} to {commit(m[2])}",
        text,
    )
    return re.sub(r"(?<![\w.])00\d\d\b", lambda m: commit(m[0]), text)


def _description_without_tests(patch: series.Patch) -> str:
    """The patch's description without its ``Tests:`` paragraph (listed apart)."""
    paragraphs = patch.description.split("\n\n") if patch.description else []
    kept = [p for p in paragraphs if not p.startswith("Tests:")]
    return "\n\n".join(kept)


def pr_description(
    pieces: Sequence[series.Piece],
    k: int,
    branches: Sequence[str],
    base: str,
    stack: bool = True,
) -> str:
    """The description of the PR of piece ``k`` (1-based), in Markdown, short enough
    to read in two minutes: its title, where it sits, each commit's description
    (the mail says what and why), what a reviewer must decide, its risk, the
    upstream work it overlaps, its tests and where it was verified. The behaviour
    change (``change:``) is the mails' to say; the other pieces are their PRs'."""
    piece = pieces[k - 1]
    lines = [f"# {piece.title}", ""]
    if stack:
        on = f"`{branches[k - 2]}` (PR {k - 1})" if k > 1 else f"`{base}`"
        lines.append(f"PR {k} of a stack of {len(branches)}, on {on}.")
    else:
        lines.append(f"Piece {k} of the {len(pieces)} on branch `{branches[0]}`.")
    lines.append("")
    for i, patch in enumerate(piece.patches, 1):
        if len(piece.patches) > 1:
            lines += [f"### {i}. {patch.subject}", ""]
        text = _cited(_description_without_tests(patch), pieces, k)
        if text:
            lines += [text, ""]
    if not piece.patches:
        lines += [files_message(piece.exported_files), ""]
    sections = (
        ("What a reviewer must decide", "decide"),
        ("Risk", "risk"),
        ("Upstream work it overlaps", "overlap"),
        ("Verified", "verified"),
    )
    for title, key in sections:
        notes = [f"- {_cited(t, pieces, k)}" for t in piece.note(key)]
        if notes:
            lines += [f"## {title}", "", *notes, ""]
    tests = [t for t in piece.tests if t in piece.exported_files]
    if tests:
        lines += ["## Tests", "", "```sh", "python -m pytest " + " ".join(tests)]
        lines += ["```", ""]
    related = list(piece.depends_on)
    for patch in piece.patches:
        for key in ("Bug", "Bug-Related"):
            related += [url for url in patch.field(key) if url not in related]
    if related:
        lines += ["Related: " + ", ".join(related)]
    return "\n".join(lines).rstrip("\n") + "\n"


def make_base(dest: str, flavour: str = "standard") -> str:
    """A git repository at ``dest`` whose one commit is the released 2.14.0 sources."""
    if os.path.lexists(dest):
        raise PatchsetError(f"{dest} already exists; choose a new directory")
    tree.base_sources(dest, flavour)
    os.makedirs(os.path.join(dest, "tests", "py"))
    note = "Upstream's tests are not in the released wheel; ours are added here.\n"
    with open(os.path.join(dest, "tests/py/README"), "w", encoding="utf-8") as f:
        f.write(note)
    series.write_test_packages(dest)  # as upstream's tree has them
    git(dest, ["init", "-q", "-b", "v2.14.0"])
    git(dest, ["add", "-A"])
    tree.identity(dest)
    message = f"Torch-TensorRT 2.14.0: the released sources ({flavour} wheel, py/ tree)"
    _commit(dest, message + "\n")
    return f"made {dest}: branch v2.14.0, one commit with the 2.14.0 {flavour} sources"
