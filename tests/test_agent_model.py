"""A session's model: a provider's failure names the provider's plugin, never the core."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autogpt_core._config import Limits
from autogpt_core.agent._options import RunOptions
from autogpt_core.agent._runtime import Runtime
from autogpt_core.plugins._loader import load
from autogpt_core.store._storage import Store
from hookspecs import LLMRequest
from tests.scripted import GOAL, _config


class Exploding:
    """A provider with a bug: it raises something that is not an LLMError."""

    async def complete(self, request: LLMRequest) -> Any:
        raise RuntimeError("provider bug")

    async def aclose(self) -> None:
        pass


class Wrong:
    """A provider that answers with something that is not an LLMResponse."""

    async def complete(self, request: LLMRequest) -> Any:
        return {"content": "hi"}

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize(
    ("provider", "said"),
    [
        (Exploding(), "its LLM provider 'buggy' raised RuntimeError: provider bug"),
        (Wrong(), "its LLM provider 'buggy' returned dict, not an LLMResponse"),
    ],
)
async def test_a_provider_failure_is_blamed_on_its_plugin(
    tmp_path: Path, provider: Any, said: str
) -> None:
    """The error event of a provider that raises (not an LLMError) or answers another type
    names the plugin that registered the provider, not 'autogpt-core'."""
    cfg = _config(tmp_path, limits=Limits(max_failures=1))
    plugins = load(cfg, environ={})
    plugins.providers["buggy"] = ("buggyplugin", lambda options: provider)
    async with Runtime(cfg, plugins=plugins) as rt:
        outcome = await rt.run(GOAL, RunOptions(llm="buggy", workspace=tmp_path / "ws"))
    assert outcome.status == "failed"
    with Store(tmp_path / "data" / "sessions.sqlite3") as store:
        session = store.list_sessions().items[0]
        errors = [e.data for e in store.list_events(session.id) if e.kind == "error"]
    (error,) = errors
    assert (error["plugin"], error["hook"]) == ("buggyplugin", "llm_request")
    assert said in error["error"]
    assert "autogpt-core" not in error["error"]


async def test_the_provider_is_made_with_its_plugins_settings(tmp_path: Path) -> None:
    """The factory receives its own plugin's settings and the resume point, and no
    replay option through ``extra``."""
    cfg = _config(tmp_path, limits=Limits(max_cycles=1))
    plugins = load(cfg, environ={})
    seen: list[Any] = []

    def factory(options: Any) -> Exploding:
        seen.append(options)
        return Exploding()

    plugins.providers["spy"] = ("llm_replay", factory)
    async with Runtime(cfg, plugins=plugins) as rt:
        await rt.run(GOAL, RunOptions(llm="spy:some/arg", workspace=tmp_path / "ws"))
    (options,) = seen
    assert options.settings is plugins.records["llm_replay"].settings
    assert options.settings.values["strict"] is True
    assert options.extra == {"path": "some/arg"}
    assert options.resume_after == 0


async def test_a_resumed_session_tells_its_provider_where_it_resumes(tmp_path: Path) -> None:
    """``ProviderOptions.resume_after`` is the number of cycles the session completed: a
    replay of the session's recording goes on where it stopped."""
    from autogpt_plugins.llm_replay import Recording, load_recording
    from tests.scripted import ScriptedProvider, _reply

    replies = [
        _reply("write_file", {"path": "a.txt", "content": "1"}, "w1"),
        _reply("write_file", {"path": "b.txt", "content": "2"}, "w2"),
        _reply("finish", {"result": "both written"}, "f1"),
    ]
    path = tmp_path / "whole.json"
    cfg = _config(tmp_path, plugin_settings={"llm_replay": {"record": str(path)}})
    plugins = load(cfg, environ={})
    plugins.providers["scripted"] = ("tests", lambda _: ScriptedProvider(list(replies)))
    async with Runtime(cfg, plugins=plugins) as rt:
        whole = await rt.run(GOAL, RunOptions(llm="scripted", workspace=tmp_path / "ws"))
    assert whole.status == "finished"
    assert isinstance(load_recording(path), Recording)

    second = _config(tmp_path / "second")
    seen: list[int] = []
    plugins = load(second, environ={})
    replay = plugins.providers["replay"][1]

    def spy(options: Any) -> Any:
        seen.append(options.resume_after)
        return replay(options)

    plugins.providers["replay"] = ("llm_replay", spy)
    async with Runtime(second, plugins=plugins) as rt:
        options = RunOptions(
            llm=f"replay:{path}", max_cycles=1, session_id="s", workspace=tmp_path / "w2"
        )
        first = await rt.run(GOAL, options)
        assert (first.status, first.cycles) == ("budget_exhausted", 1)
        resumed = await rt.resume("s", RunOptions(max_cycles=5))
    assert seen == [0, 1]
    assert (resumed.status, resumed.result) == ("finished", "both written")
