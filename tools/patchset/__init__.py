"""Build and maintenance machinery for the Torch-TensorRT 2.14.0 patch set.

The patch set is data (``patches/series``, ``patches/*.patch``, ``py/`` new
modules, ``base-wheels.sha256``); this package turns it into wheels and source
trees. Every entry point raises :class:`PatchsetError` with one line naming the
cause; the command-line wrappers print that line and exit non-zero.
"""

import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BASE_VERSION = "2.14.0"

# Distribution names of the two flavours; the import name is ``torch_tensorrt`` for both.
FLAVOURS = {
    "standard": "torch_tensorrt",
    "rtx": "torch_tensorrt_rtx",
}


class PatchsetError(Exception):
    """A failure with a one-line, user-facing explanation."""


def flavour_from_env() -> str:
    """Upstream's own switch: ``USE_TRT_RTX=1`` selects the TensorRT-RTX flavour."""
    value = os.environ.get("USE_TRT_RTX", "").strip().lower()
    return "rtx" if value in ("1", "true", "yes", "on") else "standard"
