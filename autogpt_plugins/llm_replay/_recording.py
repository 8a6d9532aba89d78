"""Recordings of model traffic: the file format, and the providers that play and make them.

A recording is a JSON file (``docs/recordings.md`` is the reference)::

    {"format": "autogpt-replay", "version": 1,
     "exchanges": [{"request": {...summary...}, "response": {...}}, ...]}

``ReplayProvider`` answers requests with the recorded responses, in order; in strict mode
it first checks each request against the recorded summary (see ``request_difference``).
``Recorder`` writes a recording, rewriting the file after every exchange;
``RecordingProvider`` wraps a provider with one.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from autogpt_core import ConfigError, LLMError, ReplayMismatchError, write_atomically
from hookspecs import (
    JSON,
    LLMProvider,
    LLMRequest,
    LLMResponse,
    Message,
    Role,
    ToolCall,
    Usage,
)

FORMAT_NAME = "autogpt-replay"
FORMAT_VERSION = 1

#: How a user turns strict checking off; part of every mismatch message.
NON_STRICT_HINT = "replay it non-strict with --no-strict"

#: A recording file larger than this is refused unread: recordings of long sessions are a
#: few megabytes, and a path such as /dev/zero must not fill memory.
MAX_RECORDING_BYTES = 64 * 1024 * 1024
#: Arrays and objects nested deeper than this are refused: a recording needs about ten
#: levels, tool-call arguments given as objects a few more.
MAX_DEPTH = 100
#: A recorded request costing more than this (USD) is refused: no request costs that much,
#: and the session's sum of costs must stay a finite number to be stored.
MAX_COST_USD = 1_000_000.0


# --- the request summary and what strict mode compares ---------------------------------


def message_shape(message: Message) -> dict[str, JSON]:
    """A message without its text: role, tool-call ids and names, the tool result's call id."""
    shape: dict[str, JSON] = {"role": str(message.role)}
    if message.tool_calls:
        shape["tool_calls"] = [{"id": call.id, "name": call.name} for call in message.tool_calls]
    if message.tool_call_id is not None:
        shape["tool_call_id"] = message.tool_call_id
    return shape


def request_summary(request: LLMRequest) -> dict[str, JSON]:
    """What a recording keeps of a request: model, tool names, message count, last message.

    Message texts are left out on purpose: they hold timestamps, paths and command output
    that differ from run to run, and whatever secrets a tool result happened to show.
    """
    return {
        "model": request.model,
        "tools": [tool.name for tool in request.tools],
        "message_count": len(request.messages),
        "last_message": message_shape(request.messages[-1]) if request.messages else None,
    }


def request_difference(recorded: Mapping[str, JSON], live: LLMRequest) -> str | None:
    """What strict mode finds different between a recorded summary and a live request.

    Compared: the *set* of tool names offered (order ignored), and the shape of the last
    message (role, tool-call ids and names, the tool result's call id). Not compared: the
    model, message texts, and earlier messages. A field missing from the recorded summary
    (a hand-written recording) is not compared. Returns ``None`` when nothing differs.
    """
    now = request_summary(live)
    if "tools" in recorded:
        was = sorted(_names(recorded["tools"]))
        offered = sorted(_names(now["tools"]))
        if was != offered:
            missing = sorted(set(was) - set(offered))
            new = sorted(set(offered) - set(was))
            parts = []
            if missing:
                parts.append(f"no longer offered: {', '.join(missing)}")
            if new:
                parts.append(f"newly offered: {', '.join(new)}")
            if not parts:
                parts.append(f"recorded {was}, now {offered}")
            return "the tools offered differ (" + "; ".join(parts) + ")"
    if "last_message" in recorded:
        was_last, now_last = recorded["last_message"], now["last_message"]
        if was_last != now_last:
            return (
                f"the last message differs: recorded {_describe(was_last)}, "
                f"now {_describe(now_last)}"
            )
    return None


def _names(value: JSON) -> list[str]:
    return [str(name) for name in value] if isinstance(value, list) else []


def _describe(shape: JSON) -> str:
    """A message shape in words: ``a tool result for call_1``, ``an assistant message ...``."""
    if not isinstance(shape, Mapping):
        return "no message"
    role = shape.get("role")
    if role == "tool":
        return f"a tool result for {shape.get('tool_call_id')}"
    calls = shape.get("tool_calls")
    if isinstance(calls, list) and calls:
        listed = ", ".join(
            f"{call.get('name')} ({call.get('id')})" for call in calls if isinstance(call, Mapping)
        )
        return f"{'an' if role == 'assistant' else 'a'} {role} message calling {listed}"
    return f"{'an' if role == 'assistant' else 'a'} {role} message"


# --- responses ---------------------------------------------------------------------------


