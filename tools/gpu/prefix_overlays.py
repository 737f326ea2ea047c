"""Each prefix of the stack as an overlay on its last commit, for the GPU machine.

A GPU run carries one patched package (``.gpu/``, the whole stack) under a size limit,
so a prefix travels as what differs: for each named branch of a materialized tree
(``tools/patchset-cli materialize``: one branch per piece), the ``py/torch_tensorrt``
and ``tests`` files that differ from ``HEAD``'s, as the branch has them, and the list
of those it does not have. ``tools/gpu/run-prefixes`` applies each overlay to a copy of
the package and of the checkout and runs that prefix's tests.

    python3 tools/gpu/prefix_overlays.py TREE OUT_DIR BRANCH...
"""

import io
import os
import subprocess
import sys
import tarfile
from typing import Dict

_SKIP = "py/torch_tensorrt/fx/"  # the flavours differ there; no patch touches it


def _files(tree: str, ref: str) -> Dict[str, str]:
    listing = subprocess.run(
        ["git", "-C", tree, "ls-tree", "-r", "--format=%(objectname) %(path)", ref]
        + ["py/torch_tensorrt", "tests"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    pairs = (line.split(" ", 1) for line in listing.splitlines())
    return {path: blob for blob, path in pairs if not path.startswith(_SKIP)}


def _name(path: str) -> str:
    """Where a file goes: ``site/torch_tensorrt/...`` or ``root/tests/...``."""
    return "site/" + path[len("py/") :] if path.startswith("py/") else "root/" + path


def overlay(tree: str, branch: str, head: Dict[str, str]) -> bytes:
    """The overlay of ``branch`` on ``head`` (path -> blob), an xz tar."""
    files = _files(tree, branch)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))

        for path, blob in sorted(files.items()):
            if head.get(path) != blob:
                data = subprocess.run(
                    ["git", "-C", tree, "cat-file", "blob", blob],
                    capture_output=True,
                    check=True,
                ).stdout
                add(_name(path), data)
        gone = sorted(_name(p) for p in head if p not in files)
        add("delete.txt", "".join(f"{p}\n" for p in gone).encode())
    return buffer.getvalue()


def main(argv: list) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    tree, out, branches = argv[0], argv[1], argv[2:]
    os.makedirs(out, exist_ok=True)
    head = _files(tree, "HEAD")
    for branch in branches:
        data = overlay(tree, branch, head)
        with open(os.path.join(out, f"{branch}.tar.xz"), "wb") as f:
            f.write(data)
        print(f"{branch}: {len(data)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
