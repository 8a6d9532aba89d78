"""Writes every event of a session as one JSON object per line to a ``.jsonl`` file."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import IO

from hookspecs import (
    Event,
    EventKind,
    PluginSettings,
    RuntimeView,
    SessionOutcome,
    SessionView,
    hookimpl,
)

_settings = PluginSettings(plugin_id="jsonlog")
# session_end and autogpt_shutdown run in worker threads while on_event runs on the event
# loop: the lock keeps them from closing a file under a write.
_lock = threading.Lock()
# default=str: a value the core failed to make JSON still gets logged, as its repr. Made
# once: json.dumps with options builds a new encoder on every call.
_ENCODE = json.JSONEncoder(ensure_ascii=False, default=str).encode
_files: dict[str, IO[str]] = {}


@hookimpl
def configure(settings: PluginSettings) -> None:
    global _settings
    _settings = settings


# Not blocking: a few buffered lines appended to a local file take microseconds, while a
# worker-thread round trip costs more than the write (bench/sessions.py). Batched: one
# write and one flush per batch, the core delivering one before each command runs and at
# each cycle's end, so a crash loses nothing the session has done.
@hookimpl
def on_events(session: SessionView, events: tuple[Event, ...]) -> None:
    """Append ``events`` to their session's log, flushed."""
    if not events:
        return
    text = "".join(_ENCODE(record(event)) + "\n" for event in events)
    session_id = events[0].session_id
    with _lock:
        file = _files.get(session_id)
        if file is None:
            path = log_path(_settings, session_id)
            if path is None:
                return
            path.parent.mkdir(parents=True, exist_ok=True)
            file = _files[session_id] = path.open("a", encoding="utf-8")
        file.write(text)
        file.flush()
        if events[-1].kind is EventKind.SESSION_END:
            _close(session_id)


def record(event: Event) -> dict[str, object]:
    """An event as one line of the log shows it."""
    return {
        "kind": str(event.kind),
        "session_id": event.session_id,
        "cycle": event.cycle,
        "ts": event.timestamp or time.time(),
        "data": dict(event.data),
    }


@hookimpl(blocking=True)
def session_end(session: SessionView, outcome: SessionOutcome) -> None:
    with _lock:
        _close(session.id)


@hookimpl(blocking=True)
def autogpt_shutdown(runtime: RuntimeView) -> None:
    with _lock:
        for session_id in list(_files):
            _close(session_id)


def log_path(settings: PluginSettings, session_id: str) -> Path | None:
    """Where the log of ``session_id`` goes, or ``None`` if there is nowhere to put it.

    The ``path`` setting may contain ``{session_id}``; a relative path is taken from the
    data directory. Without a ``path``, it is ``<data_dir>/logs/<session_id>.jsonl``.
    """
    # Session ids come from clients in server mode; keep them from naming other files.
    safe_id = re.sub(r"[^A-Za-z0-9_.-]", "_", session_id).lstrip(".") or "_"
    template = str(settings.values.get("path") or "")
    if template:
        path = Path(template.replace("{session_id}", safe_id)).expanduser()
        if path.is_absolute() or settings.data_dir is None:
            return path
        return settings.data_dir / path
    if settings.data_dir is None:
        return None
    return settings.data_dir / "logs" / f"{safe_id}.jsonl"


def _close(session_id: str) -> None:
    file = _files.pop(session_id, None)
    if file is not None:
        file.close()
