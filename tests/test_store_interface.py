"""The session store's contract (``SessionStore``), run against every implementation.

Each test takes its store from the ``open_store``/``store`` fixtures, parametrised over
``IMPLEMENTATIONS`` (SQLite, and PostgreSQL on a server the tests start: tests/pgserver.py):
a new implementation adds an entry and passes this file.
What only one implementation can show (its files, its schema) is in its own test file.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings

from autogpt_core._errors import SessionInUse, SessionNotFound, StorageError
from autogpt_core.store._async import AsyncStore
from autogpt_core.store._interface import SessionStore
from autogpt_core.store._lease import Holder
from autogpt_core.store._postgres import PostgresStore
from autogpt_core.store._records import (
    CycleRecord,
    CycleWrite,
    SessionStatus,
    StatusWrite,
    WriteOp,
)
from autogpt_core.store._sqlite import Store
from hookspecs import Budget, Event, EventKind, Message, Role, ToolCall
from tests.strategies import session_id_prefixes, session_id_sets

OpenStore = Callable[[], SessionStore]


def _sqlite(request: pytest.FixtureRequest, tmp_path: Path) -> OpenStore:
    path = tmp_path / "data" / "sessions.sqlite3"
    return lambda: Store(path)


def _postgres(request: pytest.FixtureRequest, tmp_path: Path) -> OpenStore:
    # A database of its own on the test run's server (tests/conftest.py).
    url: str = request.getfixturevalue("postgres_url")
    return lambda: PostgresStore(url)


IMPLEMENTATIONS: dict[str, Callable[[pytest.FixtureRequest, Path], OpenStore]] = {
    "sqlite": _sqlite,
    "postgres": _postgres,
}
"""Each implementation: given the test's request (for fixtures such as a database server)
and a temporary directory, a function opening a store on one new database, a new client
(as another process would have) each time it is called."""


@pytest.fixture(params=sorted(IMPLEMENTATIONS))
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenStore]:
    """Opens stores on one fresh database of the implementation; closes them after."""
    opened: list[SessionStore] = []
    factory = IMPLEMENTATIONS[request.param](request, tmp_path)

    def open_one() -> SessionStore:
        store = factory()
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: OpenStore) -> SessionStore:
    return open_store()


def _event(session_id: str, cycle: int, n: int = 0) -> Event:
    return Event(EventKind.THOUGHT, session_id, cycle, {"n": n})


def _dead_pid() -> int:
    """The pid of a process of this host that has ended (and been reaped)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True
    )
    return int(done.stdout)


def test_implementations_are_session_stores(store: SessionStore) -> None:
    """Every implementation is a SessionStore, usable as a context manager."""
    assert isinstance(store, SessionStore)
    with store as entered:
        assert entered is store


def test_a_closed_store_refuses_calls(open_store: OpenStore) -> None:
    """Using a closed store raises StorageError saying it is closed."""
    store = open_store()
    store.close()
    with pytest.raises(StorageError, match="closed"):
        store.list_sessions()


# --- sessions --------------------------------------------------------------------------


def test_sessions_crud_and_paging(store: SessionStore, tmp_path: Path) -> None:
    """Sessions are created, listed newest first in pages with a total, and updated."""
    for n in range(5):
        store.create_session(f"goal {n}", tmp_path, session_id=f"s{n}", created_at=1000.0 + n)
    first = store.list_sessions(limit=2)
    assert [s.id for s in first.items] == ["s4", "s3"]
    assert (first.total, first.offset, first.limit) == (5, 0, 2)
    assert [s.id for s in store.list_sessions(offset=4, limit=2).items] == ["s0"]
    assert store.list_sessions(offset=10).items == ()
    assert store.list_sessions(offset=-3, limit=-1).items == ()

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


