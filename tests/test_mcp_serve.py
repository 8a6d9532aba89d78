"""``autogpt mcp``: the real command in a subprocess, driven by the mcp package's client.

Each test starts ``python -m autogpt_core mcp`` over stdio with its own config and data
directory, lists and calls tools, answers (or cannot answer) consent through MCP
elicitation, and checks what ran, what the client got back and what the store kept.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import ClientSession, StdioServerParameters, stdio_client, types
from mcp.shared.memory import create_client_server_memory_streams

from autogpt_core._config import load_config
from autogpt_core.agent._options import RunOptions
from autogpt_core.agent._runtime import Runtime
from autogpt_core.server._mcp import MCPCommands
from tests.clirun import cli_env

SECRET = "sk-mcpserve-0123456789abcdef"

Elicit = Callable[[Any, Any], Awaitable[types.ElicitResult]]


def _run(
    tmp_path: Path,
    body: Callable[[ClientSession], Awaitable[Any]],
    *,
    config: str = "",
    elicit: Elicit | None = None,
) -> Any:
    (tmp_path / "config.yaml").write_text(config, encoding="utf-8")
    env = cli_env(tmp_path, MCPSERVE_API_KEY=SECRET)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "autogpt_core", "mcp", "--workspace", str(tmp_path / "ws")],
        env=env,
    )

    async def main() -> Any:
        with trio.fail_after(120):
            async with stdio_client(params) as (read, write):
                async with ClientSession(read, write, elicitation_callback=elicit) as session:
                    await session.initialize()
                    return await body(session)

    return trio.run(main)


def _answers(*decisions: str) -> tuple[Elicit, list[str]]:
    """An elicitation callback answering ``decisions`` in turn; and the messages it saw."""
    seen: list[str] = []
    queue = list(decisions)

    async def elicit(ctx: Any, params: Any) -> types.ElicitResult:
        seen.append(params.message)
        decision = queue.pop(0)
        if decision == "decline":
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"decision": decision})

    return elicit, seen


def _stored(tmp_path: Path) -> list[tuple[str, str, str]]:
    """Each stored session's goal, status and result."""
    with sqlite3.connect(tmp_path / "data" / "sessions.sqlite3") as db:
        return db.execute("SELECT goal, status, result FROM sessions").fetchall()


def _commands(tmp_path: Path) -> list[str]:
    with sqlite3.connect(tmp_path / "data" / "sessions.sqlite3") as db:
        rows = db.execute("SELECT command FROM cycles ORDER BY number").fetchall()
    return [json.loads(r[0])["command"] for r in rows]


def test_lists_the_enabled_commands_with_their_schemas(tmp_path: Path) -> None:
    async def body(session: ClientSession) -> list[types.Tool]:
        return (await session.list_tools()).tools

    tools = {t.name: t for t in _run(tmp_path, body)}
    # The default plugins' commands, and none of a disabled plugin (shell).
    assert {"read_file", "write_file", "list_files", "ask_user", "finish"} <= set(tools)
    assert "run_shell" not in tools
    write = tools["write_file"]
    assert write.input_schema["type"] == "object"
    assert {"path", "content"} <= set(write.input_schema["properties"])
    assert tools["read_file"].annotations.read_only_hint is True
    assert write.annotations.read_only_hint is False
    # Listing stores no session: one starts at the first call.
    assert not (tmp_path / "data" / "sessions.sqlite3").exists() or _stored(tmp_path) == []


def test_calls_run_as_cycles_of_one_stored_session_with_secrets_masked(tmp_path: Path) -> None:
    async def body(session: ClientSession) -> list[types.CallToolResult]:
        return [
            await session.call_tool("write_file", {"path": "a.txt", "content": f"key {SECRET}"}),
            await session.call_tool("read_file", {"path": "a.txt"}),
            await session.call_tool("read_file", {"path": "../outside.txt"}),
            await session.call_tool("no_such_command", {}),
            await session.call_tool("write_file", {"path": 3}),
        ]

    wrote, read, outside, unknown, invalid = _run(tmp_path, body)
    assert not wrote.is_error
    # The file holds what was written; the client reads the secret masked.
    assert (tmp_path / "ws" / "a.txt").read_text(encoding="utf-8") == f"key {SECRET}"
    assert not read.is_error
    assert read.content[0].text == "key ***"
    assert outside.is_error
    assert "workspace" in outside.content[0].text
    assert unknown.is_error
    assert "there is no command 'no_such_command'" in unknown.content[0].text
    assert invalid.is_error
    assert "path" in invalid.content[0].text
    ((goal, status, result),) = _stored(tmp_path)
    assert "autogpt mcp" in goal
    assert status == "finished"
    assert result.startswith("5 commands called by MCP client")
    assert _commands(tmp_path) == [
        "write_file",
        "read_file",
        "read_file",
        "no_such_command",
        "write_file",
    ]
    with sqlite3.connect(tmp_path / "data" / "sessions.sqlite3") as db:
        everything = "\n".join(str(row) for row in db.execute("SELECT * FROM events"))
    assert SECRET not in everything
    assert "key ***" in everything


