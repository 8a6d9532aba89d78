"""The SQLite session store: schema, sessions, cycles, events, artifacts, memory, durability."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from autogpt_core._errors import SessionInUse, SessionNotFound, StorageError
from autogpt_core.store._lease import Holder
from autogpt_core.store._storage import (
    _MIGRATIONS,
    SCHEMA_VERSION,
    AsyncStore,
    CycleRecord,
    CycleWrite,
    SessionStatus,
    StatusWrite,
    Store,
)
from hookspecs import (
    Budget,
    Event,
    EventKind,
    MemoryItem,
    MemoryQuery,
    Message,
    Role,
    ToolCall,
)
from tests.strategies import (
    STORE_JSON_COLUMNS,
    damaged_json,
    session_id_prefixes,
    session_id_sets,
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(tmp_path / "data" / "sessions.sqlite3") as opened:
        yield opened


def _event(session_id: str, cycle: int, n: int = 0) -> Event:
    return Event(EventKind.THOUGHT, session_id, cycle, {"n": n})


# --- schema and opening ----------------------------------------------------------------


def test_schema_creation_is_idempotent(tmp_path: Path) -> None:
    """Opening a store twice keeps its data; the schema version and WAL mode are set."""
    path = tmp_path / "s.sqlite3"
    with Store(path) as store:
        store.create_session("goal", tmp_path / "ws", session_id="s1")
    with Store(path) as store:
        assert store.get_session("s1").goal == "goal"
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()
    assert {"sessions", "cycles", "events", "artifacts", "memory", "memory_fts"} <= tables


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


def test_a_version_1_store_is_migrated_and_keeps_its_sessions(tmp_path: Path) -> None:
    """A file of schema version 1 opens: its sessions and cycles stay, leases work, and a
    session it left running (killed before leases existed) reads as interrupted."""
    path = tmp_path / "v1.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        _MIGRATIONS[0](conn)
        conn.execute("PRAGMA user_version = 1")
        conn.execute(
            "INSERT INTO sessions (id, goal, status, created_at, updated_at, workspace)"
            " VALUES ('old', 'g', 'running', 1.0, 1.0, '/ws')"
        )
        conn.execute("INSERT INTO cycles (session_id, number, completed_at) VALUES ('old', 1, 2.0)")
    finally:
        conn.close()
    with Store(path) as store:
        assert store.get_session("old").status is SessionStatus.INTERRUPTED
        assert store.last_completed_cycle("old") == 1
        store.acquire_lease("old", Holder.current(), expiry=30)
        assert store.get_session("old").status is SessionStatus.RUNNING
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        conn.close()


def test_a_garbage_file_is_refused(tmp_path: Path) -> None:
    """A file that is not SQLite raises StorageError naming the file and how to recover."""
    path = tmp_path / "s.sqlite3"
    path.write_bytes(b"this is not a database, just some text\n" * 100)
    with pytest.raises(StorageError, match="not a readable SQLite database") as info:
        Store(path)
    assert str(path) in str(info.value)
    assert "move the file aside" in str(info.value)


def test_a_closed_store_refuses_calls(tmp_path: Path) -> None:
    """Using a closed store raises StorageError saying it is closed."""
    store = Store(tmp_path / "s.sqlite3")
    store.close()
    with pytest.raises(StorageError, match="closed"):
        store.list_sessions()


# --- sessions --------------------------------------------------------------------------


def test_sessions_crud_and_paging(store: Store, tmp_path: Path) -> None:
    """Sessions are created, listed newest first in pages with a total, and updated."""
    for n in range(5):
        store.create_session(f"goal {n}", tmp_path, session_id=f"s{n}", created_at=1000.0 + n)
    first = store.list_sessions(limit=2)
    assert [s.id for s in first.items] == ["s4", "s3"]
    assert (first.total, first.offset, first.limit) == (5, 0, 2)
    assert [s.id for s in store.list_sessions(offset=4, limit=2).items] == ["s0"]
    assert store.list_sessions(offset=10).items == ()

    store.update_session_status(
        "s2", SessionStatus.FINISHED, result="done", budget=Budget(cycles=3, tokens=10)
    )
    session = store.get_session("s2")
    assert session.status is SessionStatus.FINISHED
    assert session.result == "done"
    assert session.budget["cycles"] == 3
    assert session.updated_at > session.created_at
    finished = store.list_sessions(status="finished")
    assert [s.id for s in finished.items] == ["s2"]
    assert finished.total == 1


def test_running_sessions_nobody_holds_read_as_interrupted(store: Store, tmp_path: Path) -> None:
    """A session stored as running is read, listed and filtered as interrupted unless a
    live lease holds it: without a lease, with an expired one, or one of a dead process."""
    for n, session_id in enumerate(["held", "unheld", "expired", "dead", "done"]):
        store.create_session("g", tmp_path, session_id=session_id, created_at=1000.0 + n)
    store.update_session_status("done", "finished")
    store.acquire_lease("held", Holder.current(), expiry=30)
    store.acquire_lease("expired", Holder.current(), expiry=30, now=1000.0)
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True
    )
    dead = Holder(Holder.current().hostname, int(done.stdout), "gone")
    store.acquire_lease("dead", dead, expiry=30)

    listed = {s.id: s.status.value for s in store.list_sessions().items}
    assert listed == {
        "held": "running",
        "unheld": "interrupted",
        "expired": "interrupted",
        "dead": "interrupted",
        "done": "finished",
    }
    running = store.list_sessions(status="running")
    assert ([s.id for s in running.items], running.total) == (["held"], 1)
    interrupted = store.list_sessions(status="interrupted")
    assert [s.id for s in interrupted.items] == ["dead", "expired", "unheld"]
    assert interrupted.total == 3
    assert store.get_session("dead").status is SessionStatus.INTERRUPTED


def test_session_ids_resolve_by_unique_prefix(tmp_path: Path) -> None:
    """An id, or the start of exactly one id, names that session; a start shared by
    several ids is refused naming them; one of none says to run `autogpt sessions`."""
    counter = iter(range(10**6))

    @settings(max_examples=200, deadline=None)
    @given(ids=session_id_sets, text=session_id_prefixes)
    def check(ids: set[str], text: str) -> None:
        with Store(tmp_path / f"{next(counter)}.sqlite3") as store:
            for session_id in ids:
                store.create_session("g", tmp_path, session_id=session_id)
            matches = sorted(i for i in ids if i.startswith(text))
            if text and (text in ids or len(matches) == 1):
                assert store.resolve_session_id(text) == (text if text in ids else matches[0])
                return
            with pytest.raises(SessionNotFound) as info:
                store.resolve_session_id(text)
            message = str(info.value)
            if not text:
                assert "empty session id" in message
            elif not matches:
                assert f"No session {text!r}" in message
                assert "`autogpt sessions`" in message
            else:
                assert f"Session id {text!r} is ambiguous: {len(matches)} sessions" in message
                assert all(match in message for match in matches)

    check()


def test_session_config_round_trips(store: Store, tmp_path: Path) -> None:
    """A session's config and workspace come back as stored."""
    config = {"llm": "replay", "model": "m", "max_cycles": 5, "continuous": True}
    # Finished: a running session that nobody holds a lease on reads back as interrupted.
    created = store.create_session("g", tmp_path / "ws", config=config, status="finished")
    loaded = store.get_session(created.id)
    assert loaded == created
    assert loaded.config == config
    assert loaded.workspace == tmp_path / "ws"


