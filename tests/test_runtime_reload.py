"""Plugins loaded anew while the runtime runs (``Runtime.reload``): each session takes up the
new plugins at its next cycle, a cycle in flight ends with the plugins it started with, and
a plugin no longer loaded is shut down once no cycle uses it. Real built-in plugins, real
store; only the model is scripted (in-process)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import trio

import autogpt_plugins.memory_sqlite as memory_sqlite
from autogpt_core.agent._options import RunOptions
from autogpt_core.agent._runtime import Runtime
from autogpt_core.plugins._loader import LOADED, load
from hookspecs import LLMRequest, LLMResponse, MemoryQuery

from .scripted import _config, _reply, _tool_answers


@attrs.define
class HeldProvider:
    """Answers from ``replies``; the first answer waits for ``release``."""

    replies: list[LLMResponse]
    release: trio.Event
    asked: trio.Event = attrs.field(factory=trio.Event)
    requests: list[LLMRequest] = attrs.field(factory=list)

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.requests.append(request)
        self.asked.set()
        if len(self.requests) == 1:
            await self.release.wait()
        return self.replies.pop(0)

    async def aclose(self) -> None:
        pass


def _tools(request: LLMRequest) -> set[str]:
    return {tool.name for tool in request.tools}


def _script(n: int) -> list[LLMResponse]:
    return [
        _reply("recall", {"query": "anything"}, f"c{n}-1"),
        _reply("finish", {"result": f"done {n}"}, f"c{n}-2"),
    ]


async def test_sessions_take_up_plugins_loaded_anew_at_their_next_cycle(tmp_path: Path) -> None:
    before = _config(tmp_path)
    after = attrs.evolve(before, enable=frozenset({"shell"}), disable=frozenset({"memory_sqlite"}))
    plugins = load(before, environ={})
    release = trio.Event()
    providers = [HeldProvider(_script(n), release) for n in range(3)]
    outcomes: dict[int, Any] = {}

    def provide(n: int) -> Any:
        return ("tests", lambda options: providers[n])

    for n in range(3):
        plugins.providers[f"held{n}"] = provide(n)
    async with Runtime(before, plugins=plugins) as rt:

        async def run(n: int) -> None:
            options = RunOptions(llm=f"held{n}", workspace=tmp_path / f"ws{n}")
            outcomes[n] = await rt.run(f"goal {n}", options)

        async with trio.open_nursery() as nursery:
            for n in (0, 1):
                nursery.start_soon(run, n)
            for n in (0, 1):
                await providers[n].asked.wait()
            # Both sessions are in their first cycle, waiting on the model.
            assert memory_sqlite._memory.opened()
            new = await rt.reload(after, nursery=nursery)
            assert rt.plugins is new
            assert new.records["shell"].status == LOADED
            assert new.records["memory_sqlite"].status != LOADED
            # Kept plugins are the same objects, not configured anew.
            assert new.records["workspace"].plugin is plugins.records["workspace"].plugin
            assert new.fresh == {"shell"}
            new.providers["held2"] = provide(2)
            nursery.start_soon(run, 2)
            await providers[2].asked.wait()
            # The cycles in flight still use memory_sqlite: it is not shut down yet.
            assert memory_sqlite._memory.opened()
            release.set()

    for n in range(3):
        assert outcomes[n].status == "finished", outcomes[n]
    for n in (0, 1):
        first, second = providers[n].requests
        assert {"recall", "remember"} <= _tools(first)
        assert "run_shell" not in _tools(first)
        # Its first cycle ran recall with the plugins it started with...
        assert "No memories match" in _tool_answers(second)[-1]
        # ...and its next cycle was offered the plugins loaded since.
        assert "run_shell" in _tools(second)
        assert not {"recall", "remember", "forget"} & _tools(second)
    started_after = providers[2].requests[0]
    assert "run_shell" in _tools(started_after)
    assert "recall" not in _tools(started_after)
    assert "there is no command 'recall'" in _tool_answers(providers[2].requests[1])[-1]
    # Shut down once the last cycle using it ended.
    assert not memory_sqlite._memory.opened()
    # The first cycles' memories were stored by memory_sqlite, the later ones by nobody.
    db = memory_sqlite.MemoryDB(tmp_path / "data" / "plugins" / "memory_sqlite" / "memory.sqlite3")
    try:
        stored = db.memory_recall(MemoryQuery("", scope="all", limit=100), "x")
    finally:
        db.close()
    observations = sorted(h.item.session_id for h in stored if h.item.kind == "observation")
    # One per session that started before: its first cycle's; none of later cycles.
    assert len(observations) == 2
    assert len(set(observations)) == 2


async def test_a_plugin_broken_by_new_settings_is_reported_and_the_rest_run_on(
    tmp_path: Path,
) -> None:
    """A reload whose config breaks one plugin leaves that plugin broken with the reason;
    the others are kept as they were."""
    config = _config(tmp_path)
    async with Runtime(config, plugins=load(config, environ={})) as rt:
        before = rt.plugins
        broken = attrs.evolve(config, plugin_settings={"memory_sqlite": {"path": 42}})
        new = await rt.reload(broken)
        assert rt.plugins is new
        assert new.records["memory_sqlite"].status == "broken"
        assert "path" in new.records["memory_sqlite"].reason
        assert new.records["workspace"].plugin is before.records["workspace"].plugin
        assert new.fresh == set()
