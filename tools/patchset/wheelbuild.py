"""Build a patched wheel: the verified base wheel, unpacked, patched, given the
``py/`` new modules and repacked (``wheel unpack``/``pack``) in a temporary directory.
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
_VERSION_RE = re.compile(rf"^Version: {re.escape(BASE_VERSION)}$", re.M)


def overlay_files() -> List[str]:
    """New modules of the patch set, relative to ``py/``."""
    return series.source_files(OVERLAY_ROOT)


def _whole(patches: Optional[List[series.Patch]]) -> List[series.Patch]:
    if patches is None:
        return series.all_patches(series.read_series(check_files=False))
    return patches


def content_hash(
    patches: Optional[List[series.Patch]] = None, modules: Optional[List[str]] = None
) -> str:
    """Hash of the pins, series, ``patches`` and ``modules`` (default: all of them)."""
    h = hashlib.sha256()
    inputs = [base.PINS_FILE, os.path.join(series.PATCH_DIR, series.SERIES)]
    inputs += [p.path for p in _whole(patches)]
    modules = overlay_files() if modules is None else modules
    inputs += [os.path.join(OVERLAY_ROOT, f) for f in modules]
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
    """``2.14.0+<label>.g<content hash>``: the PEP 440 version of this patch set."""
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
                f"py/{rel} would overwrite an upstream file; "
                "change upstream files through patches/"
            )
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copy2(os.path.join(OVERLAY_ROOT, rel), dest)


def run_wheel_cli(args: List[str], cwd: str) -> None:
    argv = [sys.executable, "-m", "wheel", *args]
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise PatchsetError(
            f"'wheel {args[0]}' failed: {detail[-1] if detail else result.returncode}"
        )


def build_patched_wheel(
    flavour: str,
    out_dir: str,
    python_tag: Optional[str] = None,
    platform_tag: Optional[str] = None,
    label: Optional[str] = None,
    patches: Optional[List[series.Patch]] = None,
    modules: Optional[List[str]] = None,
) -> str:
    """Build the patched wheel (``patches``/``modules``: a stack prefix); return its path."""
    python_tag = python_tag or base.current_python_tag()
    platform_tag = platform_tag or base.current_platform_tag()
    patches = _whole(patches)
    version = local_version(label, patches, modules)
    base_wheel = base.fetch_base_wheel(flavour, python_tag, platform_tag)
    work = tempfile.mkdtemp(prefix="patchset-build-")
    try:
        run_wheel_cli(["unpack", "--dest", work, base_wheel], work)
        (tree,) = glob.glob(os.path.join(work, f"*-{BASE_VERSION}"))
        # wheel layout: no ``py/``; the mails' new modules come with them, not
        # their tests
        series.apply_series(tree, 2, patches, include=("torch_tensorrt/*",))
        carried = {f[len("py/") :] for p in patches for f in p.created_files()}
        rest = overlay_files() if modules is None else modules
        apply_overlay(tree, [m for m in rest if m not in carried])
        (dist_info,) = glob.glob(os.path.join(tree, "*.dist-info"))
        metadata = os.path.join(dist_info, "METADATA")
        with open(metadata, encoding="utf-8") as f:
            text, count = _VERSION_RE.subn(f"Version: {version}", f.read())
        if count != 1:
            raise PatchsetError(
                f"{metadata}: expected one 'Version: {BASE_VERSION}' line"
            )
        with open(metadata, "w", encoding="utf-8") as f:
            f.write(text)
        dist_name = os.path.basename(dist_info).split("-")[0]
        os.rename(dist_info, os.path.join(tree, f"{dist_name}-{version}.dist-info"))
        packed = os.path.join(work, "packed")
        os.makedirs(packed)
        run_wheel_cli(["pack", "--dest-dir", packed, tree], work)
        (built,) = glob.glob(os.path.join(packed, "*.whl"))
        os.makedirs(out_dir, exist_ok=True)
        final = os.path.join(out_dir, os.path.basename(built))
        shutil.copyfile(built, final + ".part")
        os.replace(final + ".part", final)
        return final
    finally:
        shutil.rmtree(work, ignore_errors=True)
