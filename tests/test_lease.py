"""Session leases: one runtime runs a session at a time; dead and stuck holders lapse."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from autogpt_core._errors import LLMError, SessionInUse, StorageError
from autogpt_core.agent._options import RunOptions
from autogpt_core.agent._runtime import Runtime
from autogpt_core.plugins._loader import PluginSet, load
from autogpt_core.store._lease import Holder, Lease, Leases, hold_lease, taken_over
from autogpt_core.store._sqlite import Store
from hookspecs import LLMRequest, LLMResponse, SessionOutcome, hookimpl
from tests.scripted import GOAL, ScriptedProvider, _config, _reply

# The store's leases (acquire, renew, release, takeover, fencing) are part of the store's
# contract: tests/test_store_interface.py runs them against every implementation.


# --- hold_lease: the heartbeat ---------------------------------------------------------


@attrs.define
class FakeLeaseStore:
    """An in-memory ``LeaseStore``; ``renew_errors`` are what the next renewals meet: a
    ``StorageError`` is raised, a ``SessionInUse`` is every lease's result; the leases of
    the sessions in ``lose`` are found taken over."""

    renewals: list[float] = attrs.field(factory=list)
    renewed: list[list[str]] = attrs.field(factory=list)
    released: list[Lease] = attrs.field(factory=list)
    renew_errors: list[StorageError | SessionInUse] = attrs.field(factory=list)
    lose: set[str] = attrs.field(factory=set)
    # If set, renewals wait for it; completed lists the renewals that returned.
    gate: trio.Event | None = None
    completed: list[list[str]] = attrs.field(factory=list)

    async def acquire_lease(self, session_id: str, holder: Holder, *, expiry: float) -> Lease:
        await trio.lowlevel.checkpoint()
        now = trio.current_time()
        return Lease(session_id, holder.id, holder.hostname, holder.pid, now, now, now + expiry)

    async def renew_leases(
        self, leases: Sequence[Lease], *, expiry: float
    ) -> list[Lease | SessionInUse]:
        await trio.lowlevel.checkpoint()
        self.renewals.append(trio.current_time())
        self.renewed.append([lease.session_id for lease in leases])
        error = self.renew_errors.pop(0) if self.renew_errors else None
        if isinstance(error, StorageError) and not isinstance(error, SessionInUse):
            raise error
        if self.gate is not None:
            await self.gate.wait()
        self.completed.append([lease.session_id for lease in leases])
        # Taken over: the leases in lose; gone: the ones released (their rows deleted).
        gone = self.lose | {lease.session_id for lease in self.released}
        return [
            taken_over(lease.session_id, None) if lease.session_id in gone else error or lease
            for lease in leases
        ]

    async def release_lease(self, lease: Lease) -> None:
        await trio.lowlevel.checkpoint()
        self.released.append(lease)


async def test_the_heartbeat_renews_every_period_until_the_body_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """hold_lease renews the lease every period while its body runs, retries after a
    storage error, and releases the lease when the body ends."""
    store = FakeLeaseStore(renew_errors=[StorageError("disk busy")])
    async with hold_lease(store, "s", Holder.current(), period=10, expiry=30) as lease:
        await trio.sleep(45)
    assert store.renewals == [10, 20, 30, 40]
    assert store.released == [lease]


async def test_a_lease_taken_over_stops_the_body(autojump_clock: trio.testing.MockClock) -> None:
    """When a renewal finds the lease taken over, the body is cancelled, SessionInUse
    saying so is raised, and the lease is released."""
    store = FakeLeaseStore(renew_errors=[taken_over("s", None)])
    cancelled: list[bool] = []

    async def body() -> None:
        async with hold_lease(store, "s", Holder.current(), period=10, expiry=30):
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                cancelled.append(True)
                raise

    with pytest.raises(SessionInUse, match="session s was taken over"):
        await body()
    assert cancelled == [True]
    assert store.renewals == [10]
    assert len(store.released) == 1


async def test_one_heartbeat_renews_every_lease_held(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A runtime's leases are renewed together, one store call per period however many
    are held; a lease found taken over stops its own body only, and the others go on."""
    store = FakeLeaseStore()
    leases = Leases(store, Holder.current(), period=10, expiry=30)
    ended: dict[str, str] = {}

    async def hold(session_id: str, seconds: float) -> None:
        try:
            async with leases.hold(session_id):
                await trio.sleep(seconds)
            ended[session_id] = "done"
        except SessionInUse as exc:
            ended[session_id] = str(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(hold, "a", 25)
        await trio.sleep(3)
        nursery.start_soon(hold, "b", 100)
        nursery.start_soon(hold, "c", 100)
        await trio.sleep(30)  # t=33: "a" ended at 25; renewals at 10, 20, 30
        assert store.renewals == [10, 20, 30]
        assert [sorted(ids) for ids in store.renewed] == [["a", "b", "c"]] * 2 + [["b", "c"]]
        assert len(leases) == 2
        store.lose.add("c")
    assert ended == {
        "a": "done",
        "b": "done",
        "c": "session c was taken over after this "
        "process's lease on it lapsed (was it suspended or stuck?); this process "
        "stopped running it: see its state with 'autogpt sessions'",
    }
    assert store.renewals[3] == 40
    assert [lease.session_id for lease in store.released] == ["a", "c", "b"]
    assert len(leases) == 0


async def test_a_session_ending_mid_renewal_costs_the_others_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A renewal runs in whichever session's heartbeat woke first. If that session ends
    while the renewal waits, the renewal is abandoned like a failed one and made again
    next period; if the other one ran it, it finds the ended session's lease gone, which
    must not read as a takeover. Either way both sessions end as they did."""
    store = FakeLeaseStore(gate=trio.Event())
    leases = Leases(store, Holder.current(), period=10, expiry=30)
    ended: dict[str, str] = {}

    async def hold(session_id: str, seconds: float) -> None:
        try:
            async with leases.hold(session_id):
                await trio.sleep(seconds)
            ended[session_id] = "done"
        except SessionInUse as exc:
            ended[session_id] = str(exc)

    with trio.fail_after(100):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold, "ending", 11.0)
            nursery.start_soon(hold, "going_on", 45.0)
            await trio.sleep(12)  # the renewal at 10 waits; "ending" ended at 11
            assert ended == {"ending": "done"}
            assert store.gate is not None
            store.gate.set()
    assert ended == {"ending": "done", "going_on": "done"}
    assert store.renewals == [10, 20, 30, 40]
    # The renewal at 10 either completed (with both) or was abandoned; later ones hold
    # only the session still running.
    assert store.completed[-3:] == [["going_on"]] * 3
    assert [sorted(ids) for ids in store.completed[:-3]] in ([], [["ending", "going_on"]])


async def test_the_bodys_own_error_or_cancellation_comes_out_as_itself() -> None:
    """An error in the body comes out unwrapped (not an ExceptionGroup), a cancellation
    is caught by its scope, and the lease is released either way."""
    store = FakeLeaseStore()

    async def failing() -> None:
        async with hold_lease(store, "s", Holder.current(), period=10, expiry=30):
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await failing()
    with trio.CancelScope() as scope:
        async with hold_lease(store, "s", Holder.current(), period=10, expiry=30):
            scope.cancel()
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert len(store.released) == 2


async def test_what_the_body_raises_while_cancelled_is_not_lost() -> None:
    """A body that turns an outer cancellation into another exception (Ctrl-C, say) has
    that exception come out, not a group of the heartbeat's Cancelled."""
    store = FakeLeaseStore()

    async def interrupted() -> None:
        with trio.CancelScope() as scope:
            async with hold_lease(store, "s", Holder.current(), period=10, expiry=30):
                scope.cancel()
                try:
                    await trio.sleep_forever()
                except trio.Cancelled:
                    raise KeyboardInterrupt from None

    with pytest.raises(KeyboardInterrupt):
        await interrupted()
    assert len(store.released) == 1


# --- runtimes --------------------------------------------------------------------------


@attrs.define
class WaitingProvider:
    """Answers ``finish`` once ``release`` is set; ``asked`` is set by the first request."""

    result: str
    asked: trio.Event = attrs.field(factory=trio.Event)
    release: trio.Event = attrs.field(factory=trio.Event)

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.asked.set()
        await self.release.wait()
        return _reply("finish", {"result": self.result}, "fin")

    async def aclose(self) -> None:
        pass


class HookRecorder:
    """Records every session hook called on it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    @hookimpl
    def session_start(self, session: Any) -> None:
        self.calls.append("session_start")

    @hookimpl
    def on_event(self, session: Any, event: Any) -> None:
        self.calls.append("on_event")

    @hookimpl
    def session_end(self, session: Any, outcome: Any) -> None:
        self.calls.append("session_end")


def _plugins(tmp_path: Path, name: str, factory: Any) -> PluginSet:
    plugins = load(_config(tmp_path), environ={})
    plugins.providers[name] = ("tests", factory)
    return plugins


async def test_a_second_runtime_is_refused_before_any_side_effect(tmp_path: Path) -> None:
    """While one runtime runs a session, another on the same store is refused (resume and
    run of that id) before a provider, workspace or hook; the first finishes unharmed."""
    first = WaitingProvider("first done")
    built: list[Any] = []
    recorder = HookRecorder()
    second_plugins = _plugins(tmp_path, "scripted", lambda options: built.append(options))
    second_plugins.pm.register(recorder, name="recorder")
    config = _config(tmp_path)
    outcomes: list[Any] = []
    async with (
        Runtime(config, plugins=_plugins(tmp_path, "waiting", lambda options: first)) as one,
        Runtime(config, plugins=second_plugins) as two,
    ):

        async def run_first() -> None:
            options = RunOptions(llm="waiting", session_id="s1", workspace=tmp_path / "ws")
            outcomes.append(await one.run(GOAL, options))

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_first)
                await first.asked.wait()
                with pytest.raises(SessionInUse, match="session s1 is being run by process"):
                    await two.resume("s1", RunOptions(llm="scripted"))
                other_workspace = tmp_path / "ws2"
                with pytest.raises(SessionInUse, match="session s1 is being run by process"):
                    await two.run(
                        GOAL, RunOptions(llm="scripted", session_id="s1", workspace=other_workspace)
                    )
                assert built == []
                assert recorder.calls == []
                assert not other_workspace.exists()
                first.release.set()
    (outcome,) = outcomes
    assert (outcome.status, outcome.result) == ("finished", "first done")
    with Store(tmp_path / "data" / "sessions.sqlite3") as store:
        assert [c.number for c in store.load_cycles("s1")] == [1]
        assert not [e for e in store.list_events("s1") if e.kind == "error"]
        assert store.get_lease("s1") is None


async def _take_over_a_stuck_runtime(
    tmp_path: Path, stuck: WaitingProvider
) -> tuple[SessionOutcome, BaseException]:
    """Run session s1 on a runtime whose provider waits (``stuck``) and that never renews
    its lease; once the lease lapses, a second runtime resumes and finishes s1; then
    ``stuck`` is released. Returns the taker's outcome and what the stuck run raised."""
    config = _config(tmp_path)
    # A heartbeat period far beyond the expiry: the first runtime never renews.
    stuck_rt = Runtime(
        config,
        plugins=_plugins(tmp_path, "waiting", lambda options: stuck),
        lease_period=3600,
        lease_expiry=0.2,
    )
    taker = ScriptedProvider([_reply("finish", {"result": "taken over"}, "f1")])
    taker_rt = Runtime(config, plugins=_plugins(tmp_path, "scripted", lambda options: taker))
    errors: list[BaseException] = []
    async with stuck_rt, taker_rt:

        async def run_stuck() -> None:
            options = RunOptions(llm="waiting", session_id="s1", workspace=tmp_path / "ws")
            try:
                await stuck_rt.run(GOAL, options)
            except SessionInUse as exc:
                errors.append(exc)

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_stuck)
                await stuck.asked.wait()
                while True:  # until the lease expires; no assumption about how long
                    try:
                        outcome = await taker_rt.resume("s1", RunOptions(llm="scripted"))
                        break
                    except SessionInUse:
                        await trio.sleep(0.05)
                stuck.release.set()
    (error,) = errors
    return outcome, error


