"""``Store``: the session store (``SessionStore``) in one SQLite file.

The file, its pool and its durability are ``_sqlite_file.py``'s; its schema is
``_migrations.py``'s. A JSON column that does not read back (edited by hand, damaged on
disk) raises ``StorageError`` naming the file, the session and the column;
``list_sessions`` marks such a session (``SessionRecord.damage``) and lists the others.
"""

from __future__ import annotations

import itertools
import sqlite3
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import attrs

from hookspecs import JSON, Event

from .._errors import SessionInUse, SessionNotFound, StorageError
from ._columns import (
    Damaged,
    budget_json,
    cycle_from_row,
    dumps,
    json_object,
    messages_json,
    session_from_row,
    time_or_zero,
)
from ._interface import SessionStore
from ._lease import Fence, Holder, Lease, in_use, lease_live, taken_over
from ._migrations import APPLICATION_ID, MIGRATIONS
from ._records import (
    ArtifactRecord,
    CycleRecord,
    CycleWrite,
    Page,
    SessionFootprint,
    SessionRecord,
    SessionStatus,
    StatusWrite,
    StoredEvent,
    WriteOp,
    WriteOutcome,
    session_status,
)
from ._sqlite_file import Connection, SQLiteFile

# An ambiguous id prefix lists this many of the sessions it matches.
_MAX_CANDIDATES = 10

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
_ARTIFACT_SELECT = (
    "SELECT id, session_id, relative_path, file_name, agent_created, cycle, created_at"
    " FROM artifacts"
)


def _register_functions(conn: sqlite3.Connection) -> None:
    conn.create_function("autogpt_lease_live", 3, lease_live, deterministic=False)