def test_running_sessions_nobody_holds_read_as_interrupted(
    store: SessionStore, tmp_path: Path
) -> None:
    """A session stored as running is read, listed and filtered as interrupted unless a
    live lease holds it: without a lease, with an expired one, or one of a dead process."""
    for n, session_id in enumerate(["held", "unheld", "expired", "dead", "done"]):
        store.create_session("g", tmp_path, session_id=session_id, created_at=1000.0 + n)
    store.update_session_status("done", "finished")
    store.acquire_lease("held", Holder.current(), expiry=30)
    store.acquire_lease("expired", Holder.current(), expiry=30, now=1000.0)
    dead = Holder(Holder.current().hostname, _dead_pid(), "gone")
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


def test_session_ids_resolve_by_unique_prefix(store: SessionStore, tmp_path: Path) -> None:
    """An id, or the start of exactly one id, names that session; a start shared by
    several ids is refused naming them; one of none says to run `autogpt sessions`."""

    @settings(max_examples=200, deadline=None)
    @given(ids=session_id_sets, text=session_id_prefixes)
    def check(ids: set[str], text: str) -> None:
        for listed in store.list_sessions(limit=100).items:
            store.delete_session(listed.id)
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


def test_session_config_round_trips(store: SessionStore, tmp_path: Path) -> None:
    """A session's config and workspace come back as stored."""
    config = {"llm": "replay", "model": "m", "max_cycles": 5, "continuous": True}
    # Finished: a running session that nobody holds a lease on reads back as interrupted.
    created = store.create_session("g", tmp_path / "ws", config=config, status="finished")
    loaded = store.get_session(created.id)
    assert loaded == created
    assert loaded.config == config
    assert loaded.workspace == tmp_path / "ws"


def test_missing_session_names_the_id_and_the_fix(store: SessionStore) -> None:
    """Every lookup of an unknown session raises SessionNotFound naming it."""
    calls: list[Callable[[], object]] = [
        lambda: store.get_session("nope"),
        lambda: store.last_completed_cycle("nope"),
        lambda: store.load_cycles("nope"),
        lambda: store.list_events("nope"),
        lambda: store.list_artifacts("nope"),
        lambda: store.get_artifact("nope", "a1"),
        lambda: store.update_session_status("nope", "stopped"),
        lambda: store.record_cycle(CycleRecord("nope", 1)),
        lambda: store.append_event(_event("nope", 0)),
        lambda: store.add_artifact("nope", "a.txt"),
        lambda: store.session_footprint("nope"),
        lambda: store.delete_session("nope"),
        lambda: store.resolve_session_id("nope"),
    ]
    for call in calls:
        with pytest.raises(SessionNotFound, match="'nope'") as info:
            call()
        assert "autogpt sessions" in str(info.value)


def test_duplicate_session_id_is_refused(store: SessionStore, tmp_path: Path) -> None:
    """Creating a session with an id in use raises StorageError."""
    store.create_session("g", tmp_path, session_id="same")
    with pytest.raises(StorageError, match="already exists"):
        store.create_session("g", tmp_path, session_id="same")


def test_unknown_status_is_a_value_error(store: SessionStore, tmp_path: Path) -> None:
    """A status outside the known set is refused before anything is written."""
    store.create_session("g", tmp_path, session_id="s")
    with pytest.raises(ValueError, match="unknown session status"):
        store.update_session_status("s", "paused")
    with pytest.raises(ValueError, match="unknown session status"):
        store.create_session("g", tmp_path, session_id="t", status="paused")
    assert [s.id for s in store.list_sessions().items] == ["s"]


# --- cycles and events -----------------------------------------------------------------


def test_cycles_round_trip_with_messages(store: SessionStore, tmp_path: Path) -> None:
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
    assert [e.cycle for e in store.list_events("s")] == [1]


def test_last_completed_cycle_is_zero_for_a_new_session(
    store: SessionStore, tmp_path: Path
) -> None:
    """A session without cycles has last completed cycle 0."""
    store.create_session("g", tmp_path, session_id="s")
    assert store.last_completed_cycle("s") == 0
    assert store.load_cycles("s") == []


