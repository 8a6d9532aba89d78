"""The ``memory_sqlite`` plugin: its hooks, its commands, and its database (schema,
migrations, recall, forgetting, group commit)."""

from __future__ import annotations

import inspect
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import trio
import yaml

import autogpt_plugins.memory_sqlite as memory_plugin
import hookspecs
from autogpt_core._errors import StorageError
from autogpt_core.store._sqlite import Store
from autogpt_plugins.memory_sqlite import MemoryDB, SQLiteMemory
from autogpt_plugins.memory_sqlite import _migrations as memory_migrations
from hookspecs import (
    BLOCKING_ATTR,
    CommandContext,
    MemoryItem,
    MemoryQuery,
    PluginSettings,
    RuntimeView,
    SessionView,
    hookimpl,
)

PLUGIN_DIR = Path(memory_plugin.__file__).parent
SCHEMA = Path(hookspecs.__file__).parent / "manifest.schema.json"


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[SQLiteMemory]:
    plugin = SQLiteMemory()
    plugin.configure(PluginSettings(plugin_id="memory_sqlite", data_dir=tmp_path))
    yield plugin
    plugin.close()


def _session(session_id: str, goal: str = "a goal", workspace: Path = Path("ws")) -> SessionView:
    return SessionView(id=session_id, goal=goal, workspace=workspace)


async def _no_user(question: str) -> str | None:
    return None


def _ctx(session: SessionView) -> CommandContext:
    return CommandContext(
        session=session,
        plugin_id="memory_sqlite",
        settings=PluginSettings(plugin_id="memory_sqlite"),
        ask_user=_no_user,
    )


def test_hooks_store_recall_and_forget(memory: SQLiteMemory, tmp_path: Path) -> None:
    """memory_store returns an id, memory_recall finds the item, memory_forget removes it."""
    session = _session("s1")
    item_id = memory.memory_store(
        session, MemoryItem(text="The API key lives in .env", session_id="")
    )
    (hit,) = memory.memory_recall(session, MemoryQuery("where is the api key"))
    assert hit.item.id == item_id
    assert hit.item.session_id == "s1"  # an item without a session gets the caller's
    assert hit.backend == "memory_sqlite"
    assert memory.memory_forget(session, MemoryQuery("")) == 1
    assert memory.memory_recall(session, MemoryQuery("api key")) == []
    assert (tmp_path / "memory.sqlite3").is_file()


def test_remember_and_recall_commands(memory: SQLiteMemory) -> None:
    """remember confirms with the id; recall lists matches, or says none match."""
    ctx = _ctx(_session("s1"))
    answer = memory.remember(ctx, "Tests run with pytest -q")
    assert answer.startswith("Remembered (id ")
    memory.remember(ctx, "The docs are built with mkdocs")
    assert memory.recall(ctx, "pytest") == "1. Tests run with pytest -q"
    listing = memory.recall(ctx, "pytest mkdocs", limit=20)
    assert listing.splitlines()[0].startswith("1. ")
    assert len(listing.splitlines()) == 2
    assert memory.recall(ctx, "kubernetes") == "No memories match 'kubernetes' in this session."
    assert memory.recall(ctx, "kubernetes", scope="all").endswith("in any session.")


def test_recall_across_sessions(memory: SQLiteMemory) -> None:
    """What one session remembers, another recalls with scope 'all' but not 'session'."""
    memory.remember(_ctx(_session("earlier")), "The staging server is called kestrel")
    later = _ctx(_session("later"))
    assert "No memories match" in memory.recall(later, "staging server")
    assert memory.recall(later, "staging server", scope="all") == (
        "1. The staging server is called kestrel"
    )


def test_recall_command_finds_notes_not_cycle_observations(memory: SQLiteMemory) -> None:
    """The recall command searches what was remembered, not the core's cycle records,
    so recalls never nest earlier recalls."""
    ctx = _ctx(_session("s"))
    memory.remember(ctx, "the haiku is in haiku.txt")
    memory.memory_store(
        _session("s"),
        MemoryItem(
            text="Cycle 3: recall(haiku) -> 1. the haiku", session_id="s", kind="observation"
        ),
    )
    assert memory.recall(ctx, "haiku") == "1. the haiku is in haiku.txt"


def test_long_memories_are_shortened_for_the_model(memory: SQLiteMemory) -> None:
    """Recall output shows at most 500 characters of a memory, whitespace collapsed."""
    ctx = _ctx(_session("s"))
    memory.remember(ctx, "needle\n\n" + "word " * 300)
    (line,) = memory.recall(ctx, "needle").splitlines()
    assert line.startswith("1. needle word word")
    assert len(line) == len("1. ") + 500
    assert line.endswith("...")


