"""Long-term memory in PostgreSQL with full-text search, shared by every session of every
server process on the database.

On instead of ``memory_sqlite`` when the session store is PostgreSQL (its manifest's
``enabled_by_default: [postgresql]``): several ``autogpt serve`` processes on one database
then recall the same memories, which one SQLite file per machine could not give them. Its
tables (``_db.py``) are in the session store's database (``PluginSettings.store``, given to
it because its manifest says ``shares_store``), or in the one the ``url`` setting names.

The hooks and commands are ``memory_sqlite``'s (``autogpt_plugins._memory``), over a
``PostgresMemoryDB`` opened on first use and closed at ``autogpt_shutdown``.
"""

from __future__ import annotations

from autogpt_core import StorageError
from hookspecs import PluginSettings

from .._memory import Memory, MemoryHooks
from ._db import PostgresMemoryDB as PostgresMemoryDB

PLUGIN_ID = "memory_postgres"


class PostgresMemory(Memory):
    """The plugin's state: its settings and, once used, its ``PostgresMemoryDB``."""

    plugin_id = PLUGIN_ID

    def url(self) -> str:
        """The database: the ``url`` setting, else the session store's when it is one."""
        setting = self.settings.values.get("url") or ""
        if not isinstance(setting, str):
            raise StorageError(
                f"The {PLUGIN_ID} setting 'url' must be a string. Fix: set it to a "
                "postgresql:// URL, or leave it empty for the session store's database."
            )
        if setting:
            return setting
        store = self.settings.store or ""
        if not store.startswith(("postgresql://", "postgres://")):
            raise StorageError(
                f"The {PLUGIN_ID} plugin has no PostgreSQL database for its memories: the "
                "session store is not one, and its 'url' setting is empty. Fix: set the "
                "session store to a postgresql:// URL ('store:' in the config, or "
                "--store), set $AUTOGPT_MEMORY_URL, or disable this plugin and enable "
                "memory_sqlite."
            )
        return store

    def open_db(self, settings: PluginSettings) -> PostgresMemoryDB:
        return PostgresMemoryDB(self.url())


# --- the plugin: module-level hooks and commands over one PostgresMemory ----------------

_memory = PostgresMemory()
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

__all__ = ["PLUGIN_ID", "PostgresMemory", "PostgresMemoryDB"]