def test_missing_session_names_the_id_and_the_fix(store: Store) -> None:
    """Every lookup of an unknown session raises SessionNotFound naming it."""
    calls: list[Callable[[], object]] = [
        lambda: store.get_session("nope"),
        lambda: store.last_completed_cycle("nope"),
        lambda: store.load_cycles("nope"),
        lambda: store.list_events("nope"),
        lambda: store.list_artifacts("nope"),
        lambda: store.update_session_status("nope", "stopped"),
        lambda: store.record_cycle(CycleRecord("nope", 1)),
        lambda: store.append_event(_event("nope", 0)),
        lambda: store.add_artifact("nope", "a.txt"),
    ]
    for call in calls:
        with pytest.raises(SessionNotFound, match="'nope'") as info:
            call()
        assert "autogpt sessions" in str(info.value)


def test_duplicate_session_id_is_refused(store: Store, tmp_path: Path) -> None:
    """Creating a session with an id in use raises StorageError."""
    store.create_session("g", tmp_path, session_id="same")
    with pytest.raises(StorageError, match="already exists"):
        store.create_session("g", tmp_path, session_id="same")


def test_unknown_status_is_a_value_error(store: Store, tmp_path: Path) -> None:
    """A status outside the known set is refused before anything is written."""
    store.create_session("g", tmp_path, session_id="s")
    with pytest.raises(ValueError, match="unknown session status"):
        store.update_session_status("s", "paused")


