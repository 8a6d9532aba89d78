"""``autogpt mcp``: the enabled plugins' commands as the tools of an MCP server.

Any MCP client (an IDE, a desktop assistant, another agent) lists the commands as tools
and calls them. Each client connection is a session of its own (``Runtime.calls``): its
calls go through the dispatcher a model's calls go through, so the same rules apply —
``pre_command`` reviews, a permission not granted under ``permissions.grant`` needs the
user's consent, secrets are masked in what the client gets back, every call is stored as a
cycle with its events.

Consent and questions reach the user through MCP *elicitation*, in the client, when the
client supports it (the ``elicitation`` capability); a client that does not gets the call
refused, with a result saying which permission to grant. The session starts at the
client's first call (listing tools stores nothing) and ends when the connection closes,
or, over HTTP, after ``idle_seconds`` without a call.
"""

from __future__ import annotations

import contextvars
import math
import sys
from collections.abc import Callable
from typing import Any

import attrs
import trio

from hookspecs import CommandResult, Confirmation, ConfirmationRequest, describe_call, printable

from .._config import Config
from .._errors import ConfigError
from .._version import __version__
from ..agent._calls import CallSession
from ..agent._options import RunOptions
from ..agent._runtime import Channel, Runtime
from ..hooks._hookcall import HookManager

try:
    from mcp import types
    from mcp.server.lowlevel import Server
    from mcp.server.session import ServerSession
except ImportError as exc:  # pragma: no cover - the mcp extra is not installed
    raise ConfigError(
        "'autogpt mcp' needs the mcp package: pip install 'autogpt-core[mcp]'"
    ) from exc

#: The MCP request being answered in this task: consent and questions go to its client.
_REQUEST: contextvars.ContextVar[Any] = contextvars.ContextVar("autogpt_mcp_request")

#: The answers a consent elicitation offers.
ALLOW, ALWAYS, DENY = "allow", "always", "deny"
CONSENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {
            "type": "string",
            "title": "Allow this command?",
            "description": "allow: this call only; always: this plugin, for this "
            "connection; deny: do not run it",
            "enum": [ALLOW, ALWAYS, DENY],
        }
    },
    "required": ["decision"],
}
QUESTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "title": "Your answer"}},
    "required": ["answer"],
}
_ELICITATION = types.ClientCapabilities(elicitation=types.ElicitationCapability())


def _can_elicit(session: ServerSession) -> bool:
    try:
        return session.check_client_capability(_ELICITATION)
    except Exception:  # noqa: BLE001 - an unusual client: treat it as one that cannot ask
        return False


def consent_message(request: ConfirmationRequest) -> str:
    """What the client shows its user: the command, what it needs, the whole call."""
    needs = ", ".join(request.missing_permissions) or "no listed permission"
    lines = [f"autogpt: command {request.call.command!r} needs permission {needs}."]
    if request.description:
        lines.append(printable(" ".join(request.description.split())))
    if request.reason:
        lines.append(f"Why: {printable(request.reason)}")
    lines.append(
        describe_call(request.call.command, request.call.arguments, plugin_id=request.plugin_id)
    )
    return "\n".join(lines)


async def ask_consent(request: ConfirmationRequest) -> Confirmation:
    """Ask the user of the client whose call needs ``request`` (MCP elicitation)."""
    ctx = _REQUEST.get(None)
    needs = ", ".join(request.missing_permissions)
    if ctx is None or not _can_elicit(ctx.session):
        return Confirmation(
            approved=False,
            reason=f"this MCP client cannot ask its user (it does not support elicitation); "
            f"to let it run without asking, grant {needs} under permissions.grant in the "
            "autogpt config",
        )
    try:
        answer = await ctx.session.elicit_form(
            consent_message(request), CONSENT_SCHEMA, related_request_id=ctx.request_id
        )
    except Exception as exc:  # noqa: BLE001 - whatever the client did, nothing runs
        return Confirmation(approved=False, reason=f"the MCP client did not answer ({exc})")
    if answer.action != "accept":
        return Confirmation(approved=False, reason=f"the user chose {answer.action} in the client")
    decision = (answer.content or {}).get("decision")
    if decision == ALWAYS:
        return Confirmation(
            approved=True, reason="allowed in the MCP client for this connection", remember=True
        )
    if decision == ALLOW:
        return Confirmation(approved=True, reason="allowed in the MCP client")
    return Confirmation(approved=False, reason="refused in the MCP client")


async def ask_question(question: str) -> str | None:
    """A command's question (``ctx.ask_user``) to the client's user; ``None`` if none."""
    ctx = _REQUEST.get(None)
    if ctx is None or not _can_elicit(ctx.session):
        return None
    try:
        answer = await ctx.session.elicit_form(
            printable(question), QUESTION_SCHEMA, related_request_id=ctx.request_id
        )
    except Exception:  # noqa: BLE001 - no answer
        return None
    if answer.action != "accept":
        return None
    text = (answer.content or {}).get("answer")
    return text if isinstance(text, str) else None


