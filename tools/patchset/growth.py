"""New files grow commit by commit: a commit holds the definitions its tree uses.

A new module (or test helper) that arrives whole in its first commit ships code
for later commits: dead code in its own piece, and later diffs that do not show
what their descriptions talk about. :func:`unused_by_commit` finds, in each
commit of a patched tree, the top-level definitions of the series' new files that
nothing in that commit's tree uses; :func:`grow` rewrites a tree's history so that
each definition arrives with the first commit that uses it (the last commit's
files are left byte for byte as they were).

"Used" is by name: a definition is used when its name appears in an upstream
file of the tree, in a test or fixture, in a registering decorator's function,
or in a definition that is itself used (strings count, for ``mock.patch`` paths).
An import inside a ``try`` that catches ``ImportError`` is optional and brings nothing.
Names shared by unrelated code make it keep a definition, never drop one.
"""

import ast
import os
import re
import subprocess
import tempfile
from typing import Dict, FrozenSet, Iterable, List, Optional, Sequence, Set, Tuple

from . import git, git_env

# Decorators that do not register their function anywhere: a function carrying
# only these is used only where its name is.
_PLAIN_DECORATORS = frozenset(
    "dataclass dataclasses.dataclass functools.lru_cache lru_cache functools.cache "
    "cache functools.wraps contextlib.contextmanager contextmanager staticmethod "
    "classmethod property overload typing.overload torch.no_grad no_grad "
    "functools.total_ordering".split()
)
# Upstream code the patches never touch (the standard wheel's legacy FX frontend, which
# the RTX wheel does not ship): its names would keep a new file's definitions by chance.
_UNPATCHED = ("py/torch_tensorrt/fx/",)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _catches_import_error(node: ast.Try) -> bool:
    for handler in node.handlers:
        caught = handler.type
        names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
        if any(
            isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError")
            for n in names
        ):
            return True
    return False


def _walk(node: ast.AST) -> Iterable[ast.AST]:
    """``ast.walk`` without docstrings (a string statement runs nothing) and without
    optional imports (those of a ``try`` that catches ``ImportError``: code that
    works without the module does not bring it)."""
    todo = [node]
    while todo:
        sub = todo.pop()
        if isinstance(sub, ast.Expr) and isinstance(sub.value, ast.Constant):
            continue
        yield sub
        children = list(ast.iter_child_nodes(sub))
        if isinstance(sub, ast.Try) and _catches_import_error(sub):
            children = [
                c
                for c in children
                if c not in sub.body or not isinstance(c, (ast.Import, ast.ImportFrom))
            ]
        todo.extend(children)


def _names(node: ast.AST) -> Set[str]:
    """Every identifier ``node`` mentions, and the words of its strings."""
    found: Set[str] = set()
    for sub in _walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            found.add(sub.attr)
        elif isinstance(sub, ast.ImportFrom) and sub.module:
            found.update(sub.module.split("."))
        elif isinstance(sub, ast.alias):
            found.update(sub.name.split("."))
            if sub.asname:
                found.add(sub.asname)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            found.update(_WORD.findall(sub.value))
        elif isinstance(sub, ast.arg):
            found.add(sub.arg)  # a fixture is used by a test's parameter
        elif isinstance(sub, ast.keyword) and sub.arg:
            found.add(sub.arg)
    return found


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    return ast.unparse(target)


def _defined_name(node: ast.stmt) -> Optional[str]:
    """The one name a top-level statement defines, or None (then it always stays)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
        if isinstance(target, ast.Name) and not target.id.startswith("__"):
            return target.id
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id if not node.target.id.startswith("__") else None
    return None


def _is_root(node: ast.stmt, name: str, is_test: bool) -> bool:
    """A definition used by being defined: a test, a fixture, a registration."""
    if name.startswith("__") and name.endswith("__"):
        return True  # a module's __getattr__, __dir__: Python calls them
    decorators = getattr(node, "decorator_list", [])
    if any(_decorator_name(d) not in _PLAIN_DECORATORS for d in decorators):
        return True
    if is_test and (
        name.startswith("test") or name.startswith("Test") or name == "pytestmark"
    ):
        return True
    return False


class Module:
    """One new file's top-level statements, split into definitions and the rest."""

    def __init__(self, path: str, source: str) -> None:
        self.path = path
        self.source = source
        self.tree = ast.parse(source, filename=path)
        self.is_test = "/test_" in "/" + path or path.endswith("conftest.py")
        self.definitions: Dict[str, List[ast.stmt]] = {}
        self.roots: Set[str] = set()
        self.always: Set[str] = set()  # names that statements always kept mention
        for node in self.tree.body:
            name = _defined_name(node)
            if name is None:
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    self.always |= _names(node)
                continue
            self.definitions.setdefault(name, []).append(node)
            if _is_root(node, name, self.is_test):
                self.roots.add(name)

    def uses_of(self, name: str) -> Set[str]:
        found: Set[str] = set()
        for node in self.definitions.get(name, []):
            found |= _names(node)
        return found


