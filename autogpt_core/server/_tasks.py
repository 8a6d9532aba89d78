"""The server's tasks: stored sessions, and the ones it runs now (``Live``).

A task is a session. It runs in the server's nursery in one of two modes:

- **steps**: one cycle per ``POST …/steps`` (the session's gate opens once per request);
  a confirmation or a question the agent asks becomes the step's output, and the next
  step's input answers it. A step-by-step task nobody steps for ``idle_seconds`` is
  parked: its session stops, saved, and the next step resumes it.
- **auto**: cycles follow at once; a confirmation waits ``approval_seconds`` for an
  approval over HTTP (``answer``), and is refused if none comes.

Every write of a session wakes whoever waits on it (``Notifier``): steps, event streams.
Tasks are the owner's: another token's request is answered as if the task did not exist.
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import functools
import json
import math
import sys
import threading
import uuid
from collections.abc import Mapping
from typing import Any, Literal

import attrs
import trio

from hookspecs import Confirmation, ConfirmationRequest

from .._errors import AutoGPTError, SessionInUse, SessionNotFound, StorageError
from ..agent._options import RunOptions
from ..agent._runtime import Channel, Runtime
from ..store._records import CycleRecord, SessionRecord, SessionStatus

Mode = Literal["steps", "auto"]

ENDED = frozenset({SessionStatus.FINISHED, SessionStatus.FAILED, SessionStatus.BUDGET_EXHAUSTED})

_APPROVE = {"approve", "approved", "yes", "y", "allow", "ok"}
_ALWAYS = {"always"}
_DENY = {"deny", "denied", "no", "n", "refuse", "reject"}


class TaskError(Exception):
    """A request the task manager refuses: ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


#: With a shared store and no notifications of other processes' writes: how often an
#: event stream of a task this process does not run looks at the store.
POLL_SECONDS = 0.25
#: How long a server waits for another's answer over the relay (``Tasks.elsewhere``).
RELAY_SECONDS = 5.0


@attrs.define(eq=False)
class _Asked:
    """A request to another server, waiting for its answer."""

    done: trio.Event = attrs.field(factory=trio.Event)
    answer: dict[str, Any] | None = None


class Notifier:
    """Wakes the tasks waiting on a key (a task id) whenever ``notify`` is called for it.

    Take ``event(key)`` *before* looking at what you wait for, then wait on it: a change
    made while you looked sets it.
    """

    def __init__(self) -> None:
        self._events: dict[str, trio.Event] = {}

    def event(self, key: str) -> trio.Event:
        found = self._events.get(key)
        if found is None:
            found = self._events[key] = trio.Event()
        return found

    def notify(self, key: str) -> None:
        found = self._events.pop(key, None)
        if found is not None:
            found.set()

    def notify_all(self) -> None:
        events, self._events = self._events, {}
        for event in events.values():
            event.set()


@attrs.define(eq=False)
class Pending:
    """A confirmation or a question a running task waits on."""

    id: str
    kind: Literal["confirmation", "question"]
    cycle: int
    data: dict[str, Any]
    answered: trio.Event = attrs.field(factory=trio.Event)
    answer: Any = None

    def json(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "cycle": self.cycle, **self.data}


@attrs.define(eq=False)
class Live:
    """A task the server runs now."""

    task_id: str
    owner: str | None
    mode: Mode
    permits: trio.MemorySendChannel[None]
    permit_source: trio.MemoryReceiveChannel[None]
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    pending: Pending | None = None
    at_gate: bool = False
    parked: bool = False
    ended: bool = False
    error: str | None = None
    #: The session's lease is another process's (a server on the same PostgreSQL).
    elsewhere: bool = False
    cycle: int = 0
    gates: int = 0


