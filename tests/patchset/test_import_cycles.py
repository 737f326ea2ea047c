"""No import cycle in the installed patched ``torch_tensorrt.dynamo`` that 2.14.0 lacks.

Counting every import (inside functions too), but not a package's re-exports: each
cycle must lie inside one of 2.14.0's own (the settings and the converter registry;
refit and conversion; the two runtime modules), so that a new cycle fails here with
its members named.
"""

import ast
import importlib.util
import os
import sys

PACKAGE = "torch_tensorrt.dynamo"

BASE_CYCLES = [
    {"_settings", "conversion._ConversionContext", "conversion._ConverterRegistry"},
    {"_refit", "conversion._conversion"},
    {"runtime._TRTEngine", "runtime._TorchTensorRTModule"},
]


def modules(root):
    """{module name: path} of the package's modules (no ``__init__``)."""
    found = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py") and name != "__init__.py":
                rel = os.path.relpath(os.path.join(folder, name), root)[:-3]
                found[rel.replace(os.sep, ".")] = os.path.join(folder, name)
    return found


def edges(found):
    """{module: modules it imports}, names relative to the package."""
    out = {m: set() for m in found}
    for module, path in found.items():
        parts = module.split(".")[:-1]
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = parts[: len(parts) - node.level + 1]
                    mod = ".".join([PACKAGE] + base + [node.module or ""]).rstrip(".")
                else:
                    mod = node.module or ""
                names = [mod] + [f"{mod}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                while name.startswith(PACKAGE + "."):
                    rel = name[len(PACKAGE) + 1 :]
                    if rel in found and rel != module:
                        out[module].add(rel)
                        break
                    name = name.rpartition(".")[0]
    return out


def cycles(graph):
    """The strongly connected components of more than one module."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_check_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [{"a", "b", "c"}]


def test_no_import_cycle_2_14_0_lacks():
    spec = importlib.util.find_spec(PACKAGE)
    assert spec is not None and spec.submodule_search_locations
    found = cycles(edges(modules(spec.submodule_search_locations[0])))
    allowed = BASE_CYCLES
    new = [sorted(c) for c in found if not any(c <= a for a in allowed)]
    assert not new, f"import cycles 2.14.0 does not have: {new}"
