"""The MCP bridge against real MCP servers: one the test writes with the SDK's own server
API, run as a subprocess over stdio and over streamable HTTP, and the reference time server.

The server's tools append to a file, so a test sees what reached it; every run goes
through the real runtime with a scripted model, so consent is the core's.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from autogpt_core._config import DEFAULT_GRANTS, Config
from autogpt_core.agent._options import RunOptions
from autogpt_core.agent._runtime import Runtime
from autogpt_core.plugins._loader import LOADED, PluginSet, load
from hookspecs import LLMResponse
from tests.scripted import Answerer, ScriptedProvider, _reply, _tool_answers

SERVER = textwrap.dedent(
    '''
    import os, sys
    from pathlib import Path

    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    LOG = Path(os.environ["MCP_TEST_LOG"])
    with LOG.open("a") as f:
        f.write(f"started {os.getpid()}\\n")
    server = MCPServer("notes")


    @server.tool()
    def add_note(text: str, times: int = 1) -> str:
        """Add a note and say how many there are."""
        with LOG.open("a") as f:
            f.write(f"add_note {text}\\n")
        return f"noted {text!r} x{times}; key {os.environ.get('NOTES_KEY')}"


    @server.tool()
    def fail(reason: str) -> str:
        """Fail on purpose."""
        with LOG.open("a") as f:
            f.write(f"fail {reason}\\n")
        raise ToolError(f"cannot do it: {reason}")


    @server.tool()
    def crash() -> str:
        """Exit the process without answering."""
        os._exit(3)


    if sys.argv[1:] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(os.environ["MCP_TEST_PORT"]))
    else:
        server.run()
    '''
)
KEY = "notes-k3y-0123456789abcdef"


@pytest.fixture
def server_script(tmp_path: Path) -> Path:
    path = tmp_path / "notes_server.py"
    path.write_text(SERVER)
    return path


def _log(tmp_path: Path) -> list[str]:
    path = tmp_path / "server.log"
    return path.read_text().splitlines() if path.exists() else []


def _stdio(tmp_path: Path, script: Path) -> dict[str, Any]:
    return {
        "command": sys.executable,
        "args": [str(script)],
        "env": {"MCP_TEST_LOG": str(tmp_path / "server.log"), "NOTES_KEY": {"env": "NOTES_KEY"}},
    }


def _config(tmp_path: Path, servers: dict[str, Any], *, grants: tuple[str, ...] = ()) -> Config:
    return Config(
        path=tmp_path / "config.yaml",
        data_dir=tmp_path / "data",
        enable=frozenset({"mcp"}),
        plugin_settings={"mcp": {"servers": servers, "timeout": 60}},
        grants=DEFAULT_GRANTS | set(grants),
    )


def _load(config: Config) -> PluginSet:
    plugins = load(config, environ={"NOTES_KEY": KEY})
    assert plugins.records["mcp"].status == LOADED, plugins.records["mcp"].reason
    return plugins


async def _run(
    tmp_path: Path, config: Config, replies: list[LLMResponse], answerer: Answerer
) -> tuple[Any, ScriptedProvider]:
    plugins = _load(config)
    provider = ScriptedProvider(list(replies))
    plugins.providers["scripted"] = ("tests", lambda options: provider)
    plugins.pm.register(answerer, name="answerer")
    async with Runtime(config, plugins=plugins) as rt:
        outcome = await rt.run("take notes", RunOptions(llm="scripted", workspace=tmp_path / "ws"))
    return outcome, provider


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _started_pids(tmp_path: Path) -> list[int]:
    return [int(line.split()[1]) for line in _log(tmp_path) if line.startswith("started ")]


FINISH = _reply("finish", {"result": "done"}, "f1")


def test_tools_become_bridged_commands(server_script: Path, tmp_path: Path) -> None:
    """Each tool is the command SERVER.TOOL with its inputSchema and description, offered
    to the model as SERVER__TOOL; listing them at load starts and stops the server."""
    plugins = _load(_config(tmp_path, {"notes": _stdio(tmp_path, server_script)}))
    bridged = {c.name: c for c in plugins.commands if c.bridged}
    assert set(bridged) == {"notes.add_note", "notes.fail", "notes.crash"}
    add = bridged["notes.add_note"].decl
    assert add.description == "Add a note and say how many there are."
    assert add.parameters["properties"]["text"]["type"] == "string"
    assert add.parameters["properties"]["times"]["default"] == 1
    assert add.parameters["required"] == ["text"]
    assert add.permissions == ("bridge:mcp",)
    tools = {t.name for t in plugins.commands.tool_specs()}
    assert {"notes__add_note", "notes__fail", "notes__crash"} <= tools
    assert KEY in plugins.secrets
    # Listed, not called; and the listing server is gone.
    pids = _started_pids(tmp_path)
    assert len(pids) == 1
    assert [line for line in _log(tmp_path) if not line.startswith("started")] == []
    assert not _alive(pids[0])


def test_a_server_that_cannot_start_is_reported(tmp_path: Path) -> None:
    """A server whose command fails, or a bad entry, is not mapped, with the reason; the
    plugin still loads."""
    servers = {
        "gone": {"command": str(tmp_path / "no-such-program")},
        "bad": {"command": "x", "url": "http://127.0.0.1:1/mcp"},
    }
    plugins = _load(_config(tmp_path, servers))
    reasons = dict(plugins.records["mcp"].unmapped)
    assert "listing its tools failed" in reasons["gone"]
    assert "either 'command'" in reasons["bad"]
    assert not [c for c in plugins.commands if c.bridged]


async def test_refused_consent_never_reaches_the_server(
    server_script: Path, tmp_path: Path
) -> None:
    """A bridged call needs bridge:mcp; refused, the server never sees it."""
    answerer = Answerer(False)
    config = _config(tmp_path, {"notes": _stdio(tmp_path, server_script)})
    call = _reply("notes__add_note", {"text": "milk"}, "c1")
    outcome, provider = await _run(tmp_path, config, [call, FINISH], answerer)
    assert outcome.status == "finished"
    assert [a.missing_permissions for a in answerer.asked] == [("bridge:mcp",)]
    assert not any(line.startswith("add_note") for line in _log(tmp_path))
    assert "did not allow command 'notes__add_note'" in _tool_answers(provider.requests[1])[0]


async def test_calls_errors_and_a_crash(server_script: Path, tmp_path: Path) -> None:
    """Granted, a call's result comes back (the secret env masked); an isError result is a
    failure observation; a crash is a failure and the next call restarts the server; after
    the runtime exits, no server process is left."""
    answerer = Answerer(True)
    config = _config(tmp_path, {"notes": _stdio(tmp_path, server_script)})
    replies = [
        _reply("notes__add_note", {"text": "milk", "times": 2}, "c1"),
        _reply("notes__fail", {"reason": "no pen"}, "c2"),
        _reply("notes__crash", {}, "c3"),
        _reply("notes__add_note", {"text": "eggs"}, "c4"),
        FINISH,
    ]
    outcome, provider = await _run(tmp_path, config, replies, answerer)
    assert outcome.status == "finished"
    answers = _tool_answers(provider.requests[-1])
    assert "noted 'milk' x2" in answers[0]
    assert KEY not in json.dumps(answers)
    assert "reported an error" in answers[1]
    assert "cannot do it: no pen" in answers[1]
    assert "went away during the call of crash" in answers[2]
    assert "noted 'eggs' x1" in answers[3]
    calls = [line for line in _log(tmp_path) if not line.startswith("started")]
    assert calls == ["add_note milk", "fail no pen", "add_note eggs"]
    # One listing at load, one session for the first three calls, one after the crash.
    pids = _started_pids(tmp_path)
    assert len(pids) == 3
    assert [pid for pid in pids if _alive(pid)] == []


def test_a_kept_tool_list_starts_no_server_at_load(server_script: Path, tmp_path: Path) -> None:
    """The first load starts the server to list its tools and keeps the list (no secret in
    it); later loads offer the same commands without starting it; a changed entry, a
    damaged cache file, or tools_cache: false list again."""
    entry = _stdio(tmp_path, server_script)
    config = _config(tmp_path, {"notes": entry})
    first = {c.name: c.decl for c in _load(config).commands if c.bridged}
    assert len(_started_pids(tmp_path)) == 1
    cache = tmp_path / "data" / "plugins" / "mcp" / "tools-cache.json"
    kept = cache.read_text()
    assert "add_note" in kept
    assert KEY not in kept
    assert hashlib.sha256(KEY.encode()).hexdigest() not in kept  # not even a verifier
    again = {c.name: c.decl for c in _load(config).commands if c.bridged}
    assert again == first
    assert len(_started_pids(tmp_path)) == 1  # not started: the list was kept
    changed = _config(tmp_path, {"notes": {**entry, "args": [str(server_script), "stdio"]}})
    _load(changed)
    assert len(_started_pids(tmp_path)) == 2
    cache.write_text("{not json")
    assert {c.name for c in _load(changed).commands if c.bridged} == set(first)
    assert len(_started_pids(tmp_path)) == 3
    # An entry this code did not write, an empty list (a server without tools is never
    # called, so never listed again) and a list older than a day are listed again.
    kept_entry = json.loads(cache.read_text())["servers"]["notes"]
    for bad in ({"tools": None}, {"tools": []}, {"listed_at": time.time() - 2 * 86400}):
        cache.write_text(json.dumps({"version": 1, "servers": {"notes": {**kept_entry, **bad}}}))
        started = len(_started_pids(tmp_path))
        assert {c.name for c in _load(changed).commands if c.bridged} == set(first)
        assert len(_started_pids(tmp_path)) == started + 1, bad
    uncached = attrs.evolve(
        changed, plugin_settings={"mcp": {"servers": {"notes": entry}, "tools_cache": False}}
    )
    started = len(_started_pids(tmp_path))
    _load(uncached)
    _load(uncached)
    assert len(_started_pids(tmp_path)) == started + 2


def _add_count_tool(script: Path) -> None:
    marker = "@server.tool()\ndef crash()"
    assert marker in SERVER
    count = '@server.tool()\ndef count() -> str:\n    """Count."""\n    return "1"\n\n\n'
    script.write_text(SERVER.replace(marker, count + marker))


async def test_a_call_session_refreshes_the_kept_tool_list(
    server_script: Path, tmp_path: Path
) -> None:
    """A server whose tools changed since its list was kept: its first call's session
    lists them again, and the next load offers the new tool, still without starting it."""
    entry = _stdio(tmp_path, server_script)
    config = _config(tmp_path, {"notes": entry}, grants=("bridge:mcp",))
    _load(config)
    # The server gains a tool; the kept list does not know it yet.
    _add_count_tool(server_script)
    assert "notes.count" not in {c.name for c in _load(config).commands}
    replies = [_reply("notes__add_note", {"text": "tea"}, "c1"), FINISH]
    outcome, _ = await _run(tmp_path, config, replies, Answerer(True))
    assert outcome.status == "finished"
    started = len(_started_pids(tmp_path))
    assert "notes.count" in {c.name for c in _load(config).commands}
    assert len(_started_pids(tmp_path)) == started


@attrs.define
class HangingProvider:
    """Answers from a list, then waits forever (until the run is cancelled)."""

    replies: list[LLMResponse]
    hanging: trio.Event = attrs.field(factory=trio.Event)

    async def complete(self, request: Any) -> LLMResponse:
        if self.replies:
            await trio.lowlevel.checkpoint()
            return self.replies.pop(0)
        self.hanging.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        pass


async def test_cancelling_the_run_stops_the_server(server_script: Path, tmp_path: Path) -> None:
    """A run cancelled while its session with a server is open leaves no server behind."""
    config = _config(tmp_path, {"notes": _stdio(tmp_path, server_script)}, grants=("bridge:mcp",))
    plugins = _load(config)
    provider = HangingProvider([_reply("notes__add_note", {"text": "one"}, "c1")])
    plugins.providers["scripted"] = ("tests", lambda options: provider)
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            async with Runtime(config, plugins=plugins) as rt:
                await rt.run("take notes", RunOptions(llm="scripted", workspace=tmp_path / "ws"))

        nursery.start_soon(run)
        await provider.hanging.wait()
        # The session with the server is open now: its tool ran.
        assert "add_note one" in _log(tmp_path)
        live = [pid for pid in _started_pids(tmp_path) if _alive(pid)]
        assert len(live) == 1
        nursery.cancel_scope.cancel()
    assert [pid for pid in _started_pids(tmp_path) if _alive(pid)] == []


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def http_server(server_script: Path, tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    env = {**os.environ, "MCP_TEST_LOG": str(tmp_path / "server.log"), "MCP_TEST_PORT": str(port)}
    process = subprocess.Popen(
        [sys.executable, str(server_script), "http"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # Wait for it to listen: it says so by accepting a connection (no time limit here;
        # a server that never listens fails the test by its exit code).
        while True:
            assert process.poll() is None, "the HTTP MCP server exited"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait()


# The SDK's streamable HTTP client leaves httpx2's and httpcore2's response generators to
# the garbage collector when a session closes; that is its cleanup, not the bridge's.
@pytest.mark.filterwarnings("ignore:Async generator 'httpx2.:ResourceWarning")
@pytest.mark.filterwarnings("ignore:Async generator 'httpcore2.:ResourceWarning")
@pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <async_generator object:pytest.PytestUnraisableExceptionWarning"
)
async def test_streamable_http_server(http_server: str, tmp_path: Path) -> None:
    """A streamable HTTP server's tools are commands too (needing network), with a
    header read from the environment variable the config names."""
    servers = {
        "web": {"url": http_server, "headers": {"X-Key": {"env": "NOTES_KEY", "prefix": "k "}}}
    }
    config = _config(tmp_path, servers, grants=("bridge:mcp", "network"))
    plugins = _load(config)
    add = next(c for c in plugins.commands if c.name == "web.add_note")
    assert add.decl.permissions == ("network", "bridge:mcp")
    assert f"k {KEY}" in plugins.secrets or KEY in plugins.secrets
    replies = [
        _reply("web__add_note", {"text": "tea"}, "c1"),
        _reply("web__fail", {"reason": "cold"}, "c2"),
        FINISH,
    ]
    outcome, provider = await _run(tmp_path, config, replies, Answerer(False))
    assert outcome.status == "finished"
    answers = _tool_answers(provider.requests[-1])
    assert "noted 'tea' x1" in answers[0]
    assert "cannot do it: cold" in answers[1]
    assert "add_note tea" in _log(tmp_path)


def test_the_reference_time_server_lists_its_tools(tmp_path: Path) -> None:
    """The published mcp-server-time, started over stdio, maps to its two tools."""
    servers = {"time": {"command": sys.executable, "args": ["-m", "mcp_server_time"]}}
    plugins = _load(_config(tmp_path, servers))
    assert dict(plugins.records["mcp"].unmapped) == {}
    names = {c.name for c in plugins.commands if c.bridged}
    assert names == {"time.get_current_time", "time.convert_time"}
    schema = next(c for c in plugins.commands if c.name == "time.get_current_time").decl.parameters
    assert "timezone" in schema["properties"]
