"""Several ``autogpt serve`` processes on one PostgreSQL store: any process answers any
task's requests (a real PostgreSQL server, real server processes)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from autogpt_core.cli._cli_run import DEMO_GOAL, demo_recording
from autogpt_core.store._postgres import PostgresStore
from hookspecs import Event, EventKind

from .clirun import cli_env
from .serverkit import API, TOKENS, running, sse_events

pytestmark = pytest.mark.slow

#: The server processes behind the clients ``_servers`` yields (for a test to kill one).
_PROCESSES: dict[int, list[subprocess.Popen[str]]] = {}


@contextlib.contextmanager
def _servers(
    tmp_path: Path, url: str, count: int = 2, extra: str = ""
) -> Iterator[list[httpx.Client]]:
    """``count`` servers on the store at ``url``, sharing one data directory (their
    workspaces), each with the same token; a client for each."""
    (tmp_path / "config.yaml").write_text(
        f"store: '{url}'\nplugins: {{settings: {{llm_replay: {{strict: false}}}}}}\n{extra}",
        "utf-8",
    )
    env = cli_env(tmp_path, AUTOGPT_TOKEN=TOKENS["alice"])
    processes = []
    clients = []
    try:
        for _ in range(count):
            process = subprocess.Popen(
                [sys.executable, "-m", "autogpt_core", "serve", "--port", "0", "--demo"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            processes.append(process)
            assert process.stdout is not None
            for line in process.stdout:
                if "listening on" in line:
                    base = line.split("listening on ")[1].split()[0]
                    break
            else:
                raise AssertionError(process.stderr.read())  # type: ignore[union-attr]
            headers = {"Authorization": f"Bearer {TOKENS['alice']}"}
            clients.append(httpx.Client(base_url=base, headers=headers, timeout=60))
        _PROCESSES[id(clients)] = processes
        yield clients
    finally:
        _PROCESSES.pop(id(clients), None)
        for client in clients:
            client.close()
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            _, err = process.communicate(timeout=60)
            if process.returncode == -signal.SIGKILL:
                continue  # killed by the test
            assert process.returncode == 0, err
            assert "Traceback" not in err


def test_a_task_created_on_one_server_is_stepped_on_either(
    tmp_path: Path, postgres_url: str
) -> None:
    with _servers(tmp_path, postgres_url) as (one, two):
        task_id = one.post(API, json={"input": DEMO_GOAL}).json()["task_id"]
        assert two.get(f"{API}/{task_id}").json()["status"] == "created"
        steps = []
        for client in (two, one, two, one):
            response = client.post(f"{API}/{task_id}/steps", json={})
            assert response.status_code == 200, response.text
            steps.append(response.json())
        assert [(s["step_id"], s["name"], s["is_last"]) for s in steps] == [
            ("1", "write_file", False),
            ("2", "remember", False),
            ("3", "recall", False),
            ("4", "finish", True),
        ]
        for client in (one, two):
            task = client.get(f"{API}/{task_id}").json()
            assert task["status"] == "finished"
            assert [a["file_name"] for a in task["artifacts"]] == ["haiku.txt"]
            listed = client.get(f"{API}/{task_id}/steps").json()["steps"]
            assert [s["step_id"] for s in listed] == ["1", "2", "3", "4"]


def test_events_of_a_task_run_by_one_server_reach_watchers_of_the_other(
    tmp_path: Path, postgres_url: str
) -> None:
    with _servers(tmp_path, postgres_url) as (one, two):
        task_id = one.post(API, json={"input": DEMO_GOAL}).json()["task_id"]
        with two.stream("GET", f"{API}/{task_id}/events") as stream:
            assert one.post(f"{API}/{task_id}/run").status_code == 200
            seen = [(i, kind) for i, kind, _ in sse_events(stream)]
        kinds = [kind for _, kind in seen]
        assert kinds[0] == "session_start"
        assert kinds[-1] == "finished"
        assert kinds.count("result") == 4
        ids = [int(i) for i, _ in seen if i is not None]
        assert ids == sorted(set(ids))
        busy = two.post(f"{API}/{task_id}/steps", json={})
        assert busy.status_code == 409  # it has ended, wherever it ran


def test_a_task_another_server_runs_is_refused_a_step_and_answered_through_either(
    tmp_path: Path, postgres_url: str
) -> None:
    """While one server runs a task (here: waiting for approvals), a step sent to the
    other is refused with 409 saying so; but the other server shows what it waits on (in
    its event stream and at …/confirmations) and takes the answers, relayed to the one
    that runs it: the task finishes with every approval given through the other."""
    extra = "permissions: {grant: [fs.read]}\n"
    with _servers(tmp_path, postgres_url, extra=extra) as (one, two):
        task = one.post(API, json={"input": DEMO_GOAL, "additional_input": {"autonomous": True}})
        task_id = task.json()["task_id"]
        answered_ids = []
        with two.stream("GET", f"{API}/{task_id}/events") as stream:
            for _, kind, data in sse_events(stream):
                if kind != "confirmation_needed":
                    continue
                busy = two.post(f"{API}/{task_id}/steps", json={})
                assert busy.status_code == 409
                assert "being run by another server process" in busy.json()["message"]
                assert busy.headers["retry-after"] == "1"
                listed = two.get(f"{API}/{task_id}/confirmations").json()["pending"]
                assert [p["id"] for p in listed] == [data["id"]]
                assert listed[0]["command"] == data["command"]
                wrong = two.post(f"{API}/{task_id}/confirmations/nope", json={"decision": "yes"})
                assert wrong.status_code == 404
                answered = two.post(
                    f"{API}/{task_id}/confirmations/{data['id']}", json={"decision": "approve"}
                )
                assert answered.status_code == 200, answered.text
                assert answered.json()["answered"]["id"] == data["id"]
                again = two.post(
                    f"{API}/{task_id}/confirmations/{data['id']}", json={"decision": "approve"}
                )
                assert again.status_code in (404, 409)
                answered_ids.append(data["id"])
        assert len(answered_ids) >= 1
        assert len(set(answered_ids)) == len(answered_ids)
        assert one.get(f"{API}/{task_id}").json()["status"] == "finished"
        assert two.get(f"{API}/{task_id}/confirmations").json() == {"pending": []}


def test_kill_9_a_server_and_the_other_finishes_its_autonomous_tasks(
    tmp_path: Path, postgres_url: str
) -> None:
    """Five autonomous tasks run on one server, each waiting for an approval (its command
    not run yet); that server is killed with SIGKILL. The other takes them up (their lease
    binds no more: its process is gone), asks again, and with the approvals given there
    every task finishes: every cycle recorded once, every command run once."""
    extra = "permissions: {grant: [fs.read]}\n"
    with _servers(tmp_path, postgres_url, extra=extra) as clients:
        one, two = clients
        body = {"input": DEMO_GOAL, "additional_input": {"autonomous": True}}
        ids = [one.post(API, json=body).json()["task_id"] for _ in range(5)]
        for task_id in ids:
            with one.stream("GET", f"{API}/{task_id}/events") as stream:
                for _ in sse_events(stream, until="confirmation_needed"):
                    pass
        victim = _PROCESSES[id(clients)][0]
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(30)
        for task_id in ids:
            with two.stream("GET", f"{API}/{task_id}/events") as stream:
                for _, kind, data in sse_events(stream):
                    if kind == "confirmation_needed":
                        url = f"{API}/{task_id}/confirmations/{data['id']}"
                        assert two.post(url, json={"decision": "approve"}).status_code == 200
        for task_id in ids:
            task = two.get(f"{API}/{task_id}").json()
            assert task["status"] == "finished", task
            steps = two.get(f"{API}/{task_id}/steps").json()["steps"]
            assert [(s["step_id"], s["name"]) for s in steps] == [
                ("1", "write_file"),
                ("2", "remember"),
                ("3", "recall"),
                ("4", "finish"),
            ]
            events = two.get(f"{API}/{task_id}/events").text
            commands = [line for line in events.splitlines() if line == "event: command"]
            assert len(commands) == 4  # each command ran once, across both servers
            written = tmp_path / "data" / "workspaces" / task_id / "haiku.txt"
            assert written.read_text().count("Small hooks wait in line") == 1


def test_every_step_on_a_shared_store_runs_a_cycle(tmp_path: Path, postgres_url: str) -> None:
    """Twenty clients stepping twenty tasks at once, each step to the other server: every
    step answers with the next cycle (none repeats the last one because its task was
    still parking), and every task ends."""
    import concurrent.futures

    with _servers(tmp_path, postgres_url) as clients:
        ids = [clients[0].post(API, json={"input": DEMO_GOAL}).json()["task_id"] for _ in range(20)]

        def drive(task_id: str) -> list[str]:
            seen = []
            for n in range(4):
                response = clients[n % 2].post(f"{API}/{task_id}/steps", json={})
                assert response.status_code == 200, response.text
                seen.append(response.json()["step_id"])
            return seen

        with concurrent.futures.ThreadPoolExecutor(max_workers=20) as pool:
            results = list(pool.map(drive, ids))
        assert all(r == ["1", "2", "3", "4"] for r in results), results
        assert {clients[1].get(f"{API}/{t}").json()["status"] for t in ids} == {"finished"}


def _eventually(look: Any, what: str) -> None:
    """Wait until ``look()`` is true; fail saying ``what`` did not happen (a hang guard,
    not a measurement)."""
    deadline = time.monotonic() + 60
    while not look():
        assert time.monotonic() < deadline, f"{what} did not happen within a minute"
        time.sleep(0.05)


def test_another_processes_writes_wake_this_servers_streams(
    tmp_path: Path, postgres_url: str
) -> None:
    """A server on PostgreSQL listens for the store's notifications: a write committed by
    another process (here another store on the database) wakes the streams of that task
    in this one. Nothing else in this server could: it runs no such task."""
    with running(tmp_path, demo_recording(), config_text=f"store: '{postgres_url}'\n") as server:
        tasks = server.handle.tasks
        _eventually(lambda: server.call(lambda: tasks.listening), "listening")
        with PostgresStore(postgres_url) as elsewhere:
            session_id = elsewhere.create_session("a goal", tmp_path / "ws").id
            woken = server.call(tasks.notifier.event, session_id)
            assert not woken.is_set()
            elsewhere.append_event(Event(EventKind.MESSAGE, session_id, 0, {"text": "hi"}))
            _eventually(woken.is_set, "the stream's wake-up")
