"""One agent session: the cycle of prompt, plan, review, command, memory, commit.

A session is a trio task. Each cycle:

1. ``build_prompt`` — plugins contribute constraints, resources and context;
2. ``plan`` — the planner asks the model (through ``llm_request``) for the next command;
3. ``post_plan`` — reviewers may amend or veto the plan;
4. the dispatcher runs the command (``_dispatcher.py``: ``pre_command``, permissions and
   consent, the lease, the command of the plugin that owns it, ``post_command``);
5. ``memory_store`` of what happened, and the completed cycle is committed to the store.

An event goes through ``on_event`` at every step. A command's failure (exception, invalid
arguments, timeout, refusal) becomes the observation the model sees next cycle; too many
consecutive failures end the session. Hooks other than ``plan`` and ``llm_request`` are
*isolated*: a plugin that raises or overruns its deadline is reported as an error event and
the session goes on. ``plan`` and ``llm_request`` have deadlines too (the provider's own
request timeout, retries included, plus ``limits.hook_timeout``); a plugin that raises
there, overruns, or returns something else than a ``Plan``/``LLMResponse`` is reported the
same way and the cycle counts as failed (the model is not asked to fix a plugin).

A session receives its collaborators, made by the runtime: the ``Emitter`` that masks
and writes everything it says or keeps, the ``HookCaller`` for its hook calls, and the
``Dispatcher`` for its commands. It never sees the runtime.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from pathlib import Path

import attrs
import trio

from hookspecs import (
    DATA_RULE,
    Budget,
    CommandCall,
    CommandResult,
    EventKind,
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
    ToolSpec,
    Usage,
    quote_data,
)

from .._errors import HookError, LLMError, SessionInUse
from ..hooks._hookcall import stall_interrupts
from ..store._storage import CycleRecord
from ._caller import HookCaller
from ._dispatcher import Dispatcher
from ._emitter import Emitter, call_json, error_data

# Re-exported: tests and benchmarks import it from here, where it used to live.
from ._options import RunOptions as RunOptions

_MAX_OBSERVATION = 4000
_GOAL_MEMORIES = 3


def _short(value: str, limit: int = _MAX_OBSERVATION) -> str:
    return value if len(value) <= limit else value[: limit - 20] + f"... [{len(value)} chars]"


@attrs.define
class Session:
    """The state of one running session, and its cycle.

    ``provider_seconds`` is how long the session's provider may take over one request,
    retries included (``_model.provider_seconds``); ``limits.hook_timeout`` (the hook
    caller's) is added for the plugins around it. ``tools`` gives the commands offered to
    the model, each cycle.
    """

    id: str
    goal: str
    workspace: Path
    budget: Budget
    emitter: Emitter
    hooks: HookCaller
    dispatcher: Dispatcher
    tools: Callable[[], tuple[ToolSpec, ...]]
    provider_seconds: float
    max_failures: int
    continuous: bool = False
    #: Whose session it is (``SessionView.owner``): memory stays within one owner.
    owner: str | None = None
    model: str | None = None
    history: list[Message] = attrs.field(factory=list)
    cycle: int = 0
    # Cycles committed to the store (the one in flight, if any, is not).
    completed: int = 0
    failures: int = 0
    # Notes of any session relevant to the goal, recalled once when the session starts.
    memories: list[str] = attrs.field(factory=list)
    # Awaited before each cycle with its number: whoever drives the session paces it (the
    # server's step-by-step tasks run one cycle per request). None: cycles follow at once.
    gate: Callable[[int], Awaitable[None]] | None = None
    # Entered around each cycle, after its gate: the runtime binds the session to the
    # plugins loaded now, which the whole cycle then uses. None: always the same.
    cycle_scope: Callable[[], AbstractContextManager[None]] | None = None
    # The plan of the cycle in flight, once its command is dispatched (record_intent).
    _planned: Plan = attrs.field(factory=Plan, init=False)

    def __attrs_post_init__(self) -> None:
        self.refresh_view()
        self.dispatcher.before_effects = self.record_intent

    @property
    def view(self) -> SessionView:
        return self.emitter.view

    def refresh_view(self) -> SessionView:
        """A new snapshot of the session for plugins; events and hook calls carry it."""
        self.emitter.view = SessionView(
            id=self.id,
            goal=self.goal,
            workspace=self.workspace,
            cycle=self.cycle,
            continuous=self.continuous,
            budget=self.budget,
            owner=self.owner,
        )
        return self.emitter.view

    # -- memory ---------------------------------------------------------------------------

    async def recall(self, query: MemoryQuery) -> list[MemoryHit]:
        """``memory_recall`` over every backend, merged: best score first, no repeats.

        What is not a list of ``MemoryHit`` with a numeric score is left out and reported.
        """
        results = await self.hooks.call("memory_recall", query=query) or []
        valid: list[MemoryHit] = []
        for answer in results:
            hits = answer if isinstance(answer, list) else [answer]
            for hit in hits:
                if isinstance(hit, MemoryHit) and isinstance(hit.score, int | float):
                    valid.append(hit)
                elif hit is not None:
                    await self.emitter.emit(
                        EventKind.ERROR,
                        error_data(
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

    # -- the model ------------------------------------------------------------------------

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """Send ``request`` through the ``llm_request`` hook (the provider is its last impl).

        A plugin failing there raises a ``HookError`` naming it, out of the planner.
        """
        if request.model is None and self.model:
            request = attrs.evolve(request, model=self.model)
        response = await self.hooks.call_unisolated(
            "llm_request",
            seconds=self._model_request_seconds(),
            returns=LLMResponse,
            request=request,
        )
        if response is None:
            raise LLMError("no plugin answered the model request: enable an LLM provider plugin")
        assert isinstance(response, LLMResponse)
        return response

    def _model_request_seconds(self) -> float:
        """The deadline of an ``llm_request`` call: the provider's, plus ``hook_timeout`` for
        the plugins around it. No deadline when ``limits.hook_timeout`` is null."""
        margin = self.hooks.hook_timeout
        return math.inf if margin is None else self.provider_seconds + margin

    def _plan_seconds(self) -> float:
        """The deadline of a ``plan`` call: one model request and ``hook_timeout`` besides."""
        margin = self.hooks.hook_timeout
        return math.inf if margin is None else self._model_request_seconds() + margin

    async def plan(self, context: PlanningContext) -> Plan | None:
        """The cycle's plan, or ``None`` when a plugin failed at ``plan`` or at the model
        request inside it (raised, overran its deadline, returned another type); that is
        reported as an error event naming the plugin.

        A provider's ``LLMError`` (a rejected key, an unknown model, a replay mismatch)
        still ends the session: another cycle would fail the same way.
        """
        try:
            plan = await self.hooks.call_unisolated(
                "plan", seconds=self._plan_seconds(), returns=Plan, context=context
            )
        except HookError as error:
            if isinstance(error.__cause__, LLMError):
                raise
            await self.emitter.report(error)
            return None
        if plan is None:
            raise LLMError("no planner proposed anything: enable the 'planner' plugin")
        assert isinstance(plan, Plan)
        return plan

    # -- the loop -------------------------------------------------------------------------

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
        self.emitter.save_abandoned(
            self.budget, "stopped before finishing: a plugin blocked the event loop"
        )

    async def _run(self) -> SessionOutcome:
        self.completed = self.cycle
        outcome = SessionOutcome(status="failed", cycles=self.cycle)
        try:
            await self.hooks.call("session_start")
            self.memories = await self.recall_for_goal()
            await emit_start(self.emitter, self.goal, self.workspace, self.cycle)
            while True:
                exhausted = self.budget_exhausted()
                if exhausted:
                    outcome = SessionOutcome("budget_exhausted", exhausted, self.completed)
                    break
                if self.gate is not None:
                    await self.gate(self.cycle + 1)
                if self.cycle_scope is None:
                    final = await self.run_cycle()
                else:
                    with self.cycle_scope():
                        final = await self.run_cycle()
                if final is not None:
                    outcome = SessionOutcome("finished", self.emitter.text(final), self.completed)
                    break
                if self.failures >= self.max_failures:
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
            self.emitter.taken_over = True
            raise
        except (LLMError, HookError) as exc:
            # A provider's error arrives wrapped by the hook that called it: report the
            # provider's own message, which says what to fix.
            cause = exc.__cause__ if isinstance(exc.__cause__, LLMError) else exc
            outcome = SessionOutcome("failed", self.emitter.text(str(cause)), self.completed)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                outcome = SessionOutcome("interrupted", "stopped before finishing", self.completed)
            else:
                why = f"internal error: {type(exc).__name__}: {exc}"
                outcome = SessionOutcome("failed", self.emitter.text(why), self.completed)
            with trio.CancelScope(shield=True):
                await self._finish(outcome)
            raise
        await self._finish(outcome)
        return outcome

    async def _finish(self, outcome: SessionOutcome) -> None:
        await end_session(self.hooks, self.emitter, outcome, self.budget)

    async def run_cycle(self) -> str | None:
        """One cycle; returns the session's result when a command ended it."""
        self.cycle += 1
        self.refresh_view()
        prompt = PromptBuilder(goal=self.goal)
        prompt.add_constraint(DATA_RULE)
        await self.hooks.call("build_prompt", prompt=prompt)
        mask = self.emitter.text
        system = Message(Role.SYSTEM, mask(prompt.render()))
        # Notes of earlier sessions and what plugins added as data (file names, ...) are
        # text from outside: after the goal, quoted with their source, never in the system
        # message.
        data = [(source, text) for source, text in prompt.data if text]
        if self.memories:
            data.insert(0, ("notes of earlier sessions", "\n".join(self.memories)))
        quoted = "\n\n".join(quote_data(text, source) for source, text in data)
        outside = [Message(Role.USER, mask(quoted))] if data else []
        context = PlanningContext(
            messages=(system, Message(Role.USER, self.goal), *outside, *self.history),
            tools=self.tools(),
            complete=self.complete,
            model=self.model,
        )
        planned = await self.plan(context)
        if planned is None:
            # A plugin failed, not the model's answer: nothing is added to the conversation.
            self.failures += 1
            self.budget = attrs.evolve(self.budget, cycles=self.budget.cycles + 1)
            self.refresh_view()
            failed = Plan(error="no plan this cycle: a plugin failed (see the error event)")
            await self._commit(failed, None, ())
            return None
        plan = planned
        usage_problem = _usage_problem(plan)
        if usage_problem is not None:
            # A planner's or provider's bad numbers would poison the budget for good (a NaN
            # cost cannot even be stored): the cycle fails, its usage is not counted.
            await self.emitter.emit(
                EventKind.ERROR, error_data("(the plan implementation)", "plan", usage_problem)
            )
            plan = attrs.evolve(plan, usage=Usage())
        self.budget = attrs.evolve(
            self.budget,
            cycles=self.budget.cycles + 1,
            tokens=self.budget.tokens + plan.usage.total_tokens,
            cost_usd=self.budget.cost_usd + plan.usage.cost_usd,
        )
        self.refresh_view()
        await self.emitter.emit(
            EventKind.PLAN, {"text": plan.text, "call": call_json(plan.call), "error": plan.error}
        )
        review = PlanReview(plan)
        await self.hooks.call("post_plan", review=review)
        if isinstance(review.plan, Plan):
            plan = review.plan
        else:
            await self.emitter.emit(
                EventKind.ERROR,
                error_data(
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
            self._planned = plan
            result, executed = await self.dispatcher.execute(plan.call)
            plan = attrs.evolve(plan, call=executed)
            observation = result.output if result.ok else f"Error: {result.error}"
            self.failures = 0 if result.ok else self.failures + 1

        # Masked before it is shortened: a secret cut in two would be matched by neither half.
        observation = mask(observation)
        # What a command returned, output or error, is text from outside (a file, a page, a
        # process, a server's error): the model reads it quoted, as data with its source.
        # A veto, a bad answer or no command called are the core's own words.
        shown = _short(observation)
        if result is not None and plan.call is not None:
            what = "output" if result.ok else "error"
            shown = quote_data(shown, f"{what} of {plan.call.command}")
        # Kept masked: the next request to the model, the store and a resumed session
        # all see "***" where a secret was.
        added = tuple(self.emitter.message(m) for m in self._conversation(plan, shown))
        self.history.extend(added)
        await self.hooks.call(
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

    async def _commit(
        self, plan: Plan, result: CommandResult | None, added: tuple[Message, ...]
    ) -> None:
        """Commit the cycle: its record, its events and the budget, in one transaction."""
        await emit_budget(self.emitter, self.budget)
        await self.emitter.commit_cycle(
            number=self.cycle,
            plan={"text": plan.text, "error": plan.error},
            call=plan.call,
            result=result,
            usage={
                "prompt_tokens": plan.usage.prompt_tokens,
                "completion_tokens": plan.usage.completion_tokens,
                "cost_usd": plan.usage.cost_usd,
            },
            messages=added,
            budget=self.budget,
        )
        self.completed = self.cycle

    async def record_intent(self, call: CommandCall) -> None:
        """Record the cycle as provisional, with its events so far, as ``call`` is about to
        run: if the process dies while it runs, the session resumed from the store has
        this cycle done, its command's outcome unknown, and does not run it again."""
        plan = attrs.evolve(self._planned, call=call)
        shown = quote_data(UNKNOWN_OUTCOME, f"error of {call.command}")
        added = tuple(self.emitter.message(m) for m in self._conversation(plan, shown))
        await self.emitter.commit_cycle(
            number=self.cycle,
            plan={"text": plan.text, "error": plan.error},
            call=call,
            result=CommandResult.failure(UNKNOWN_OUTCOME),
            usage={
                "prompt_tokens": plan.usage.prompt_tokens,
                "completion_tokens": plan.usage.completion_tokens,
                "cost_usd": plan.usage.cost_usd,
            },
            messages=added,
            budget=self.budget,
            provisional=True,
        )

    def _memory_text(self, plan: Plan, observation: str) -> str:
        if plan.call is None:
            return _short(self.emitter.text(f"Cycle {self.cycle}: {observation}"), 1000)
        return memory_text(self.emitter, self.cycle, plan.call, observation)

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


async def emit_start(emitter: Emitter, goal: str, workspace: Path, resumed_at: int) -> None:
    """The ``session_start`` event, stored at once."""
    await emitter.emit(
        EventKind.SESSION_START,
        {"goal": goal, "workspace": str(workspace), "resumed_at": resumed_at},
        store_now=True,
    )


async def emit_budget(emitter: Emitter, budget: Budget) -> None:
    """The ``budget`` event of a cycle, before it is committed."""
    await emitter.emit(
        EventKind.BUDGET,
        {
            "cycles": budget.cycles,
            "max_cycles": budget.max_cycles,
            "tokens": budget.tokens,
            "cost_usd": round(budget.cost_usd, 6),
        },
    )


async def end_session(
    hooks: HookCaller, emitter: Emitter, outcome: SessionOutcome, budget: Budget
) -> None:
    """``session_end`` and its event, bounded; then how the session ended, stored."""
    try:
        with trio.move_on_after(hooks.hook_timeout or 30):
            await hooks.call("session_end", outcome=outcome)
            await emitter.emit(
                EventKind.SESSION_END,
                {"status": outcome.status, "result": outcome.result, "cycles": outcome.cycles},
            )
    finally:
        # Also when a plugin stuck in session_end or on_event was interrupted by Ctrl-C
        # (a KeyboardInterrupt raised inside it): the store must say how the session ended.
        await emitter.save_outcome(outcome, budget)


def memory_text(emitter: Emitter, cycle: int, call: CommandCall, observation: str) -> str:
    """What ``memory_store`` keeps of a cycle's command: masked, then shortened (a secret
    cut in two would be matched by neither half)."""
    args = json.dumps(dict(call.arguments), sort_keys=True, default=str)
    return _short(emitter.text(f"Cycle {cycle}: {call.command}({args}) -> {observation}"), 1000)


UNKNOWN_OUTCOME = (
    "The session stopped while this command ran (its process ended), so whether it took "
    "effect is not known; it was not run again. Check its effect before running it again."
)


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