def test_events_of_a_cycle_must_be_its_session(store: SessionStore, tmp_path: Path) -> None:
    """A cycle carrying another session's event is refused before anything is written."""
    store.create_session("g", tmp_path, session_id="s")
    with pytest.raises(ValueError, match="cannot be recorded with cycle 1"):
        store.record_cycle(CycleRecord("s", 1), events=[_event("other", 1)])
    assert store.last_completed_cycle("s") == 0


def test_values_that_are_not_json_are_refused(store: SessionStore, tmp_path: Path) -> None:
    """A cycle holding a value that is not JSON (an object, NaN) is refused before anything
    is written."""
    store.create_session("g", tmp_path, session_id="s")
    with pytest.raises(TypeError):
        store.record_cycle(CycleRecord("s", 1, plan={"x": object()}))
    with pytest.raises(ValueError, match="JSON"):
        store.record_cycle(CycleRecord("s", 1, usage=float("nan")))
    assert store.last_completed_cycle("s") == 0


def test_write_many_is_all_or_nothing(store: SessionStore, tmp_path: Path) -> None:
    """A batch with a duplicate cycle writes none of its cycles."""
    store.create_session("g", tmp_path, session_id="s")
    store.record_cycle(CycleRecord("s", 1))
    batch = [CycleWrite(CycleRecord("s", 2)), CycleWrite(CycleRecord("s", 1))]
    with pytest.raises(StorageError, match="cycle 1 of session 's' is already recorded"):
        store.write_many(batch)
    assert store.last_completed_cycle("s") == 1


def test_a_provisional_cycle_is_replaced_by_its_completed_record_alone(
    store: SessionStore, tmp_path: Path
) -> None:
    """A cycle recorded as its command started (result says provisional) is replaced when
    the completed cycle is recorded; a completed cycle is never replaced."""
    store.create_session("g", tmp_path, session_id="s")
    started = {"ok": False, "error": "unknown", "provisional": True}
    store.record_cycle(CycleRecord("s", 1, result=started), events=(_event("s", 1, 1),))
    (provisional,) = store.load_cycles("s")
    assert provisional.provisional
    assert store.last_completed_cycle("s") == 1
    store.record_cycle(CycleRecord("s", 1, result={"ok": True}), events=(_event("s", 1, 2),))
    (completed,) = store.load_cycles("s")
    assert (completed.result, completed.provisional) == ({"ok": True}, False)
    # Both batches of events stay, in order.
    assert [e.data["n"] for e in store.list_events("s")] == [1, 2]
    with pytest.raises(StorageError, match="cycle 1 of session 's' is already recorded"):
        store.record_cycle(CycleRecord("s", 1, result=started))
    assert store.load_cycles("s")[0].result == {"ok": True}


@pytest.mark.parametrize("write_each", ["implementation", "interface default"])
def test_write_each_isolates_failures(store: SessionStore, tmp_path: Path, write_each: str) -> None:
    """write_each commits the good writes of a batch and reports each bad one: the
    implementation's, and the interface's default (one op at a time)."""
    store.create_session("g", tmp_path, session_id="s")
    ops: list[WriteOp] = [
        CycleWrite(CycleRecord("s", 1), events=(_event("s", 1),)),
        CycleWrite(CycleRecord("ghost", 1)),
        _event("s", 1, 7),
        StatusWrite("s", "paused"),
        StatusWrite("s", "finished", result="ok"),
    ]
    if write_each == "implementation":
        outcomes = store.write_each(ops)
    else:
        outcomes = SessionStore.write_each(store, ops)
    assert outcomes[0] is None
    assert isinstance(outcomes[1], SessionNotFound)
    assert isinstance(outcomes[2], int)
    assert isinstance(outcomes[3], StorageError)
    assert "unknown session status" in str(outcomes[3])
    assert outcomes[4] is None
    assert store.last_completed_cycle("s") == 1
    assert [e.data["n"] for e in store.list_events("s")] == [0, 7]
    assert store.get_session("s").status is SessionStatus.FINISHED


