"""Run upstream's own tests (a pytorch/TensorRT checkout's ``tests/py``) against the installed wheel.

pytest is started the way upstream CI starts it (``tests/ci/runner.py``): with
``sys.executable -m pytest``, from the suite directory (``tests/py/dynamo``,
``tests/py/core``, ...), with test paths relative to it and ``-ra``-style
summaries, under upstream's own ``pyproject.toml`` pytest settings. Unlike CI
the run is serial: upstream's ``addopts`` (``-n auto --dist=loadfile``) are
cleared and xdist is disabled. Nothing is written into the checkout (no
``.pytest_cache``, no byte code).

``torch_tensorrt`` must come from the interpreter's site-packages (the
installed patched wheel), never from the checkout's ``py/``: checkout paths
are dropped from ``PYTHONPATH``, where the package would be imported from is
checked before the run, and where it was imported from is checked after it.

The plugin ``upstream_suite.gpu_skip_plugin`` counts a test that fails only for lack
of a GPU as skipped ("needs GPU: ..."); every other failure stays a failure.
"""

import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple

from patchset import REPO_ROOT, PatchsetError

TOOLS_DIR = os.path.join(REPO_ROOT, "tools")
DEFAULT_PATHS = ["tests/py/dynamo"]
PLUGIN = "upstream_suite.gpu_skip_plugin"
COUNT_KEYS = (
    "ran",
    "passed",
    "failed",
    "skipped_needs_gpu",
    "skipped_other",
    "errors",
    "modules",
)
# pytest exit statuses after which the results are complete (ok, tests failed, none collected).
_COMPLETED = (0, 1, 5)

# Run in the child interpreter, with the test run's environment and cwd: where
# would ``import torch_tensorrt`` come from (found, not imported), and which
# directories are this interpreter's site-packages.
_PREFLIGHT = r"""
import importlib.metadata, importlib.util, json, site, sys, sysconfig
spec = importlib.util.find_spec("torch_tensorrt")
sites = list(site.getsitepackages()) + [site.getusersitepackages()]
sites += [sysconfig.get_paths()[k] for k in ("purelib", "platlib")]
dists = importlib.metadata.packages_distributions().get("torch_tensorrt", [])
print(json.dumps({
    "origin": spec.origin if spec else None,
    "namespace": bool(spec and spec.origin in (None, "namespace")),
    "locations": list(spec.submodule_search_locations or []) if spec else [],
    "sites": sites,
    "distributions": {d: importlib.metadata.version(d) for d in dists},
}))
"""


