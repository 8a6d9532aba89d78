"""The terminal: prints a session's events, asks for confirmations and answers questions.

Output goes to ``sys.stdout`` and answers come from ``sys.stdin``, both looked up at each
call, so whatever replaces them (a test, a pager) is used.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from collections.abc import Mapping

from hookspecs import (
    JSON,
    Budget,
    Confirmation,
    ConfirmationRequest,
    Event,
    EventKind,
    PluginSettings,
    SessionView,
    describe_call,
    hookimpl,
    printable,
)

_settings = PluginSettings(plugin_id="console")
# confirm and user_input run in worker threads; one question at a time on the terminal.
_prompt_lock = threading.Lock()

_RESET = "\x1b[0m"
_DIM = "\x1b[2m"
_STYLES = {
    EventKind.SESSION_START: "\x1b[1m",
    EventKind.THOUGHT: "\x1b[2m",
    EventKind.PLAN: "\x1b[36m",
    EventKind.COMMAND: "\x1b[1;34m",
    EventKind.RESULT: "\x1b[32m",
    EventKind.ERROR: "\x1b[1;31m",
    EventKind.MESSAGE: "\x1b[1m",
    EventKind.BUDGET: "\x1b[33m",
    EventKind.CONFIRMATION: "\x1b[35m",
    EventKind.SESSION_END: "\x1b[1m",
}
_FAILED = "\x1b[31m"
_LABELS = {
    EventKind.SESSION_START: "start",
    EventKind.THOUGHT: "thought",
    EventKind.PLAN: "plan",
    EventKind.COMMAND: "command",
    EventKind.RESULT: "result",
    EventKind.ERROR: "error",
    EventKind.MESSAGE: "message",
    EventKind.BUDGET: "budget",
    EventKind.CONFIRMATION: "confirm",
    EventKind.SESSION_END: "end",
}


# The sessions that have started and not ended, as the events show them.
_running: set[str] = set()
# Whether the last batch was summarised: the switch is announced once each way.
_summarising = False
_NOTABLE = frozenset(
    {EventKind.SESSION_START, EventKind.SESSION_END, EventKind.ERROR, EventKind.CONFIRMATION}
)


@hookimpl
def configure(settings: PluginSettings) -> None:
    global _settings, _summarising
    _settings = settings
    # A new runtime: no session of its own runs yet.
    _running.clear()
    _summarising = False


# The stdout whose reader has gone away, if any.
_closed_stream: object = None


# Not blocking: lines to the terminal are quick, and events must stay in order. Batched:
# one write and one flush per batch, delivered before each command runs, before each
# question and at each cycle's end.
@hookimpl
def on_events(session: SessionView, events: tuple[Event, ...]) -> None:
    """Print readable lines for ``events`` (only the notable ones while more than
    ``summarise_above`` sessions run at once)."""
    global _closed_stream
    out = sys.stdout
    shown = _to_show(events)
    if out is _closed_stream or not shown:
        return
    color = use_color(str(_settings.values.get("color", "auto")), out)
    max_chars = int(_settings.values.get("max_chars", 300))
    text = "".join(
        format_event(session, event, color=color, max_chars=max_chars) + "\n" for event in shown
    )
    try:
        out.write(text)
        out.flush()
    except BrokenPipeError:
        # The reader went away (``autogpt run | head``): the session goes on, unprinted.
        _closed_stream = out


def _to_show(events: tuple[Event, ...]) -> list[Event]:
    """The events to print: all of them, or only the notable ones (starts, ends, errors,
    confirmations, failed commands) while more than ``summarise_above`` sessions run."""
    global _summarising
    for event in events:
        if event.kind is EventKind.SESSION_START:
            _running.add(event.session_id)
    limit = int(_settings.values.get("summarise_above", 8))
    summarise = len(_running) > limit
    if summarise:
        shown = [
            event
            for event in events
            if event.kind in _NOTABLE
            or (event.kind is EventKind.RESULT and event.data.get("ok") is False)
        ]
    else:
        shown = list(events)
    for event in events:
        if event.kind is EventKind.SESSION_END:
            _running.discard(event.session_id)
    if summarise != _summarising:
        _summarising = summarise
        _announce(summarise, limit)
    return shown


def _announce(summarise: bool, limit: int) -> None:
    if summarise:
        what = (
            f"console: more than {limit} sessions are running; only starts, ends, errors, "
            "confirmations and failed commands are shown (setting summarise_above)"
        )
    else:
        what = "console: every event is shown again"
    try:
        print(what, file=sys.stdout, flush=True)
    except BrokenPipeError:
        pass


@hookimpl
def session_end(session: SessionView) -> None:
    # Also for a session whose end event never comes (a session_end hook that overran):
    # it must not count as running for good.
    _running.discard(session.id)


@hookimpl(blocking=True)
def confirm(session: SessionView, request: ConfirmationRequest) -> Confirmation | None:
    """Ask at the terminal; ``None`` when stdin is closed or at its end."""
    answer = _ask(confirm_question(request, width=_width()))
    if answer is None:
        return None
    answer = answer.strip().lower()
    if answer in ("a", "always"):
        return Confirmation(
            approved=True, reason="allowed for the session at the console", remember=True
        )
    if answer in ("y", "yes"):
        return Confirmation(approved=True, reason="allowed at the console")
    return Confirmation(approved=False, reason="refused at the console")


@hookimpl(blocking=True)
def user_input(session: SessionView, question: str) -> str | None:
    """Ask ``question`` at the terminal; ``None`` when stdin is closed or at its end."""
    return _ask(f"{printable(question)}\n> ")


def confirm_question(request: ConfirmationRequest, *, width: int = 100) -> str:
    """The consent prompt: what the command is, why it asks, and the whole call.

    Every argument is shown in full (``describe_call``); nothing from the model, the
    manifest or the plugin can move the cursor, erase a line or hide a character.
    """
    needs = ", ".join(request.missing_permissions) or "no listed permission"
    lines = []
    if request.description:
        lines.append(printable(" ".join(request.description.split())))
    if request.reason:
        lines.append(f"Why: {printable(request.reason)}")
    lines.append(
        describe_call(
            request.call.command, request.call.arguments, plugin_id=request.plugin_id, width=width
        )
    )
    lines.append(f"Allow this call, needing {printable(needs)}? [y/N/a(lways)] ")
    return "\n".join(lines)


def _width() -> int:
    return max(shutil.get_terminal_size((100, 24)).columns, 40)


def use_color(setting: str, stream: object) -> bool:
    """``always``, ``never``, or (``auto``) only on a terminal and without ``NO_COLOR``."""
    if setting == "always":
        return True
    if setting == "never":
        return False
    # https://no-color.org: present and not empty disables colour.
    return _isatty(stream) and not os.environ.get("NO_COLOR")


# (stream, answer) of the last isatty() asked: on_event runs for every event of every
# session, and the answer for one stream object does not change.
_tty_cache: tuple[object, bool] | None = None


def _isatty(stream: object) -> bool:
    global _tty_cache
    cached = _tty_cache
    if cached is not None and cached[0] is stream:
        return cached[1]
    isatty = getattr(stream, "isatty", None)
    try:
        answer = bool(isatty and isatty())
    except ValueError:  # closed
        return False
    _tty_cache = (stream, answer)
    return answer


def format_event(session: SessionView, event: Event, *, color: bool, max_chars: int) -> str:
    """The line printed for ``event``: progress prefix, label, and what happened."""
    data = event.data
    # Model text, file contents and command output: shown, never acted on by the terminal.
    body = printable(_describe(session, event.kind, data, max_chars).rstrip())
    style = _STYLES.get(event.kind, "")
    if event.kind is EventKind.RESULT and data.get("ok") is False:
        style = _FAILED
    label = f"{_LABELS.get(event.kind, str(event.kind)):<8}"
    prefix = progress(event.cycle, session.budget)
    body = body.replace("\n", "\n" + " " * (len(prefix) + 1 + len(label) + 1))
    if color:
        return f"{_DIM}{prefix}{_RESET} {style}{label}{_RESET} {body}"
    return f"{prefix} {label} {body}"


def progress(cycle: int, budget: Budget) -> str:
    """``[3/10 cycles · 1,234 tok · $0.01]``; a limit is shown when there is one."""
    cycles = f"{cycle}/{budget.max_cycles}" if budget.max_cycles is not None else f"{cycle}"
    tokens = f"{budget.tokens:,}"
    if budget.max_tokens is not None:
        tokens += f"/{budget.max_tokens:,}"
    cost = _dollars(budget.cost_usd)
    if budget.max_cost_usd is not None:
        cost += f"/{_dollars(budget.max_cost_usd)}"
    return f"[{cycles} cycles · {tokens} tok · {cost}]"


def format_call(command: str, arguments: Mapping[str, JSON], max_chars: int) -> str:
    """``write_file(path='a.txt', content='Once upon a ti…')``, at most ``max_chars`` long."""
    args = ", ".join(f"{name}={_shorten(repr(value), 40)}" for name, value in arguments.items())
    return _shorten(f"{command}({args})", max_chars)


def _describe(session: SessionView, kind: EventKind, data: Mapping[str, JSON], limit: int) -> str:
    # The keys the core puts in each kind of event; anything unexpected is shown as JSON.
    text = _first_text(data, "text", "message", "content")
    match kind:
        case EventKind.SESSION_START:
            line = f"session {session.id}: {data.get('goal') or session.goal}"
        case EventKind.PLAN | EventKind.COMMAND:
            # A plan carries its call as "call"; a command event is the call itself.
            call = data.get("call", data) if kind is EventKind.PLAN else data
            if isinstance(call, Mapping) and call.get("command"):
                arguments = call.get("arguments")
                shown = format_call(
                    str(call["command"]),
                    arguments if isinstance(arguments, Mapping) else {},
                    limit,
                )
                line = f"{text} → {shown}" if text else shown
            else:
                line = text or _first_text(data, "error") or "(no text, no command)"
        case EventKind.RESULT:
            name = f"{data['command']}: " if "command" in data else ""
            if data.get("ok") is False:
                line = f"{name}error: {_first_text(data, 'error') or text}"
            else:
                line = f"{name}ok: {_first_text(data, 'output', 'text') or '(no output)'}"
        case EventKind.ERROR:
            line = text or _first_text(data, "error")
        case EventKind.CONFIRMATION:
            approved = data.get("approved")
            decision = "asked" if approved is None else "approved" if approved else "refused"
            who = ".".join(str(data[key]) for key in ("plugin", "command") if key in data)
            missing = data.get("missing") or data.get("permissions")
            if isinstance(missing, list) and missing:
                who += f" (needs {', '.join(map(str, missing))})"
            reason = _first_text(data, "reason") or text
            line = f"{who} {decision}".strip() + (f": {reason}" if reason else "")
        case EventKind.BUDGET if not text and any(key in data for key in _BUDGET_KEYS):
            line = "spent " + progress(int(data.get("cycles") or 0), _budget(data))[1:-1]
        case EventKind.SESSION_END:
            status = str(data.get("status") or "ended")
            result = _first_text(data, "result", "text")
            line = f"{status}: {result}" if result else status
        case _:
            line = text
    return _shorten(line, limit) if line else _compact(data, limit)


_BUDGET_KEYS = ("cycles", "max_cycles", "tokens", "max_tokens", "cost_usd", "max_cost_usd")


def _budget(data: Mapping[str, JSON]) -> Budget:
    """The budget a ``budget`` event reports."""
    return Budget(**{key: data[key] for key in _BUDGET_KEYS if data.get(key) is not None})


def _first_text(data: Mapping[str, JSON], *keys: str) -> str:
    for key in keys:
        value = data.get(key)
        if value:
            return value if isinstance(value, str) else json.dumps(value, default=str)
    return ""


def _compact(data: Mapping[str, JSON], limit: int) -> str:
    return _shorten(json.dumps(dict(data), ensure_ascii=False, default=str), limit)


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def _dollars(amount: float) -> str:
    # Cheap models cost fractions of a cent per cycle: show them rather than $0.00.
    return f"${amount:,.2f}" if amount == 0 or amount >= 0.01 else f"${amount:.4f}"


def _ask(question: str) -> str | None:
    with _prompt_lock:
        out, stdin = sys.stdout, sys.stdin
        out.write(question)
        out.flush()
        if stdin is None or stdin.closed:
            out.write("\n")
            return None
        try:
            line = stdin.readline()
        except (OSError, ValueError):  # closed or unreadable: nobody is there to answer
            line = ""
        if not line:
            out.write("\n")
            out.flush()
            return None
        answer = line.rstrip("\r\n")
        if not _isatty(stdin):
            # Nobody typed it, so the terminal did not echo it: keep the transcript readable.
            out.write(answer + "\n")
            out.flush()
        return answer
