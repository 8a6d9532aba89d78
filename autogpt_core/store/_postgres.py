"""``PostgresStore``: the session store (``SessionStore``) in a PostgreSQL database, so that
several processes (servers, CLIs, on one host or several) share one set of sessions.

Its semantics are the SQLite store's (``_sqlite.py``), sentence for sentence; what differs
is how they are had:

- Connections come from a ``psycopg_pool.ConnectionPool`` (``min_size`` 1, ``max_size``
  10 by default): every call borrows one for one transaction. Ten, not SQLite's forty:
  each is a server process, and several of our processes share the server's
  ``max_connections`` (100 by default); a call waiting for a connection waits at most
  ``timeout`` seconds, then fails with ``StorageError``.
- Writes of cycles, events and statuses (``write_many``, ``write_each``) and deletions
  take a transaction-level advisory lock (``WRITE_LOCK``): they are serialised across
  processes as SQLite serialises them, so event ids are committed in the order they are
  assigned (a reader paging with the last id it saw never skips an event committed
  later with a smaller id) and two batches never deadlock on session rows. Group commit
  (``AsyncStore``) keeps that one lock cheap.
- A lease is a row of ``leases``: taken with ``INSERT ... ON CONFLICT DO NOTHING``, or
  over a lapsed one under ``SELECT ... FOR UPDATE``, so of two processes acquiring at
  once one gets it. A write checks the session's lease under ``FOR SHARE``: a takeover
  cannot commit between that check and the write's commit.
- "Its holder's process is known gone" is asked of this host only (``holder_gone``): a
  read first finds the pids of this host's unexpired leases, and passes those of ended
  processes to the query that decides which running sessions read as interrupted.
- The schema is ``_postgres_migrations.py``'s, applied on opening under an advisory lock;
  JSON is in ``json`` columns (why not ``jsonb``: see there), read as text and checked by
  ``_columns.py`` as SQLite's are.

The URL is a libpq connection string (``postgresql://user@host:5432/db``, or
``host=... dbname=...``); a password belongs in ``PGPASSWORD`` or ``~/.pgpass``, not in the
URL (messages show the URL without it, in any case).
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import attrs
import psycopg
import psycopg.errors
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.string import TextLoader
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

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
from ._lease import Fence, Holder, Lease, holder_gone, in_use, lease_live, taken_over
from ._migrations import APPLICATION_ID, NewerSchema
from ._postgres_migrations import POSTGRES_MIGRATIONS, NotAStore, migrate_postgres
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

Connection = psycopg.Connection[tuple[Any, ...]]

WRITE_LOCK = (APPLICATION_ID << 32) | 2
"""The advisory lock batches of writes and deletions take: "AGSS", 2."""

MIGRATIONS_TABLE = "store_migrations"

NOTIFY_CHANNEL = "autogpt_sessions"
"""The channel a batch of writes notifies, once per session it wrote to (``listen``)."""
RELAY_CHANNEL = "autogpt_relay"
"""The channel servers on one store send each other requests and answers on (``notify``)."""
MAX_NOTICE_BYTES = 7900

# An ambiguous id prefix lists this many of the sessions it matches.
_MAX_CANDIDATES = 10
_CONNECT_TIMEOUT = 10
_HOSTNAME = socket.gethostname()
# How often acquire_lease retries a lease released between its insert and its read.
_ACQUIRE_ATTEMPTS = 10

# A session stored as running whose lease no longer binds reads as interrupted. A lease
# binds until expires_at, unless its holder is a process of this host known to be gone.
_STATUS = (
    f"CASE WHEN s.status = '{SessionStatus.RUNNING.value}' AND NOT EXISTS (SELECT 1 FROM leases"
    " AS l WHERE l.session_id = s.id AND l.expires_at > %(now)s"
    " AND NOT (l.hostname = %(host)s AND l.pid = ANY(%(dead)s)))"
    f" THEN '{SessionStatus.INTERRUPTED.value}' ELSE s.status END"
)
_SESSION_COLUMNS = (
    "s.id, s.goal, s.status, s.workspace, s.created_at, s.updated_at, s.config, s.result,"
    " s.budget, l.expires_at, l.hostname, l.pid"
)
_LEASE_JOIN = "LEFT JOIN leases AS l ON l.session_id = s.id"
_ARTIFACT_SELECT = (
    "SELECT id, session_id, relative_path, file_name, agent_created, cycle, created_at"
    " FROM artifacts"
)
_LEASE_SELECT = (
    "SELECT session_id, holder, hostname, pid, acquired_at, renewed_at, expires_at"
    " FROM leases WHERE session_id = %s"
)


def shown_url(url: str) -> str:
    """``url`` without its password, for messages: ``postgresql://user@host:port/db``."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "postgresql://(an unreadable URL)"
    user = f"{parts['user']}@" if parts.get("user") else ""
    host = str(parts.get("host") or "")
    port = f":{parts['port']}" if parts.get("port") else ""
    dbname = f"/{parts['dbname']}" if parts.get("dbname") else ""
    return f"postgresql://{user}{host}{port}{dbname}"


