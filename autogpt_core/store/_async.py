"""``AsyncStore``: any ``SessionStore`` for trio code, its methods generated, not written out.

Each method of ``AsyncStore`` is made from the ``SessionStore`` method of the same name by
one of five helpers (as trio's ``_path.py`` makes ``trio.Path``'s with ``_wraps_async``),
which copy its name, signature and docstring and call the store's method by name:

- ``_in_thread``: in a worker thread (reads run concurrently);
- ``_at_once``: on the event loop, for a method that never blocks;
- ``_in_thread_unless``: on the event loop when a non-blocking method of the store says the
  call would pass (``check_held`` while ``lease_confirmed``), else in a worker thread;
- ``_after_writes``: the same, once the writes already queued are committed;
- ``_group_committed``: the call becomes a write op queued for the writer thread, which
  commits each batch of queued ops in one transaction (``SessionStore.write_each``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

import attrs
import trio

from hookspecs import Event

from .._errors import StorageError
from ._interface import SessionStore
from ._records import CycleWrite, StatusWrite, WriteOp, WriteOutcome

_P = ParamSpec("_P")
_T = TypeVar("_T")

_Method = Callable[Concatenate[SessionStore, _P], _T]
_AsyncMethod = Callable[Concatenate["AsyncStore", _P], Coroutine[Any, Any, _T]]


def _forwarder(
    method: _Method[_P, _T], how: str
) -> Callable[[_AsyncMethod[_P, _T]], _AsyncMethod[_P, _T]]:
    """Give the decorated coroutine function ``method``'s name, signature and docstring,
    the docstring headed by a line saying ``how`` the call runs."""

    def decorate(forward: _AsyncMethod[_P, _T]) -> _AsyncMethod[_P, _T]:
        # Not the method's __dict__: it holds __isabstractmethod__.
        functools.update_wrapper(forward, method, updated=())
        forward.__module__ = __name__
        forward.__qualname__ = f"AsyncStore.{method.__name__}"
        forward.__doc__ = (
            f"Like ``SessionStore.{method.__name__}``, awaitable: {how}.\n\n{method.__doc__}"
        )
        return forward

    return decorate


def _in_thread(method: _Method[_P, _T]) -> _AsyncMethod[_P, _T]:
    """``method`` of ``AsyncStore.store``, awaitable: run in a worker thread."""
    name = method.__name__

    @_forwarder(method, "runs in a worker thread")
    async def forward(self: AsyncStore, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        bound: Callable[_P, _T] = getattr(self.store, name)
        return await trio.to_thread.run_sync(functools.partial(bound, *args, **kwargs))

    return forward


def _at_once(method: _Method[_P, _T]) -> _AsyncMethod[_P, _T]:
    """``method`` of ``AsyncStore.store``, awaitable: called at once (it never blocks)."""
    name = method.__name__

    @_forwarder(method, "answered at once, without a worker thread")
    async def forward(self: AsyncStore, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        await trio.lowlevel.checkpoint_if_cancelled()
        bound: Callable[_P, _T] = getattr(self.store, name)
        return bound(*args, **kwargs)

    return forward


def _in_thread_unless(method: _Method[_P, None], known: str) -> _AsyncMethod[_P, None]:
    """``method`` of ``AsyncStore.store``, awaitable: nothing to do when the store's
    non-blocking ``known`` method, given the same arguments, says it would pass; else run
    in a worker thread."""
    name = method.__name__

    @_forwarder(
        method, f"answered at once when ``{known}`` says it passes, else in a worker thread"
    )
    async def forward(self: AsyncStore, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
        if getattr(self.store, known)(*args, **kwargs):
            await trio.lowlevel.checkpoint_if_cancelled()
            return
        bound: Callable[_P, None] = getattr(self.store, name)
        await trio.to_thread.run_sync(functools.partial(bound, *args, **kwargs))

    return forward


def _after_writes(method: _Method[_P, _T]) -> _AsyncMethod[_P, _T]:
    """``method`` of ``AsyncStore.store``, awaitable: run in a worker thread once the writes
    queued before the call are committed."""
    name = method.__name__

    @_forwarder(method, "runs in a worker thread after the writes already queued")
    async def forward(self: AsyncStore, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        await self.flush()
        bound: Callable[_P, _T] = getattr(self.store, name)
        return await trio.to_thread.run_sync(functools.partial(bound, *args, **kwargs))

    return forward


def _group_committed(
    method: _Method[_P, _T],
) -> Callable[[Callable[_P, WriteOp]], _AsyncMethod[_P, _T]]:
    """``method``, awaitable: its arguments become the write op ``to_op(...)``, committed
    with the other ops queued meanwhile; returns what ``method`` would (``write_each``'s
    outcome). Two calls, ``_group_committed(method)(to_op)``, so that ``method`` alone
    fixes the signature, and ``to_op`` is checked against it."""

    def with_op(to_op: Callable[_P, WriteOp]) -> _AsyncMethod[_P, _T]:
        @_forwarder(method, "group-committed with the writes queued meanwhile")
        async def forward(self: AsyncStore, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
            return cast(_T, await self._submit(to_op(*args, **kwargs)))

        return forward

    return with_op


def _event_write(event: Event) -> Event:
    return event


@attrs.define
class _Batch:
    ops: list[WriteOp] = attrs.field(factory=list)
    outcomes: list[WriteOutcome | StorageError] = attrs.field(factory=list)
    done: bool = False


class AsyncStore:
    """A ``SessionStore`` (``store``) for trio code: every call runs in a worker thread.

    Writes of cycles, events and statuses are *group-committed*: while one batch is being
    written, the writes that arrive queue up and are committed together in the next
    transaction, each atomic on its own (``SessionStore.write_each``). So a thousand
    sessions writing at once cost a handful of commits, not a thousand. A write returns
    once it is committed. If its caller is cancelled while waiting, the write may still be
    committed with the next batch.
    """

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self._pending = _Batch()
        self._write_lock = trio.Lock()
        # The writer thread: one batch at a time.
        self._writer = trio.CapacityLimiter(1)

    @classmethod
    async def open(cls, location: Path | str) -> AsyncStore:
        """Open (or create) the store at ``location`` in a worker thread: a SQLite file's
        path, or a PostgreSQL URL (``open_store``)."""
        from ._open import open_store

        return cls(await trio.to_thread.run_sync(open_store, location))

    async def aclose(self) -> None:
        """Commit any writes still queued, then close the store."""
        await self.flush()
        await trio.to_thread.run_sync(self.store.close)

    async def flush(self) -> None:
        """Commit any writes still queued (left by callers that were cancelled)."""
        async with self._write_lock:
            batch = self._pending
            if batch.ops and not batch.done:
                await self._write_batch(batch)

    # -- sessions -----------------------------------------------------------------------

    create_session = _in_thread(SessionStore.create_session)
    get_session = _in_thread(SessionStore.get_session)
    list_sessions = _in_thread(SessionStore.list_sessions)
    resolve_session_id = _in_thread(SessionStore.resolve_session_id)
    update_session_status = _group_committed(SessionStore.update_session_status)(StatusWrite)
    session_footprint = _in_thread(SessionStore.session_footprint)
    delete_session = _after_writes(SessionStore.delete_session)

    # -- cycles and events --------------------------------------------------------------

    record_cycle = _group_committed(SessionStore.record_cycle)(CycleWrite)
    load_cycles = _in_thread(SessionStore.load_cycles)
    last_completed_cycle = _in_thread(SessionStore.last_completed_cycle)
    append_event = _group_committed(SessionStore.append_event)(_event_write)
    list_events = _in_thread(SessionStore.list_events)
    write_many = _in_thread(SessionStore.write_many)

    # -- artifacts ----------------------------------------------------------------------

    add_artifact = _in_thread(SessionStore.add_artifact)
    list_artifacts = _in_thread(SessionStore.list_artifacts)
    get_artifact = _in_thread(SessionStore.get_artifact)

    # -- leases -------------------------------------------------------------------------

    acquire_lease = _in_thread(SessionStore.acquire_lease)
    renew_lease = _in_thread(SessionStore.renew_lease)
    renew_leases = _in_thread(SessionStore.renew_leases)
    release_lease = _in_thread(SessionStore.release_lease)
    get_lease = _in_thread(SessionStore.get_lease)
    check_held = _in_thread_unless(SessionStore.check_held, "lease_confirmed")
    lease_confirmed = _at_once(SessionStore.lease_confirmed)

    # -- the writer ---------------------------------------------------------------------

    async def _submit(self, op: WriteOp) -> WriteOutcome:
        batch = self._pending
        index = len(batch.ops)
        batch.ops.append(op)
        # trio.Lock is fair: whoever holds it writes the batch that was pending when it got
        # it; the callers behind it find their batch done, or write the next one.
        async with self._write_lock:
            if not batch.done:
                await self._write_batch(batch)
        outcome = batch.outcomes[index]
        if isinstance(outcome, StorageError):
            raise outcome
        return outcome

    async def _write_batch(self, batch: _Batch) -> None:
        if self._pending is batch:
            self._pending = _Batch()
        try:
            # Not cancellable (abandon_on_cancel=False): a batch holds other callers' writes.
            batch.outcomes = await trio.to_thread.run_sync(
                self.store.write_each, batch.ops, limiter=self._writer
            )
        except StorageError as exc:
            # The whole transaction failed (disk full, file gone): every caller learns why.
            batch.outcomes = [exc] * len(batch.ops)
        finally:
            batch.done = True
