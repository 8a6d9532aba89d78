"""The SQLite session store (``Store``): its file, durability and damaged rows. What every
implementation must do is in tests/test_store_interface.py."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from autogpt_core._errors import StorageError
from autogpt_core.store._migrations import APPLICATION_ID, SCHEMA_VERSION
from autogpt_core.store._records import CycleRecord
from autogpt_core.store._sqlite import Store
from hookspecs import Event, EventKind, Message, Role
from tests.strategies import STORE_JSON_COLUMNS, damaged_json

#: The memory tables are the memory_sqlite plugin's now (tests/test_memory_sqlite.py).
SESSION_JSON_COLUMNS = tuple(column for column in STORE_JSON_COLUMNS if column[0] != "memory")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "data" / "sessions.sqlite3") as opened:
        yield opened


def _event(session_id: str, cycle: int, n: int = 0) -> Event:
    return Event(EventKind.THOUGHT, session_id, cycle, {"n": n})


# --- the file --------------------------------------------------------------------------


def test_schema_creation_is_idempotent(tmp_path: Path) -> None:
    """Opening a store twice keeps its data; the schema version, application id and WAL
    mode are set; the file has the session tables and no memory tables."""
    path = tmp_path / "s.sqlite3"
    with Store(path) as store:
        store.create_session("goal", tmp_path / "ws", session_id="s1")
    with Store(path) as store:
        assert store.get_session("s1").goal == "goal"
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()
    assert {"sessions", "cycles", "events", "artifacts", "leases", "store_migrations"} <= tables
    assert not {name for name in tables if name.startswith("memory")}


def test_a_garbage_file_is_refused(tmp_path: Path) -> None:
    """A file that is not SQLite raises StorageError naming the file and how to recover."""
    path = tmp_path / "s.sqlite3"
    path.write_bytes(b"this is not a database, just some text\n" * 100)
    with pytest.raises(StorageError, match="not a readable SQLite database") as info:
        Store(path)
    assert str(path) in str(info.value)
    assert "move the file aside" in str(info.value)


def test_a_path_that_is_not_a_file_is_a_value_error() -> None:
    """An in-memory or URI database is refused: the store is a file others can open."""
    for path in ("", ":memory:", "file:x?mode=memory"):
        with pytest.raises(ValueError, match="needs a file path"):
            Store(path)


def test_an_empty_file_is_refused_not_started_afresh(tmp_path: Path) -> None:
    """A 0-byte store file (truncated) raises StorageError naming it and the fix, and is
    left as it was rather than quietly made an empty store."""
    path = tmp_path / "sessions.sqlite3"
    path.write_bytes(b"")
    with pytest.raises(StorageError) as info:
        Store(path)
    message = str(info.value)
    assert f"{path} is empty (0 bytes) but a store was expected" in message
    assert "truncated" in message
    assert "move it away" in message
    assert path.stat().st_size == 0


def test_stores_opened_at_once_on_a_missing_file_all_open(tmp_path: Path) -> None:
    """Processes creating the same new store at the same moment all succeed: the file
    never shows up empty to one of them (it is linked into place with its schema)."""
    path = tmp_path / "data" / "sessions.sqlite3"
    code = textwrap.dedent(
        f"""
        import sys, time
        from autogpt_core.store._sqlite import Store
        time.sleep(max(0.0, {time.time() + 1.0} - time.time()))
        with Store({str(path)!r}) as store:
            store.create_session("g", "/ws", session_id=sys.argv[1])
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, f"s{n}"], stderr=subprocess.PIPE, text=True)
        for n in range(6)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    with Store(path) as store:
        assert store.list_sessions().total == 6
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".new")] == []