@attrs.define
class _Open:
    """One client connection's session, run by a task of its own until ``done``."""

    calls: CallSession
    done: trio.Event
    last_used: float


class MCPCommands:
    """The runtime's commands as an MCP server, one session per client connection.

    ``serve_in`` gives the nursery the sessions run in; ``idle_seconds`` closes a session
    nobody called for that long (HTTP clients may vanish without closing).
    """

    def __init__(
        self,
        runtime: Runtime,
        options: RunOptions,
        *,
        idle_seconds: float = math.inf,
        connection: Callable[[Any], str] = lambda ctx: "stdio",
    ) -> None:
        self.runtime = runtime
        # Which client connection a request came on: over stdio there is one.
        self._connection = connection
        self.options = options
        self.idle_seconds = idle_seconds
        self._nursery: trio.Nursery | None = None
        self._open: dict[str, _Open] = {}
        self._opening = trio.Lock()
        self._stopping = trio.Event()
        self.channel = Channel(consent=ask_consent, question=ask_question)

    def server(self) -> Server[Any]:
        return Server(
            "autogpt",
            version=__version__,
            instructions="The commands of autogpt's enabled plugins. Commands that need a "
            "permission the user has not granted ask the user first.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    def tools(self) -> list[types.Tool]:
        tools = []
        for spec in self.runtime.plugins.commands.tool_specs():
            schema = dict(spec.parameters) if spec.parameters else {}
            schema.setdefault("type", "object")
            command = self.runtime.plugins.commands.get(spec.name)
            read_only = set(command.decl.permissions) <= {"fs.read"}
            tools.append(
                types.Tool(
                    name=spec.name,
                    description=spec.description,
                    input_schema=schema,
                    annotations=types.ToolAnnotations(title=command.name, read_only_hint=read_only),
                )
            )
        return tools

    async def _list_tools(
        self, ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.tools())

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        session = await self._session(ctx)
        token = _REQUEST.set(ctx)
        try:
            result = await session.calls.call(params.name, params.arguments)
        finally:
            _REQUEST.reset(token)
            session.last_used = trio.current_time()
        return _tool_result(result)

    @staticmethod
    def _who(ctx: Any) -> str:
        client = getattr(getattr(ctx.session, "client_params", None), "client_info", None)
        if client is None:
            return "an MCP client"
        return printable(f"MCP client {client.name} {client.version}".strip(), newlines=False)

    async def _session(self, ctx: Any) -> _Open:
        key = self._connection(ctx)
        async with self._opening:
            found = self._open.get(key)
            if found is not None:
                return found
            if self._nursery is None:
                raise RuntimeError("MCPCommands.run(...) is not running")
            opened: _Open = await self._nursery.start(self._hold, key, self._who(ctx))
            return opened

    async def _hold(self, key: str, who: str, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        goal = f"Commands called by {who} through 'autogpt mcp'"
        try:
            async with self.runtime.calls(
                goal, self.options, who=who, channel=self.channel
            ) as calls:
                opened = _Open(calls, trio.Event(), trio.current_time())
                self._open[key] = opened
                task_status.started(opened)
                while not opened.done.is_set():
                    with trio.move_on_after(min(self.idle_seconds, 60.0)):
                        await opened.done.wait()
                    idle = trio.current_time() - opened.last_used
                    if idle >= self.idle_seconds and not calls.busy():
                        break
        finally:
            self._open.pop(key, None)

    def close(self, key: str | None = None) -> None:
        """End the session of connection ``key`` (each of them when ``None``)."""
        for k, opened in list(self._open.items()):
            if key is None or k == key:
                opened.done.set()

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Run the connections' sessions until ``stop()``: each then ends as finished, a
        call in flight first. Cancelled instead, they end as interrupted."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started(self)
            await self._stopping.wait()
            self.close()
        self._nursery = None

    def stop(self) -> None:
        self._stopping.set()
        self.close()


def _tool_result(result: CommandResult) -> types.CallToolResult:
    if result.ok:
        text = result.output
        return types.CallToolResult(content=[types.TextContent(text=text)], is_error=False)
    return types.CallToolResult(
        content=[types.TextContent(text=result.error or "the command failed")], is_error=True
    )


async def serve_stdio(
    config: Config, options: RunOptions, *, pm_factory: Callable[[], HookManager] = HookManager
) -> None:
    """Serve one MCP client over stdin and stdout until it closes the connection.

    The transport is opened first: from then on what anything prints to stdout (a plugin
    at startup, the console) goes to stderr, and nothing reads the client's stdin.
    """
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        async with Runtime(config, pm_factory=pm_factory) as runtime:
            for warning in runtime.warnings():
                print(f"autogpt mcp: warning: {printable(warning)}", file=sys.stderr)
            commands = MCPCommands(runtime, options)
            async with trio.open_nursery() as nursery:
                await nursery.start(commands.run)
                server = commands.server()
                await server.run(read, write, server.create_initialization_options())
                commands.stop()