async def test_forget_command_forgets_in_every_backend(tmp_path: Path) -> None:
    """forget goes through memory_forget to every backend (this one and another) and says
    how many it forgot; this session's notes only; blank words forget nothing."""
    from tests.scripted import _reply, _run, _tool_answers

    class OtherBackend:
        def __init__(self) -> None:
            self.asked: list[MemoryQuery] = []

        @hookimpl
        def memory_forget(self, session: Any, query: MemoryQuery) -> int:
            self.asked.append(query)
            return 2 if "staging" in query.text else 0

    other = OtherBackend()
    replies = [
        _reply("remember", {"text": "The staging server is called kestrel"}, "r1"),
        _reply("remember", {"text": "Tests run with pytest"}, "r2"),
        _reply("forget", {"query": "   "}, "f0"),
        _reply("forget", {"query": "staging"}, "f1"),
        _reply("forget", {"query": "kubernetes"}, "f2"),
        _reply("recall", {"query": "staging pytest"}, "c1"),
        _reply("finish", {"result": "ok"}, "end"),
    ]
    _, provider, _ = await _run(tmp_path, replies, extra_plugins=[other])
    answers = [_tool_answers(request)[-1] for request in provider.requests[3:7]]
    assert "Nothing forgotten: give words" in answers[0]
    assert "Forgot 3 memories matching 'staging'." in answers[1]
    assert "No memories of this session match 'kubernetes'" in answers[2]
    assert "Tests run with pytest" in answers[3]
    assert "kestrel" not in answers[3]
    assert [(q.text, q.scope, q.kinds) for q in other.asked] == [
        ("staging", "session", ("note",)),
        ("kubernetes", "session", ("note",)),
    ]


def test_path_setting_is_taken_from_the_data_dir(tmp_path: Path) -> None:
    """A relative 'path' is inside the data dir; an absolute one is used as is."""
    plugin = SQLiteMemory()
    plugin.configure(
        PluginSettings(plugin_id="memory_sqlite", values={"path": "mem/m.db"}, data_dir=tmp_path)
    )
    assert plugin.path() == tmp_path / "mem" / "m.db"
    plugin.memory_store(_session("s"), MemoryItem(text="x", session_id="s"))
    assert (tmp_path / "mem" / "m.db").is_file()
    other = tmp_path / "elsewhere.db"
    plugin.configure(PluginSettings(plugin_id="memory_sqlite", values={"path": str(other)}))
    assert plugin.path() == other
    plugin.close()


def test_no_data_dir_and_no_path_is_a_clear_error() -> None:
    """Without a data dir or a 'path' setting, the first use says what to set."""
    plugin = SQLiteMemory()
    with pytest.raises(StorageError, match="set its 'path' setting"):
        plugin.memory_recall(_session("s"), MemoryQuery("x"))


def test_memories_persist_in_the_plugins_own_database(memory: SQLiteMemory) -> None:
    """The plugin's file is a memory database of its own: a MemoryDB opened on it sees the
    memories, and the session store refuses it rather than add its tables."""
    memory.remember(_ctx(_session("s")), "persisted fact")
    path = memory.path()
    memory.close()
    with MemoryDB(path) as db:
        (hit,) = db.memory_recall(MemoryQuery("fact"), "s")
    assert hit.item.text == "persisted fact"
    with pytest.raises(StorageError, match="another application's SQLite database"):
        Store(path)


# --- the module as a plugin ------------------------------------------------------------


def _manifest() -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(
        (PLUGIN_DIR / "autogpt-plugin.yaml").read_text(encoding="utf-8")
    )
    return manifest


def test_manifest_is_valid_and_declares_the_registered_commands() -> None:
    """The manifest validates, and each command's function takes its declared parameters."""
    manifest = _manifest()
    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text(encoding="utf-8"))).validate(
        manifest
    )
    assert manifest["permissions"] == []
    registered: dict[str, Any] = {}
    memory_plugin.register_commands(register=lambda name, fn: registered.setdefault(name, fn))
    declared = {command["name"]: command for command in manifest["capabilities"]["commands"]}
    assert registered.keys() == declared.keys() == {"remember", "recall", "forget"}
    for name, function in registered.items():
        params = inspect.signature(function).parameters
        properties = declared[name]["parameters"]["properties"]
        assert set(params) - {"ctx"} == set(properties), name
        for param in params.values():
            if param.name in properties and "default" in properties[param.name]:
                assert param.default == properties[param.name]["default"], (name, param.name)
        # Disk work runs in a worker thread; forget awaits the core's memory_forget hook.
        assert getattr(function, BLOCKING_ATTR, False) or inspect.iscoroutinefunction(function)
    assert set(manifest["config"]["settings"]) == {"path"}


