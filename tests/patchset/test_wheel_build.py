"""Both flavours build into valid wheels that differ from the base only where the series says."""

import email.parser
import os
import subprocess
import sys

import pytest
from patchset import BASE_VERSION, FLAVOURS, base, series, wheelbuild
from wheel.wheelfile import WheelFile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read_all(path):
    """Read every member through WheelFile, which checks each against RECORD."""
    contents = {}
    with WheelFile(path) as wf:
        for info in wf.infolist():
            if info.is_dir():  # the base wheel lists directories; they carry no content
                continue
            with wf.open(info) as f:
                contents[info.filename] = f.read()
    return contents


def _metadata(contents):
    (name,) = [n for n in contents if n.endswith(".dist-info/METADATA")]
    return email.parser.Parser().parsestr(contents[name].decode())


@pytest.fixture(scope="module", params=sorted(FLAVOURS))
def built(request, tmp_path_factory):
    flavour = request.param
    out = tmp_path_factory.mktemp(f"dist-{flavour}")
    # The same command a user runs; USE_TRT_RTX is upstream's switch.
    env = {**os.environ, "USE_TRT_RTX": "1" if flavour == "rtx" else "0"}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            REPO,
            "-w",
            str(out),
        ],
        check=True,
        env=env,
    )
    (wheel,) = os.listdir(out)
    base_wheel = base.fetch_base_wheel(
        flavour, base.current_python_tag(), base.current_platform_tag()
    )
    return flavour, str(out / wheel), base_wheel


def test_record_is_valid(built):
    _, wheel, _ = built
    assert _read_all(wheel)
    # wheel's own unpack verifies every hash as well
    subprocess.run(
        [sys.executable, "-m", "wheel", "unpack", "-d", os.path.dirname(wheel), wheel],
        check=True,
    )


def test_name_version_and_tags(built):
    flavour, wheel, base_wheel = built
    version = wheelbuild.local_version()
    assert version.startswith(BASE_VERSION + "+")
    expected = os.path.basename(base_wheel).replace(f"-{BASE_VERSION}-", f"-{version}-")
    assert os.path.basename(wheel) == expected
    assert os.path.basename(wheel).startswith(FLAVOURS[flavour] + "-")


def test_dependencies_and_native_libraries_equal_the_base(built):
    _, wheel, base_wheel = built
    new, old = _read_all(wheel), _read_all(base_wheel)
    new_meta, old_meta = _metadata(new), _metadata(old)
    assert new_meta["Name"] == old_meta["Name"]
    assert new_meta["Version"] == wheelbuild.local_version()
    assert new_meta.get_all("Requires-Dist") == old_meta.get_all("Requires-Dist")
    assert new_meta["Requires-Python"] == old_meta["Requires-Python"]
    native = [n for n in old if n.endswith((".so", ".dll", ".pyd")) or "/bin/" in n]
    assert native, "the base wheel should ship native libraries"
    for name in native:
        assert new[name] == old[name], f"{name} changed"


def test_only_patched_and_new_files_differ(built):
    _, wheel, base_wheel = built
    new, old = _read_all(wheel), _read_all(base_wheel)
    strip = lambda n: n.split("/", 1)[1] if ".dist-info/" in n else n  # noqa: E731
    new = {strip(k): v for k, v in new.items()}
    old = {strip(k): v for k, v in old.items()}
    patches = series.all_patches(series.read_series())
    created = {f for p in patches for f in p.created_files()}
    patched = {
        f[len("py/") :]
        for p in patches
        for f in p.touched_files()
        if f.startswith("py/") and f not in created
    }
    added = set(wheelbuild.overlay_files())
    assert set(new) - set(old) == added
    assert set(old) - set(new) == set()
    changed = {n for n in old if new[n] != old[n] and n not in ("RECORD", "METADATA")}
    assert changed == patched
