"""Who runs a session: a lease in the store, held by one runtime at a time.

``Runtime.run`` and ``Runtime.resume`` take the session's lease (``Leases.hold``) before
anything else happens to it: before the provider is built, the workspace is touched or
a hook runs. One heartbeat renews all of a runtime's leases together while its sessions
run; a lease is released when its session ends, however it ends. Another runtime, in
this process or another, is refused with ``SessionInUse`` naming the holder.

While this store's last renewal has not expired, nobody can hold the lease but us, so
the check before each command reads nothing (``SessionStore.check_held``).

A holder that dies without releasing (``kill -9``, a crash) blocks nobody for long: its
lease lapses ``expiry`` seconds after its last heartbeat, and at once if the holder was
on this host and its process is gone. A holder that was only stuck, and whose lapsed
lease was taken over, learns it at its next heartbeat, which stops the session, or at
its next write, which the store refuses (``Store.acquire_lease``).
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol

import attrs
import trio

from .._errors import SessionInUse, StorageError

LEASE_PERIOD = 10.0
"""Seconds between heartbeats."""
LEASE_EXPIRY = 30.0
"""Seconds a lease lasts after its last heartbeat: two heartbeats may be missed."""

_HOSTNAME = socket.gethostname()


@attrs.frozen
class Holder:
    """A runtime as a lease holder: its host, its process and a random ``token``, so that
    two runtimes in one process are different holders."""

    hostname: str
    pid: int
    token: str

    @classmethod
    def current(cls) -> Holder:
        """A new holder in this process."""
        return cls(_HOSTNAME, os.getpid(), secrets.token_hex(8))

    @property
    def id(self) -> str:
        return f"{self.hostname}:{self.pid}:{self.token}"


@attrs.frozen
class Lease:
    """A session's lease as stored: who holds it (``holder`` is a ``Holder.id``), since
    when, and until when unless renewed. Times are seconds since the epoch."""

    session_id: str
    holder: str
    hostname: str
    pid: int
    acquired_at: float
    renewed_at: float
    expires_at: float

    def live(self, now: float | None = None) -> bool:
        """Whether the lease still binds: not expired, and its holder not known dead."""
        return lease_live(self.expires_at, self.hostname, self.pid, now)

    def describe(self) -> str:
        """Who holds it, for messages: ``process 4242 on host x since 18:03:05``."""
        this = " (this process)" if (self.hostname, self.pid) == (_HOSTNAME, os.getpid()) else ""
        return f"process {self.pid}{this} on host {self.hostname} since {_clock(self.acquired_at)}"


@attrs.frozen
class Fence:
    """A lease a store holds (took, and has not released): its holder, and the expiry it
    last confirmed, before which nobody can have taken the lease over. A store refuses
    writes to the session once the stored lease is another holder's."""

    holder: str
    until: float

    def confirmed(self, now: float | None = None) -> bool:
        return (time.time() if now is None else now) < self.until


def lease_live(expires_at: float, hostname: str, pid: int, now: float | None = None) -> bool:
    """Whether a lease expiring at ``expires_at``, held by ``pid`` on ``hostname``, binds."""
    if expires_at <= (time.time() if now is None else now):
        return False
    return not holder_gone(hostname, pid)


def holder_gone(hostname: str, pid: int) -> bool:
    """Whether the process ``pid`` on ``hostname`` is known to have ended.

    Only a process on this host can be asked; a holder elsewhere is gone when its lease
    expires. A reused pid looks alive, which only delays a takeover until expiry.
    """
    if hostname != _HOSTNAME or pid == os.getpid():
        return False
    if sys.platform == "win32":
        # os.kill(pid, 0) would terminate the process there, not probe it.
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # PermissionError: alive, another user's
    return False


def in_use(lease: Lease) -> SessionInUse:
    """The error for a session whose lease ``lease`` binds another holder."""
    return SessionInUse(
        f"session {lease.session_id} is being run by {lease.describe()}; wait for it to end, "
        "or stop that process"
    )


def taken_over(session_id: str, current: Lease | None) -> SessionInUse:
    """The error for a holder whose lease on ``session_id`` lapsed and was taken over."""
    by = f" by {current.describe()}" if current is not None else ""
    return SessionInUse(
        f"session {session_id} was taken over{by} after this process's lease on it lapsed "
        "(was it suspended or stuck?); this process stopped running it: see its state with "
        "'autogpt sessions'"
    )


def _clock(timestamp: float) -> str:
    moment = time.localtime(timestamp)
    if time.strftime("%Y-%m-%d", moment) == time.strftime("%Y-%m-%d"):
        return time.strftime("%H:%M:%S", moment)
    return time.strftime("%Y-%m-%d %H:%M:%S", moment)


