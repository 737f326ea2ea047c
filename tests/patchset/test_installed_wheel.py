"""The suite runs against the patched wheel built from this very tree, installed, not the sources."""

import importlib.metadata
import importlib.util
import os

from patchset import wheelbuild


def test_installed_distribution_is_this_patch_set():
    version = importlib.metadata.version("torch_tensorrt_rtx")
    assert version == wheelbuild.local_version(), (
        f"installed torch_tensorrt_rtx {version} is not the wheel of this tree "
        f"({wheelbuild.local_version()}); run tools/run-tests"
    )


def test_torch_tensorrt_is_imported_from_site_packages():
    spec = importlib.util.find_spec("torch_tensorrt")
    assert spec is not None and "site-packages" in spec.origin, spec
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    source_tree = os.path.join(repo, "py") + os.sep
    assert not spec.origin.startswith(
        source_tree
    ), f"torch_tensorrt imported from py/: {spec.origin}"
