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
consecutive failures end the session. Hooks other than ``plan`` are *isolated*: a plugin
that raises or overruns its deadline is reported as an error event and the session goes on.
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
    quote_data,
)

from ._commands import RegisteredCommand
from ._errors import AutoGPTError, HookError, LLMError, PermissionDenied, SessionInUse
from ._redact import masked_message
from ._storage import CycleRecord, SessionStatus

if TYPE_CHECKING:
    from ._runtime import Runtime

_MAX_OBSERVATION = 4000
_GOAL_MEMORIES = 3


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
        """Send ``request`` through the ``llm_request`` hook (the provider is its last impl)."""
        if request.model is None and self.options.model:
            request = attrs.evolve(request, model=self.options.model)
        response = await self.runtime.pm.ahook.llm_request(session=self.view, request=request)
        if response is None:
            raise LLMError("no plugin answered the model request: enable an LLM provider plugin")
        assert isinstance(response, LLMResponse)
        return response

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
        """Run cycles until the session finishes, fails, is stopped or runs out of budget."""
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
        with trio.move_on_after(self.runtime.hook_timeout or 30):
            await self.hook("session_end", outcome=outcome)
            await self.emit(
                EventKind.SESSION_END,
                {"status": outcome.status, "result": outcome.result, "cycles": outcome.cycles},
            )
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
        # Notes of earlier sessions are data the user's goal may use, never instructions:
        # they go after the goal, quoted, not into the system message.
        notes = (
            [Message(Role.USER, quote_data("\n".join(self.memories), "notes of earlier sessions"))]
            if self.memories
            else []
        )
        context = PlanningContext(
            messages=(system, Message(Role.USER, self.goal), *notes, *self.history),
            tools=self.runtime.plugins.commands.tool_specs(),
            complete=self.complete,
            model=self.options.model,
        )
        plan = await self.runtime.pm.ahook.plan(session=view, context=context)
        if not isinstance(plan, Plan):
            raise LLMError("no planner proposed anything: enable the 'planner' plugin")
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

        # A command's output is text from outside (a file, a page, a process): the model
        # reads it quoted, as data with its source. The rest are the core's own words.
        shown = _short(observation)
        if result is not None and result.ok and plan.call is not None:
            shown = quote_data(shown, f"output of {plan.call.command}")
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
        if result is not None and result.ok and result.final:
            return result.output
        return None

    def _redact_message(self, message: Message) -> Message:
        return masked_message(message, self.runtime.redactor.text)

    def _memory_text(self, plan: Plan, observation: str) -> str:
        if plan.call is None:
            return self.runtime.redactor.text(_short(f"Cycle {self.cycle}: {observation}", 1000))
        args = json.dumps(dict(plan.call.arguments), sort_keys=True, default=str)
        return self.runtime.redactor.text(
            _short(f"Cycle {self.cycle}: {plan.call.command}({args}) -> {observation}", 1000)
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
        )
        result: CommandResult | None = None
        with trio.move_on_after(timeout if timeout else math.inf) as scope:
            self._command_scope = scope
            try:
                result = await command.invoke(copy.deepcopy(dict(call.arguments)), ctx)
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


def new_session_id() -> str:
    return uuid.uuid4().hex


def history_from_cycles(cycles: list[CycleRecord]) -> list[Message]:
    messages: list[Message] = []
    for cycle in cycles:
        messages.extend(cycle.messages)
    return messages
