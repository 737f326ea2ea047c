"""Loading Torch-TensorRT's C++ library without its notice on a host with no GPU.

When ``libtorchtrt`` (or ``libtorchtrt_runtime``) is loaded, its device list
asks the CUDA driver for devices, and on a host without one it prints
"Unable to read CUDA capable devices. Return status: 35" to stderr, at
``import torch_tensorrt``, before anything was asked (the TensorRT-RTX flavour
builds engines on such a host). :func:`load_library` loads the library with that
one line moved to the debug log; anything else the load prints still reaches
stderr. On a host with a CUDA device the library is loaded as it is.
"""

import logging
import os
import sys
import tempfile

import torch

logger = logging.getLogger(__name__)

_NO_DEVICE_NOTICE = "Unable to read CUDA capable devices"


def load_library(path: str) -> None:
    """``torch.ops.load_library(path)``, without the no-device notice on a CPU-only host."""
    if torch.cuda.is_available():
        torch.ops.load_library(path)
        return
    with tempfile.TemporaryFile() as captured:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(captured.fileno(), 2)
            try:
                torch.ops.load_library(path)
            finally:
                os.dup2(saved, 2)
        finally:
            os.close(saved)
        captured.seek(0)
        printed = captured.read().decode(errors="replace")
    for line in printed.splitlines(keepends=True):
        if _NO_DEVICE_NOTICE in line:
            logger.debug(f"Loading {os.path.basename(path)}: {line.strip()}")
        else:
            sys.stderr.write(line)