def _inside(path: str, root: str) -> bool:
    path, root = os.path.realpath(path), os.path.realpath(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _checkout(checkout: str) -> str:
    top = os.path.abspath(checkout)
    if not os.path.isdir(top):
        raise PatchsetError(f"upstream checkout does not exist: {top}")
    if not os.path.isdir(os.path.join(top, "tests", "py")):
        raise PatchsetError(f"not a pytorch/TensorRT checkout: {top} has no tests/py/")
    return top


def _group_paths(top: str, paths: List[str]) -> Dict[str, List[str]]:
    """Suite directory (``tests/py/<suite>``, relative to ``top``) -> pytest args relative to it.

    A path may be relative to the checkout or absolute, and may carry a
    ``::`` node selector (``tests/py/dynamo/x/test_y.py::TestZ::test_w``).
    """
    tests_py = os.path.join(top, "tests", "py")
    groups: Dict[str, List[str]] = {}
    for given in paths:
        path, sep, node = given.partition("::")
        full = os.path.normpath(os.path.join(top, path))
        if not os.path.exists(full):
            raise PatchsetError(f"no such test path in {top}: {path}")
        rel = os.path.relpath(full, tests_py)
        if not _inside(full, tests_py) or rel == ".":
            raise PatchsetError(
                f"test path must be below tests/py/<suite>/ (e.g. tests/py/dynamo): {given}"
            )
        suite = os.path.join("tests", "py", rel.split(os.sep)[0])
        if not os.path.isdir(os.path.join(top, suite)):
            raise PatchsetError(
                f"test path must be below tests/py/<suite>/ (e.g. tests/py/dynamo): {given}"
            )
        arg = os.path.relpath(full, os.path.join(top, suite)).replace(os.sep, "/")
        groups.setdefault(suite, []).append(arg + sep + node)
    return groups


def _environment(top: str) -> Dict[str, str]:
    """The run's environment: ``tools/`` first on PYTHONPATH, no checkout path on it, no byte code."""
    kept = [
        os.path.abspath(p)
        for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if p and not _inside(os.path.abspath(p), top)
    ]
    entries = [TOOLS_DIR] + [p for p in kept if p != TOOLS_DIR]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(entries),
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _installed(top: str, cwd: str, env: Dict[str, str]) -> Dict[str, Any]:
    """Where the run would import torch_tensorrt from; raise unless it is site-packages."""
    result = subprocess.run(
        [sys.executable, "-c", _PREFLIGHT],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise PatchsetError(
            f"cannot inspect torch_tensorrt with {sys.executable}: {detail[-1] if detail else result.returncode}"
        )
    info = json.loads(result.stdout)
    if info["origin"] is None and not info["locations"]:
        raise PatchsetError(
            f"torch_tensorrt is not installed for {sys.executable}; install the patched wheel first"
        )
    if info["namespace"]:
        raise PatchsetError(
            f"torch_tensorrt would be imported from {info['locations'][0]}, "
            "a directory without __init__.py, not the installed wheel"
        )
    _check_origin(info["origin"], top, info["sites"], "would be imported")
    return info


def _check_origin(origin: str, top: str, sites: List[str], verb: str) -> None:
    if _inside(origin, top):
        raise PatchsetError(
            f"torch_tensorrt {verb} from the checkout ({origin}), not from the installed wheel"
        )
    if not any(_inside(origin, s) for s in sites if s):
        raise PatchsetError(
            f"torch_tensorrt {verb} from {origin}, not from the site-packages of {sys.executable}"
        )


def _pytest_argv(
    top: str, args: List[str], results: str, deselect: Sequence[str] = ()
) -> List[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        PLUGIN,
        f"--gpu-skip-results={results}",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        "-o",
        "addopts=",
        f"--rootdir={top}",
        "--continue-on-collection-errors",
        "-rfE",
        *(f"--deselect={nodeid}" for nodeid in deselect),
        *args,
    ]


def _run_pytest(argv: List[str], cwd: str, env: Dict[str, str]) -> Tuple[int, str]:
    """Run pytest, echoing its output; return its exit status and last non-empty output line."""
    tail: Deque[str] = collections.deque(maxlen=1)
    with subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as proc:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                if line.strip():
                    tail.append(line.strip())
        except BaseException:
            proc.kill()
            raise
    return proc.returncode, (tail[0] if tail else "")


def count(tests: List[Dict[str, Any]]) -> Dict[str, int]:
    """Counts of final outcomes, which add up to ``ran``.

    ``ran`` counts test items and the modules that failed or were skipped as a
    whole at collection (their tests were never collected, so each counts once);
    ``modules`` says how many of ``ran`` those modules are.
    """
    counts = dict.fromkeys(COUNT_KEYS, 0)
    counts["ran"] = len(tests)
    counts["modules"] = sum(1 for t in tests if t["kind"] != "test")
    for t in tests:
        counts["errors" if t["outcome"] == "error" else t["outcome"]] += 1
    return counts


def _head(top: str) -> Optional[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_DIR", "GIT_WORK_TREE")}
    result = subprocess.run(
        ["git", "-C", top, "rev-parse", "HEAD"], capture_output=True, text=True, env=env
    )
    return result.stdout.strip() if result.returncode == 0 else None


def _write_json(path: str, data: Dict[str, Any]) -> None:
    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".part"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def parse_known_failure(text: str) -> Tuple[str, str]:
    """``NODEID=REASON`` -> (node id, reason); both must be given."""
    nodeid, sep, reason = text.partition("=")
    if not sep or not nodeid.strip() or not reason.strip():
        raise PatchsetError(
            f"--known-failure {text!r}: expected NODEID=REASON, e.g. "
            "tests/py/dynamo/runtime/test_x.py::test_y='fails unpatched too (#1234)'"
        )
    return nodeid.strip(), reason.strip()


def run(
    checkout: str,
    paths: List[str],
    report: Optional[str],
    known_failures: Sequence[Tuple[str, str]] = (),
) -> str:
    """Run upstream tests ``paths`` (default ``tests/py/dynamo``) of ``checkout``; one-line summary.

    Each suite directory gets one serial pytest run. ``known_failures`` are
    (node id, reason) pairs deselected from the run; the report and the summary
    name them. With ``report``, a JSON file with every test's outcome, the
    counts and the deselected tests with their reasons is written there.
    """
    top = _checkout(checkout)
    deselect = [nodeid for nodeid, _ in known_failures]
    paths = list(paths) or DEFAULT_PATHS
    groups = _group_paths(top, paths)
    env = _environment(top)
    installed = _installed(top, os.path.join(top, next(iter(groups))), env)
    tests: List[Dict[str, Any]] = []
    invocations = []
    gpu_present = None
    scratch = tempfile.mkdtemp(prefix="patchset-upstream-tests-")
    try:
        for index, (suite, args) in enumerate(groups.items()):
            results = os.path.join(scratch, f"results-{index}.json")
            argv = _pytest_argv(top, args, results, deselect)
            status, last = _run_pytest(argv, os.path.join(top, suite), env)
            shown = [a.replace(results, "<results>") for a in argv[1:]]
            invocations.append({"cwd": suite, "argv": shown, "exit_status": status})
            if status not in _COMPLETED or not os.path.exists(results):
                raise PatchsetError(
                    f"pytest did not complete in {suite} (exit status {status}): {last}"
                )
            with open(results, encoding="utf-8") as f:
                data = json.load(f)
            if data["torch_tensorrt"]:
                _check_origin(
                    data["torch_tensorrt"], top, installed["sites"], "was imported"
                )
            gpu_present = data["gpu_present"]
            tests += data["tests"]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    counts = count(tests)
    dists = installed["distributions"] or {"torch_tensorrt": "(unknown version)"}
    against = ", ".join(f"{d} {v}" for d, v in dists.items())
    if report:
        _write_json(
            report,
            {
                "checkout": top,
                "head": _head(top),
                "paths": paths,
                "python": sys.executable,
                "torch_tensorrt": {
                    "origin": installed["origin"],
                    "distributions": dists,
                },
                "gpu_present": gpu_present,
                "invocations": invocations,
                "counts": counts,
                "deselected": [
                    {"nodeid": nodeid, "reason": reason}
                    for nodeid, reason in known_failures
                ],
                "tests": tests,
            },
        )
    return (
        f"upstream tests {' '.join(paths)} against {against}: {counts['ran']} ran"
        + (
            f" ({counts['modules']} of them whole modules at collection)"
            if counts["modules"]
            else ""
        )
        + f", {counts['passed']} passed, {counts['failed']} failed, "
        f"{counts['skipped_needs_gpu']} skipped (needs GPU), "
        f"{counts['skipped_other']} skipped (other), {counts['errors']} error(s)"
        + (
            f"; {len(known_failures)} known failure(s) deselected"
            if known_failures
            else ""
        )
        + (f"; report: {os.path.abspath(report)}" if report else "")
    )
