"""The emitter: a session's one masking boundary.

Everything a session sends out or keeps passes through its ``Emitter``, which masks it
with the runtime's ``Redactor`` on the way:

- every event, sent through ``on_event`` at once and through ``on_events`` in batches
  (``deliver``), and kept for the store (``emit``);
- every record the store keeps: a completed cycle (``commit_cycle``), the outcome
  (``save_outcome``), a session abandoned by the stall watchdog (``save_abandoned``);
- every message kept for the model (``message``), every text entering the session from
  outside (``text``: the goal, command output, what memory is given) and every answer of the
  session's model (``response``: masked before a plugin wrapping ``llm_request``, such as a
  recorder, sees it).

Callers hand it raw values; none masks on its own. Masking is idempotent (``***`` holds no
secret), so a value that passes twice is unharmed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import trio

from hookspecs import (
    JSON,
    Budget,
    CommandCall,
    CommandResult,
    Event,
    EventKind,
    LLMResponse,
    Message,
    SessionOutcome,
    SessionView,
)

from .._errors import HookError, SessionInUse
from ..hooks._hookcall import AsyncHooks
from ..store._open import open_store
from ..store._records import PROVISIONAL
from ..store._storage import AsyncStore, CycleRecord, SessionStatus
from ._redact import Redactor, masked_message

# How long the last on_events delivery may take when hooks have no deadline of their own.
_LAST_DELIVERY_SECONDS = 30.0


def call_json(call: CommandCall | None) -> JSON:
    """A command call as events and the store show it (unmasked: the emitter masks)."""
    if call is None:
        return None
    return {"command": call.command, "arguments": dict(call.arguments), "call_id": call.call_id}


def result_json(result: CommandResult | None) -> JSON:
    """A command result as events and the store show it (unmasked: the emitter masks)."""
    if result is None:
        return None
    return {"ok": result.ok, "output": result.output, "error": result.error, "final": result.final}


def error_data(plugin: str, hook: str, error: str) -> dict[str, Any]:
    """The data of an ``error`` event (see ``EventKind``)."""
    return {"plugin": plugin, "hook": hook, "error": error}


MAX_BATCH = 64
"""At most this many events wait for ``on_events``: a longer run of them is delivered."""


class Emitter:
    """Masks and sends out what one session says, and writes what it keeps.

    ``view`` is the session as plugins see it now: the session sets it when it starts and
    each cycle, and events and hook calls carry it. Once ``taken_over`` (another process
    took the session's lease), the session's record is theirs: nothing more is written.
    """

    def __init__(
        self,
        *,
        session_id: str,
        redactor: Redactor,
        hooks: AsyncHooks,
        hook_timeout: float | None,
        store: AsyncStore,
        store_path: Path | str,
        stored: Callable[[str], None] | None = None,
    ) -> None:
        self.view = SessionView(id=session_id, goal="", workspace=Path())
        self.taken_over = False
        self._redactor = redactor
        self._hooks = hooks
        self._hook_timeout = hook_timeout
        self._store = store
        # The watchdog's last write goes through a connection of its own (save_abandoned).
        self._store_path = store_path
        # Told the session's id after each write (a cycle, an event, the outcome): a server
        # wakes whoever watches the session. It must not block or raise.
        self._stored = stored
        # Events of the cycle in flight: committed with it, in one transaction.
        self._pending: list[Event] = []
        # Events not yet delivered through on_events.
        self._outbox: list[Event] = []

    def rebind(self, hooks: AsyncHooks) -> None:
        """Call ``hooks`` from now on (the runtime loaded plugins anew, between cycles)."""
        self._hooks = hooks

    @property
    def session_id(self) -> str:
        return self.view.id

    # -- masking --------------------------------------------------------------------------

    def text(self, value: str) -> str:
        """``value`` with every known secret masked."""
        return self._redactor.text(value)

    def value(self, value: JSON) -> JSON:
        """A JSON value with every known secret masked, in keys and strings, recursively."""
        return self._redactor(value)

    def message(self, message: Message) -> Message:
        """A message as kept for the model: its text and tool-call arguments masked."""
        return masked_message(message, self._redactor.text)

    def response(self, response: LLMResponse) -> LLMResponse:
        """A model's answer, masked before anything (the session, a recording) keeps it."""
        if not self._redactor.active:
            return response
        return attrs.evolve(response, message=self.message(response.message))

    # -- events ---------------------------------------------------------------------------

    async def emit(
        self, kind: EventKind, data: Mapping[str, Any], *, store_now: bool = False
    ) -> None:
        """Send an event through ``on_event`` (masked), queue it for ``on_events`` and
        keep it for the store: with the cycle in flight, or at once with ``store_now``
        (which delivers the batch at once too)."""
        event = self._event(kind, data)
        await self._hooks.on_event.call(
            {"session": self.view, "event": event},
            timeout=self._hook_timeout,
            isolate=self._report_output_error,
        )
        self._outbox.append(event)
        if store_now:
            await self.deliver()
            await self._store.append_event(event)
            self._written()
        else:
            self._pending.append(event)
            if len(self._outbox) >= MAX_BATCH:
                await self.deliver()

    async def deliver(self) -> None:
        """Send the events queued since the last delivery through ``on_events``, as one
        batch: before a command runs, before a person is asked, at each commit and at the
        end, so that output shows what is about to happen before it does."""
        if not self._outbox:
            return
        events, self._outbox = tuple(self._outbox), []
        await self._hooks.on_events.call(
            {"session": self.view, "events": events},
            timeout=self._hook_timeout,
            isolate=self._report_output_error,
        )

    async def report(self, error: HookError) -> None:
        """An ``error`` event naming the plugin and hook that failed."""
        await self.emit(EventKind.ERROR, error_data(error.plugin, error.hook, str(error)))

    def _report_output_error(self, error: HookError) -> None:
        # An output plugin failed: report through the store only, since sending an event
        # through on_event again could fail the same way, forever.
        self._pending.append(
            self._event(EventKind.ERROR, error_data(error.plugin, error.hook, str(error)))
        )

    def _event(self, kind: EventKind, data: Mapping[str, Any]) -> Event:
        return Event(
            kind=kind,
            session_id=self.view.id,
            cycle=self.view.cycle,
            data=self.value(dict(data)),
            timestamp=time.time(),
        )

    # -- the store ------------------------------------------------------------------------

    async def commit_cycle(
        self,
        *,
        number: int,
        plan: Mapping[str, Any],
        call: CommandCall | None,
        result: CommandResult | None,
        usage: Mapping[str, Any],
        messages: tuple[Message, ...],
        budget: Budget,
        provisional: bool = False,
    ) -> None:
        """Commit a completed cycle: its record, its events and the budget, in one
        transaction. ``messages`` are the ones the cycle added to the conversation, already
        masked by ``message`` (they are stored as the model keeps them). ``provisional``:
        the record of a cycle whose command is about to run (``CycleRecord.provisional``),
        which the completed cycle's record replaces."""
        await self.deliver()
        events, self._pending = self._pending, []
        recorded = self.value(result_json(result))
        if provisional and isinstance(recorded, dict):
            recorded[PROVISIONAL] = True
        await self._store.record_cycle(
            CycleRecord(
                session_id=self.view.id,
                number=number,
                plan=self.value(dict(plan)),
                command=self.value(call_json(call)),
                result=recorded,
                usage=dict(usage),
                messages=messages,
            ),
            events=events,
            budget=budget,
        )
        self._written()

    def _written(self) -> None:
        if self._stored is not None:
            self._stored(self.view.id)

    async def save_outcome(self, outcome: SessionOutcome, budget: Budget) -> None:
        """Deliver and store the events not committed yet, and how the session ended."""
        try:
            # Bounded even without hook deadlines: how the session ended must be stored.
            with trio.move_on_after(self._hook_timeout or _LAST_DELIVERY_SECONDS):
                await self.deliver()
        finally:
            # Stored however the delivery ended (a wrapper's error, a Ctrl-C in a plugin).
            await self._store_outcome(outcome, budget)

    async def _store_outcome(self, outcome: SessionOutcome, budget: Budget) -> None:
        events, self._pending = self._pending, []
        if self.taken_over:
            return
        try:
            for event in events:
                await self._store.append_event(event)
            await self._store.update_session_status(
                self.view.id,
                SessionStatus(outcome.status),
                result=self.text(outcome.result),
                budget=budget,
            )
        except SessionInUse:
            self.taken_over = True
        else:
            self._written()

    def save_abandoned(self, budget: Budget, why: str) -> None:
        """Save the session as interrupted from the stall watchdog's thread, the loop being
        stuck, just before the process exits: through a connection of its own."""
        if self.taken_over:
            return
        with open_store(self._store_path) as store:
            store.update_session_status(
                self.view.id, SessionStatus.INTERRUPTED, result=self.text(why), budget=budget
            )
