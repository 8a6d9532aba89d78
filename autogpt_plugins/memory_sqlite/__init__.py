"""Long-term memory in a SQLite file with full-text search, shared by every session.

The memories live in a file of the plugin's own (the ``path`` setting; by default
``memory.sqlite3`` in the data directory), with the plugin's own schema and migrations
(``_db.py``, ``_migrations.py``). The file is opened on first use and closed at
``autogpt_shutdown``. Everything that touches it is marked blocking, so it runs in a
worker thread, except ``memory_store``, whose items are group-committed (``_writer.py``).

The plugin's state is one ``SQLiteMemory`` object; the module-level hook implementations
and commands delegate to it, because the core registers this module as the plugin.
"""

from __future__ import annotations

import threading
from pathlib import Path

import attrs
import trio

from autogpt_core import StorageError
from hookspecs import (
    CommandContext,
    MemoryHit,
    MemoryItem,
    MemoryQuery,
    PluginSettings,
    RegisterCommand,
    RuntimeView,
    SessionView,
    blocking,
    hookimpl,
)

from ._db import OWNER_KEY
from ._db import MemoryDB as MemoryDB
from ._writer import MemoryWriter

PLUGIN_ID = "memory_sqlite"
DEFAULT_FILE = "memory.sqlite3"

#: Memories added to each prompt, and how much of each one.
_SHOWN_CHARACTERS = 500


class SQLiteMemory:
    """The plugin's state: its settings and, once used, its ``MemoryDB``. Thread-safe."""

    def __init__(self) -> None:
        self._settings = PluginSettings(plugin_id=PLUGIN_ID)
        self._db: MemoryDB | None = None
        self._writer: MemoryWriter | None = None
        self._lock = threading.Lock()

    def configure(self, settings: PluginSettings) -> None:
        """Take new settings; a database opened with the old ones is closed."""
        with self._lock:
            self._settings = settings
            db, self._db, self._writer = self._db, None, None
        if db is not None:
            db.close()

    def path(self) -> Path:
        """The database file: the ``path`` setting, relative to the data directory."""
        data_dir = self._settings.data_dir
        setting = self._settings.values.get("path") or ""
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

    def db(self) -> MemoryDB:
        """The database, opened on first use."""
        with self._lock:
            if self._db is None:
                self._db = MemoryDB(self.path())
            return self._db

    def opened(self) -> bool:
        """Whether the database is open (so ``writer()`` does not block)."""
        return self._db is not None

    def writer(self) -> MemoryWriter:
        """The group-committing writer, for trio code.

        Call ``db()`` first (in a worker thread): opening the file blocks.
        """
        db = self.db()
        with self._lock:
            if self._writer is None or self._writer.db is not db:
                self._writer = MemoryWriter(db)
            return self._writer

    async def flush(self) -> None:
        """Store the items a cancelled ``memory_store`` may have left queued."""
        writer = self._writer
        if writer is not None:
            await writer.flush()

    def close(self) -> None:
        """Close the database, if open; it is opened again when next needed."""
        with self._lock:
            db, self._db, self._writer = self._db, None, None
        if db is not None:
            db.close()

    # -- the memory hooks ---------------------------------------------------------------

    def memory_store(self, session: SessionView, item: MemoryItem) -> str:
        """Store ``item`` (as ``session``'s if it names no session); return its id."""
        return self.db().memory_store(owned(session, item))

    def memory_recall(self, session: SessionView, query: MemoryQuery) -> list[MemoryHit]:
        """The best matches for ``query``, in ``session`` or in all its owner's sessions."""
        return self.db().memory_recall(query, session.id, backend=PLUGIN_ID, owner=session.owner)

    def memory_forget(self, session: SessionView, query: MemoryQuery) -> int:
        """Forget what matches ``query``; return how many items."""
        return self.db().memory_forget(query, session.id, owner=session.owner)

    # -- commands and prompt ------------------------------------------------------------

    def remember(self, ctx: CommandContext, text: str) -> str:
        """The ``remember`` command, from a worker thread (the plugin's command goes
        through ``writer()`` instead)."""
        return remembered(self.memory_store(ctx.session, note(ctx, text)))

    def recall(
        self, ctx: CommandContext, query: str, limit: int = 5, scope: str = "session"
    ) -> str:
        """The ``recall`` command: the hits as a numbered list."""
        # Notes only: the core's per-cycle observations would bury them, and recalling
        # earlier recalls would nest them.
        wanted = min(max(limit, 1), 20)
        # Twice as many, so that the same note remembered by several sessions is shown once.
        query_value = MemoryQuery(text=query, limit=2 * wanted, scope=scope, kinds=("note",))
        texts: list[str] = []
        for hit in self.memory_recall(ctx.session, query_value):
            text = _shorten(hit.item.text)
            if text not in texts:
                texts.append(text)
        if not texts:
            where = "in this session" if scope == "session" else "in any session"
            return f"No memories match {query!r} {where}."
        return "\n".join(f"{n}. {text}" for n, text in enumerate(texts[:wanted], 1))


