"""What the built-in memory plugins share: the plugin's state around one database
(``Memory``), its hooks and commands (``MemoryHooks``), and group commit (``MemoryWriter``).

A memory plugin (``memory_sqlite``, ``memory_postgres``) subclasses ``Memory`` with how to
open its database (``open_db``), and its module binds the hooks of one ``MemoryHooks``::

    _memory = SQLiteMemory()
    _hooks = MemoryHooks(_memory)
    configure = _hooks.configure
    ...

because the core registers the plugin's module. The database is a ``MemoryBackend``: the
same methods, sentence for sentence, whatever engine holds it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Protocol

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

#: The metadata key marking an item as its owner's (``SessionView.owner``).
OWNER_KEY = "owner"

#: Memories added to each prompt, and how much of each one.
_SHOWN_CHARACTERS = 500


class MemoryBackend(Protocol):
    """A memory database; thread-safe. See ``memory_sqlite._db.MemoryDB`` for the
    semantics each method has in every backend."""

    def store_each(self, items: Sequence[MemoryItem]) -> list[str | StorageError]: ...

    def memory_store(self, item: MemoryItem) -> str: ...

    def memory_recall(
        self, query: MemoryQuery, session_id: str, *, backend: str, owner: str | None = None
    ) -> list[MemoryHit]: ...

    def memory_forget(
        self, query: MemoryQuery, session_id: str, *, owner: str | None = None
    ) -> int: ...

    def close(self) -> None: ...


class Memory:
    """A memory plugin's state: its settings and, once used, its database. Thread-safe.

    Subclasses say how to open the database (``open_db``, called in a worker thread).
    """

    plugin_id = "memory"

    def __init__(self) -> None:
        self._settings = PluginSettings(plugin_id=self.plugin_id)
        self._db: MemoryBackend | None = None
        self._writer: MemoryWriter | None = None
        self._lock = threading.Lock()

    def open_db(self, settings: PluginSettings) -> MemoryBackend:
        raise NotImplementedError

    @property
    def settings(self) -> PluginSettings:
        return self._settings

    def configure(self, settings: PluginSettings) -> None:
        """Take new settings; a database opened with the old ones is closed."""
        with self._lock:
            self._settings = settings
            db, self._db, self._writer = self._db, None, None
        if db is not None:
            db.close()

    def db(self) -> MemoryBackend:
        """The database, opened on first use."""
        with self._lock:
            if self._db is None:
                self._db = self.open_db(self._settings)
            return self._db

    def opened(self) -> bool:
        """Whether the database is open (so ``writer()`` does not block)."""
        return self._db is not None

    def writer(self) -> MemoryWriter:
        """The group-committing writer, for trio code.

        Call ``db()`` first (in a worker thread): opening the database blocks.
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

    # -- the memory hooks, blocking -----------------------------------------------------

    def memory_store(self, session: SessionView, item: MemoryItem) -> str:
        """Store ``item`` (as ``session``'s if it names no session); return its id."""
        return self.db().memory_store(owned(session, item))

    def memory_recall(self, session: SessionView, query: MemoryQuery) -> list[MemoryHit]:
        """The best matches for ``query``, in ``session`` or in all its owner's sessions."""
        return self.db().memory_recall(
            query, session.id, backend=self.plugin_id, owner=session.owner
        )

    def memory_forget(self, session: SessionView, query: MemoryQuery) -> int:
        """Forget what matches ``query``; return how many items."""
        return self.db().memory_forget(query, session.id, owner=session.owner)

    # -- commands, blocking -------------------------------------------------------------

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