def test_events_are_listed_after_an_id(store: SessionStore, tmp_path: Path) -> None:
    """Event ids increase; list_events pages through them with after_id and limit."""
    store.create_session("g", tmp_path, session_id="s")
    ids = [store.append_event(_event("s", 0, n)) for n in range(5)]
    assert ids == sorted(ids)
    page = store.list_events("s", after_id=ids[1], limit=2)
    assert [e.id for e in page] == ids[2:4]
    assert (page[0].kind, page[0].data) == ("thought", {"n": 2})
    assert store.list_events("s", after_id=ids[-1]) == []


def test_writes_from_many_threads_all_land(store: SessionStore, tmp_path: Path) -> None:
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


# --- artifacts -------------------------------------------------------------------------


def test_artifacts_are_listed_per_session(store: SessionStore, tmp_path: Path) -> None:
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


def test_an_artifact_is_found_by_id_in_its_session_only(
    store: SessionStore, tmp_path: Path
) -> None:
    """get_artifact returns the session's artifact of that id (for a download); another
    session's, or an unknown id, is None; a taken id is refused."""
    store.create_session("g", tmp_path, session_id="s")
    store.create_session("g", tmp_path, session_id="t")
    added = store.add_artifact("s", "out/report.md", artifact_id="a1")
    assert store.get_artifact("s", "a1") == added
    assert store.get_artifact("t", "a1") is None
    assert store.get_artifact("s", "a2") is None
    with pytest.raises(StorageError, match="already exists"):
        store.add_artifact("t", "x.txt", artifact_id="a1")


# --- deleting a session ----------------------------------------------------------------


def test_delete_session_removes_its_rows_and_nothing_else(
    store: SessionStore, tmp_path: Path
) -> None:
    """delete_session removes the session, its cycles, events, artifacts and lease, says
    how many of each, and leaves other sessions alone."""
    store.create_session("g", "/ws", session_id="s", status="finished")
    store.create_session("other goal", "/ws2", session_id="other", status="finished")
    store.record_cycle(CycleRecord("s", 1), events=[_event("s", 1)], budget={"cycles": 1})
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
    # A session of the same id starts empty.
    store.create_session("g", "/ws", session_id="s")
    assert store.session_footprint("s").cycles == 0
    assert store.list_events("s") == []


def test_delete_session_refuses_a_session_another_holder_runs(open_store: OpenStore) -> None:
    """A live lease of another holder refuses the deletion (SessionInUse, nothing deleted);
    the lease taken through the same store does not, and a lapsed one does not."""
    runner, deleter = open_store(), open_store()
    for session_id in ("s", "other"):
        runner.create_session("g", "/ws", session_id=session_id, status="finished")
    runner.record_cycle(CycleRecord("s", 1))
    runner.acquire_lease("s", Holder.current(), expiry=30)
    with pytest.raises(SessionInUse, match="is being run by process"):
        deleter.delete_session("s")
    assert deleter.session_footprint("s").cycles == 1
    deleter.acquire_lease("other", Holder.current(), expiry=30)
    assert deleter.delete_session("other").id == "other"
    runner.acquire_lease("s2", Holder.current(), expiry=30, now=1000.0)
    deleter.create_session("g", "/ws", session_id="s2")
    assert deleter.delete_session("s2").id == "s2"


# --- leases ----------------------------------------------------------------------------


