"""A real, local, OpenAI-compatible HTTP server for tests.

It speaks just enough of the chat completions API for the real ``openai`` client:
``POST /v1/chat/completions`` (non-streaming) answers with the next scripted ``Reply`` and
records every request it received, so a test can assert what the agent sent::

    async with fake_openai_server([Reply(content="hi")]) as server:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k")
        ...
        assert server.requests[0]["messages"][0]["role"] == "system"

For a client in another process, run it in a background thread with its own trio loop::

    with fake_openai_in_thread([Reply(content="hi")]) as server:
        subprocess.run([..., "--base-url", server.base_url])

The server is hypercorn on its trio worker, bound to 127.0.0.1 on a free port. Malformed
bodies get 400 (not JSON) or 422 (JSON without a ``model`` and a ``messages`` list);
with ``require_key`` set, a wrong or missing bearer token gets 401; an exhausted script
gets 500. All error bodies have OpenAI's ``{"error": {...}}`` shape.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any, cast

import attrs
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from hypercorn.typing import ASGIFramework

Scope = dict[str, Any]
ASGIMessage = dict[str, Any]
Receive = Callable[[], Awaitable[ASGIMessage]]
Send = Callable[[ASGIMessage], Awaitable[None]]

_LOG = logging.getLogger(__name__)


@attrs.frozen
class FakeToolCall:
    """A tool call in a scripted reply; ``arguments`` is sent verbatim when it is a string."""

    name: str | None
    arguments: str | Mapping[str, Any] = attrs.field(factory=dict)
    id: str | None = None


@attrs.frozen
class Reply:
    """One scripted answer: text and/or tool calls, token counts, or an HTTP error.

    ``status`` other than 200 answers with an OpenAI-style error carrying ``error_message``.
    ``raw_tool_calls`` replaces the generated ``tool_calls`` list verbatim (for malformed ones).
    ``delay`` holds the answer back that many seconds (for cancellation and timeouts).
    """

    content: str | None = None
    tool_calls: tuple[FakeToolCall, ...] = ()
    prompt_tokens: int = 10
    completion_tokens: int = 5
    model: str | None = None
    status: int = 200
    error_message: str = "scripted error"
    raw_tool_calls: list[Any] | None = None
    include_usage: bool = True
    delay: float = 0.0


def _tool_call_json(call: FakeToolCall, index: int) -> dict[str, Any]:
    arguments = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
    function: dict[str, Any] = {"arguments": arguments}
    if call.name is not None:
        function["name"] = call.name
    return {"id": call.id or f"call_{index}", "type": "function", "function": function}


def completion_body(reply: Reply, request_model: str, number: int) -> dict[str, Any]:
    """The ``chat.completion`` JSON for ``reply`` (the ``number``-th answer of this server)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.raw_tool_calls is not None:
        message["tool_calls"] = reply.raw_tool_calls
    elif reply.tool_calls:
        message["tool_calls"] = [
            _tool_call_json(call, number * 100 + i) for i, call in enumerate(reply.tool_calls)
        ]
    body: dict[str, Any] = {
        "id": f"chatcmpl-fake-{number}",
        "object": "chat.completion",
        "created": 1_700_000_000 + number,
        "model": reply.model or request_model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if "tool_calls" in message else "stop",
                "logprobs": None,
            }
        ],
    }
    if reply.include_usage:
        body["usage"] = {
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        }
    return body


