"""PEP 517 backend of the patched wheel (``USE_TRT_RTX=1``: RTX); ``--config-settings``
``python``, ``platform`` and ``label``. No metadata hook: pip reads the wheel's."""

import os
import sys
from typing import Any, Dict, List, Optional

from . import PatchsetError, flavour_from_env, wheelbuild

ConfigSettings = Optional[Dict[str, Any]]


def _setting(config_settings: ConfigSettings, key: str) -> Optional[str]:
    value = (config_settings or {}).get(key)
    return value[-1] if isinstance(value, list) else value


def get_requires_for_build_wheel(config_settings: ConfigSettings = None) -> List[str]:
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
        print(f"error: {e}", file=sys.stderr)  # one line, above pip's own summary
        raise SystemExit(1) from None
    return os.path.basename(path)