class Tasks:
    """The tasks of one server: their records in the runtime's store, and the live ones.

    ``base`` holds the options every task runs with (the model options of ``autogpt
    serve``); ``max_sessions`` bounds the live tasks (past it, ``TaskError`` 503).
    """

    def __init__(
        self,
        runtime: Runtime,
        nursery: trio.Nursery,
        *,
        base: RunOptions,
        max_sessions: int = 100,
        max_sessions_per_token: int | None = None,
        idle_seconds: float = 300.0,
        approval_seconds: float | None = None,
        shared_store: bool = False,
    ) -> None:
        self.runtime = runtime
        #: Other server processes use the same store (PostgreSQL): a stepped task parks
        #: right after each step, so that any process can take the next one, and event
        #: streams also look at the store now and then (others' writes wake nobody here).
        self.shared_store = shared_store
        self.nursery = nursery
        self.base = base
        self.max_sessions = max_sessions
        self.max_sessions_per_token = max_sessions_per_token
        self.idle_seconds = idle_seconds
        limit = runtime.config.limits.confirm_timeout
        self.approval_seconds = (
            approval_seconds if approval_seconds is not None else (limit or math.inf)
        )
        self.live: dict[str, Live] = {}
        #: Set by ``drain``: no task starts or begins a cycle; event streams end.
        self.draining = False
        self.closing = False
        self._watching = trio.CancelScope()
        #: With a shared store: this process hears of other processes' writes (PostgreSQL
        #: notifications, ``listen_for_changes``), so streams need not look every so often.
        self.listening = False
        self._listener = trio.CancelScope()
        # This server's questions to others over the relay, by request id.
        self._asked: dict[str, _Asked] = {}
        self.notifier = Notifier()
        self._locks: dict[str, trio.Lock] = {}
        runtime.stored_listeners.append(self.notifier.notify)

    @property
    def store(self) -> Any:
        return self.runtime.store

    # -- records ----------------------------------------------------------------------

    async def create(
        self, goal: str, owner: str | None, *, continuous: bool = False, autonomous: bool = False
    ) -> str:
        options = attrs.evolve(
            self.base,
            owner=owner,
            continuous=continuous,
            autonomous=autonomous,
            session_id=None,
        )
        return await self.runtime.create(goal, options)

    async def discard(self, record: SessionRecord) -> None:
        """Delete a task that never ran (its record and its empty workspace)."""
        await self.store.delete_session(record.id)
        with contextlib.suppress(OSError):
            record.workspace.rmdir()

    async def get(self, task_id: str, owner: str | None) -> SessionRecord:
        """The task, if ``owner`` may see it; else ``TaskError`` 404."""
        try:
            record: SessionRecord = await self.store.get_session(task_id)
        except SessionNotFound:
            raise _not_found("task", task_id) from None
        if record.config.get("owner") != owner:
            raise _not_found("task", task_id)
        return record

    async def list(self, owner: str | None, *, offset: int, limit: int) -> tuple[list[Any], int]:
        """One page of ``owner``'s tasks, newest first, and how many there are."""
        mine: list[SessionRecord] = []
        start = 0
        while True:
            page = await self.store.list_sessions(offset=start, limit=500)
            mine.extend(r for r in page.items if r.config.get("owner") == owner)
            start += len(page.items)
            if not page.items or start >= page.total:
                break
        return mine[offset : offset + limit], len(mine)

    def status(self, record: SessionRecord) -> str:
        """What the task is doing: created (never run), running, waiting (for an answer),
        interrupted, or how it ended."""
        live = self.live.get(record.id)
        if live is not None:
            return "waiting" if live.pending is not None else "running"
        if record.status == SessionStatus.INTERRUPTED and not record.budget.get("cycles"):
            return "created" if record.updated_at == record.created_at else "interrupted"
        return str(record.status)

    # -- running ----------------------------------------------------------------------

    def lock(self, task_id: str) -> trio.Lock:
        found = self._locks.get(task_id)
        if found is None:
            found = self._locks[task_id] = trio.Lock()
        return found

    async def start(self, record: SessionRecord, mode: Mode) -> Live:
        """Run ``record`` in ``mode`` in the server's nursery."""
        if record.id in self.live:
            raise TaskError(409, f"task {record.id} is running already")
        if record.status in ENDED:
            raise TaskError(
                409,
                f"task {record.id} has ended ({record.status}: {record.result or 'no result'}); "
                "it takes no more steps: create a new task",
            )
        if self.draining:
            raise TaskError(503, "this server is stopping; try another, or again", retry_after=5)
        if len(self.live) >= self.max_sessions:
            raise TaskError(
                503,
                f"this server runs {len(self.live)} tasks, its limit (--max-sessions); "
                "try again shortly",
                retry_after=5,
            )
        owner = record.config.get("owner")
        per_token = self.max_sessions_per_token
        mine = sum(1 for other in self.live.values() if other.owner == owner)
        if per_token is not None and mine >= per_token:
            raise TaskError(
                503,
                f"this token runs {per_token} tasks, its limit (--max-sessions-per-token): "
                "let one finish, answer what they wait for, or cancel one",
                retry_after=5,
            )
        send, receive = trio.open_memory_channel[None](math.inf)
        live = Live(record.id, owner, mode, send, receive)
        self.live[record.id] = live
        await self.nursery.start(self._drive, live)
        return live

    async def _drive(self, live: Live, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        channel = Channel(
            consent=lambda request: self._confirm(live, request),
            question=lambda question: self._ask(live, question),
            gate=lambda cycle: self._gate(live, cycle),
        )
        with live.scope:
            task_status.started()
            try:
                await self.runtime.resume(live.task_id, self.base, channel=channel)
            except SessionInUse as exc:
                live.elsewhere = True
                live.error = self.runtime.redactor.text(str(exc))
            except AutoGPTError as exc:
                live.error = self.runtime.redactor.text(str(exc))
            except Exception as exc:  # a session's bug must not stop the server
                live.error = self.runtime.redactor.text(f"internal error: {exc!r}")
                print(f"autogpt serve: task {live.task_id}: {live.error}", file=sys.stderr)
            finally:
                live.ended = True
                if self.live.get(live.task_id) is live:
                    del self.live[live.task_id]
                self.notifier.notify(live.task_id)

    async def _gate(self, live: Live, cycle: int) -> None:
        """Before each cycle: a draining server parks the task here; in steps mode, wait
        for a step request (parked after ``idle_seconds``)."""
        live.cycle = cycle - 1
        if self.draining:
            self._park(live)
            await trio.sleep_forever()
        if live.mode == "auto":
            return
        live.at_gate = True
        self.notifier.notify(live.task_id)
        live.gates += 1
        queued = live.permit_source.statistics().current_buffer_used
        if self.shared_store and live.gates > 1 and not queued:
            self._park(live)
            await trio.sleep_forever()
        with trio.move_on_after(self.idle_seconds):
            await live.permit_source.receive()
            live.at_gate = False
            return
        self._park(live)
        await trio.sleep_forever()

    async def listen_for_changes(self, retry: float) -> None:
        """With a shared store that tells of writes (PostgreSQL's ``listen``): wake this
        server's event streams of a task whenever any process writes to it, until the
        server drains. Listening runs in a thread of its own, not one of the store's; a
        lost connection is tried again every ``retry`` seconds, and meanwhile the streams
        look at the store every ``POLL_SECONDS`` (``listening`` is false)."""
        listen = getattr(self.store.store, "listen", None)
        if listen is None:
            return
        token = trio.lowlevel.current_trio_token()
        thread = trio.CapacityLimiter(1)

        def heard(session_id: str) -> None:
            self.notifier.notify(session_id)

        def ready() -> None:
            # What was committed before this moment was not heard: every stream looks.
            self.listening = True
            self.notifier.notify_all()

        def relayed(payload: str) -> None:
            self.nursery.start_soon(self._relayed, payload)

        with self._listener:
            while not self.draining:
                stop = threading.Event()

                def on_change(session_id: str, stop: threading.Event = stop) -> None:
                    try:
                        trio.from_thread.run_sync(heard, session_id, trio_token=token)
                    except trio.RunFinishedError:
                        stop.set()

                def on_ready(stop: threading.Event = stop) -> None:
                    try:
                        trio.from_thread.run_sync(ready, trio_token=token)
                    except trio.RunFinishedError:
                        stop.set()

                def on_relay(payload: str, stop: threading.Event = stop) -> None:
                    try:
                        trio.from_thread.run_sync(relayed, payload, trio_token=token)
                    except trio.RunFinishedError:
                        stop.set()

                try:
                    await trio.to_thread.run_sync(
                        functools.partial(
                            listen, on_change, stop, on_ready=on_ready, on_relay=on_relay
                        ),
                        abandon_on_cancel=True,
                        limiter=thread,
                    )
                except StorageError as exc:
                    print(
                        f"autogpt serve: not hearing of other servers' writes ({exc}); "
                        f"event streams look every {POLL_SECONDS:g} s, trying again in "
                        f"{retry:g} s",
                        file=sys.stderr,
                        flush=True,
                    )
                finally:
                    stop.set()
                    self.listening = False
                    self.notifier.notify_all()
                await trio.sleep(retry)

    # -- what another server's task waits on (shared store) ---------------------------

    async def elsewhere(self, task_id: str, op: str, **fields: Any) -> dict[str, Any]:
        """Ask the server running ``task_id`` (its lease's holder) about what the task
        waits on: ``op`` ``"list"`` (its pending confirmation or question) or
        ``"answer"`` (``pending_id``, ``reply``); its answer. Over the store's relay
        (PostgreSQL notifications); ``TaskError`` 404 when no server runs it, 504 when the
        one that does not answer within ``RELAY_SECONDS``."""
        lease = await self.store.get_lease(task_id)
        if lease is None or not lease.live() or lease.holder == self.runtime.holder.id:
            raise TaskError(404, f"task {task_id} is not running, so it waits on nothing")
        if not self.listening:
            raise TaskError(
                503,
                f"task {task_id} runs in another server process, and this one cannot reach "
                "it now (it is not listening to the store); ask that one, or retry",
                retry_after=5,
            )
        request_id = uuid.uuid4().hex
        waiter = self._asked[request_id] = _Asked()
        message = {"to": lease.holder, "from": self.runtime.holder.id, "id": request_id}
        try:
            await self._relay({**message, "op": op, "task": task_id, **fields})
            with trio.move_on_after(RELAY_SECONDS):
                await waiter.done.wait()
        finally:
            del self._asked[request_id]
        if waiter.answer is None:
            raise TaskError(
                504,
                f"task {task_id} runs in another server process, which did not answer within "
                f"{RELAY_SECONDS:g} s; retry",
                retry_after=1,
            )
        return waiter.answer

    async def _relay(self, message: Mapping[str, Any]) -> None:
        payload = json.dumps(message, ensure_ascii=False, separators=(",", ":"), default=str)
        notify = self.store.store.notify
        await trio.to_thread.run_sync(lambda: notify(payload, relay=True))

    async def _relayed(self, payload: str) -> None:
        """A message from another server: a request for one of this server's tasks, or
        the answer to one of this server's requests."""
        try:
            message = json.loads(payload)
        except ValueError:
            return
        if not isinstance(message, dict) or message.get("to") != self.runtime.holder.id:
            return
        if "answer" in message:
            waiter = self._asked.get(str(message.get("id")))
            if waiter is not None and isinstance(message["answer"], dict):
                waiter.answer = message["answer"]
                waiter.done.set()
            return
        answer = self._answer_relayed(message)
        reply = {"to": message.get("from"), "id": message.get("id"), "answer": answer}
        with contextlib.suppress(StorageError):
            try:
                await self._relay(reply)
            except StorageError:
                # Too long to send (a pending call's arguments): say so, shorter.
                pending = answer.get("pending") or []
                shortened = [{**p, "arguments": "(too long to relay)"} for p in pending]
                await self._relay({**reply, "answer": {**answer, "pending": shortened}})

    def _answer_relayed(self, message: Mapping[str, Any]) -> dict[str, Any]:
        live = self.live.get(str(message.get("task")))
        if live is None or live.ended:
            return {"status": 404, "message": f"task {message.get('task')} waits on nothing"}
        if message.get("op") == "list":
            listed = [live.pending.json()] if live.pending is not None else []
            return {"status": 200, "pending": listed}
        if message.get("op") == "answer":
            waiting = live.pending
            try:
                self.answer(live, message.get("pending_id"), message.get("reply"))
            except TaskError as exc:
                return {"status": exc.status, "message": str(exc)}
            assert waiting is not None
            return {"status": 200, "answered": waiting.json()}
        return {"status": 400, "message": f"unknown request {message.get('op')!r}"}

    def _tell_waiting(self, live: Live) -> None:
        """With a shared store: what ``live`` waits on changed, and no write says so;
        wake the other servers' streams of it."""
        if not self.shared_store:
            return
        notify = getattr(self.store.store, "notify", None)
        if notify is None:
            return

        async def tell() -> None:
            with contextlib.suppress(StorageError):
                await trio.to_thread.run_sync(notify, live.task_id)

        self.nursery.start_soon(tell)

    async def watch_orphans(self, period: float) -> None:
        """With a shared store: every ``period`` seconds, take up the autonomous tasks whose
        server died (``adopt_orphans``), until the server drains."""
        with self._watching:
            while not self.draining:
                await trio.sleep(period)
                await self.adopt_orphans()

    async def adopt_orphans(self) -> builtins.list[str]:
        """Start the autonomous tasks that were running in a server that died: stored as
        running, with a lease that no longer binds (lapsed, or its process gone). A task
        stopped cleanly (cancelled, drained, parked) released its lease and stays as it is.
        Two servers adopting at once: one gets the lease, the other lets it go."""
        adopted: builtins.list[str] = []
        offset = 0
        while not self.draining:
            page = await self.store.list_sessions(offset=offset, limit=200, status="interrupted")
            for record in page.items:
                if record.id in self.live or record.config.get("autonomous") is not True:
                    continue
                lease = await self.store.get_lease(record.id)
                if lease is None or lease.live():
                    continue
                try:
                    await self.start(record, "auto")
                except TaskError:
                    return adopted  # full: the next look takes the rest
                adopted.append(record.id)
            offset += len(page.items)
            if not page.items or offset >= page.total:
                break
        return adopted

    async def drain(self, seconds: float) -> None:
        """Stop the live tasks at a safe point: each finishes the cycle it is in and stops
        before the next (one waiting at its gate or on a person stops at once); past
        ``seconds`` the rest are cancelled (saved at their last completed cycle). Then the
        event streams end."""
        self.draining = True
        self._watching.cancel()
        self._listener.cancel()
        with trio.move_on_after(seconds):
            while self.live:
                woken = [self.notifier.event(task_id) for task_id in self.live]
                for live in list(self.live.values()):
                    if live.at_gate or live.pending is not None:
                        self._park(live)
                async with trio.open_nursery() as nursery:
                    # Wait until any of them changes.
                    async def wait(event: trio.Event) -> None:
                        await event.wait()
                        nursery.cancel_scope.cancel()

                    for event in woken:
                        nursery.start_soon(wait, event)
        for live in list(self.live.values()):
            live.scope.cancel()
        with trio.move_on_after(seconds):
            while self.live:
                await self.notifier.event(next(iter(self.live))).wait()
        self.closing = True
        self.notifier.notify_all()

    def _park(self, live: Live) -> None:
        live.parked = True
        live.scope.cancel()

    async def _wait_answer(self, live: Live, pending: Pending) -> Any:
        live.pending = pending
        self.notifier.notify(live.task_id)
        self._tell_waiting(live)
        seconds = self.idle_seconds if live.mode == "steps" else self.approval_seconds
        try:
            with trio.move_on_after(seconds):
                await pending.answered.wait()
                return pending.answer
            if live.mode == "steps":
                self._park(live)
                await trio.sleep_forever()
            return None  # auto mode: nobody answered in time, so it is refused
        finally:
            live.pending = None
            self.notifier.notify(live.task_id)
            self._tell_waiting(live)

    async def _confirm(self, live: Live, request: ConfirmationRequest) -> object:
        data = {
            "command": request.call.command,
            # Already masked by the dispatcher: "***" where a secret was.
            "arguments": copy.deepcopy(dict(request.call.arguments)),
            "plugin": request.plugin_id,
            "missing_permissions": list(request.missing_permissions),
            "description": request.description,
            "reason": request.reason,
        }
        pending = Pending(uuid.uuid4().hex, "confirmation", live.cycle + 1, data)
        return await self._wait_answer(live, pending)

    async def _ask(self, live: Live, question: str) -> object:
        text = self.runtime.redactor.text(question)
        pending = Pending(uuid.uuid4().hex, "question", live.cycle + 1, {"question": text})
        return await self._wait_answer(live, pending)

    def answer(self, live: Live, pending_id: str | None, reply: Any) -> None:
        """Answer what ``live`` waits on: a confirmation with approve/always/deny (a string,
        or a mapping ``{"decision": …, "reason": …}``), a question with text."""
        pending = live.pending
        if pending is None or (pending_id is not None and pending.id != pending_id):
            raise _not_found("pending question", pending_id or "(any)")
        if pending.answered.is_set():
            # Two answers at once: the first counts; the second is told so, never "answered".
            raise TaskError(409, f"{pending.kind} {pending.id} was answered already")
        if pending.kind == "confirmation":
            pending.answer = confirmation(pending, reply)
        else:
            text = reply.get("answer") if isinstance(reply, Mapping) else reply
            if not isinstance(text, str) or not text.strip():
                raise TaskError(
                    422,
                    f"input: the task asks {pending.data['question']!r}; give the answer as "
                    "the input text",
                )
            pending.answer = text
        pending.answered.set()

    def cancel(self, task_id: str) -> bool:
        live = self.live.get(task_id)
        if live is None:
            return False
        live.scope.cancel()
        return True

    # -- steps ------------------------------------------------------------------------

    async def step(self, record: SessionRecord, reply: Any) -> tuple[Live | None, int, bool]:
        """Run one step of ``record`` (steps mode), answering what it waits on with
        ``reply`` if it waits; return the live task (``None`` once ended), the cycle the step
        is about, and whether a cycle was completed by it."""
        task_id = record.id
        async with self.lock(task_id):
            live = self.live.get(task_id)
            while live is not None and live.parked and not live.ended:
                # Parked after its last step and still saving: let it end, then run anew
                # (a permit sent to it now would be lost with it).
                woken = self.notifier.event(task_id)
                if not live.ended:
                    await woken.wait()
            if live is not None and live.ended:
                live = self.live.get(task_id)
            if live is not None and live.mode == "auto":
                raise TaskError(
                    409,
                    f"task {task_id} runs on its own; watch its events, answer its "
                    "confirmations at …/confirmations, or cancel it first",
                )
            # A live task's last completed cycle is known without asking the store: its
            # gate records it before each cycle (``live.cycle``).
            before = (
                live.cycle if live is not None else await self.store.last_completed_cycle(task_id)
            )
            answered = None
            if live is not None and live.pending is not None:
                answered = live.pending
                self.answer(live, None, reply)
            else:
                if live is None:
                    live = await self.start(record, "steps")
                live.permits.send_nowait(None)
            while True:
                woken = self.notifier.event(task_id)
                if live.pending is not None and live.pending is not answered:
                    return live, live.pending.cycle, False
                if live.ended:
                    if live.elsewhere:
                        raise TaskError(
                            409,
                            f"task {task_id} is being run by another server process now; "
                            "watch its events, or step it again once it is done",
                            retry_after=1,
                        )
                    done = await self.store.last_completed_cycle(task_id)
                    return None, done, done > before
                # A task parking after its step (shared store) is answered for once it has
                # ended: its lease is free then, for whichever server takes the next step.
                if live.at_gate and live.cycle > before and not live.parked:
                    return live, live.cycle, True
                await woken.wait()


def confirmation(pending: Pending, reply: Any) -> Confirmation:
    """A confirmation from an answer: approve / always / deny, or ``{"decision": …}``."""
    reason = ""
    decision = reply
    if isinstance(reply, Mapping):
        decision = reply.get("decision")
        reason = reply.get("reason") or ""
        if not isinstance(reason, str):
            raise TaskError(422, "reason: must be a string")
    word = decision.strip().lower() if isinstance(decision, str) else None
    if word in _APPROVE:
        return Confirmation(True, reason or "approved over HTTP")
    if word in _ALWAYS:
        return Confirmation(True, reason or "approved over HTTP", remember=True)
    if word in _DENY:
        return Confirmation(False, reason or "denied over HTTP")
    raise TaskError(
        422,
        f"input: the task waits for a confirmation of {pending.data['command']!r} (needs "
        f"{', '.join(pending.data['missing_permissions'])}); answer 'approve', 'always' or "
        "'deny'",
    )


def _not_found(what: str, ident: str) -> TaskError:
    return TaskError(404, f"no {what} with id {ident!r}")


def last_cycle(cycles: list[CycleRecord]) -> CycleRecord | None:
    return cycles[-1] if cycles else None
