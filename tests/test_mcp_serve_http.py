"""``autogpt mcp --http``: the real command in a subprocess, serving MCP over streamable
HTTP on 127.0.0.1, driven by the mcp package's own client (and raw HTTP where the test is
about what the gate lets through).

Each MCP session is an autogpt session of its own; tokens are ``autogpt serve``'s; a
session can be used only with the token that opened it; consent goes through elicitation;
an idle session, a DELETE and SIGTERM each end it as finished in the store.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import trio
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

from tests.clirun import cli_env
from tests.serverkit import TOKENS

SECRET = "sk-mcphttp-0123456789abcdef"
CONFIG = "server: {tokens: {alice: ALICE_TEST_TOKEN, bob: BOB_TEST_TOKEN}}\n"
SHELL = "plugins:\n  enable: [shell]\n"
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    },
}
# The SDK's streamable HTTP client leaves httpx2's and httpcore2's response generators to
# the garbage collector when a session closes; that is the client's cleanup, not the server's.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Async generator 'httpx2.:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Async generator 'httpcore2.:ResourceWarning"),
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <async_generator object"
        ":pytest.PytestUnraisableExceptionWarning"
    ),
]
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@contextmanager
def _serving(
    tmp_path: Path, *extra: str, config: str = CONFIG
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``autogpt mcp --http --port 0``; yields the process and its MCP URL."""
    (tmp_path / "config.yaml").write_text(config, encoding="utf-8")
    env = cli_env(
        tmp_path,
        ALICE_TEST_TOKEN=TOKENS["alice"],
        BOB_TEST_TOKEN=TOKENS["bob"],
        MCPHTTP_API_KEY=SECRET,
    )
    process = subprocess.Popen(
        [
            sys.executable,
            *("-m", "autogpt_core", "mcp", "--http", "--port", "0"),
            *("--workspace", str(tmp_path / "ws"), *extra),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = None
        for line in process.stdout:
            if "serving MCP at " in line:
                url = line.split("serving MCP at ")[1].split()[0]
                break
        if url is None:
            raise AssertionError(f"autogpt mcp --http did not start: {process.stderr.read()}")  # type: ignore[union-attr]
        yield process, url
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(30)


def _stop(process: subprocess.Popen[str]) -> str:
    """SIGTERM; the process must exit 0. Returns its stdout and stderr."""
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert "Traceback" not in err
    return out + err


def _client(
    url: str,
    token: str | None,
    body: Callable[[ClientSession], Awaitable[Any]],
    *,
    elicit: Any = None,
) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def main() -> Any:
        with trio.fail_after(120):
            async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
                async with streamable_http_client(url, http_client=http) as (read, write):
                    async with ClientSession(read, write, elicitation_callback=elicit) as session:
                        await session.initialize()
                        return await body(session)

    return trio.run(main)


def _stored(tmp_path: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(tmp_path / "data" / "sessions.sqlite3") as db:
        return db.execute(
            "SELECT goal, status, result FROM sessions ORDER BY created_at"
        ).fetchall()


def _statuses_once_settled(tmp_path: Path, want: list[str]) -> list[str]:
    """The stored sessions' statuses, once they are ``want`` (a session ends moments after
    the request that ends it is answered), or as they are after 20 s."""
    statuses: list[str] = []
    for _ in range(200):
        statuses = [status for _, status, _ in _stored(tmp_path)]
        if statuses == want:
            break
        time.sleep(0.1)
    return statuses


def _commands(tmp_path: Path) -> list[str]:
    with sqlite3.connect(tmp_path / "data" / "sessions.sqlite3") as db:
        rows = db.execute("SELECT command FROM cycles ORDER BY session_id, number").fetchall()
    return sorted(json.loads(r[0])["command"] for r in rows)


def test_each_mcp_session_is_a_stored_session_and_secrets_are_masked(tmp_path: Path) -> None:
    """Two clients with a token list the tools and call commands; each MCP session is one
    autogpt session, ended as finished when its client closes it (DELETE)."""

    async def first(session: ClientSession) -> tuple[list[str], list[types.CallToolResult]]:
        tools = [t.name for t in (await session.list_tools()).tools]
        results = [
            await session.call_tool("write_file", {"path": "a.txt", "content": f"key {SECRET}"}),
            await session.call_tool("read_file", {"path": "a.txt"}),
            await session.call_tool("read_file", {"path": "../outside.txt"}),
        ]
        return tools, results

    async def second(session: ClientSession) -> types.CallToolResult:
        return await session.call_tool("list_files", {})

    with _serving(tmp_path) as (process, url):
        tools, (wrote, read, outside) = _client(url, TOKENS["alice"], first)
        listed = _client(url, TOKENS["bob"], second)
        # The DELETE each client sent on closing ends its session, before the server stops.
        settled = _statuses_once_settled(tmp_path, ["finished", "finished"])
        stored = _stored(tmp_path)
        out = _stop(process)
    assert settled == ["finished", "finished"]
    assert {"read_file", "write_file", "list_files", "ask_user"} <= set(tools)
    assert "run_shell" not in tools  # the shell plugin is disabled
    assert not wrote.is_error
    assert (tmp_path / "ws" / "a.txt").read_text(encoding="utf-8") == f"key {SECRET}"
    assert read.content[0].text == "key ***"
    assert outside.is_error
    assert "workspace" in outside.content[0].text
    assert not listed.is_error
    assert "a.txt" in listed.content[0].text
    assert all("autogpt mcp" in goal for goal, _, _ in stored)
    # Each session belongs to the token that opened it, as 'autogpt serve' tasks do.
    with sqlite3.connect(tmp_path / "data" / "sessions.sqlite3") as db:
        owners = [
            json.loads(row[0])["owner"]
            for row in db.execute("SELECT config FROM sessions ORDER BY created_at")
        ]
    assert owners == ["alice", "bob"]
    assert stored[0][2].startswith("3 commands called by MCP client")
    assert _commands(tmp_path) == ["list_files", "read_file", "read_file", "write_file"]
    with sqlite3.connect(tmp_path / "data" / "sessions.sqlite3") as db:
        everything = "\n".join(str(row) for row in db.execute("SELECT * FROM events"))
    assert SECRET not in everything
    assert SECRET not in out
    assert TOKENS["alice"] not in out
    assert TOKENS["bob"] not in out


def test_the_gate_wants_a_token_serves_only_mcp_and_keeps_sessions_to_their_token(
    tmp_path: Path,
) -> None:
    with _serving(tmp_path) as (process, url), httpx.Client(timeout=30) as http:
        alice = {**ACCEPT, "Authorization": f"Bearer {TOKENS['alice']}"}
        bob = {**ACCEPT, "Authorization": f"Bearer {TOKENS['bob']}"}
        missing = http.post(url, json=INIT, headers=ACCEPT)
        wrong = http.post(url, json=INIT, headers={**ACCEPT, "Authorization": "Bearer nope"})
        basic = http.post(url, json=INIT, headers={**ACCEPT, "Authorization": "Basic YTpi"})
        # Two Authorization headers are refused whichever comes first (a proxy in front
        # could read the other one).
        twice = [
            http.post(
                url,
                json=INIT,
                headers=[
                    *ACCEPT.items(),
                    ("Authorization", f"Bearer {first}"),
                    ("Authorization", f"Bearer {second}"),
                ],
            )
            for first, second in ((TOKENS["alice"], TOKENS["bob"]), ("nope", TOKENS["alice"]))
        ]
        doubled_path = http.post(url + "//", json=INIT, headers=alice)
        upgrade = {
            "Connection": "Upgrade",
            "Upgrade": "websocket",
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            "Authorization": f"Bearer {TOKENS['alice']}",
        }
        websocket = http.get(url, headers=upgrade)
        elsewhere = http.get(url.replace("/mcp", "/ap/v1/agent/tasks"), headers=alice)
        opened = http.post(url, json=INIT, headers=alice)
        session_id = opened.headers.get("mcp-session-id")
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        version = {"mcp-protocol-version": "2025-06-18", "mcp-session-id": session_id or ""}
        http.post(url, json=initialized, headers={**alice, **version})
        stolen = http.post(url, json=listing, headers={**bob, **version})
        own = http.post(url, json=listing, headers={**alice, **version})
        _stop(process)
    for refused in (missing, wrong, basic, *twice):
        assert refused.status_code == 401, refused.text
        assert "Authorization: Bearer TOKEN" in refused.json()["error"]
        assert refused.headers["www-authenticate"].startswith("Bearer")
    assert elsewhere.status_code == 404
    assert doubled_path.status_code == 404
    assert websocket.status_code == 403
    assert "/mcp" in elsewhere.json()["error"]
    assert opened.status_code == 200, opened.text
    assert session_id
    # Another token's request on alice's session is answered as for no such session.
    assert stolen.status_code == 404, stolen.text
    assert "list_files" not in stolen.text
    assert own.status_code == 200, own.text
    assert "list_files" in own.text


def test_consent_is_asked_through_elicitation_over_http(tmp_path: Path) -> None:
    answers = ["allow", "deny", "always"]
    seen: list[str] = []

    async def elicit(ctx: Any, params: Any) -> types.ElicitResult:
        seen.append(params.message)
        return types.ElicitResult(action="accept", content={"decision": answers.pop(0)})

    async def body(session: ClientSession) -> list[types.CallToolResult]:
        return [
            await session.call_tool("run_shell", {"command": f"echo {n} >> ran.txt"})
            for n in range(4)
        ]

    async def cannot_ask(session: ClientSession) -> types.CallToolResult:
        return await session.call_tool("run_shell", {"command": "touch never.txt"})

    with _serving(tmp_path, config=CONFIG + SHELL) as (process, url):
        allowed, denied, always, remembered = _client(url, TOKENS["alice"], body, elicit=elicit)
        refused = _client(url, TOKENS["alice"], cannot_ask)
        _stop(process)
    assert not allowed.is_error
    assert denied.is_error
    assert "did not allow" in denied.content[0].text
    assert not always.is_error
    assert not remembered.is_error
    assert len(seen) == 3
    assert "needs permission shell" in seen[0]
    assert "echo 0 >> ran.txt" in seen[0]
    assert (tmp_path / "ws" / "ran.txt").read_text(encoding="utf-8").split() == ["0", "2", "3"]
    assert refused.is_error
    assert "elicitation" in refused.content[0].text
    assert not (tmp_path / "ws" / "never.txt").exists()


def test_an_idle_session_ends_as_finished_and_its_id_is_then_unknown(tmp_path: Path) -> None:
    with _serving(tmp_path, "--idle-timeout", "1") as (process, url):
        headers = {**ACCEPT, "Authorization": f"Bearer {TOKENS['alice']}"}
        with httpx.Client(timeout=30) as http:
            opened = http.post(url, json=INIT, headers=headers)
            session_id = opened.headers["mcp-session-id"]
            version = {"mcp-protocol-version": "2025-06-18", "mcp-session-id": session_id}
            call = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "write_file", "arguments": {"path": "i.txt", "content": "x"}},
            }
            assert http.post(url, json=call, headers={**headers, **version}).status_code == 200
            # The session is open (running in the store) until it has been idle a second.
            statuses = _statuses_once_settled(tmp_path, ["finished"])
            later = http.post(url, json=call, headers={**headers, **version})
        _stop(process)
    assert statuses == ["finished"]
    assert later.status_code == 404
    assert (tmp_path / "ws" / "i.txt").exists()


def test_sigterm_ends_open_sessions_as_finished(tmp_path: Path) -> None:
    with _serving(tmp_path) as (process, url), httpx.Client(timeout=30) as http:
        headers = {**ACCEPT, "Authorization": f"Bearer {TOKENS['alice']}"}
        opened = http.post(url, json=INIT, headers=headers)
        version = {
            "mcp-protocol-version": "2025-06-18",
            "mcp-session-id": opened.headers["mcp-session-id"],
        }
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "write_file", "arguments": {"path": "t.txt", "content": "x"}},
        }
        assert http.post(url, json=call, headers={**headers, **version}).status_code == 200
        assert [status for _, status, _ in _stored(tmp_path)] == ["running"]
        out = _stop(process)
    assert "stopped; every session was saved" in out
    assert [status for _, status, _ in _stored(tmp_path)] == ["finished"]


