"""upstream-tests: upstream's pytest run against the installed wheel, no-GPU failures counted apart.

The checkout here is fake: a few tiny test files under ``tests/py/dynamo``
that never import torch_tensorrt. ``TORCHTRT_PATCHSET_GPU`` pins the plugin's
device probe so the outcome does not depend on this host's hardware.
"""

import json
import os
import subprocess
import sys

import pytest
from patchset import PatchsetError
from upstream_suite import gpu_skip_plugin
from upstream_suite import run as upstream_tests

FAKE_TESTS = {
    "test_pass.py": "def test_ok():\n    assert 1 + 1 == 2\n",
    "test_fail.py": "def test_wrong():\n    assert 1 + 1 == 3\n",
    "test_no_driver.py": (
        "def test_needs_driver():\n"
        '    raise RuntimeError("Found no NVIDIA driver on your system")\n'
    ),
    "test_skip.py": (
        "import unittest\n\n\n"
        "class TestSkipped(unittest.TestCase):\n"
        '    @unittest.skipIf(True, "not on this platform")\n'
        "    def test_skipped(self):\n"
        "        pass\n"
    ),
    "test_wrapped.py": (
        "import unittest\n\n\n"
        "class TestWrapped(unittest.TestCase):\n"
        "    def test_compile(self):\n"
        "        try:\n"
        '            raise RuntimeError("CUDA driver initialization failed")\n'
        "        except RuntimeError as e:\n"
        '            raise ValueError("engine build failed") from e\n'
    ),
    "test_fixture.py": (
        "import pytest\n\n\n"
        "@pytest.fixture\n"
        "def device():\n"
        '    raise RuntimeError("No CUDA GPUs are available")\n\n\n'
        "def test_uses_device(device):\n"
        "    pass\n"
    ),
    "test_other_cuda_error.py": (
        "def test_oom():\n"
        '    raise RuntimeError("CUDA out of memory. Tried to allocate 2 GiB")\n'
    ),
    "test_expects_clear_error.py": (
        "import pytest\n\n\n"
        "def test_clear_error():\n"
        '    with pytest.raises(RuntimeError, match="needs a CUDA device"):\n'
        '        raise RuntimeError("Found no NVIDIA driver on your system")\n'
    ),
    "test_plugin_module.py": (
        'raise ModuleNotFoundError("No module named \'tensorrt.plugin\'", name="tensorrt.plugin")\n'
        "\n\n"
        "def test_never_collected():\n"
        "    pass\n"
    ),
    "test_broken_module.py": (
        "import module_that_does_not_exist  # noqa: F401\n\n\n"
        "def test_never_collected():\n"
        "    pass\n"
    ),
}


def make_checkout(root, files=FAKE_TESTS):
    dynamo = root / "tests" / "py" / "dynamo"
    dynamo.mkdir(parents=True)
    (dynamo / "__init__.py").write_text("")
    for name, text in files.items():
        (dynamo / name).write_text(text)
    return root


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setenv(gpu_skip_plugin.GPU_ENV, "absent")


def outcomes(report_path):
    with open(report_path, encoding="utf-8") as f:
        data = json.load(f)
    return data, {t["nodeid"].split("/")[-1]: t for t in data["tests"]}


def test_counts_and_reclassification(tmp_path, no_gpu):
    checkout = make_checkout(tmp_path / "TensorRT")
    report = tmp_path / "out" / "report.json"
    summary = upstream_tests.run(str(checkout), [], str(report))
    assert "\n" not in summary
    assert (
        "10 ran (2 of them whole modules at collection), 1 passed, 3 failed, "
        "4 skipped (needs GPU), 1 skipped (other), 1 error(s)" in summary
    )
    data, tests = outcomes(report)
    assert data["counts"] == {
        "ran": 10,
        "passed": 1,
        "failed": 3,
        "skipped_needs_gpu": 4,
        "skipped_other": 1,
        "errors": 1,
        "modules": 2,
    }
    outcome_keys = ("passed", "failed", "skipped_needs_gpu", "skipped_other", "errors")
    assert sum(data["counts"][k] for k in outcome_keys) == data["counts"]["ran"]
    assert data["deselected"] == []
    assert data["gpu_present"] is False
    assert data["invocations"][0]["cwd"] == "tests/py/dynamo"
    assert tests["test_pass.py::test_ok"]["outcome"] == "passed"
    assert tests["test_fail.py::test_wrong"]["outcome"] == "failed"
    assert tests["test_other_cuda_error.py::test_oom"]["outcome"] == "failed"
    assert tests["test_expects_clear_error.py::test_clear_error"]["outcome"] == "failed"
    assert tests["test_skip.py::TestSkipped::test_skipped"] == {
        "nodeid": "tests/py/dynamo/test_skip.py::TestSkipped::test_skipped",
        "kind": "test",
        "outcome": "skipped_other",
        "message": "Skipped: not on this platform",
    }
    needs_gpu = {
        "test_no_driver.py::test_needs_driver": "RuntimeError: Found no NVIDIA driver",
        "test_wrapped.py::TestWrapped::test_compile": "RuntimeError: CUDA driver initialization",
        "test_fixture.py::test_uses_device": "RuntimeError: No CUDA GPUs are available",
        "test_plugin_module.py": "ModuleNotFoundError: No module named 'tensorrt.plugin'",
    }
    for name, message in needs_gpu.items():
        assert tests[name]["outcome"] == "skipped_needs_gpu", tests[name]
        assert tests[name]["message"].startswith("needs GPU: " + message), tests[name]
    assert tests["test_plugin_module.py"]["kind"] == "collection"
    assert tests["test_broken_module.py"]["outcome"] == "error"
    assert "module_that_does_not_exist" in tests["test_broken_module.py"]["message"]
    leftovers = [
        os.path.join(d, n)
        for d, ds, fs in os.walk(checkout)
        for n in ds + fs
        if n in ("__pycache__", ".pytest_cache")
    ]
    assert leftovers == [], "the run wrote into the checkout"


