"""Base wheels: which file, where it is cached, and that it is the one pinned by
sha256 in ``base-wheels.sha256`` (anything else is refused)."""

import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import urllib.error
import urllib.request
from typing import Dict, Optional

from . import BASE_VERSION, FLAVOURS, REPO_ROOT, PatchsetError

PINS_FILE = os.path.join(REPO_ROOT, "base-wheels.sha256")
DEFAULT_INDEX = "https://pypi.org/simple"


def load_pins(path: str = PINS_FILE) -> Dict[str, str]:
    pins: Dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            parts = line.split()
            if not parts or parts[0].startswith("#"):
                continue
            if len(parts) != 2 or len(parts[0]) != 64:
                raise PatchsetError(
                    f"{path}:{lineno}: expected '<sha256>  <wheel file name>'"
                )
            pins[parts[1].lstrip("*")] = parts[0].lower()
    return pins


def current_python_tag() -> str:
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def current_platform_tag() -> str:
    system, machine = platform.system(), platform.machine().lower()
    if system == "Linux" and machine in ("x86_64", "aarch64"):
        return f"manylinux_2_28_{machine}"
    if system == "Windows" and machine in ("amd64", "x86_64"):
        return "win_amd64"
    raise PatchsetError(
        f"unsupported platform {system}/{machine}: base wheels exist for "
        "manylinux_2_28_x86_64, manylinux_2_28_aarch64 and win_amd64 (--platform)"
    )


def pinned_filename(flavour: str, python_tag: str, platform_tag: str) -> str:
    """The pinned base wheel for this flavour, Python and platform, or a clear error."""
    if flavour not in FLAVOURS:
        raise PatchsetError(
            f"unknown flavour {flavour!r}: expected one of {sorted(FLAVOURS)}"
        )
    dist = FLAVOURS[flavour]
    name = f"{dist}-{BASE_VERSION}-{python_tag}-{python_tag}-{platform_tag}.whl"
    pins = load_pins()
    if name not in pins:
        tags = [n[: -len(".whl")].split("-") for n in pins if n.startswith(dist + "-")]
        available = ", ".join(sorted(f"{t[2]}/{t[4]}" for t in tags))
        raise PatchsetError(
            f"no pinned {dist} {BASE_VERSION} wheel for {python_tag}/{platform_tag}; "
            f"pinned: {available}"
        )
    return name


def cache_dir() -> str:
    root = os.environ.get("TORCHTRT_PATCHSET_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
        "torch-tensorrt-patchset",
    )
    os.makedirs(root, exist_ok=True)
    return root


def verify(path: str, expected: Optional[str] = None) -> None:
    """Raise unless ``path`` is a pinned wheel with the pinned (or ``expected``) digest."""
    name = os.path.basename(path)
    expected = expected or load_pins().get(name)
    if expected is None:
        raise PatchsetError(
            f"{name} is not pinned in base-wheels.sha256; refusing to use it"
        )
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    if h.hexdigest() != expected:
        raise PatchsetError(
            f"sha256 mismatch for {name}: pinned {expected}, got {h.hexdigest()}; "
            "refusing to use it"
        )


def _download(name: str, dest: str) -> None:
    project = name.split("-")[0].replace("_", "-")
    index_url = os.environ.get("TORCHTRT_PATCHSET_INDEX_URL", DEFAULT_INDEX)
    index = f"{index_url.rstrip('/')}/{project}/"
    accept = {"Accept": "application/vnd.pypi.simple.v1+json"}
    try:
        request = urllib.request.Request(index, headers=accept)
        with urllib.request.urlopen(request, timeout=120) as response:
            files = json.load(response)["files"]
        url = next((f["url"] for f in files if f["filename"] == name), None)
        if url is None:
            raise PatchsetError(
                f"base wheel not downloadable: {name} is not listed at {index}"
            )
        with urllib.request.urlopen(url, timeout=600) as response:
            with open(dest, "wb") as out:
                shutil.copyfileobj(response, out)
    except (urllib.error.URLError, OSError, ValueError, KeyError) as e:
        raise PatchsetError(
            f"base wheel not downloadable: {name} from {index}: {e}"
        ) from e


def fetch_base_wheel(flavour: str, python_tag: str, platform_tag: str) -> str:
    """Path of the verified base wheel, downloading it into the cache if needed."""
    name = pinned_filename(flavour, python_tag, platform_tag)
    cached = os.path.join(cache_dir(), name)
    if os.path.exists(cached):
        verify(cached)
        return cached
    fd, tmp = tempfile.mkstemp(prefix=name + ".", suffix=".part", dir=cache_dir())
    os.close(fd)
    try:
        _download(name, tmp)
        verify(tmp, load_pins()[name])
        os.replace(tmp, cached)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return cached