class Store(SessionStore):
    """The session store in the SQLite file ``path`` (created, with its directory, if
    missing; upgraded, if of an older schema).

    Raises ``StorageError`` naming the file if it is not a readable SQLite database, is
    another application's, or was written by a newer autogpt-core. Safe to share between
    threads; ``close()`` it when done, or use it as a context manager.
    """

    def __init__(self, path: Path | str) -> None:
        self._db = SQLiteFile(
            path,
            what="session store",
            migrations=MIGRATIONS,
            migrations_table="store_migrations",
            application_id=APPLICATION_ID,
            on_connect=_register_functions,
        )
        # The leases taken through this store and not yet released: writes for those
        # sessions are refused once another holder has the lease.
        self._held: dict[str, Fence] = {}
        self._fence_lock = threading.Lock()

    @property
    def path(self) -> Path:
        """The database file."""
        return self._db.path

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

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
        now = time.time() if created_at is None else created_at
        record = SessionRecord(
            id=session_id or str(uuid.uuid4()),
            goal=goal,
            status=session_status(status),
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
            dumps(record.config),
        )
        try:
            with self._db.write() as conn:
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
        with self._db.read() as conn:
            row = conn.execute(f"{_SESSION_SELECT} WHERE s.id = ?", (session_id,)).fetchone()
        if row is None:
            raise self._not_found(session_id)
        try:
            return session_from_row(row)
        except Damaged as exc:
            raise self._damaged(f"session {session_id}", exc, session_id) from None

    def resolve_session_id(self, text: str) -> str:
        if not text:
            raise SessionNotFound(
                f"An empty session id names no session in {self.path}. Fix: give an id, or "
                "its first characters, from `autogpt sessions`."
            )
        with self._db.read() as conn:
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
        offset, limit = max(offset, 0), max(limit, 0)
        where, params = (
            ("", ())
            if status is None
            else (f" WHERE {_STATUS} = ?", (session_status(status).value,))
        )
        with self._db.read() as conn:
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
            return session_from_row(row)
        except Damaged as exc:
            damage = str(self._damaged(f"session {row[0]}", exc, str(row[0])))
        return SessionRecord(
            id=str(row[0]),
            goal=str(row[1]),
            status=SessionStatus(row[2]),
            workspace=Path(str(row[3])),
            created_at=time_or_zero(row[4]),
            updated_at=time_or_zero(row[5]),
            result=str(row[7]),
            damage=damage,
        )

    def session_footprint(self, session_id: str) -> SessionFootprint:
        with self._db.read() as conn:
            return self._footprint(conn, session_id)

    def delete_session(self, session_id: str) -> SessionFootprint:
        with self._db.write() as conn:
            footprint = self._footprint(conn, session_id)
            current = self._lease(conn, session_id)
            if (
                current is not None
                and current.live()
                and current.holder != self._holder(session_id)
            ):
                raise in_use(current)
            for table in ("cycles", "events", "artifacts", "leases"):
                conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,))
            conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        self._held.pop(session_id, None)
        return footprint

    # -- cycles and events --------------------------------------------------------------

    def load_cycles(self, session_id: str, *, after: int = 0) -> list[CycleRecord]:
        with self._db.read() as conn:
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
                cycles.append(cycle_from_row(row))
            except Damaged as exc:
                where = f"cycle {row[1]} of session {session_id}"
                raise self._damaged(where, exc, session_id) from None
        return cycles

    def last_completed_cycle(self, session_id: str) -> int:
        with self._db.read() as conn:
            row = conn.execute(
                "SELECT (SELECT max(number) FROM cycles WHERE session_id = ?),"
                " EXISTS (SELECT 1 FROM sessions WHERE id = ?)",
                (session_id, session_id),
            ).fetchone()
        if not row[1]:
            raise self._not_found(session_id)
        return int(row[0] or 0)

    def list_events(
        self, session_id: str, *, after_id: int = 0, limit: int = 1000
    ) -> list[StoredEvent]:
        with self._db.read() as conn:
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
                data = json_object(r[4], "data")
            except Damaged as exc:
                raise self._damaged(
                    f"event {r[0]} of session {session_id}", exc, session_id
                ) from None
            events.append(StoredEvent(r[0], r[1], r[2], r[3], data, r[5]))
        return events

    # -- batches ------------------------------------------------------------------------

    def write_many(self, ops: Sequence[WriteOp]) -> list[WriteOutcome]:
        prepared = [_prepare(op) for op in ops]
        with self._db.write() as conn:
            return [self._apply(conn, op) for op in prepared]

    def write_each(self, ops: Sequence[WriteOp]) -> list[WriteOutcome | StorageError]:
        outcomes: list[WriteOutcome | StorageError] = []
        prepared: list[_Prepared | None] = []
        for op in ops:
            try:
                prepared.append(_prepare(op))
                outcomes.append(None)
            except (TypeError, ValueError) as exc:
                prepared.append(None)
                outcomes.append(StorageError(f"Cannot store {type(op).__name__}: {exc}"))
        with self._db.write() as conn:
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
            with self._db.write() as conn:
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
        offset, limit = max(offset, 0), max(limit, 0)
        with self._db.read() as conn:
            self._check_session(conn, session_id)
            total = conn.execute(
                "SELECT count(*) FROM artifacts WHERE session_id = ?", (session_id,)
            ).fetchone()[0]
            rows = conn.execute(
                f"{_ARTIFACT_SELECT} WHERE session_id = ?"
                " ORDER BY created_at, rowid LIMIT ? OFFSET ?",
                (session_id, limit, offset),
            ).fetchall()
        return Page(tuple(_artifact(row) for row in rows), total, offset, limit)

    def get_artifact(self, session_id: str, artifact_id: str) -> ArtifactRecord | None:
        with self._db.read() as conn:
            row = conn.execute(
                f"{_ARTIFACT_SELECT} WHERE id = ? AND session_id = ?", (artifact_id, session_id)
            ).fetchone()
            if row is None:
                self._check_session(conn, session_id)
                return None
        return _artifact(row)

    # -- leases -------------------------------------------------------------------------

    def acquire_lease(
        self, session_id: str, holder: Holder, *, expiry: float, now: float | None = None
    ) -> Lease:
        now = time.time() if now is None else now
        lease = Lease(session_id, holder.id, holder.hostname, holder.pid, now, now, now + expiry)
        with self._db.write() as conn:
            current = self._lease(conn, session_id)
            if current is not None and current.live(now):
                raise in_use(current)
            conn.execute(
                "INSERT OR REPLACE INTO leases (session_id, holder, hostname, pid, acquired_at,"
                " renewed_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                attrs.astuple(lease),
            )
        self._held[session_id] = Fence(holder.id, lease.expires_at)
        return lease

    def renew_lease(self, lease: Lease, *, expiry: float, now: float | None = None) -> Lease:
        (renewed,) = self.renew_leases([lease], expiry=expiry, now=now)
        if isinstance(renewed, SessionInUse):
            raise renewed
        return renewed

    def renew_leases(
        self, leases: Sequence[Lease], *, expiry: float, now: float | None = None
    ) -> list[Lease | SessionInUse]:
        now = time.time() if now is None else now
        results: list[Lease | SessionInUse] = []
        with self._db.write() as conn:
            for lease in leases:
                renewed = conn.execute(
                    "UPDATE leases SET renewed_at = ?, expires_at = ?"
                    " WHERE session_id = ? AND holder = ?",
                    (now, now + expiry, lease.session_id, lease.holder),
                ).rowcount
                if renewed:
                    results.append(attrs.evolve(lease, renewed_at=now, expires_at=now + expiry))
                else:
                    current = self._lease(conn, lease.session_id)
                    results.append(taken_over(lease.session_id, current))
        # Only once committed: until then, the new expiry binds nobody. Under the lock, so
        # that a lease released meanwhile (in another thread) does not get its fence back.
        with self._fence_lock:
            for result in results:
                if isinstance(result, Lease) and self._holder(result.session_id) == result.holder:
                    self._held[result.session_id] = Fence(result.holder, result.expires_at)
        return results

    def release_lease(self, lease: Lease) -> None:
        try:
            with self._db.write() as conn:
                conn.execute(
                    "DELETE FROM leases WHERE session_id = ? AND holder = ?",
                    (lease.session_id, lease.holder),
                )
        finally:
            with self._fence_lock:
                if self._holder(lease.session_id) == lease.holder:
                    del self._held[lease.session_id]

    def get_lease(self, session_id: str) -> Lease | None:
        with self._db.read() as conn:
            return self._lease(conn, session_id)

    def check_held(self, session_id: str, *, now: float | None = None) -> None:
        fence = self._held.get(session_id)
        if fence is None or fence.confirmed(now):
            return
        current = self.get_lease(session_id)
        if current is None or current.holder != fence.holder:
            raise taken_over(session_id, current)

    def lease_confirmed(self, session_id: str, *, now: float | None = None) -> bool:
        fence = self._held.get(session_id)
        return fence is not None and fence.confirmed(now)

    # -- internals ----------------------------------------------------------------------

    def _holder(self, session_id: str) -> str | None:
        fence = self._held.get(session_id)
        return None if fence is None else fence.holder

    def _apply(self, conn: Connection, op: _Prepared) -> WriteOutcome:
        # A write is checked against the stored lease in its own transaction, always: it
        # costs one indexed read there, and holds even if this host's clock jumped.
        holder = self._holder(op.session_id)
        if holder is not None:
            current = self._lease(conn, op.session_id)
            if current is None or current.holder != holder:
                raise taken_over(op.session_id, current)
        try:
            for sql, params in op.before:
                conn.execute(sql, params)
            cursor = conn.execute(op.sql, op.params)
            if op.check_found and cursor.rowcount == 0:
                raise self._not_found(op.session_id)
            for sql, params in op.then:
                conn.execute(sql, params)
            return cursor.lastrowid if op.returns_id else None
        except sqlite3.IntegrityError as exc:
            if "FOREIGN KEY" in str(exc):
                raise self._not_found(op.session_id) from exc
            raise StorageError(
                f"Cannot write to the session store {self.path}: {op.what} ({exc})."
            ) from exc

    def _lease(self, conn: Connection, session_id: str) -> Lease | None:
        row = conn.execute(
            "SELECT session_id, holder, hostname, pid, acquired_at, renewed_at, expires_at"
            " FROM leases WHERE session_id = ?",
            (session_id,),
        ).fetchone()
        return None if row is None else Lease(*row)

    def _footprint(self, conn: Connection, session_id: str) -> SessionFootprint:
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

    def _check_session(self, conn: Connection, session_id: str) -> None:
        if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
            raise self._not_found(session_id)

    def _damaged(self, where: str, damage: Damaged, session_id: str) -> StorageError:
        """The error for a row that does not read back: file, row, column and the fix."""
        return StorageError(
            f"The session store {self.path} is damaged: {where}: {damage}. Fix: delete the "
            f"session with 'autogpt sessions delete {session_id}', or restore the file from "
            "a backup."
        )

    def _not_found(self, session_id: str) -> SessionNotFound:
        return SessionNotFound(
            f"No session {session_id!r} in {self.path}. "
            "Fix: run `autogpt sessions` to list the stored sessions and their ids."
        )