def test_with_a_gpu_present_nothing_is_reclassified(tmp_path, monkeypatch):
    monkeypatch.setenv(gpu_skip_plugin.GPU_ENV, "present")
    files = {n: FAKE_TESTS[n] for n in ("test_no_driver.py", "test_plugin_module.py")}
    checkout = make_checkout(tmp_path / "TensorRT", files)
    summary = upstream_tests.run(str(checkout), ["tests/py/dynamo/"], None)
    assert (
        "2 ran (1 of them whole modules at collection), 0 passed, 1 failed, "
        "0 skipped (needs GPU), 0 skipped (other), 1 error(s)" in summary
    )


def test_paths_and_node_ids_select_tests(tmp_path, no_gpu):
    checkout = make_checkout(tmp_path / "TensorRT")
    report = tmp_path / "r.json"
    upstream_tests.run(
        str(checkout),
        [
            "tests/py/dynamo/test_pass.py",
            str(checkout / "tests/py/dynamo/test_skip.py")
            + "::TestSkipped::test_skipped",
        ],
        str(report),
    )
    data, tests = outcomes(report)
    assert sorted(tests) == [
        "test_pass.py::test_ok",
        "test_skip.py::TestSkipped::test_skipped",
    ]
    assert data["invocations"][0]["argv"][-2:] == [
        "test_pass.py",
        "test_skip.py::TestSkipped::test_skipped",
    ]


def test_the_checkouts_py_is_never_importable(tmp_path, no_gpu, monkeypatch):
    """A torch_tensorrt in the checkout's py/, even on PYTHONPATH, is not what the tests see."""
    where = (
        "import importlib.util, os\n\n\n"
        "def test_origin():\n"
        '    origin = importlib.util.find_spec("torch_tensorrt").origin\n'
        '    assert "site-packages" in origin, origin\n'
    )
    checkout = make_checkout(tmp_path / "TensorRT", {"test_where.py": where})
    package = checkout / "py" / "torch_tensorrt"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        'raise ImportError("imported from the checkout")\n'
    )
    monkeypatch.setenv("PYTHONPATH", str(checkout / "py"))
    summary = upstream_tests.run(str(checkout), [], None)
    assert "1 ran, 1 passed, 0 failed" in summary


def test_a_torch_tensorrt_outside_site_packages_is_refused(
    tmp_path, no_gpu, monkeypatch
):
    checkout = make_checkout(
        tmp_path / "TensorRT", {"test_pass.py": FAKE_TESTS["test_pass.py"]}
    )
    elsewhere = tmp_path / "elsewhere" / "torch_tensorrt"
    elsewhere.mkdir(parents=True)
    (elsewhere / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(elsewhere.parent))
    with pytest.raises(
        PatchsetError,
        match=r"elsewhere/torch_tensorrt/__init__.py, not from the site-packages",
    ):
        upstream_tests.run(str(checkout), [], None)


