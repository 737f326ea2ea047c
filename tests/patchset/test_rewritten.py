"""tools/patchset/rewritten.py: the lines of a patch that later patches rewrite."""

import subprocess

from patchset import rewritten


def _commit(repo, files, message):
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    subprocess.run(["git", "-C", repo, "add", "-A"], check=True)
    subprocess.run(
        ["git", "-C", repo, "-c", "user.name=u", "-c", "user.email=u@e", "commit"]
        + ["-qm", message],
        check=True,
    )


def test_lines_a_later_patch_replaces_are_counted(tmp_path):
    repo = tmp_path / "tree"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", repo], check=True)
    _commit(repo, {"py/x.py": "a = 1\n"}, "base")
    first = "a = 1\nb = 2\n\nc = 3\nc = 3\n"
    _commit(repo, {"py/x.py": first, "tests/t.py": "t\n"}, "x\n\nPatch-Name: 0001-x")
    later = "a = 1\nb = 20\nc = 3\n"
    _commit(repo, {"py/x.py": later}, "y\n\nPatch-Name: 0002-y")
    gone = rewritten.rewritten(str(repo), "0001")
    # added: b = 2, c = 3 twice (blank lines and tests not counted)
    assert gone.pop("(added)") == ["b = 2", "c = 3", "c = 3"]
    assert gone == {"py/x.py": ["b = 2", "c = 3"]}  # one c = 3 is left at the top