def _said(exc: BaseException) -> str:
    """What the driver or the server said, on one line (libpq's messages span several)."""
    return " ".join(str(exc).split())


def _connect_defaults(url: str) -> dict[str, Any]:
    """Connection parameters the URL may set, with our defaults where it does not."""
    given = conninfo_to_dict(url)
    defaults = {"connect_timeout": _CONNECT_TIMEOUT, "application_name": "autogpt"}
    return {key: value for key, value in defaults.items() if key not in given}


def _notify(conn: Connection, ops: Sequence[WriteOp]) -> None:
    """Tell the listeners of ``NOTIFY_CHANNEL`` which sessions ``ops`` wrote to; delivered
    when the transaction commits, never if it rolls back."""
    sessions = sorted({_session_of(op) for op in ops})
    if sessions:
        conn.execute(
            "SELECT pg_notify(%s, s) FROM unnest(%s::text[]) AS s", (NOTIFY_CHANNEL, sessions)
        )


def _session_of(op: WriteOp) -> str:
    return op.cycle.session_id if isinstance(op, CycleWrite) else op.session_id


def _configure(conn: Connection) -> None:
    # json columns read back as their text: _columns.py checks it as SQLite's is.
    conn.adapters.register_loader("json", TextLoader)


class PostgresStore(SessionStore):
    """The session store in the PostgreSQL database ``url`` (its tables created, or
    upgraded, on opening).

    Raises ``StorageError`` saying what is wrong and the fix if the server cannot be
    reached or refuses the connection, the database holds another application's tables
    of the same names, or a newer autogpt-core wrote it. Safe to share between threads;
    ``close()`` it when done, or use it as a context manager.
    """

    def __init__(
        self, url: str, *, min_size: int = 1, max_size: int = 10, timeout: float = 30.0
    ) -> None:
        self.url = url
        self.name = shown_url(url)
        self._closed = False
        self._migrate()
        self._pool: ConnectionPool[Connection] = ConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            configure=_configure,
            kwargs=_connect_defaults(url),
            name="autogpt-store",
            open=True,
        )
        # The leases taken through this store and not yet released: writes for those
        # sessions are refused once another holder has the lease.
        self._held: dict[str, Fence] = {}
        self._fence_lock = threading.Lock()

    def close(self) -> None:
        self._closed = True
        self._pool.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __repr__(self) -> str:
        return f"PostgresStore({self.name!r})"

    # -- the database -------------------------------------------------------------------

    def _migrate(self) -> None:
        with self._errors("open"):
            try:
                conn = psycopg.connect(self.url, **_connect_defaults(self.url))
            except psycopg.OperationalError as exc:
                raise StorageError(
                    f"Cannot connect to the session store {self.name} ({_said(exc)}). "
                    "Fix: check that the PostgreSQL server runs and "
                    "is reachable, and that the URL's host, port, database and user are "
                    "right (a password goes in PGPASSWORD or ~/.pgpass); create the "
                    "database first if it does not exist (createdb)."
                ) from exc
            except psycopg.ProgrammingError as exc:
                raise StorageError(
                    f"The session store URL is not a PostgreSQL connection string ({_said(exc)}). "
                    "Fix: write it like postgresql://user@host:5432/dbname."
                ) from exc
            with conn:
                try:
                    with conn.transaction():
                        migrate_postgres(conn, POSTGRES_MIGRATIONS, table=MIGRATIONS_TABLE)
                except NewerSchema as exc:
                    raise StorageError(
                        f"The session store {self.name} was written by a newer autogpt-core "
                        f"(schema version {exc.version}; this one reads up to "
                        f"{len(POSTGRES_MIGRATIONS)}). Fix: upgrade autogpt-core, or use "
                        "another database."
                    ) from None
                except NotAStore:
                    raise StorageError(
                        f"Cannot open the session store {self.name}: the database has a "
                        f"'sessions' table but no {MIGRATIONS_TABLE} table: it is another "
                        "application's. Fix: give an empty database of its own to the "
                        "session store (createdb), or another schema (options=-csearch_path=...)."
                    ) from None

    @contextlib.contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """Turn ``psycopg`` errors, other than constraint violations, into ``StorageError``."""
        try:
            yield
        except psycopg.IntegrityError:
            raise
        except PoolClosed:
            raise self._closed_error() from None
        except PoolTimeout as exc:
            raise StorageError(
                f"Cannot {action} the session store {self.name}: no connection to it within "
                f"{self._pool.timeout:g} seconds ({_said(exc)}). Fix: check that the PostgreSQL "
                "server runs and accepts connections (max_connections)."
            ) from exc
        except psycopg.OperationalError as exc:
            raise StorageError(
                f"Cannot {action} the session store {self.name} ({_said(exc)}). Fix: "
                "check that the PostgreSQL server runs and is reachable."
            ) from exc
        except psycopg.DataError as exc:
            raise StorageError(
                f"Cannot {action} the session store {self.name}: a value cannot be stored "
                f"({_said(exc)})."
            ) from exc
        except psycopg.Error as exc:
            raise StorageError(
                f"Cannot {action} the session store {self.name} ({_said(exc)})."
            ) from exc

    def _closed_error(self) -> StorageError:
        return StorageError(f"The session store {self.name} is closed.")

    @contextlib.contextmanager
    def _read(self) -> Iterator[Connection]:
        """A connection in a transaction of its own, for reading."""
        with self._errors("read"), self._connection() as conn:
            yield conn

    @contextlib.contextmanager
    def _write(self, *, serialised: bool = False) -> Iterator[Connection]:
        """A connection in a transaction, committed when the block ends, rolled back if it
        raises; ``serialised``: holding ``WRITE_LOCK`` until then."""
        with self._errors("write to"), self._connection() as conn:
            if serialised:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
            yield conn

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Connection]:
        if self._closed:
            raise self._closed_error()
        # The pool's block is a transaction: committed on exit, rolled back on an error.
        with self._pool.connection() as conn:
            yield conn

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
            with self._write() as conn:
                conn.execute(
                    "INSERT INTO sessions (id, goal, status, created_at, updated_at, workspace,"
                    " config) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    params,
                )
        except psycopg.errors.UniqueViolation as exc:
            raise StorageError(
                f"A session with id {record.id!r} already exists in {self.name}. "
                "Fix: resume it, or choose another id."
            ) from exc
        return record

    def get_session(self, session_id: str) -> SessionRecord:
        with self._read() as conn:
            row = conn.execute(
                f"SELECT {_SESSION_COLUMNS} FROM sessions AS s {_LEASE_JOIN} WHERE s.id = %s",
                (session_id,),
            ).fetchone()
        if row is None:
            raise self._not_found(session_id)
        try:
            return session_from_row(_with_status(row))
        except Damaged as exc:
            raise self._damaged(f"session {session_id}", exc, session_id) from None

    def resolve_session_id(self, text: str) -> str:
        if not text:
            raise SessionNotFound(
                f"An empty session id names no session in {self.name}. Fix: give an id, or "
                "its first characters, from `autogpt sessions`."
            )
        with self._read() as conn:
            # The ids starting with text sort together (COLLATE "C"), from text itself on.
            rows = conn.execute(
                "SELECT id FROM sessions WHERE id >= %s ORDER BY id LIMIT %s",
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
            f"Session id {text!r} is ambiguous: {count} sessions in {self.name} have ids "
            f"starting with it ({', '.join(matches[:_MAX_CANDIDATES])}). Fix: give more of "
            "the id; `autogpt sessions` lists them."
        )

    def list_sessions(
        self, *, offset: int = 0, limit: int = 50, status: SessionStatus | str | None = None
    ) -> Page[SessionRecord]:
        offset, limit = max(offset, 0), max(limit, 0)
        wanted = None if status is None else session_status(status).value
        with self._read() as conn:
            params: dict[str, Any] = {
                **self._liveness(conn),
                "wanted": wanted,
                "limit": limit,
                "offset": offset,
            }
            where = "" if wanted is None else f" WHERE {_STATUS} = %(wanted)s"
            count = conn.execute(f"SELECT count(*) FROM sessions AS s{where}", params).fetchone()
            rows = conn.execute(
                f"SELECT s.id, s.goal, {_STATUS}, s.workspace, s.created_at, s.updated_at,"
                f" s.config, s.result, s.budget FROM sessions AS s{where}"
                " ORDER BY s.created_at DESC, s.seq DESC LIMIT %(limit)s OFFSET %(offset)s",
                params,
            ).fetchall()
        total = int(count[0]) if count is not None else 0
        return Page(tuple(self._listed(row) for row in rows), total, offset, limit)

    def _liveness(self, conn: Connection) -> dict[str, Any]:
        """The parameters of ``_STATUS``: now, this host, and the pids of this host's
        unexpired leases whose processes are gone."""
        now = time.time()
        pids = conn.execute(
            "SELECT DISTINCT pid FROM leases WHERE hostname = %s AND expires_at > %s",
            (_HOSTNAME, now),
        ).fetchall()
        dead = [pid for (pid,) in pids if holder_gone(_HOSTNAME, pid)]
        return {"now": now, "host": _HOSTNAME, "dead": dead}

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
        with self._read() as conn:
            return self._footprint(conn, session_id)

    def delete_session(self, session_id: str) -> SessionFootprint:
        with self._write(serialised=True) as conn:
            footprint = self._footprint(conn, session_id)
            current = self._lease(conn, session_id, lock=" FOR UPDATE")
            if (
                current is not None
                and current.live()
                and current.holder != self._holder(session_id)
            ):
                raise in_use(current)
            for table in ("cycles", "events", "artifacts", "leases"):
                conn.execute(f"DELETE FROM {table} WHERE session_id = %s", (session_id,))
            conn.execute("DELETE FROM sessions WHERE id = %s", (session_id,))
        self._held.pop(session_id, None)
        return footprint

    # -- cycles and events --------------------------------------------------------------

    def load_cycles(self, session_id: str, *, after: int = 0) -> list[CycleRecord]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT session_id, number, plan, command, result, usage, messages, completed_at"
                " FROM cycles WHERE session_id = %s AND number > %s ORDER BY number",
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
        with self._read() as conn:
            row = conn.execute(
                "SELECT (SELECT max(number) FROM cycles WHERE session_id = %s),"
                " EXISTS (SELECT 1 FROM sessions WHERE id = %s)",
                (session_id, session_id),
            ).fetchone()
        if row is None or not row[1]:
            raise self._not_found(session_id)
        return int(row[0] or 0)

    def list_events(
        self, session_id: str, *, after_id: int = 0, limit: int = 1000
    ) -> list[StoredEvent]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT id, session_id, cycle, kind, data, ts FROM events"
                " WHERE session_id = %s AND id > %s ORDER BY id LIMIT %s",
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
        with self._write(serialised=True) as conn:
            outcomes = [self._apply(conn, op) for op in prepared]
            _notify(conn, ops)
            return outcomes

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
        with self._write(serialised=True) as conn:
            for index, write in enumerate(prepared):
                if write is None:
                    continue
                try:
                    # A savepoint per op: a failing one is rolled back alone.
                    with conn.transaction():
                        outcomes[index] = self._apply(conn, write)
                except StorageError as exc:
                    outcomes[index] = exc
            _notify(
                conn,
                [
                    op
                    for op, outcome in zip(ops, outcomes, strict=True)
                    if not isinstance(outcome, StorageError)
                ],
            )
        return outcomes

    # -- notifications ------------------------------------------------------------------

    def listen(
        self,
        on_change: Callable[[str], None],
        stop: threading.Event,
        *,
        on_ready: Callable[[], None] | None = None,
        on_relay: Callable[[str], None] | None = None,
        poll: float = 0.5,
    ) -> None:
        """Call ``on_change(session_id)`` whenever any process commits writes to a
        session (cycles, events, statuses) or ``notify``s it, until ``stop`` is set; blocks
        (run it in a thread of its own). ``on_relay(payload)`` gets the messages servers
        send each other on ``RELAY_CHANNEL``. ``on_ready`` is called once listening,
        before any report: what was committed before it may have been missed. Raises
        ``StorageError`` when the connection fails; call it again to listen again.
        """
        with self._errors("listen to"):
            conn = psycopg.connect(self.url, autocommit=True, **_connect_defaults(self.url))
            with conn:
                conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                if on_relay is not None:
                    conn.execute(f"LISTEN {RELAY_CHANNEL}")
                if on_ready is not None:
                    on_ready()
                while not stop.is_set():
                    for notice in conn.notifies(timeout=poll):
                        if notice.channel == RELAY_CHANNEL and on_relay is not None:
                            on_relay(notice.payload)
                        else:
                            on_change(notice.payload)
                        if stop.is_set():
                            break

    def notify(self, payload: str, *, relay: bool = False) -> None:
        """Send ``payload`` to every listener: a session id on ``NOTIFY_CHANNEL`` (its
        streams look again), or a message between servers on ``RELAY_CHANNEL``. At most
        ``MAX_NOTICE_BYTES`` bytes (PostgreSQL's limit is 8000)."""
        if len(payload.encode("utf-8")) > MAX_NOTICE_BYTES:
            raise StorageError(f"a notice of {len(payload)} characters is too long to send")
        channel = RELAY_CHANNEL if relay else NOTIFY_CHANNEL
        with self._errors("notify"), self._connection() as conn:
            conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))

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
            with self._write() as conn:
                conn.execute(
                    "INSERT INTO artifacts (id, session_id, relative_path, file_name,"
                    " agent_created, cycle, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    attrs.astuple(record),
                )
        except psycopg.errors.ForeignKeyViolation as exc:
            raise self._not_found(session_id) from exc
        except psycopg.errors.UniqueViolation as exc:
            raise StorageError(
                f"An artifact with id {record.id!r} already exists in {self.name}. "
                "Fix: leave artifact_id empty to get a new one."
            ) from exc
        return record

    def list_artifacts(
        self, session_id: str, *, offset: int = 0, limit: int = 100
    ) -> Page[ArtifactRecord]:
        offset, limit = max(offset, 0), max(limit, 0)
        with self._read() as conn:
            self._check_session(conn, session_id)
            count = conn.execute(
                "SELECT count(*) FROM artifacts WHERE session_id = %s", (session_id,)
            ).fetchone()
            rows = conn.execute(
                f"{_ARTIFACT_SELECT} WHERE session_id = %s"
                " ORDER BY created_at, seq LIMIT %s OFFSET %s",
                (session_id, limit, offset),
            ).fetchall()
        total = int(count[0]) if count is not None else 0
        return Page(tuple(_artifact(row) for row in rows), total, offset, limit)

    def get_artifact(self, session_id: str, artifact_id: str) -> ArtifactRecord | None:
        with self._read() as conn:
            row = conn.execute(
                f"{_ARTIFACT_SELECT} WHERE id = %s AND session_id = %s",
                (artifact_id, session_id),
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
        values = attrs.astuple(lease)
        with self._write() as conn:
            for _ in range(_ACQUIRE_ATTEMPTS):
                inserted = conn.execute(
                    "INSERT INTO leases (session_id, holder, hostname, pid, acquired_at,"
                    " renewed_at, expires_at) VALUES (%s, %s, %s, %s, %s, %s, %s)"
                    " ON CONFLICT (session_id) DO NOTHING",
                    values,
                ).rowcount
                if inserted:
                    break
                # Someone's lease is there: locked until we commit, so nobody else takes
                # it over meanwhile.
                current = self._lease(conn, session_id, lock=" FOR UPDATE")
                if current is None:
                    continue  # released since the insert: insert again
                if current.live(now):
                    raise in_use(current)
                conn.execute(
                    "UPDATE leases SET holder = %s, hostname = %s, pid = %s, acquired_at = %s,"
                    " renewed_at = %s, expires_at = %s WHERE session_id = %s",
                    (*values[1:], session_id),
                )
                break
            else:
                raise StorageError(
                    f"Cannot take the lease of session {session_id} in {self.name}: it was "
                    f"taken and released {_ACQUIRE_ATTEMPTS} times meanwhile. Fix: try again."
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
        # Serialised with the batched writes: they share-lock the lease rows of their
        # sessions, in their own order, while this updates several; unserialised, the two
        # could each wait for a row the other holds (a deadlock PostgreSQL breaks by failing
        # one of them).
        with self._write(serialised=True) as conn:
            for lease in leases:
                renewed = conn.execute(
                    "UPDATE leases SET renewed_at = %s, expires_at = %s"
                    " WHERE session_id = %s AND holder = %s",
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
            with self._write() as conn:
                conn.execute(
                    "DELETE FROM leases WHERE session_id = %s AND holder = %s",
                    (lease.session_id, lease.holder),
                )
        finally:
            with self._fence_lock:
                if self._holder(lease.session_id) == lease.holder:
                    del self._held[lease.session_id]

    def get_lease(self, session_id: str) -> Lease | None:
        with self._read() as conn:
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
        # A write is checked against the stored lease in its own transaction, always. FOR
        # SHARE: a takeover (which updates the row) waits for this transaction to end, or,
        # if it came first, is what the check reads.
        holder = self._holder(op.session_id)
        if holder is not None:
            current = self._lease(conn, op.session_id, lock=" FOR SHARE")
            if current is None or current.holder != holder:
                raise taken_over(op.session_id, current)
        try:
            for sql, params in op.before:
                conn.execute(sql, params)
            cursor = conn.execute(op.sql, op.params)
            if op.check_found and cursor.rowcount == 0:
                raise self._not_found(op.session_id)
            outcome = None
            if op.returns_id:
                row = cursor.fetchone()
                outcome = None if row is None else int(row[0])
            for sql, params in op.then:
                conn.execute(sql, params)
            return outcome
        except psycopg.errors.ForeignKeyViolation as exc:
            raise self._not_found(op.session_id) from exc
        except psycopg.IntegrityError as exc:
            raise StorageError(
                f"Cannot write to the session store {self.name}: {op.what} ({_said(exc)})."
            ) from exc
        except psycopg.DataError as exc:
            raise StorageError(
                f"Cannot write to the session store {self.name}: {op.what}: a value cannot "
                f"be stored ({_said(exc)})."
            ) from exc

    def _lease(self, conn: Connection, session_id: str, *, lock: str = "") -> Lease | None:
        row = conn.execute(f"{_LEASE_SELECT}{lock}", (session_id,)).fetchone()
        return None if row is None else Lease(*row)

    def _footprint(self, conn: Connection, session_id: str) -> SessionFootprint:
        row = conn.execute(
            "SELECT s.id, s.goal, s.status, s.workspace,"
            " (SELECT count(*) FROM cycles WHERE session_id = s.id),"
            " (SELECT count(*) FROM events WHERE session_id = s.id),"
            " (SELECT count(*) FROM artifacts WHERE session_id = s.id),"
            f" l.expires_at, l.hostname, l.pid FROM sessions AS s {_LEASE_JOIN}"
            " WHERE s.id = %s",
            (session_id,),
        ).fetchone()
        if row is None:
            raise self._not_found(session_id)
        return SessionFootprint(
            id=row[0],
            goal=str(row[1]),
            status=SessionStatus(_status(row[2], row[7:10])),
            workspace=Path(str(row[3])),
            cycles=row[4],
            events=row[5],
            artifacts=row[6],
        )

    def _check_session(self, conn: Connection, session_id: str) -> None:
        found = conn.execute("SELECT 1 FROM sessions WHERE id = %s", (session_id,)).fetchone()
        if found is None:
            raise self._not_found(session_id)

    def _damaged(self, where: str, damage: Damaged, session_id: str) -> StorageError:
        """The error for a row that does not read back: database, row, column and fix."""
        return StorageError(
            f"The session store {self.name} is damaged: {where}: {damage}. Fix: delete the "
            f"session with 'autogpt sessions delete {session_id}', or restore the database "
            "from a backup."
        )

    def _not_found(self, session_id: str) -> SessionNotFound:
        return SessionNotFound(
            f"No session {session_id!r} in {self.name}. "
            "Fix: run `autogpt sessions` to list the stored sessions and their ids."
        )


def _status(stored: str, lease: Sequence[Any]) -> str:
    """A session's status as read: running, unless no live lease holds it (interrupted).
    ``lease`` is its lease's ``(expires_at, hostname, pid)``, all ``None`` if it has none."""
    expires_at, hostname, pid = lease
    if stored != SessionStatus.RUNNING.value:
        return stored
    if expires_at is None or not lease_live(expires_at, hostname, pid):
        return SessionStatus.INTERRUPTED.value
    return stored


def _with_status(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row of ``_SESSION_COLUMNS`` as ``session_from_row`` reads it."""
    return (*row[:2], _status(row[2], row[9:12]), *row[3:9])


def _artifact(row: tuple[Any, ...]) -> ArtifactRecord:
    return ArtifactRecord(row[0], row[1], row[2], row[3], bool(row[4]), row[5], row[6])


# --- writes, prepared outside the transaction ------------------------------------------


@attrs.frozen
class _Prepared:
    """A write as SQL, with its JSON already encoded so the transaction stays short."""

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
                    "UPDATE sessions SET budget = %s, updated_at = %s WHERE id = %s",
                    (dumps(budget_json(op.budget)), now, cycle.session_id),
                )
            )
        else:
            then.append(
                ("UPDATE sessions SET updated_at = %s WHERE id = %s", (now, cycle.session_id))
            )
        return _Prepared(
            session_id=cycle.session_id,
            sql="INSERT INTO cycles (session_id, number, plan, command, result, usage, messages,"
            " completed_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
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
                    "DELETE FROM cycles WHERE session_id = %s AND number = %s"
                    " AND (result->>'provisional') = 'true'",
                    (cycle.session_id, cycle.number),
                ),
            ),
        )
    if isinstance(op, StatusWrite):
        sets = ["status = %s", "updated_at = %s"]
        values: list[Any] = [session_status(op.status).value, now]
        if op.result is not None:
            sets.append("result = %s")
            values.append(op.result)
        if op.budget is not None:
            sets.append("budget = %s")
            values.append(dumps(budget_json(op.budget)))
        return _Prepared(
            session_id=op.session_id,
            sql=f"UPDATE sessions SET {', '.join(sets)} WHERE id = %s",
            params=(*values, op.session_id),
            what=f"cannot update session {op.session_id!r}",
            check_found=True,
        )
    if isinstance(op, Event):
        sql, params = _event_insert(op, now)
        return _Prepared(
            session_id=op.session_id,
            sql=f"{sql} RETURNING id",
            params=params,
            what=f"cannot append an event to session {op.session_id!r}",
            returns_id=True,
        )
    raise TypeError(f"not a store write: {op!r}")


def _event_insert(event: Event, now: float) -> tuple[str, tuple[Any, ...]]:
    return (
        "INSERT INTO events (session_id, cycle, kind, data, ts) VALUES (%s, %s, %s, %s, %s)",
        (
            event.session_id,
            event.cycle,
            str(event.kind),
            dumps(dict(event.data)),
            event.timestamp or now,
        ),
    )
