"""The SQLite session store's migrations: applied in order, recorded in the file, and
files of earlier versions (made by the code of autogpt-core 0.1.0) open and upgrade."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from autogpt_core._errors import StorageError
from autogpt_core.store._lease import Holder
from autogpt_core.store._migrations import (
    APPLICATION_ID,
    MIGRATIONS,
    SCHEMA_VERSION,
    NewerSchema,
    migrate,
)
from autogpt_core.store._records import CycleRecord, SessionStatus
from autogpt_core.store._sqlite import Store
from hookspecs import Event, EventKind

# The statements autogpt-core 0.1.0 ran to make a session store (its ``_INITIAL_SCHEMA``
# and ``_m002_leases``, verbatim but for line breaks; ``PRAGMA user_version`` counted them).
# Its memory_sqlite plugin made its own file with the same statements.
V1_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS sessions (
        id          TEXT PRIMARY KEY,
        goal        TEXT NOT NULL,
        status      TEXT NOT NULL CHECK (status IN ('running', 'finished', 'stopped',
                    'failed', 'budget_exhausted', 'interrupted')),
        created_at  REAL NOT NULL,
        updated_at  REAL NOT NULL,
        workspace   TEXT NOT NULL,
        config      TEXT NOT NULL DEFAULT '{}',
        result      TEXT NOT NULL DEFAULT '',
        budget      TEXT NOT NULL DEFAULT '{}'
    )
    """,
    "CREATE INDEX IF NOT EXISTS sessions_by_created ON sessions (created_at DESC)",
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
V2_LEASES = """
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


def make_0_1_file(path: Path, version: int = 2, memories: tuple[tuple[str, str], ...] = ()) -> None:
    """A file as autogpt-core 0.1.0 made it, at schema ``version`` (1 or 2), holding
    ``memories`` ((session id, text) pairs, in the order stored)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN IMMEDIATE")
        for statement in V1_SCHEMA:
            conn.execute(statement)
        if version >= 2:
            conn.execute(V2_LEASES)
        conn.execute(f"PRAGMA user_version = {version}")
        for n, (session_id, text) in enumerate(memories):
            conn.execute(
                "INSERT INTO memory (id, session_id, kind, text, metadata, created_at)"
                " VALUES (?, ?, 'note', ?, '{\"n\": 1}', ?)",
                (f"m{n}", session_id, text, 100.0 + n),
            )
        conn.execute("COMMIT")
    finally:
        conn.close()


