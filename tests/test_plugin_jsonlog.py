"""The JSON-lines log: one parseable line per event, one file per session."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pluggy
import pytest
import yaml

import hookspecs
from autogpt_plugins import jsonlog
from hookspecs import Event, EventKind, PluginSettings, RuntimeView, SessionOutcome, SessionView


@pytest.fixture(autouse=True)
def closed_at_the_end(tmp_path: Path) -> Iterator[None]:
    """Every test starts configured for ``tmp_path``; no file is left open after it."""
    jsonlog.configure(settings=PluginSettings(plugin_id="jsonlog", data_dir=tmp_path))
    yield
    jsonlog.autogpt_shutdown(runtime=RuntimeView(core_version="0.1", data_dir=tmp_path))
    assert not jsonlog._files


def session(session_id: str = "s1") -> SessionView:
    return SessionView(id=session_id, goal="g", workspace=Path("."))


def log(event: Event) -> None:
    jsonlog.on_events(session=session(event.session_id), events=(event,))


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_events_are_written_one_json_object_per_line(tmp_path: Path) -> None:
    """Each event becomes a line with kind, session_id, cycle, ts and data."""
    log(Event(EventKind.SESSION_START, "s1", 0, {"goal": "g"}, timestamp=100.0))
    log(Event(EventKind.COMMAND, "s1", 1, {"command": "ls", "arguments": {"path": "é"}}))
    records = read(tmp_path / "logs" / "s1.jsonl")
    assert records[0] == {
        "kind": "session_start",
        "session_id": "s1",
        "cycle": 0,
        "ts": 100.0,
        "data": {"goal": "g"},
    }
    assert records[1]["kind"] == "command"
    assert records[1]["data"] == {"command": "ls", "arguments": {"path": "é"}}
    assert records[1]["ts"] > 0  # no timestamp given: the time of writing


def test_each_line_is_on_disk_before_the_next_event(tmp_path: Path) -> None:
    """Lines are flushed as they are written, while the file is still open."""
    log(Event(EventKind.THOUGHT, "s1", 1, {"text": "hmm"}))
    assert read(tmp_path / "logs" / "s1.jsonl")[0]["data"] == {"text": "hmm"}


def test_sessions_get_their_own_files(tmp_path: Path) -> None:
    """Events of two sessions go to two files."""
    log(Event(EventKind.THOUGHT, "a", 1, {"text": "in a"}))
    log(Event(EventKind.THOUGHT, "b", 1, {"text": "in b"}))
    assert [r["data"]["text"] for r in read(tmp_path / "logs" / "a.jsonl")] == ["in a"]
    assert [r["data"]["text"] for r in read(tmp_path / "logs" / "b.jsonl")] == ["in b"]


def test_file_is_closed_at_session_end_and_reopened_for_appending(tmp_path: Path) -> None:
    """session_end closes the file; a resumed session appends to it."""
    log(Event(EventKind.THOUGHT, "s1", 1, {"text": "one"}))
    jsonlog.session_end(session=session(), outcome=SessionOutcome(status="stopped"))
    assert "s1" not in jsonlog._files
    log(Event(EventKind.THOUGHT, "s1", 2, {"text": "two"}))
    log(Event(EventKind.SESSION_END, "s1", 2, {"status": "finished"}))
    assert "s1" not in jsonlog._files
    assert [r["cycle"] for r in read(tmp_path / "logs" / "s1.jsonl")] == [1, 2, 2]


def test_path_setting_with_session_id(tmp_path: Path) -> None:
    """The path setting names the file; {session_id} is filled in, relative to data_dir."""
    jsonlog.configure(
        settings=PluginSettings(
            plugin_id="jsonlog", values={"path": "runs/{session_id}.log"}, data_dir=tmp_path
        )
    )
    log(Event(EventKind.MESSAGE, "s9", 1, {"text": "hi"}))
    assert read(tmp_path / "runs" / "s9.log")[0]["data"] == {"text": "hi"}


def test_session_id_cannot_name_another_file(tmp_path: Path) -> None:
    """A session id with slashes and dots still writes inside the logs directory."""
    log(Event(EventKind.MESSAGE, "../../evil", 1, {"text": "hi"}))
    (written,) = (tmp_path / "logs").iterdir()
    assert written.name == "_.._evil.jsonl"


def test_manifest_is_valid_and_hooks_match_the_specs() -> None:
    """pluggy accepts the hook impls, and the manifest matches the schema."""
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs.specs)
    pm.register(jsonlog)
    # on_events runs inline (buffered lines are cheaper than a thread hop); the rest in threads.
    assert not getattr(jsonlog.on_events, hookspecs.BLOCKING_ATTR, False)
    assert getattr(jsonlog.session_end, hookspecs.BLOCKING_ATTR) is True
    manifest = yaml.safe_load((Path(jsonlog.__file__).parent / "autogpt-plugin.yaml").read_text())
    schema = json.loads((Path(hookspecs.__file__).parent / "manifest.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(manifest)
    assert (manifest["id"], manifest["enabled_by_default"]) == ("jsonlog", True)
