"""Command line: ``tools/patchset-cli <command> ...`` (see CONTRIBUTING.md)."""

import argparse
import sys
import tempfile
from typing import Any, Callable, List

from . import (
    PatchsetError,
    commit_tests,
    export,
    flavour_from_env,
    git,
    growth,
    prefixes,
    series,
    tree,
    wheelbuild,
)

FLAVOUR_CHOICES = ["standard", "rtx"]


def _cmd_check(args: argparse.Namespace) -> str:
    pieces = series.read_series()
    patches = series.all_patches(pieces)
    if problems := [p for patch in patches for p in series.header_problems(patch)]:
        raise PatchsetError("; ".join(problems))
    if differences := tree.flavour_differences():
        raise PatchsetError(
            "patched sources differ between flavours: "
            + ", ".join(f"{k} ({v})" for k, v in differences.items())
        )
    summary = (
        f"{len(patches)} patch(es) in {len(pieces)} piece(s) "
        f"({', '.join(p.id for p in pieces)}) apply cleanly to the 2.14.0 sources "
        "of both flavours; patched sources identical"
    )
    if not args.prefixes:
        return summary
    flavour = args.flavour or flavour_from_env()
    python = args.python or sys.executable
    skip = args.skip_whole
    with tempfile.TemporaryDirectory(prefix="patchset-prefixes-") as out:
        results = prefixes.check_prefixes(
            pieces, python, flavour, out, skip_whole=skip, through=args.through
        )
    lines = [summary, f"each prefix alone ({flavour}), its own tests:"]
    lines += [f"  {k}. {piece}: {r}" for k, (piece, r) in enumerate(results, 1)]
    return "\n".join(lines)


def _cmd_export(args: argparse.Namespace) -> str:
    prs, verify, test = args.pr_descriptions, args.verify_imports, args.test_pieces
    return export.export(
        args.checkout,
        args.branch,
        args.stack,
        None,
        None,
        prs,
        verify,
        test,
        args.with_compat,
    )


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="patchset-cli", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, func: Callable[[argparse.Namespace], str], help: str) -> Any:
        p = sub.add_parser(name, help=help)
        p.set_defaults(func=func)
        return p

    def build(args: argparse.Namespace) -> str:
        flavour = args.flavour or flavour_from_env()
        return wheelbuild.build_patched_wheel(flavour, args.dist_dir)

    def materialize(args: argparse.Namespace) -> str:
        count = tree.materialize(args.dest, args.flavour or "standard")
        return f"materialized {args.dest}: base + {count} patch commit(s), one branch per piece"

    def refresh(args: argparse.Namespace) -> str:
        patches, files = tree.refresh(args.tree)
        return f"refreshed patches/ ({patches} patch(es)) and {files} new file(s) from {args.tree}"

    def grow(args: argparse.Namespace) -> str:
        changed = growth.grow(args.tree, tree.BASE_TAG)
        return f"{args.tree}: new files grow; {changed} commit(s) rewritten"

    p = command("build", build, "the patched wheel (USE_TRT_RTX=1: TensorRT-RTX)")
    p.add_argument("--flavour", choices=FLAVOUR_CHOICES)
    p.add_argument("--dist-dir", default="dist")
    p = command("materialize", materialize, "the patched sources, git am'd")
    p.add_argument("dest")
    p.add_argument("--flavour", choices=FLAVOUR_CHOICES)
    p = command("refresh", refresh, "patches/ and new files from that tree")
    p.add_argument("tree")

    def run_commit_tests(args: argparse.Namespace) -> str:
        python = args.python or sys.executable
        package = commit_tests.installed_package(python)
        runs = commit_tests.run_at_commits(
            args.tree, tree.BASE_TAG, args.tests, package, python
        )
        failed = []
        for commit, test, found, summary in runs:
            subject = git(args.tree, ["log", "-1", "--format=%s", commit]).strip()
            bad = sorted(t for t, s in found.items() if s == "fail")
            print(f"{'FAIL' if bad else 'ok  '} {test} at {subject[:60]}: {summary}")
            if bad:
                failed.append(f"{test} at '{subject}' ({', '.join(bad)})")
        if failed:
            raise PatchsetError(f"{len(failed)} run(s) fail: {'; '.join(failed)}")
        return f"{len(runs)} run(s), each commit's tests pass at that commit"

    p = command(
        "commit-tests", run_commit_tests, "test files at each commit having them"
    )
    p.add_argument("tree")
    p.add_argument("tests", nargs="+", help="test files, relative to the tree")
    p.add_argument(
        "--python", help="a python whose torch_tensorrt is the patched wheel"
    )
    p = command(
        "grow", grow, "each definition of a new file in its first user's commit"
    )
    p.add_argument("tree")
    p = command("check", _cmd_check, "the series applies; both flavours identical")
    p.add_argument("--prefixes", action="store_true", help="also test every prefix")
    p.add_argument("--python", help="python of the venv to test prefixes in")
    p.add_argument("--flavour", choices=FLAVOUR_CHOICES)
    p.add_argument("--skip-whole", action="store_true", help="not the whole stack")
    p.add_argument("--through", metavar="PIECE", help="no prefix after this piece")
    p = command("export", _cmd_export, "the patch set as upstream branches")
    p.add_argument("checkout", help="path of a clean pytorch/TensorRT git checkout")
    p.add_argument("--branch", default="inplace-plugins", help="(prefix of) branch")
    p.add_argument("--stack", action="store_true", help="one branch per piece")
    p.add_argument("--pr-descriptions", metavar="DIR", help="a PR description each")
    p.add_argument("--verify-imports", metavar="PYTHON", help="import each commit")
    p.add_argument("--test-pieces", metavar="PYTHON", help="test each piece")
    p.add_argument(
        "--with-compat", action="store_true", help="compat- pieces too (onto 2.14.0)"
    )

    def base(args: argparse.Namespace) -> str:
        return export.make_base(args.dest, args.flavour)

    p = command("base", base, "a git repository of the released 2.14.0 sources")
    p.add_argument("dest", help="new directory")
    p.add_argument("--flavour", choices=FLAVOUR_CHOICES, default="standard")

    args = parser.parse_args(argv)
    try:
        print(args.func(args))
    except PatchsetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