SHELL = "plugins:\n  enable: [shell]\n"


def test_consent_is_asked_through_elicitation(tmp_path: Path) -> None:
    elicit, seen = _answers("allow", "deny", "decline", "always")

    async def body(session: ClientSession) -> list[types.CallToolResult]:
        return [
            await session.call_tool("run_shell", {"command": f"echo {n} >> ran.txt"})
            for n in range(5)
        ]

    results = _run(tmp_path, body, config=SHELL, elicit=elicit)
    allowed, denied, declined, always, remembered = results
    assert not allowed.is_error
    assert denied.is_error
    assert "did not allow" in denied.content[0].text
    assert declined.is_error
    assert "decline" in declined.content[0].text
    assert not always.is_error
    assert not remembered.is_error
    # Asked four times (the fifth call was allowed by "always"); each message shows the
    # whole call and the permission it needs.
    assert len(seen) == 4
    assert "needs permission shell" in seen[0]
    assert "echo 0 >> ran.txt" in seen[0]
    ran = (tmp_path / "ws" / "ran.txt").read_text(encoding="utf-8").split()
    assert ran == ["0", "3", "4"]


def test_a_client_that_cannot_ask_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    async def body(session: ClientSession) -> types.CallToolResult:
        return await session.call_tool("run_shell", {"command": "touch ran.txt"})

    refused = _run(tmp_path, body, config=SHELL, elicit=None)
    assert refused.is_error
    assert "elicitation" in refused.content[0].text
    assert "permissions.grant" in refused.content[0].text
    assert not (tmp_path / "ws" / "ran.txt").exists()


def test_a_granted_permission_needs_no_consent(tmp_path: Path) -> None:
    config = SHELL + "permissions:\n  grant: [fs.read, fs.write, shell]\n"

    async def body(session: ClientSession) -> types.CallToolResult:
        return await session.call_tool("run_shell", {"command": "echo granted"})

    result = _run(tmp_path, body, config=config, elicit=None)
    assert not result.is_error
    assert "granted" in result.content[0].text


def test_a_command_question_is_asked_through_elicitation(tmp_path: Path) -> None:
    questions: list[str] = []

    async def elicit(ctx: Any, params: Any) -> types.ElicitResult:
        questions.append(params.message)
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    async def body(session: ClientSession) -> types.CallToolResult:
        return await session.call_tool("ask_user", {"question": "Which colour?"})

    answered = _run(tmp_path, body, elicit=elicit)
    assert questions == ["Which colour?"]
    assert not answered.is_error
    assert "blue" in answered.content[0].text


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
CALLS = st.lists(
    st.tuples(
        st.sampled_from(["write_file", "read_file", "list_files", "nope", "finish"])
        | st.text(max_size=12),
        st.dictionaries(st.sampled_from(["path", "content", "x", "result"]), JSON_VALUES),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=12)
@given(calls=CALLS)
def test_any_call_gets_a_result_and_the_server_keeps_answering(
    calls: list[tuple[str, dict[str, Any]]],
) -> None:
    """Whatever a client sends as a tool call, it gets a tool result (an error result when
    the call is wrong), never a protocol error, and the next valid call still runs."""

    async def main(workspace: Path) -> None:
        async with Runtime(load_config()) as runtime:
            commands = MCPCommands(runtime, RunOptions(workspace=workspace))
            async with trio.open_nursery() as nursery:
                await nursery.start(commands.run)
                server = commands.server()
                async with create_client_server_memory_streams() as (client, served):
                    nursery.start_soon(
                        server.run, served[0], served[1], server.create_initialization_options()
                    )
                    async with ClientSession(client[0], client[1]) as session:
                        await session.initialize()
                        for name, arguments in calls:
                            result = await session.call_tool(name, arguments)
                            assert isinstance(result, types.CallToolResult)
                            assert result.content
                            assert result.content[0].text
                        ok = await session.call_tool(
                            "write_file", {"path": "last.txt", "content": "still here"}
                        )
                        assert not ok.is_error, ok.content
                commands.stop()
        assert (workspace / "last.txt").read_text(encoding="utf-8") == "still here"

    with tempfile.TemporaryDirectory() as directory:
        trio.run(main, Path(directory) / "ws")