def response_to_json(response: LLMResponse) -> dict[str, JSON]:
    """An ``LLMResponse`` as recorded."""
    message = response.message
    return {
        "content": message.content,
        "tool_calls": [
            {"id": call.id, "name": call.name, "arguments": call.arguments}
            for call in message.tool_calls
        ],
        "usage": {
            "prompt_tokens": response.usage.prompt_tokens,
            "completion_tokens": response.usage.completion_tokens,
            "cost_usd": response.usage.cost_usd,
        },
        "model": response.model,
    }


class _Invalid(Exception):
    """A problem in a recording: ``field`` (dotted) and what is wrong with it."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")


def response_from_json(data: JSON, field: str = "response") -> LLMResponse:
    """Parse a recorded response; raise ``_Invalid`` naming the field that is wrong."""
    obj = _object(data, field)
    content = obj.get("content") or ""
    if not isinstance(content, str):
        raise _Invalid(f"{field}.content", "must be a string")
    raw_calls = obj.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise _Invalid(f"{field}.tool_calls", "must be a list")
    calls = []
    for i, raw in enumerate(raw_calls):
        where = f"{field}.tool_calls[{i}]"
        call = _object(raw, where)
        arguments = call.get("arguments", "")
        if not isinstance(arguments, str):
            # Hand-written recordings may give the arguments as an object.
            arguments = json.dumps(arguments)
        calls.append(
            ToolCall(
                id=_text(call.get("id", f"call_{i}"), f"{where}.id"),
                name=_text(call.get("name", ""), f"{where}.name"),
                arguments=arguments,
            )
        )
    usage = _object(obj.get("usage") or {}, f"{field}.usage")
    model = obj.get("model")
    if model is not None and not isinstance(model, str):
        raise _Invalid(f"{field}.model", "must be a string or null")
    return LLMResponse(
        message=Message(role=Role.ASSISTANT, content=content, tool_calls=tuple(calls)),
        usage=Usage(
            prompt_tokens=_count(usage.get("prompt_tokens", 0), f"{field}.usage.prompt_tokens"),
            completion_tokens=_count(
                usage.get("completion_tokens", 0), f"{field}.usage.completion_tokens"
            ),
            cost_usd=_cost(usage.get("cost_usd", 0.0), f"{field}.usage.cost_usd"),
        ),
        model=model,
    )


def _object(value: JSON, field: str) -> Mapping[str, JSON]:
    if not isinstance(value, Mapping):
        raise _Invalid(field, "must be an object")
    return value


def _text(value: JSON, field: str) -> str:
    if not isinstance(value, str):
        raise _Invalid(field, "must be a string")
    return value


def _count(value: JSON, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Invalid(field, "must be a whole number >= 0")
    return value


def _cost(value: JSON, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Invalid(field, "must be a number >= 0")
    # Not `value < 0`: NaN compares false with everything, and 1e999 reads as infinity.
    if not 0 <= value <= MAX_COST_USD:
        raise _Invalid(field, f"must be a number from 0 to {MAX_COST_USD:,.0f}, not {value!r}")
    return float(value)


def check_usage(usage: Usage, field: str) -> None:
    """Raise ``_Invalid`` unless ``usage`` holds whole token counts and a cost as recorded."""
    _count(usage.prompt_tokens, f"{field}.prompt_tokens")
    _count(usage.completion_tokens, f"{field}.completion_tokens")
    _cost(usage.cost_usd, f"{field}.cost_usd")


# --- the file ----------------------------------------------------------------------------


@attrs.frozen
class Exchange:
    """One recorded request (its summary) and the response it got."""

    request: Mapping[str, JSON]
    response: LLMResponse


@attrs.frozen
class Recording:
    """The exchanges of one recorded session, in order."""

    exchanges: tuple[Exchange, ...] = ()

    def to_json(self) -> dict[str, JSON]:
        return {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "exchanges": [
                {"request": dict(e.request), "response": response_to_json(e.response)}
                for e in self.exchanges
            ],
        }

    def dumps(self) -> str:
        """The file's text: indented JSON, so a recording reads well in a diff."""
        # allow_nan=False: NaN is not JSON, and no reader (this one included) accepts it.
        return json.dumps(self.to_json(), indent=2, ensure_ascii=False, allow_nan=False) + "\n"

    @classmethod
    def from_json(cls, data: JSON, source: str = "<recording>") -> Recording:
        """Parse and check a recording; raise ``ConfigError`` naming the field and the fix."""
        try:
            return cls(tuple(_exchanges(data)))
        except _Invalid as exc:
            raise ConfigError(
                f"recording {source}: {exc}: fix the file by hand (docs/recordings.md "
                f"describes the format) or re-record it with --record {source}"
            ) from None


