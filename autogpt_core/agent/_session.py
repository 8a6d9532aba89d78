"""One agent session: the cycle of prompt, plan, review, confirm, command, memory, events.

A session is a trio task. Each cycle:

1. ``build_prompt`` — plugins contribute constraints, resources and context;
2. ``plan`` — the planner asks the model (through ``llm_request``) for the next command;
3. ``post_plan`` — reviewers may amend or veto the plan;
4. permission check — a command needing a permission that is not granted is confirmed by
   the user (``confirm``) or, in continuous mode, refused;
5. ``pre_command`` → the command of the plugin that owns it → ``post_command``;
6. ``memory_store`` of what happened, and the completed cycle is committed to the store.

An event goes through ``on_event`` at every step. A command's failure (exception, invalid
arguments, timeout, refusal) becomes the observation the model sees next cycle; too many
consecutive failures end the session. Hooks other than ``plan`` and ``llm_request`` are
*isolated*: a plugin that raises or overruns its deadline is reported as an error event and
the session goes on. ``plan`` and ``llm_request`` have deadlines too (the provider's own
request timeout, retries included, plus ``limits.hook_timeout``); a plugin that raises
there, overruns, or returns something else than a ``Plan``/``LLMResponse`` is reported the
same way and the cycle counts as failed (the model is not asked to fix a plugin).
"""

from __future__ import annotations

import copy
import functools
import json
import math
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import trio

from hookspecs import (
    DATA_RULE,
    Budget,
    CommandCall,
    CommandContext,
    CommandResult,
    CommandReview,
    Confirmation,
    ConfirmationRequest,
    Event,
    EventKind,
    LLMProvider,
    LLMRequest,
    LLMResponse,
    MemoryHit,
    MemoryItem,
    MemoryQuery,
    Message,
    Plan,
    PlanningContext,
    PlanReview,
    PromptBuilder,
    Role,
    SessionOutcome,
    SessionView,
    Usage,
    quote_data,
)

from .._errors import AutoGPTError, HookError, LLMError, PermissionDenied, SessionInUse
from ..hooks._hookcall import stall_interrupts
from ..plugins._commands import RegisteredCommand
from ..store._storage import CycleRecord, SessionStatus, Store
from ._redact import masked_message

if TYPE_CHECKING:
    from ._runtime import Runtime

_MAX_OBSERVATION = 4000
_GOAL_MEMORIES = 3
# How long one model request may take, for a provider whose plugin has no ``timeout`` and
# ``max_retries`` settings: the openai client's defaults (llm_openai's settings say the same).
_MODEL_TIMEOUT = 60.0
_MODEL_RETRIES = 2
# The openai client's longest pause between two tries, when the server sends no Retry-After.
_RETRY_PAUSE = 8.0


@attrs.frozen
class RunOptions:
    """How to run one session (what the CLI's ``autogpt run`` options map to)."""

    llm: str | None = None
    model: str | None = None
    base_url: str | None = None
    api_key: str | None = attrs.field(default=None, repr=False)
    max_cycles: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    continuous: bool = False
    workspace: Path | None = None
    record: Path | None = None
    strict_replay: bool = True
    session_id: str | None = None


def _call_json(call: CommandCall | None) -> Any:
    if call is None:
        return None
    return {"command": call.command, "arguments": dict(call.arguments), "call_id": call.call_id}


def _result_json(result: CommandResult | None) -> Any:
    if result is None:
        return None
    return {"ok": result.ok, "output": result.output, "error": result.error, "final": result.final}


def _error_data(plugin: str, hook: str, error: str) -> dict[str, Any]:
    """The data of an ``error`` event (see ``EventKind``)."""
    return {"plugin": plugin, "hook": hook, "error": error}


def _short(value: str, limit: int = _MAX_OBSERVATION) -> str:
    return value if len(value) <= limit else value[: limit - 20] + f"... [{len(value)} chars]"


