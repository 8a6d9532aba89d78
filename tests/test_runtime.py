"""The agent loop end to end: real plugins, the real openai client, a local model server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel

from autogpt_core._config import Limits
from autogpt_core.agent._options import RunOptions
from autogpt_core.agent._runtime import Runtime
from autogpt_core.plugins._loader import load
from autogpt_core.store._storage import Store
from hookspecs import (
    hookimpl,
)
from tests.fake_openai import FakeToolCall, Reply, fake_openai_server
from tests.scripted import GOAL, Answerer, _config, _reply, _run, _tool_answers


def _call(name: str, args: dict[str, Any], call_id: str) -> Reply:
    return Reply(tool_calls=(FakeToolCall(name, args, id=call_id),))


async def test_end_to_end_through_openai_client(tmp_path: Path) -> None:
    """The agent writes a file, stores a memory and finishes; the server saw the tools
    built from the manifests and every tool call answered."""
    script = [
        _call("write_file", {"path": "notes.txt", "content": "hello"}, "c1"),
        _call("remember", {"text": "notes.txt says hello"}, "c2"),
        _call("finish", {"result": "done"}, "c3"),
    ]
    workspace = tmp_path / "ws"
    async with fake_openai_server(script) as server:
        async with Runtime(_config(tmp_path)) as rt:
            outcome = await rt.run(
                GOAL,
                RunOptions(llm="openai", base_url=server.base_url, model="m", workspace=workspace),
            )
        requests = server.requests
    assert outcome.status == "finished"
    assert outcome.result == "done"
    assert (workspace / "notes.txt").read_text() == "hello"
    tools = {t["function"]["name"]: t["function"] for t in requests[0]["tools"]}
    assert {"write_file", "read_file", "remember", "recall", "finish", "ask_user"} <= set(tools)
    assert "run_shell" not in tools  # the shell plugin is disabled by default
    assert tools["write_file"]["parameters"]["required"] == ["path", "content"]
    last = requests[-1]["messages"]
    assert [m["role"] for m in last[:2]] == ["system", "user"]
    tool_answers = [m for m in last if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_answers] == ["c1", "c2"]
    with Store(tmp_path / "data" / "sessions.sqlite3") as store:
        session = store.list_sessions().items[0]
        assert session.status == "finished"
        assert [c.number for c in store.load_cycles(session.id)] == [1, 2, 3]
        kinds = [e.kind for e in store.list_events(session.id)]
    assert kinds[0] == "session_start"
    assert kinds[-1] == "session_end"
    assert "command" in kinds
    from autogpt_plugins.memory_sqlite._db import MemoryDB

    memory = MemoryDB(tmp_path / "data" / "plugins" / "memory_sqlite" / "memory.sqlite3")
    with memory:
        from hookspecs import MemoryQuery

        hits = memory.memory_recall(MemoryQuery("hello", scope="all"), session.id)
    assert any("notes.txt says hello" in h.item.text for h in hits)


async def test_continuous_mode_refuses_ungranted_shell(tmp_path: Path) -> None:
    """Unattended, a command needing an ungranted permission is refused and the model told."""
    marker = tmp_path / "ws" / "ran.txt"
    replies = [
        _reply("run_shell", {"command": f"touch {marker}"}, "s1"),
        _reply("finish", {"result": "gave up"}, "f1"),
    ]
    outcome, provider, _ = await _run(
        tmp_path,
        replies,
        options=RunOptions(continuous=True),
        enable=frozenset({"shell"}),
    )
    assert outcome.status == "finished"
    assert not marker.exists()
    answer = _tool_answers(provider.requests[1])[0]
    assert "continuous mode" in answer
    assert "shell" in answer
    assert provider.closed


async def test_interactive_mode_asks_and_runs_when_approved(tmp_path: Path) -> None:
    """Interactively, the confirm hook is asked; an approved shell command runs."""
    approver = Answerer(True)
    replies = [
        _reply("run_shell", {"command": "echo approved > out.txt"}, "s1"),
        _reply("finish", {"result": "ok"}, "f1"),
    ]
    outcome, provider, _ = await _run(
        tmp_path, replies, extra_plugins=[approver], enable=frozenset({"shell"})
    )
    assert outcome.status == "finished"
    assert approver.asked[0].missing_permissions == ("shell",)
    assert (tmp_path / "ws" / "out.txt").read_text().strip() == "approved"


async def test_denied_command_is_reported_to_the_model(tmp_path: Path) -> None:
    """A denied confirmation is the model's next observation; nothing runs."""
    approver = Answerer(False)
    replies = [
        _reply("run_shell", {"command": "echo no > out.txt"}, "s1"),
        _reply("finish", {"result": "ok"}, "f1"),
    ]
    outcome, provider, _ = await _run(
        tmp_path, replies, extra_plugins=[approver], enable=frozenset({"shell"})
    )
    assert not (tmp_path / "ws" / "out.txt").exists()
    answer = _tool_answers(provider.requests[1])[0]
    assert "did not allow" in answer
    assert "the test decides" in answer