# --- cycles and events -----------------------------------------------------------------


def test_cycles_round_trip_with_messages(store: Store, tmp_path: Path) -> None:
    """A recorded cycle loads back equal, messages and tool calls included."""
    store.create_session("g", tmp_path, session_id="s")
    messages = (
        Message(Role.USER, "hello"),
        Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c1", "write_file", '{"path": "a"}'),)),
        Message(Role.TOOL, "Wrote 1 character to a.", tool_call_id="c1"),
    )
    cycle = CycleRecord(
        "s",
        1,
        plan={"text": "write"},
        command={"command": "write_file"},
        result={"ok": True},
        usage={"prompt_tokens": 3},
        messages=messages,
        completed_at=123.0,
    )
    store.record_cycle(cycle, events=[_event("s", 1)], budget={"cycles": 1})
    second = CycleRecord("s", 2, completed_at=124.0)
    store.record_cycle(second)
    assert store.load_cycles("s") == [cycle, second]
    assert store.load_cycles("s", after=1) == [second]
    assert store.last_completed_cycle("s") == 2
    assert store.get_session("s").budget == {"cycles": 1}


def test_last_completed_cycle_is_zero_for_a_new_session(store: Store, tmp_path: Path) -> None:
    """A session without cycles has last completed cycle 0."""
    store.create_session("g", tmp_path, session_id="s")
    assert store.last_completed_cycle("s") == 0
    assert store.load_cycles("s") == []


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


def test_events_of_a_cycle_must_be_its_session(store: Store, tmp_path: Path) -> None:
    """A cycle carrying another session's event is refused before anything is written."""
    store.create_session("g", tmp_path, session_id="s")
    with pytest.raises(ValueError, match="cannot be recorded with cycle 1"):
        store.record_cycle(CycleRecord("s", 1), events=[_event("other", 1)])
    assert store.last_completed_cycle("s") == 0


def test_write_many_is_all_or_nothing(store: Store, tmp_path: Path) -> None:
    """A batch with a duplicate cycle writes none of its cycles."""
    store.create_session("g", tmp_path, session_id="s")
    store.record_cycle(CycleRecord("s", 1))
    batch = [CycleWrite(CycleRecord("s", 2)), CycleWrite(CycleRecord("s", 1))]
    with pytest.raises(StorageError, match="cycle 1 of session 's' is already recorded"):
        store.write_many(batch)
    assert store.last_completed_cycle("s") == 1


def test_write_each_isolates_failures(store: Store, tmp_path: Path) -> None:
    """write_each commits the good writes of a batch and reports each bad one."""
    store.create_session("g", tmp_path, session_id="s")
    outcomes = store.write_each(
        [
            CycleWrite(CycleRecord("s", 1), events=(_event("s", 1),)),
            CycleWrite(CycleRecord("ghost", 1)),
            _event("s", 1, 7),
            StatusWrite("s", "paused"),
            StatusWrite("s", "finished", result="ok"),
        ]
    )
    assert outcomes[0] is None
    assert isinstance(outcomes[1], SessionNotFound)
    assert isinstance(outcomes[2], int)
    assert isinstance(outcomes[3], StorageError)
    assert outcomes[4] is None
    assert store.last_completed_cycle("s") == 1
    assert [e.data["n"] for e in store.list_events("s")] == [0, 7]
    assert store.get_session("s").status is SessionStatus.FINISHED


def test_events_are_listed_after_an_id(store: Store, tmp_path: Path) -> None:
    """Event ids increase; list_events pages through them with after_id and limit."""
    store.create_session("g", tmp_path, session_id="s")
    ids = [store.append_event(_event("s", 0, n)) for n in range(5)]
    assert ids == sorted(ids)
    page = store.list_events("s", after_id=ids[1], limit=2)
    assert [e.id for e in page] == ids[2:4]
    assert (page[0].kind, page[0].data) == ("thought", {"n": 2})
    assert store.list_events("s", after_id=ids[-1]) == []


def test_writes_from_many_threads_all_land(store: Store, tmp_path: Path) -> None:
    """Threads sharing a store write and read concurrently without losing anything."""
    for t in range(8):
        store.create_session("g", tmp_path, session_id=f"s{t}")
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for n in range(1, 26):
                store.record_cycle(CycleRecord(f"s{t}", n), events=[_event(f"s{t}", n)])
                store.list_sessions(limit=3)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    for t in range(8):
        assert store.last_completed_cycle(f"s{t}") == 25
        assert len(store.list_events(f"s{t}")) == 25


