"""The console: readable event lines, colour only on terminals, answers from stdin."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import jsonschema
import pluggy
import pytest
import yaml
from hypothesis import given

import hookspecs
from autogpt_plugins import console
from hookspecs import (
    Budget,
    CommandCall,
    Confirmation,
    ConfirmationRequest,
    Event,
    EventKind,
    PluginSettings,
    SessionView,
)
from tests import strategies

SESSION = SessionView(
    id="s1",
    goal="write a poem",
    workspace=Path("."),
    cycle=3,
    budget=Budget(max_cycles=10, cycles=3, tokens=1234, cost_usd=0.01),
)


class Terminal(io.StringIO):
    """A StringIO that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def default_settings() -> Iterator[None]:
    console.configure(settings=PluginSettings(plugin_id="console"))
    yield
    console.configure(settings=PluginSettings(plugin_id="console"))


def show(
    kind: EventKind, data: Mapping[str, object], out: pytest.CaptureFixture[str] | io.StringIO
) -> str:
    """Print ``kind`` with ``data`` through the console and return what was written."""
    console.on_events(session=SESSION, events=(Event(kind, "s1", 3, data),))
    return out.getvalue() if isinstance(out, io.StringIO) else out.readouterr().out


# The data the core sends with each kind of event.
EXPECTED: dict[EventKind, tuple[dict[str, object], str]] = {
    EventKind.SESSION_START: (
        {"goal": "write a poem", "workspace": "/w", "resumed_at": 0},
        "start    session s1: write a poem",
    ),
    EventKind.THOUGHT: ({"text": "I should write it."}, "thought  I should write it."),
    EventKind.PLAN: (
        {"text": "Saving.", "call": {"command": "write_file", "arguments": {"path": "p.txt"}}},
        "plan     Saving. → write_file(path='p.txt')",
    ),
    EventKind.COMMAND: (
        {
            "command": "write_file",
            "plugin": "workspace",
            "arguments": {"path": "p.txt", "content": "x" * 100},
        },
        "command  write_file(path='p.txt', content='" + "x" * 38 + "…)",
    ),
    EventKind.RESULT: (
        {"command": "ls", "ok": True, "output": "a.txt", "error": None, "final": False},
        "result   ls: ok: a.txt",
    ),
    EventKind.ERROR: (
        {"plugin": "memory", "hook": "memory_recall", "error": "database is locked"},
        "error    database is locked",
    ),
    EventKind.MESSAGE: ({"text": "Done soon."}, "message  Done soon."),
    EventKind.BUDGET: (
        {"cycles": 3, "max_cycles": 10, "tokens": 1500, "cost_usd": 0.02},
        "budget   spent 3/10 cycles · 1,500 tok · $0.02",
    ),
    EventKind.CONFIRMATION: (
        {"command": "run_shell", "missing": ["shell"], "approved": False, "reason": "no answer"},
        "confirm  run_shell (needs shell) refused: no answer",
    ),
    EventKind.SESSION_END: (
        {"status": "finished", "result": "poem.txt", "cycles": 3},
        "end      finished: poem.txt",
    ),
}


