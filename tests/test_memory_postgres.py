"""The ``memory_postgres`` plugin: on instead of ``memory_sqlite`` when the session store is
PostgreSQL, its tables in the store's database, its migrations, its errors, and a real
``autogpt run`` keeping its memories there. Recall itself is tests/test_memory_backends.py's
(the contract both backends run)."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import psycopg
import pytest
import trio

import autogpt_plugins.memory_postgres as memory_plugin
from autogpt_core._config import Config
from autogpt_core._errors import StorageError
from autogpt_core.hooks._hookcall import HookManager
from autogpt_core.plugins._loader import scan
from autogpt_core.plugins._manifest import load_manifest
from autogpt_core.plugins._settings import resolve_settings
from autogpt_plugins.memory_postgres import PostgresMemory, PostgresMemoryDB
from hookspecs import MemoryItem, MemoryQuery, PluginSettings, RuntimeView, SessionView

from .clirun import autogpt, cli_env

PLUGIN_DIR = Path(memory_plugin.__file__).parent
MANIFEST = load_manifest(PLUGIN_DIR / "autogpt-plugin.yaml")


def _status(config: Config, plugin_id: str) -> str:
    (record,) = [r for r in scan(config) if r.id == plugin_id]
    return record.status


@pytest.mark.parametrize(
    ("store", "on", "off"),
    [
        ("", "memory_sqlite", "memory_postgres"),
        ("sessions.sqlite3", "memory_sqlite", "memory_postgres"),
        ("postgresql://me@db.example/autogpt", "memory_postgres", "memory_sqlite"),
        ("postgres://me@db.example/autogpt", "memory_postgres", "memory_sqlite"),
    ],
)
def test_the_store_chooses_the_memory_plugin(tmp_path: Path, store: str, on: str, off: str) -> None:
    """With a PostgreSQL store memory_postgres is on and memory_sqlite off, with a SQLite
    one the other way round; what the user enables or disables still wins."""
    config = Config(path=tmp_path / "config.yaml", data_dir=tmp_path, store=store)
    assert (_status(config, on), _status(config, off)) == ("enabled", "disabled")
    chosen = attrs.evolve(config, enable=frozenset({off}), disable=frozenset({on}))
    assert (_status(chosen, on), _status(chosen, off)) == ("disabled", "enabled")


def test_only_a_plugin_sharing_the_store_is_told_where_it_is(tmp_path: Path) -> None:
    """PluginSettings.store reaches memory_postgres (shares_store), not memory_sqlite; a
    password in the URL counts as a secret, so it is masked everywhere."""
    url = "postgresql://me:s3cr%21t@db.example/autogpt"
    settings, secrets, problems = resolve_settings(MANIFEST, {}, data_dir=tmp_path, store=url)
    assert (settings.store, problems) == (url, [])
    assert set(secrets) == {"s3cr%21t", "s3cr!t"}
    sqlite_manifest = load_manifest(PLUGIN_DIR.parent / "memory_sqlite" / "autogpt-plugin.yaml")
    other, other_secrets, _ = resolve_settings(sqlite_manifest, {}, data_dir=tmp_path, store=url)
    assert (other.store, other_secrets) == (None, [])


def test_the_url_setting_beats_the_store_and_no_database_is_a_clear_error() -> None:
    memory = PostgresMemory()
    memory.configure(
        PluginSettings(plugin_id="memory_postgres", values={"url": ""}, store="postgresql://a/b")
    )
    assert memory.url() == "postgresql://a/b"
    memory.configure(
        PluginSettings(
            plugin_id="memory_postgres", values={"url": "postgresql://c/d"}, store="x.sqlite3"
        )
    )
    assert memory.url() == "postgresql://c/d"
    memory.configure(PluginSettings(plugin_id="memory_postgres", store="/data/s.sqlite3"))
    with pytest.raises(StorageError, match="session store is not one") as info:
        memory.url()
    assert "AUTOGPT_MEMORY_URL" in str(info.value)
    assert "enable memory_sqlite" in str(info.value)


def test_an_unreachable_server_names_the_database_without_its_password() -> None:
    with pytest.raises(StorageError) as info:
        PostgresMemoryDB("postgresql://me:hunter2@127.0.0.1:1/memories?connect_timeout=2")
    message = str(info.value)
    assert message.startswith("Cannot connect to the memory database postgresql://me@127.0.0.1:1/")
    assert "hunter2" not in message
    assert "memory_postgres 'url' setting" in message


def _tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        ).fetchall()
    return {row[0] for row in rows}


def test_tables_sit_beside_the_session_store_migrated_once(postgres_url: str) -> None:
    """Beside the session store's tables, the plugin's are made once, however many
    processes open the database; each migration is recorded."""
    from autogpt_core.store._postgres import PostgresStore

    PostgresStore(postgres_url).close()
    for _ in range(2):
        PostgresMemoryDB(postgres_url).close()
    assert {"sessions", "memory_items", "memory_migrations"} <= _tables(postgres_url)
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT number, name FROM memory_migrations").fetchall()
    assert rows == [(1, "m001_initial")]


def test_another_applications_table_and_a_newer_schema_are_refused(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE memory_items (x int)")
    with pytest.raises(StorageError, match="another application's"):
        PostgresMemoryDB(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("DROP TABLE memory_items")
    PostgresMemoryDB(postgres_url).close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("INSERT INTO memory_migrations VALUES (99, 'm099_future', NULL)")
    with pytest.raises(StorageError, match="newer memory_postgres plugin"):
        PostgresMemoryDB(postgres_url)


def test_text_postgresql_cannot_hold_is_refused_alone(postgres_url: str) -> None:
    with PostgresMemoryDB(postgres_url) as db:
        outcomes = db.store_each([MemoryItem("good", "s", id="g"), MemoryItem("bad\x00", "s")])
        assert outcomes[0] == "g"
        assert isinstance(outcomes[1], StorageError)
        assert "U+0000" in str(outcomes[1])
        assert [h.item.text for h in db.memory_recall(MemoryQuery(""), "s")] == ["good"]


async def test_two_processes_worth_of_plugins_share_memories(postgres_url: str) -> None:
    """What one server's plugin stores, another's recalls: the module's hooks through the
    awaitable caller, with the store's URL as PluginSettings.store."""
    pm = HookManager()
    pm.register(memory_plugin, name="memory_postgres")
    pm.check_pending()
    pm.hook.configure(settings=PluginSettings(plugin_id="memory_postgres", store=postgres_url))
    try:
        session = SessionView(id="s1", goal="ship it", workspace=Path("ws"), owner="alice")
        (item_id,) = await pm.ahook.memory_store(
            session=session,
            item=MemoryItem(text="The release checklist is in RELEASE.md", session_id=""),
        )
        elsewhere = PostgresMemoryDB(postgres_url)
        try:
            hits = await trio.to_thread.run_sync(
                lambda: elsewhere.memory_recall(
                    MemoryQuery("checklist", scope="all"), "s2", owner="alice"
                )
            )
        finally:
            elsewhere.close()
        assert [(h.item.id, h.backend) for h in hits] == [(item_id, "memory_postgres")]
    finally:
        await pm.ahook.autogpt_shutdown(
            runtime=RuntimeView(core_version="0.1.0", data_dir=Path("data"))
        )


@pytest.mark.slow
def test_a_run_on_a_postgresql_store_keeps_its_memories_there(
    tmp_path: Path, postgres_url: str
) -> None:
    """`autogpt run --demo` with `store: postgresql://...`: the cycles' memories are rows
    of memory_items, and no SQLite memory file is made."""
    (tmp_path / "config.yaml").write_text(f"store: {json.dumps(postgres_url)}\n")
    env = cli_env(tmp_path)
    listed = autogpt("plugins", "list", "--all", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split()[2] for line in listed.stdout.splitlines() if line}
    assert (rows["memory_postgres"], rows["memory_sqlite"]) == ("loaded", "disabled")
    result = autogpt("run", "--demo", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    with psycopg.connect(postgres_url) as conn:
        (count,) = conn.execute("SELECT count(*) FROM memory_items").fetchone() or (0,)
        (sessions,) = conn.execute("SELECT count(*) FROM sessions").fetchone() or (0,)
    assert count > 0
    assert sessions == 1
    assert not list((tmp_path / "data").rglob("memory.sqlite3"))
