"""Build a patched wheel: verified base wheel + series + ``py/`` overlay.

The base wheel is unpacked and repacked with the ``wheel`` package's own
``unpack``/``pack`` commands (which verify and regenerate RECORD). Everything
happens in a temporary directory; only the finished wheel is moved into the
output directory, so a failure leaves nothing half-written.
"""

import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import List, Optional

from . import BASE_VERSION, REPO_ROOT, PatchsetError, base, series

OVERLAY_ROOT = os.path.join(REPO_ROOT, "py")
DEFAULT_LABEL = "inplace"
_LABEL_RE = re.compile(r"^[a-z0-9]+$")
_CACHE_DIRS = ("__pycache__", ".pytest_cache", ".mypy_cache")


def source_files(root: str) -> List[str]:
    """Files below ``root`` (relative, ``/``-separated, sorted), without caches and byte code."""
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _CACHE_DIRS)
        for name in sorted(filenames):
            if not name.endswith((".pyc", ".pyo")):
                full = os.path.join(dirpath, name)
                files.append(os.path.relpath(full, root).replace(os.sep, "/"))
    return files


def overlay_files() -> List[str]:
    """New modules of the patch set, relative to ``py/`` (e.g. ``torch_tensorrt/x.py``)."""
    return source_files(OVERLAY_ROOT)


def content_hash(
    patches: Optional[List[series.Patch]] = None, modules: Optional[List[str]] = None
) -> str:
    """Hash of everything that changes the built wheel (pins, series, patches, overlay).

    ``patches`` and ``modules`` select part of the patch set (a stack prefix);
    by default the whole series and every new module.
    """
    h = hashlib.sha256()
    patches = series.read_series() if patches is None else patches
    inputs = [base.PINS_FILE, series.SERIES_FILE] + [p.path for p in patches]
    inputs += [
        os.path.join(OVERLAY_ROOT, f)
        for f in (overlay_files() if modules is None else modules)
    ]
    for path in inputs:
        h.update(os.path.relpath(path, REPO_ROOT).replace(os.sep, "/").encode())
        with open(path, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    return h.hexdigest()[:10]


def local_version(
    label: Optional[str] = None,
    patches: Optional[List[series.Patch]] = None,
    modules: Optional[List[str]] = None,
) -> str:
    """``2.14.0+<label>.g<content hash>``: PEP 440 local version naming this exact patch set."""
    label = label or os.environ.get("TORCHTRT_PATCHSET_LABEL") or DEFAULT_LABEL
    if not _LABEL_RE.match(label):
        raise PatchsetError(
            f"label {label!r} must be lower-case letters and digits only"
        )
    return f"{BASE_VERSION}+{label}.g{content_hash(patches, modules)}"


def apply_overlay(tree: str, modules: Optional[List[str]] = None) -> None:
    """Copy ``py/`` new modules (all, or ``modules``) into ``tree``; never overwrite."""
    for rel in overlay_files() if modules is None else modules:
        dest = os.path.join(tree, rel)
        if os.path.exists(dest):
            raise PatchsetError(
                f"py/{rel} would overwrite an upstream file; change upstream files through patches/"
            )
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copy2(os.path.join(OVERLAY_ROOT, rel), dest)


def run_wheel_cli(args: List[str], cwd: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "wheel", *args], cwd=cwd, capture_output=True, text=True
    )
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise PatchsetError(
            f"'wheel {args[0]}' failed: {detail[-1] if detail else result.returncode}"
        )


def _set_version(dist_info: str, version: str) -> str:
    """Rewrite METADATA's Version and rename the .dist-info directory; return the new path."""
    metadata = os.path.join(dist_info, "METADATA")
    with open(metadata, encoding="utf-8") as f:
        text = f.read()
    text, count = re.subn(
        rf"^Version: {re.escape(BASE_VERSION)}$",
        f"Version: {version}",
        text,
        flags=re.M,
    )
    if count != 1:
        raise PatchsetError(f"{metadata}: expected one 'Version: {BASE_VERSION}' line")
    with open(metadata, "w", encoding="utf-8") as f:
        f.write(text)
    dist_name = os.path.basename(dist_info).split("-")[0]
    renamed = os.path.join(
        os.path.dirname(dist_info), f"{dist_name}-{version}.dist-info"
    )
    os.rename(dist_info, renamed)
    return renamed


def build_patched_wheel(
    flavour: str,
    out_dir: str,
    python_tag: Optional[str] = None,
    platform_tag: Optional[str] = None,
    label: Optional[str] = None,
    patches: Optional[List[series.Patch]] = None,
    modules: Optional[List[str]] = None,
) -> str:
    """Build the patched wheel of ``flavour`` into ``out_dir``; return its path.

    ``patches`` and ``modules`` build part of the patch set (a stack prefix).
    """
    python_tag = python_tag or base.current_python_tag()
    platform_tag = platform_tag or base.current_platform_tag()
    patches = series.read_series() if patches is None else patches
    version = local_version(label, patches, modules)
    base_wheel = base.fetch_base_wheel(flavour, python_tag, platform_tag)
    work = tempfile.mkdtemp(prefix="patchset-build-")
    try:
        run_wheel_cli(["unpack", "--dest", work, base_wheel], work)
        (tree,) = glob.glob(os.path.join(work, f"*-{BASE_VERSION}"))
        # Wheel layout is upstream's minus the leading ``py/``: strip ``a/py/``.
        series.apply_series(tree, strip=2, patches=patches)
        apply_overlay(tree, modules)
        (dist_info,) = glob.glob(os.path.join(tree, "*.dist-info"))
        _set_version(dist_info, version)
        packed = os.path.join(work, "packed")
        os.makedirs(packed)
        run_wheel_cli(["pack", "--dest-dir", packed, tree], work)
        (built,) = glob.glob(os.path.join(packed, "*.whl"))
        os.makedirs(out_dir, exist_ok=True)
        final = os.path.join(out_dir, os.path.basename(built))
        tmp_final = final + ".part"
        shutil.copyfile(built, tmp_final)
        os.replace(tmp_final, final)
        return final
    finally:
        shutil.rmtree(work, ignore_errors=True)
