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
client's first call (listing tools stores nothing) and ends when the connection closes.

Over streamable HTTP (``serve_http``, ``autogpt mcp --http``) each MCP session
(``Mcp-Session-Id``) is such a connection: it belongs to the bearer token that opened it
(another token gets 404 for it) and ends when the client deletes it, when it has been
idle ``idle_seconds``, or when the server stops.
"""

from __future__ import annotations

import contextvars
import logging
import sys
from collections.abc import Awaitable, Callable
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
from ._auth import Tokens, load_tokens
from ._hosts import is_loopback
from ._listen import CLOSE_SECONDS, Listener
from ._origin import SameOrigin

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


class MCPCommands:
    """The runtime's commands as the tools of an MCP server for one client connection.

    ``run`` (in a nursery, with ``nursery.start``) holds the connection's session, opened
    at the first call; ``stop`` ends it as finished.
    """

    def __init__(self, runtime: Runtime, options: RunOptions) -> None:
        self.runtime = runtime
        self.options = options
        self.channel = Channel(consent=ask_consent, question=ask_question)
        self._calls: CallSession | None = None
        #: Why the session could not be opened (its calls then get this as their result).
        self._failed: str | None = None
        self._who: str | None = None
        self._first_call = trio.Event()
        self._opened = trio.Event()
        self._stopping = trio.Event()

    def server(self) -> Server[Any]:
        return _server(self.runtime, self.call_tool)

    async def call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if self._who is None:
            self._who = _client_name(ctx)
        self._first_call.set()
        await self._opened.wait()
        if self._failed is not None:
            return _tool_result(CommandResult.failure(self._failed))
        if self._calls is None or self._stopping.is_set():
            return _tool_result(CommandResult.failure("autogpt mcp is ending this session"))
        token = _REQUEST.set(ctx)
        try:
            result = await self._calls.call(params.name, params.arguments)
        finally:
            _REQUEST.reset(token)
        return _tool_result(result)

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the connection's session until ``stop()``: it starts at the first call and
        then ends as finished. Cancelled instead, it ends as interrupted."""
        task_status.started(self)
        await self._first_call.wait()
        if self._who is None:
            self._opened.set()
            return  # stopped before any call: no session
        goal = f"Commands called by {self._who} through 'autogpt mcp'"
        try:
            async with self.runtime.calls(
                goal, self.options, who=self._who, channel=self.channel
            ) as calls:
                self._calls = calls
                self._opened.set()
                await self._stopping.wait()
                # A call in flight ends first; calls that come later are refused.
                await calls.settled()
                self._calls = None
        except Exception as exc:
            if self._opened.is_set():
                raise  # ending a session that ran: the store or a plugin failed, loudly
            # Opening it failed (the workspace, the store): this client's calls say so,
            # and the server and its other sessions go on.
            self._failed = self.runtime.redactor.text(
                f"autogpt mcp could not open a session for this client: {type(exc).__name__}: {exc}"
            )
            print(f"autogpt mcp: {printable(self._failed)}", file=sys.stderr, flush=True)
            self._opened.set()

    def stopping(self) -> None:
        """Refuse calls from now on; the one in flight goes on (``settled`` waits for it)."""
        self._stopping.set()

    async def settled(self) -> None:
        """Return once no call of this connection is running."""
        calls = self._calls
        if calls is not None:
            await calls.settled()

    def stop(self) -> None:
        self._stopping.set()
        self._first_call.set()  # wakes ``run`` if no call came


