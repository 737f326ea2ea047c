"""No tracked file names a path of the machine that wrote it: results logs, profiles and
docs say ``<tmp>``, ``<venv>``, ``<site-packages>`` instead of where a run happened."""

import lzma
import re
import subprocess

from patchset import REPO_ROOT

# absolute paths of a particular machine: its temporary files, virtual environments,
# home and work directories
MACHINE_PATH = re.compile(r"(?<![\w.<])/(?:tmp/\w|opt/|root/|home/\w|work/\w|Users/\w)")


def _absolute(path):
    """An absolute path built at run time: this file names none itself."""
    return "/" + path


def machine_paths(text):
    return [line for line in text.splitlines() if MACHINE_PATH.search(line)]


def _tracked_texts():
    names = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in names)):
        with open(f"{REPO_ROOT}/{name}", "rb") as f:
            data = f.read()
        if name.endswith(".xz"):
            data = lzma.decompress(data)
        if b"\0" in data:
            continue  # binary
        yield name, data.decode("utf-8", errors="replace")


def test_the_pattern_finds_a_run_s_paths_and_not_placeholders():
    found = machine_paths(
        f"   400 0.211 {_absolute('tmp/site-patched')}/torch_tensorrt/_TRTEngine.py:1287\n"
        f"[gw0] linux -- Python 3.12.3 {_absolute('opt/torch/.venv')}/bin/python3\n"
        f"to {_absolute('root/.cache/torch/hub/checkpoints/resnet18.pth')}\n"
        "   400 0.211 <patched-package>/torch_tensorrt/_TRTEngine.py:1287\n"
        "written under <tmp>/commit-tests-x, see docs/results.md, ./tmp/x\n"
    )
    assert len(found) == 3, found


def test_tracked_files_name_no_machine_paths():
    offending = [
        f"{name}: {line.strip()[:120]}"
        for name, text in _tracked_texts()
        for line in machine_paths(text)
    ]
    assert not offending, "\n".join(offending)


def test_the_gpu_scripts_scrub_what_the_pattern_finds():
    """tools/gpu/scrub_paths.py leaves nothing the check above would refuse."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "scrub_paths", f"{REPO_ROOT}/tools/gpu/scrub_paths.py"
    )
    scrub_paths = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scrub_paths)
    log = (
        f"  {_absolute('opt/torch/.venv')}/lib/python3.12/site-packages/numba/x.py:31: W\n"
        f"[gw0] linux -- Python 3.12.3 {_absolute('opt/torch/.venv')}/bin/python3\n"
        f"written to {_absolute('tmp/tmp.abc123')}/site/torch_tensorrt/_compiler.py\n"
        f"from {_absolute('root/.cache/torch/hub')} and {_absolute('work/main')}/README.md\n"
    )
    assert machine_paths(log)
    clean = scrub_paths.scrub(log)
    assert not machine_paths(clean), clean
    assert "<site-packages>/numba/x.py" in clean and "<tmp>/site" in clean, clean