async def test_a_stuck_runtime_is_taken_over_after_expiry(tmp_path: Path) -> None:
    """A runtime that stops renewing its lease is taken over once the lease expires; its
    late writes are refused (SessionInUse), so the taker's record of the session stands."""
    outcome, error = await _take_over_a_stuck_runtime(tmp_path, WaitingProvider("stale"))
    assert (outcome.status, outcome.result) == ("finished", "taken over")
    assert "session s1 was taken over" in str(error)
    with Store(tmp_path / "data" / "sessions.sqlite3") as store:
        record = store.get_session("s1")
        assert (record.status, record.result) == ("finished", "taken over")
        commands = [c.command for c in store.load_cycles("s1")]
    assert [c["arguments"] for c in commands] == [{"result": "taken over"}]


async def test_the_lease_is_released_however_the_session_ends(tmp_path: Path) -> None:
    """After a session finishes, fails or is cancelled, its lease is gone and another
    runtime can resume it at once."""

    class Failing(ScriptedProvider):
        async def complete(self, request: LLMRequest) -> LLMResponse:
            raise LLMError("the model is down")

    waiting = WaitingProvider("never")
    providers: dict[str, Any] = {
        "finishing": lambda options: ScriptedProvider([_reply("finish", {"result": "ok"}, "f")]),
        "failing": lambda options: Failing([]),
        "waiting": lambda options: waiting,
    }
    plugins = load(_config(tmp_path), environ={})
    for name, factory in providers.items():
        plugins.providers[name] = ("tests", factory)
    async with Runtime(_config(tmp_path), plugins=plugins) as rt:
        for name in ("finishing", "failing"):
            options = RunOptions(llm=name, session_id=name, workspace=tmp_path / name)
            await rt.run(GOAL, options)
        with trio.move_on_after(60) as scope:
            async with trio.open_nursery() as nursery:
                options = RunOptions(llm="waiting", session_id="waiting", workspace=tmp_path / "w")
                nursery.start_soon(rt.run, GOAL, options)
                await waiting.asked.wait()
                scope.cancel()
        assert scope.cancelled_caught
    with Store(tmp_path / "data" / "sessions.sqlite3") as store:
        statuses = {s.id: s.status for s in store.list_sessions().items}
        assert statuses == {"finishing": "finished", "failing": "failed", "waiting": "interrupted"}
        for session_id in statuses:
            assert store.get_lease(session_id) is None
            store.acquire_lease(session_id, Holder.current(), expiry=30)


@attrs.define
class StaleWriter(WaitingProvider):
    """Once released, asks to write a file (the side effect a stale holder must not do)."""

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.asked.set()
        await self.release.wait()
        return _reply("write_file", {"path": "stale.txt", "content": "late"}, "w")


async def test_a_stale_holder_runs_no_command_after_a_takeover(tmp_path: Path) -> None:
    """A runtime that stalled past its lease, then wakes with a command to run, checks the
    lease before the command and stops: the file is never written."""
    _, error = await _take_over_a_stuck_runtime(tmp_path, StaleWriter("stale"))
    assert "taken over" in str(error)
    assert not (tmp_path / "ws" / "stale.txt").exists()