def _server(
    runtime: Runtime,
    call_tool: Callable[[Any, types.CallToolRequestParams], Awaitable[types.CallToolResult]],
) -> Server[Any]:
    async def list_tools(
        ctx: Any, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools_of(runtime))

    return Server(
        "autogpt",
        version=__version__,
        instructions="The commands of autogpt's enabled plugins. Commands that need a "
        "permission the user has not granted ask the user first.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def tools_of(runtime: Runtime) -> list[types.Tool]:
    """The enabled plugins' commands as MCP tools (the names a model sees)."""
    commands = runtime.plugins.commands
    tools = []
    for spec in commands.tool_specs():
        schema = dict(spec.parameters) if spec.parameters else {}
        schema.setdefault("type", "object")
        command = commands.get(spec.name)
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


def _client_name(ctx: Any) -> str:
    """The client as it names itself at ``initialize`` (shown, so made printable, short)."""
    client = getattr(getattr(ctx.session, "client_params", None), "client_info", None)
    if client is None:
        return "an MCP client"
    # Shortened only once masked (Runtime.calls), so that no part of a secret shows.
    name = printable(f"{client.name} {client.version}".strip(), newlines=False)
    return f"MCP client {name}"


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


# --- streamable HTTP ----------------------------------------------------------------------

#: How long a stop waits for the calls in flight before cancelling them.
DRAIN_SECONDS = 60.0

#: Where a connection's ``MCPCommands`` is kept in its ``Connection.state``.
_STATE_KEY = "autogpt.commands"


def _connection(ctx: Any) -> Any:
    """The MCP ``Connection`` a low-level request handler's call came on: its ``state`` and
    ``exit_stack`` last as long as the client's session. The low-level context reaches it
    only through its session (the SDK's high-level ``Context.connection`` is the same
    object); ``tests/test_mcp_serve_http.py`` fails loudly if an SDK release moves it."""
    connection = getattr(ctx.session, "_connection", None)
    if connection is None or not hasattr(connection, "exit_stack"):
        raise RuntimeError(
            "this mcp package version does not give a request its connection: install the "
            "version autogpt-core's mcp extra names (pip install 'autogpt-core[mcp]')"
        )
    return connection


def _token_name(ctx: Any) -> str | None:
    """The name of the token the request came with (``BearerOnly`` put it in the ASGI
    scope); ``None`` under ``--no-auth``."""
    scope = getattr(getattr(ctx, "request", None), "scope", None) or {}
    token = getattr(scope.get("user"), "access_token", None)
    name = getattr(token, "client_id", None)
    return name if isinstance(name, str) else None


class MCPSessions:
    """Over HTTP: each client session (its ``Mcp-Session-Id``) an ``MCPCommands`` of its
    own, run in ``nursery``: opened at the session's first call, ended as finished when the
    client ends the session (``DELETE``), when it is idle too long, or when the server
    stops."""

    def __init__(self, runtime: Runtime, options: RunOptions, nursery: trio.Nursery) -> None:
        self.runtime = runtime
        self.options = options
        self.nursery = nursery
        self.live: set[MCPCommands] = set()
        #: Set by ``drain``: a session opened from now on refuses its calls.
        self.draining = False

    def server(self) -> Server[Any]:
        return _server(self.runtime, self.call_tool)

    async def call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        connection = _connection(ctx)
        commands = connection.state.get(_STATE_KEY)
        if commands is None:
            # The session belongs to the token that opened it, as a task of 'autogpt serve'.
            options = attrs.evolve(self.options, owner=_token_name(ctx))
            commands = connection.state[_STATE_KEY] = MCPCommands(self.runtime, options)
            self.live.add(commands)
            connection.exit_stack.callback(self._end, commands)
            await self.nursery.start(commands.run)
            if self.draining:
                commands.stopping()
        result: types.CallToolResult = await commands.call_tool(ctx, params)
        return result

    def _end(self, commands: MCPCommands) -> None:
        self.live.discard(commands)
        commands.stop()

    async def drain(self) -> None:
        """Refuse new calls in every session, then wait for the calls in flight to end."""
        self.draining = True
        for commands in list(self.live):
            commands.stopping()
        for commands in list(self.live):
            await commands.settled()

    def stop(self) -> None:
        for commands in list(self.live):
            self._end(commands)


MCP_PATH = "/mcp"


class BearerOnly:
    """The ASGI gate in front of the MCP endpoint: only ``/mcp``, only with a token.

    The token's name becomes the request's user, so the session manager lets a session
    be used only with the token that opened it (another token gets 404, as for a session
    that does not exist). Lifespan events are answered here.
    """

    def __init__(self, app: Any, tokens: Tokens | None) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
        from mcp.server.auth.provider import AccessToken
        from starlette.responses import JSONResponse

        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # refused: HTTP 403
            return
        if scope["type"] != "http":
            return
        if scope["path"] not in (MCP_PATH, MCP_PATH + "/"):
            response = JSONResponse(
                {"error": f"not found: autogpt mcp serves MCP at {MCP_PATH} only"},
                status_code=404,
            )
            await response(scope, receive, send)
            return
        if self.tokens is not None:
            name = self.tokens.bearer(
                [v.decode("latin-1") for k, v in scope["headers"] if k.lower() == b"authorization"]
            )
            if name is None:
                response = JSONResponse(
                    {
                        "error": "unauthorized: send one 'Authorization: Bearer TOKEN' header "
                        f"with a token of this server (tokens from {self.tokens.source})"
                    },
                    status_code=401,
                    headers={"WWW-Authenticate": 'Bearer realm="autogpt mcp"'},
                )
                await response(scope, receive, send)
                return
            user = AuthenticatedUser(AccessToken(token=name, client_id=name, scopes=[]))
            scope = {**scope, "user": user}
        await self.app(scope, receive, send)


@attrs.define(eq=False)
class MCPServerHandle:
    """A running ``autogpt mcp --http``: where it listens, its tokens; ``stop()``."""

    urls: list[str]
    tokens: Tokens | None
    runtime: Runtime
    stopping: trio.Event

    def stop(self) -> None:
        self.stopping.set()


async def serve_http(
    config: Config,
    options: RunOptions,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    auth: bool = True,
    idle_seconds: float = 1800.0,
    pm_factory: Callable[[], HookManager] = HookManager,
    task_status: trio.TaskStatus[MCPServerHandle] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve MCP over streamable HTTP at ``/mcp`` until ``MCPServerHandle.stop()``.

    The tokens are ``autogpt serve``'s (``server/_auth.py``); ``auth=False`` is allowed
    on loopback only. Each client session is an autogpt session (``MCPSessions``).
    """
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    if not auth and not is_loopback(host):
        raise ConfigError(
            f"--no-auth serves anyone who reaches {host}: it is allowed on loopback only "
            "(--host 127.0.0.1); elsewhere use tokens (docs/server.md#tokens)"
        )
    tokens = (
        load_tokens(config.server_tokens, config.data_dir, admins=config.server_admins)
        if auth
        else None
    )
    # The SDK logs session ids and refusals at INFO and WARNING; requests carry tokens and
    # session ids are capabilities: its errors alone reach stderr.
    logging.getLogger("mcp").setLevel(logging.ERROR)
    async with Runtime(config, pm_factory=pm_factory) as runtime:
        if tokens is not None:
            runtime.redactor.add(tokens.values)
        async with trio.open_nursery() as nursery:
            sessions = MCPSessions(runtime, options, nursery)
            manager = StreamableHTTPSessionManager(
                sessions.server(), session_idle_timeout=idle_seconds
            )
            app = SameOrigin(
                BearerOnly(manager.handle_request, tokens), loopback_hosts_only=not auth
            )
            listener = Listener(app, host, port, graceful_seconds=CLOSE_SECONDS)
            async with manager.run():
                urls = await listener.start(nursery)
                stopping = trio.Event()
                task_status.started(MCPServerHandle(urls, tokens, runtime, stopping))
                await stopping.wait()
                # New calls are refused; those in flight end and their answers go out
                # while the server still listens (a second signal cancels them, and so
                # does DRAIN_SECONDS: a call stuck for good must not hold the stop).
                with trio.move_on_after(DRAIN_SECONDS):
                    await sessions.drain()
                listener.stop()
                # Open event streams keep hypercorn waiting: past a moment, close them.
                await listener.close(CLOSE_SECONDS)
            # The manager has closed every MCP session (each connection's exit stack
            # stopped its autogpt session); those still open end as finished here.
            sessions.stop()
