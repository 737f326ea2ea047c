"""Command line: ``tools/patchset-cli <command> ...`` (see CONTRIBUTING.md)."""

import argparse
import re
import sys
from typing import List

from . import PatchsetError, flavour_from_env


def _cmd_build(args: argparse.Namespace) -> str:
    from . import wheelbuild

    flavour = args.flavour or flavour_from_env()
    return wheelbuild.build_patched_wheel(
        flavour, args.dist_dir, args.python, args.platform, args.label
    )


def _cmd_materialize(args: argparse.Namespace) -> str:
    from . import tree

    count = tree.materialize(args.dest, args.flavour or "standard")
    return f"materialized {args.dest}: base + {count} patch commit(s) + overlay commit"


def _cmd_refresh(args: argparse.Namespace) -> str:
    from . import tree

    patches, overlay = tree.refresh(args.tree)
    return f"refreshed patches/ ({patches} patch(es)), py/ and tests/py/ ({overlay} file(s)) from {args.tree}"


def _cmd_check(args: argparse.Namespace) -> str:
    import tempfile

    from . import series, stack, tree

    patches = series.read_series()
    problems = [p for patch in patches for p in series.header_problems(patch)]
    if problems:
        raise PatchsetError("; ".join(problems))
    pieces = stack.read_stack()
    differences = tree.flavour_differences()
    if differences:
        raise PatchsetError(
            "patched sources differ between flavours: "
            + ", ".join(f"{k} ({v})" for k, v in differences.items())
        )
    summary = (
        f"{len(patches)} patch(es) apply cleanly to the 2.14.0 sources of both "
        f"flavours; patched sources identical; stack of {len(pieces)} piece(s) "
        f"({', '.join(p.id for p in pieces)}) is the series in order, so every "
        "prefix applies"
    )
    if not args.prefixes:
        return summary
    flavour = args.flavour or flavour_from_env()
    with tempfile.TemporaryDirectory(prefix="patchset-prefixes-") as out:
        results = stack.check_prefixes(
            pieces,
            args.python or sys.executable,
            flavour,
            out,
            skip_whole=args.skip_whole,
        )
    lines = [
        f"  {k}. {piece}: {result}" for k, (piece, result) in enumerate(results, 1)
    ]
    return "\n".join(
        [summary, f"each prefix alone ({flavour}), its own tests:", *lines]
    )


def _cmd_export(args: argparse.Namespace) -> str:
    from . import export

    if args.stack:
        return export.export_stack(
            args.checkout,
            args.branch,
            author=args.author,
            pr_dir=args.pr_descriptions,
            verify_python=args.verify_imports,
            test_python=args.test_pieces,
        )
    if args.pr_descriptions or args.test_pieces:
        raise PatchsetError(
            "--pr-descriptions and --test-pieces go with --stack (they are per piece)"
        )
    return export.export(
        args.checkout,
        args.branch,
        author=args.author,
        verify_python=args.verify_imports,
    )


def _cmd_base(args: argparse.Namespace) -> str:
    from . import export

    return export.make_base(args.dest, args.flavour)


def _cmd_upstream_tests(args: argparse.Namespace) -> str:
    from . import upstream_tests

    known = [upstream_tests.parse_known_failure(k) for k in args.known_failure]
    summary = upstream_tests.run(args.checkout, args.paths, args.report, known)
    if re.search(r"\b[1-9]\d* (failed|error)", summary):
        raise PatchsetError(summary)  # exit status 1 when anything failed
    return summary


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="patchset-cli", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "build", help="build the patched wheel (USE_TRT_RTX=1 or --flavour rtx)"
    )
    p.add_argument("--flavour", choices=["standard", "rtx"])
    p.add_argument("--dist-dir", default="dist")
    p.add_argument("--python", help="CPython tag, e.g. cp312 (default: this Python)")
    p.add_argument("--platform", help="platform tag (default: this machine)")
    p.add_argument("--label", help="local version label (default: inplace)")
    p.set_defaults(func=_cmd_build)

    p = sub.add_parser(
        "materialize",
        help="patched source tree as a git repository, one commit per patch",
    )
    p.add_argument("dest")
    p.add_argument("--flavour", choices=["standard", "rtx"])
    p.set_defaults(func=_cmd_materialize)

    p = sub.add_parser(
        "refresh",
        help="regenerate patches/, py/ and tests/py/ from a materialized tree",
    )
    p.add_argument("tree")
    p.set_defaults(func=_cmd_refresh)

    p = sub.add_parser(
        "check",
        help="headers complete; series and stack consistent; series applies to "
        "2.14.0; flavours identical",
    )
    p.add_argument(
        "--prefixes",
        action="store_true",
        help="also build, install and test every stack prefix alone",
    )
    p.add_argument(
        "--python", help="python of the venv to test prefixes in (default: this one)"
    )
    p.add_argument("--flavour", choices=["standard", "rtx"])
    p.add_argument(
        "--skip-whole",
        action="store_true",
        help="with --prefixes: leave out the last prefix (the whole stack)",
    )
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser(
        "export",
        help="commit the series, new modules and tests onto an upstream checkout",
    )
    p.add_argument("checkout", help="path of a clean pytorch/TensorRT git checkout")
    p.add_argument(
        "--branch",
        default="inplace-plugins",
        help="branch to create there (with --stack: the prefix of the branch names)",
    )
    p.add_argument(
        "--stack",
        action="store_true",
        help="one branch per piece of patches/stack, each on the one before; the "
        "longest prefix of pieces that applies (the error names the first that does not)",
    )
    p.add_argument(
        "--author",
        help="'Name <email>' of the commits (default: your git identity); 'header' "
        "keeps a patch header's Author where it has one",
    )
    p.add_argument(
        "--pr-descriptions",
        metavar="DIR",
        help="with --stack: write a PR description per piece here (NN-piece.md)",
    )
    p.add_argument(
        "--verify-imports",
        metavar="PYTHON",
        help="after each commit, import the modules it changed with this Python "
        "(onto released sources made by 'base', whose py/ imports as it is)",
    )
    p.add_argument(
        "--test-pieces",
        metavar="PYTHON",
        help="with --stack: run each piece's tests at its last commit with this "
        "Python, the exported py/ first on the path (onto 'base --flavour rtx')",
    )
    p.set_defaults(func=_cmd_export)

    p = sub.add_parser(
        "base",
        help="a git repository whose one commit is the released 2.14.0 sources, to "
        "export onto",
    )
    p.add_argument("dest", help="new directory")
    p.add_argument("--flavour", choices=["standard", "rtx"], default="standard")
    p.set_defaults(func=_cmd_base)

    p = sub.add_parser(
        "upstream-tests",
        help="run upstream's tests against the installed patched wheel",
    )
    p.add_argument(
        "checkout", help="path of a pytorch/TensorRT checkout (its tests/py is used)"
    )
    p.add_argument(
        "paths",
        nargs="*",
        help="test paths relative to the checkout (default: tests/py/dynamo)",
    )
    p.add_argument("--report", help="write a JSON report here")
    p.add_argument(
        "--known-failure",
        action="append",
        default=[],
        metavar="NODEID=REASON",
        help="deselect a test known to fail for a reason unrelated to the patch set "
        "(the reason is recorded in the report); repeatable",
    )
    p.set_defaults(func=_cmd_upstream_tests)

    args = parser.parse_args(argv)
    try:
        print(args.func(args))
    except PatchsetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
