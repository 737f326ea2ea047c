"""Build the patched Torch-TensorRT 2.14.0 wheel.

pip drives the build through the PEP 517 backend declared in pyproject.toml
(``pip wheel --no-deps . -w dist``; ``USE_TRT_RTX=1`` for the RTX flavour). This
script is the same build for those who call it directly, as with upstream::

    python setup.py bdist_wheel [--dist-dir dist] [--python cp312] [--platform P]
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools"))

from patchset import PatchsetError, flavour_from_env, wheelbuild  # noqa: E402


def main(argv: list) -> int:
    parser = argparse.ArgumentParser(prog="setup.py")
    parser.add_argument("command", choices=["bdist_wheel"])
    parser.add_argument("--dist-dir", "-d", default="dist")
    parser.add_argument("--python", help="CPython tag of the base wheel, e.g. cp312")
    parser.add_argument("--platform", help="platform tag of the base wheel")
    parser.add_argument("--label", help="local version label (default: inplace)")
    args = parser.parse_args(argv)
    try:
        path = wheelbuild.build_patched_wheel(
            flavour_from_env(), args.dist_dir, args.python, args.platform, args.label
        )
    except PatchsetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