class LeaseStore(Protocol):
    """What ``Leases`` needs of a store (``AsyncStore`` has it)."""

    async def acquire_lease(self, session_id: str, holder: Holder, *, expiry: float) -> Lease: ...

    async def renew_leases(
        self, leases: Sequence[Lease], *, expiry: float
    ) -> list[Lease | SessionInUse]: ...

    async def release_lease(self, lease: Lease) -> None: ...


@attrs.define(eq=False)
class _Held:
    """A lease held by ``Leases``: the body it guards, and why it was lost, if it was."""

    lease: Lease
    body: trio.CancelScope
    lost: SessionInUse | None = None


class Leases:
    """The leases one holder (a runtime) holds, renewed together: every ``period``
    seconds, one ``renew_leases`` call renews them all, so a thousand sessions cost one
    store call per period rather than a thousand.

    There is no heartbeat task of the runtime's own: each ``hold`` runs a small one, and
    whichever wakes first at the due time renews every lease; the others find the next
    renewal already scheduled and sleep again. So the heartbeat lives exactly as long as
    some lease is held, inside the nurseries of the sessions that hold them.
    """

    def __init__(
        self,
        store: LeaseStore,
        holder: Holder,
        *,
        period: float = LEASE_PERIOD,
        expiry: float = LEASE_EXPIRY,
    ) -> None:
        self.store = store
        self.holder = holder
        self.period = period
        self.expiry = expiry
        self._held: dict[str, _Held] = {}
        # trio time of the next renewal; None while nothing is held.
        self._due: float | None = None

    def __len__(self) -> int:
        return len(self._held)

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[Lease]:
        """Hold ``session_id``'s lease for the body: taken on entry (``SessionInUse`` if
        another holder's lease binds), renewed with the others every ``period`` seconds,
        released on exit.

        If a renewal finds the lease taken over, the body is cancelled and ``SessionInUse``
        raised. The body's own exception comes out as itself, not in an exception group.
        """
        lease = await self.store.acquire_lease(session_id, self.holder, expiry=self.expiry)
        held: _Held | None = None
        raised: BaseException | None = None
        try:
            try:
                async with trio.open_nursery() as nursery:
                    held = self._held[session_id] = _Held(lease, nursery.cancel_scope)
                    if self._due is None:
                        self._due = trio.current_time() + self.period
                    nursery.start_soon(self._heartbeat)
                    try:
                        yield lease
                    except BaseException as exc:
                        # Re-raised below, outside the nursery, so that callers see the
                        # body's own exception rather than an ExceptionGroup around it.
                        raised = exc
                    finally:
                        nursery.cancel_scope.cancel()
            except BaseExceptionGroup:
                # An outer cancellation reached the heartbeat too: the nursery raises a
                # group of its Cancelled, which must not hide what the body raised.
                if raised is None:
                    raise
        finally:
            if held is not None and self._held.get(session_id) is held:
                del self._held[session_id]
            if not self._held:
                self._due = None
            with trio.CancelScope(shield=True):
                await self.store.release_lease(lease if held is None else held.lease)
        if held is not None and held.lost is not None:
            raise held.lost from raised if isinstance(raised, Exception) else None
        if raised is not None:
            raise raised

    async def _heartbeat(self) -> None:
        while self._due is not None:
            await trio.sleep_until(self._due)
            if self._due is not None and trio.current_time() >= self._due:
                # The next one is scheduled before this one runs: the holds waking now
                # find it ahead of them and sleep again.
                self._due = trio.current_time() + self.period
                await self._renew()

    async def _renew(self) -> None:
        # This runs in whichever hold's heartbeat woke first. If that session ends while
        # the store call waits, the call is cancelled with it: that counts as one missed
        # renewal (made again next period, well inside the expiry), as a busy disk does.
        # Not shielded: a session's end must not wait on everyone's renewal.
        held = list(self._held.values())
        try:
            results = await self.store.renew_leases([h.lease for h in held], expiry=self.expiry)
        except StorageError:
            # A busy or failing disk: try again next period. A lease lapses only if that
            # goes on past its expiry, and is lost only if someone then takes it over.
            return
        for entry, result in zip(held, results, strict=True):
            if self._held.get(entry.lease.session_id) is not entry:
                continue  # released meanwhile: its lease is gone because it ended
            if isinstance(result, SessionInUse):
                entry.lost = result
                entry.body.cancel()
            else:
                entry.lease = result


def hold_lease(
    store: LeaseStore,
    session_id: str,
    holder: Holder,
    *,
    period: float = LEASE_PERIOD,
    expiry: float = LEASE_EXPIRY,
) -> AbstractAsyncContextManager[Lease]:
    """Hold one lease, renewed on its own (``Leases.hold``): for a caller that holds no
    other, such as ``autogpt sessions delete``."""
    return Leases(store, holder, period=period, expiry=expiry).hold(session_id)