def _artifact(row: tuple[Any, ...]) -> ArtifactRecord:
    return ArtifactRecord(row[0], row[1], row[2], row[3], bool(row[4]), row[5], row[6])


# --- writes, prepared outside the transaction ------------------------------------------


@attrs.frozen
class _Prepared:
    """A write as SQL, with its JSON already encoded so the transaction stays short.

    Each is refused if the session's lease, taken through this store, has passed to
    another holder.
    """

    session_id: str
    sql: str
    params: tuple[Any, ...]
    what: str
    then: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    #: Run first: a provisional record of the same cycle goes (``CycleRecord.provisional``).
    before: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    check_found: bool = False
    returns_id: bool = False


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
                    (dumps(budget_json(op.budget)), now, cycle.session_id),
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
                dumps(cycle.plan),
                dumps(cycle.command),
                dumps(cycle.result),
                dumps(cycle.usage),
                messages_json(cycle.messages),
                cycle.completed_at or now,
            ),
            what=f"cycle {cycle.number} of session {cycle.session_id!r} is already recorded",
            then=tuple(then),
            before=(
                (
                    "DELETE FROM cycles WHERE session_id = ? AND number = ?"
                    " AND json_extract(result, '$.provisional') = 1",
                    (cycle.session_id, cycle.number),
                ),
            ),
        )
    if isinstance(op, StatusWrite):
        sets = ["status = ?", "updated_at = ?"]
        values: list[Any] = [session_status(op.status).value, now]
        if op.result is not None:
            sets.append("result = ?")
            values.append(op.result)
        if op.budget is not None:
            sets.append("budget = ?")
            values.append(dumps(budget_json(op.budget)))
        return _Prepared(
            session_id=op.session_id,
            sql=f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?",
            params=(*values, op.session_id),
            what=f"cannot update session {op.session_id!r}",
            check_found=True,
        )
    if isinstance(op, Event):
        sql, params = _event_insert(op, now)
        return _Prepared(
            session_id=op.session_id,
            sql=sql,
            params=params,
            what=f"cannot append an event to session {op.session_id!r}",
            returns_id=True,
        )
    raise TypeError(f"not a store write: {op!r}")


def _event_insert(event: Event, now: float) -> tuple[str, tuple[Any, ...]]:
    return (
        "INSERT INTO events (session_id, cycle, kind, data, ts) VALUES (?, ?, ?, ?, ?)",
        (
            event.session_id,
            event.cycle,
            str(event.kind),
            dumps(dict(event.data)),
            event.timestamp or now,
        ),
    )
