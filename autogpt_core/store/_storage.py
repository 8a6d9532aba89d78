"""The session store: sessions, their cycles and events, artifacts and memory, in one SQLite file.

The file is opened in WAL mode with ``synchronous=NORMAL``: every committed transaction
survives the process being killed (``kill -9``, a crash, Ctrl-C at any point), because the
WAL is already in the operating system's cache when ``COMMIT`` returns. Only a power cut
or kernel crash can lose the last few commits; it can never corrupt the file.

Threads: ``Store`` is a synchronous class, because ``sqlite3`` blocks. Call it from worker
threads (``trio.to_thread.run_sync``), or use ``AsyncStore``, which does that for you and
batches concurrent writes. Each call borrows a connection from a small pool
(``check_same_thread=False``) for its duration, so no connection is used by two threads at
once and reads in different threads run concurrently. Write transactions are serialised by
a lock, so writers in one process never spin in SQLite's busy handler; ``busy_timeout``
covers writers in other processes.

Schema (version ``SCHEMA_VERSION``, kept in ``PRAGMA user_version``; each version is a
migration in ``_MIGRATIONS``, applied in order when an older file is opened)::

    sessions   id, goal, status, created_at, updated_at, workspace, config, result, budget
    leases     session_id -> holder, hostname, pid, acquired_at, renewed_at, expires_at
    cycles     (session_id, number) -> plan, command, result, usage, messages, completed_at
    events     id (increasing), session_id, cycle, kind, data, ts
    artifacts  id, session_id, relative_path, file_name, agent_created, cycle, created_at
    memory     id, session_id, kind, text, metadata, created_at   (+ memory_fts, FTS5)

A new file is built under a temporary name and linked into place with its schema, so a
store this code created is never empty: an empty file at the path was emptied since (a
truncated copy, a full disk) and is refused rather than silently started afresh. A JSON
column that does not read back (edited by hand, damaged on disk) raises ``StorageError``
naming the file, the session and the column; ``list_sessions`` marks such a session
(``SessionRecord.damage``) and lists the others.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import json
import math
import os
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, Generic, TypeVar

import attrs
import trio

from hookspecs import (
    JSON,
    Budget,
    Event,
    MemoryHit,
    MemoryItem,
    MemoryQuery,
    Message,
    Role,
    ToolCall,
)

from .._errors import SessionNotFound, StorageError
from ._lease import Holder, Lease, in_use, lease_live, taken_over

_T = TypeVar("_T")

# Idle connections kept for reuse. More may be open while many threads read at once; the
# surplus is closed when returned.
_MAX_IDLE_CONNECTIONS = 8
_BUSY_TIMEOUT_MS = 10_000
# A recall query is an OR of its words; past this many, extra words add cost, not recall.
_MAX_QUERY_TERMS = 32
_WORD = re.compile(r"\w+")
# An ambiguous id prefix lists this many of the sessions it matches.
_MAX_CANDIDATES = 10
# Budget fields, which must read back as numbers (or null): the runtime does sums with them.
_BUDGET_NUMBERS = ("max_cycles", "max_tokens", "max_cost_usd", "cycles", "tokens", "cost_usd")


class SessionStatus(enum.StrEnum):
    """Where a stored session stands."""

    RUNNING = "running"
    FINISHED = "finished"
    STOPPED = "stopped"
    FAILED = "failed"
    BUDGET_EXHAUSTED = "budget_exhausted"
    INTERRUPTED = "interrupted"


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
    """One completed cycle of a session.

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


@attrs.frozen
class CycleWrite:
    """A write: a completed cycle, the events it produced and the budget spent after it.

    All three are committed in one transaction, or none of them is.
    """

    cycle: CycleRecord
    events: tuple[Event, ...] = ()
    budget: Budget | Mapping[str, JSON] | None = None


@attrs.frozen
class StatusWrite:
    """A write: set a session's status, and optionally its result and budget."""

    session_id: str
    status: SessionStatus | str
    result: str | None = None
    budget: Budget | Mapping[str, JSON] | None = None


WriteOp = CycleWrite | StatusWrite | Event | MemoryItem
"""What ``Store.write_many`` and the ``AsyncStore`` writer accept. An ``Event`` is appended;
a ``MemoryItem`` is stored (replacing one with the same id) and its id returned."""


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


# --- schema ----------------------------------------------------------------------------

_STATUSES = ", ".join(f"'{status.value}'" for status in SessionStatus)

# Version 1. Its IF NOT EXISTS clauses are from before schema versions were recorded.
_INITIAL_SCHEMA = (
    f"""
    CREATE TABLE IF NOT EXISTS sessions (
        id          TEXT PRIMARY KEY,
        goal        TEXT NOT NULL,
        status      TEXT NOT NULL CHECK (status IN ({_STATUSES})),
        created_at  REAL NOT NULL,
        updated_at  REAL NOT NULL,
        workspace   TEXT NOT NULL,
        config      TEXT NOT NULL DEFAULT '{{}}',
        result      TEXT NOT NULL DEFAULT '',
        budget      TEXT NOT NULL DEFAULT '{{}}'
    )
    """,
    "CREATE INDEX IF NOT EXISTS sessions_by_created ON sessions (created_at DESC)",
    # Not WITHOUT ROWID: cycle rows hold kilobytes of JSON, and WITHOUT ROWID tables with
    # large rows were three times slower to insert into.
    """
    CREATE TABLE IF NOT EXISTS cycles (
        session_id    TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        number        INTEGER NOT NULL CHECK (number >= 1),
        plan          TEXT NOT NULL DEFAULT 'null',
        command       TEXT NOT NULL DEFAULT 'null',
        result        TEXT NOT NULL DEFAULT 'null',
        usage         TEXT NOT NULL DEFAULT 'null',
        messages      TEXT NOT NULL DEFAULT '[]',
        completed_at  REAL NOT NULL,
        PRIMARY KEY (session_id, number)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS events (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        cycle       INTEGER NOT NULL,
        kind        TEXT NOT NULL,
        data        TEXT NOT NULL DEFAULT '{}',
        ts          REAL NOT NULL
    )
    """,
    "CREATE INDEX IF NOT EXISTS events_by_session ON events (session_id, id)",
    """
    CREATE TABLE IF NOT EXISTS artifacts (
        id             TEXT PRIMARY KEY,
        session_id     TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        relative_path  TEXT NOT NULL,
        file_name      TEXT NOT NULL,
        agent_created  INTEGER NOT NULL DEFAULT 1,
        cycle          INTEGER,
        created_at     REAL NOT NULL
    )
    """,
    "CREATE INDEX IF NOT EXISTS artifacts_by_session ON artifacts (session_id, created_at)",
    # Memory has no foreign key to sessions: the memory plugin keeps its own file, whose
    # sessions table is empty. ``seq`` is an explicit INTEGER PRIMARY KEY because the FTS
    # index refers to rows by rowid, and an implicit rowid may change on VACUUM.
    """
    CREATE TABLE IF NOT EXISTS memory (
        seq         INTEGER PRIMARY KEY,
        id          TEXT NOT NULL UNIQUE,
        session_id  TEXT NOT NULL,
        kind        TEXT NOT NULL,
        text        TEXT NOT NULL,
        metadata    TEXT NOT NULL DEFAULT '{}',
        created_at  REAL NOT NULL
    )
    """,
    "CREATE INDEX IF NOT EXISTS memory_by_session ON memory (session_id, created_at)",
    "CREATE INDEX IF NOT EXISTS memory_by_created ON memory (created_at)",
    # Porter stemming so "learned" finds "learning"; diacritics folded so "cafe" finds "café".
    """
    CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5 (
        text, content='memory', content_rowid='seq',
        tokenize='porter unicode61 remove_diacritics 2'
    )
    """,
    """
    CREATE TRIGGER IF NOT EXISTS memory_fts_insert AFTER INSERT ON memory BEGIN
        INSERT INTO memory_fts (rowid, text) VALUES (new.seq, new.text);
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS memory_fts_delete AFTER DELETE ON memory BEGIN
        INSERT INTO memory_fts (memory_fts, rowid, text) VALUES ('delete', old.seq, old.text);
    END
    """,
    """
    CREATE TRIGGER IF NOT EXISTS memory_fts_update AFTER UPDATE OF text ON memory BEGIN
        INSERT INTO memory_fts (memory_fts, rowid, text) VALUES ('delete', old.seq, old.text);
        INSERT INTO memory_fts (rowid, text) VALUES (new.seq, new.text);
    END
    """,
)


