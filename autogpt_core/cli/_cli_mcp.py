"""``autogpt mcp``: the enabled plugins' commands served to MCP clients (docs/mcp-server.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .._config import load_config
from ._cli_run import _positive_int, run_unwrapped
from ._cli_serve import _port, announce, serve_until_signalled


def add_mcp_parser(sub: Any) -> None:
    mcp = sub.add_parser(
        "mcp",
        help="serve the enabled plugins' commands as MCP tools (stdio, or HTTP with --http)",
        description="Serve the commands of the enabled plugins as the tools of a Model "
        "Context Protocol server, over stdin/stdout or, with --http, over streamable HTTP "
        "at /mcp (bearer tokens as for 'autogpt serve'). The same rules as 'autogpt run': "
        "a permission not granted under permissions.grant needs the user's consent, asked "
        "in the client (MCP elicitation); a client that cannot ask gets the call refused. "
        "Each client connection (over HTTP, each MCP session) is a session in the store "
        "('autogpt sessions').",
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
    http = mcp.add_argument_group("streamable HTTP")
    http.add_argument(
        "--http", action="store_true", help="serve MCP over streamable HTTP at /mcp, not stdio"
    )
    http.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    http.add_argument(
        "--port", type=_port, default=8001, help="port to listen on (8001; 0 picks a free one)"
    )
    http.add_argument(
        "--no-auth",
        action="store_true",
        help="accept requests without a token (loopback addresses only)",
    )
    http.add_argument(
        "--idle-timeout",
        type=_positive_int,
        default=1800,
        metavar="SECONDS",
        help="end an MCP session no request used for this long (1800)",
    )
    mcp.set_defaults(handler=cmd_mcp)


def cmd_mcp(args: argparse.Namespace) -> int:
    from .._errors import ConfigError
    from ..agent._options import RunOptions
    from ..hooks._tracing import trace_factory
    from ..server._mcp import serve_stdio

    config = load_config(args.config)
    options = RunOptions(workspace=args.workspace, max_cycles=args.max_calls)
    if args.http:
        return _serve_http(args, config, options)
    if args.no_auth or args.host != "127.0.0.1" or args.port != 8001:
        raise ConfigError("--host, --port and --no-auth go with --http (stdio has no address)")

    async def main() -> None:
        await serve_stdio(config, options, pm_factory=trace_factory(args.trace_hooks))

    run_unwrapped(main)
    return 0


def _serve_http(args: argparse.Namespace, config: Any, options: Any) -> int:
    from ..hooks._tracing import trace_factory
    from ..server._mcp import MCP_PATH, serve_http

    async def start(task_status: Any) -> None:
        await serve_http(
            config,
            options,
            host=args.host,
            port=args.port,
            auth=not args.no_auth,
            idle_seconds=float(args.idle_timeout),
            pm_factory=trace_factory(args.trace_hooks),
            task_status=task_status,
        )

    if serve_until_signalled(
        start,
        lambda handle: announce(handle, "mcp", "serving MCP at {url}" + MCP_PATH),
        "autogpt mcp",
        "autogpt mcp: stopping: calls in flight finish, sessions are saved",
    ):
        print("autogpt mcp: stopped; every session was saved", file=sys.stderr)
    else:
        print("autogpt mcp: stopped before it started", file=sys.stderr)
    return 0