@pytest.mark.parametrize("kind", list(EventKind))
def test_each_event_kind_prints_a_readable_line(
    kind: EventKind, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every event kind prints the progress prefix, a label and what happened."""
    data, expected = EXPECTED[kind]
    assert show(kind, data, capsys) == f"[3/10 cycles · 1,234 tok · $0.01] {expected}\n"


def test_failed_result_shows_the_error(capsys: pytest.CaptureFixture[str]) -> None:
    """A failed result prints its error."""
    line = show(EventKind.RESULT, {"command": "ls", "ok": False, "error": "no such dir"}, capsys)
    assert line.endswith("result   ls: error: no such dir\n")


def test_plan_without_a_call_shows_its_text(capsys: pytest.CaptureFixture[str]) -> None:
    """A text-only plan prints the text."""
    line = show(EventKind.PLAN, {"text": "All done.", "call": None}, capsys)
    assert line.endswith("plan     All done.\n")
    line = show(EventKind.PLAN, {"text": "", "call": None}, capsys)
    assert line.endswith("plan     (no text, no command)\n")


def test_unknown_data_is_shown_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    """An event without the usual keys still shows its data."""
    assert show(EventKind.MESSAGE, {"odd": [1, 2]}, capsys).endswith('{"odd": [1, 2]}\n')


def test_long_text_is_shortened(capsys: pytest.CaptureFixture[str]) -> None:
    """Text longer than max_chars is cut with an ellipsis."""
    console.configure(settings=PluginSettings(plugin_id="console", values={"max_chars": 20}))
    line = show(EventKind.THOUGHT, {"text": "y" * 500}, capsys)
    assert line.endswith(" " + "y" * 19 + "…\n")


def test_progress_shows_limits_when_there_are_some() -> None:
    """Without limits, the prefix shows only what has been spent."""
    assert console.progress(2, Budget(tokens=5, cost_usd=0.0)) == "[2 cycles · 5 tok · $0.00]"
    limited = Budget(max_cycles=4, max_tokens=9000, max_cost_usd=1.0, tokens=10, cost_usd=0.002)
    assert console.progress(1, limited) == "[1/4 cycles · 10/9,000 tok · $0.0020/$1.00]"


def test_no_ansi_codes_when_not_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    """With colour on auto, output to a non-terminal has no escape codes."""
    assert "\x1b[" not in show(EventKind.ERROR, {"message": "boom"}, capsys)


def test_ansi_codes_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal, output is coloured unless NO_COLOR is set."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    assert "\x1b[" in show(EventKind.ERROR, {"message": "boom"}, terminal)
    monkeypatch.setenv("NO_COLOR", "1")
    terminal.seek(0)
    terminal.truncate()
    assert "\x1b[" not in show(EventKind.ERROR, {"message": "boom"}, terminal)


@pytest.mark.parametrize(("setting", "expected"), [("always", True), ("never", False)])
def test_color_setting_overrides_detection(setting: str, expected: bool) -> None:
    """`always` colours a pipe, `never` leaves a terminal plain."""
    assert console.use_color(setting, io.StringIO()) is expected
    assert console.use_color(setting, Terminal()) is expected


def request() -> ConfirmationRequest:
    return ConfirmationRequest(
        call=CommandCall("run_shell", {"command": "rm -rf build"}),
        plugin_id="shell",
        missing_permissions=("shell",),
    )


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("y\n", Confirmation(approved=True, reason="allowed at the console")),
        ("YES\n", Confirmation(approved=True, reason="allowed at the console")),
        ("n\n", Confirmation(approved=False, reason="refused at the console")),
        ("\n", Confirmation(approved=False, reason="refused at the console")),
        (
            "a\n",
            Confirmation(
                approved=True, reason="allowed for the session at the console", remember=True
            ),
        ),
    ],
)
def test_confirm_reads_the_answer_from_stdin(
    answer: str,
    expected: Confirmation,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """y approves, a approves for the session, anything else refuses."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(answer))
    assert console.confirm(session=SESSION, request=request()) == expected
    assert capsys.readouterr().out == (
        'shell.run_shell\n  command = "rm -rf build"\n'
        "Allow this call, needing shell? [y/N/a(lways)] " + answer
    )


def test_confirm_shows_every_argument_whole(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long argument is wrapped, never elided: the hidden tail is on the screen."""
    hidden = "echo 'listing your files, harmless'" + " " * 300 + "; touch HIDDEN"
    monkeypatch.setattr(sys, "stdin", io.StringIO("n\n"))
    monkeypatch.setattr(console, "_width", lambda: 80)
    call = CommandCall("run_shell", {"command": hidden, "timeout": 5})
    console.confirm(session=SESSION, request=ConfirmationRequest(call, "shell", ("shell",)))
    out = capsys.readouterr().out
    assert "…" not in out
    assert all(len(line) <= 80 for line in out.splitlines())
    # Unwrapped, the lines hold the whole JSON value of every argument.
    unwrapped = "".join(_unwrapped(line) for line in out.splitlines())
    assert json.dumps(hidden) in unwrapped
    assert "timeout = 5" in out


def _unwrapped(line: str) -> str:
    """A prompt line without its continuation mark: only a mark that opens the line (after
    the indentation) is one; a value may hold "↪ " itself."""
    indent = len(line) - len(line.lstrip(" "))
    return line[indent + 2 :] if line[indent:].startswith("↪ ") else line


@given(arguments=strategies.hostile_arguments())
def test_confirm_shows_control_characters_visibly(arguments: dict[str, str]) -> None:
    """No control, escape or bidi character of any argument reaches the terminal as is,
    and every argument's value can be read back from the prompt."""
    request = ConfirmationRequest(CommandCall("run_shell", arguments), "shell", ("shell",))
    question = console.confirm_question(request, width=60)
    for char in question:
        assert char in "\n" or char.isprintable(), repr(char)
        assert char not in "\ufe0f\U000e0100\u3164\u2800", repr(char)
    unwrapped = "".join(_unwrapped(line) for line in question.splitlines())
    for value in arguments.values():
        assert hookspecs.printable(json.dumps(value, ensure_ascii=False), newlines=False) in (
            unwrapped
        )


def test_confirm_shows_the_reason_and_description_safely() -> None:
    """The manifest's description and the command's reason are shown, made printable."""
    request = ConfirmationRequest(
        CommandCall("write_file", {"path": "a.txt", "content": "x"}),
        "workspace",
        ("fs.overwrite",),
        description="Write\x1b[2K a file",
        reason="write_file would replace a.txt, which this session did not create",
    )
    question = console.confirm_question(request)
    assert "\x1b" not in question
    assert "Write\\x1b[2K a file" in question
    assert "Why: write_file would replace a.txt" in question
    assert "fs.overwrite" in question


def test_events_from_outside_cannot_drive_the_terminal() -> None:
    """Model text, command output and plugin errors print with escapes made visible."""
    evil = "done\x1b[2K\x1b[1A\rfake line\u202etxt.exe"
    for kind, data in [
        (EventKind.PLAN, {"text": evil, "call": None}),
        (EventKind.RESULT, {"command": "read_file", "ok": True, "output": evil}),
        (EventKind.ERROR, {"plugin": "p", "hook": "h", "error": evil}),
        (EventKind.SESSION_END, {"status": "finished", "result": evil}),
        (EventKind.MESSAGE, {"text": evil}),
    ]:
        line = console.format_event(SESSION, Event(kind, "s", 1, data), color=False, max_chars=1000)
        assert "\x1b" not in line
        assert "\r" not in line
        assert "\u202e" not in line
        assert "\\x1b[2K\\x1b[1A\\rfake line\\u202etxt.exe" in line


def test_user_input_question_is_printable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A question the model asks cannot erase lines at the terminal."""
    monkeypatch.setattr(sys, "stdin", io.StringIO("ok\n"))
    console.user_input(session=SESSION, question="Sure?\x1b[1A\x1b[2K")
    assert capsys.readouterr().out == "Sure?\\x1b[1A\\x1b[2K\n> ok\n"


def test_confirm_at_end_of_input_gives_no_answer(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With stdin at its end, or closed, confirm returns None."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert console.confirm(session=SESSION, request=request()) is None
    closed = io.StringIO("y\n")
    closed.close()
    monkeypatch.setattr(sys, "stdin", closed)
    assert console.confirm(session=SESSION, request=request()) is None


def test_user_input_returns_the_line_or_none(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """user_input prints the question and returns the line read, or None at end of input."""
    monkeypatch.setattr(sys, "stdin", io.StringIO("blue\n"))
    assert console.user_input(session=SESSION, question="Which colour?") == "blue"
    assert capsys.readouterr().out == "Which colour?\n> blue\n"  # piped answers are echoed
    assert console.user_input(session=SESSION, question="And now?") is None


def test_manifest_is_valid_and_hooks_match_the_specs() -> None:
    """pluggy accepts the hook impls; confirm and user_input are blocking; manifest valid."""
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs.specs)
    pm.register(console)
    assert getattr(console.confirm, hookspecs.BLOCKING_ATTR) is True
    assert getattr(console.user_input, hookspecs.BLOCKING_ATTR) is True
    manifest = yaml.safe_load((Path(console.__file__).parent / "autogpt-plugin.yaml").read_text())
    schema = json.loads((Path(hookspecs.__file__).parent / "manifest.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(manifest)
    assert (manifest["id"], manifest["enabled_by_default"]) == ("console", True)


@pytest.mark.parametrize(
    "hidden", ["\ufe00", "\ufe0f", "\U000e0100", "\u3164", "\u115f", "\u2800", "\u034f"]
)
def test_invisible_characters_are_shown(hidden: str) -> None:
    """Characters a terminal draws as nothing (variation selectors, fillers, blank braille)
    are escaped, so an argument cannot carry data the user does not see."""
    shown = hookspecs.printable(f"echo hi{hidden}")
    assert hidden not in shown
    assert shown.startswith("echo hi\\")


def test_many_sessions_at_once_are_summarised(capsys: pytest.CaptureFixture[str]) -> None:
    """Past summarise_above running sessions, only starts, ends, errors, confirmations and
    failed commands are printed, with one line saying so; every event again once fewer
    run."""
    console.configure(settings=PluginSettings(plugin_id="console", values={"summarise_above": 2}))

    def batch(session_id: str, *kinds_data: tuple[EventKind, dict[str, object]]) -> None:
        events = tuple(Event(kind, session_id, 1, data) for kind, data in kinds_data)
        console.on_events(session=SessionView(session_id, "g", Path(".")), events=events)

    start = (EventKind.SESSION_START, {"goal": "g"})
    step = (EventKind.THOUGHT, {"text": "thinking"})
    failed = (EventKind.RESULT, {"command": "ls", "ok": False, "error": "no such dir"})
    end = (EventKind.SESSION_END, {"status": "finished", "result": "done"})
    batch("a", start, step)
    batch("b", start, step)
    assert capsys.readouterr().out.count("thinking") == 2
    batch("c", start, step, failed)
    out = capsys.readouterr().out
    assert "more than 2 sessions are running" in out
    assert "session c: g" in out
    assert "thinking" not in out
    assert "ls: error: no such dir" in out
    batch("a", step, end)
    out = capsys.readouterr().out
    assert "thinking" not in out  # three ran during this batch
    assert "finished: done" in out
    batch("b", step)
    out = capsys.readouterr().out
    assert "every event is shown again" in out
    assert "thinking" in out