def _add_session(path: Path) -> None:
    """A running session "old" with a cycle and an event, as 0.1.0 stored them."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(
            "INSERT INTO sessions (id, goal, status, created_at, updated_at, workspace, budget)"
            " VALUES ('old', 'g', 'running', 1.0, 1.0, '/ws', '{\"cycles\": 1}')"
        )
        conn.execute(
            "INSERT INTO cycles (session_id, number, plan, completed_at)"
            " VALUES ('old', 1, '{\"text\": \"t\"}', 2.0)"
        )
        conn.execute(
            "INSERT INTO events (session_id, cycle, kind, data, ts)"
            " VALUES ('old', 1, 'plan', '{\"n\": 1}', 2.0)"
        )
    finally:
        conn.close()


def _schema(path: Path) -> tuple[int, int, set[str], list[tuple[int, str, float | None]]]:
    conn = sqlite3.connect(path)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        application = conn.execute("PRAGMA application_id").fetchone()[0]
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        recorded = conn.execute(
            "SELECT number, name, applied_at FROM store_migrations ORDER BY number"
        ).fetchall()
    finally:
        conn.close()
    return version, application, names, recorded


def test_migrations_are_numbered_functions_applied_in_order(tmp_path: Path) -> None:
    """A new file has every migration recorded, by number and name, with its time."""
    path = tmp_path / "s.sqlite3"
    Store(path).close()
    version, application, names, recorded = _schema(path)
    assert version == SCHEMA_VERSION == len(MIGRATIONS)
    assert application == APPLICATION_ID
    assert [(number, name) for number, name, _ in recorded] == [
        (n, f.__name__) for n, f in enumerate(MIGRATIONS, 1)
    ]
    assert [f.__name__[:5] for f in MIGRATIONS] == [
        f"m{n:03}_" for n in range(1, SCHEMA_VERSION + 1)
    ]
    assert all(applied is not None for _, _, applied in recorded)
    assert not {name for name in names if name.startswith("memory")}


@pytest.mark.parametrize("version", [1, 2])
def test_a_0_1_file_opens_upgraded_and_keeps_its_sessions(tmp_path: Path, version: int) -> None:
    """A file of schema version 1 or 2, as 0.1.0 made it, opens: its sessions, cycles and
    events stay, leases work, a session it left running (killed before leases existed)
    reads as interrupted; its empty memory tables are dropped, and the migrations it had
    are recorded without a time."""
    path = tmp_path / "sessions.sqlite3"
    make_0_1_file(path, version)
    _add_session(path)
    with Store(path) as store:
        assert store.get_session("old").status is SessionStatus.INTERRUPTED
        assert store.get_session("old").budget == {"cycles": 1}
        assert store.load_cycles("old") == [
            CycleRecord("old", 1, plan={"text": "t"}, completed_at=2.0)
        ]
        assert [e.data for e in store.list_events("old")] == [{"n": 1}]
        store.acquire_lease("old", Holder.current(), expiry=30)
        assert store.get_session("old").status is SessionStatus.RUNNING
        store.record_cycle(CycleRecord("old", 2), events=[Event(EventKind.PLAN, "old", 2)])
        assert store.last_completed_cycle("old") == 2
    found, application, names, recorded = _schema(path)
    assert (found, application) == (SCHEMA_VERSION, APPLICATION_ID)
    assert not {name for name in names if name.startswith("memory")}
    assert [(number, applied is None) for number, _, applied in recorded] == [
        (n, n <= version) for n in range(1, SCHEMA_VERSION + 1)
    ]
    with Store(path) as store:  # and opens again, as it is now
        assert store.last_completed_cycle("old") == 2


def test_memories_in_a_session_store_file_are_kept(tmp_path: Path) -> None:
    """A 0.1.0 file whose memory tables hold items (a memory plugin pointed at it) keeps
    them: the upgrade drops only empty memory tables."""
    path = tmp_path / "sessions.sqlite3"
    make_0_1_file(path, memories=(("s", "keep me"),))
    Store(path).close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT text FROM memory").fetchall() == [("keep me",)]
    finally:
        conn.close()


def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    """A file from a newer schema version raises StorageError naming the file and the fix."""
    path = tmp_path / "s.sqlite3"
    Store(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StorageError, match="newer autogpt-core") as info:
        Store(path)
    assert str(path) in str(info.value)
    assert "upgrade" in str(info.value)


def test_another_applications_database_is_refused_untouched(tmp_path: Path) -> None:
    """A SQLite file of another application (its application id) is refused naming the
    file and the fix, and is not changed: no session tables, no WAL."""
    path = tmp_path / "memory.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA application_id = 1095191885")
    conn.execute("CREATE TABLE theirs (x)")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StorageError, match="another application's SQLite database") as info:
        Store(path)
    assert str(path) in str(info.value)
    assert "Fix: give the path of a session store" in str(info.value)
    assert path.read_bytes() == before


def test_migrate_applies_only_what_is_missing(tmp_path: Path) -> None:
    """migrate runs each migration once, in order, and refuses a newer file."""
    ran: list[str] = []

    def m001_a(conn: sqlite3.Connection) -> None:
        ran.append("a")

    def m002_b(conn: sqlite3.Connection) -> None:
        ran.append("b")

    conn = sqlite3.connect(tmp_path / "x.sqlite3", isolation_level=None)
    try:
        assert migrate(conn, [m001_a], table="applied", now=1.0) == 1
        assert migrate(conn, [m001_a, m002_b], table="applied", now=2.0) == 1
        assert migrate(conn, [m001_a, m002_b], table="applied") == 0
        assert ran == ["a", "b"]
        rows = conn.execute("SELECT number, name, applied_at FROM applied").fetchall()
        assert rows == [(1, "m001_a", 1.0), (2, "m002_b", 2.0)]
        with pytest.raises(NewerSchema):
            migrate(conn, [m001_a], table="applied")
    finally:
        conn.close()