async def test_module_is_a_valid_plugin_end_to_end(tmp_path: Path) -> None:
    """pluggy accepts the module; its hooks work through the awaitable hook caller:
    stores are group-committed, the goal's memories are found at session start."""
    from autogpt_core.hooks._hookcall import HookManager

    pm = HookManager()
    pm.register(memory_plugin, name="memory_sqlite")
    pm.check_pending()
    for name in ("memory_recall", "memory_forget"):
        assert getattr(getattr(memory_plugin, name), BLOCKING_ATTR, False), name
    assert inspect.iscoroutinefunction(memory_plugin.memory_store)

    pm.hook.configure(settings=PluginSettings(plugin_id="memory_sqlite", data_dir=tmp_path))
    try:
        earlier, now = _session("earlier"), _session("now", goal="find the release checklist")
        async with trio.open_nursery() as nursery:
            for n in range(3):  # concurrent stores share a transaction
                item = MemoryItem(text=f"filler {n}", session_id="earlier")
                nursery.start_soon(
                    lambda item=item: pm.ahook.memory_store(session=earlier, item=item)
                )
        (item_id,) = await pm.ahook.memory_store(
            session=earlier,
            item=MemoryItem(text="The release checklist is in RELEASE.md", session_id="earlier"),
        )
        (hits,) = await pm.ahook.memory_recall(
            session=now, query=MemoryQuery("checklist", scope="all")
        )
        assert [hit.item.id for hit in hits] == [item_id]
        assert (await memory_plugin.remember(_ctx(now), "second")).startswith("Remembered")
        forgotten = await pm.ahook.memory_forget(session=now, query=MemoryQuery("", scope="all"))
        assert forgotten == [5]
    finally:
        await pm.ahook.autogpt_shutdown(
            runtime=RuntimeView(core_version="0.1.0", data_dir=tmp_path)
        )


def test_recall_shows_a_note_remembered_twice_once(memory: SQLiteMemory) -> None:
    """The same note stored by several sessions is listed once."""
    for session_id in ("a", "b", "c"):
        memory.remember(_ctx(_session(session_id)), "the key is under the mat")
    memory.remember(_ctx(_session("a")), "the mat is blue")
    listing = memory.recall(_ctx(_session("a")), "mat", scope="all")
    texts = sorted(line.split(". ", 1)[1] for line in listing.splitlines())
    assert texts == ["the key is under the mat", "the mat is blue"]


# --- the database: recall and forgetting -----------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> Iterator[MemoryDB]:
    with MemoryDB(tmp_path / "data" / "memory.sqlite3") as opened:
        yield opened


def _remember(db: MemoryDB, session_id: str, *texts: str) -> list[str]:
    return [db.memory_store(MemoryItem(text=t, session_id=session_id)) for t in texts]


def _rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_each_session_has_its_own_range_of_rows(db: MemoryDB) -> None:
    """A session's items have seq in its slot's range (what session recall asks FTS5
    for); a session whose items are all forgotten leaves no trace of its id."""
    for n in range(3):
        _remember(db, "a", f"a note {n}")
        _remember(db, "b", f"b note {n}")
    slots = dict(_rows(db.path, "SELECT session_id, slot FROM memory_sessions"))
    rows = _rows(db.path, "SELECT session_id, seq FROM memory ORDER BY seq")
    for session_id, seq in rows:
        assert seq >> memory_migrations.SLOT_BITS == slots[session_id]
    assert [seq & 0xFFFFFFFF for session_id, seq in rows if session_id == "a"] == [1, 2, 3]
    plan = _rows(
        db.path,
        "EXPLAIN QUERY PLAN SELECT rowid FROM memory_fts WHERE memory_fts MATCH 'note'"
        " AND rowid BETWEEN 1 AND 2",
    )
    assert any("VIRTUAL TABLE INDEX" in str(step) and "><" in str(step) for step in plan), plan
    db.memory_forget(MemoryQuery(""), "a")
    assert _rows(db.path, "SELECT session_id FROM memory_sessions") == [("b",)]


def test_damaged_metadata_names_the_file_the_item_and_the_fix(db: MemoryDB) -> None:
    """An item whose metadata does not read back raises StorageError naming the file, the
    item and how to delete it; never a JSONDecodeError."""
    db.memory_store(MemoryItem("a note", "s", id="m1"))
    conn = sqlite3.connect(db.path, isolation_level=None)
    conn.execute("UPDATE memory SET metadata = ?", (b"\xff",))
    conn.close()
    for query in (MemoryQuery("note"), MemoryQuery("")):
        with pytest.raises(StorageError) as info:
            db.memory_recall(query, "s")
        message = str(info.value)
        assert f"The memory database {db.path} is damaged: memory item m1: its metadata" in message
        assert "DELETE FROM memory WHERE id = 'm1'" in message


