"""Talking to one MCP server: listing its tools at load, and a lazy session for calls.

Listing happens in ``register_bridged_commands``, which is sync and may be called from
inside the runtime's trio loop, so it runs a short-lived session in a new thread with its
own ``trio.run``. Calls share one session per server, opened by the first call in a trio
*system task* (the core gives plugins no nursery that outlives a command) and closed by
``aclose`` -- ``autogpt_shutdown`` -- or, at the latest, when the trio run ends, which
cancels system tasks: ``stdio_client`` stops the server's process tree even then.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import attrs
import httpx2
import trio
from mcp_types import CONNECTION_CLOSED

from hookspecs import JSON, CommandResult
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, Tool

from ._cache import ToolCache
from ._config import ServerSpec

#: Seconds ``aclose`` waits for a server to stop before leaving it to the SDK's kill.
CLOSE_TIMEOUT = 10.0


def describe(exc: BaseException) -> str:
    """A one-line account of why talking to a server failed."""
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return describe(exc.exceptions[0])
    if isinstance(exc, MCPError):
        return exc.message
    if isinstance(exc, trio.TooSlowError):
        return "it did not answer in time"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@asynccontextmanager
async def connect(
    spec: ServerSpec, errlog: TextIO, handshake_seconds: float | None = None
) -> AsyncIterator[ClientSession]:
    """An initialized session with the server (its process started, for stdio); the
    handshake may take ``handshake_seconds``."""
    async with AsyncExitStack() as stack:
        if spec.is_http:
            client = await stack.enter_async_context(
                httpx2.AsyncClient(
                    headers=dict(spec.headers), timeout=httpx2.Timeout(30.0, read=300.0)
                )
            )
            read, write = await stack.enter_async_context(
                streamable_http_client(spec.url, http_client=client)
            )
        else:
            params = StdioServerParameters(
                command=spec.command, args=list(spec.args), env=dict(spec.env), cwd=spec.cwd
            )
            read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
        session = await stack.enter_async_context(ClientSession(read, write))
        with trio.fail_after(handshake_seconds if handshake_seconds is not None else float("inf")):
            await session.initialize()
        yield session


def errlog_for(data_dir: Path | None, name: str) -> TextIO:
    """Where a stdio server's stderr goes: a file per server in the plugin's data directory
    (the console is the agent's), or nowhere without one."""
    if data_dir is None:
        return open(os.devnull, "w")  # noqa: SIM115 - closed by the caller
    data_dir.mkdir(parents=True, exist_ok=True)
    return open(data_dir / f"{name}.stderr.log", "a", encoding="utf-8")  # noqa: SIM115


async def _list(spec: ServerSpec, seconds: float, data_dir: Path | None) -> list[Tool]:
    with errlog_for(data_dir, spec.name) as errlog, trio.fail_after(seconds):
        async with connect(spec, errlog) as session:
            return await all_tools(session)


async def all_tools(session: ClientSession) -> list[Tool]:
    """Every tool the server lists, page by page."""
    tools: list[Tool] = []
    cursor: str | None = None
    while True:
        listed = await session.list_tools(params=None if cursor is None else _page(cursor))
        tools.extend(listed.tools)
        cursor = listed.next_cursor
        if not cursor:
            return tools


def _page(cursor: str) -> Any:
    from mcp.types import PaginatedRequestParams

    return PaginatedRequestParams(cursor=cursor)


def list_tools(
    specs: list[ServerSpec], timeout: float, data_dir: Path | None
) -> dict[str, list[Tool] | str]:
    """Each server's tools, or why they could not be listed; the servers in parallel, in a
    thread of its own with its own trio loop (the caller may be inside one)."""
    found: dict[str, list[Tool] | str] = {}

    async def one(spec: ServerSpec) -> None:
        try:
            found[spec.name] = await _list(spec, timeout, data_dir)
        except Exception as exc:
            found[spec.name] = f"listing its tools failed: {describe(exc)}"

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for spec in specs:
                nursery.start_soon(one, spec)

    failure: list[BaseException] = []

    def run() -> None:
        try:
            trio.run(main)
        except BaseException as exc:  # reported for every server below
            failure.append(exc)

    thread = threading.Thread(target=run, name="mcp-list-tools", daemon=True)
    thread.start()
    thread.join()
    for spec in specs:
        if spec.name not in found:
            reason = describe(failure[0]) if failure else "listing its tools did not finish"
            found[spec.name] = f"listing its tools failed: {reason}"
    return found


def result_of(server: str, tool: str, result: CallToolResult, max_output: int) -> CommandResult:
    """What the model is shown: the text of the content blocks (structured content when
    there is no text), cut at ``max_output``; an ``isError`` result is a failure."""
    parts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(getattr(block, "text", "")))
        elif kind in ("image", "audio"):
            size = len(str(getattr(block, "data", ""))) * 3 // 4
            parts.append(f"[{kind}: {getattr(block, 'mime_type', '?')}, about {size:,} bytes]")
        elif kind == "resource_link":
            parts.append(f"[resource link: {getattr(block, 'uri', '')}]")
        elif kind == "resource":
            resource = getattr(block, "resource", None)
            text = getattr(resource, "text", None)
            uri = getattr(resource, "uri", "")
            parts.append(text if isinstance(text, str) else f"[resource: {uri}]")
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    structured: JSON = result.structured_content
    if not parts and structured is not None:
        parts.append(json.dumps(structured, indent=2, ensure_ascii=False, default=str))
    text = "\n".join(parts)
    if len(text) > max_output:
        text = text[:max_output] + f"\n[... cut: {len(text) - max_output:,} more characters]"
    if result.is_error:
        return CommandResult.failure(
            f"the tool {tool} of MCP server {server} reported an error: {text or '(no text)'}"
        )
    return CommandResult.success(text, data=structured if isinstance(structured, dict) else None)


