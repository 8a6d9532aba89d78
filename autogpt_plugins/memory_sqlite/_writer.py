"""Group commit for the ``memory_store`` hook: items stored concurrently by many sessions
are committed together, in one transaction per batch, by one writer thread."""

from __future__ import annotations

import attrs
import trio

from autogpt_core import StorageError
from hookspecs import MemoryItem

from ._db import MemoryDB


@attrs.define
class _Batch:
    items: list[MemoryItem] = attrs.field(factory=list)
    outcomes: list[str | StorageError] = attrs.field(factory=list)
    done: bool = False


class MemoryWriter:
    """Stores items in ``db``: while one batch is being written, the items that arrive
    queue up and are written together next, each on its own (``MemoryDB.store_each``). An
    item is stored when ``store`` returns; if its caller is cancelled while waiting, it may
    still be stored with the next batch."""

    def __init__(self, db: MemoryDB) -> None:
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