def owned(session: SessionView, item: MemoryItem) -> MemoryItem:
    """``item`` as ``session``'s (if it names no session), marked with its owner: the
    owner's sessions alone recall it (``scope="all"`` stays within one owner)."""
    if not item.session_id:
        item = attrs.evolve(item, session_id=session.id)
    if session.owner is not None:
        item = attrs.evolve(item, metadata={**item.metadata, OWNER_KEY: session.owner})
    return item


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= _SHOWN_CHARACTERS:
        return text
    return text[: _SHOWN_CHARACTERS - 3] + "..."


# --- the plugin: module-level hooks and commands delegating to one SQLiteMemory ---------

_memory = SQLiteMemory()


@hookimpl
def configure(settings: PluginSettings) -> None:
    _memory.configure(settings)


@hookimpl
def register_commands(register: RegisterCommand) -> None:
    register("remember", remember)
    register("recall", recall)
    register("forget", forget)


async def remember(ctx: CommandContext, text: str) -> str:
    """Save ``text`` to long-term memory."""
    # Through the group-committing writer, as memory_store: no worker thread of its own.
    if not _memory.opened():
        await trio.to_thread.run_sync(_memory.db)
    return remembered(await _memory.writer().store(owned(ctx.session, note(ctx, text))))


def note(ctx: CommandContext, text: str) -> MemoryItem:
    """What ``remember`` stores: ``text`` masked, since a note outlives the session and
    reaches later sessions' prompts."""
    return MemoryItem(text=ctx.redact(text), session_id=ctx.session.id)


def remembered(item_id: str) -> str:
    return f"Remembered (id {item_id})."


@blocking
def recall(ctx: CommandContext, query: str, limit: int = 5, scope: str = "session") -> str:
    """Search long-term memory."""
    return _memory.recall(ctx, query, limit, scope)


async def forget(ctx: CommandContext, query: str) -> str:
    """Forget this session's memories that match ``query``, in every memory backend."""
    if not query.strip():
        # An empty query means "everything" to memory_forget: never the model's by accident.
        return "Nothing forgotten: give words of the memory to forget, e.g. 'staging server'."
    # Notes of this session only, as recall shows them: the core's per-cycle observations
    # are its record, and other sessions' notes are not this one's to drop.
    count = await ctx.forget(MemoryQuery(text=query, scope="session", kinds=("note",)))
    if not count:
        return f"No memories of this session match {query!r}; nothing was forgotten."
    return f"Forgot {count} {'memory' if count == 1 else 'memories'} matching {query!r}."


@hookimpl
async def memory_store(session: SessionView, item: MemoryItem) -> str:
    # Every cycle of every session stores a memory: group-committing them with the other
    # sessions' items costs one transaction per batch instead of a thread and a commit each.
    item = owned(session, item)
    if not _memory.opened():
        await trio.to_thread.run_sync(_memory.db)
    return await _memory.writer().store(item)


@hookimpl(blocking=True)
def memory_recall(session: SessionView, query: MemoryQuery) -> list[MemoryHit]:
    return _memory.memory_recall(session, query)


@hookimpl(blocking=True)
def memory_forget(session: SessionView, query: MemoryQuery) -> int:
    return _memory.memory_forget(session, query)


@hookimpl
async def autogpt_shutdown(runtime: RuntimeView) -> None:
    # Commit what cancelled callers may have left queued, then close the file.
    await _memory.flush()
    await trio.to_thread.run_sync(_memory.close)
