import os
import shutil

import pytest
from patchset import PatchsetError, base


def test_every_pin_is_a_2_14_0_wheel_of_a_known_flavour():
    pins = base.load_pins()
    assert pins, "base-wheels.sha256 is empty"
    for name, digest in pins.items():
        dist, version, py, abi, plat = name[: -len(".whl")].split("-")
        assert dist in ("torch_tensorrt", "torch_tensorrt_rtx"), name
        assert version == "2.14.0", name
        assert py == abi and py.startswith("cp"), name
        assert int(digest, 16) >= 0 and len(digest) == 64, name


def test_this_machine_has_a_pinned_base_for_both_flavours():
    for flavour in ("standard", "rtx"):
        name = base.pinned_filename(
            flavour, base.current_python_tag(), base.current_platform_tag()
        )
        assert name.endswith(f"-{base.current_platform_tag()}.whl")


def test_unsupported_python_is_one_clear_error():
    with pytest.raises(
        PatchsetError, match=r"no pinned torch_tensorrt_rtx 2\.14\.0 wheel for cp39/"
    ):
        base.pinned_filename("rtx", "cp39", base.current_platform_tag())
    # RTX is not published for aarch64: the error lists what is pinned.
    with pytest.raises(PatchsetError, match=r"pinned: .*cp311/manylinux_2_28_x86_64"):
        base.pinned_filename("rtx", "cp311", "manylinux_2_28_aarch64")


def test_cached_wheel_is_verified_and_a_mismatch_is_fatal(tmp_path, monkeypatch):
    real = base.fetch_base_wheel(
        "rtx", base.current_python_tag(), base.current_platform_tag()
    )
    base.verify(real)  # the pinned file passes
    monkeypatch.setenv("TORCHTRT_PATCHSET_CACHE", str(tmp_path))
    tampered = tmp_path / os.path.basename(real)
    shutil.copyfile(real, tampered)
    with open(tampered, "ab") as f:
        f.write(b"\0")
    with pytest.raises(PatchsetError, match="sha256 mismatch"):
        base.fetch_base_wheel(
            "rtx", base.current_python_tag(), base.current_platform_tag()
        )


def test_unpinned_file_is_refused(tmp_path):
    stray = tmp_path / "torch_tensorrt-2.14.0-cp311-cp311-linux_x86_64.whl"
    stray.write_bytes(b"not a pinned wheel")
    with pytest.raises(PatchsetError, match="is not pinned"):
        base.verify(str(stray))


def test_unreachable_index_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHTRT_PATCHSET_CACHE", str(tmp_path))
    monkeypatch.setenv("TORCHTRT_PATCHSET_INDEX_URL", "http://127.0.0.1:9/simple")
    with pytest.raises(
        PatchsetError, match="base wheel not downloadable: torch_tensorrt_rtx-2.14.0"
    ):
        base.fetch_base_wheel(
            "rtx", base.current_python_tag(), base.current_platform_tag()
        )
    assert os.listdir(tmp_path) == [], "a failed download left a file in the cache"
