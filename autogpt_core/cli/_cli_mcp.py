"""``autogpt mcp``: the enabled plugins' commands served to MCP clients (docs/mcp-server.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .._config import load_config
from ._cli_run import _positive_int, run_unwrapped


def add_mcp_parser(sub: Any) -> None:
    mcp = sub.add_parser(
        "mcp",
        help="serve the enabled plugins' commands as MCP tools (stdio)",
        description="Serve the commands of the enabled plugins as the tools of a Model "
        "Context Protocol server over stdin/stdout, for any MCP client. The same rules as "
        "'autogpt run': a permission not granted under permissions.grant needs the user's "
        "consent, asked in the client (MCP elicitation); a client that cannot ask gets the "
        "call refused. Each connection is a session in the store ('autogpt sessions').",
    )
    mcp.add_argument(
        "--workspace",
        type=Path,
        metavar="DIR",
        help="the commands' file sandbox (default: a new one per connection in the data directory)",
    )
    mcp.add_argument(
        "--max-calls", type=_positive_int, metavar="N", help="refuse calls past N per connection"
    )
    mcp.set_defaults(handler=cmd_mcp)


def cmd_mcp(args: argparse.Namespace) -> int:
    from ..agent._options import RunOptions
    from ..hooks._tracing import trace_factory
    from ..server._mcp import serve_stdio

    config = load_config(args.config)
    options = RunOptions(workspace=args.workspace, max_cycles=args.max_calls)

    async def main() -> None:
        await serve_stdio(config, options, pm_factory=trace_factory(args.trace_hooks))

    run_unwrapped(main)
    return 0
