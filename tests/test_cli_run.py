"""``autogpt run`` as a process: the demo, kill -9 and resume, Ctrl-C."""

from __future__ import annotations

import json
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

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
            return conn.execute(
                "SELECT session_id, number, result FROM cycles ORDER BY number"
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
    from autogpt_core._storage import Store

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