def used_definitions(
    modules: Sequence[Module], other_names: FrozenSet[str]
) -> Dict[str, Set[str]]:
    """For each new file, the definitions the tree uses (a fixed point from the roots)."""
    kept: Dict[str, Set[str]] = {m.path: set() for m in modules}
    mentioned = set(other_names)
    for m in modules:
        mentioned |= m.always
    pending = [(m, n) for m in modules for n in m.roots]
    for m in modules:
        pending += [(m, n) for n in m.definitions if n in mentioned]
    while pending:
        module, name = pending.pop()
        if name in kept[module.path]:
            continue
        kept[module.path].add(name)
        new = module.uses_of(name) - mentioned
        mentioned |= new
        for m in modules:
            pending += [(m, n) for n in new if n in m.definitions]
    return kept


def _tree_files(repo: str, commit: str) -> Dict[str, str]:
    """``path -> blob`` of the ``.py`` files at ``commit``."""
    files = {}
    for line in git(repo, ["ls-tree", "-r", commit]).splitlines():
        meta, path = line.split("\t", 1)
        if path.endswith(".py"):
            files[path] = meta.split()[2]
    return files


class History:
    """A patched tree's commits after ``base``, read once per blob."""

    def __init__(self, repo: str, base: str, head: str = "HEAD") -> None:
        self.repo = repo
        self.base_files = _tree_files(repo, base)
        revs = git(repo, ["rev-list", "--reverse", f"{base}..{head}"]).split()
        self.commits = revs
        self._names: Dict[str, FrozenSet[str]] = {}
        self._sources: Dict[str, str] = {}

    def source(self, blob: str) -> str:
        if blob not in self._sources:
            self._sources[blob] = git(self.repo, ["cat-file", "blob", blob])
        return self._sources[blob]

    def names(self, blob: str, path: str) -> FrozenSet[str]:
        if blob not in self._names:
            try:
                tree = ast.parse(self.source(blob), filename=path)
            except SyntaxError:
                tree = ast.Module(body=[], type_ignores=[])
            self._names[blob] = frozenset(_names(tree))
        return self._names[blob]

    def new_files(self, commit: str) -> Dict[str, str]:
        files = _tree_files(self.repo, commit)
        return {p: b for p, b in files.items() if p not in self.base_files}

    def analyse(
        self, commit: str
    ) -> Tuple[List[Module], Dict[str, Set[str]], Set[str]]:
        """The new files at ``commit``, the definitions its tree uses, and the new
        modules nothing imports (not there yet: their definitions use nothing)."""
        files = _tree_files(self.repo, commit)
        other: Set[str] = set()
        modules = []
        for path, blob in files.items():
            if path.startswith(_UNPATCHED):
                continue  # no patch touches it, so it uses no new file
            if path in self.base_files:
                other |= self.names(blob, path)
            else:
                modules.append(Module(path, self.source(blob)))
        absent = set()
        for m in modules:
            if not m.path.startswith("py/") or m.path.endswith("__init__.py"):
                continue
            name = m.path.rsplit("/", 1)[-1][: -len(".py")]
            if name not in other and not any(
                name in self.names(files[o.path], o.path) for o in modules if o is not m
            ):
                absent.add(m.path)
        present = [m for m in modules if m.path not in absent]
        kept = used_definitions(present, frozenset(other))
        return present, kept, absent


def _unused(
    modules: Sequence[Module], kept: Dict[str, Set[str]], absent: Set[str]
) -> List[str]:
    """``path: name`` of each definition nothing uses, ``path: (imported by nothing)``
    of each module nothing imports."""
    return sorted(
        [
            f"{m.path}: {n}"
            for m in modules
            for n in m.definitions
            if n not in kept[m.path]
        ]
        + [f"{path}: (imported by nothing)" for path in absent]
    )


