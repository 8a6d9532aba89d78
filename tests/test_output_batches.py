"""``on_events``: the events of ``on_event``, in order, in batches delivered before each
command runs, before each question and at each commit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hookspecs import Event, EventKind, SessionView, hookimpl
from tests.scripted import _reply, _run


class Batches:
    """Records every event one at a time and in batches, and whether notes.txt existed
    when each batch arrived."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.one_by_one: list[Event] = []
        self.batches: list[tuple[Event, ...]] = []
        self.file_there: list[bool] = []

    @hookimpl
    def on_event(self, session: SessionView, event: Event) -> None:
        self.one_by_one.append(event)

    @hookimpl
    def on_events(self, session: SessionView, events: tuple[Event, ...]) -> None:
        self.batches.append(events)
        self.file_there.append((self.workspace / "notes.txt").exists())


class FailingOutput:
    @hookimpl
    def on_events(self, session: SessionView, events: tuple[Event, ...]) -> None:
        raise OSError("disk full")


def _kinds(batch: tuple[Event, ...]) -> list[str]:
    return [str(event.kind) for event in batch]


async def test_batches_hold_every_event_once_in_order_and_come_before_commands(
    tmp_path: Path,
) -> None:
    """The batches put together are exactly the events on_event saw, in order; the batch
    with a command's event arrives before the command runs; none spans two cycles; the
    session's end is in the last one."""
    batches = Batches(tmp_path / "ws")
    replies = [
        _reply("write_file", {"path": "notes.txt", "content": "hi"}, "w"),
        _reply("finish", {"result": "done"}, "f"),
    ]
    outcome, _, store = await _run(tmp_path, replies, extra_plugins=[batches])
    assert outcome.status == "finished"
    delivered = [event for batch in batches.batches for event in batch]
    assert delivered == batches.one_by_one
    assert all(batches.batches)
    (with_command,) = [
        n
        for n, batch in enumerate(batches.batches)
        if any(e.kind is EventKind.COMMAND and e.data["command"] == "write_file" for e in batch)
    ]
    assert _kinds(batches.batches[with_command])[-1] == "command"
    assert batches.file_there[with_command] is False
    assert batches.file_there[with_command + 1] is True
    for batch in batches.batches:
        assert len({event.cycle for event in batch}) == 1, _kinds(batch)
    assert _kinds(batches.batches[0]) == ["session_start"]
    assert _kinds(batches.batches[-1])[-1] == "session_end"
    with store:
        stored = [(e.kind, e.cycle) for e in store.list_events(batches.one_by_one[0].session_id)]
    assert stored == [(str(e.kind), e.cycle) for e in delivered]


async def test_a_failing_batch_output_is_reported_and_the_session_goes_on(
    tmp_path: Path,
) -> None:
    """An on_events implementation that raises is reported as an error event naming its
    plugin and hook, kept in the store; the other outputs and the session go on."""
    batches = Batches(tmp_path / "ws")
    replies = [_reply("finish", {"result": "done"}, "f")]
    outcome, _, store = await _run(tmp_path, replies, extra_plugins=[FailingOutput(), batches])
    assert outcome.status == "finished"
    assert [event for batch in batches.batches for event in batch] == batches.one_by_one
    with store:
        errors: list[Any] = [
            e.data for e in store.list_events(batches.one_by_one[0].session_id) if e.kind == "error"
        ]
    assert errors
    assert {(e["plugin"], e["hook"]) for e in errors} == {("failingoutput", "on_events")}
    assert all("disk full" in e["error"] for e in errors)
