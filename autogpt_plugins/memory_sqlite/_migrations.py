"""The memory database's schema, as migrations: a numbered list of functions, applied in
order and recorded in the database (as llm's ``migrations.py`` does).

Migration ``n`` (``MIGRATIONS[n - 1]``, from 1) brings the file from version ``n - 1`` to
``n``; append only. Each applied migration is a row ``(number, name, applied_at)`` in
``memory_migrations``, written in one transaction with its work; ``PRAGMA user_version``
holds the highest number, and ``PRAGMA application_id`` is ``APPLICATION_ID``.

Schema::

    memory           seq, id, session_id, kind, text, metadata, created_at
    memory_fts       FTS5 over memory.text (external content, rowid = seq)
    memory_sessions  slot -> session_id: the session's items have seq in slot << 32 + (1..)

Files written by autogpt-core 0.1.0, whose session store kept the memory tables, have no
``memory_migrations`` table (their ``user_version`` counted the session store's
migrations): every migration runs on them, and ``m001_memory`` finds its tables there.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

Migration = Callable[[sqlite3.Connection], None]

MIGRATIONS: list[Migration] = []

APPLICATION_ID = 0x41474D4D
"""``PRAGMA application_id`` of a memory database ("AGMM")."""

SLOT_BITS = 32
"""A session's items have ``seq`` from ``slot << SLOT_BITS`` up: ``rowid`` is 64-bit, so
2**31 sessions of 2**32 items each."""

_TABLE = "memory_migrations"


def _migration(function: Migration) -> Migration:
    MIGRATIONS.append(function)
    return function


_FTS_TRIGGERS = (
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


@_migration
def m001_memory(conn: sqlite3.Connection) -> None:
    """The memory table and its full-text index, as the session store of 0.1.0 made them
    (IF NOT EXISTS: its files have them)."""
    # ``seq`` is an explicit INTEGER PRIMARY KEY because the FTS index refers to rows by
    # rowid, and an implicit rowid may change on VACUUM.
    conn.execute(
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
        """
    )
    conn.execute("CREATE INDEX IF NOT EXISTS memory_by_session ON memory (session_id, created_at)")
    conn.execute("CREATE INDEX IF NOT EXISTS memory_by_created ON memory (created_at)")
    # Porter stemming so "learned" finds "learning"; diacritics folded so "cafe" finds "café".
    conn.execute(
        """
        CREATE VIRTUAL TABLE IF NOT EXISTS memory_fts USING fts5 (
            text, content='memory', content_rowid='seq',
            tokenize='porter unicode61 remove_diacritics 2'
        )
        """
    )
    for statement in _FTS_TRIGGERS:
        conn.execute(statement)


@_migration
def m002_session_ranges(conn: sqlite3.Connection) -> None:
    """Give each session a range of ``seq`` (its slot's), and move the items there, so a
    session's recall asks FTS5 for a rowid range instead of filtering every session's hits."""
    conn.execute(
        "CREATE TABLE memory_sessions (slot INTEGER PRIMARY KEY, session_id TEXT NOT NULL UNIQUE)"
    )
    conn.execute(
        "INSERT INTO memory_sessions (session_id)"
        " SELECT session_id FROM memory GROUP BY session_id ORDER BY min(seq)"
    )
    # Every new seq is >= 1 << SLOT_BITS, above every old one: no update collides.
    conn.execute(
        f"""
        CREATE TEMP TABLE moved AS SELECT m.seq AS old, (s.slot << {SLOT_BITS})
            + row_number() OVER (PARTITION BY m.session_id ORDER BY m.seq) AS new
        FROM memory AS m JOIN memory_sessions AS s USING (session_id)
        """
    )
    conn.execute("UPDATE memory SET seq = (SELECT new FROM moved WHERE old = memory.seq)")
    conn.execute("DROP TABLE temp.moved")
    # The triggers index text changes only: index the moved rows afresh.
    conn.execute("INSERT INTO memory_fts (memory_fts) VALUES ('rebuild')")


@_migration
def m003_session_store_tables_out(conn: sqlite3.Connection) -> None:
    """Drop the session store's tables that files of 0.1.0 carry, if all are empty (they
    are, unless the plugin's ``path`` was the session store's own file: then they stay)."""
    tables = [
        name
        for name in ("sessions", "cycles", "events", "artifacts", "leases")
        if _table_exists(conn, name)
    ]
    for name in tables:
        if conn.execute(f"SELECT EXISTS (SELECT 1 FROM {name})").fetchone()[0]:
            return
    # Children first: cycles, events and artifacts refer to sessions.
    for name in reversed(tables):
        conn.execute(f"DROP TABLE {name}")


@_migration
def m004_application_id(conn: sqlite3.Connection) -> None:
    """Mark the file as a memory database (``APPLICATION_ID``)."""
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")


def current(conn: sqlite3.Connection) -> bool:
    """Whether the file is a memory database with every migration applied."""
    return pragma(conn, "application_id") == APPLICATION_ID and pragma(conn, "user_version") == len(
        MIGRATIONS
    )


def newer(conn: sqlite3.Connection) -> int | None:
    """The file's version if a newer plugin wrote it, else ``None``."""
    version = pragma(conn, "user_version")
    if pragma(conn, "application_id") == APPLICATION_ID and version > len(MIGRATIONS):
        return version
    return None


def migrate(conn: sqlite3.Connection) -> None:
    """Apply the migrations not yet recorded, in order, recording each. Call it inside a
    write transaction, after ``newer`` found nothing."""
    if not _table_exists(conn, _TABLE):
        conn.execute(
            f"CREATE TABLE {_TABLE} (number INTEGER PRIMARY KEY, name TEXT NOT NULL,"
            " applied_at REAL NOT NULL)"
        )
    applied = {row[0] for row in conn.execute(f"SELECT number FROM {_TABLE}")}
    for number, function in enumerate(MIGRATIONS, 1):
        if number not in applied:
            function(conn)
            conn.execute(
                f"INSERT INTO {_TABLE} (number, name, applied_at) VALUES (?, ?, ?)",
                (number, function.__name__, time.time()),
            )
    conn.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")


def pragma(conn: sqlite3.Connection, name: str) -> int:
    return int(conn.execute(f"PRAGMA {name}").fetchone()[0])


def _table_exists(conn: sqlite3.Connection, name: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return row is not None
