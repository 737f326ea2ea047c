"""The standard-flavour test environment: what is real in it and what is not.

tools/run-tests installs the patched standard ``torch_tensorrt`` wheel (built from
this repository, installed without its ``tensorrt-cu13-libs`` dependency, which
PyPI only has as a stub) beside the real TensorRT 11.1.0.106 Python bindings,
QDP (``tensorrt.plugin``) and lean runtime library from PyPI. Three stand-in
libraries built from ``tools/trt-cpu/*.c`` take the place of the full
builder/parser libraries. These tests pin down that setup, so that the other
tests' claims about "real TensorRT" hold: the bindings, QDP, the plugin
registry and Torch-TensorRT's C++ runtime library are real; there is no
builder (``trt.Builder()`` raises), hence no network and no engine, and no CUDA
device.
"""

import os

import pytest

if os.environ.get("TORCHTRT_PATCHSET_ENV") != "standard":
    pytest.skip(
        "Checks the standard-flavour environment of tools/run-tests "
        "(TORCHTRT_PATCHSET_ENV=standard); this is another environment.",
        allow_module_level=True,
    )

import importlib.metadata

import torch
import torch_tensorrt
from torch_tensorrt import ENABLED_FEATURES

import tensorrt as trt  # isort: skip


def test_standard_flavour_with_plugins_and_the_cpp_runtime():
    assert not ENABLED_FEATURES.tensorrt_rtx
    assert ENABLED_FEATURES.qdp_plugin
    assert ENABLED_FEATURES.torch_tensorrt_runtime
    # the C++ runtime library registered its ops
    assert hasattr(torch.ops.tensorrt, "execute_engine")
    assert torch_tensorrt.__file__.endswith(
        os.path.join("torch_tensorrt", "__init__.py")
    )
    assert "+" in importlib.metadata.version("torch_tensorrt")  # the patched wheel


def test_real_tensorrt_11_1_bindings_and_qdp():
    import tensorrt.plugin as trtp
    import tensorrt_bindings

    assert trt.__version__ == "11.1.0.106"
    assert trt.Logger is tensorrt_bindings.Logger
    assert trtp.register.__module__ == "tensorrt_bindings.plugin._lib"
    for dist in ("tensorrt-cu13", "tensorrt-cu13-bindings", "tensorrt-lean-cu13-libs"):
        assert importlib.metadata.version(dist) == "11.1.0.106"
    # the real plugin registry of the lean runtime
    assert trt.get_plugin_registry() is not None


def test_no_builder_and_no_device():
    with pytest.raises(TypeError, match="nullptr"):
        trt.Builder(trt.Logger())
    assert not torch.cuda.is_available()