class MemoryHooks:
    """The hook implementations and commands of a memory plugin, over one ``Memory``."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory

    @hookimpl
    def configure(self, settings: PluginSettings) -> None:
        self.memory.configure(settings)

    @hookimpl
    def register_commands(self, register: RegisterCommand) -> None:
        register("remember", self.remember)
        register("recall", self.recall)
        register("forget", self.forget)

    async def _writer(self) -> MemoryWriter:
        if not self.memory.opened():
            await trio.to_thread.run_sync(self.memory.db)
        return self.memory.writer()

    async def remember(self, ctx: CommandContext, text: str) -> str:
        """Save ``text`` to long-term memory."""
        # Through the group-committing writer, as memory_store: no worker thread of its own.
        writer = await self._writer()
        return remembered(await writer.store(owned(ctx.session, note(ctx, text))))

    @blocking
    def recall(
        self, ctx: CommandContext, query: str, limit: int = 5, scope: str = "session"
    ) -> str:
        """Search long-term memory."""
        return self.memory.recall(ctx, query, limit, scope)

    async def forget(self, ctx: CommandContext, query: str) -> str:
        """Forget this session's memories that match ``query``, in every memory backend."""
        if not query.strip():
            # An empty query means "everything" to memory_forget: never the model's by accident.
            return "Nothing forgotten: give words of the memory to forget, e.g. 'staging server'."
        # Notes of this session only, as recall shows them: the core's per-cycle
        # observations are its record, and other sessions' notes are not this one's to drop.
        count = await ctx.forget(MemoryQuery(text=query, scope="session", kinds=("note",)))
        if not count:
            return f"No memories of this session match {query!r}; nothing was forgotten."
        return f"Forgot {count} {'memory' if count == 1 else 'memories'} matching {query!r}."

    @hookimpl
    async def memory_store(self, session: SessionView, item: MemoryItem) -> str:
        # Every cycle of every session stores a memory: group-committing them with the
        # other sessions' items costs one transaction per batch instead of a thread and a
        # commit each.
        item = owned(session, item)
        writer = await self._writer()
        return await writer.store(item)

    @hookimpl(blocking=True)
    def memory_recall(self, session: SessionView, query: MemoryQuery) -> list[MemoryHit]:
        return self.memory.memory_recall(session, query)

    @hookimpl(blocking=True)
    def memory_forget(self, session: SessionView, query: MemoryQuery) -> int:
        return self.memory.memory_forget(session, query)

    @hookimpl
    async def autogpt_shutdown(self, runtime: RuntimeView) -> None:
        # Commit what cancelled callers may have left queued, then close the database.
        await self.memory.flush()
        await trio.to_thread.run_sync(self.memory.close)


def metadata_json(item: MemoryItem) -> str:
    """``item``'s metadata as the databases keep it (compact JSON, no NaN); ``StorageError``
    naming the item if it is not JSON."""
    try:
        return json.dumps(
            dict(item.metadata), ensure_ascii=False, allow_nan=False, separators=(",", ":")
        )
    except (TypeError, ValueError) as exc:
        raise StorageError(f"Cannot store memory item {item.id!r}: {exc}") from None


def owned(session: SessionView, item: MemoryItem) -> MemoryItem:
    """``item`` as ``session``'s (if it names no session), marked with its owner: the
    owner's sessions alone recall it (``scope="all"`` stays within one owner)."""
    if not item.session_id:
        item = attrs.evolve(item, session_id=session.id)
    if session.owner is not None:
        item = attrs.evolve(item, metadata={**item.metadata, OWNER_KEY: session.owner})
    return item


def note(ctx: CommandContext, text: str) -> MemoryItem:
    """What ``remember`` stores: ``text`` masked, since a note outlives the session and
    reaches later sessions' prompts."""
    return MemoryItem(text=ctx.redact(text), session_id=ctx.session.id)


def remembered(item_id: str) -> str:
    return f"Remembered (id {item_id})."


def _shorten(text: str) -> str:
    text = " ".join(text.split())
    if len(text) <= _SHOWN_CHARACTERS:
        return text
    return text[: _SHOWN_CHARACTERS - 3] + "..."


@attrs.define
class _Batch:
    items: list[MemoryItem] = attrs.field(factory=list)
    outcomes: list[str | StorageError] = attrs.field(factory=list)
    done: bool = False


class MemoryWriter:
    """Stores items in ``db``: while one batch is being written, the items that arrive
    queue up and are written together next, each on its own (``store_each``). An item is
    stored when ``store`` returns; if its caller is cancelled while waiting, it may still
    be stored with the next batch."""

    def __init__(self, db: MemoryBackend) -> None:
        self.db = db
        self._pending = _Batch()
        self._lock = trio.Lock()
        self._writer = trio.CapacityLimiter(1)

    async def store(self, item: MemoryItem) -> str:
        """Store ``item`` with the batch it joins; return its id."""
        batch = self._pending
        index = len(batch.items)
        batch.items.append(item)
        # trio.Lock is fair: whoever holds it writes the batch that was pending when it got
        # it; the callers behind it find their batch done, or write the next one.
        async with self._lock:
            if not batch.done:
                await self._write(batch)
        outcome = batch.outcomes[index]
        if isinstance(outcome, StorageError):
            raise outcome
        return outcome

    async def flush(self) -> None:
        """Store the items still queued (left by callers that were cancelled)."""
        async with self._lock:
            if self._pending.items and not self._pending.done:
                await self._write(self._pending)

    async def _write(self, batch: _Batch) -> None:
        if self._pending is batch:
            self._pending = _Batch()
        try:
            # Not cancellable (abandon_on_cancel=False): a batch holds other callers' items.
            batch.outcomes = await trio.to_thread.run_sync(
                self.db.store_each, batch.items, limiter=self._writer
            )
        except StorageError as exc:
            batch.outcomes = [exc] * len(batch.items)
        finally:
            batch.done = True