def test_a_live_lease_refuses_every_other_holder(store: SessionStore) -> None:
    """While a lease binds, any holder (another runtime of this process, or the holder
    itself) is refused with SessionInUse naming the session, pid, host and the fix."""
    first, second = Holder.current(), Holder.current()
    assert first.id != second.id
    store.acquire_lease("s1", first, expiry=30)
    for holder in (second, first):
        with pytest.raises(SessionInUse) as info:
            store.acquire_lease("s1", holder, expiry=30)
        message = str(info.value)
        assert message.startswith(
            f"session s1 is being run by process {os.getpid()} (this process) "
            f"on host {socket.gethostname()} since "
        )
        assert message.endswith("; wait for it to end, or stop that process")
    assert store.acquire_lease("s2", second, expiry=30).holder == second.id


def test_an_expired_lease_of_a_live_holder_is_taken_over_and_fenced(
    open_store: OpenStore, tmp_path: Path
) -> None:
    """A live holder that stopped renewing binds until its lease expires, then is taken
    over; after that its renewals, its writes to the session and check_held are refused."""
    stuck_store, taker_store = open_store(), open_store()
    stuck_store.create_session("g", tmp_path, session_id="s")
    start = time.time()
    stuck = stuck_store.acquire_lease("s", Holder.current(), expiry=30, now=start)
    stuck_store.check_held("s")
    taker = Holder.current()
    with pytest.raises(SessionInUse, match="is being run by"):
        taker_store.acquire_lease("s", taker, expiry=30, now=start + 29)
    taker_store.acquire_lease("s", taker, expiry=30, now=start + 31)

    with pytest.raises(SessionInUse, match=f"session s was taken over by process {os.getpid()}"):
        stuck_store.renew_lease(stuck, expiry=30, now=start + 32)
    with pytest.raises(SessionInUse, match="taken over"):
        stuck_store.record_cycle(CycleRecord("s", 1, result="stale"))
    with pytest.raises(SessionInUse, match="taken over"):
        stuck_store.update_session_status("s", "failed")
    with pytest.raises(SessionInUse, match="taken over"):
        stuck_store.append_event(_event("s", 1))
    # Before its own lease's expiry, the stuck store need not look (nobody can have taken
    # it then, in real time); after it, it reads the lease and learns it is taken over.
    assert stuck_store.lease_confirmed("s", now=start + 29)
    stuck_store.check_held("s", now=start + 29)
    assert not stuck_store.lease_confirmed("s", now=start + 32)
    with pytest.raises(SessionInUse, match="taken over"):
        stuck_store.check_held("s", now=start + 32)
    taker_store.record_cycle(CycleRecord("s", 1, result="fresh"))
    stuck_store.release_lease(stuck)  # leaves the taker's lease alone
    stuck_store.check_held("s", now=start + 32)  # released: no longer fenced
    assert not stuck_store.lease_confirmed("s")

    current = taker_store.get_lease("s")
    assert current is not None
    assert current.holder == taker.id
    assert [c.result for c in taker_store.load_cycles("s")] == ["fresh"]
    assert taker_store.get_session("s").status is SessionStatus.RUNNING


def test_a_dead_holder_on_this_host_is_taken_over_at_once(store: SessionStore) -> None:
    """An unexpired lease whose holder process on this host has ended is taken over at
    once; one held from another host binds until it expires."""
    pid = _dead_pid()
    store.acquire_lease("here", Holder(socket.gethostname(), pid, "gone"), expiry=30)
    store.acquire_lease("there", Holder("elsewhere.invalid", pid, "far"), expiry=30)
    mine = Holder.current()
    assert store.acquire_lease("here", mine, expiry=30).holder == mine.id
    with pytest.raises(SessionInUse, match=f"process {pid} on host elsewhere.invalid"):
        store.acquire_lease("there", mine, expiry=30)


