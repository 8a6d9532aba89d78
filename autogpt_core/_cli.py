"""The ``autogpt`` console script."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ._version import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autogpt", description="Run autonomous agents whose every behaviour is a plugin."
    )
    parser.add_argument("--version", action="version", version=f"autogpt-core {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    parser.parse_args(argv)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
