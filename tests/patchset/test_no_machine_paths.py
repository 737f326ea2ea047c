"""No tracked file names a path of the machine that wrote it: results logs, profiles and
docs say ``<tmp>``, ``<venv>``, ``<site-packages>`` instead of where a run happened."""

import lzma
import re
import subprocess

from patchset import REPO_ROOT

# absolute paths of a particular machine: its temporary files, virtual environments,
# home and work directories
MACHINE_PATH = re.compile(r"(?<![\w.<])/(?:tmp/\w|opt/|root/|home/\w|work/\w|Users/\w)")


THIS_FILE = "tests/patchset/test_no_machine_paths.py"


def machine_paths(text):
    return [line for line in text.splitlines() if MACHINE_PATH.search(line)]


def _tracked_texts():
    names = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in names)):
        if name == THIS_FILE:
            continue  # its examples of what the pattern finds
        with open(f"{REPO_ROOT}/{name}", "rb") as f:
            data = f.read()
        if name.endswith(".xz"):
            data = lzma.decompress(data)
        if b"\0" in data:
            continue  # binary
        yield name, data.decode("utf-8", errors="replace")


def test_the_pattern_finds_a_run_s_paths_and_not_placeholders():
    found = machine_paths(
        "   400 0.211 /tmp/site-patched/torch_tensorrt/_TRTEngine.py:1287\n"
        "[gw0] linux -- Python 3.12.3 /opt/torch/.venv/bin/python3\n"
        "to /root/.cache/torch/hub/checkpoints/resnet18.pth\n"
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