# --- the database: its file and migrations ---------------------------------------------


def test_a_0_1_memory_file_opens_upgraded(tmp_path: Path) -> None:
    """A memory file as autogpt-core 0.1.0 made it (a session store file whose memory
    tables hold the items) opens: every item is recalled as before, in its session's
    range; the empty session tables are dropped; the migrations are recorded."""
    from tests.test_store_migrations import make_0_1_file

    path = tmp_path / "memory.sqlite3"
    memories = (("a", "alpha deploy note"), ("b", "beta deploy note"), ("a", "second alpha"))
    make_0_1_file(path, memories=memories)
    with MemoryDB(path) as db:
        alpha = db.memory_recall(MemoryQuery("alpha"), "a")
        assert sorted(h.item.text for h in alpha) == ["alpha deploy note", "second alpha"]
        (hit,) = db.memory_recall(MemoryQuery("deploy"), "b")
        assert (hit.item.id, hit.item.metadata, hit.item.created_at) == ("m1", {"n": 1}, 101.0)
        assert len(db.memory_recall(MemoryQuery("deploy", scope="all"), "a")) == 2
        assert [h.item.id for h in db.memory_recall(MemoryQuery(""), "a")] == ["m2", "m0"]
        db.memory_store(MemoryItem("third alpha", "a"))
    names = {row[0] for row in _rows(path, "SELECT name FROM sqlite_master")}
    assert not names & {"sessions", "cycles", "events", "artifacts", "leases"}
    assert _rows(path, "PRAGMA application_id") == [(memory_migrations.APPLICATION_ID,)]
    assert _rows(path, "PRAGMA user_version") == [(len(memory_migrations.MIGRATIONS),)]
    assert _rows(path, "SELECT number, name FROM memory_migrations") == [
        (n, f.__name__) for n, f in enumerate(memory_migrations.MIGRATIONS, 1)
    ]
    slots = dict(_rows(path, "SELECT session_id, slot FROM memory_sessions"))
    for session_id, seq in _rows(path, "SELECT session_id, seq FROM memory"):
        assert seq >> memory_migrations.SLOT_BITS == slots[session_id]
    assert _rows(path, "PRAGMA integrity_check") == [("ok",)]


def test_a_0_1_file_holding_sessions_keeps_them(tmp_path: Path) -> None:
    """If the plugin's path was the 0.1.0 session store itself, its sessions stay."""
    from tests.test_store_migrations import make_0_1_file

    path = tmp_path / "shared.sqlite3"
    make_0_1_file(path, memories=(("s", "a note"),))
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "INSERT INTO sessions (id, goal, status, created_at, updated_at, workspace)"
        " VALUES ('s', 'g', 'finished', 1.0, 1.0, '/ws')"
    )
    conn.close()
    with MemoryDB(path) as db:
        assert len(db.memory_recall(MemoryQuery("note"), "s")) == 1
    assert _rows(path, "SELECT id FROM sessions") == [("s",)]


def test_the_session_store_is_refused_untouched(tmp_path: Path) -> None:
    """A 'path' naming the session store is refused, naming the setting to fix; the file
    is not changed."""
    path = tmp_path / "sessions.sqlite3"
    Store(path).close()
    before = path.read_bytes()
    with pytest.raises(StorageError, match="another application's SQLite database") as info:
        MemoryDB(path)
    assert "set the memory_sqlite 'path' setting to a file of its own" in str(info.value)
    assert path.read_bytes() == before


def test_a_newer_or_empty_memory_file_is_refused(tmp_path: Path) -> None:
    """A file of a newer plugin, or an empty (truncated) one, raises StorageError naming
    it and the fix."""
    path = tmp_path / "memory.sqlite3"
    MemoryDB(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {len(memory_migrations.MIGRATIONS) + 1}")
    conn.close()
    with pytest.raises(StorageError, match="written by a newer memory_sqlite plugin"):
        MemoryDB(path)
    empty = tmp_path / "empty.sqlite3"
    empty.write_bytes(b"")
    with pytest.raises(StorageError, match=r"is empty \(0 bytes\)"):
        MemoryDB(empty)
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(b"not a database\n" * 200)
    with pytest.raises(StorageError, match="not a readable SQLite database"):
        MemoryDB(garbage)
    closed = MemoryDB(tmp_path / "closed.sqlite3")
    closed.close()
    with pytest.raises(StorageError, match="is closed"):
        closed.memory_recall(MemoryQuery("x"), "s")
