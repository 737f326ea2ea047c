"""Every prefix of the stack built, installed and tested alone (a recording
stand-in for the wheel build, pip and pytest)."""

import os

import pytest
from patchset import PatchsetError, prefixes, series
from test_export import mail
from test_series import write


@pytest.fixture
def pieces(tmp_path):
    return series.read_series(
        *write(
            tmp_path,
            "[one] One\n0001-a.patch\n[two] Two\n0002-b.patch\n",
            [
                ("0001-a.patch", ["py/torch_tensorrt/a.py", "tests/py/test_a.py"]),
                ("0002-b.patch", ["tests/py/test_b.py"]),
            ],
            ["py/torch_tensorrt/a.py", "tests/py/test_a.py", "tests/py/test_b.py"],
        )
    )


class Recorder:
    """Stands in for building wheels, pip and pytest; records every call."""

    def __init__(self, failing=()):
        self.calls, self.failing = [], set(failing)

    def build(self, flavour, out_dir, label=None, patches=None, modules=None):
        names = None if patches is None else [p.name for p in patches]
        self.calls.append(("build", label, names, modules))
        return f"{out_dir}/{label or 'whole'}.whl"

    def run(self, argv, env):
        if "pytest" in argv:
            tests = [a for a in argv if a.startswith("tests/")]
            self.calls.append(("pytest", tests, env["TORCHTRT_PATCHSET_ENV"]))
            if any(t in self.failing for t in tests):
                return 1, "FAILED x\n== 1 failed, 2 passed in 0.1s =="
            return 0, "== 3 passed in 0.1s =="
        self.calls.append(("pip", os.path.basename(argv[-1])))
        return 0, ""


def test_every_prefix_is_built_installed_and_tested_alone(pieces):
    rec = Recorder()
    results = prefixes.check_prefixes(
        pieces, "py", "rtx", "/out", run=rec.run, build=rec.build
    )
    assert results == [("one", "3 passed in 0.1s"), ("two", "3 passed in 0.1s")]
    assert rec.calls == [
        ("build", "stack1", ["0001-a.patch"], ["torch_tensorrt/a.py"]),
        ("pip", "stack1.whl"),
        ("pytest", ["tests/py/test_a.py"], "rtx"),
        ("build", "stack2", ["0001-a.patch", "0002-b.patch"], ["torch_tensorrt/a.py"]),
        ("pip", "stack2.whl"),
        ("pytest", ["tests/py/test_b.py"], "rtx"),  # its own tests only
        ("build", None, None, None),  # the whole patch set back in the venv
        ("pip", "whole.whl"),
    ]


def test_a_prefix_runs_the_earlier_tests_its_piece_changes(tmp_path):
    changes_a = (
        "diff --git a/tests/py/test_a.py b/tests/py/test_a.py\n"
        "--- a/tests/py/test_a.py\n+++ b/tests/py/test_a.py\n@@ -1 +1 @@\n-x\n+y\n"
    )
    d, root = write(
        tmp_path,
        "[one] One\n0001-a.patch\n[two] Two\n0002-b.patch\n[three] Three\n0003-c.patch\n",
        [
            ("0001-a.patch", ["tests/py/test_a.py"]),
            ("0002-b.patch", ["tests/py/test_b.py"]),
        ],
        ["tests/py/test_a.py", "tests/py/test_b.py"],
    )
    with open(os.path.join(d, "0003-c.patch"), "w", encoding="utf-8") as f:
        f.write(mail("feat: 0003-c.patch", changes_a))
    rec = Recorder()
    prefixes.check_prefixes(
        series.read_series(d, root), "py", "rtx", "/out", run=rec.run, build=rec.build
    )
    assert [c[1] for c in rec.calls if c[0] == "pytest"] == [
        ["tests/py/test_a.py"],
        ["tests/py/test_b.py"],
        ["tests/py/test_a.py"],
    ]


def test_the_whole_stack_can_be_left_to_the_caller(pieces):
    rec = Recorder()
    results = prefixes.check_prefixes(
        pieces, "py", "rtx", "/out", run=rec.run, build=rec.build, skip_whole=True
    )
    assert results == [("one", "3 passed in 0.1s")]
    assert [c for c in rec.calls if c[0] == "pytest"] == [
        ("pytest", ["tests/py/test_a.py"], "rtx")
    ]
    assert rec.calls[-1] == ("pip", "whole.whl")


def test_no_prefix_after_the_piece_checked_through(pieces):
    rec = Recorder()
    results = prefixes.check_prefixes(
        pieces, "py", "standard", "/out", run=rec.run, build=rec.build, through="one"
    )
    assert results == [("one", "3 passed in 0.1s")]
    assert rec.calls[-1] == ("pip", "whole.whl")
    with pytest.raises(
        PatchsetError, match=r"--through three: no such piece \(one, two\)"
    ):
        prefixes.check_prefixes(
            pieces, "py", "rtx", "/out", run=rec.run, build=rec.build, through="three"
        )


def test_a_failing_prefix_is_named_and_the_venv_restored(pieces):
    rec = Recorder(failing={"tests/py/test_a.py"})
    with pytest.raises(
        PatchsetError,
        match=r"1 stack prefix\(es\) fail their own tests: 'one' \(1 failed, 2 passed",
    ):
        prefixes.check_prefixes(
            pieces, "py", "standard", "/out", run=rec.run, build=rec.build
        )
    assert rec.calls[-1] == ("pip", "whole.whl")
    assert ("pytest", ["tests/py/test_a.py"], "standard") in rec.calls


def test_a_prefix_s_tests_are_as_its_mails_leave_them(tmp_path):
    """A test file a later mail grows (0068 grows test_unsupported_ops.py) is run
    at a prefix as that prefix's mails leave it, not as the working view has it."""
    pieces = series.read_series()
    every = series.all_patches(pieces)
    grown = prefixes._grown_tests(every)
    assert "tests/py/dynamo/conversion/test_unsupported_ops.py" in grown
    ids = [p.id for p in pieces]
    early = series.all_patches(pieces[: ids.index("missing-converter") + 1])
    view = prefixes.tests_view(every, early, str(tmp_path / "early"))
    for test in grown:
        with open(os.path.join(series.REPO_ROOT, test), encoding="utf-8") as f:
            final = f.read()
        path = os.path.join(view, test)
        grown_later = any(test in p.touched_files() for p in every[len(early) :])
        if os.path.exists(path) and grown_later:
            with open(path, encoding="utf-8") as f:
                assert f.read() != final, test
    later = [
        t
        for p in every[len(early) :]
        for t in p.created_files()
        if t.startswith("tests/")
    ]
    assert all(not os.path.exists(os.path.join(view, t)) for t in later)
    whole = prefixes.tests_view(every, every, str(tmp_path / "whole"))
    for test in series.new_files():
        if test.startswith("tests/py/"):
            with open(os.path.join(whole, test), encoding="utf-8") as a, open(
                os.path.join(series.REPO_ROOT, test), encoding="utf-8"
            ) as b:
                assert a.read() == b.read(), test