# --- durability ------------------------------------------------------------------------

_WRITER = textwrap.dedent(
    """
    import sys
    from autogpt_core.store._storage import CycleRecord, Store
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


# --- artifacts -------------------------------------------------------------------------


def test_artifacts_are_listed_per_session(store: Store, tmp_path: Path) -> None:
    """Artifacts record a workspace path and its file name, listed oldest first."""
    store.create_session("g", tmp_path, session_id="s")
    first = store.add_artifact("s", "code/main.py", cycle=2)
    store.add_artifact("s", "README.md", agent_created=False)
    page = store.list_artifacts("s")
    assert page.total == 2
    assert page.items[0] == first
    assert (first.file_name, first.relative_path, first.cycle) == ("main.py", "code/main.py", 2)
    assert page.items[1].agent_created is False
    assert store.list_artifacts("s", offset=1, limit=1).items[0].file_name == "README.md"


# --- memory ----------------------------------------------------------------------------


def _remember(store: Store, session_id: str, *texts: str) -> list[str]:
    return [store.memory_store(MemoryItem(text=t, session_id=session_id)) for t in texts]


def test_recall_ranks_the_best_match_first(store: Store) -> None:
    """The item matching more (and rarer) query words ranks first, with a score in (0, 1)."""
    _remember(
        store,
        "s",
        "The weather in Paris was sunny today.",
        "Python 3.11 is required to build the project.",
        "Remember to water the plants.",
        "The build fails on Python 3.10 with a syntax error.",
        "Lunch is at noon.",
    )
    hits = store.memory_recall(MemoryQuery("which python version builds the project?"), "s")
    assert hits[0].item.text == "Python 3.11 is required to build the project."
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(0 < h.score < 1 for h in hits)
    assert "Lunch is at noon." not in [h.item.text for h in hits]


def test_recall_stems_and_folds_accents(store: Store) -> None:
    """Recall finds other forms of a word and ignores diacritics."""
    _remember(store, "s", "We learned that caching helps.", "Meet at the café.", "Unrelated.")
    assert store.memory_recall(MemoryQuery("learning"), "s")[0].item.text.startswith("We learned")
    assert store.memory_recall(MemoryQuery("cafe"), "s")[0].item.text == "Meet at the café."


def test_recall_scope_session_or_all(store: Store) -> None:
    """Scope 'session' sees the session's own items only; 'all' sees every session's."""
    _remember(store, "a", "alpha fact about deployment")
    _remember(store, "b", "beta fact about deployment")
    own = store.memory_recall(MemoryQuery("deployment", scope="session"), "a")
    assert [h.item.session_id for h in own] == ["a"]
    every = store.memory_recall(MemoryQuery("deployment", scope="all"), "a")
    assert sorted(h.item.session_id for h in every) == ["a", "b"]
    with pytest.raises(ValueError, match="unknown memory scope"):
        store.memory_recall(MemoryQuery("x", scope="everything"), "a")


def test_empty_query_recalls_the_most_recent(store: Store) -> None:
    """An empty query returns the newest items first, up to the limit."""
    for n in range(4):
        store.memory_store(MemoryItem(text=f"item {n}", session_id="s", created_at=100.0 + n))
    hits = store.memory_recall(MemoryQuery("", limit=2), "s")
    assert [h.item.text for h in hits] == ["item 3", "item 2"]
    assert all(h.score == 0.0 for h in hits)


def test_memory_items_round_trip_and_upsert(store: Store) -> None:
    """An item keeps its kind and metadata; storing the same id again replaces it."""
    item = MemoryItem(text="old text", session_id="s", kind="fact", metadata={"source": "web"})
    item_id = store.memory_store(item)
    (hit,) = store.memory_recall(MemoryQuery("old"), "s", backend="test")
    assert (hit.item.id, hit.item.kind, hit.item.metadata, hit.backend) == (
        item_id,
        "fact",
        {"source": "web"},
        "test",
    )
    store.memory_store(MemoryItem(text="new words", session_id="s", id=item_id))
    assert store.memory_recall(MemoryQuery("old"), "s") == []
    assert store.memory_recall(MemoryQuery("new"), "s")[0].item.id == item_id


def test_recall_accepts_any_text(tmp_path: Path) -> None:
    """No query text, however odd (quotes, operators, '*', '-', unicode), raises."""
    with Store(tmp_path / "m.sqlite3") as store:
        _remember(store, "s", 'a "quoted" AND NEAR(x y) - * ^ text', "ordinary words here")

        @settings(max_examples=300, deadline=None)
        @given(
            text=st.one_of(
                st.text(),
                st.lists(
                    st.sampled_from(['"', "AND", "OR", "NOT", "NEAR(", ")", "*", "-", "^", ":"])
                ).map(" ".join),
            ),
            scope=st.sampled_from(["session", "all"]),
        )
        def check(text: str, scope: str) -> None:
            hits = store.memory_recall(MemoryQuery(text, scope=scope), "s")
            assert len(hits) <= 5
            store.memory_forget(MemoryQuery(text + " zzzunmatched", scope="session"), "none")

        check()
        assert len(store.memory_recall(MemoryQuery("", limit=10), "s")) == 2


def test_forget_by_query_by_session_and_everything(store: Store) -> None:
    """forget removes matching items in scope, a whole session's, or every item."""
    _remember(store, "a", "keep this note", "drop this secret", "another secret")
    _remember(store, "b", "b's secret", "b's note")
    assert store.memory_forget(MemoryQuery("secret"), "a") == 2
    assert [h.item.text for h in store.memory_recall(MemoryQuery("secret", scope="all"), "a")] == [
        "b's secret"
    ]
    assert store.memory_forget(MemoryQuery("!!!"), "a") == 0  # no words: nothing
    assert store.memory_forget(MemoryQuery(""), "b") == 2
    assert store.memory_recall(MemoryQuery("", scope="all"), "b")[0].item.text == "keep this note"
    assert store.memory_forget(MemoryQuery("", scope="all"), "x") == 1
    assert store.memory_recall(MemoryQuery("", scope="all"), "x") == []


# --- the async facade ------------------------------------------------------------------


async def test_async_store_group_commits_concurrent_sessions(tmp_path: Path) -> None:
    """Many concurrent sessions writing cycles through AsyncStore all land, in order."""
    store = await AsyncStore.open(tmp_path / "s.sqlite3")
    sessions = [f"s{n}" for n in range(50)]
    for session_id in sessions:
        await store.create_session("g", tmp_path, session_id=session_id)

    async def run(session_id: str) -> None:
        for n in range(1, 6):
            await store.record_cycle(CycleRecord(session_id, n), events=[_event(session_id, n)])
        await store.update_session_status(session_id, "finished", result="ok")

    async with trio.open_nursery() as nursery:
        for session_id in sessions:
            nursery.start_soon(run, session_id)
    for session_id in sessions:
        assert await store.last_completed_cycle(session_id) == 5
        assert [e.cycle for e in await store.list_events(session_id)] == [1, 2, 3, 4, 5]
        assert (await store.get_session(session_id)).status is SessionStatus.FINISHED
    page = await store.list_sessions(limit=100)
    assert page.total == 50
    await store.aclose()


async def test_async_store_failures_stay_with_their_caller(tmp_path: Path) -> None:
    """One caller's bad write raises for that caller only; its batch-mates succeed."""
    store = await AsyncStore.open(tmp_path / "s.sqlite3")
    await store.create_session("g", tmp_path, session_id="good")
    results: dict[str, object] = {}

    async def write(session_id: str) -> None:
        try:
            await store.record_cycle(CycleRecord(session_id, 1))
            results[session_id] = "ok"
        except SessionNotFound as exc:
            results[session_id] = exc

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write, "good")
        nursery.start_soon(write, "ghost")
    assert results["good"] == "ok"
    assert isinstance(results["ghost"], SessionNotFound)
    assert await store.append_event(_event("good", 1)) > 0
    await store.aclose()