def test_a_failed_cycle_write_leaves_nothing_behind(store: Store, tmp_path: Path) -> None:
    """If the database fails half-way through a cycle, none of the cycle is stored."""
    store.create_session("g", tmp_path, session_id="s")
    # A trigger makes the second event's insert fail, after the cycle and first event.
    conn = sqlite3.connect(store.path)
    conn.execute(
        "CREATE TRIGGER fail BEFORE INSERT ON events WHEN new.data LIKE '%13%'"
        " BEGIN SELECT RAISE(ABORT, 'simulated failure'); END"
    )
    conn.close()
    events = [_event("s", 1, 0), _event("s", 1, 13)]
    with pytest.raises(StorageError, match="simulated failure"):
        store.record_cycle(CycleRecord("s", 1), events=events, budget={"cycles": 1})
    assert store.last_completed_cycle("s") == 0
    assert store.list_events("s") == []
    assert store.get_session("s").budget == {}
    store.record_cycle(CycleRecord("s", 1), events=events[:1])
    assert store.last_completed_cycle("s") == 1


def test_delete_session_leaves_no_row_of_it(tmp_path: Path) -> None:
    """After delete_session, no table holds a row of the session."""
    path = tmp_path / "sessions.sqlite3"
    _stored(path)
    with Store(path) as store:
        store.add_artifact("s", "out.txt")
        store.delete_session("s")
    conn = sqlite3.connect(path)
    try:
        for table in ("cycles", "events", "artifacts", "leases"):
            count = conn.execute(f"SELECT count(*) FROM {table} WHERE session_id = 's'")
            assert count.fetchone()[0] == 0, table
        assert conn.execute("SELECT count(*) FROM sessions WHERE id = 's'").fetchone()[0] == 0
    finally:
        conn.close()


# --- durability ------------------------------------------------------------------------

_WRITER = textwrap.dedent(
    """
    import sys
    from autogpt_core.store._records import CycleRecord
    from autogpt_core.store._sqlite import Store
    from hookspecs import Event, EventKind, Message, Role

    store = Store(sys.argv[1])
    store.create_session("survive a kill", "/ws", session_id="s")
    n = 0
    while True:
        n += 1
        store.record_cycle(
            CycleRecord("s", n, plan={"n": n, "pad": "x" * 2000},
                        messages=(Message(Role.ASSISTANT, f"cycle {n}"),)),
            events=[Event(EventKind.PLAN, "s", n, {"n": n})],
        )
        print(n, flush=True)
    """
)


@pytest.mark.slow
def test_a_killed_writer_loses_no_committed_cycle(tmp_path: Path) -> None:
    """After SIGKILL mid-run, the file opens and every cycle reported committed is intact."""
    path = tmp_path / "s.sqlite3"
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        reported = 0
        while reported < 200:
            line = child.stdout.readline()
            assert line, "the writer died before reporting 200 cycles"
            reported = int(line)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL

    with Store(path) as store:
        last = store.last_completed_cycle("s")
        assert last >= reported
        cycles = store.load_cycles("s")
        assert [c.number for c in cycles] == list(range(1, last + 1))
        for cycle in cycles:
            assert cycle.plan == {"n": cycle.number, "pad": "x" * 2000}
            assert cycle.messages == (Message(Role.ASSISTANT, f"cycle {cycle.number}"),)
        assert [e.data["n"] for e in store.list_events("s", limit=10**6)][:last] == list(
            range(1, last + 1)
        )
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()


# --- damaged JSON columns --------------------------------------------------------------


def _damage(path: Path, table: str, column: str, value: object) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(f"UPDATE {table} SET {column} = ?", (value,))
    except sqlite3.IntegrityError:
        # sqlite3 binds a float NaN as NULL, which a NOT NULL column refuses: such damage
        # cannot be on disk, so there is nothing to check.
        reject()
    finally:
        conn.close()


def _stored(path: Path) -> None:
    """A session "s" with a cycle and an event, and a session "other"."""
    with Store(path) as store:
        store.create_session("g", "/ws", session_id="s", status="finished")
        store.create_session("other goal", "/ws2", session_id="other", status="finished")
        store.record_cycle(
            CycleRecord("s", 1, plan={"text": "t"}, messages=(Message(Role.USER, "hi"),)),
            events=[_event("s", 1)],
            budget={"cycles": 1},
        )


def _reads(store: Store) -> list[Callable[[], object]]:
    return [
        lambda: store.get_session("s"),
        lambda: store.list_sessions(),
        lambda: store.load_cycles("s"),
        lambda: store.list_events("s"),
        lambda: store.resolve_session_id("s"),
        lambda: store.last_completed_cycle("s"),
        lambda: store.session_footprint("s"),
    ]


