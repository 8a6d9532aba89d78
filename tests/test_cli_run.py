"""``autogpt run`` as a process: the demo, kill -9 and resume, Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.clirun import autogpt, cli_env
from tests.fake_openai import FakeOpenAI, FakeToolCall, Reply, fake_openai_in_thread

GOAL = "Write three files, one per cycle, then finish."


def _write(n: int, *, delay: float = 0.0) -> Reply:
    args = {"path": f"f{n}.txt", "content": f"file {n}"}
    return Reply(tool_calls=(FakeToolCall("write_file", args, id=f"w{n}"),), delay=delay)


def _finish() -> Reply:
    return Reply(tool_calls=(FakeToolCall("finish", {"result": "all written"}, id="fin"),))


def _completed_cycles(db: Path) -> list[tuple[str, int, str]]:
    if not db.exists():
        return []
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            # Completed: not provisional (recorded as its command started, see below).
            return conn.execute(
                "SELECT session_id, number, result FROM cycles"
                " WHERE json_extract(result, '$.provisional') IS NOT 1 ORDER BY number"
            ).fetchall()
    except sqlite3.Error:
        return []


def _wait_for_cycles(
    db: Path, count: int, proc: subprocess.Popen[str]
) -> list[tuple[str, int, str]]:
    """Poll the store until ``count`` cycles are committed (bounded: a failing run ends it)."""
    for _ in range(1200):
        rows = _completed_cycles(db)
        if len(rows) >= count:
            return rows
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError(f"{count} cycles were never committed")


def _wait_for_requests(server: FakeOpenAI, count: int, proc: subprocess.Popen[str]) -> None:
    """Poll until the model server has received ``count`` requests (bounded)."""
    for _ in range(1200):
        if len(server.requests) >= count:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError(f"the server never received {count} requests")


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "autogpt_core", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_demo_runs_offline_and_writes_its_file(tmp_path: Path) -> None:
    """autogpt run --demo needs no key and no network; its workspace file exists after."""
    workspace = tmp_path / "ws"
    result = autogpt("run", "--demo", "--workspace", str(workspace), env=cli_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "Session finished" in result.stdout
    assert "Small hooks wait in line" in (workspace / "haiku.txt").read_text()
    assert "Traceback" not in result.stderr
    import json

    (stored,) = json.loads(autogpt("sessions", "--json", env=cli_env(tmp_path)).stdout)
    assert (stored["status"], stored["cycles"]) == ("finished", 4)
    assert stored["id"] in result.stdout
    listing = autogpt("sessions", env=cli_env(tmp_path)).stdout.splitlines()
    assert listing[0].split() == ["SESSION", "UPDATED", "STATUS", "CYCLES", "GOAL"]
    assert listing[1].startswith(stored["id"])


def test_missing_key_says_how_to_fix(tmp_path: Path) -> None:
    """Without a key the run stops with how to set one, or --base-url, or --demo."""
    result = autogpt("run", "say hi", env=cli_env(tmp_path))
    assert result.returncode == 2
    assert "OPENAI_API_KEY" in result.stderr
    assert "--demo" in result.stderr
    assert "Traceback" not in result.stderr


def test_kill_9_then_resume_keeps_every_completed_cycle(tmp_path: Path) -> None:
    """A run killed with SIGKILL mid-session resumes from its last completed cycle;
    no earlier cycle or workspace file is lost."""
    # The third model answer is held back, so the kill lands while cycle 3 is in flight.
    script = [_write(1), _write(2), _write(3, delay=60), _write(3), _finish()]
    env = cli_env(tmp_path)
    db = tmp_path / "data" / "sessions.sqlite3"
    workspace = tmp_path / "ws"
    with fake_openai_in_thread(script) as server:
        common = ["--base-url", server.base_url, "--max-cycles", "10"]
        proc = _start(["run", GOAL, "--workspace", str(workspace), *common], env)
        before = _wait_for_cycles(db, 2, proc)
        _wait_for_requests(server, 3, proc)  # cycle 3 is in flight: its answer is held back
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        session_id = before[0][0]
        assert [n for _, n, _ in before] == [1, 2]
        resumed = autogpt("run", "--resume", session_id, *common, env=env)
    assert resumed.returncode == 0, resumed.stderr
    after = _completed_cycles(db)
    assert after[:2] == before
    assert [n for _, n, _ in after] == [1, 2, 3, 4]
    assert sorted(p.name for p in workspace.iterdir()) == ["f1.txt", "f2.txt", "f3.txt"]
    # The resumed conversation contained the first two cycles' tool answers.
    last = server.requests[-1]["messages"]
    assert [m["tool_call_id"] for m in last if m["role"] == "tool"] == ["w1", "w2", "w3"]


def test_a_command_running_when_the_process_died_is_not_run_again(tmp_path: Path) -> None:
    """kill -9 while a command with effects runs (a shell command that appends a line, then
    sleeps): its cycle was recorded as it started, so the resumed session has that cycle
    done, tells the model its outcome is unknown, and never runs it again."""
    (tmp_path / "config.yaml").write_text(
        "plugins: {enable: [shell]}\npermissions: {grant: [fs.read, fs.write, shell]}\n"
    )
    line = "echo ran >> runs.txt; sleep 60"
    script = [
        Reply(tool_calls=(FakeToolCall("run_shell", {"command": line}, id="sh1"),)),
        _finish(),
    ]
    env = cli_env(tmp_path)
    workspace = tmp_path / "ws"
    db = tmp_path / "data" / "sessions.sqlite3"
    with fake_openai_in_thread(script) as server:
        common = ["--base-url", server.base_url, "--max-cycles", "10"]
        proc = _start(["run", GOAL, "--workspace", str(workspace), *common], env)
        runs = workspace / "runs.txt"
        for _ in range(1200):
            if runs.exists():
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        with sqlite3.connect(db) as conn:
            ((session_id, result),) = conn.execute("SELECT session_id, result FROM cycles")
        assert json.loads(result)["provisional"] is True
        resumed = autogpt("run", "--resume", session_id, *common, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert runs.read_text() == "ran\n"  # once
    assert [n for _, n, _ in _completed_cycles(db)] == [1, 2]
    (first,) = [json.loads(r) for _, n, r in _completed_cycles(db) if n == 1]
    assert first["ok"] is False
    assert "not run again" in first["error"]
    # The resumed conversation answered the shell call with the unknown outcome.
    last = server.requests[-1]["messages"]
    (answer,) = [m for m in last if m["role"] == "tool" and m["tool_call_id"] == "sh1"]
    assert "whether it took effect is not known" in answer["content"]
    assert len(server.requests) == 2


def test_a_second_resume_is_refused_while_the_first_runs(tmp_path: Path) -> None:
    """After kill -9, `autogpt sessions` says interrupted and a resume (by id prefix) takes
    over at once; a second resume meanwhile is refused in one line naming the first's pid,
    before running anything; the first is unharmed and its lease released at Ctrl-C."""
    script = [_write(1), _write(2, delay=60), _write(2, delay=60)]
    env = cli_env(tmp_path)
    db = tmp_path / "data" / "sessions.sqlite3"
    workspace = tmp_path / "ws"
    with fake_openai_in_thread(script) as server:
        common = ["--base-url", server.base_url]
        killed = _start(["run", GOAL, "--workspace", str(workspace), *common], env)
        _wait_for_cycles(db, 1, killed)
        _wait_for_requests(server, 2, killed)
        killed.send_signal(signal.SIGKILL)
        killed.communicate()
        session_id = _completed_cycles(db)[0][0]
        (listed,) = json.loads(autogpt("sessions", "--json", env=env).stdout)
        assert (listed["id"], listed["status"]) == (session_id, "interrupted")
        assert "interrupted" in autogpt("sessions", env=env).stdout.splitlines()[1]

        first = _start(["run", "--resume", session_id[:8], *common], env)
        _wait_for_requests(server, 3, first)  # the first resume holds the session
        second = autogpt("run", "--resume", session_id, *common, env=env)
        assert second.returncode == 2
        (line,) = second.stderr.splitlines()
        assert re.fullmatch(
            f"autogpt: error: session {session_id} is being run by process {first.pid} on "
            rf"host {re.escape(socket.gethostname())} since (\d{{4}}-\d\d-\d\d )?\d\d:\d\d:\d\d"
            "; wait for it to end, or stop that process",
            line,
        ), line
        assert second.stdout == ""
        assert len(server.requests) == 3
        assert [n for _, n, _ in _completed_cycles(db)] == [1]
        assert not (workspace / "f2.txt").exists()
        (listed,) = json.loads(autogpt("sessions", "--json", env=env).stdout)
        assert listed["status"] == "running"

        first.send_signal(signal.SIGINT)
        _, first_err = first.communicate(timeout=60)
    assert first.returncode == 130, first_err
    assert "error" not in first_err
    assert "Traceback" not in first_err
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM leases").fetchone() == (0,)
        assert conn.execute("SELECT status FROM sessions").fetchone() == ("interrupted",)


def test_resume_takes_a_unique_id_prefix_and_explains_others(tmp_path: Path) -> None:
    """--resume accepts a unique start of an id; an ambiguous one is refused listing the
    candidates, an unknown one points at `autogpt sessions`; all in one line, exit 2."""
    from autogpt_core.store._storage import Store

    env = cli_env(tmp_path)
    nothing = autogpt("run", "--resume", "abc", env=env)
    assert "there are no stored sessions yet" in nothing.stderr
    with Store(tmp_path / "data" / "sessions.sqlite3") as store:
        for session_id in ("abc123", "abd456"):
            store.create_session("g", tmp_path / "ws", session_id=session_id, status="finished")
    cases = [
        ("ab", ["is ambiguous: 2 sessions", "abc123", "abd456", "give more of the id"]),
        ("zz", ["No session 'zz'", "`autogpt sessions`"]),
        ("abc", ["session abc123 already finished"]),
    ]
    for text, expected in cases:
        result = autogpt("run", "--resume", text, env=env)
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.splitlines()) == 1, result.stderr
        for part in expected:
            assert part in result.stderr, (text, result.stderr)


def test_ctrl_c_saves_the_session_and_exits_130(tmp_path: Path) -> None:
    """SIGINT stops at a safe point: exit code 130, no traceback, the session saved."""
    script = [_write(1), _write(2, delay=60)]
    env = cli_env(tmp_path)
    db = tmp_path / "data" / "sessions.sqlite3"
    with fake_openai_in_thread(script) as server:
        proc = _start(["run", GOAL, "--base-url", server.base_url], env)
        _wait_for_cycles(db, 1, proc)
        _wait_for_requests(server, 2, proc)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert "--resume" in err
    with sqlite3.connect(db) as conn:
        status, cycles = conn.execute(
            "SELECT status, (SELECT count(*) FROM cycles) FROM sessions"
        ).fetchone()
    assert status == "interrupted"
    assert cycles == 1


def test_config_command_shows_where_things_live(tmp_path: Path) -> None:
    """autogpt config names the config file (absent: defaults) and the data directory."""
    env = cli_env(tmp_path)
    result = autogpt("config", "--json", env=env)
    assert result.returncode == 0, result.stderr
    import json

    info = json.loads(result.stdout)
    assert info["config_file"] == str(tmp_path / "config.yaml")
    assert info["config_file_exists"] is False
    assert info["data_dir"] == str(tmp_path / "data")
    assert info["grants"] == ["fs.read", "fs.write"]


def test_user_mistakes_get_clear_errors(tmp_path: Path) -> None:
    """A missing --config file, a goal with --demo, a zero budget, invalid YAML and an
    unknown grant are refused with what to fix, and no traceback."""
    env = cli_env(tmp_path)
    cases = [
        (["--config", str(tmp_path / "nope.yaml"), "plugins", "list"], "does not exist"),
        (["run", "--demo", "another goal"], "drop GOAL"),
        (["run", "--demo", "--max-cycles", "0"], "is not at least 1"),
        (["--config", str(tmp_path), "plugins", "list"], "is a directory"),
    ]
    for args, expected in cases:
        result = autogpt(*args, env=env)
        assert result.returncode == 2, args
        assert expected in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
    (tmp_path / "config.yaml").write_text("plugins: {enable: [x]\n")
    bad_yaml = autogpt("plugins", "list", env=env)
    assert "line 2, column 1: not valid YAML" in bad_yaml.stderr
    (tmp_path / "config.yaml").write_text("permissions: {grant: [shel]}\n")
    bad_grant = autogpt("plugins", "list", env=env)
    assert "'shel' is not a permission" in bad_grant.stderr


def test_output_to_a_closed_pipe_is_quiet(tmp_path: Path) -> None:
    """autogpt run --demo | head -1 prints one line, no traceback, and the run completes."""
    env = cli_env(tmp_path)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "autogpt_core",
            "run",
            "--demo",
            "--workspace",
            str(tmp_path / "ws"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader goes away, like head -1
    _, err = proc.communicate(timeout=120)
    assert b"start" in first
    assert b"Traceback" not in err
    assert proc.returncode == 0
    assert (tmp_path / "ws" / "haiku.txt").exists()


def test_run_warns_about_broken_enabled_plugins(tmp_path: Path) -> None:
    """A run starts despite a broken plugin, and says which and why on stderr."""
    from tests.distfactory import write_plugin

    site = tmp_path / "site"
    write_plugin(site, "crashy", "raise ImportError('missing piece')\n")
    env = cli_env(tmp_path, site=site)
    result = autogpt("run", "--demo", "--workspace", str(tmp_path / "ws"), env=env)
    assert result.returncode == 0, result.stderr
    assert "warning: plugin crashy: import of 'plug_crashy' failed" in result.stderr
    assert "missing piece" in result.stderr


def test_interactive_run_asks_at_the_terminal(tmp_path: Path) -> None:
    """With the shell plugin enabled, a shell command is asked about on stdin: 'y' runs
    it, 'n' does not, and the model is told."""
    for answer, expect_file in (("y", True), ("n", False)):
        home = tmp_path / answer
        home.mkdir()
        (home / "config.yaml").write_text("plugins: {enable: [shell]}\n")
        script = [
            Reply(
                tool_calls=(FakeToolCall("run_shell", {"command": "echo ran > ran.txt"}, id="s1"),)
            ),
            _finish(),
        ]
        with fake_openai_in_thread(script) as server:
            result = autogpt(
                "run",
                GOAL,
                "--base-url",
                server.base_url,
                "--workspace",
                str(home / "ws"),
                env=cli_env(home),
                input=f"{answer}\n",
            )
        assert result.returncode == 0, result.stderr
        assert "shell.run_shell\n" in result.stdout
        assert "Allow this call, needing shell?" in result.stdout
        assert (home / "ws" / "ran.txt").exists() is expect_file
        tool_answer = next(
            m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"
        )
        if expect_file:
            assert tool_answer.startswith('<data source="output of run_shell">\nexit code: 0')
        else:
            assert "did not allow" in tool_answer


def test_what_the_cli_prints_from_outside_cannot_drive_the_terminal(tmp_path: Path) -> None:
    """A goal, a result and an error line holding escape sequences are printed with the
    escapes visible, by run, by sessions and by the error line."""
    env = cli_env(tmp_path)
    evil = "\x1b[2K\x1b[1Aerased"
    script = [Reply(tool_calls=(FakeToolCall("finish", {"result": f"done{evil}"}, id="f"),))]
    with fake_openai_in_thread(script) as server:
        run = autogpt("run", f"goal{evil}", "--base-url", server.base_url, env=env)
    listed = autogpt("sessions", env=env)
    missing = autogpt("run", "--resume", f"nope{evil}", env=env)
    assert run.returncode == 0, run.stderr
    assert missing.returncode == 2
    for text in (run.stdout, listed.stdout, missing.stderr):
        assert "\x1b" not in text
        assert "\\x1b[2K\\x1b[1Aerased" in text


# --- damage, deletion and bad recordings ---------------------------------------------------


def _demo_sessions(tmp_path: Path, count: int) -> list[str]:
    """Run the demo ``count`` times; return the session ids, oldest first."""
    env = cli_env(tmp_path)
    for _ in range(count):
        result = autogpt("run", "--demo", env=env)
        assert result.returncode == 0, result.stderr
    listed = json.loads(autogpt("sessions", "--json", env=env).stdout)
    return [row["id"] for row in reversed(listed)]


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("autogpt: error: ")
    return line


def test_damaged_store_columns_are_reported_in_one_line(tmp_path: Path) -> None:
    """Damaged JSON in a session's config or budget, or in a cycle's messages: `autogpt
    sessions` lists every session, marking the damaged one with a one-line warning naming
    the file, the session, the column and the fix; --resume of it is one line, exit 2."""
    env = cli_env(tmp_path)
    db = tmp_path / "data" / "sessions.sqlite3"
    damaged, healthy = _demo_sessions(tmp_path, 2)
    for sql, column in [
        ("UPDATE sessions SET config = '{bad' WHERE id = ?", "config"),
        ("UPDATE sessions SET budget = '[1' WHERE id = ?", "budget"),
        ("UPDATE cycles SET messages = 'xx' WHERE session_id = ?", "messages"),
    ]:
        with sqlite3.connect(db) as conn:
            conn.execute("UPDATE sessions SET config = '{}', budget = '{}', status = 'stopped'")
            conn.execute("UPDATE cycles SET messages = '[]'")
            conn.execute(sql, (damaged,))
        listing = autogpt("sessions", env=env)
        resumed = autogpt("run", "--resume", damaged[:8], env=env)
        where = f"cycle 1 of session {damaged}" if column == "messages" else f"session {damaged}"
        expected = f"The session store {db} is damaged: {where}: its {column} column"
        if column != "messages":
            assert listing.returncode == 0, listing.stderr
            rows = {line.split()[0]: line.split() for line in listing.stdout.splitlines()[1:]}
            assert rows[damaged][3:5] == ["DAMAGED", "?"]
            assert rows[healthy][3] == "stopped"
            (warning,) = listing.stderr.splitlines()
            assert warning.startswith(f"autogpt: warning: {expected}")
            assert f"'autogpt sessions delete {damaged}'" in warning
        line = _one_line_error(resumed)
        assert expected in line, line
        assert "Fix: delete the session" in line


def test_an_empty_store_file_is_noticed_not_started_afresh(tmp_path: Path) -> None:
    """A 0-byte sessions.sqlite3 (truncated) is refused by `autogpt sessions`, run and
    --resume in one line saying what happened and how to start anew; it stays 0 bytes."""
    env = cli_env(tmp_path)
    db = tmp_path / "data" / "sessions.sqlite3"
    db.parent.mkdir(parents=True)
    db.write_bytes(b"")
    for args in (["sessions"], ["run", "--demo"], ["run", "--resume", "abc"]):
        line = _one_line_error(autogpt(*args, env=env))
        assert f"{db} is empty (0 bytes) but a store was expected" in line, args
        assert "may have been truncated" in line
        assert "move it away" in line
    assert db.stat().st_size == 0


def test_sessions_delete_asks_then_deletes_rows_and_memories(tmp_path: Path) -> None:
    """`autogpt sessions delete PREFIX` shows what it will delete and asks: "n" (or no
    answer) deletes nothing; "y" deletes the session's rows and, through memory_forget,
    its memories, keeps its workspace and says so; --yes --workspace removes that too."""
    env = cli_env(tmp_path)
    memory = tmp_path / "data" / "plugins" / "memory_sqlite" / "memory.sqlite3"
    first, second = _demo_sessions(tmp_path, 2)

    def memories(session_id: str) -> int:
        with sqlite3.connect(memory) as conn:
            query = "SELECT count(*) FROM memory WHERE session_id = ?"
            return int(conn.execute(query, (session_id,)).fetchone()[0])

    assert memories(first) > 0
    for answer in ("n\n", ""):
        refused = autogpt("sessions", "delete", first[:8], env=env, input=answer)
        assert refused.returncode == 1, refused.stderr
        assert f"Session {first} (finished)" in refused.stdout
        assert "4 cycle(s)" in refused.stdout
        assert refused.stdout.rstrip().endswith("Nothing deleted.")
    assert memories(first) > 0

    deleted = autogpt("sessions", "delete", first[:8], env=env, input="y\n")
    assert deleted.returncode == 0, deleted.stderr
    workspace = tmp_path / "data" / "workspaces" / first
    assert f"Delete session {first}? [y/N]" in deleted.stdout
    assert f"Deleted session {first}: 4 cycle(s)" in deleted.stdout
    assert f"{memories(second)} memory item(s) forgotten" in deleted.stdout
    assert f"Kept its workspace {workspace} (remove it with --workspace" in deleted.stdout
    assert (workspace / "haiku.txt").is_file()
    assert memories(first) == 0
    assert memories(second) > 0
    listed = json.loads(autogpt("sessions", "--json", env=env).stdout)
    assert [row["id"] for row in listed] == [second]
    with sqlite3.connect(tmp_path / "data" / "sessions.sqlite3") as conn:
        for table in ("cycles", "events", "artifacts", "leases"):
            query = f"SELECT count(*) FROM {table} WHERE session_id = ?"
            assert conn.execute(query, (first,)).fetchone() == (0,), table

    removed = autogpt("sessions", "delete", second, "--yes", "--workspace", env=env)
    assert removed.returncode == 0, removed.stderr
    assert "[y/N]" not in removed.stdout
    assert f"Removed its workspace {tmp_path / 'data' / 'workspaces' / second}." in removed.stdout
    assert not (tmp_path / "data" / "workspaces" / second).exists()
    line = _one_line_error(autogpt("sessions", "delete", second, "--yes", env=env))
    assert f"No session {second!r}" in line


def test_sessions_delete_keeps_a_workspace_the_user_chose(tmp_path: Path) -> None:
    """--workspace never removes a directory given with `run --workspace`: only one
    autogpt made under its data directory."""
    env = cli_env(tmp_path)
    chosen = tmp_path / "project"
    assert autogpt("run", "--demo", "--workspace", str(chosen), env=env).returncode == 0
    (listed,) = json.loads(autogpt("sessions", "--json", env=env).stdout)
    result = autogpt("sessions", "delete", listed["id"], "--yes", "--workspace", env=env)
    assert result.returncode == 0, result.stderr
    assert f"Kept its workspace {chosen.resolve()}: it was chosen with --workspace" in (
        result.stdout
    )
    assert (chosen / "haiku.txt").is_file()


def test_sessions_delete_refuses_a_running_session(tmp_path: Path) -> None:
    """A session whose lease a live process holds is refused in one line naming that
    process, before asking anything; nothing is deleted."""
    from autogpt_core.store._lease import Holder
    from autogpt_core.store._storage import Store

    env = cli_env(tmp_path)
    (session_id,) = _demo_sessions(tmp_path, 1)
    with Store(tmp_path / "data" / "sessions.sqlite3") as store:
        store.acquire_lease(session_id, Holder.current(), expiry=60)
        result = autogpt("sessions", "delete", session_id, "--yes", env=env)
        line = _one_line_error(result)
        assert f"session {session_id} is being run by process {os.getpid()}" in line
        assert result.stdout == ""
        assert store.session_footprint(session_id).cycles == 4


def _recording(path: Path, *tool_calls: Mapping[str, object], cost: str = "0") -> Path:
    exchanges = [
        {"response": {"tool_calls": [call], "usage": {"cost_usd": "COST"}}} for call in tool_calls
    ]
    text = json.dumps({"format": "autogpt-replay", "version": 1, "exchanges": exchanges})
    path.write_text(text.replace('"COST"', cost), encoding="utf-8")
    return path


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_bad_recordings_are_refused_before_a_session_starts(tmp_path: Path) -> None:
    """A FIFO, /dev/zero, JSON nested 10,000 deep, a NaN or an infinite cost: each run ends
    at once with one line naming the recording, and leaves no session behind."""
    env = cli_env(tmp_path)
    finish = {"name": "finish", "arguments": {"result": "done"}}
    fifo = tmp_path / "rec.fifo"
    os.mkfifo(fifo)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 10_000 + "]" * 10_000, encoding="utf-8")
    cases = {
        fifo: "is a FIFO (named pipe), not a regular file",
        Path("/dev/zero"): "is a device, not a regular file",
        deep: "nests arrays and objects more than 100 levels deep",
        _recording(tmp_path / "nan.json", finish, cost="NaN"): "NaN is not a number JSON allows",
        _recording(tmp_path / "inf.json", finish, cost="1e999"): "cost_usd: must be a number",
    }
    for path, expected in cases.items():
        result = autogpt("run", "g", "--llm", f"replay:{path}", env=env, timeout=60)
        line = _one_line_error(result)
        assert f"recording {path} " in line or f"recording {path}:" in line, line
        assert expected in line, line
    assert json.loads(autogpt("sessions", "--json", env=env).stdout or "[]") == []


def test_deeply_nested_tool_arguments_are_told_to_the_model(tmp_path: Path) -> None:
    """A tool call whose arguments nest 10,000 lists deep does not end the session: the
    model is told what was wrong, its next (corrected) call runs, and the session finishes
    with both cycles stored."""
    env = cli_env(tmp_path)
    nested = '{"result": ' + "[" * 10_000 + "]" * 10_000 + "}"
    recording = _recording(
        tmp_path / "nested.json",
        {"name": "finish", "arguments": nested},
        {"name": "finish", "arguments": {"result": "done"}},
    )
    result = autogpt("run", "g", "--llm", f"replay:{recording}", "--no-strict", env=env)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "Session finished after 2 cycle(s): done" in result.stdout
    db = tmp_path / "data" / "sessions.sqlite3"
    with sqlite3.connect(db) as conn:
        (plan,) = conn.execute("SELECT plan FROM cycles WHERE number = 1").fetchone()
    assert "nested more than 64 levels deep" in json.loads(plan)["error"]