@attrs.define
class Connection:
    """One server's session for calls: opened by the first call, reopened after the server
    went away, closed by ``aclose``."""

    spec: ServerSpec
    data_dir: Path | None
    timeout: float
    #: Where the tools the server lists when a session opens are kept (None: nowhere).
    cache: ToolCache | None = None
    _session: ClientSession | None = None
    _token: object = None
    _ready: trio.Event | None = None
    _stop: trio.Event = attrs.field(factory=trio.Event)
    _done: trio.Event = attrs.field(factory=trio.Event)
    _error: str = ""
    _opening: trio.Lock = attrs.field(factory=trio.Lock)

    async def call(self, tool: str, arguments: Mapping[str, Any], max_output: int) -> CommandResult:
        name = self.spec.name
        try:
            session = await self._open()
        except _Unavailable as exc:
            return CommandResult.failure(f"MCP server {name} could not be started: {exc}")
        try:
            result = await session.call_tool(tool, dict(arguments))
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                return CommandResult.failure(
                    f"MCP server {name} refused the call of {tool}: {exc.message}"
                )
            await self.aclose()
            return CommandResult.failure(
                f"MCP server {name} went away during the call of {tool} (it crashed or "
                "exited); the next call starts it again"
            )
        except Exception as exc:
            await self.aclose()
            return CommandResult.failure(
                f"the call of {tool} on MCP server {name} failed: {describe(exc)}; the next "
                "call connects again"
            )
        return result_of(name, tool, result, max_output)

    async def _open(self) -> ClientSession:
        async with self._opening:
            token = trio.lowlevel.current_trio_token()
            if self._token is not token or self._done.is_set():
                # First use, a session that ended, or one of a trio run that is over.
                self._session, self._token, self._error = None, token, ""
                self._ready, self._stop, self._done = trio.Event(), trio.Event(), trio.Event()
                trio.lowlevel.spawn_system_task(self._serve, name=f"mcp server {self.spec.name}")
            assert self._ready is not None
            await self._ready.wait()
            if self._session is None:
                raise _Unavailable(self._error or "it stopped")
            return self._session

    async def _serve(self) -> None:
        # A system task must not raise (trio would crash the run): everything is caught,
        # Cancelled too -- the task ends either way, and the SDK's shielded cleanup has
        # stopped the process by then.
        ready, stop, done = self._ready, self._stop, self._done
        assert ready is not None
        try:
            with errlog_for(self.data_dir, self.spec.name) as errlog:
                async with connect(self.spec, errlog, self.timeout) as session:
                    self._session = session
                    ready.set()
                    if self.cache is not None:
                        await self._refresh(session, self.cache)
                    await stop.wait()
        except BaseException as exc:
            self._error = describe(exc)
        finally:
            self._session = None
            ready.set()
            done.set()

    async def _refresh(self, session: ClientSession, cache: ToolCache) -> None:
        """Keep the tools the server lists now, for the next load (the calls go on)."""
        try:
            with trio.fail_after(self.timeout):
                tools = await all_tools(session)
            await trio.to_thread.run_sync(cache.put, self.spec, tools)
        except Exception:  # noqa: BLE001 - the kept list stays; calls report failures
            return

    async def aclose(self) -> None:
        """Stop the session (and the server process) if one runs, and wait for it."""
        if self._ready is None or self._token is not _current_token():
            return
        self._stop.set()
        with trio.move_on_after(CLOSE_TIMEOUT):
            await self._done.wait()


def _current_token() -> object:
    try:
        return trio.lowlevel.current_trio_token()
    except RuntimeError:
        return None


class _Unavailable(Exception):
    pass