@pytest.mark.parametrize(
    ("table", "column", "value", "where"),
    [
        ("sessions", "config", "{bad", "session s: its config column"),
        ("sessions", "budget", "[1", "session s: its budget column"),
        ("sessions", "budget", '{"cycles": "x"}', "session s: its budget column"),
        ("sessions", "config", "[1]", "session s: its config column"),
        ("sessions", "created_at", "yesterday", "session s: its created_at column"),
        ("cycles", "messages", "not json", "cycle 1 of session s: its messages column"),
        ("cycles", "messages", '[{"role": "nobody"}]', "cycle 1 of session s: its messages"),
        ("cycles", "usage", "NaN", "cycle 1 of session s: its usage column"),
        ("cycles", "plan", b"\xff", "cycle 1 of session s: its plan column"),
        ("events", "data", "[" * 5000 + "]" * 5000, "of session s: its data column"),
    ],
)
def test_damaged_json_names_file_session_column_and_fix(
    tmp_path: Path, table: str, column: str, value: object, where: str
) -> None:
    """A JSON column that does not read back raises StorageError naming the file, the row
    and the column, with the fix; never a JSONDecodeError, KeyError or RecursionError."""
    path = tmp_path / "sessions.sqlite3"
    _stored(path)
    _damage(path, table, column, value)
    raised = []
    with Store(path) as store:
        for read in _reads(store):
            try:
                read()
            except StorageError as exc:
                raised.append(str(exc))
    assert raised, "the damage went unnoticed"
    for message in raised:
        assert f"The session store {path} is damaged: " in message
        assert where in message
        assert "Fix: " in message
        assert "\n" not in message


def test_listing_marks_a_damaged_session_and_lists_the_others(tmp_path: Path) -> None:
    """list_sessions lists every session; the damaged one carries the damage message and
    empty config and budget, the others read as stored."""
    path = tmp_path / "sessions.sqlite3"
    _stored(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("UPDATE sessions SET budget = '{bad' WHERE id = 's'")
    conn.close()
    with Store(path) as store:
        listed = {s.id: s for s in store.list_sessions().items}
        assert listed.keys() == {"s", "other"}
        assert "session s: its budget column is not valid JSON" in listed["s"].damage
        assert (listed["s"].budget, listed["s"].goal) == ({}, "g")
        assert listed["other"].damage == ""
        assert listed["other"] == store.get_session("other")


def test_random_damage_to_json_columns_is_a_storage_error(tmp_path: Path) -> None:
    """Whatever a JSON column is damaged into, every read returns or raises StorageError
    naming the file and the column: never another exception."""
    template = tmp_path / "template.sqlite3"
    _stored(template)
    counter = iter(range(10**6))

    @settings(max_examples=60, deadline=None)
    @given(target=st.sampled_from(SESSION_JSON_COLUMNS), value=damaged_json)
    def check(target: tuple[str, str], value: object) -> None:
        path = tmp_path / f"{next(counter)}.sqlite3"
        path.write_bytes(template.read_bytes())
        _damage(path, *target, value)
        raised = []
        with Store(path) as store:
            for read in _reads(store):
                try:
                    read()
                except StorageError as exc:
                    raised.append(str(exc))
        for message in raised:
            assert f"The session store {path} is damaged: " in message
            assert f"its {target[1]} column" in message

    check()


def test_a_damaged_session_can_still_be_shown_and_deleted(tmp_path: Path) -> None:
    """session_footprint and delete_session read no JSON: a session whose columns are
    damaged can be deleted, as the damage message advises."""
    path = tmp_path / "sessions.sqlite3"
    _stored(path)
    _damage(path, "sessions", "config", "{bad")
    _damage(path, "cycles", "messages", "[[[")
    with Store(path) as store:
        assert store.session_footprint("s").cycles == 1
        assert store.delete_session("s").events == 1
        assert [s.id for s in store.list_sessions().items] == ["other"]
