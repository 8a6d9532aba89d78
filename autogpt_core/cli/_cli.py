"""The ``autogpt`` console script.

Imports are deferred into the sub-commands so that ``autogpt --version`` stays cheap. The
commands plugins add are looked up only when the command line names no core command
(``_cli_plugin_commands``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .._version import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autogpt",
        description="Run autonomous agents whose every behaviour is a plugin.",
        epilog="'autogpt config' shows where the config file, sessions and memory live.",
    )
    parser.add_argument("--version", action="version", version=f"autogpt-core {__version__}")
    parser.add_argument(
        "--config", metavar="FILE", help="config file (default: $AUTOGPT_CONFIG or the user one)"
    )
    parser.add_argument(
        "--trace-hooks",
        action="store_true",
        help="print every hook call with plugin, duration and outcome to stderr",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    from ._cli_plugins import add_plugins_parser

    add_plugins_parser(sub)
    from ._cli_config import add_config_parser

    add_config_parser(sub)
    try:
        from ._cli_run import add_run_parser
    except ImportError:  # pragma: no cover - the agent is not part of this build
        pass
    else:
        add_run_parser(sub)
        from ._cli_serve import add_serve_parser

        add_serve_parser(sub)
        from ._cli_mcp import add_mcp_parser

        add_mcp_parser(sub)
    from ._cli_store import add_store_parser

    add_store_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    from .._errors import AutoGPTError
    from ._cli_plugin_commands import prepare

    try:
        # Plugins' commands: listed from their manifests, or the one argv names loaded.
        plugin_command = prepare(parser, argv)
        args = parser.parse_args(argv)
        if plugin_command is not None:
            return plugin_command.run(args)
        handler = getattr(args, "handler", None)
        if handler is None:
            parser.print_help()
            return 0
        code: int = handler(args)
    except BrokenPipeError:
        # The reader went away (``| head``): stop writing quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except AutoGPTError as exc:
        # Errors can quote a plugin, a file or a model: masked and shown, never acted on.
        from hookspecs import printable

        from ..agent._redact import Redactor

        print(
            f"autogpt: error: {printable(Redactor.from_environment().text(str(exc)))}",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        print("autogpt: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
