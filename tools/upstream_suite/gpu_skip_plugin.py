"""pytest plugin: a test that fails only for lack of a GPU is reported as skipped.

Loaded by ``upstream_tests`` with ``-p upstream_suite.gpu_skip_plugin``. When a test
(or its setup/teardown, or the collection of its module) fails and the
exception says that this host has no GPU, no CUDA driver or no
``tensorrt.plugin``, and the host really has no usable CUDA device, the report
is turned into a skip whose reason starts with ``needs GPU: ``. Every other
failure stays a failure; on a host with a CUDA device nothing is reclassified.

``TORCHTRT_PATCHSET_GPU=absent`` (or ``present``) overrides the device probe.
With ``--gpu-skip-results=PATH`` the plugin writes every test's final outcome,
where ``torch_tensorrt`` was imported from and the probe result as JSON.
"""

import json
import os
import re
import subprocess
import sys
from typing import Any, Dict, Iterator, Optional

import pytest

NEEDS_GPU = "needs GPU: "
GPU_ENV = "TORCHTRT_PATCHSET_GPU"

# Messages meaning "no CUDA device / driver here"; each must be specific enough
# not to match an ordinary bug.
_NO_GPU_MESSAGES = re.compile(
    "|".join(
        [
            r"Found no NVIDIA driver",
            r"No CUDA GPUs are available",
            r"Torch not compiled with CUDA enabled",
            r"CUDA driver",
            r"needs a CUDA device",
            # patch 0003's errors for running an engine without a GPU
            r"a CUDA device is needed",
            r"no CUDA-capable device is detected",
            r"cudaErrorNoDevice",
            r"cudaErrorInsufficientDriver",
            r"CUDA_ERROR_NO_DEVICE",
            r"libcuda\.so[.0-9]*: cannot open shared object file",
        ]
    )
)
_NO_PLUGIN_MESSAGE = re.compile(
    r"No module named '(?:tensorrt|tensorrt_rtx)\.plugin[.']"
)

# Final outcome of a test from its phases: the most severe phase wins.
_SEVERITY = ["passed", "skipped_other", "skipped_needs_gpu", "error", "failed"]

_PROBE = r"""
import ctypes, sys
names = ["nvcuda.dll"] if sys.platform == "win32" else ["libcuda.so.1", "libcuda.so"]
count = 0
for name in names:
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        continue
    n = ctypes.c_int(0)
    if lib.cuInit(0) == 0 and lib.cuDeviceGetCount(ctypes.byref(n)) == 0:
        count = n.value
    break
print(count)
"""

_gpu_present: Optional[bool] = None


def gpu_present() -> bool:
    """Whether this host has a usable CUDA device (probed once, in a child process).

    The probe runs ``cuInit`` in a separate interpreter so that this process's
    CUDA state (and later forks) is not affected.
    """
    global _gpu_present
    if _gpu_present is None:
        forced = os.environ.get(GPU_ENV, "").strip().lower()
        if forced in ("absent", "present"):
            _gpu_present = forced == "present"
        else:
            try:
                out = subprocess.run(
                    [sys.executable, "-c", _PROBE],
                    capture_output=True,
                    text=True,
                    timeout=120,
                ).stdout
                _gpu_present = int(out.strip() or 0) > 0
            except (OSError, ValueError, subprocess.SubprocessError):
                _gpu_present = False
    return _gpu_present