def test_no_auth_is_refused_off_loopback(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "autogpt_core", "mcp", "--http", "--no-auth", "--host", "0.0.0.0"],
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "loopback" in done.stderr
    assert "Traceback" not in done.stderr
    stdio_only = subprocess.run(
        [sys.executable, "-m", "autogpt_core", "mcp", "--port", "9"],
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert stdio_only.returncode == 2
    assert "--http" in stdio_only.stderr


def test_no_auth_serves_loopback_names_only_and_no_other_site(tmp_path: Path) -> None:
    """Without tokens, a request naming another host (DNS rebinding) or coming from
    another site's page is refused; a plain loopback client is served."""
    with _serving(tmp_path, "--no-auth") as (process, url), httpx.Client(timeout=30) as http:
        rebound = http.post(url, json=INIT, headers={**ACCEPT, "Host": "attacker.example"})
        foreign = http.post(url, json=INIT, headers={**ACCEPT, "Origin": "http://attacker.example"})
        served = http.post(url, json=INIT, headers=ACCEPT)
        _stop(process)
    assert rebound.status_code == 403
    assert "loopback" in rebound.json()["message"]
    assert foreign.status_code == 403
    assert served.status_code == 200, served.text


def _call(http: httpx.Client, url: str, session: dict[str, str], name: str, arguments: Any) -> str:
    """A raw ``tools/call`` on an open session: the whole answer's text (JSON or SSE)."""
    call = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    response = http.post(url, json=call, headers=session)
    assert response.status_code == 200, response.text
    return response.text


def _open(http: httpx.Client, url: str) -> dict[str, str]:
    """A new MCP session with alice's token: the headers its requests carry."""
    headers = {**ACCEPT, "Authorization": f"Bearer {TOKENS['alice']}"}
    opened = http.post(url, json=INIT, headers=headers)
    assert opened.status_code == 200, opened.text
    return {
        **headers,
        "mcp-protocol-version": "2025-06-18",
        "mcp-session-id": opened.headers["mcp-session-id"],
    }


def test_sigterm_lets_the_call_in_flight_finish_and_answer(tmp_path: Path) -> None:
    """SIGTERM while a command runs: it runs to its end, its client gets its result, and
    the session is stored finished with it; only then does the server exit, with 0."""
    config = CONFIG + SHELL + "permissions:\n  grant: [fs.read, fs.write, shell]\n"
    with _serving(tmp_path, config=config) as (process, url), httpx.Client(timeout=60) as http:
        session = _open(http, url)
        answers: list[str] = []
        command = "touch started; sleep 4; echo slept > slept.txt; echo all done"
        caller = threading.Thread(
            target=lambda: answers.append(
                _call(http, url, session, "run_shell", {"command": command})
            )
        )
        caller.start()
        started = tmp_path / "ws" / "started"
        for _ in range(600):
            if started.exists():
                break
            time.sleep(0.05)
        assert started.exists()
        _stop(process)
        caller.join(60)
    assert (tmp_path / "ws" / "slept.txt").exists()
    assert len(answers) == 1
    assert "all done" in answers[0]
    ((_, status, result),) = _stored(tmp_path)
    assert status == "finished"
    assert result.startswith("1 command called by")


def test_a_session_that_cannot_open_fails_its_calls_not_the_server(tmp_path: Path) -> None:
    """A workspace that cannot be made (a file is in the way): the client's call gets an
    error result saying why, and the server goes on serving and stops cleanly."""
    (tmp_path / "ws").write_text("a file, not a directory")
    with _serving(tmp_path) as (process, url), httpx.Client(timeout=60) as http:
        failed = _call(http, url, _open(http, url), "list_files", {})
        listed = http.post(
            url, json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, headers=_open(http, url)
        )
        alive = process.poll() is None
        out = _stop(process)
    assert "could not open a session for this client" in failed
    assert "isError" in failed
    assert alive
    assert listed.status_code == 200
    assert "list_files" in listed.text
    assert "could not open a session" in out