def _error_body(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


@attrs.define
class FakeOpenAI:
    """The server's state: the remaining script and everything it received.

    ``requests`` holds the JSON body of every well-formed request, in arrival order;
    ``headers`` the (lower-cased) headers of every request to the completions path.
    """

    script: deque[Reply]
    require_key: str | None = None
    base_url: str = ""
    requests: list[dict[str, Any]] = attrs.field(factory=list)
    headers: list[dict[str, str]] = attrs.field(factory=list)
    answered: int = 0

    def add(self, *replies: Reply) -> None:
        """Append replies to the script."""
        self.script.extend(replies)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        body = await _read_body(receive)
        status, payload, delay = self._handle(scope, body)
        if delay:
            await trio.sleep(delay)
        data = json.dumps(payload).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(data)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": data})

    def _handle(self, scope: Scope, body: bytes) -> tuple[int, dict[str, Any], float]:
        """The status, JSON body and delay of the answer to one request."""
        path = scope["path"].rstrip("/")
        if scope["method"] != "POST" or path != "/v1/chat/completions":
            return 404, _error_body(f"{scope['method']} {path} is not served", "not_found"), 0
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        self.headers.append(headers)
        if self.require_key is not None:
            if headers.get("authorization") != f"Bearer {self.require_key}":
                # Like the real API, the message never repeats the key it was given.
                error = _error_body(
                    "Incorrect API key provided.", "invalid_request_error", "invalid_api_key"
                )
                return 401, error, 0
        try:
            request = json.loads(body)
        except ValueError:
            return 400, _error_body("The body is not valid JSON.", "invalid_request_error"), 0
        if (
            not isinstance(request, dict)
            or not isinstance(request.get("model"), str)
            or not isinstance(request.get("messages"), list)
        ):
            error = _error_body(
                "The body must be an object with a string 'model' and a list 'messages'.",
                "invalid_request_error",
            )
            return 422, error, 0
        self.requests.append(request)
        if not self.script:
            error = _error_body(
                f"fake server script exhausted after {self.answered} replies", "server_error"
            )
            return 500, error, 0
        reply = self.script.popleft()
        self.answered += 1
        if reply.status != 200:
            return reply.status, _error_body(reply.error_message, "scripted_error"), reply.delay
        return 200, completion_body(reply, request["model"], self.answered), reply.delay


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _config() -> Config:
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    # A Logger object rather than "-": hypercorn would otherwise attach a handler to the
    # stderr of the moment, which pytest's capture closes after the test.
    config.errorlog = _LOG
    return config


@asynccontextmanager
async def fake_openai_server(
    script: Iterable[Reply] = (), *, require_key: str | None = None
) -> AsyncIterator[FakeOpenAI]:
    """Serve a ``FakeOpenAI`` in a nursery of the current trio run; stop it on exit."""
    server = FakeOpenAI(deque(script), require_key=require_key)
    raised: BaseException | None = None
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(_serve, server)
        server.base_url = binds[0] + "/v1"
        try:
            yield server
        except BaseException as exc:
            # Re-raised below, outside the nursery, so that the test sees its own
            # exception rather than an ExceptionGroup wrapped around it.
            raised = exc
        finally:
            # Cancelling (not hypercorn's graceful shutdown) closes idle keep-alive
            # connections at once instead of waiting out graceful_timeout.
            nursery.cancel_scope.cancel()
    if raised is not None:
        raise raised


async def _serve(server: FakeOpenAI, *, task_status: trio.TaskStatus[list[str]]) -> None:
    # FakeOpenAI reads the ASGI messages as plain dicts, not hypercorn's TypedDicts.
    await serve(cast(ASGIFramework, server), _config(), task_status=task_status)


@contextmanager
def fake_openai_in_thread(
    script: Iterable[Reply] = (), *, require_key: str | None = None
) -> Iterator[FakeOpenAI]:
    """Serve a ``FakeOpenAI`` from a background thread running its own ``trio.run``.

    For clients in another thread or a subprocess. ``server.requests`` is appended to by
    the server thread; read it after the client is done.
    """
    server = FakeOpenAI(deque(script), require_key=require_key)
    started = threading.Event()
    stop: list[Callable[[], None]] = []
    failure: list[BaseException] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            binds: list[str] = await nursery.start(_serve, server)
            server.base_url = binds[0] + "/v1"
            token = trio.lowlevel.current_trio_token()
            cancel = nursery.cancel_scope.cancel
            stop.append(lambda: trio.from_thread.run_sync(cancel, trio_token=token))
            started.set()

    def run() -> None:
        try:
            trio.run(main)
        except BaseException as exc:  # reported to the caller's thread below
            failure.append(exc)
        finally:
            started.set()

    thread = threading.Thread(target=run, name="fake-openai", daemon=True)
    thread.start()
    started.wait()
    if failure:
        thread.join()
        raise RuntimeError("the fake OpenAI server failed to start") from failure[0]
    try:
        yield server
    finally:
        with contextlib.suppress(trio.RunFinishedError):  # it already stopped by itself
            stop[0]()
        thread.join()
        if failure:
            raise RuntimeError("the fake OpenAI server failed") from failure[0]