def test_a_lease_renews_releases_and_reads_back(store: SessionStore) -> None:
    """renew_lease moves the expiry (even of a lapsed lease nobody took); release_lease
    removes it, and again is harmless; a lease released or never taken renews no more."""
    holder = Holder.current()
    lease = store.acquire_lease("s", holder, expiry=30, now=1000.0)
    assert store.get_lease("s") == lease
    renewed = store.renew_lease(lease, expiry=30, now=2000.0)
    assert (renewed.acquired_at, renewed.renewed_at, renewed.expires_at) == (1000, 2000, 2030)
    assert store.get_lease("s") == renewed
    store.release_lease(renewed)
    store.release_lease(renewed)
    assert store.get_lease("s") is None
    with pytest.raises(SessionInUse, match="session s was taken over"):
        store.renew_lease(renewed, expiry=30)


# --- the async facade over each implementation -----------------------------------------


async def test_async_store_group_commits_concurrent_sessions(
    store: SessionStore, tmp_path: Path
) -> None:
    """Many concurrent sessions writing cycles through AsyncStore all land, in order."""
    astore = AsyncStore(store)
    sessions = [f"s{n}" for n in range(50)]
    for session_id in sessions:
        await astore.create_session("g", tmp_path, session_id=session_id)
    batches: list[int] = []
    write_each = store.write_each

    def counting(ops: list[object]) -> object:
        batches.append(len(ops))
        return write_each(ops)  # type: ignore[arg-type]

    store.write_each = counting  # type: ignore[method-assign,assignment]

    async def run(session_id: str) -> None:
        for n in range(1, 6):
            await astore.record_cycle(CycleRecord(session_id, n), events=[_event(session_id, n)])
        await astore.update_session_status(session_id, "finished", result="ok")

    async with trio.open_nursery() as nursery:
        for session_id in sessions:
            nursery.start_soon(run, session_id)
    assert sum(batches) == 50 * 6
    assert len(batches) < 50 * 6 / 4  # committed together, not one by one
    for session_id in sessions:
        assert await astore.last_completed_cycle(session_id) == 5
        assert [e.cycle for e in await astore.list_events(session_id)] == [1, 2, 3, 4, 5]
        assert (await astore.get_session(session_id)).status is SessionStatus.FINISHED
    page = await astore.list_sessions(limit=100)
    assert page.total == 50
    await astore.flush()


async def test_async_store_failures_stay_with_their_caller(
    store: SessionStore, tmp_path: Path
) -> None:
    """One caller's bad write raises for that caller only; its batch-mates succeed."""
    astore = AsyncStore(store)
    await astore.create_session("g", tmp_path, session_id="good")
    results: dict[str, object] = {}

    async def write(session_id: str) -> None:
        try:
            await astore.record_cycle(CycleRecord(session_id, 1))
            results[session_id] = "ok"
        except SessionNotFound as exc:
            results[session_id] = exc

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write, "good")
        nursery.start_soon(write, "ghost")
    assert results["good"] == "ok"
    assert isinstance(results["ghost"], SessionNotFound)
    assert await astore.append_event(_event("good", 1)) > 0


async def test_async_store_reaches_every_part_of_the_store(
    store: SessionStore, tmp_path: Path
) -> None:
    """The facade's calls reach the store: sessions, cycles, artifacts, leases, deletion
    (after the writes queued before it)."""
    astore = AsyncStore(store)
    await astore.create_session("g", tmp_path, session_id="s", status="finished")
    assert await astore.resolve_session_id("s") == "s"
    artifact = await astore.add_artifact("s", "out.txt")
    assert (await astore.list_artifacts("s")).items == (artifact,)
    assert await astore.get_artifact("s", artifact.id) == artifact
    assert (await astore.load_cycles("s")) == []
    lease = await astore.acquire_lease("s", Holder.current(), expiry=30)
    lease = await astore.renew_lease(lease, expiry=30)
    await astore.check_held("s")
    assert await astore.get_lease("s") == lease
    await astore.release_lease(lease)
    await astore.record_cycle(CycleRecord("s", 1))
    assert (await astore.session_footprint("s")).cycles == 1
    assert (await astore.delete_session("s")).artifacts == 1
    with pytest.raises(SessionNotFound):
        await astore.get_session("s")