def test_missing_checkout_and_paths_are_one_line_errors(tmp_path):
    with pytest.raises(PatchsetError, match=r"^upstream checkout does not exist: "):
        upstream_tests.run(str(tmp_path / "missing"), [], None)
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        PatchsetError, match=r"^not a pytorch/TensorRT checkout: .* has no tests/py/"
    ):
        upstream_tests.run(str(tmp_path / "empty"), [], None)
    checkout = make_checkout(tmp_path / "TensorRT", {})
    with pytest.raises(
        PatchsetError, match=r"^no such test path in .*: tests/py/dynamo/test_nope.py$"
    ):
        upstream_tests.run(str(checkout), ["tests/py/dynamo/test_nope.py"], None)
    (checkout / "README.md").write_text("x\n")
    with pytest.raises(
        PatchsetError, match=r"^test path must be below tests/py/<suite>/"
    ):
        upstream_tests.run(str(checkout), ["README.md"], None)
    with pytest.raises(
        PatchsetError, match=r"^test path must be below tests/py/<suite>/"
    ):
        upstream_tests.run(str(checkout), ["tests/py"], None)


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("Found no NVIDIA driver on your system. Please check ..."),
        RuntimeError("No CUDA GPUs are available"),
        AssertionError("Torch not compiled with CUDA enabled"),
        RuntimeError("CUDA error: no CUDA-capable device is detected"),
        RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected"),
        RuntimeError("compile() needs a CUDA device to deserialize and run engines"),
        RuntimeError(
            "Cannot set up TensorRT engine for module 'm': a CUDA device is needed"
        ),
        ModuleNotFoundError(
            "No module named 'tensorrt.plugin'", name="tensorrt.plugin"
        ),
        OSError(
            "libcuda.so.1: cannot open shared object file: No such file or directory"
        ),
    ],
)
def test_no_gpu_messages_are_recognised(exc):
    assert gpu_skip_plugin.no_gpu_reason(exc).startswith(type(exc).__name__ + ": ")


@pytest.mark.parametrize(
    "exc",
    [
        AssertionError("Tensor-likes are not close!"),
        RuntimeError("CUDA out of memory"),
        ModuleNotFoundError("No module named 'tensorrt_llm'", name="tensorrt_llm"),
        ValueError("expected a GPU tensor"),
    ],
)
def test_other_failures_are_not_recognised(exc):
    assert gpu_skip_plugin.no_gpu_reason(exc) is None


def test_assertions_about_no_gpu_messages_are_real_failures():
    mentions = AssertionError(
        "assert 'needs a CUDA device' in 'Found no NVIDIA driver'"
    )
    assert gpu_skip_plugin.no_gpu_reason(mentions) is None
    try:
        try:
            raise RuntimeError("Found no NVIDIA driver on your system")
        except RuntimeError:
            raise AssertionError("Regex pattern did not match: 'needs a CUDA device'")
    except AssertionError as e:
        assert (
            gpu_skip_plugin.no_gpu_reason(e) is None
        ), "followed an assertion's context"
    try:
        try:
            raise RuntimeError("No CUDA GPUs are available")
        except RuntimeError as e:
            raise ValueError("engine build failed") from e
    except ValueError as e:
        assert (
            gpu_skip_plugin.no_gpu_reason(e)
            == "RuntimeError: No CUDA GPUs are available"
        )


def test_command_line_prints_the_summary_or_one_error_line(tmp_path, no_gpu):
    checkout = make_checkout(
        tmp_path / "TensorRT", {"test_pass.py": FAKE_TESTS["test_pass.py"]}
    )
    env = {**os.environ, "PYTHONPATH": upstream_tests.TOOLS_DIR}
    command = [sys.executable, "-m", "upstream_suite", str(checkout)]
    ok = subprocess.run(command, env=env, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines()[-1].startswith(
        "upstream tests tests/py/dynamo against "
    )
    bad = subprocess.run(
        command + ["tests/py/dynamo/nope"], env=env, capture_output=True, text=True
    )
    assert bad.returncode == 1
    assert (
        bad.stderr == f"error: no such test path in {checkout}: tests/py/dynamo/nope\n"
    )


def test_known_failures_are_deselected_with_their_reason(tmp_path, no_gpu):
    checkout = make_checkout(
        tmp_path / "TensorRT",
        {n: FAKE_TESTS[n] for n in ("test_pass.py", "test_fail.py")},
    )
    report = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": upstream_tests.TOOLS_DIR}
    command = [sys.executable, "-m", "upstream_suite", str(checkout)]
    failing = subprocess.run(command, env=env, capture_output=True, text=True)
    assert failing.returncode == 1
    known = "tests/py/dynamo/test_fail.py::test_wrong=fails unpatched too"
    ok = subprocess.run(
        command + ["--known-failure", known, "--report", str(report)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines()[-1].endswith(
        f"1 known failure(s) deselected; report: {report}"
    )
    data, tests = outcomes(report)
    assert list(tests) == ["test_pass.py::test_ok"]
    assert data["deselected"] == [
        {
            "nodeid": "tests/py/dynamo/test_fail.py::test_wrong",
            "reason": "fails unpatched too",
        }
    ]
    bad = subprocess.run(
        command + ["--known-failure", "no-reason"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1
    assert "expected NODEID=REASON" in bad.stderr
