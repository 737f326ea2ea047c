"""Build and maintenance machinery for the Torch-TensorRT 2.14.0 patch set.

Each module does one job and raises :class:`PatchsetError`, one line naming the cause.
"""

import os
import subprocess
from typing import Dict, Optional, Sequence

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BASE_VERSION = "2.14.0"

# Distribution names of the two flavours; the import name is ``torch_tensorrt`` for both.
FLAVOURS = {"standard": "torch_tensorrt", "rtx": "torch_tensorrt_rtx"}

# Variables that would make git act on another repository than ``-C`` names (git hooks).
_GIT_LOCATION_VARS = frozenset(
    "GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_COMMON_DIR "
    "GIT_PREFIX GIT_ALTERNATE_OBJECT_DIRECTORIES GIT_NAMESPACE GIT_QUARANTINE_PATH".split()
)


class PatchsetError(Exception):
    """A failure with a one-line, user-facing explanation."""


def flavour_from_env() -> str:
    """Upstream's own switch: ``USE_TRT_RTX=1`` selects the TensorRT-RTX flavour."""
    value = os.environ.get("USE_TRT_RTX", "").strip().lower()
    return "rtx" if value in ("1", "true", "yes", "on") else "standard"


def git_env() -> Dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _GIT_LOCATION_VARS}


def run_git(
    repo: str, args: Sequence[str], input_text: Optional[str] = None
) -> "subprocess.CompletedProcess[str]":
    argv, env = ["git", "-C", repo, *args], git_env()
    return subprocess.run(
        argv, input=input_text, capture_output=True, text=True, env=env
    )


def git(repo: str, args: Sequence[str], input_text: Optional[str] = None) -> str:
    """Run git in ``repo``; return stdout or raise naming the command and git's last line."""
    result = run_git(repo, args, input_text)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        reason = detail[-1] if detail else f"exit status {result.returncode}"
        raise PatchsetError(f"git {args[0]} failed in {repo}: {reason}")
    return result.stdout