async def test_async_store_memory_and_artifacts(tmp_path: Path) -> None:
    """The facade's other calls reach the store."""
    store = await AsyncStore.open(tmp_path / "s.sqlite3")
    await store.create_session("g", tmp_path, session_id="s")
    await store.add_artifact("s", "out.txt")
    assert (await store.list_artifacts("s")).items[0].file_name == "out.txt"
    await store.memory_store(MemoryItem(text="the sky is blue", session_id="s"))
    assert (await store.memory_recall(MemoryQuery("sky"), "s"))[0].item.text == "the sky is blue"
    assert await store.memory_forget(MemoryQuery("sky"), "s") == 1
    assert (await store.load_cycles("s")) == []
    await store.aclose()


def test_forget_respects_kinds(tmp_path: Path) -> None:
    """Forgetting observations leaves notes alone."""
    with Store(tmp_path / "m.sqlite3") as store:
        store.memory_store(MemoryItem("a note", "s", kind="note"))
        store.memory_store(MemoryItem("an observation", "s", kind="observation"))
        assert store.memory_forget(MemoryQuery("", kinds=("observation",)), "s") == 1
        (hit,) = store.memory_recall(MemoryQuery(""), "s")
    assert hit.item.kind == "note"


# --- damage: empty files, damaged JSON columns -----------------------------------------


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
        from autogpt_core.store._storage import Store
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


