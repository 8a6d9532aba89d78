"""A session whose commands are called from outside: one cycle per call, no model.

``autogpt mcp`` serves the commands of the enabled plugins to an MCP client; each client
connection is one such session. The client is the planner: each call it makes runs through
the same dispatcher as a model's (``pre_command``, permissions and consent, the lease, the
command, ``post_command``), and is committed as a cycle of its own, with its events, so
that it is masked, traced, stored and resumable-safe like any other::

    async with runtime.calls("commands called by an MCP client") as calls:
        result = await calls.call("workspace.read_file", {"path": "notes.txt"})

Calls are run one at a time, in the order they arrive: a cycle is one command.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import attrs
import trio

from hookspecs import (
    Budget,
    CommandCall,
    CommandResult,
    EventKind,
    MemoryItem,
    SessionOutcome,
    SessionView,
)

from ._caller import HookCaller
from ._dispatcher import Dispatcher
from ._emitter import Emitter, call_json
from ._session import UNKNOWN_OUTCOME, emit_budget, emit_start, end_session, memory_text

#: The plan recorded with each call's cycle: nobody planned it here.
CALLED = "called by {who}"
_NO_USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0}


@attrs.define
class CallSession:
    """One session of commands called from outside (an MCP client's connection).

    Made by the runtime (its ``calls``) with the session's collaborators, as ``Session`` is.
    ``who`` names the caller in the session's records ("MCP client claude-code 1.0").
    """

    id: str
    goal: str
    workspace: Path
    budget: Budget
    emitter: Emitter
    hooks: HookCaller
    dispatcher: Dispatcher
    cycle_scope: Callable[[], AbstractContextManager[None]]
    who: str = "a client"
    owner: str | None = None
    cycle: int = 0
    _lock: trio.Lock = attrs.field(factory=trio.Lock, init=False)

    def __attrs_post_init__(self) -> None:
        self._refresh_view()
        self.dispatcher.before_effects = self._record_intent

    def _refresh_view(self) -> SessionView:
        self.emitter.view = SessionView(
            id=self.id,
            goal=self.goal,
            workspace=self.workspace,
            cycle=self.cycle,
            continuous=False,
            budget=self.budget,
            owner=self.owner,
        )
        return self.emitter.view

    async def start(self) -> None:
        await self.hooks.call("session_start")
        await emit_start(self.emitter, self.goal, self.workspace, self.cycle)

    async def finish(self, outcome: SessionOutcome) -> None:
        """``session_end``, and how the session ended, stored (whatever the hooks do)."""
        await end_session(self.hooks, self.emitter, outcome, self.budget)

    def exhausted(self) -> str | None:
        limit = self.budget.max_cycles
        if limit is not None and self.budget.cycles >= limit:
            return f"this session reached its limit of {limit} commands; start a new one"
        return None

    async def call(self, command: str, arguments: Mapping[str, Any] | None) -> CommandResult:
        """Run ``command`` with ``arguments`` as one cycle and return its result, masked.

        Every failure (unknown command, bad arguments, refused, raised, timed out) is a
        failed result, as for a model's call."""
        async with self._lock:
            exhausted = self.exhausted()
            if exhausted is not None:
                return CommandResult.failure(exhausted)
            with self.cycle_scope():
                return await self._run(command, dict(arguments or {}))

    async def settled(self) -> None:
        """Return once no call is running (the one in flight, if any, has ended)."""
        async with self._lock:
            pass

    async def _run(self, command: str, arguments: dict[str, Any]) -> CommandResult:
        self.cycle += 1
        self.budget = attrs.evolve(self.budget, cycles=self.budget.cycles + 1)
        self._refresh_view()
        call = CommandCall(command, arguments, f"call-{self.cycle}")
        await self.emitter.emit(
            EventKind.PLAN,
            {"text": self._plan_text(), "call": call_json(call), "error": None},
        )
        result, executed = await self.dispatcher.execute(call)
        mask = self.emitter.text
        result = attrs.evolve(
            result,
            output=mask(result.output),
            error=mask(result.error) if result.error is not None else None,
        )
        observation = result.output if result.ok else f"Error: {result.error}"
        await self.hooks.call(
            "memory_store",
            item=MemoryItem(
                text=memory_text(self.emitter, self.cycle, executed, observation),
                session_id=self.id,
                kind="observation",
                created_at=time.time(),
            ),
        )
        await emit_budget(self.emitter, self.budget)
        await self.emitter.commit_cycle(
            number=self.cycle,
            plan={"text": self._plan_text(), "error": None},
            call=executed,
            result=result,
            usage=_NO_USAGE,
            messages=(),
            budget=self.budget,
        )
        return result

    def _plan_text(self) -> str:
        return CALLED.format(who=self.who)

    async def _record_intent(self, call: CommandCall) -> None:
        """The cycle recorded as provisional as its command is about to run (as a model's
        session does): a process that dies meanwhile leaves the call's outcome unknown."""
        await self.emitter.commit_cycle(
            number=self.cycle,
            plan={"text": self._plan_text(), "error": None},
            call=call,
            result=CommandResult.failure(UNKNOWN_OUTCOME),
            usage=_NO_USAGE,
            messages=(),
            budget=self.budget,
            provisional=True,
        )
