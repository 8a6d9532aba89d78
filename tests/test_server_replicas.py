"""Several ``autogpt serve`` processes on one PostgreSQL store: any process answers any
task's requests (a real PostgreSQL server, real server processes)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from autogpt_core.cli._cli_run import DEMO_GOAL

from .clirun import cli_env
from .serverkit import API, TOKENS, sse_events

pytestmark = pytest.mark.slow


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
        yield clients
    finally:
        for client in clients:
            client.close()
        for process in processes:
            process.terminate()
        for process in processes:
            _, err = process.communicate(timeout=60)
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


def test_a_task_another_server_runs_is_refused_by_name_and_answered_there(
    tmp_path: Path, postgres_url: str
) -> None:
    """While one server runs a task (here: waiting for an approval), a step sent to the
    other is refused with 409 saying so; once approved where it runs, it finishes."""
    extra = "permissions: {grant: [fs.read]}\n"
    with _servers(tmp_path, postgres_url, extra=extra) as (one, two):
        task = one.post(API, json={"input": DEMO_GOAL, "additional_input": {"autonomous": True}})
        task_id = task.json()["task_id"]
        with one.stream("GET", f"{API}/{task_id}/events") as stream:
            for _, kind, data in sse_events(stream):
                if kind == "confirmation_needed":
                    busy = two.post(f"{API}/{task_id}/steps", json={})
                    assert busy.status_code == 409
                    assert "being run by another server process" in busy.json()["message"]
                    assert busy.headers["retry-after"] == "1"
                    answered = one.post(
                        f"{API}/{task_id}/confirmations/{data['id']}", json={"decision": "always"}
                    )
                    assert answered.status_code == 200
        assert two.get(f"{API}/{task_id}").json()["status"] == "finished"
