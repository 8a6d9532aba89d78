"""The session store's contract: what every implementation (SQLite, PostgreSQL) does,
and what the runtime, the CLI and ``AsyncStore`` rely on.

A store keeps, per session: its row (goal, status, workspace, options, result, budget),
its completed cycles, its events, its artifact records and its lease. Memory is not the
store's: memory backends are plugins (``memory_store``/``memory_recall``/``memory_forget``).

Every method is synchronous and thread-safe: call it from worker threads, or through
``AsyncStore``. Errors (``autogpt_core._errors``)::

    SessionNotFound   no session with that id (the message names it and says how to list them)
    SessionInUse      another holder's lease binds the session, or took it over from us
    StorageError      the database cannot be used, or a row in it does not read back
    ValueError        an argument is wrong before anything is stored (unknown status, ...)
    TypeError         a value to store is not JSON

A failing write leaves nothing of itself behind.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from pathlib import Path

from hookspecs import JSON, Budget, Event

from .._errors import SessionInUse, StorageError
from ._lease import Holder, Lease
from ._records import (
    ArtifactRecord,
    CycleRecord,
    CycleWrite,
    Page,
    SessionFootprint,
    SessionRecord,
    SessionStatus,
    StatusWrite,
    StoredEvent,
    WriteOp,
    WriteOutcome,
)


class SessionStore(abc.ABC):
    """A session store. Implementations: ``Store`` (SQLite), ``PostgresStore``
    (PostgreSQL); ``open_store`` opens the one a path or URL names.

    ``record_cycle``, ``append_event`` and ``update_session_status`` are defined here
    through ``write_many``, and ``write_each`` through ``write_many`` one op at a time; an
    implementation overrides them only to do the same work faster.
    """

    # -- lifecycle ----------------------------------------------------------------------

    @abc.abstractmethod
    def close(self) -> None:
        """Release the store's resources. Calls made afterwards raise ``StorageError``
        saying the store is closed; calls in progress finish."""

    def __enter__(self) -> SessionStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- sessions -----------------------------------------------------------------------

    @abc.abstractmethod
    def create_session(
        self,
        goal: str,
        workspace: Path | str,
        *,
        session_id: str | None = None,
        config: Mapping[str, JSON] | None = None,
        status: SessionStatus | str = SessionStatus.RUNNING,
        created_at: float | None = None,
    ) -> SessionRecord:
        """Store a new session and return it as stored.

        ``session_id`` defaults to a new UUID (text); ``created_at`` (and ``updated_at``)
        to now. ``config`` must hold only non-secret options (llm, model, max_cycles, ...)
        and JSON values. Raises ``StorageError`` if a session with that id exists, and
        ``ValueError`` for an unknown status; then nothing is stored.
        """

    @abc.abstractmethod
    def get_session(self, session_id: str) -> SessionRecord:
        """The session ``session_id``.

        A session stored as running that no live lease holds (none taken, lapsed, or its
        holder's process known gone) reads as ``INTERRUPTED``: nothing runs it. Raises
        ``SessionNotFound``, or ``StorageError`` naming the column if its row does not
        read back.
        """

    @abc.abstractmethod
    def list_sessions(
        self, *, offset: int = 0, limit: int = 50, status: SessionStatus | str | None = None
    ) -> Page[SessionRecord]:
        """One page of the sessions, newest (``created_at``) first; ties newest stored first.

        Only those with ``status``, if given, as ``get_session`` reads it (so
        ``INTERRUPTED`` finds the running sessions nobody holds). ``total`` counts every
        matching session; a negative ``offset`` or ``limit`` counts as 0. A session whose
        row does not read back is listed, not raised: ``damage`` says what is wrong, and
        its damaged columns read as empty.
        """

    @abc.abstractmethod
    def resolve_session_id(self, text: str) -> str:
        """The id ``text``, if a session has it; else the one id starting with ``text``.

        Raises ``SessionNotFound`` for empty text, when no id starts with ``text``, or when
        several do (naming up to ten of them).
        """

    def update_session_status(
        self,
        session_id: str,
        status: SessionStatus | str,
        *,
        result: str | None = None,
        budget: Budget | Mapping[str, JSON] | None = None,
    ) -> None:
        """Set ``session_id``'s status, its result and budget if given, and ``updated_at``.

        Raises ``SessionNotFound``, ``ValueError`` for an unknown status, and
        ``SessionInUse`` if this store took the session's lease and another holder has it
        now (see ``acquire_lease``).
        """
        self.write_many([StatusWrite(session_id, status, result=result, budget=budget)])

    @abc.abstractmethod
    def session_footprint(self, session_id: str) -> SessionFootprint:
        """What ``delete_session`` would delete. Reads no JSON column, so a damaged session
        can be shown (and deleted). Raises ``SessionNotFound``."""

    @abc.abstractmethod
    def delete_session(self, session_id: str) -> SessionFootprint:
        """Delete ``session_id``: its row, cycles, events, artifact records and lease, in
        one transaction; return what was deleted (as ``session_footprint`` counted it).

        The workspace directory and memory items are not the store's to delete. Raises
        ``SessionNotFound``, and ``SessionInUse`` while another holder's live lease binds
        it (a lease taken through this store does not stop it: take the lease first to
        keep runs out meanwhile).
        """

    # -- cycles and events --------------------------------------------------------------

    def record_cycle(
        self,
        cycle: CycleRecord,
        *,
        events: Sequence[Event] = (),
        budget: Budget | Mapping[str, JSON] | None = None,
    ) -> None:
        """Commit a completed cycle, its ``events`` and the ``budget`` spent in one
        transaction (all, or none), and set the session's ``updated_at``.

        Raises ``SessionNotFound`` for an unknown session, ``StorageError`` if that cycle
        number is recorded already, ``ValueError`` if an event is another session's, and
        ``SessionInUse`` as ``update_session_status`` does.
        """
        self.write_many([CycleWrite(cycle, events, budget)])

    @abc.abstractmethod
    def load_cycles(self, session_id: str, *, after: int = 0) -> list[CycleRecord]:
        """The cycles of ``session_id`` numbered above ``after``, in order of number, each
        equal to what was recorded (``completed_at`` 0 filled in). Raises
        ``SessionNotFound``, and ``StorageError`` naming the cycle and column if one does
        not read back."""

    @abc.abstractmethod
    def last_completed_cycle(self, session_id: str) -> int:
        """The highest cycle number recorded for ``session_id``, 0 if none. Raises
        ``SessionNotFound``."""

    def append_event(self, event: Event) -> int:
        """Store ``event`` (``timestamp`` 0 means now) and return its id: ids increase with
        every event appended to the store, across sessions. Raises ``SessionNotFound`` and
        ``SessionInUse`` as ``update_session_status`` does."""
        event_id = self.write_many([event])[0]
        assert isinstance(event_id, int)
        return event_id

    @abc.abstractmethod
    def list_events(
        self, session_id: str, *, after_id: int = 0, limit: int = 1000
    ) -> list[StoredEvent]:
        """Up to ``limit`` events of ``session_id`` with an id above ``after_id``, oldest
        first: page with the last id seen. Raises ``SessionNotFound``, and
        ``StorageError`` if an event's data does not read back."""

    # -- batches ------------------------------------------------------------------------

    @abc.abstractmethod
    def write_many(self, ops: Sequence[WriteOp]) -> list[WriteOutcome]:
        """Commit several writes in one transaction: all of them, or none if one fails
        (raising that one's error). Returns, per op, what its method returns: the event
        id for an ``Event``, ``None`` for the others. A value that is not JSON raises
        ``TypeError`` or ``ValueError`` before anything is written."""

    def write_each(self, ops: Sequence[WriteOp]) -> list[WriteOutcome | StorageError]:
        """Commit several writes, each atomic on its own: a failing op leaves nothing
        behind and its ``StorageError`` (``SessionNotFound``, ``SessionInUse`` are ones)
        takes its place in the returned list; the others are committed. A value that is
        not JSON is reported the same way. Raises ``StorageError`` only if the database
        cannot be used at all.

        ``AsyncStore`` group-commits with it, so one session's bad write never fails
        another session's. This version commits each op on its own; implementations
        commit them together (one transaction, a savepoint per op).
        """
        outcomes: list[WriteOutcome | StorageError] = []
        for op in ops:
            try:
                outcomes.append(self.write_many([op])[0])
            except StorageError as exc:
                outcomes.append(exc)
            except (TypeError, ValueError) as exc:
                outcomes.append(StorageError(f"Cannot store {type(op).__name__}: {exc}"))
        return outcomes

    # -- artifacts ----------------------------------------------------------------------

    @abc.abstractmethod
    def add_artifact(
        self,
        session_id: str,
        relative_path: str,
        *,
        agent_created: bool = True,
        cycle: int | None = None,
        artifact_id: str | None = None,
    ) -> ArtifactRecord:
        """Record that ``relative_path`` (POSIX, inside the session's workspace) is an
        artifact, and return the record: ``artifact_id`` defaults to a new UUID,
        ``file_name`` is the path's last part, ``created_at`` now.

        The file is not the store's: an upload writes it into the workspace, then records
        it here. Raises ``SessionNotFound``, and ``StorageError`` if ``artifact_id`` is
        taken.
        """

    @abc.abstractmethod
    def list_artifacts(
        self, session_id: str, *, offset: int = 0, limit: int = 100
    ) -> Page[ArtifactRecord]:
        """One page of ``session_id``'s artifacts, oldest first (ties in the order added).
        Raises ``SessionNotFound``."""

    @abc.abstractmethod
    def get_artifact(self, session_id: str, artifact_id: str) -> ArtifactRecord | None:
        """``session_id``'s artifact ``artifact_id``, or ``None`` if it has none of that id
        (another session's does not count): a download reads ``relative_path`` from the
        session's workspace. Raises ``SessionNotFound``."""

    # -- leases -------------------------------------------------------------------------

    @abc.abstractmethod
    def acquire_lease(
        self, session_id: str, holder: Holder, *, expiry: float, now: float | None = None
    ) -> Lease:
        """Take ``session_id``'s lease for ``holder``, to expire ``expiry`` seconds after
        ``now`` (default: the current time), and return it.

        Raises ``SessionInUse`` naming the holder while a lease binds: anyone's, the same
        ``holder``'s too (a session runs once at a time). A lease binds until it expires,
        or until its holder's process is known gone (``Lease.live``). The session need not
        be stored yet. Atomic: of two stores acquiring at once, one gets the lease.

        Until ``release_lease``, this store fences the session: writes of its cycles,
        events and status through this store raise ``SessionInUse`` once another holder
        has the lease, and ``check_held`` raises.
        """

    @abc.abstractmethod
    def renew_lease(self, lease: Lease, *, expiry: float, now: float | None = None) -> Lease:
        """Extend ``lease`` to expire ``expiry`` seconds after ``now`` and return it renewed.

        Renews even a lapsed lease nobody took over. Raises ``SessionInUse`` (saying it
        was taken over) if another holder has it, or if it is gone.
        """

    def renew_leases(
        self, leases: Sequence[Lease], *, expiry: float, now: float | None = None
    ) -> list[Lease | SessionInUse]:
        """Renew each of ``leases`` as ``renew_lease`` does, all at ``now``: for each, in
        order, the renewed lease or the ``SessionInUse`` saying it was taken over. A
        runtime's one heartbeat renews every lease it holds this way; an implementation
        overrides it to do them in one transaction.

        A ``StorageError`` (the database cannot be used) is raised, not returned."""
        results: list[Lease | SessionInUse] = []
        for lease in leases:
            try:
                results.append(self.renew_lease(lease, expiry=expiry, now=now))
            except SessionInUse as exc:
                results.append(exc)
        return results

    @abc.abstractmethod
    def release_lease(self, lease: Lease) -> None:
        """Give ``lease`` up and end this store's fencing of the session. If another holder
        has taken it over, theirs stays. Releasing twice is harmless."""

    @abc.abstractmethod
    def get_lease(self, session_id: str) -> Lease | None:
        """``session_id``'s lease as stored (live or not), or ``None``."""

    @abc.abstractmethod
    def check_held(self, session_id: str, *, now: float | None = None) -> None:
        """Raise ``SessionInUse`` if this store took ``session_id``'s lease and another
        holder has it now (or it is gone): checked before a side effect, not only at the
        next write. Does nothing for a session this store holds no lease on.

        Until the expiry of this store's last acquisition or renewal of the lease, nobody
        can have taken it (a lease binds until it expires), so the check needs no read
        before then (``lease_confirmed``); after it, the stored lease decides. ``now``
        (default: the current time) is when the check is made."""

    def lease_confirmed(self, session_id: str, *, now: float | None = None) -> bool:
        """Whether ``check_held(session_id)`` is known to pass without reading the store:
        this store acquired or renewed the lease, and its expiry is not reached. Never
        blocks, so the async facade answers it without a worker thread. This default
        knows nothing (the store is always read)."""
        return False
