"""Our tests under tests/py import one another as upstream's CI imports its tests:
inside upstream's test packages (an ``__init__.py`` in ``tests/py/dynamo`` and each
folder under it), a bare ``import test_x`` of a sibling module fails, so every import
of another test module is package-relative and no test edits ``sys.path``."""

import ast
import os

from patchset import REPO_ROOT, series

TESTS = os.path.join(REPO_ROOT, "tests", "py", "dynamo")


def _modules():
    """{module name: folder} of every module of ours under tests/py/dynamo."""
    found = {}
    for folder in sorted(os.listdir(TESTS)):
        path = os.path.join(TESTS, folder)
        if os.path.isdir(path):
            for name in os.listdir(path):
                if name.endswith(".py") and name != "__init__.py":
                    found[name[:-3]] = folder
    return found


def bare_imports(source: str, modules) -> list:
    """Absolute imports of one of ``modules``, and ``sys.path`` grown, by line."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            names = []
        found += [f"line {node.lineno}: import of {n}" for n in names if n in modules]
        call = node.func if isinstance(node, ast.Call) else None
        if (
            isinstance(call, ast.Attribute)
            and call.attr in ("insert", "append")
            and ast.unparse(call.value) == "sys.path"
        ):
            found.append(f"line {node.lineno}: sys.path")
    return sorted(found, key=lambda f: int(f.split()[1].rstrip(":")))


def test_the_check_finds_a_bare_import_and_a_path_edit():
    source = "import sys\nsys.path.insert(0, 'x')\nfrom test_a import b\nfrom .test_a import c\n"
    assert bare_imports(source, {"test_a"}) == [
        "line 2: sys.path",
        "line 3: import of test_a",
    ]


def test_tests_import_each_other_package_relative():
    modules = _modules()
    offending = []
    for name, folder in sorted(modules.items()):
        with open(os.path.join(TESTS, folder, name + ".py"), encoding="utf-8") as f:
            offending += [
                f"{folder}/{name}.py {p}" for p in bare_imports(f.read(), modules)
            ]
    assert not offending, "\n".join(offending)


def test_upstream_s_test_packages_are_here():
    missing = [
        p
        for p in series.UPSTREAM_TEST_PACKAGES
        if not os.path.isfile(os.path.join(REPO_ROOT, p))
    ]
    assert not missing, missing