def unused_by_commit(repo: str, base: str) -> Dict[str, List[str]]:
    """For every commit of ``base..HEAD``: the new files' definitions its tree does
    not use and the new modules nothing imports (:func:`_unused`)."""
    history = History(repo, base)
    return {c: _unused(*history.analyse(c)) for c in history.commits}


_DOC_REFERENCE = re.compile(r"[`:]([A-Za-z_][A-Za-z0-9_]*)`")


def _docstrings(tree: ast.Module) -> Iterable[str]:
    """The docstrings of a module: its own, and those of its classes and functions."""
    for node in ast.walk(tree):
        if isinstance(
            node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        ):
            doc = ast.get_docstring(node)
            if doc:
                yield doc


def docstrings_ahead(repo: str, base: str) -> Dict[str, List[str]]:
    """``commit -> ["path: name"]``: a docstring of a new module (the module's, a
    class's or a function's) naming (``name`` or :func:`name`) a definition of that
    module that a later commit brings. A docstring describes what its commit holds;
    :func:`grow` moves definitions, not the prose about them, so such a sentence is
    for the commit that brings them."""
    history = History(repo, base)
    last = _tree_files(repo, history.commits[-1])
    final: Dict[str, Set[str]] = {}
    found = {}
    for commit in history.commits:
        ahead = []
        for m in history.analyse(commit)[0]:
            if not m.path.startswith("py/") or m.path not in last:
                continue
            if m.path not in final:
                final[m.path] = set(
                    Module(m.path, history.source(last[m.path])).definitions
                )
            named = {
                r for doc in _docstrings(m.tree) for r in _DOC_REFERENCE.findall(doc)
            }
            later = named & final[m.path]
            ahead += [f"{m.path}: {n}" for n in sorted(later - set(m.definitions))]
        found[commit] = ahead
    return found


def _comment_start(lines: List[str], first: int) -> int:
    """The first line (0-based) of the comments directly above line ``first``."""
    while first > 0 and lines[first - 1].lstrip().startswith("#"):
        first -= 1
    return first


def _without(source: str, drop: Iterable[ast.stmt]) -> str:
    lines = source.splitlines(keepends=True)
    gone: Set[int] = set()
    for node in drop:
        first = min(
            [node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]
        )
        start = _comment_start(lines, first - 1)
        gone.update(range(start, node.end_lineno or node.lineno))
    return "".join(line for i, line in enumerate(lines) if i not in gone)


def _unused_imports(source: str) -> str:
    """``source`` without the import names nothing else in it mentions."""
    tree = ast.parse(source)
    rest: Set[str] = set()
    for node in tree.body:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            rest |= _names(node)
    replace: Dict[int, Tuple[int, str]] = {}
    for node in tree.body:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        keep = [
            a
            for a in node.names
            if (a.asname or a.name.split(".")[0]) in rest or a.name == "*"
        ]
        if len(keep) == len(node.names):
            continue
        text = ""
        if keep:
            node.names = keep
            text = ast.unparse(node) + "\n"
        replace[node.lineno - 1] = (node.end_lineno or node.lineno, text)
    if not replace:
        return source
    lines = source.splitlines(keepends=True)
    out: List[str] = []
    i = 0
    while i < len(lines):
        if i in replace:
            end, text = replace[i]
            out.append(text)
            i = end
        else:
            out.append(lines[i])
            i += 1
    return "".join(out)


def _format(source: str) -> str:
    import black  # the project's formatter, in its test requirements

    return black.format_str(source, mode=black.Mode())


def grown_source(module: Module, kept: Set[str]) -> str:
    drop = [
        n
        for name, nodes in module.definitions.items()
        if name not in kept
        for n in nodes
    ]
    if not drop:
        return module.source
    text = _without(module.source, drop)
    return _format(_unused_imports(text))