def _exchanges(data: JSON) -> list[Exchange]:
    top = _object(data, "the file")
    if top.get("format") != FORMAT_NAME:
        raise _Invalid("format", f"must be {FORMAT_NAME!r}, got {top.get('format')!r}")
    if top.get("version") != FORMAT_VERSION:
        raise _Invalid(
            "version",
            f"version {top.get('version')!r} is not supported (this autogpt-core reads "
            f"version {FORMAT_VERSION})",
        )
    raw = top.get("exchanges")
    if not isinstance(raw, list):
        raise _Invalid("exchanges", "must be a list")
    exchanges = []
    for i, item in enumerate(raw):
        exchange = _object(item, f"exchanges[{i}]")
        request = _object(exchange.get("request") or {}, f"exchanges[{i}].request")
        response = response_from_json(exchange.get("response"), f"exchanges[{i}].response")
        exchanges.append(Exchange(request=dict(request), response=response))
    return exchanges


def load_recording(path: str | os.PathLike[str]) -> Recording:
    """Read a recording file; raise ``ConfigError`` naming the file, the problem and the fix.

    Only a regular file of at most ``MAX_RECORDING_BYTES`` is read (a FIFO would block, a
    device never end), and only JSON nested at most ``MAX_DEPTH`` deep, without NaN or
    Infinity, is accepted.
    """
    source = os.fspath(path)
    text = _read_bounded(source)
    rerecord = f"re-record it with --record {source}"
    data: JSON = None
    too_deep = False
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"recording {source} is not valid JSON ({exc.msg} at line {exc.lineno} column "
            f"{exc.colno}): fix it, or {rerecord}"
        ) from None
    except RecursionError:
        too_deep = True
    except ValueError as exc:  # NaN or Infinity, or an integer too long to convert
        raise ConfigError(
            f"recording {source} is not valid JSON ({exc}): fix it, or {rerecord}"
        ) from None
    if too_deep or _nested_deeper(data, MAX_DEPTH):
        raise ConfigError(
            f"recording {source} nests arrays and objects more than {MAX_DEPTH} levels deep, "
            f"which no recording needs: fix it, or {rerecord}"
        )
    return Recording.from_json(data, source)


def _refuse_constant(name: str) -> JSON:
    raise ValueError(f"{name} is not a number JSON allows")


