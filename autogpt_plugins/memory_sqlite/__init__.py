"""Long-term memory in a SQLite file with full-text search, shared by every session.

The memories live in a file of the plugin's own (the ``path`` setting; by default
``memory.sqlite3`` in the data directory), with the plugin's own schema and migrations
(``_db.py``, ``_migrations.py``). The file is opened on first use and closed at
``autogpt_shutdown``. Everything that touches it is marked blocking, so it runs in a
worker thread, except ``memory_store``, whose items are group-committed
(``autogpt_plugins._memory.MemoryWriter``).

The plugin's state is one ``SQLiteMemory`` object; the module-level hook implementations
and commands are those of ``autogpt_plugins._memory.MemoryHooks`` over it (the same as
``memory_postgres``'s), because the core registers this module as the plugin.
"""

from __future__ import annotations

from pathlib import Path

from autogpt_core import StorageError
from hookspecs import PluginSettings

from .._memory import OWNER_KEY as OWNER_KEY
from .._memory import Memory, MemoryHooks, owned
from ._db import MemoryDB as MemoryDB

PLUGIN_ID = "memory_sqlite"
DEFAULT_FILE = "memory.sqlite3"


class SQLiteMemory(Memory):
    """The plugin's state: its settings and, once used, its ``MemoryDB``. Thread-safe."""

    plugin_id = PLUGIN_ID

    def path(self) -> Path:
        """The database file: the ``path`` setting, relative to the data directory."""
        data_dir = self.settings.data_dir
        setting = self.settings.values.get("path") or ""
        if not isinstance(setting, str):
            raise StorageError(
                f"The {PLUGIN_ID} setting 'path' must be a string, not {setting!r}. "
                "Fix: set it to a file name, or leave it empty."
            )
        if setting:
            path = Path(setting).expanduser()
            return data_dir / path if data_dir is not None and not path.is_absolute() else path
        if data_dir is None:
            raise StorageError(
                f"The {PLUGIN_ID} plugin has no data directory to keep its memories in. "
                "Fix: set its 'path' setting to a SQLite file."
            )
        return data_dir / DEFAULT_FILE

    def open_db(self, settings: PluginSettings) -> MemoryDB:
        return MemoryDB(self.path())

    def db(self) -> MemoryDB:
        db = super().db()
        assert isinstance(db, MemoryDB)
        return db


# --- the plugin: module-level hooks and commands over one SQLiteMemory ------------------

_memory = SQLiteMemory()
_hooks = MemoryHooks(_memory)

configure = _hooks.configure
register_commands = _hooks.register_commands
memory_store = _hooks.memory_store
memory_recall = _hooks.memory_recall
memory_forget = _hooks.memory_forget
autogpt_shutdown = _hooks.autogpt_shutdown
remember = _hooks.remember
recall = _hooks.recall
forget = _hooks.forget

__all__ = ["DEFAULT_FILE", "OWNER_KEY", "PLUGIN_ID", "MemoryDB", "SQLiteMemory", "owned"]