def plan(history: History) -> Dict[str, Dict[str, Optional[str]]]:
    """``commit -> {path: source, or None where the file is not there yet}``: each
    new file as the commit's tree uses it.

    A module arrives with the first commit that imports it; a definition with the
    first that uses it, and stays. What the last commit does not use either (a
    module or a definition) is kept from its file's first commit: nothing tells
    where it belongs.
    """
    last_modules, last_kept, last_absent = history.analyse(history.commits[-1])
    unused_at_end = {
        (m.path, n)
        for m in last_modules
        for n in m.definitions
        if n not in last_kept[m.path]
    }
    seen: Dict[str, Set[str]] = {}
    result: Dict[str, Dict[str, Optional[str]]] = {}
    for commit in history.commits:
        modules, kept, absent = history.analyse(commit)
        sources: Dict[str, Optional[str]] = {
            path: None
            for path in absent
            if path not in last_absent and path not in seen
        }
        for path in absent - set(sources):  # imported before, or never
            module = Module(path, history.source(history.new_files(commit)[path]))
            modules.append(module)
            kept[path] = set(module.definitions) if path in last_absent else set()
        for m in modules:
            names = seen.setdefault(m.path, set())
            names |= kept[m.path]
            names |= {n for n in m.definitions if (m.path, n) in unused_at_end}
            sources[m.path] = grown_source(m, names & set(m.definitions))
        result[commit] = sources
    return result


def _commit_tree(
    repo: str,
    commit: str,
    parent: str,
    files: Dict[str, Optional[str]],
    message: Optional[str] = None,
) -> str:
    """A commit like ``commit`` on ``parent`` with ``files`` (path -> text, None:
    removed) in its tree; a file keeps its mode where ``commit`` has it."""
    with tempfile.TemporaryDirectory(prefix="growth-") as work:
        env = dict(git_env(), GIT_INDEX_FILE=os.path.join(work, "index"))

        def run(args: Sequence[str], text: Optional[str] = None) -> str:
            out = subprocess.run(
                ["git", "-C", repo, *args],
                input=text,
                capture_output=True,
                text=True,
                env=env,
                check=True,
            )
            return out.stdout

        run(["read-tree", commit])
        for path, text in files.items():
            if text is None:
                run(["update-index", "--force-remove", path])
                continue
            staged = run(["ls-files", "-s", "--", path]).split()
            mode = staged[0] if staged else "100644"
            blob = run(["hash-object", "-w", "--stdin"], text).strip()
            run(["update-index", "--add", "--cacheinfo", f"{mode},{blob},{path}"])
        tree = run(["write-tree"]).strip()
        if message is None:
            message = git(repo, ["log", "-1", "--format=%B", commit])
        author = git(repo, ["log", "-1", "--format=%an%x00%ae%x00%ad", commit]).strip()
        name, email, date = author.split("\x00")
        env.update(GIT_AUTHOR_NAME=name, GIT_AUTHOR_EMAIL=email, GIT_AUTHOR_DATE=date)
        return run(["commit-tree", tree, "-p", parent], message).strip()


def rewrite(
    repo: str,
    base: str,
    sources: Dict[str, Dict[str, Optional[str]]],
    messages: Optional[Dict[str, str]] = None,
) -> Dict[str, str]:
    """Rewrite ``base..HEAD`` of ``repo``, each commit with ``sources[commit]``'s files
    (path -> text, None: absent) in its tree and ``messages[commit]`` as its message
    where given; return old -> new commit.

    Other messages, and the authors, are kept; the branches pointing into the history are moved
    to the rewritten commits, and the work tree is reset to the new ``HEAD``.
    """
    history = History(repo, base)
    mapping: Dict[str, str] = {}
    parent = git(repo, ["rev-parse", base]).strip()
    for commit in history.commits:
        parent = _commit_tree(
            repo, commit, parent, sources.get(commit, {}), (messages or {}).get(commit)
        )
        mapping[commit] = parent
    refs = git(
        repo, ["for-each-ref", "--format=%(refname) %(objectname)", "refs/heads"]
    )
    for line in refs.splitlines():
        ref, sha = line.split()
        if sha in mapping:
            git(repo, ["update-ref", ref, mapping[sha], sha])
    git(repo, ["reset", "-q", "--hard"])
    return mapping


def grow(repo: str, base: str) -> int:
    """Make the new files of ``base..HEAD`` grow (:func:`plan`); return how many
    commits' trees changed. The last commit's files stay as they are."""
    sources = plan(History(repo, base))
    mapping = rewrite(repo, base, sources)
    return sum(
        1
        for old, new in mapping.items()
        if git(repo, ["rev-parse", f"{old}^{{tree}}"])
        != git(repo, ["rev-parse", f"{new}^{{tree}}"])
    )