def _read_bounded(source: str) -> str:
    """The text of the regular file ``source``, at most ``MAX_RECORDING_BYTES`` of it."""
    limit = f"{MAX_RECORDING_BYTES // (1024 * 1024)} MiB"
    try:
        # O_NONBLOCK: opening a FIFO would otherwise wait for a writer, forever.
        fd = os.open(source, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise ConfigError(
            f"recording {source} does not exist: check the path given to --llm "
            f"replay:FILE, or make one with --record {source}"
        ) from None
    except OSError as exc:
        raise ConfigError(f"recording {source} cannot be read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(
                f"recording {source} is {_kind_of(info.st_mode)}, not a regular file: give "
                "the path of a recording file, e.g. one made with --record FILE"
            )
        data = b""
        if info.st_size <= MAX_RECORDING_BYTES:
            with os.fdopen(os.dup(fd), "rb") as file:
                data = file.read(MAX_RECORDING_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"recording {source} cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if info.st_size > MAX_RECORDING_BYTES or len(data) > MAX_RECORDING_BYTES:
        raise ConfigError(
            f"recording {source} is larger than {limit}, more than any recording needs: "
            "check the path, or record a shorter session with --max-cycles"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"recording {source} cannot be read: it is not UTF-8 text ({exc.reason} at byte "
            f"{exc.start}): give the path of a recording file, e.g. one made with --record FILE"
        ) from None


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def _nested_deeper(value: JSON, limit: int) -> bool:
    """Whether arrays and objects nest more than ``limit`` deep in ``value`` (no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if not isinstance(item, list):
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in item)
    return False


# --- the providers -------------------------------------------------------------------------


class ReplayProvider:
    """An ``LLMProvider`` answering with the responses of a recording, in order.

    With ``strict`` (the default) each request is first checked against the recorded one
    (``request_difference``); a difference, or a request past the last exchange, raises
    ``ReplayMismatchError`` naming the file, the exchange and the fix.
    """

    def __init__(
        self, recording: Recording, *, source: str, strict: bool = True, skip: int = 0
    ) -> None:
        self.recording = recording
        self.source = source
        self.strict = strict
        # A resumed session has already played ``skip`` exchanges (one per completed cycle).
        self._next = max(0, skip)

    @classmethod
    def from_file(
        cls, path: str | os.PathLike[str], *, strict: bool = True, skip: int = 0
    ) -> ReplayProvider:
        """Load ``path`` (raising ``ConfigError`` if it is unusable) and replay it."""
        return cls(load_recording(path), source=os.fspath(path), strict=strict, skip=skip)

    def __repr__(self) -> str:
        return (
            f"ReplayProvider(source={self.source!r}, strict={self.strict}, "
            f"played={self._next}/{len(self.recording.exchanges)})"
        )

    @property
    def remaining(self) -> int:
        """How many recorded exchanges have not been played yet."""
        return len(self.recording.exchanges) - self._next

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """The next recorded response; raise ``ReplayMismatchError`` if it does not fit."""
        # A checkpoint, as a real provider would have: sessions sharing a thread interleave.
        await trio.lowlevel.checkpoint()
        exchanges = self.recording.exchanges
        index = self._next
        if index >= len(exchanges):
            raise ReplayMismatchError(
                f"recording {self.source} has {_exchanges_text(len(exchanges))}; the session asked "
                f"for more: re-record it with --record {self.source} (with a higher "
                "--max-cycles if the recording stopped early), or stop this run sooner with "
                "--max-cycles"
            )
        exchange = exchanges[index]
        if self.strict:
            difference = request_difference(exchange.request, request)
            if difference is not None:
                raise ReplayMismatchError(
                    f"recording {self.source}, exchange {index + 1} of {len(exchanges)}: "
                    f"{difference}: re-record it with --record {self.source}, or "
                    f"{NON_STRICT_HINT}"
                )
        self._next = index + 1
        return exchange.response

    async def aclose(self) -> None:
        """Nothing to release."""


class Recorder:
    """Records exchanges into one recording file.

    The file is rewritten atomically after every exchange, so a session that crashes keeps
    what it recorded. ``finish`` writes an empty recording if nothing was recorded.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._exchanges: list[Exchange] = []
        self._written = False
        # Exchanges that finish together are written one after the other, each file
        # holding everything recorded so far.
        self._lock = trio.Lock()

    def __repr__(self) -> str:
        return f"Recorder(path={os.fspath(self.path)!r}, exchanges={len(self._exchanges)})"

    @property
    def exchanges(self) -> Sequence[Exchange]:
        """What has been recorded so far."""
        return tuple(self._exchanges)

    async def add(self, request: LLMRequest, response: LLMResponse, *, source: str) -> None:
        """Record one exchange and rewrite the file.

        Raises ``LLMError`` naming ``source`` (who answered) when the response's usage could
        not be replayed, and when the file cannot be written.
        """
        try:
            check_usage(response.usage, "usage")
        except _Invalid as exc:
            # Refused rather than recorded: the file would not replay, and the session
            # could not store its budget.
            raise LLMError(
                f"{source} reported {exc} (got {response.usage!r}): the provider's "
                "usage report is wrong; this exchange was not recorded"
            ) from None
        async with self._lock:
            self._exchanges.append(Exchange(request_summary(request), response))
            await self._write()

    async def finish(self) -> None:
        """Make sure the file exists: an empty recording if nothing was recorded."""
        if not self._written:
            async with self._lock:
                await self._write()

    async def _write(self) -> None:
        text = Recording(tuple(self._exchanges)).dumps()
        try:
            await trio.to_thread.run_sync(write_atomically, self.path, text)
        except OSError as exc:
            raise LLMError(
                f"cannot write the recording {os.fspath(self.path)}: {exc}: check that its "
                "directory is writable, or record to another file with --record"
            ) from exc
        self._written = True


class RecordingProvider:
    """Wraps a provider and records each request (its summary) and response: for scripts
    and tests that record a provider directly. (A session records through this plugin's
    ``llm_request`` wrapper instead; see ``_session_recorder.py``.)

    ``aclose`` writes an empty recording if nothing was asked, then closes the wrapped
    provider.
    """

    def __init__(self, inner: LLMProvider, path: str | os.PathLike[str]) -> None:
        self.inner = inner
        self.recorder = Recorder(path)

    def __repr__(self) -> str:
        return f"RecordingProvider({self.inner!r}, path={os.fspath(self.path)!r})"

    @property
    def path(self) -> Path:
        return self.recorder.path

    @property
    def exchanges(self) -> Sequence[Exchange]:
        """What has been recorded so far."""
        return self.recorder.exchanges

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Ask the wrapped provider, record the exchange, return its response."""
        response = await self.inner.complete(request)
        await self.recorder.add(request, response, source=repr(self.inner))
        return response

    async def aclose(self) -> None:
        """Make sure the file exists, then close the wrapped provider."""
        try:
            await self.recorder.finish()
        finally:
            await self.inner.aclose()


def _exchanges_text(count: int) -> str:
    return f"{count} exchange" if count == 1 else f"{count} exchanges"


def as_flag(value: Any, default: bool = True) -> bool:
    """Read a boolean option that may arrive as text from a command line."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"replay option strict must be true or false, not {value!r}")
