"""PEP 517 build backend: ``pip wheel --no-deps . -w dist`` builds the patched wheel.

The flavour follows upstream's switch, ``USE_TRT_RTX=1`` (TensorRT-RTX) or unset
(standard TensorRT). ``--config-settings`` keys:

- ``python``: CPython tag of the base wheel (``cp310`` ... ``cp314``), default: the
  Python running the build;
- ``platform``: ``manylinux_2_28_x86_64``, ``manylinux_2_28_aarch64`` or ``win_amd64``,
  default: this machine;
- ``label``: the word in the local version ``2.14.0+<label>.g<hash>`` (default ``inplace``).

There is no prepare-metadata hook on purpose: pip then reads the metadata from the
built wheel, which is the base wheel's METADATA with only the version changed.
"""

import os
import sys
import tarfile
from typing import Any, Dict, List, Optional

from . import REPO_ROOT, PatchsetError, flavour_from_env, wheelbuild

ConfigSettings = Optional[Dict[str, Any]]

# Files an sdist needs to rebuild the same wheel.
_SDIST_TOPLEVEL = (
    "pyproject.toml",
    "setup.py",
    "base-wheels.sha256",
    "README.md",
    "patches",
    "py",
    "tools/patchset",
)


def _setting(config_settings: ConfigSettings, key: str) -> Optional[str]:
    value = (config_settings or {}).get(key)
    if isinstance(value, list):
        value = value[-1]
    return value


def get_requires_for_build_wheel(config_settings: ConfigSettings = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: ConfigSettings = None) -> List[str]:
    return []


def build_wheel(
    wheel_directory: str,
    config_settings: ConfigSettings = None,
    metadata_directory: Optional[str] = None,
) -> str:
    try:
        path = wheelbuild.build_patched_wheel(
            flavour_from_env(),
            wheel_directory,
            python_tag=_setting(config_settings, "python"),
            platform_tag=_setting(config_settings, "platform"),
            label=_setting(config_settings, "label"),
        )
    except PatchsetError as e:
        # One line naming the cause; pip shows it above its own summary.
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(1) from None
    return os.path.basename(path)


def build_sdist(sdist_directory: str, config_settings: ConfigSettings = None) -> str:
    version = wheelbuild.local_version(_setting(config_settings, "label"))
    name = f"torch_tensorrt_patchset-{version}"
    final = os.path.join(sdist_directory, f"{name}.tar.gz")
    tmp = final + ".part"

    def keep(info: tarfile.TarInfo) -> Optional[tarfile.TarInfo]:
        return None if "__pycache__" in info.name else info

    with tarfile.open(tmp, "w:gz") as tar:
        for entry in _SDIST_TOPLEVEL:
            tar.add(
                os.path.join(REPO_ROOT, entry), arcname=f"{name}/{entry}", filter=keep
            )
    os.replace(tmp, final)
    return os.path.basename(final)
