"""The runtime of the installed patched wheel imports nothing from the compiler.

2.14.0's runtime (``torch_tensorrt/dynamo/runtime``) imports neither conversion,
lowering nor partitioning: a deployed engine needs none of them, and a runtime
that reads compile-time analysis would re-derive what the compiler decided.
Checked on the source of every runtime module, imports inside functions
included, so that a lazy import is caught too.
"""

import ast
import importlib.util
import os

import pytest

COMPILER = tuple(
    f"torch_tensorrt.dynamo.{layer}"
    for layer in ("conversion", "lowering", "partitioning")
)


def _runtime_modules():
    spec = importlib.util.find_spec("torch_tensorrt")
    assert spec is not None and spec.submodule_search_locations
    runtime = os.path.join(spec.submodule_search_locations[0], "dynamo", "runtime")
    return sorted(
        os.path.join(runtime, f) for f in os.listdir(runtime) if f.endswith(".py")
    )


def _imported(path):
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            yield f"(relative) {'.' * node.level}{node.module or ''}"


@pytest.mark.parametrize("path", _runtime_modules(), ids=os.path.basename)
def test_runtime_module_imports_nothing_from_the_compiler(path):
    wrong = [
        name
        for name in _imported(path)
        if name.startswith(COMPILER) or name.startswith("(relative) ..")
    ]
    assert not wrong, f"{os.path.basename(path)} imports {wrong}"
