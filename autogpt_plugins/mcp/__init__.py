"""The MCP client bridge: each configured Model Context Protocol server's tools become commands.

``plugins.settings.mcp.servers`` maps a NAME to ``{command, args, env}`` (a server started
over stdio) or ``{url, headers}`` (streamable HTTP); every tool the server lists becomes
the command ``NAME.TOOL`` (the model calls it ``NAME__TOOL``), with the tool's
``inputSchema`` as its parameters and its description. A secret in ``env`` or ``headers``
is named as ``{env: VARIABLE}`` and read through the core, which masks it.

Design, in three parts:

- **At load** (``register_bridged_commands``, sync): the servers whose tool list is not
  kept (``_cache.py``: new or changed entries) are started, asked for their tools and
  stopped again, all at once, in a thread with its own trio loop -- the hook may be
  called from inside the runtime's loop. A server that cannot be started or listed
  within ``timeout`` is reported as not mapped, with the reason; its tools are not
  offered. A server whose list is kept is not started until a call needs it.
- **At call time**: the first call of a server's tool opens one session with it (a trio
  system task holds it, since no nursery outlives a command) and later calls share it, so
  a stateful server keeps its state. A result with ``isError``, a JSON-RPC error, a server
  that crashes or cannot be started: each is a failed command whose text says what
  happened, never an exception; after a crash the next call starts the server again.
- **At the end**: ``autogpt_shutdown`` closes every session, which stops each stdio
  server's process tree (the SDK closes its stdin, then terminates, then kills it); when
  the trio run ends first, cancelling the system task does the same.

Every call needs ``bridge:mcp`` (asked each time unless granted); a tool of an HTTP server
also ``network``. A stdio server's stderr goes to ``NAME.stderr.log`` in the plugin's data
directory.
"""

from __future__ import annotations

from typing import Any

from hookspecs import (
    CommandFunction,
    CommandResult,
    PluginSettings,
    ReadSecret,
    RegisterBridgedCommand,
    ReportUnmapped,
    RuntimeView,
    hookimpl,
)
from mcp.types import Tool

from ._cache import ToolCache
from ._config import ServerError, ServerSpec, server_spec
from ._session import Connection, list_tools, result_of


class MCPBridge:
    """The plugin object: what it keeps is one connection per configured server."""

    def __init__(self) -> None:
        self._connections: dict[str, Connection] = {}
        self._max_output = 20_000

    @hookimpl
    def register_bridged_commands(
        self,
        register: RegisterBridgedCommand,
        settings: PluginSettings,
        unmapped: ReportUnmapped,
        secret: ReadSecret,
    ) -> None:
        values = settings.values
        timeout = float(values.get("timeout", 30))
        self._max_output = int(values.get("max_output", 20_000))
        specs: list[ServerSpec] = []
        for name, entry in sorted((values.get("servers") or {}).items()):
            try:
                specs.append(server_spec(str(name), entry, secret))
            except ServerError as exc:
                unmapped(str(name), str(exc))
        cache = ToolCache(settings.data_dir) if values.get("tools_cache", True) else None
        listed: dict[str, list[Tool] | str] = {}
        for spec in specs:
            kept = cache.get(spec) if cache is not None else None
            if kept is not None:
                listed[spec.name] = kept  # not started: the first call starts it
        unlisted = [spec for spec in specs if spec.name not in listed]
        if unlisted:
            fresh = list_tools(unlisted, timeout, settings.data_dir)
            for spec in unlisted:
                tools = listed[spec.name] = fresh[spec.name]
                if cache is not None and not isinstance(tools, str):
                    cache.put(spec, tools)
        self._connections = {}
        for spec in specs:
            tools = listed[spec.name]
            if isinstance(tools, str):
                unmapped(spec.name, tools)
                continue
            connection = Connection(spec, settings.data_dir, timeout, cache)
            self._connections[spec.name] = connection
            for tool in tools:
                register(
                    f"{spec.name}.{tool.name}",
                    self._command(connection, tool.name),
                    description=tool.description
                    or tool.title
                    or f"The tool {tool.name} of MCP server {spec.name}.",
                    parameters=tool.input_schema,
                    permissions=["network"] if spec.is_http else [],
                )

    def _command(self, connection: Connection, tool: str) -> CommandFunction:
        """The function behind one bridged command (its arguments are the tool's)."""

        async def run(**arguments: Any) -> CommandResult:
            return await connection.call(tool, arguments, self._max_output)

        run.__name__ = tool
        return run

    @hookimpl
    async def autogpt_shutdown(self, runtime: RuntimeView) -> None:
        for connection in self._connections.values():
            await connection.aclose()


__all__ = ["MCPBridge", "ServerError", "ServerSpec", "result_of", "server_spec"]