def _m001_initial(conn: sqlite3.Connection) -> None:
    for statement in _INITIAL_SCHEMA:
        conn.execute(statement)


def _m002_leases(conn: sqlite3.Connection) -> None:
    # No foreign key to sessions: a new session's lease is taken before its row is stored,
    # so that a run which cannot start leaves nothing behind.
    conn.execute(
        """
        CREATE TABLE leases (
            session_id   TEXT PRIMARY KEY,
            holder       TEXT NOT NULL,
            hostname     TEXT NOT NULL,
            pid          INTEGER NOT NULL,
            acquired_at  REAL NOT NULL,
            renewed_at   REAL NOT NULL,
            expires_at   REAL NOT NULL
        )
        """
    )


_MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_m001_initial, _m002_leases)
"""Migration ``n`` (from 1) brings a file from schema version ``n - 1`` to ``n``. Append
only: a released migration never changes."""

SCHEMA_VERSION = len(_MIGRATIONS)
"""The schema version this code writes; a file with a higher ``user_version`` is refused."""


class _Connection(sqlite3.Connection):
    """A pooled connection; ``broken`` marks one that must not be reused."""

    broken = False


# --- the store -------------------------------------------------------------------------


class Store:
    """The session store in the SQLite file ``path`` (created, with its directory, if missing).

    Raises ``StorageError`` naming the file if it is not a readable SQLite database or was
    written by a newer autogpt-core. Safe to share between threads (see the module
    docstring); ``close()`` it when done, or use it as a context manager.
    """

    def __init__(self, path: Path | str) -> None:
        if str(path) in ("", ":memory:") or str(path).startswith("file:"):
            raise ValueError(f"Store needs a file path, not {str(path)!r}")
        self.path = Path(path).expanduser()
        self._pool_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._idle: list[_Connection] = []
        self._closed = False
        # session id -> Holder.id, for the leases taken through this store and not yet
        # released: writes for those sessions are refused once another holder has the lease.
        self._held: dict[str, str] = {}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"Cannot create the directory of the session store {self.path}: "
                f"{exc.strerror or exc}. Fix: choose a writable data directory."
            ) from exc
        self._initialise()

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Close every idle connection; connections in use are closed when returned."""
        with self._pool_lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    # -- sessions -----------------------------------------------------------------------

    def create_session(
        self,
        goal: str,
        workspace: Path | str,
        *,
        session_id: str | None = None,
        config: Mapping[str, JSON] | None = None,
        status: SessionStatus | str = SessionStatus.RUNNING,
        created_at: float | None = None,
    ) -> SessionRecord:
        """Store a new session and return it. ``session_id`` defaults to a new UUID.

        ``config`` must hold only non-secret options (llm, model, max_cycles, ...).
        """
        now = time.time() if created_at is None else created_at
        record = SessionRecord(
            id=session_id or str(uuid.uuid4()),
            goal=goal,
            status=_status(status),
            workspace=Path(workspace),
            created_at=now,
            updated_at=now,
            config=dict(config or {}),
        )
        params = (
            record.id,
            record.goal,
            record.status.value,
            now,
            now,
            str(record.workspace),
            _dumps(record.config),
        )
        try:
            with self._write() as conn:
                conn.execute(
                    "INSERT INTO sessions (id, goal, status, created_at, updated_at, workspace,"
                    " config) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    params,
                )
        except sqlite3.IntegrityError as exc:
            raise StorageError(
                f"A session with id {record.id!r} already exists in {self.path}. "
                "Fix: resume it, or choose another id."
            ) from exc
        return record

    def get_session(self, session_id: str) -> SessionRecord:
        """The session ``session_id``; raises ``SessionNotFound`` if there is none."""
        with self._read() as conn:
            row = conn.execute(f"{_SESSION_SELECT} WHERE s.id = ?", (session_id,)).fetchone()
        if row is None:
            raise self._not_found(session_id)
        try:
            return _session(row)
        except _Damaged as exc:
            raise self._damaged(f"session {session_id}", exc, session_id) from None

    def resolve_session_id(self, text: str) -> str:
        """The id of the session whose id is ``text``, or else of the one session whose id
        starts with ``text`` (like git's abbreviated hashes).

        Raises ``SessionNotFound`` if no session's id starts with ``text``, or if more than
        one does (naming them).
        """
        if not text:
            raise SessionNotFound(
                f"An empty session id names no session in {self.path}. Fix: give an id, or "
                "its first characters, from `autogpt sessions`."
            )
        with self._read() as conn:
            # The ids starting with text sort together, from text itself (if stored) on.
            rows = conn.execute(
                "SELECT id FROM sessions WHERE id >= ? ORDER BY id LIMIT ?",
                (text, _MAX_CANDIDATES + 1),
            ).fetchall()
        matches = list(
            itertools.takewhile(lambda found: found.startswith(text), (r[0] for r in rows))
        )
        if not matches:
            raise self._not_found(text)
        if matches[0] == text or len(matches) == 1:
            return str(matches[0])
        count = f"more than {_MAX_CANDIDATES}" if len(matches) > _MAX_CANDIDATES else len(matches)
        raise SessionNotFound(
            f"Session id {text!r} is ambiguous: {count} sessions in {self.path} have ids "
            f"starting with it ({', '.join(matches[:_MAX_CANDIDATES])}). Fix: give more of "
            "the id; `autogpt sessions` lists them."
        )

    def list_sessions(
        self, *, offset: int = 0, limit: int = 50, status: SessionStatus | str | None = None
    ) -> Page[SessionRecord]:
        """Sessions, newest first, optionally only those with ``status``.

        A session stored as running that nobody runs (its lease lapsed, or its runtime's
        process is gone) is listed, and filtered, as interrupted; so is it by ``get_session``.
        """
        offset, limit = max(offset, 0), max(limit, 0)
        where, params = (
            ("", ()) if status is None else (f" WHERE {_STATUS} = ?", (_status(status).value,))
        )
        with self._read() as conn:
            total = conn.execute(f"SELECT count(*) FROM sessions AS s{where}", params).fetchone()[0]
            rows = conn.execute(
                f"{_SESSION_SELECT}{where} ORDER BY s.created_at DESC, s.rowid DESC"
                " LIMIT ? OFFSET ?",
                (*params, limit, offset),
            ).fetchall()
        return Page(tuple(self._listed(row) for row in rows), total, offset, limit)

    def _listed(self, row: tuple[Any, ...]) -> SessionRecord:
        """A listed session; a damaged one is listed too, marked, so the others still show."""
        try:
            return _session(row)
        except _Damaged as exc:
            damage = str(self._damaged(f"session {row[0]}", exc, str(row[0])))
        return SessionRecord(
            id=str(row[0]),
            goal=str(row[1]),
            status=SessionStatus(row[2]),
            workspace=Path(str(row[3])),
            created_at=_time_or_zero(row[4]),
            updated_at=_time_or_zero(row[5]),
            result=str(row[7]),
            damage=damage,
        )

    def update_session_status(
        self,
        session_id: str,
        status: SessionStatus | str,
        *,
        result: str | None = None,
        budget: Budget | Mapping[str, JSON] | None = None,
    ) -> None:
        """Set the status (and the result and budget, if given) of ``session_id``."""
        self.write_many([StatusWrite(session_id, status, result=result, budget=budget)])

    def session_footprint(self, session_id: str) -> SessionFootprint:
        """What deleting ``session_id`` would delete; reads no JSON, so a damaged session
        can be shown and deleted. Raises ``SessionNotFound`` if there is no such session."""
        with self._read() as conn:
            return self._footprint(conn, session_id)

    def delete_session(self, session_id: str) -> SessionFootprint:
        """Delete ``session_id``'s row, cycles, events, artifacts and lease; return what was
        deleted. The workspace directory and memory items are not the store's to delete.

        Raises ``SessionInUse`` while another holder's lease on it binds (a lease taken
        through this store does not stop it: take it first to keep runs out meanwhile),
        and ``SessionNotFound`` if there is no such session.
        """
        with self._write() as conn:
            footprint = self._footprint(conn, session_id)
            current = self._lease(conn, session_id)
            if (
                current is not None
                and current.live()
                and current.holder != self._held.get(session_id)
            ):
                raise in_use(current)
            for table in ("cycles", "events", "artifacts", "leases"):
                conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        self._held.pop(session_id, None)
        return footprint

    # -- leases -------------------------------------------------------------------------

    def acquire_lease(
        self, session_id: str, holder: Holder, *, expiry: float, now: float | None = None
    ) -> Lease:
        """Take ``session_id``'s lease for ``holder``, to expire ``expiry`` seconds from ``now``.

        Raises ``SessionInUse`` naming the holder while a lease binds (anyone's, ``holder``'s
        too: a session runs once at a time). A lease binds until it expires, or until its
        holder's process is found gone (on this host only). The session need not be stored
        yet. Until ``release_lease``, writes of the session's cycles, events and status
        through this store are refused once another holder has taken the lease over.
        """
        now = time.time() if now is None else now
        lease = Lease(session_id, holder.id, holder.hostname, holder.pid, now, now, now + expiry)
        with self._write() as conn:
            current = self._lease(conn, session_id)
            if current is not None and current.live(now):
                raise in_use(current)
            conn.execute(
                "INSERT OR REPLACE INTO leases (session_id, holder, hostname, pid, acquired_at,"
                " renewed_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                attrs.astuple(lease),
            )
        self._held[session_id] = holder.id
        return lease

    def renew_lease(self, lease: Lease, *, expiry: float, now: float | None = None) -> Lease:
        """Extend ``lease`` to ``expiry`` seconds from ``now`` and return it as renewed.

        Raises ``SessionInUse`` if another holder has taken it over (after it lapsed).
        """
        now = time.time() if now is None else now
        with self._write() as conn:
            renewed = conn.execute(
                "UPDATE leases SET renewed_at = ?, expires_at = ?"
                " WHERE session_id = ? AND holder = ?",
                (now, now + expiry, lease.session_id, lease.holder),
            ).rowcount
            current = None if renewed else self._lease(conn, lease.session_id)
        if not renewed:
            raise taken_over(lease.session_id, current)
        return attrs.evolve(lease, renewed_at=now, expires_at=now + expiry)

    def release_lease(self, lease: Lease) -> None:
        """Give ``lease`` up; if another holder has taken it over, theirs stays."""
        try:
            with self._write() as conn:
                conn.execute(
                    "DELETE FROM leases WHERE session_id = ? AND holder = ?",
                    (lease.session_id, lease.holder),
                )
        finally:
            if self._held.get(lease.session_id) == lease.holder:
                del self._held[lease.session_id]

    def check_held(self, session_id: str) -> None:
        """Raise ``SessionInUse`` if this store took ``session_id``'s lease and another
        holder has it now: checked before a side effect, not only at the next write."""
        holder = self._held.get(session_id)
        if holder is None:
            return
        current = self.get_lease(session_id)
        if current is None or current.holder != holder:
            raise taken_over(session_id, current)

    def get_lease(self, session_id: str) -> Lease | None:
        """``session_id``'s lease as stored (live or not), or ``None``."""
        with self._read() as conn:
            return self._lease(conn, session_id)

    # -- cycles and events --------------------------------------------------------------

    def record_cycle(
        self,
        cycle: CycleRecord,
        *,
        events: Sequence[Event] = (),
        budget: Budget | Mapping[str, JSON] | None = None,
    ) -> None:
        """Commit a completed cycle, its ``events`` and the ``budget`` in one transaction.

        Raises ``SessionNotFound`` for an unknown session and ``StorageError`` if that cycle
        number is already recorded; then nothing is written.
        """
        self.write_many([CycleWrite(cycle, tuple(events), budget)])

    def append_event(self, event: Event) -> int:
        """Store ``event`` and return its id (ids increase with every event appended)."""
        event_id = self.write_many([event])[0]
        assert isinstance(event_id, int)
        return event_id

    def write_many(self, ops: Sequence[WriteOp]) -> list[int | str | None]:
        """Commit several writes in one transaction: all of them, or none if one fails.

        Returns, for each op, the new event id for an ``Event``, the item id for a
        ``MemoryItem`` and ``None`` otherwise.
        One transaction for many cycles is what makes many concurrent sessions cheap:
        the cost of a commit is paid once per batch. A value that is not JSON raises
        ``TypeError`` or ``ValueError`` before anything is written.
        """
        prepared = [_prepare(op) for op in ops]
        with self._write() as conn:
            return [self._apply(conn, op) for op in prepared]

    def write_each(self, ops: Sequence[WriteOp]) -> list[int | str | None | StorageError]:
        """Commit several writes in one transaction, each one atomic on its own.

        A failing op is rolled back alone and its ``StorageError`` takes its place in the
        returned list; the others are committed. ``AsyncStore`` uses this for its batches,
        so one session's bad write never fails another session's.
        """
        outcomes: list[int | str | None | StorageError] = []
        prepared: list[_Prepared | None] = []
        for op in ops:
            try:
                prepared.append(_prepare(op))
                outcomes.append(None)
            except (TypeError, ValueError) as exc:
                prepared.append(None)
                outcomes.append(StorageError(f"Cannot store {type(op).__name__}: {exc}"))
        with self._write() as conn:
            for index, write in enumerate(prepared):
                if write is None:
                    continue
                conn.execute("SAVEPOINT op")
                try:
                    outcomes[index] = self._apply(conn, write)
                except StorageError as exc:
                    conn.execute("ROLLBACK TO op")
                    outcomes[index] = exc
                conn.execute("RELEASE op")
        return outcomes

    def last_completed_cycle(self, session_id: str) -> int:
        """The number of the last cycle recorded for ``session_id``, 0 if none."""
        with self._read() as conn:
            row = conn.execute(
                "SELECT (SELECT max(number) FROM cycles WHERE session_id = ?),"
                " EXISTS (SELECT 1 FROM sessions WHERE id = ?)",
                (session_id, session_id),
            ).fetchone()
        if not row[1]:
            raise self._not_found(session_id)
        return int(row[0] or 0)

    def load_cycles(self, session_id: str, *, after: int = 0) -> list[CycleRecord]:
        """The cycles of ``session_id`` numbered above ``after``, in order."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT session_id, number, plan, command, result, usage, messages, completed_at"
                " FROM cycles WHERE session_id = ? AND number > ? ORDER BY number",
                (session_id, after),
            ).fetchall()
            if not rows:
                self._check_session(conn, session_id)
        cycles = []
        for row in rows:
            try:
                cycles.append(_cycle(row))
            except _Damaged as exc:
                where = f"cycle {row[1]} of session {session_id}"
                raise self._damaged(where, exc, session_id) from None
        return cycles

    def list_events(
        self, session_id: str, *, after_id: int = 0, limit: int = 1000
    ) -> list[StoredEvent]:
        """Events of ``session_id`` with an id above ``after_id``, oldest first."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT id, session_id, cycle, kind, data, ts FROM events"
                " WHERE session_id = ? AND id > ? ORDER BY id LIMIT ?",
                (session_id, after_id, max(limit, 0)),
            ).fetchall()
            if not rows:
                self._check_session(conn, session_id)
        events = []
        for r in rows:
            try:
                data = _object(r[4], "data")
            except _Damaged as exc:
                raise self._damaged(
                    f"event {r[0]} of session {session_id}", exc, session_id
                ) from None
            events.append(StoredEvent(r[0], r[1], r[2], r[3], data, r[5]))
        return events

    # -- artifacts ----------------------------------------------------------------------

    def add_artifact(
        self,
        session_id: str,
        relative_path: str,
        *,
        agent_created: bool = True,
        cycle: int | None = None,
        artifact_id: str | None = None,
    ) -> ArtifactRecord:
        """Record that ``relative_path`` (inside the session's workspace) is an artifact."""
        record = ArtifactRecord(
            id=artifact_id or str(uuid.uuid4()),
            session_id=session_id,
            relative_path=relative_path,
            file_name=PurePosixPath(relative_path).name,
            agent_created=agent_created,
            cycle=cycle,
            created_at=time.time(),
        )
        try:
            with self._write() as conn:
                conn.execute(
                    "INSERT INTO artifacts (id, session_id, relative_path, file_name,"
                    " agent_created, cycle, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    attrs.astuple(record),
                )
        except sqlite3.IntegrityError as exc:
            if "FOREIGN KEY" in str(exc):
                raise self._not_found(session_id) from exc
            raise StorageError(
                f"An artifact with id {record.id!r} already exists in {self.path}. "
                "Fix: leave artifact_id empty to get a new one."
            ) from exc
        return record

    def list_artifacts(
        self, session_id: str, *, offset: int = 0, limit: int = 100
    ) -> Page[ArtifactRecord]:
        """The artifacts of ``session_id``, oldest first."""
        offset, limit = max(offset, 0), max(limit, 0)
        with self._read() as conn:
            self._check_session(conn, session_id)
            total = conn.execute(
                "SELECT count(*) FROM artifacts WHERE session_id = ?", (session_id,)
            ).fetchone()[0]
            rows = conn.execute(
                "SELECT id, session_id, relative_path, file_name, agent_created, cycle,"
                " created_at FROM artifacts WHERE session_id = ?"
                " ORDER BY created_at, rowid LIMIT ? OFFSET ?",
                (session_id, limit, offset),
            ).fetchall()
        items = tuple(ArtifactRecord(r[0], r[1], r[2], r[3], bool(r[4]), r[5], r[6]) for r in rows)
        return Page(items, total, offset, limit)

    # -- memory -------------------------------------------------------------------------

    def memory_store(self, item: MemoryItem) -> str:
        """Store ``item`` (replacing an item with the same id) and return its id.

        An empty ``item.id`` gets a new one; ``created_at`` 0 means now.
        """
        item_id = self.write_many([item])[0]
        assert isinstance(item_id, str)
        return item_id

    def memory_recall(
        self, query: MemoryQuery, session_id: str, *, backend: str = "sqlite"
    ) -> list[MemoryHit]:
        """Up to ``query.limit`` items matching ``query.text``, best first.

        Any text is accepted: it is split into words, and an item matches if it contains
        any of them; items with more (and rarer) matching words rank higher (FTS5 ``bm25``).
        Scores are in (0, 1), higher is better. Empty text (or no words) returns the most
        recent items, with score 0. ``query.scope`` ``"session"`` searches ``session_id``'s
        items only, ``"all"`` every session's; ``query.kinds``, when not empty, keeps items
        of those kinds only.
        """
        limit = max(query.limit, 0)
        scope_sql, scope_params = _scope_and_kinds(query, session_id)
        columns = "m.id, m.session_id, m.kind, m.text, m.metadata, m.created_at"
        match = _match_expression(query.text)
        with self._read() as conn:
            if match is None:
                rows = conn.execute(
                    f"SELECT {columns}, 0.0 FROM memory AS m WHERE 1{scope_sql}"
                    " ORDER BY m.created_at DESC, m.seq DESC LIMIT ?",
                    (*scope_params, limit),
                ).fetchall()
            else:
                rows = conn.execute(
                    f"SELECT {columns}, bm25(memory_fts) AS rank"
                    " FROM memory_fts JOIN memory AS m ON m.seq = memory_fts.rowid"
                    f" WHERE memory_fts MATCH ?{scope_sql} ORDER BY rank LIMIT ?",
                    (match, *scope_params, limit),
                ).fetchall()
        hits = []
        for row in rows:
            try:
                metadata = _object(row[4], "metadata")
            except _Damaged as exc:
                fix = (
                    f'delete that item (sqlite3 {self.path} "DELETE FROM memory WHERE id ='
                    f" '{row[0]}'\"), or restore the file from a backup"
                )
                raise self._damaged(f"memory item {row[0]}", exc, fix=fix) from None
            item = MemoryItem(
                text=row[3],
                session_id=row[1],
                kind=row[2],
                id=row[0],
                metadata=metadata,
                created_at=row[5],
            )
            hits.append(MemoryHit(item=item, score=_score(row[6]), backend=backend))
        return hits

    def memory_forget(self, query: MemoryQuery, session_id: str) -> int:
        """Forget items and return how many.

        Empty ``query.text`` forgets every item in scope (``"session"``: ``session_id``'s,
        ``"all"``: every item); otherwise the items in scope matching any of its words.
        Non-empty ``query.kinds`` limits it to items of those kinds. Text without any word
        forgets nothing.
        """
        scope_sql, scope_params = _scope_and_kinds(query, session_id)
        if not query.text.strip():
            sql, params = f"DELETE FROM memory AS m WHERE 1{scope_sql}", scope_params
        else:
            match = _match_expression(query.text)
            if match is None:
                return 0
            sql = (
                "DELETE FROM memory AS m WHERE m.seq IN"
                f" (SELECT rowid FROM memory_fts WHERE memory_fts MATCH ?){scope_sql}"
            )
            params = (match, *scope_params)
        with self._write() as conn:
            return conn.execute(sql, params).rowcount

    # -- internals ----------------------------------------------------------------------

    def _initialise(self) -> None:
        try:
            size: int | None = self.path.stat().st_size
        except FileNotFoundError:
            size = None
        except OSError as exc:
            raise StorageError(
                f"Cannot open the session store {self.path}: {exc.strerror or exc}. Fix: check "
                "that the file and its directory are readable."
            ) from exc
        if size is None:
            self._create()
        elif size == 0:
            # Not a new store: ``_create`` never leaves an empty file at the path. Opening it
            # would quietly start an empty store over whatever it held.
            raise StorageError(
                f"The session store {self.path} is empty (0 bytes) but a store was expected: a "
                "store autogpt creates always holds its schema, so it may have been truncated. "
                "Fix: move it away (e.g. rename it to *.bak) to start a new one, or restore it "
                "from a backup."
            )
        with self._errors("open"), self._connection() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            self._check_version(version)
            if version == SCHEMA_VERSION:
                return
            # journal_mode cannot change inside a transaction; it is a property of the file.
            conn.execute("PRAGMA journal_mode = WAL")
            with self._transaction(conn):
                # Another process may have created the schema since we looked.
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                self._check_version(version)
                for migrate in _MIGRATIONS[version:]:
                    migrate(conn)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _create(self) -> None:
        """Create the file with its schema under a temporary name, then link it into place.

        So the file never exists at ``path`` without its schema, even for a moment: another
        process opening it meanwhile, or a crash, can never leave it empty there.
        """
        temporary = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex}.new")
        try:
            with self._errors("create"):
                conn = sqlite3.connect(temporary, isolation_level=None, factory=_Connection)
                try:
                    # journal_mode is a property of the file: it stays WAL once linked.
                    conn.execute("PRAGMA journal_mode = WAL")
                    with self._transaction(conn):
                        for migrate in _MIGRATIONS:
                            migrate(conn)
                        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                finally:
                    conn.close()
            try:
                os.link(temporary, self.path)
            except FileExistsError:
                pass  # another process created it first: theirs is as good
            except OSError:
                # A file system without hard links: a rename, which could replace a store
                # created in the same instant by another process; both are new and empty.
                if not self.path.exists():
                    os.replace(temporary, self.path)
        except OSError as exc:
            raise StorageError(
                f"Cannot create the session store {self.path}: {exc.strerror or exc}. Fix: "
                "choose a writable data directory."
            ) from exc
        finally:
            for leftover in (temporary, *(Path(f"{temporary}{end}") for end in ("-wal", "-shm"))):
                with contextlib.suppress(OSError):
                    leftover.unlink()

    def _check_version(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise StorageError(
                f"The session store {self.path} was written by a newer autogpt-core (schema "
                f"version {version}; this one reads up to {SCHEMA_VERSION}). Fix: upgrade "
                "autogpt-core, or use another data directory."
            )

    def _connect(self) -> _Connection:
        with self._errors("open"):
            conn = sqlite3.connect(
                self.path,
                timeout=_BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,  # we issue BEGIN/COMMIT ourselves
                check_same_thread=False,  # pooled: used by one thread at a time
                factory=_Connection,
            )
            try:
                # Reading the header here makes a non-database file fail now, not later.
                conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute("PRAGMA foreign_keys = ON")
                conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
                conn.create_function("autogpt_lease_live", 3, lease_live, deterministic=False)
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except BaseException:
                conn.close()
                raise
        return conn

    @contextlib.contextmanager
    def _connection(self) -> Iterator[_Connection]:
        with self._pool_lock:
            if self._closed:
                raise StorageError(f"The session store {self.path} is closed.")
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._connect()
        try:
            yield conn
        finally:
            with self._pool_lock:
                keep = not (self._closed or conn.broken or conn.in_transaction)
                keep = keep and len(self._idle) < _MAX_IDLE_CONNECTIONS
                if keep:
                    self._idle.append(conn)
            if not keep:
                conn.close()

    @contextlib.contextmanager
    def _read(self) -> Iterator[_Connection]:
        with self._errors("read"), self._connection() as conn:
            yield conn

    @contextlib.contextmanager
    def _write(self) -> Iterator[_Connection]:
        with self._errors("write to"), self._write_lock, self._connection() as conn:
            with self._transaction(conn):
                yield conn

    @contextlib.contextmanager
    def _transaction(self, conn: _Connection) -> Iterator[None]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:
                    conn.broken = True
            raise
        conn.execute("COMMIT")

    @contextlib.contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """Turn ``sqlite3`` errors, other than constraint violations, into ``StorageError``."""
        try:
            yield
        except sqlite3.IntegrityError:
            raise
        except sqlite3.DatabaseError as exc:
            text = str(exc)
            if "not a database" in text or "malformed" in text or "corrupt" in text:
                fix = (
                    "move the file aside (e.g. rename it to *.bak) and a new, empty store "
                    "is created next time"
                )
                problem = "is not a readable SQLite database"
            else:
                fix = "check the disk has space and the file and its directory are writable"
                problem = "cannot be used"
            raise StorageError(
                f"Cannot {action} the session store {self.path}: it {problem} ({text}). Fix: {fix}."
            ) from exc
        except sqlite3.Error as exc:
            raise StorageError(f"Cannot {action} the session store {self.path}: {exc}") from exc

    def _apply(self, conn: _Connection, op: _Prepared) -> int | str | None:
        holder = self._held.get(op.session_id) if op.fenced else None
        if holder is not None:
            current = self._lease(conn, op.session_id)
            if current is None or current.holder != holder:
                raise taken_over(op.session_id, current)
        try:
            cursor = conn.execute(op.sql, op.params)
            if op.check_found and cursor.rowcount == 0:
                raise self._not_found(op.session_id)
            for sql, params in op.then:
                conn.execute(sql, params)
            return cursor.lastrowid if op.returns_id else op.value
        except sqlite3.IntegrityError as exc:
            if "FOREIGN KEY" in str(exc):
                raise self._not_found(op.session_id) from exc
            raise StorageError(
                f"Cannot write to the session store {self.path}: {op.what} ({exc})."
            ) from exc

    def _lease(self, conn: _Connection, session_id: str) -> Lease | None:
        row = conn.execute(
            "SELECT session_id, holder, hostname, pid, acquired_at, renewed_at, expires_at"
            " FROM leases WHERE session_id = ?",
            (session_id,),
        ).fetchone()
        return None if row is None else Lease(*row)

    def _footprint(self, conn: _Connection, session_id: str) -> SessionFootprint:
        row = conn.execute(
            f"SELECT s.id, s.goal, {_STATUS}, s.workspace,"
            " (SELECT count(*) FROM cycles WHERE session_id = s.id),"
            " (SELECT count(*) FROM events WHERE session_id = s.id),"
            " (SELECT count(*) FROM artifacts WHERE session_id = s.id)"
            " FROM sessions AS s WHERE s.id = ?",
            (session_id,),
        ).fetchone()
        if row is None:
            raise self._not_found(session_id)
        return SessionFootprint(
            id=row[0],
            goal=str(row[1]),
            status=SessionStatus(row[2]),
            workspace=Path(str(row[3])),
            cycles=row[4],
            events=row[5],
            artifacts=row[6],
        )

    def _check_session(self, conn: _Connection, session_id: str) -> None:
        if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
            raise self._not_found(session_id)

    def _damaged(
        self, where: str, damage: _Damaged, session_id: str = "", *, fix: str = ""
    ) -> StorageError:
        """The error for a row that does not read back: file, row, column and the fix."""
        fix = fix or (
            f"delete the session with 'autogpt sessions delete {session_id}', or restore the "
            "file from a backup"
        )
        return StorageError(
            f"The session store {self.path} is damaged: {where}: {damage}. Fix: {fix}."
        )

    def _not_found(self, session_id: str) -> SessionNotFound:
        return SessionNotFound(
            f"No session {session_id!r} in {self.path}. "
            "Fix: run `autogpt sessions` to list the stored sessions and their ids."
        )


# --- writes, prepared outside the transaction ------------------------------------------


@attrs.frozen
class _Prepared:
    """A write as SQL, with its JSON already encoded so the transaction stays short."""

    session_id: str
    sql: str
    params: tuple[Any, ...]
    what: str
    then: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    check_found: bool = False
    returns_id: bool = False
    value: str | None = None
    # Refused if the session's lease, taken through this store, has passed to another holder.
    fenced: bool = False


def _prepare(op: WriteOp) -> _Prepared:
    now = time.time()
    if isinstance(op, CycleWrite):
        cycle = op.cycle
        for event in op.events:
            if event.session_id != cycle.session_id:
                raise ValueError(
                    f"an event of session {event.session_id!r} cannot be recorded with cycle "
                    f"{cycle.number} of session {cycle.session_id!r}"
                )
        then = [_event_insert(event, now) for event in op.events]
        if op.budget is not None:
            then.append(
                (
                    "UPDATE sessions SET budget = ?, updated_at = ? WHERE id = ?",
                    (_dumps(_budget_json(op.budget)), now, cycle.session_id),
                )
            )
        else:
            then.append(
                ("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, cycle.session_id))
            )
        return _Prepared(
            session_id=cycle.session_id,
            sql="INSERT INTO cycles (session_id, number, plan, command, result, usage, messages,"
            " completed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            params=(
                cycle.session_id,
                cycle.number,
                _dumps(cycle.plan),
                _dumps(cycle.command),
                _dumps(cycle.result),
                _dumps(cycle.usage),
                _dumps([_message_to_json(m) for m in cycle.messages]),
                cycle.completed_at or now,
            ),
            what=f"cycle {cycle.number} of session {cycle.session_id!r} is already recorded",
            then=tuple(then),
            fenced=True,
        )
    if isinstance(op, StatusWrite):
        sets = ["status = ?", "updated_at = ?"]
        values: list[Any] = [_status(op.status).value, now]
        if op.result is not None:
            sets.append("result = ?")
            values.append(op.result)
        if op.budget is not None:
            sets.append("budget = ?")
            values.append(_dumps(_budget_json(op.budget)))
        return _Prepared(
            session_id=op.session_id,
            sql=f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?",
            params=(*values, op.session_id),
            what=f"cannot update session {op.session_id!r}",
            check_found=True,
            fenced=True,
        )
    if isinstance(op, Event):
        sql, params = _event_insert(op, now)
        return _Prepared(
            session_id=op.session_id,
            sql=sql,
            params=params,
            what=f"cannot append an event to session {op.session_id!r}",
            returns_id=True,
            fenced=True,
        )
    if isinstance(op, MemoryItem):
        item_id = op.id or uuid.uuid4().hex
        return _Prepared(
            session_id=op.session_id,
            sql="INSERT INTO memory (id, session_id, kind, text, metadata, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET"
            " session_id = excluded.session_id, kind = excluded.kind, text = excluded.text,"
            " metadata = excluded.metadata, created_at = excluded.created_at",
            params=(
                item_id,
                op.session_id,
                op.kind,
                op.text,
                _dumps(dict(op.metadata)),
                op.created_at or now,
            ),
            what=f"memory item {item_id!r}",
            value=item_id,
        )
    raise TypeError(f"not a store write: {op!r}")


def _event_insert(event: Event, now: float) -> tuple[str, tuple[Any, ...]]:
    return (
        "INSERT INTO events (session_id, cycle, kind, data, ts) VALUES (?, ?, ?, ?, ?)",
        (
            event.session_id,
            event.cycle,
            str(event.kind),
            _dumps(dict(event.data)),
            event.timestamp or now,
        ),
    )


# --- conversions -----------------------------------------------------------------------

# A session stored as running whose lease no longer binds is reported as interrupted:
# nothing runs it (its runtime was killed, or stuck past its lease), and nothing will
# write its status again.
_STATUS = (
    f"CASE WHEN s.status = '{SessionStatus.RUNNING.value}' AND NOT EXISTS (SELECT 1 FROM leases"
    " AS l WHERE l.session_id = s.id AND autogpt_lease_live(l.expires_at, l.hostname, l.pid))"
    f" THEN '{SessionStatus.INTERRUPTED.value}' ELSE s.status END"
)
_SESSION_SELECT = (
    f"SELECT s.id, s.goal, {_STATUS}, s.workspace, s.created_at, s.updated_at, s.config,"
    " s.result, s.budget FROM sessions AS s"
)


class _Damaged(Exception):
    """A column that does not read back as what was stored: ``column`` and what is wrong."""

    def __init__(self, column: str, problem: str) -> None:
        self.column = column
        self.problem = problem
        super().__init__(f"its {column} column {problem}")


def _refuse_constant(name: str) -> JSON:
    raise ValueError(f"{name} is not a JSON number")


def _loads(value: object, column: str) -> JSON:
    """A JSON column's value; ``_Damaged`` naming ``column`` if it does not read back."""
    if not isinstance(value, str | bytes):
        # SQLite keeps whatever type was written: a hand edit may leave a number or a blob.
        raise _Damaged(column, f"holds {type(value).__name__} {_shown(value)}, not JSON text")
    try:
        # NaN and Infinity are refused: the store never writes them (allow_nan=False).
        return json.loads(value, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise _Damaged(
            column, f"is not valid JSON ({exc.msg} at character {exc.pos}: {_shown(value)})"
        ) from None
    except RecursionError:
        raise _Damaged(column, "is JSON nested too deeply to read") from None
    except ValueError as exc:  # a refused constant, or bytes that are not UTF-8
        raise _Damaged(column, f"is not valid JSON ({exc})") from None


def _object(value: object, column: str) -> dict[str, JSON]:
    loaded = _loads(value, column)
    if not isinstance(loaded, dict):
        raise _Damaged(column, f"holds {_shown(value)}, not a JSON object")
    return loaded


def _shown(value: object, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _time_or_zero(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def _session(row: sqlite3.Row | tuple[Any, ...]) -> SessionRecord:
    """A session row as a record; ``_Damaged`` if a column does not read back."""
    for index, column in ((4, "created_at"), (5, "updated_at")):
        if isinstance(row[index], bool) or not isinstance(row[index], int | float):
            raise _Damaged(column, f"holds {_shown(row[index])}, not a time")
    budget = _object(row[8], "budget")
    for name in _BUDGET_NUMBERS:
        value = budget.get(name)
        if value is not None and not _is_amount(value):
            raise _Damaged("budget", f"has {name} {_shown(value)}, not a number >= 0")
    return SessionRecord(
        id=row[0],
        goal=row[1],
        status=SessionStatus(row[2]),
        workspace=Path(row[3]),
        created_at=row[4],
        updated_at=row[5],
        config=_object(row[6], "config"),
        result=row[7],
        budget=budget,
    )


def _is_amount(value: object) -> bool:
    """Whether ``value`` is a finite number >= 0 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value >= 0


def _cycle(row: tuple[Any, ...]) -> CycleRecord:
    """A cycle row as a record; ``_Damaged`` if a column does not read back."""
    raw_messages = _loads(row[6], "messages")
    if not isinstance(raw_messages, list):
        raise _Damaged("messages", f"holds {_shown(row[6])}, not a list of messages")
    messages = []
    for index, raw in enumerate(raw_messages):
        try:
            messages.append(_message_from_json(raw))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise _Damaged(
                "messages", f"has message {index} {_shown(raw)}, which is not a message"
            ) from None
    return CycleRecord(
        session_id=row[0],
        number=row[1],
        plan=_loads(row[2], "plan"),
        command=_loads(row[3], "command"),
        result=_loads(row[4], "result"),
        usage=_loads(row[5], "usage"),
        messages=tuple(messages),
        completed_at=row[7],
    )


def _status(status: SessionStatus | str) -> SessionStatus:
    try:
        return SessionStatus(status)
    except ValueError:
        known = ", ".join(s.value for s in SessionStatus)
        raise ValueError(f"unknown session status {status!r}; use one of: {known}") from None


def _dumps(value: JSON) -> str:
    # allow_nan=False: NaN is not JSON, and the server would send it to clients as is.
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _budget_json(budget: Budget | Mapping[str, JSON]) -> dict[str, JSON]:
    if isinstance(budget, Budget):
        return attrs.asdict(budget)
    return dict(budget)


def _message_to_json(message: Message) -> dict[str, JSON]:
    return {
        "role": message.role.value,
        "content": message.content,
        "tool_calls": [
            {"id": call.id, "name": call.name, "arguments": call.arguments}
            for call in message.tool_calls
        ],
        "tool_call_id": message.tool_call_id,
    }


def _message_from_json(data: Mapping[str, Any]) -> Message:
    """A stored message; ``ValueError`` (or ``KeyError``, ``TypeError``) if it is not one."""
    content = data.get("content", "")
    tool_call_id = data.get("tool_call_id")
    calls = data.get("tool_calls", ())
    if not isinstance(content, str) or not isinstance(tool_call_id, str | None):
        raise ValueError("content must be text and tool_call_id text or null")
    if not isinstance(calls, list | tuple):
        raise ValueError("tool_calls must be a list")
    tool_calls = []
    for call in calls:
        fields = (call["id"], call["name"], call["arguments"])
        if not all(isinstance(field, str) for field in fields):
            raise ValueError("a tool call's id, name and arguments must be text")
        tool_calls.append(ToolCall(*fields))
    return Message(
        role=Role(data["role"]),
        content=content,
        tool_calls=tuple(tool_calls),
        tool_call_id=tool_call_id,
    )


def _match_expression(text: str) -> str | None:
    """An FTS5 query matching any word of ``text``, or ``None`` if it has no words.

    Each word is quoted, so nothing the user typed (quotes, AND, NEAR, ``*``, ``-``,
    column filters) is read as FTS5 syntax.
    """
    words = list(dict.fromkeys(word.lower() for word in _WORD.findall(text)))
    if not words:
        return None
    return " OR ".join(f'"{word}"' for word in words[:_MAX_QUERY_TERMS])


def _scope_and_kinds(query: MemoryQuery, session_id: str) -> tuple[str, tuple[str, ...]]:
    sql, params = _scope(query.scope, session_id)
    if query.kinds:
        sql += f" AND m.kind IN ({', '.join('?' * len(query.kinds))})"
        params = (*params, *query.kinds)
    return sql, params


def _scope(scope: str, session_id: str) -> tuple[str, tuple[str, ...]]:
    if scope == "session":
        return " AND m.session_id = ?", (session_id,)
    if scope == "all":
        return "", ()
    raise ValueError(f"unknown memory scope {scope!r}; use 'session' or 'all'")


def _score(rank: float) -> float:
    """Map FTS5's ``bm25`` (negative, lower is better) to (0, 1), higher is better."""
    relevance = -rank if rank < 0 else 0.0
    if math.isinf(relevance):
        return 1.0
    return relevance / (1.0 + relevance)


# --- the async facade ------------------------------------------------------------------


@attrs.define
class _Batch:
    ops: list[WriteOp] = attrs.field(factory=list)
    outcomes: list[int | str | None | StorageError] = attrs.field(factory=list)
    done: bool = False


class AsyncStore:
    """``Store`` for trio code: every call runs in a worker thread.

    Writes of cycles, events and statuses are *group-committed*: while one batch is being
    written, the writes that arrive queue up and are committed together in the next
    transaction, each atomic on its own (``Store.write_each``). So a thousand sessions
    writing at once cost a handful of commits, not a thousand. A write returns once it is
    committed. If its caller is cancelled while waiting, the write may still be committed
    with the next batch.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._pending = _Batch()
        self._write_lock = trio.Lock()
        self._limiter = trio.CapacityLimiter(1)

    @classmethod
    async def open(cls, path: Path | str) -> AsyncStore:
        """Open (or create) the store at ``path`` in a worker thread."""
        return cls(await trio.to_thread.run_sync(Store, path))

    async def aclose(self) -> None:
        """Commit any writes still queued, then close the store."""
        await self.flush()
        await trio.to_thread.run_sync(self.store.close)

    async def flush(self) -> None:
        """Commit any writes still queued (left by callers that were cancelled)."""
        await self._flush()

    # -- batched writes -----------------------------------------------------------------

    async def record_cycle(
        self,
        cycle: CycleRecord,
        *,
        events: Sequence[Event] = (),
        budget: Budget | Mapping[str, JSON] | None = None,
    ) -> None:
        """``Store.record_cycle``, group-committed."""
        await self._submit(CycleWrite(cycle, tuple(events), budget))

    async def append_event(self, event: Event) -> int:
        """``Store.append_event``, group-committed."""
        event_id = await self._submit(event)
        assert isinstance(event_id, int)
        return event_id

    async def update_session_status(
        self,
        session_id: str,
        status: SessionStatus | str,
        *,
        result: str | None = None,
        budget: Budget | Mapping[str, JSON] | None = None,
    ) -> None:
        """``Store.update_session_status``, group-committed."""
        await self._submit(StatusWrite(session_id, status, result=result, budget=budget))

    async def _submit(self, op: WriteOp) -> int | str | None:
        batch = self._pending
        index = len(batch.ops)
        batch.ops.append(op)
        # trio.Lock is fair: whoever holds it writes the batch that was pending when it got
        # it; the callers behind it find their batch done, or write the next one.
        async with self._write_lock:
            if not batch.done:
                await self._write_batch(batch)
        outcome = batch.outcomes[index]
        if isinstance(outcome, StorageError):
            raise outcome
        return outcome

    async def _write_batch(self, batch: _Batch) -> None:
        if self._pending is batch:
            self._pending = _Batch()
        try:
            # Not cancellable (abandon_on_cancel=False): a batch holds other callers' writes.
            batch.outcomes = await trio.to_thread.run_sync(
                self.store.write_each, batch.ops, limiter=self._limiter
            )
        except StorageError as exc:
            # The whole transaction failed (disk full, file gone): every caller learns why.
            batch.outcomes = [exc] * len(batch.ops)
        finally:
            batch.done = True

    async def _flush(self) -> None:
        async with self._write_lock:
            batch = self._pending
            if batch.ops and not batch.done:
                await self._write_batch(batch)

    # -- everything else, one call per thread -------------------------------------------

    async def create_session(
        self,
        goal: str,
        workspace: Path | str,
        *,
        session_id: str | None = None,
        config: Mapping[str, JSON] | None = None,
    ) -> SessionRecord:
        """``Store.create_session`` in a worker thread."""
        return await trio.to_thread.run_sync(
            lambda: self.store.create_session(goal, workspace, session_id=session_id, config=config)
        )

    async def get_session(self, session_id: str) -> SessionRecord:
        """``Store.get_session`` in a worker thread."""
        return await trio.to_thread.run_sync(self.store.get_session, session_id)

    async def list_sessions(
        self, *, offset: int = 0, limit: int = 50, status: SessionStatus | str | None = None
    ) -> Page[SessionRecord]:
        """``Store.list_sessions`` in a worker thread."""
        return await trio.to_thread.run_sync(
            lambda: self.store.list_sessions(offset=offset, limit=limit, status=status)
        )

    async def resolve_session_id(self, text: str) -> str:
        """``Store.resolve_session_id`` in a worker thread."""
        return await trio.to_thread.run_sync(self.store.resolve_session_id, text)

    async def session_footprint(self, session_id: str) -> SessionFootprint:
        """``Store.session_footprint`` in a worker thread."""
        return await trio.to_thread.run_sync(self.store.session_footprint, session_id)

    async def delete_session(self, session_id: str) -> SessionFootprint:
        """``Store.delete_session`` in a worker thread, after the writes already queued."""
        await self._flush()
        return await trio.to_thread.run_sync(self.store.delete_session, session_id)

    async def acquire_lease(self, session_id: str, holder: Holder, *, expiry: float) -> Lease:
        """``Store.acquire_lease`` in a worker thread."""
        return await trio.to_thread.run_sync(
            lambda: self.store.acquire_lease(session_id, holder, expiry=expiry)
        )

    async def renew_lease(self, lease: Lease, *, expiry: float) -> Lease:
        """``Store.renew_lease`` in a worker thread."""
        return await trio.to_thread.run_sync(lambda: self.store.renew_lease(lease, expiry=expiry))

    async def release_lease(self, lease: Lease) -> None:
        """``Store.release_lease`` in a worker thread."""
        await trio.to_thread.run_sync(self.store.release_lease, lease)

    async def check_held(self, session_id: str) -> None:
        """``Store.check_held`` in a worker thread."""
        await trio.to_thread.run_sync(self.store.check_held, session_id)

    async def get_lease(self, session_id: str) -> Lease | None:
        """``Store.get_lease`` in a worker thread."""
        return await trio.to_thread.run_sync(self.store.get_lease, session_id)

    async def last_completed_cycle(self, session_id: str) -> int:
        """``Store.last_completed_cycle`` in a worker thread."""
        return await trio.to_thread.run_sync(self.store.last_completed_cycle, session_id)

    async def load_cycles(self, session_id: str, *, after: int = 0) -> list[CycleRecord]:
        """``Store.load_cycles`` in a worker thread."""
        return await trio.to_thread.run_sync(
            lambda: self.store.load_cycles(session_id, after=after)
        )

    async def list_events(
        self, session_id: str, *, after_id: int = 0, limit: int = 1000
    ) -> list[StoredEvent]:
        """``Store.list_events`` in a worker thread."""
        return await trio.to_thread.run_sync(
            lambda: self.store.list_events(session_id, after_id=after_id, limit=limit)
        )

    async def add_artifact(
        self,
        session_id: str,
        relative_path: str,
        *,
        agent_created: bool = True,
        cycle: int | None = None,
    ) -> ArtifactRecord:
        """``Store.add_artifact`` in a worker thread."""
        return await trio.to_thread.run_sync(
            lambda: self.store.add_artifact(
                session_id, relative_path, agent_created=agent_created, cycle=cycle
            )
        )

    async def list_artifacts(
        self, session_id: str, *, offset: int = 0, limit: int = 100
    ) -> Page[ArtifactRecord]:
        """``Store.list_artifacts`` in a worker thread."""
        return await trio.to_thread.run_sync(
            lambda: self.store.list_artifacts(session_id, offset=offset, limit=limit)
        )

    async def memory_store(self, item: MemoryItem) -> str:
        """``Store.memory_store``, group-committed."""
        item_id = await self._submit(item)
        assert isinstance(item_id, str)
        return item_id

    async def memory_recall(self, query: MemoryQuery, session_id: str) -> list[MemoryHit]:
        """``Store.memory_recall`` in a worker thread."""
        return await trio.to_thread.run_sync(self.store.memory_recall, query, session_id)

    async def memory_forget(self, query: MemoryQuery, session_id: str) -> int:
        """``Store.memory_forget`` in a worker thread."""
        return await trio.to_thread.run_sync(self.store.memory_forget, query, session_id)
