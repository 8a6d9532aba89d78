"""An in-process scripted model and a one-call session runner, for agent-loop tests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import trio.lowlevel

from autogpt_core._config import Config
from autogpt_core.agent._options import RunOptions
from autogpt_core.agent._runtime import Runtime
from autogpt_core.plugins._loader import load
from autogpt_core.store._storage import Store
from hookspecs import (
    Confirmation,
    LLMRequest,
    LLMResponse,
    Message,
    Role,
    ToolCall,
    Usage,
    hookimpl,
)

GOAL = "Write notes.txt, remember it, finish."


class Answerer:
    """Answers every confirmation with ``approved``, noting each request."""

    def __init__(self, approved: bool) -> None:
        self.approved = approved
        self.asked: list[Any] = []

    @hookimpl
    def confirm(self, session: Any, request: Any) -> Confirmation:
        self.asked.append(request)
        return Confirmation(approved=self.approved, reason="the test decides")


def _config(tmp_path: Path, **kwargs: Any) -> Config:
    return Config(path=tmp_path / "config.yaml", data_dir=tmp_path / "data", **kwargs)


@attrs.define
class ScriptedProvider:
    """An in-process provider that answers from a list, recording each request."""

    replies: list[LLMResponse]
    requests: list[LLMRequest] = attrs.field(factory=list)
    closed: bool = False

    async def complete(self, request: LLMRequest) -> LLMResponse:
        self.requests.append(request)
        await trio.lowlevel.checkpoint()
        return self.replies.pop(0)

    async def aclose(self) -> None:
        self.closed = True


def _reply(name: str, args: dict[str, Any] | str, call_id: str) -> LLMResponse:
    """A model reply calling ``name``; ``args`` as a string is sent verbatim (malformed)."""
    raw = args if isinstance(args, str) else json.dumps(args)
    message = Message(Role.ASSISTANT, "", tool_calls=(ToolCall(call_id, name, raw),))
    return LLMResponse(message=message, usage=Usage(10, 5))


async def _run(
    tmp_path: Path,
    replies: Sequence[LLMResponse],
    *,
    extra_plugins: Sequence[object] = (),
    options: RunOptions | None = None,
    goal: str = GOAL,
    **config: Any,
) -> tuple[Any, ScriptedProvider, Store]:
    cfg = _config(tmp_path, **config)
    plugins = load(cfg, environ={})
    provider = ScriptedProvider(list(replies))
    plugins.providers["scripted"] = ("tests", lambda options: provider)
    for plugin in extra_plugins:
        plugins.pm.register(plugin, name=type(plugin).__name__.lower())
    async with Runtime(cfg, plugins=plugins) as rt:
        outcome = await rt.run(
            goal,
            attrs.evolve(options or RunOptions(), llm="scripted", workspace=tmp_path / "ws"),
        )
    return outcome, provider, Store(tmp_path / "data" / "sessions.sqlite3")


def _tool_answers(request: LLMRequest) -> list[str]:
    return [m.content for m in request.messages if m.role is Role.TOOL]
