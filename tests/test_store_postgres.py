"""What only the PostgreSQL store can show: its connection errors, its migrations under an
advisory lock, stores of several processes at once, and the runtime choosing it by URL.
What every implementation must do is in tests/test_store_interface.py.

Each test gets a database of its own on a server started for the test run
(tests/pgserver.py, tests/conftest.py)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import attrs
import psycopg
import pytest

from autogpt_core import open_store
from autogpt_core._errors import SessionInUse, StorageError
from autogpt_core.agent._options import RunOptions
from autogpt_core.agent._runtime import Runtime
from autogpt_core.cli._cli import main
from autogpt_core.plugins._loader import load
from autogpt_core.store._lease import Holder
from autogpt_core.store._open import is_postgres_url, shown_location
from autogpt_core.store._postgres import PostgresStore
from autogpt_core.store._postgres_migrations import POSTGRES_MIGRATIONS, POSTGRES_SCHEMA_VERSION
from autogpt_core.store._records import CycleRecord
from autogpt_core.store._sqlite import Store
from hookspecs import Event, EventKind
from tests.pgserver import PostgresServer
from tests.scripted import GOAL, ScriptedProvider, _config, _reply


def _migrations(url: str) -> list[tuple[int, str]]:
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT number, name FROM store_migrations ORDER BY number")
        return [(int(number), str(name)) for number, name in rows]


def test_a_server_that_is_not_there_is_a_storage_error_with_the_fix(
    postgres_server: PostgresServer,
) -> None:
    """A URL nothing answers at fails at once with StorageError naming the URL (without
    its password) and what to check."""
    url = f"postgresql://me:s3cret@127.0.0.1:{postgres_server.port + 1}/nowhere"
    with pytest.raises(StorageError) as info:
        PostgresStore(url)
    message = str(info.value)
    assert "Cannot connect to the session store" in message
    assert f"postgresql://me@127.0.0.1:{postgres_server.port + 1}/nowhere" in message
    assert "Fix: check that the PostgreSQL server runs" in message
    assert "s3cret" not in message


def test_a_missing_database_says_to_create_it(postgres_server: PostgresServer) -> None:
    with pytest.raises(StorageError, match=r"does not exist.*createdb"):
        PostgresStore(postgres_server.url("no_such_database"))


def test_stores_opening_a_new_database_at_once_migrate_it_once(postgres_url: str) -> None:
    """Processes starting together on an empty database all open it; each migration is
    applied once (the advisory lock), and reopening applies nothing."""
    stores: list[PostgresStore] = []
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            stores.append(PostgresStore(postgres_url))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        assert len(stores) == 6
        expected = [(n, f.__name__) for n, f in enumerate(POSTGRES_MIGRATIONS, 1)]
        assert _migrations(postgres_url) == expected
        stores[0].create_session("g", "/ws", session_id="s")
        assert stores[-1].get_session("s").goal == "g"
    finally:
        for store in stores:
            store.close()
    with PostgresStore(postgres_url):
        pass
    assert len(_migrations(postgres_url)) == POSTGRES_SCHEMA_VERSION


def test_a_newer_schema_is_refused(postgres_url: str) -> None:
    PostgresStore(postgres_url).close()
    with psycopg.connect(postgres_url) as conn:
        conn.execute(
            "INSERT INTO store_migrations (number, name) VALUES (%s, 'from_the_future')",
            (POSTGRES_SCHEMA_VERSION + 1,),
        )
    with pytest.raises(StorageError, match="newer autogpt-core.*Fix: upgrade"):
        PostgresStore(postgres_url)


def test_another_applications_tables_are_refused_untouched(postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn:
        conn.execute("CREATE TABLE sessions (name text)")
    with pytest.raises(StorageError, match="another application's"):
        PostgresStore(postgres_url)
    with psycopg.connect(postgres_url) as conn:
        row = conn.execute("SELECT to_regclass('store_migrations')").fetchone()
    assert row == (None,)


def test_damaged_json_names_the_session_the_column_and_the_fix(postgres_url: str) -> None:
    """JSON of the wrong shape (a hand edit) is a StorageError naming the column; the
    listing marks that session and lists the others."""
    with PostgresStore(postgres_url) as store:
        store.create_session("g", "/ws", session_id="bad", status="finished")
        store.create_session("g", "/ws", session_id="good", status="finished")
        with psycopg.connect(postgres_url) as conn:
            conn.execute("UPDATE sessions SET config = '[1, 2]' WHERE id = 'bad'")
        with pytest.raises(StorageError) as info:
            store.get_session("bad")
        assert "its config column holds" in str(info.value)
        assert "autogpt sessions delete bad" in str(info.value)
        listed = {s.id: s.damage for s in store.list_sessions().items}
        assert listed["good"] == ""
        assert "config column" in listed["bad"]
        assert store.delete_session("bad").id == "bad"


def test_json_reads_back_exactly_as_written(postgres_url: str) -> None:
    """Values keep their key order, their floats and their NUL characters (json, not
    jsonb)."""
    with PostgresStore(postgres_url) as store:
        store.create_session("g", "/ws", session_id="s")
        plan = {"z": 1e20, "a": "nul \x00 here", "m": [1.5, None, True]}
        store.record_cycle(CycleRecord("s", 1, plan=plan))
        (loaded,) = store.load_cycles("s")
    assert loaded.plan == plan
    assert isinstance(loaded.plan, dict)
    assert list(loaded.plan) == ["z", "a", "m"]
    assert isinstance(loaded.plan["z"], float)


def test_of_many_stores_acquiring_one_lease_at_once_one_gets_it(postgres_url: str) -> None:
    stores = [PostgresStore(postgres_url) for _ in range(6)]
    won: list[str] = []
    refused: list[SessionInUse] = []
    barrier = threading.Barrier(len(stores))

    def acquire(store: PostgresStore) -> None:
        barrier.wait()
        try:
            won.append(store.acquire_lease("s", Holder.current(), expiry=30).holder)
        except SessionInUse as exc:
            refused.append(exc)

    threads = [threading.Thread(target=acquire, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert len(won) == 1
        assert len(refused) == len(stores) - 1
        lease = stores[0].get_lease("s")
        assert lease is not None
        assert lease.holder == won[0]
    finally:
        for store in stores:
            store.close()


def test_event_ids_are_committed_in_order_across_stores(postgres_url: str) -> None:
    """Events appended through several stores at once (as several processes would) get
    increasing ids, and a reader paging by the last id seen misses none of them."""
    stores = [PostgresStore(postgres_url) for _ in range(4)]
    stores[0].create_session("g", "/ws", session_id="s", status="finished")
    seen: list[int] = []
    done = threading.Event()

    def write(store: PostgresStore) -> None:
        for n in range(40):
            store.append_event(Event(EventKind.THOUGHT, "s", 0, {"n": n}))

    def read() -> None:
        last = 0
        while True:
            finished = done.is_set()
            page = stores[0].list_events("s", after_id=last)
            seen.extend(event.id for event in page)
            last = page[-1].id if page else last
            if finished and not page:
                return

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(store,)) for store in stores[1:]]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    done.set()
    reader.join()
    try:
        everything = [event.id for event in stores[0].list_events("s")]
        assert len(everything) == 3 * 40
        assert seen == everything
    finally:
        for store in stores:
            store.close()


def test_open_store_chooses_by_url(tmp_path: Path, postgres_url: str) -> None:
    assert is_postgres_url(postgres_url)
    assert not is_postgres_url(tmp_path / "postgresql:" / "x")
    with open_store(postgres_url) as store:
        assert isinstance(store, PostgresStore)
    with open_store(tmp_path / "sessions.sqlite3") as store:
        assert isinstance(store, Store)
    assert shown_location("postgresql://u:pw@h:5/db?sslmode=require") == "postgresql://u@h:5/db"


async def test_the_runtime_runs_a_session_in_the_configured_postgres_store(
    tmp_path: Path, postgres_url: str
) -> None:
    """``store:`` in the config puts the sessions in PostgreSQL; the data directory gets
    no sessions.sqlite3."""
    cfg = attrs.evolve(_config(tmp_path), store=postgres_url)
    plugins = load(cfg, environ={})
    replies = [
        _reply("write_file", {"path": "notes.txt", "content": "hi"}, "c1"),
        _reply("finish", {"result": "done"}, "c2"),
    ]
    provider = ScriptedProvider(replies)
    plugins.providers["scripted"] = ("tests", lambda options: provider)
    async with Runtime(cfg, plugins=plugins) as rt:
        outcome = await rt.run(GOAL, RunOptions(llm="scripted", workspace=tmp_path / "ws"))
    assert outcome.status == "finished"
    with PostgresStore(postgres_url) as store:
        (session,) = store.list_sessions().items
        assert session.status == "finished"
        assert [c.number for c in store.load_cycles(session.id)] == [1, 2]
        kinds = [e.kind for e in store.list_events(session.id)]
        assert store.get_lease(session.id) is None
    assert kinds[0] == "session_start"
    assert kinds[-1] == "session_end"
    assert not (tmp_path / "data" / "sessions.sqlite3").exists()


def test_the_cli_lists_and_resolves_the_configured_postgres_sessions(
    tmp_path: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`autogpt sessions` and `autogpt config` read ``store:`` from the config file."""
    config = tmp_path / "config.yaml"
    config.write_text(f"store: {postgres_url}\n")
    with PostgresStore(postgres_url) as store:
        store.create_session("a goal", tmp_path / "ws", session_id="abc123", status="finished")
    assert main(["--config", str(config), "sessions", "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert (listed["id"], listed["goal"], listed["status"]) == ("abc123", "a goal", "finished")
    assert main(["--config", str(config), "config", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sessions"] == shown_location(postgres_url)
    assert not (Path(os.environ["AUTOGPT_DATA_DIR"]) / "sessions.sqlite3").exists()


def test_listeners_hear_of_every_committed_write_and_of_no_failed_one(postgres_url: str) -> None:
    """``listen`` reports each session a batch of writes committed to (events, cycles,
    statuses), from another store on the database, as another process's would be; a
    write that fails is not reported; it is ready before the first report."""
    heard: list[str] = []
    stop = threading.Event()
    ready = threading.Event()
    with PostgresStore(postgres_url) as listening, PostgresStore(postgres_url) as writing:
        a = writing.create_session("goal a", "ws/a").id
        b = writing.create_session("goal b", "ws/b").id

        def on_change(session_id: str) -> None:
            heard.append(session_id)
            if len(heard) == 4:
                stop.set()

        def on_ready() -> None:
            assert heard == []
            ready.set()

        thread = threading.Thread(
            target=listening.listen, args=(on_change, stop), kwargs={"on_ready": on_ready}
        )
        thread.start()
        try:
            assert ready.wait(30)
            writing.append_event(Event(EventKind.MESSAGE, a, 0, {"text": "x"}))
            with pytest.raises(StorageError):
                writing.append_event(Event(EventKind.MESSAGE, "no-such-session", 0))
            writing.record_cycle(CycleRecord(session_id=b, number=1))
            writing.update_session_status(a, "finished", result="done")
            outcomes = writing.write_each(
                [
                    Event(EventKind.MESSAGE, "no-such-session", 0),
                    Event(EventKind.MESSAGE, b, 1),
                ]
            )
            assert isinstance(outcomes[0], StorageError)
        finally:
            thread.join(30)  # it stops itself once it heard four
            stop.set()
            thread.join(30)
        assert not thread.is_alive()
    assert heard == [a, b, a, b]