class Misbehaving:
    @hookimpl
    async def build_prompt(self, session: Any, prompt: Any) -> None:
        if session.cycle == 1:
            await trio.sleep_forever()

    @hookimpl
    def post_command(self, session: Any, call: Any, result: Any) -> None:
        raise RuntimeError("post_command exploded")


async def test_raising_and_hanging_plugins_are_reported_and_the_session_goes_on(
    tmp_path: Path,
) -> None:
    """A plugin hanging in build_prompt and one raising in post_command are reported as
    error events naming them; the session still finishes."""
    replies = [
        _reply("write_file", {"path": "a.txt", "content": "x"}, "w1"),
        _reply("finish", {"result": "survived"}, "f1"),
    ]
    outcome, provider, store = await _run(
        tmp_path,
        replies,
        extra_plugins=[Misbehaving()],
        limits=Limits(hook_timeout=0.5),
    )
    assert outcome.status == "finished"
    assert outcome.result == "survived"
    with store:
        session = store.list_sessions().items[0]
        errors = [e.data for e in store.list_events(session.id) if e.kind == "error"]
    by_hook = {e["hook"]: e for e in errors}
    assert by_hook["build_prompt"]["plugin"] == "misbehaving"
    assert "did not finish hook 'build_prompt'" in by_hook["build_prompt"]["error"]
    assert by_hook["post_command"]["plugin"] == "misbehaving"
    assert "post_command exploded" in by_hook["post_command"]["error"]


async def test_failures_budget_and_bad_arguments(tmp_path: Path) -> None:
    """Invalid arguments and unknown commands become observations; consecutive failures
    end the session as failed."""
    replies = [
        _reply("write_file", {"path": "a.txt"}, "w1"),
        _reply("no_such_command", {}, "n1"),
        _reply("write_fil", {"path": "a", "content": "b"}, "n2"),
    ]
    outcome, provider, store = await _run(tmp_path, replies, limits=Limits(max_failures=3))
    assert outcome.status == "failed"
    assert "3 consecutive" in outcome.result
    answers = [_tool_answers(r)[-1] for r in provider.requests[1:]]
    assert "'content' is a required property" in answers[0]
    assert "there is no command 'no_such_command'" in answers[1]
    with store:
        session = store.list_sessions().items[0]
        third = store.load_cycles(session.id)[2].result
    assert "Did you mean write_file" in third["error"]


async def test_max_cycles_budget(tmp_path: Path) -> None:
    """The cycle budget ends the session as budget_exhausted."""
    replies = [_reply("list_files", {}, f"l{i}") for i in range(5)]
    outcome, provider, _ = await _run(tmp_path, replies, options=RunOptions(max_cycles=2))
    assert outcome.status == "budget_exhausted"
    assert outcome.cycles == 2
    assert len(provider.requests) == 2


@pytest.mark.parametrize(
    "config", [{"llm": 5}, {"max_cycles": "ten"}, {"continuous": "yes"}, {"max_cost": True}]
)
async def test_resume_refuses_damaged_stored_options(
    tmp_path: Path, config: dict[str, Any]
) -> None:
    """Stored options of the wrong type give a ConfigError naming the session and the
    option, not an AttributeError deep in the run."""
    from autogpt_core import ConfigError

    db = tmp_path / "data" / "sessions.sqlite3"
    db.parent.mkdir(parents=True)
    with Store(db) as store:
        store.create_session("g", tmp_path / "ws", session_id="damaged", config=config)
        store.update_session_status("damaged", "interrupted")
    cfg = _config(tmp_path)
    async with Runtime(cfg, plugins=load(cfg, environ={})) as rt:
        with pytest.raises(
            ConfigError, match=f"session damaged has a stored option {next(iter(config))}"
        ):
            await rt.resume("damaged")


class _SlowStartFailingShutdown:
    """Starts slowly; its shutdown wrapper raises after the other implementations ran."""

    def __init__(self) -> None:
        self.shutdowns = 0

    @hookimpl
    async def autogpt_startup(self, runtime: object) -> None:
        await trio.sleep(600)

    @hookimpl(wrapper=True)
    def autogpt_shutdown(self, runtime: object) -> Any:
        self.shutdowns += 1
        yield
        raise RuntimeError("cannot close")


async def test_a_start_cut_short_shuts_plugins_down_and_closes_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Cancelled while a plugin's autogpt_startup runs (a signal to a starting server),
    the runtime calls autogpt_shutdown, closes the store and unregisters its bridge even
    when a shutdown raises, and the cancellation, not that error, is what goes on."""
    from autogpt_core.agent._model import CORE_PLUGIN_NAME

    config = _config(tmp_path)
    plugins = load(config)
    plugin = _SlowStartFailingShutdown()
    plugins.pm.register(plugin, name="cutstart")
    rt = Runtime(config, plugins=plugins)
    with trio.move_on_after(1) as cut:
        async with rt:
            raise AssertionError("the start cannot finish")
    assert cut.cancelled_caught
    assert plugin.shutdowns == 1
    assert rt._store is None
    assert plugins.pm.get_plugin(CORE_PLUGIN_NAME) is None
    assert "cannot close" in capsys.readouterr().err