def _damage(path: Path, table: str, column: str, value: object) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(f"UPDATE {table} SET {column} = ?", (value,))
    finally:
        conn.close()


def _stored(path: Path) -> None:
    """A session "s" with a cycle, an event and a memory item, and a session "other"."""
    with Store(path) as store:
        store.create_session("g", "/ws", session_id="s", status="finished")
        store.create_session("other goal", "/ws2", session_id="other", status="finished")
        store.record_cycle(
            CycleRecord("s", 1, plan={"text": "t"}, messages=(Message(Role.USER, "hi"),)),
            events=[_event("s", 1)],
            budget={"cycles": 1},
        )
        store.memory_store(MemoryItem("a note", "s", id="m1"))


def _reads(store: Store) -> list[Callable[[], object]]:
    return [
        lambda: store.get_session("s"),
        lambda: store.list_sessions(),
        lambda: store.load_cycles("s"),
        lambda: store.list_events("s"),
        lambda: store.memory_recall(MemoryQuery("note"), "s"),
        lambda: store.memory_recall(MemoryQuery(""), "s"),
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
        ("cycles", "messages", "not json", "cycle 1 of session s: its messages column"),
        ("cycles", "messages", '[{"role": "nobody"}]', "cycle 1 of session s: its messages"),
        ("cycles", "usage", "NaN", "cycle 1 of session s: its usage column"),
        ("events", "data", "[" * 5000 + "]" * 5000, "of session s: its data column"),
        ("memory", "metadata", b"\xff", "memory item m1: its metadata column"),
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
    @given(target=st.sampled_from(STORE_JSON_COLUMNS), value=damaged_json)
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


# --- deleting a session ----------------------------------------------------------------


def test_delete_session_removes_its_rows_and_nothing_else(tmp_path: Path) -> None:
    """delete_session removes the session, its cycles, events, artifacts and lease, says
    how many of each, and leaves other sessions and all memory items alone."""
    path = tmp_path / "sessions.sqlite3"
    _stored(path)
    with Store(path) as store:
        store.add_artifact("s", "out.txt")
        store.append_event(_event("other", 0))
        before = store.session_footprint("s")
        deleted = store.delete_session("s")
        assert deleted == before
        assert (deleted.cycles, deleted.events, deleted.artifacts) == (1, 1, 1)
        assert (deleted.goal, deleted.workspace) == ("g", Path("/ws"))
        with pytest.raises(SessionNotFound):
            store.get_session("s")
        with pytest.raises(SessionNotFound):
            store.delete_session("s")
        assert len(store.list_events("other")) == 1
        assert store.get_lease("s") is None
        assert len(store.memory_recall(MemoryQuery(""), "s")) == 1  # memory is not the store's
    conn = sqlite3.connect(path)
    try:
        for table in ("cycles", "events", "artifacts"):
            count = conn.execute(f"SELECT count(*) FROM {table} WHERE session_id = 's'")
            assert count.fetchone()[0] == 0, table
    finally:
        conn.close()


def test_delete_session_refuses_a_session_another_holder_runs(tmp_path: Path) -> None:
    """A live lease of another holder refuses the deletion (SessionInUse, nothing deleted);
    the lease taken through the same store does not, and a lapsed one does not."""
    path = tmp_path / "sessions.sqlite3"
    _stored(path)
    with Store(path) as runner, Store(path) as deleter:
        runner.acquire_lease("s", Holder.current(), expiry=30)
        with pytest.raises(SessionInUse, match="is being run by process"):
            deleter.delete_session("s")
        assert deleter.session_footprint("s").cycles == 1
        deleter.acquire_lease("other", Holder.current(), expiry=30)
        assert deleter.delete_session("other").id == "other"
        runner.acquire_lease("s2", Holder.current(), expiry=30, now=1000.0)
        deleter.create_session("g", "/ws", session_id="s2")
        assert deleter.delete_session("s2").id == "s2"


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