def _is_verdict(exc: BaseException) -> bool:
    """An assertion or pytest outcome: the test's own verdict, not an error it ran into."""
    return isinstance(exc, AssertionError) or not isinstance(exc, Exception)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception, then its causes and contexts (each once).

    A verdict's causes are not followed: ``pytest.raises(match="needs a CUDA
    device")`` failing on a "Found no NVIDIA driver" error is a real failure.
    """
    seen = set()
    current: Optional[BaseException] = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        if _is_verdict(current):
            break
        current = current.__cause__ or current.__context__


def _first_line(text: str) -> str:
    line = next((l.strip() for l in text.splitlines() if l.strip()), "")
    return line if len(line) <= 200 else line[:197] + "..."


def no_gpu_reason_from_text(text: str) -> Optional[str]:
    """The matching message, if ``text`` (an exception line) says there is no GPU."""
    if _NO_GPU_MESSAGES.search(text) or _NO_PLUGIN_MESSAGE.search(text):
        return _first_line(text)
    return None


def no_gpu_reason(exc: BaseException) -> Optional[str]:
    """``Type: message`` of the first exception in the chain that says there is no GPU."""
    for e in _chain(exc):
        if isinstance(e, ModuleNotFoundError) and (e.name or "").split(".")[:2] in (
            ["tensorrt", "plugin"],
            ["tensorrt_rtx", "plugin"],
        ):
            return f"{type(e).__name__}: {_first_line(str(e))}"
        # A verdict counts only when its message *is* a no-GPU message (as torch's
        # "Torch not compiled with CUDA enabled" assertion); an assertion that merely
        # mentions one (``assert "needs a CUDA device" in str(e)``) is a real failure.
        text = str(e)
        if _is_verdict(e) and not _NO_GPU_MESSAGES.match(text.lstrip()):
            continue
        reason = no_gpu_reason_from_text(text)
        if reason:
            return f"{type(e).__name__}: {reason}"
    return None


def _error_lines(text: str) -> str:
    """The ``E   ...`` lines of a pytest failure report: the exception, not the source."""
    return "\n".join(l[1:].strip() for l in text.splitlines() if l.startswith("E "))


def _to_needs_gpu(report: Any, location: tuple, reason: str) -> None:
    report.outcome = "skipped"
    report.longrepr = (str(location[0]), location[1], NEEDS_GPU + reason)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo
) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if not report.failed or hasattr(report, "wasxfail") or call.excinfo is None:
        return
    reason = no_gpu_reason(call.excinfo.value)
    if reason is not None and not gpu_present():
        path, lineno, _ = item.reportinfo()
        _to_needs_gpu(report, (path, (lineno or 0) + 1), reason)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    reason = no_gpu_reason_from_text(_error_lines(report.longreprtext))
    if reason is not None and not gpu_present():
        _to_needs_gpu(report, (collector.path, 1), reason)


# ----------------------------------------------------------------------------- results


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--gpu-skip-results",
        metavar="PATH",
        help="write each test's final outcome (needs-GPU skips separate) as JSON",
    )


class _Results:
    """Final outcome of every test and of every module that did not collect."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.tests: Dict[str, Dict[str, Any]] = {}

    def _record(self, nodeid: str, kind: str, outcome: str, message: str) -> None:
        entry = self.tests.setdefault(
            nodeid, {"nodeid": nodeid, "kind": kind, "outcome": "passed", "message": ""}
        )
        if _SEVERITY.index(outcome) > _SEVERITY.index(entry["outcome"]):
            entry["outcome"], entry["message"] = outcome, message

    @staticmethod
    def _classify(report: Any, failed: str) -> tuple:
        if report.passed:
            return "passed", ""
        if report.failed:
            crash = getattr(report.longrepr, "reprcrash", None)
            if crash is not None:
                return failed, _first_line(crash.message)
            errors = _error_lines(report.longreprtext).splitlines()
            return failed, _first_line(errors[-1] if errors else report.longreprtext)
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
        if hasattr(report, "wasxfail"):
            reason = f"xfail: {report.wasxfail}"
        kind = "skipped_needs_gpu" if reason.startswith(NEEDS_GPU) else "skipped_other"
        return kind, reason

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        outcome, message = self._classify(
            report, "failed" if report.when == "call" else "error"
        )
        self._record(report.nodeid, "test", outcome, message)

    @pytest.hookimpl(trylast=True)
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed or report.skipped:
            outcome, message = self._classify(report, "error")
            self._record(report.nodeid or ".", "collection", outcome, message)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        module = sys.modules.get("torch_tensorrt")
        data = {
            "exit_status": int(exitstatus),
            "gpu_present": gpu_present(),
            "torch_tensorrt": getattr(module, "__file__", None),
            "tests": list(self.tests.values()),
        }
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        with open(self.path, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--gpu-skip-results")
    if path:
        config.pluginmanager.register(_Results(path), "patchset-gpu-skip-results")
