"""The command dispatcher on its own: it runs with the collaborators it is given (a hook
caller, an emitter, the registry, grants, a consent function, a lease check), no runtime."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from autogpt_core import SessionInUse
from autogpt_core.agent._caller import HookCaller
from autogpt_core.agent._dispatcher import Dispatcher, Grants
from autogpt_core.agent._emitter import Emitter
from autogpt_core.agent._redact import Redactor
from autogpt_core.hooks._hookcall import HookManager
from autogpt_core.plugins._commands import CommandRegistry
from autogpt_core.plugins._loader import PluginRecord
from autogpt_core.plugins._manifest import CommandDecl, Manifest
from hookspecs import (
    CommandCall,
    CommandContext,
    Confirmation,
    ConfirmationRequest,
    EventKind,
    PluginSettings,
)

SECRET = "sk-dispatcher-secret-99"


def _manifest(plugin_id: str, command: str, *, timeout: float | None = None) -> Manifest:
    decl = CommandDecl(
        name=command,
        description=f"Runs {command}.",
        parameters={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
        permissions=("shell",),
        timeout=timeout,
    )
    return Manifest(
        id=plugin_id, name=plugin_id, version="1", permissions=("shell",), commands=(decl,)
    )


@attrs.define
class Fixture:
    """A dispatcher and the fakes it was given, to see what it did with them."""

    dispatcher: Dispatcher
    emitter: Emitter
    asked: list[ConfirmationRequest]
    ran: list[str]
    lease_checks: list[int]


def _dispatcher(
    tmp_path: Path,
    *,
    answer: Confirmation | None = None,
    continuous: bool = False,
    lease_lost: bool = False,
    question_seconds: float = 0,
    command_timeout: float | None = None,
) -> Fixture:
    asked: list[ConfirmationRequest] = []
    ran: list[str] = []
    lease_checks: list[int] = []
    commands = CommandRegistry()
    records: dict[str, PluginRecord] = {}

    async def run_p(text: str, ctx: CommandContext) -> str:
        ran.append(f"p:{text}")
        reply = await ctx.ask_user("sure?")
        return f"{text} {reply}"

    def run_q(text: str) -> str:
        ran.append(f"q:{text}")
        return text

    for plugin_id, name, function, timeout in (
        ("p", "pcmd", run_p, 1.0),
        ("q", "qcmd", run_q, None),
    ):
        manifest = _manifest(plugin_id, name, timeout=timeout)
        commands.binder(manifest)(name, function)
        records[plugin_id] = PluginRecord(
            id=plugin_id, source=None, manifest=manifest, settings=PluginSettings(plugin_id)
        )

    emitter = Emitter(
        session_id="s",
        redactor=Redactor([SECRET]),
        hooks=HookManager().ahook,
        hook_timeout=5,
        store=None,  # type: ignore[arg-type]  # nothing is stored in these tests
        store_path=tmp_path / "unused.sqlite3",
    )
    hooks = HookCaller(hooks=HookManager().ahook, emitter=emitter, hook_timeout=5)

    async def consent(request: ConfirmationRequest) -> Any:
        asked.append(request)
        return answer

    async def question(text: str) -> Any:
        await trio.sleep(question_seconds)
        return "yes"

    async def check_lease() -> None:
        lease_checks.append(len(ran))
        if lease_lost:
            raise SessionInUse("session s was taken over")

    dispatcher = Dispatcher(
        hooks=hooks,
        emitter=emitter,
        commands=commands,
        records=records,
        grants=Grants(frozenset()),
        consent=consent,
        question=question,
        check_lease=check_lease,
        continuous=continuous,
        command_timeout=command_timeout,
    )
    return Fixture(dispatcher, emitter, asked, ran, lease_checks)


def _pending(emitter: Emitter) -> list[Any]:
    return list(emitter._pending)


async def test_continuous_mode_refuses_without_asking_or_running(tmp_path: Path) -> None:
    """Unattended, an ungranted permission is refused: nobody is asked, the lease is not
    even checked and the command never runs."""
    f = _dispatcher(tmp_path, continuous=True)
    result, _ = await f.dispatcher.execute(CommandCall("qcmd", {"text": "x"}))
    assert not result.ok
    assert "continuous mode" in (result.error or "")
    assert (f.asked, f.ran, f.lease_checks) == ([], [], [])
    kinds = [e.kind for e in _pending(f.emitter)]
    assert kinds == [EventKind.CONFIRMATION, EventKind.RESULT]


async def test_an_always_answer_grants_that_plugin_only(tmp_path: Path) -> None:
    """'Always' is remembered for the plugin that was allowed; another plugin asks again.
    The person is shown the whole call, masked."""
    f = _dispatcher(tmp_path, answer=Confirmation(approved=True, remember=True))
    await f.dispatcher.execute(CommandCall("qcmd", {"text": f"key {SECRET}"}))
    await f.dispatcher.execute(CommandCall("qcmd", {"text": "again"}))
    assert len(f.asked) == 1
    assert f.asked[0].call.arguments == {"text": "key ***"}
    assert f.ran == [f"q:key {SECRET}", "q:again"]
    assert f.dispatcher.grants.remembered == {("q", "shell")}
    await f.dispatcher.execute(CommandCall("pcmd", {"text": "p"}))
    assert [r.plugin_id for r in f.asked] == ["q", "p"]


async def test_a_lost_lease_stops_the_command_before_it_runs(tmp_path: Path) -> None:
    """The lease is checked after consent and right before the command: a lost one raises
    SessionInUse and nothing runs."""
    f = _dispatcher(tmp_path, answer=Confirmation(approved=True), lease_lost=True)
    with pytest.raises(SessionInUse):
        await f.dispatcher.execute(CommandCall("qcmd", {"text": "x"}))
    assert len(f.asked) == 1
    assert f.ran == []
    assert f.lease_checks == [0]


async def test_the_command_clock_stops_while_the_person_answers(
    tmp_path: Path, autojump_clock: Any
) -> None:
    """A command with a 1 s deadline that waits 10 s for the person's answer still
    finishes: the time spent answering is given back to it."""
    f = _dispatcher(tmp_path, answer=Confirmation(approved=True), question_seconds=10)
    result, _ = await f.dispatcher.execute(CommandCall("pcmd", {"text": "go"}))
    assert result.ok, result.error
    assert result.output == "go yes"
