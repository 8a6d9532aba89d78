"""What a session store keeps and returns: sessions, cycles, events, artifacts, pages, and
the writes ``write_many``/``write_each`` take. The same values for every implementation."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Generic, TypeVar

import attrs

from hookspecs import JSON, Budget, Event, Message

_T = TypeVar("_T")


class SessionStatus(enum.StrEnum):
    """Where a stored session stands."""

    RUNNING = "running"
    FINISHED = "finished"
    STOPPED = "stopped"
    FAILED = "failed"
    BUDGET_EXHAUSTED = "budget_exhausted"
    INTERRUPTED = "interrupted"


def session_status(status: SessionStatus | str) -> SessionStatus:
    """``status`` as a ``SessionStatus``; ``ValueError`` listing the known ones if unknown."""
    try:
        return SessionStatus(status)
    except ValueError:
        known = ", ".join(s.value for s in SessionStatus)
        raise ValueError(f"unknown session status {status!r}; use one of: {known}") from None


@attrs.frozen
class SessionRecord:
    """A stored session. ``config`` holds non-secret options; ``budget`` what was spent.

    ``damage`` is empty, except in a ``list_sessions`` listing for a session whose row does
    not read back: then it says what is wrong and how to fix it (the message
    ``get_session`` raises), and the damaged columns read as empty.
    """

    id: str
    goal: str
    status: SessionStatus
    workspace: Path
    created_at: float
    updated_at: float
    config: Mapping[str, JSON] = attrs.field(factory=dict)
    result: str = ""
    budget: Mapping[str, JSON] = attrs.field(factory=dict)
    damage: str = ""


@attrs.frozen
class CycleRecord:
    """One completed cycle of a session (or, ``provisional``, one whose command started).

    ``plan``, ``command``, ``result`` and ``usage`` are JSON values in whatever shape the
    runtime chose; ``messages`` are the conversation messages this cycle added, so a resumed
    session rebuilds its conversation by concatenating them. ``completed_at`` 0 means "now".
    """

    session_id: str
    number: int
    plan: JSON = None
    command: JSON = None
    result: JSON = None
    usage: JSON = None
    messages: tuple[Message, ...] = ()
    completed_at: float = 0.0

    @property
    def provisional(self) -> bool:
        """Recorded as its command was about to run (``result`` says ``provisional``), and
        not completed since: the process stopped while the command ran, so whether it took
        effect is unknown. Recording the completed cycle replaces it; nothing else may."""
        return isinstance(self.result, dict) and self.result.get(PROVISIONAL) is True


#: The key of a provisional cycle's ``result`` (``CycleRecord.provisional``).
PROVISIONAL = "provisional"


def _events(events: Iterable[Event]) -> tuple[Event, ...]:
    return tuple(events)


@attrs.frozen
class CycleWrite:
    """A write: a completed cycle, the events it produced and the budget spent after it.

    All three are committed in one transaction, or none of them is. Its fields are
    ``record_cycle``'s arguments.
    """

    cycle: CycleRecord
    events: tuple[Event, ...] = attrs.field(default=(), converter=_events)
    budget: Budget | Mapping[str, JSON] | None = None


@attrs.frozen
class StatusWrite:
    """A write: set a session's status, and optionally its result and budget. Its fields
    are ``update_session_status``'s arguments."""

    session_id: str
    status: SessionStatus | str
    result: str | None = None
    budget: Budget | Mapping[str, JSON] | None = None


WriteOp = CycleWrite | StatusWrite | Event
"""What ``SessionStore.write_many`` and ``write_each`` accept: a ``CycleWrite`` is
``record_cycle``, a ``StatusWrite`` ``update_session_status``, an ``Event``
``append_event``."""

WriteOutcome = int | None
"""What a write returns: the new event's id for an ``Event``, ``None`` otherwise."""


@attrs.frozen
class StoredEvent:
    """An event as stored: ``id`` increases with every event appended to the store."""

    id: int
    session_id: str
    cycle: int
    kind: str
    data: Mapping[str, JSON]
    timestamp: float


@attrs.frozen
class ArtifactRecord:
    """A file in a session's workspace worth showing the user (Agent Protocol artifact).

    ``relative_path`` is the file's path inside the workspace, ``file_name`` its last part.
    The store keeps the record; the file itself stays in the workspace.
    """

    id: str
    session_id: str
    relative_path: str
    file_name: str
    agent_created: bool
    cycle: int | None
    created_at: float


@attrs.frozen
class SessionFootprint:
    """What a session occupies in the store: its rows, counted, and its workspace directory.

    ``delete_session`` returns what it deleted; ``session_footprint`` what it would delete.
    """

    id: str
    goal: str
    status: SessionStatus
    workspace: Path
    cycles: int
    events: int
    artifacts: int


@attrs.frozen
class Page(Generic[_T]):
    """One page of a listing: ``items`` from ``offset``, at most ``limit``, of ``total``."""

    items: tuple[_T, ...]
    total: int
    offset: int
    limit: int
