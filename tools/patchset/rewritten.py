"""How much of one patch's added code later patches rewrite.

    python -m patchset.rewritten TREE PATCH_NAME [TOP]

TREE is a materialized tree (``tools/patchset-cli materialize``); PATCH_NAME names a
patch (``0070``); TOP defaults to the tree's ``HEAD``. Counts the non-blank lines the
patch adds under ``py/`` and, by line content (stripped, with multiplicity), those that
are no longer in the same file at TOP; prints the counts and each such line.
"""

import collections
import subprocess
import sys
from typing import Dict, List


def _git(tree: str, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", tree, *args], capture_output=True, text=True, check=True
    ).stdout


def rewritten(tree: str, name: str, top: str = "HEAD") -> Dict[str, List[str]]:
    """Per file: the lines ``name`` adds that ``top`` no longer has."""
    commits = _git(
        tree, "log", "--format=%H", f"--grep=Patch-Name: {name}", top
    ).split()
    if len(commits) != 1:
        raise SystemExit(
            f"rewritten: {len(commits)} commits of {top} name patch {name}"
        )
    commit = commits[0]
    added: Dict[str, List[str]] = collections.defaultdict(list)
    path = ""
    for line in _git(tree, "show", "--format=", commit, "--", "py/").splitlines():
        if line.startswith("+++ "):
            path = line[6:]
        elif line.startswith("+") and line[1:].strip():
            added[path].append(line[1:].strip())
    gone: Dict[str, List[str]] = {}
    for path, lines in added.items():
        try:
            now = _git(tree, "show", f"{top}:{path}").splitlines()
        except subprocess.CalledProcessError:
            now = []
        left = collections.Counter(line.strip() for line in now)
        for line in lines:
            if left[line] > 0:
                left[line] -= 1
            else:
                gone.setdefault(path, []).append(line)
    gone["(added)"] = [line for lines in added.values() for line in lines]
    return gone


def main(argv: List[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    gone = rewritten(*argv)
    added = gone.pop("(added)")
    print(
        f"{argv[1]}: {len(added)} non-blank lines added under py/, "
        f"{sum(map(len, gone.values()))} not at the top"
    )
    for path, lines in sorted(gone.items()):
        print(f"\n{path}: {len(lines)}")
        print("\n".join(f"  {line}" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