@attrs.define
class Session:
    """The state of one running session."""

    runtime: Runtime
    id: str
    goal: str
    workspace: Path
    options: RunOptions
    provider: LLMProvider
    budget: Budget
    history: list[Message] = attrs.field(factory=list)
    cycle: int = 0
    # Cycles committed to the store (the one in flight, if any, is not).
    completed: int = 0
    failures: int = 0
    granted: set[tuple[str, str]] = attrs.field(factory=set)
    pending_events: list[Event] = attrs.field(factory=list)
    # Notes of any session relevant to the goal, recalled once when the session starts.
    memories: list[str] = attrs.field(factory=list)
    view: SessionView = attrs.field(default=None)
    # The deadline of the command running now, if any (see _command_clock_stopped).
    _command_scope: trio.CancelScope | None = attrs.field(default=None, init=False)
    # Set when another process took the session's lease over: its record is theirs.
    taken_over: bool = attrs.field(default=False, init=False)

    def __attrs_post_init__(self) -> None:
        self.refresh_view()

    def refresh_view(self) -> SessionView:
        self.view = SessionView(
            id=self.id,
            goal=self.goal,
            workspace=self.workspace,
            cycle=self.cycle,
            continuous=self.options.continuous,
            budget=self.budget,
        )
        return self.view

    # -- events and isolation ---------------------------------------------------------------

    async def emit(
        self, kind: EventKind, data: Mapping[str, Any], *, store_now: bool = False
    ) -> None:
        """Send an event through ``on_event`` (secrets redacted) and keep it for the store."""
        event = Event(
            kind=kind,
            session_id=self.id,
            cycle=self.cycle,
            data=self.runtime.redact(dict(data)),
            timestamp=time.time(),
        )
        await self.runtime.pm.ahook.on_event.call(
            {"session": self.view, "event": event},
            timeout=self.runtime.hook_timeout,
            isolate=self._report_output_error,
        )
        if store_now:
            await self.runtime.store.append_event(event)
        else:
            self.pending_events.append(event)

    def _report_output_error(self, error: HookError) -> None:
        # An output plugin failed: report through the store only, since sending an event
        # through on_event again could fail the same way, forever.
        self.pending_events.append(
            Event(
                kind=EventKind.ERROR,
                session_id=self.id,
                cycle=self.cycle,
                data=self.runtime.redact(_error_data(error.plugin, error.hook, str(error))),
                timestamp=time.time(),
            )
        )

    async def report(self, error: HookError) -> None:
        await self.emit(EventKind.ERROR, _error_data(error.plugin, error.hook, str(error)))

    async def hook(self, name: str, *, seconds: float | None = None, **kwargs: Any) -> Any:
        """Call a hook with the session's deadline, isolating failing implementations."""
        result, _ = await self.hook_checked(name, seconds=seconds, **kwargs)
        return result

    async def hook_checked(
        self, name: str, *, seconds: float | None = None, **kwargs: Any
    ) -> tuple[Any, list[HookError]]:
        """``hook``, also returning the errors that were reported (for fail-closed checks)."""
        errors: list[HookError] = []
        result = await getattr(self.runtime.pm.ahook, name).call(
            {"session": self.view, **kwargs},
            timeout=self.runtime.hook_timeout if seconds is None else seconds,
            isolate=errors.append,
        )
        for error in errors:
            await self.report(error)
        return result, errors

    def _confirm_seconds(self) -> float:
        # A person answers at their own pace: by default no deadline (limits.confirm_timeout).
        limit = self.runtime.config.limits.confirm_timeout
        return math.inf if limit is None else limit

    async def recall(self, query: MemoryQuery) -> list[MemoryHit]:
        """``memory_recall`` over every backend, merged: best score first, no repeats.

        What is not a list of ``MemoryHit`` with a numeric score is left out and reported.
        """
        results = await self.hook("memory_recall", query=query) or []
        valid: list[MemoryHit] = []
        for answer in results:
            hits = answer if isinstance(answer, list) else [answer]
            for hit in hits:
                if isinstance(hit, MemoryHit) and isinstance(hit.score, int | float):
                    valid.append(hit)
                elif hit is not None:
                    await self.emit(
                        EventKind.ERROR,
                        _error_data(
                            "(a memory_recall implementation)",
                            "memory_recall",
                            f"returned {type(hit).__name__}, not MemoryHit objects with a "
                            "numeric score; it was left out",
                        ),
                    )
        hits = sorted(valid, key=lambda h: h.score, reverse=True)
        seen: set[str] = set()
        merged = []
        for hit in hits:
            if hit.item.text not in seen:
                seen.add(hit.item.text)
                merged.append(hit)
        return merged[: query.limit]

    async def recall_for_goal(self) -> list[str]:
        if not self.goal.strip():
            return []
        query = MemoryQuery(self.goal, limit=_GOAL_MEMORIES, scope="all", kinds=("note",))
        return [_short(" ".join(h.item.text.split()), 500) for h in await self.recall(query)]

    # -- the model ----------------------------------------------------------------------

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Send ``request`` through the ``llm_request`` hook (the provider is its last impl).

        A plugin failing there raises a ``HookError`` naming it, out of the planner.
        """
        if request.model is None and self.options.model:
            request = attrs.evolve(request, model=self.options.model)
        response = await self.runtime.pm.ahook.llm_request.call(
            {"session": self.view, "request": request},
            timeout=self._model_request_seconds(),
            returns=LLMResponse,
        )
        if response is None:
            raise LLMError("no plugin answered the model request: enable an LLM provider plugin")
        assert isinstance(response, LLMResponse)
        return response

    def _provider_seconds(self) -> float:
        """How long the provider may take over one request, its retries included.

        From its plugin's ``timeout`` and ``max_retries`` settings, as the openai client
        uses them (each try up to ``timeout``, pauses between tries), or the client's
        defaults for a provider whose plugin has no such settings.
        """
        spec = self.options.llm or self.runtime.config.llm_provider or "openai"
        owner = self.runtime.plugins.providers.get(spec.partition(":")[0])
        record = self.runtime.plugins.records.get(owner[0]) if owner is not None else None
        values = record.settings.values if record is not None and record.settings else {}
        timeout, retries = values.get("timeout"), values.get("max_retries")
        seconds = float(timeout) if isinstance(timeout, int | float) else _MODEL_TIMEOUT
        tries = int(retries) + 1 if isinstance(retries, int | float) else _MODEL_RETRIES + 1
        return seconds * tries + _RETRY_PAUSE * (tries - 1)

    def _model_request_seconds(self) -> float:
        """The deadline of an ``llm_request`` call: the provider's, plus ``hook_timeout`` for
        the plugins around it. No deadline when ``limits.hook_timeout`` is null."""
        margin = self.runtime.hook_timeout
        return math.inf if margin is None else self._provider_seconds() + margin

    def _plan_seconds(self) -> float:
        """The deadline of a ``plan`` call: one model request and ``hook_timeout`` besides."""
        margin = self.runtime.hook_timeout
        return math.inf if margin is None else self._model_request_seconds() + margin

    async def plan(self, view: SessionView, context: PlanningContext) -> Plan | None:
        """The cycle's plan, or ``None`` when a plugin failed at ``plan`` or at the model
        request inside it (raised, overran its deadline, returned another type); that is
        reported as an error event naming the plugin.

        A provider's ``LLMError`` (a rejected key, an unknown model, a replay mismatch)
        still ends the session: another cycle would fail the same way.
        """
        try:
            plan = await self.runtime.pm.ahook.plan.call(
                {"session": view, "context": context},
                timeout=self._plan_seconds(),
                returns=Plan,
            )
        except HookError as error:
            if isinstance(error.__cause__, LLMError):
                raise
            await self.report(error)
            return None
        if plan is None:
            raise LLMError("no planner proposed anything: enable the 'planner' plugin")
        assert isinstance(plan, Plan)
        return plan

    async def forget(self, query: MemoryQuery) -> int:
        """``memory_forget`` in every backend; how many items they forgot in all."""
        answers = await self.hook("memory_forget", query=query) or []
        return sum(n for n in answers if isinstance(n, int) and not isinstance(n, bool))

    async def ask_user(self, question: str) -> str | None:
        if self.options.continuous:
            return None
        # A person answers at their own pace: no hook deadline here.
        with self._command_clock_stopped():
            answer = await self.hook(
                "user_input", question=question, seconds=self._confirm_seconds()
            )
        return answer if isinstance(answer, str) else None

    @contextmanager
    def _command_clock_stopped(self) -> Iterator[None]:
        """While a running command waits for the person, its own deadline does not run:
        the time spent answering is added back to it."""
        scope = self._command_scope
        if scope is None:
            yield
            return
        saved, started = scope.deadline, trio.current_time()
        scope.deadline = math.inf
        try:
            yield
        finally:
            scope.deadline = saved + (trio.current_time() - started)

    # -- the loop -----------------------------------------------------------------------

    def budget_exhausted(self) -> str | None:
        b = self.budget
        if b.max_cycles is not None and b.cycles >= b.max_cycles:
            return f"reached the limit of {b.max_cycles} cycles (raise it with --max-cycles)"
        if b.max_tokens is not None and b.tokens >= b.max_tokens:
            return f"used {b.tokens} of {b.max_tokens} tokens (raise it with --max-tokens)"
        if b.max_cost_usd is not None and b.cost_usd >= b.max_cost_usd:
            return f"spent ${b.cost_usd:.4f} of ${b.max_cost_usd:.4f} (raise it with --max-cost)"
        return None

    async def run(self) -> SessionOutcome:
        """Run cycles until the session finishes, fails, is stopped or runs out of budget.

        A Ctrl-C reaches even a plugin that blocks the event loop (``stall_interrupts``):
        the session then ends ``interrupted``, saved.
        """
        with stall_interrupts(self._save_abandoned):
            return await self._run()

    def _save_abandoned(self) -> None:
        """Save the session as interrupted from the stall watchdog's thread, the loop being
        stuck, just before the process exits: through a connection of its own."""
        if self.taken_over:
            return
        with Store(self.runtime.store_path) as store:
            store.update_session_status(
                self.id,
                SessionStatus.INTERRUPTED,
                result="stopped before finishing: a plugin blocked the event loop",
                budget=self.budget,
            )

    async def _run(self) -> SessionOutcome:
        self.completed = self.cycle
        outcome = SessionOutcome(status="failed", cycles=self.cycle)
        try:
            await self.hook("session_start")
            self.memories = await self.recall_for_goal()
            await self.emit(
                EventKind.SESSION_START,
                {"goal": self.goal, "workspace": str(self.workspace), "resumed_at": self.cycle},
                store_now=True,
            )
            while True:
                exhausted = self.budget_exhausted()
                if exhausted:
                    outcome = SessionOutcome("budget_exhausted", exhausted, self.completed)
                    break
                final = await self.run_cycle()
                if final is not None:
                    outcome = SessionOutcome("finished", self.runtime.redact(final), self.completed)
                    break
                if self.failures >= self.runtime.config.limits.max_failures:
                    outcome = SessionOutcome(
                        "failed",
                        f"{self.failures} consecutive cycles failed; see the error events",
                        self.completed,
                    )
                    break
        except trio.Cancelled:
            outcome = SessionOutcome("interrupted", "stopped before finishing", self.completed)
            with trio.CancelScope(shield=True):
                await self._finish(outcome)
            raise
        except SessionInUse:
            # Another process took the session over (this one stalled past its lease): the
            # record is theirs now, so nothing more is written here, and the caller learns
            # that it lost the session rather than an outcome that is not its own.
            self.taken_over = True
            raise
        except (LLMError, HookError) as exc:
            # A provider's error arrives wrapped by the hook that called it: report the
            # provider's own message, which says what to fix.
            cause = exc.__cause__ if isinstance(exc.__cause__, LLMError) else exc
            outcome = SessionOutcome("failed", self.runtime.redact(str(cause)), self.completed)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                outcome = SessionOutcome("interrupted", "stopped before finishing", self.completed)
            else:
                why = f"internal error: {type(exc).__name__}: {exc}"
                outcome = SessionOutcome("failed", self.runtime.redact(why), self.completed)
            with trio.CancelScope(shield=True):
                await self._finish(outcome)
            raise
        await self._finish(outcome)
        return outcome

    async def _finish(self, outcome: SessionOutcome) -> None:
        try:
            with trio.move_on_after(self.runtime.hook_timeout or 30):
                await self.hook("session_end", outcome=outcome)
                await self.emit(
                    EventKind.SESSION_END,
                    {"status": outcome.status, "result": outcome.result, "cycles": outcome.cycles},
                )
        finally:
            # Also when a plugin stuck in session_end or on_event was interrupted by Ctrl-C
            # (a KeyboardInterrupt raised inside it): the store must say how the session ended.
            await self._save_outcome(outcome)

    async def _save_outcome(self, outcome: SessionOutcome) -> None:
        events, self.pending_events = self.pending_events, []
        if self.taken_over:
            return
        try:
            for event in events:
                await self.runtime.store.append_event(event)
            await self.runtime.store.update_session_status(
                self.id,
                SessionStatus(outcome.status),
                result=self.runtime.redact(outcome.result),
                budget=self.budget,
            )
        except SessionInUse:
            self.taken_over = True

    async def run_cycle(self) -> str | None:
        """One cycle; returns the session's result when a command ended it."""
        self.cycle += 1
        view = self.refresh_view()
        prompt = PromptBuilder(goal=self.goal)
        prompt.add_constraint(DATA_RULE)
        await self.hook("build_prompt", prompt=prompt)
        redact = self.runtime.redactor.text
        system = Message(Role.SYSTEM, redact(prompt.render()))
        # Notes of earlier sessions and what plugins added as data (file names, ...) are
        # text from outside: after the goal, quoted with their source, never in the system
        # message.
        data = [(source, text) for source, text in prompt.data if text]
        if self.memories:
            data.insert(0, ("notes of earlier sessions", "\n".join(self.memories)))
        quoted = "\n\n".join(quote_data(text, source) for source, text in data)
        outside = [Message(Role.USER, redact(quoted))] if data else []
        context = PlanningContext(
            messages=(system, Message(Role.USER, self.goal), *outside, *self.history),
            tools=self.runtime.plugins.commands.tool_specs(),
            complete=self.complete,
            model=self.options.model,
        )
        planned = await self.plan(view, context)
        if planned is None:
            # A plugin failed, not the model's answer: nothing is added to the conversation.
            self.failures += 1
            self.budget = attrs.evolve(self.budget, cycles=self.budget.cycles + 1)
            self.refresh_view()
            failed = Plan(error="no plan this cycle: a plugin failed (see the error event)")
            await self._commit(failed, None, [])
            return None
        plan = planned
        usage_problem = _usage_problem(plan)
        if usage_problem is not None:
            # A planner's or provider's bad numbers would poison the budget for good (a NaN
            # cost cannot even be stored): the cycle fails, its usage is not counted.
            await self.emit(
                EventKind.ERROR, _error_data("(the plan implementation)", "plan", usage_problem)
            )
            plan = attrs.evolve(plan, usage=Usage())
        self.budget = attrs.evolve(
            self.budget,
            cycles=self.budget.cycles + 1,
            tokens=self.budget.tokens + plan.usage.total_tokens,
            cost_usd=self.budget.cost_usd + plan.usage.cost_usd,
        )
        view = self.refresh_view()
        await self.emit(
            EventKind.PLAN, {"text": plan.text, "call": _call_json(plan.call), "error": plan.error}
        )
        review = PlanReview(plan)
        await self.hook("post_plan", review=review)
        if isinstance(review.plan, Plan):
            plan = review.plan
        else:
            await self.emit(
                EventKind.ERROR,
                _error_data(
                    "(a post_plan implementation)",
                    "post_plan",
                    f"review.plan was set to {type(review.plan).__name__}, not a Plan; "
                    "the planner's plan is kept",
                ),
            )

        result: CommandResult | None = None
        if review.vetoed is not None:
            observation = f"Your plan was vetoed: {review.vetoed}"
            self.failures += 1
        elif plan.error:
            observation = plan.error
            self.failures += 1
        elif plan.call is None:
            observation = (
                "You did not call a command. Call exactly one of the available commands; "
                "call 'finish' with your result when the goal is reached."
            )
            self.failures += 1
        else:
            result, executed = await self.execute(plan.call)
            plan = attrs.evolve(plan, call=executed)
            observation = result.output if result.ok else f"Error: {result.error}"
            self.failures = 0 if result.ok else self.failures + 1

        # Masked before it is shortened: a secret cut in two would be matched by neither half.
        observation = self.runtime.redactor.text(observation)
        # What a command returned, output or error, is text from outside (a file, a page, a
        # process, a server's error): the model reads it quoted, as data with its source.
        # A veto, a bad answer or no command called are the core's own words.
        shown = _short(observation)
        if result is not None and plan.call is not None:
            what = "output" if result.ok else "error"
            shown = quote_data(shown, f"{what} of {plan.call.command}")
        # Kept masked: the next request to the model, the store and a resumed session
        # all see "***" where a secret was.
        added = [self._redact_message(m) for m in self._conversation(plan, shown)]
        self.history.extend(added)
        await self.hook(
            "memory_store",
            item=MemoryItem(
                text=self._memory_text(plan, observation),
                session_id=self.id,
                kind="observation",
                created_at=time.time(),
            ),
        )
        await self._commit(plan, result, added)
        if result is not None and result.ok and result.final:
            return result.output
        return None

    async def _commit(self, plan: Plan, result: CommandResult | None, added: list[Message]) -> None:
        """Commit the cycle: its record, its events and the budget, in one transaction."""
        await self.emit(
            EventKind.BUDGET,
            {
                "cycles": self.budget.cycles,
                "max_cycles": self.budget.max_cycles,
                "tokens": self.budget.tokens,
                "cost_usd": round(self.budget.cost_usd, 6),
            },
        )
        events, self.pending_events = self.pending_events, []
        await self.runtime.store.record_cycle(
            CycleRecord(
                session_id=self.id,
                number=self.cycle,
                plan=self.runtime.redact({"text": plan.text, "error": plan.error}),
                command=self.runtime.redact(_call_json(plan.call)),
                result=self.runtime.redact(_result_json(result)),
                usage={
                    "prompt_tokens": plan.usage.prompt_tokens,
                    "completion_tokens": plan.usage.completion_tokens,
                    "cost_usd": plan.usage.cost_usd,
                },
                messages=tuple(added),
            ),
            events=events,
            budget=self.budget,
        )
        self.completed = self.cycle

    def _redact_message(self, message: Message) -> Message:
        return masked_message(message, self.runtime.redactor.text)

    def _memory_text(self, plan: Plan, observation: str) -> str:
        # Masked, then shortened: a secret cut in two would be matched by neither half.
        redact = self.runtime.redactor.text
        if plan.call is None:
            return _short(redact(f"Cycle {self.cycle}: {observation}"), 1000)
        args = json.dumps(dict(plan.call.arguments), sort_keys=True, default=str)
        return _short(
            redact(f"Cycle {self.cycle}: {plan.call.command}({args}) -> {observation}"), 1000
        )

    def _conversation(self, plan: Plan, observation: str) -> list[Message]:
        """The messages this cycle adds: the model's reply and an answer to each tool call."""
        reply = plan.assistant_message or Message(Role.ASSISTANT, plan.text)
        if not reply.tool_calls:
            return [reply, Message(Role.USER, observation)]
        # The API requires an answer to every tool call of the reply; only one runs a cycle.
        chosen = plan.call.call_id if plan.call is not None else None
        answers = []
        for i, tool_call in enumerate(reply.tool_calls):
            ran = tool_call.id == chosen or (chosen is None and i == 0)
            text = (
                observation
                if ran
                else ("Not run: one command per cycle. Call it again if it is still needed.")
            )
            answers.append(Message(Role.TOOL, text, tool_call_id=tool_call.id))
        return [reply, *answers]

    # -- commands -----------------------------------------------------------------------

    async def execute(self, call: CommandCall) -> tuple[CommandResult, CommandCall]:
        """Review, check, confirm and run ``call``; every failure becomes a result.

        Returns the result and the call that was actually run (after ``pre_command``).
        ``pre_command`` runs first, so that what is validated and confirmed is exactly
        what runs: the arguments are copied after the review, and the copy is what the
        permission check, the confirmation and the command see. A ``pre_command``
        implementation that fails counts as a refusal (a failed check never lets a
        command through).
        """
        try:
            command = self.runtime.plugins.commands.get(call.command)
            command.validate(call.arguments)
            review = CommandReview(call)
            _, errors = await self.hook_checked("pre_command", review=review)
            if errors:
                raise PermissionDenied(
                    f"command {call.command!r} was not run: the pre_command check of plugin "
                    f"{errors[0].plugin!r} failed ({errors[0]})"
                )
            if review.refused is not None:
                raise PermissionDenied(f"command {call.command!r} was refused: {review.refused}")
            if not isinstance(review.call, CommandCall):
                raise PermissionDenied(
                    f"command {call.command!r} was not run: a pre_command implementation "
                    f"replaced it with {type(review.call).__name__}, not a CommandCall"
                )
            # The model's call id stays: its tool call is the one answered with the result.
            call = CommandCall(
                review.call.command, copy.deepcopy(dict(review.call.arguments)), call.call_id
            )
            command = self.runtime.plugins.commands.get(call.command)
            command.validate(call.arguments)
            await self.check_permissions(call, command)
        except AutoGPTError as exc:
            refused = CommandResult.failure(str(exc))
            await self.emit(EventKind.RESULT, {"command": call.command, **_result_json(refused)})
            return refused, call

        await self.emit(
            EventKind.COMMAND,
            {
                "command": command.name,
                "plugin": command.plugin_id,
                "arguments": copy.deepcopy(dict(call.arguments)),
            },
        )
        timeout = command.decl.timeout or self.runtime.config.limits.command_timeout
        ctx = CommandContext(
            session=self.view,
            plugin_id=command.plugin_id,
            settings=self.runtime.plugins.records[command.plugin_id].settings,  # type: ignore[arg-type]
            ask_user=self.ask_user,
            redact=self.runtime.redactor.text,
            ask_permission=functools.partial(self.ask_permission, call, command),
            forget=self.forget,
        )
        result: CommandResult | None = None
        # The last moment before the side effect: a process that stalled (stopped, swapped
        # out, asleep at a prompt) past its lease must not run a command another process
        # may be running too.
        await self.runtime.store.check_held(self.id)
        with trio.move_on_after(timeout if timeout else math.inf) as scope:
            self._command_scope = scope
            try:
                result = await command.invoke(copy.deepcopy(dict(call.arguments)), ctx)
            except SessionInUse:
                raise  # taken over while the command waited for a person: stop here
            except Exception as exc:  # the plugin's failure is the model's observation
                result = CommandResult.failure(
                    f"command {command.name!r} failed: {type(exc).__name__}: {exc}"
                )
            finally:
                self._command_scope = None
        if scope.cancelled_caught or result is None:
            # A worker thread cannot be stopped: a blocking command may still finish later.
            result = CommandResult.failure(
                f"command {command.name!r} did not finish within {timeout}s; it was abandoned "
                "and its effects, if any, may still appear"
            )
        replaced = await self.hook("post_command", call=call, result=result)
        if isinstance(replaced, CommandResult):
            result = replaced
        await self.emit(EventKind.RESULT, {"command": command.name, **_result_json(result)})
        return result, call

    async def check_permissions(self, call: CommandCall, command: RegisteredCommand) -> None:
        """Refuse, or ask the user about, permissions the command needs but lacks.

        Grants from the config apply to every plugin; an "always" answer grants the
        permissions to that plugin only, for the rest of the session.
        """
        await self._consent(call, command, command.decl.permissions)

    async def ask_permission(
        self, call: CommandCall, command: RegisteredCommand, permission: str, reason: str
    ) -> bool:
        """``CommandContext.ask_permission`` for the command running ``call``."""
        manifest = self.runtime.plugins.records[command.plugin_id].manifest
        if manifest is None or permission not in manifest.permissions:
            raise PermissionDenied(
                f"plugin {command.plugin_id!r} asked for permission {permission!r}, which its "
                f"manifest does not declare; add it to 'permissions' in the manifest"
            )
        try:
            with self._command_clock_stopped():
                await self._consent(call, command, (permission,), reason=reason)
        except PermissionDenied:
            return False
        # The person may have answered long after the question: if another process has
        # taken the session over meanwhile, this one must not act on it.
        await self.runtime.store.check_held(self.id)
        return True

    async def _consent(
        self,
        call: CommandCall,
        command: RegisteredCommand,
        permissions: tuple[str, ...],
        *,
        reason: str = "",
    ) -> None:
        plugin_id = command.plugin_id
        missing = tuple(
            p
            for p in permissions
            if p not in self.runtime.config.grants and (plugin_id, p) not in self.granted
        )
        if not missing:
            return
        perms = ", ".join(missing)
        why = f" ({reason})" if reason else ""
        if self.options.continuous:
            await self.emit(
                EventKind.CONFIRMATION,
                {
                    "command": call.command,
                    "plugin": plugin_id,
                    "missing": list(missing),
                    "approved": False,
                    "reason": "continuous mode",
                },
            )
            raise PermissionDenied(
                f"command {call.command!r} needs permission {perms}{why}, which is not granted, "
                "and this session runs unattended (continuous mode), so it was not run. Use "
                f"another command; an operator can grant {perms} under permissions.grant in "
                "the config"
            )
        # The confirmer gets its own copy (nothing it does can change what runs), whole but
        # for secrets, which a confirmer could print: those show as "***".
        shown = self.runtime.redact(copy.deepcopy(dict(call.arguments)))
        request = ConfirmationRequest(
            call=CommandCall(call.command, shown, call.call_id),
            plugin_id=plugin_id,
            missing_permissions=missing,
            description=command.decl.description,
            reason=reason,
        )
        # A person answers at their own pace: no hook deadline here.
        answer = await self.hook("confirm", request=request, seconds=self._confirm_seconds())
        approved = isinstance(answer, Confirmation) and answer.approved
        answered = answer.reason if isinstance(answer, Confirmation) else "nobody answered"
        await self.emit(
            EventKind.CONFIRMATION,
            {
                "command": call.command,
                "plugin": plugin_id,
                "missing": list(missing),
                "approved": approved,
                "reason": answered,
            },
        )
        if not approved:
            raise PermissionDenied(
                f"the user did not allow command {call.command!r} (needs {perms}{why})"
                + (f": {answered}" if answered else "")
                + ". Try another way to reach the goal"
            )
        if isinstance(answer, Confirmation) and answer.remember:
            self.granted.update((plugin_id, p) for p in missing)


def _usage_problem(plan: Plan) -> str | None:
    """What is wrong with a plan's usage numbers, if anything (they go into the budget)."""
    usage = plan.usage
    if not isinstance(usage, Usage):
        return f"the plan's usage is {type(usage).__name__}, not a Usage"
    for name in ("prompt_tokens", "completion_tokens"):
        value = getattr(usage, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return f"the plan's usage.{name} is {value!r}, not a whole number of tokens"
    cost = usage.cost_usd
    if isinstance(cost, bool) or not isinstance(cost, int | float) or not math.isfinite(cost):
        return f"the plan's usage.cost_usd is {cost!r}, not a finite number"
    if cost < 0:
        return f"the plan's usage.cost_usd is {cost!r}, less than 0"
    return None


def new_session_id() -> str:
    return uuid.uuid4().hex


def history_from_cycles(cycles: list[CycleRecord]) -> list[Message]:
    messages: list[Message] = []
    for cycle in cycles:
        messages.extend(cycle.messages)
    return messages
