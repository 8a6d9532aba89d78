"""The SQLite session store's schema, as migrations: a numbered list of functions, applied
in order and recorded in the database (as llm's ``migrations.py`` does).

Migration ``n`` (``MIGRATIONS[n - 1]``, from 1) brings a file from schema version ``n - 1``
to ``n``. Append only: a released migration is not changed, except as ``m001_initial``
says. Each applied migration is recorded twice, in one transaction with its work:

- a row ``(number, name, applied_at)`` in ``store_migrations``, for people and tools;
- the highest number in ``PRAGMA user_version``, which opening reads (one header field,
  no query) and which older autogpt-core reads too: it refuses a file of a newer schema.

Files from before migrations were recorded have ``user_version`` only; ``migrate`` records
their migrations then, with ``applied_at`` null.

Schema (version ``SCHEMA_VERSION``)::

    sessions   id, goal, status, created_at, updated_at, workspace, config, result, budget
    leases     session_id -> holder, hostname, pid, acquired_at, renewed_at, expires_at
    cycles     (session_id, number) -> plan, command, result, usage, messages, completed_at
    events     id (increasing), session_id, cycle, kind, data, ts
    artifacts  id, session_id, relative_path, file_name, agent_created, cycle, created_at
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any

from ._records import SessionStatus

Migration = Callable[[sqlite3.Connection], None]

MIGRATIONS: list[Migration] = []


def _migration(function: Migration) -> Migration:
    MIGRATIONS.append(function)
    return function


_STATUSES = ", ".join(f"'{status.value}'" for status in SessionStatus)

APPLICATION_ID = 0x41475353
"""``PRAGMA application_id`` of a session store ("AGSS"): another database (a memory
plugin's, say) is refused rather than given the session tables. 0 in files from before
``m004_application_id``."""


@_migration
def m001_initial(conn: sqlite3.Connection) -> None:
    """Sessions, cycles, events and artifacts.

    Its IF NOT EXISTS clauses are from before schema versions were recorded. In 0.1.0 it
    also created the memory tables (FTS5), since moved to the ``memory_sqlite`` plugin's
    own file; ``m003_memory_moved_out`` drops them from the files it made. Files made
    before and after end up with the same schema: that is why it could change.
    """
    conn.execute(
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
        """
    )
    conn.execute("CREATE INDEX IF NOT EXISTS sessions_by_created ON sessions (created_at DESC)")
    # Not WITHOUT ROWID: cycle rows hold kilobytes of JSON, and WITHOUT ROWID tables with
    # large rows were three times slower to insert into.
    conn.execute(
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
        """
    )
    conn.execute(
        """
        CREATE TABLE IF NOT EXISTS events (
            id          INTEGER PRIMARY KEY AUTOINCREMENT,
            session_id  TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            cycle       INTEGER NOT NULL,
            kind        TEXT NOT NULL,
            data        TEXT NOT NULL DEFAULT '{}',
            ts          REAL NOT NULL
        )
        """
    )
    conn.execute("CREATE INDEX IF NOT EXISTS events_by_session ON events (session_id, id)")
    conn.execute(
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
        """
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS artifacts_by_session ON artifacts (session_id, created_at)"
    )


@_migration
def m002_leases(conn: sqlite3.Connection) -> None:
    """Leases: which runtime runs a session."""
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


@_migration
def m003_memory_moved_out(conn: sqlite3.Connection) -> None:
    """Drop the memory tables the files of 0.1.0 carry, if they are empty (they are, unless
    a memory plugin was pointed at this file: then they stay, unread, rather than its
    memories be lost)."""
    if not _table_exists(conn, "memory"):
        return
    if conn.execute("SELECT EXISTS (SELECT 1 FROM memory)").fetchone()[0]:
        return
    # Dropping the table drops its indexes and its triggers, which name memory_fts.
    conn.execute("DROP TABLE memory")
    conn.execute("DROP TABLE IF EXISTS memory_fts")


@_migration
def m004_application_id(conn: sqlite3.Connection) -> None:
    """Mark the file as a session store (``APPLICATION_ID``)."""
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")


SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this code writes; a file with a higher ``user_version`` is refused."""


class NewerSchema(Exception):
    """The file's schema ``version`` is newer than the migrations know."""

    def __init__(self, version: int) -> None:
        super().__init__(version)
        self.version = version


def migrate(
    conn: sqlite3.Connection,
    migrations: list[Migration],
    *,
    table: str,
    now: float | None = None,
) -> int:
    """Apply the ``migrations`` not yet applied to ``conn``'s file, in order, recording each
    in ``table`` and ``PRAGMA user_version``; return how many were applied.

    Call it inside a write transaction (``BEGIN IMMEDIATE``), so that two processes opening
    a file at once apply each migration once. Raises ``NewerSchema`` for a file whose
    ``user_version`` is beyond ``migrations``.
    """
    version = user_version(conn)
    if version > len(migrations):
        raise NewerSchema(version)
    if not _table_exists(conn, table):
        conn.execute(
            f"CREATE TABLE {table} (number INTEGER PRIMARY KEY, name TEXT NOT NULL,"
            " applied_at REAL)"
        )
        # Applied before they were recorded: when is not known.
        conn.executemany(
            f"INSERT INTO {table} (number, name, applied_at) VALUES (?, ?, NULL)",
            [(number, migrations[number - 1].__name__) for number in range(1, version + 1)],
        )
    count = apply_pending(conn, migrations, table, "?", now)
    conn.execute(f"PRAGMA user_version = {len(migrations)}")
    return count


def apply_pending(
    conn: Any, migrations: Sequence[Callable[[Any], None]], table: str, mark: str, now: float | None
) -> int:
    """Run the migrations ``table`` does not record as applied, in order, recording each;
    return how many ran. ``mark`` is the driver's parameter mark (``?``, ``%s``). Both
    stores' migrations go through here, each in its own transaction."""
    applied = {row[0] for row in conn.execute(f"SELECT number FROM {table}")}
    count = 0
    for number, function in enumerate(migrations, 1):
        if number in applied:
            continue
        function(conn)
        conn.execute(
            f"INSERT INTO {table} (number, name, applied_at) VALUES ({mark}, {mark}, {mark})",
            (number, function.__name__, time.time() if now is None else now),
        )
        count += 1
    return count


def user_version(conn: sqlite3.Connection) -> int:
    """The file's schema version: the number of the last migration applied."""
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _table_exists(conn: sqlite3.Connection, name: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return row is not None
