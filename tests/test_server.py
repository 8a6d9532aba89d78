"""``autogpt serve``: Agent Protocol v1 over a real hypercorn server, the replay model."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from autogpt_core.cli._cli_run import DEMO_GOAL, demo_recording

from .clirun import cli_env
from .distfactory import write_plugin
from .serverkit import API, TOKENS, WRITE_AND_FINISH, conforms, recording, running, sse_events


def _step(client: httpx.Client, task_id: str, body: dict | None = None) -> dict:
    response = client.post(f"{API}/{task_id}/steps", json=body or {})
    assert response.status_code == 200, response.text
    step = response.json()
    conforms("Step", step)
    return step


def _task(client: httpx.Client, goal: str, **extra: object) -> dict:
    response = client.post(API, json={"input": goal, "additional_input": extra})
    assert response.status_code == 200, response.text
    task = response.json()
    conforms("Task", task)
    return task


def test_steps_run_the_demo_to_is_last_and_its_artifact_downloads(tmp_path: Path) -> None:
    """Each POST …/steps runs one cycle; the fourth (finish) is the last; the file the agent
    wrote is an artifact of the step that wrote it, and downloads byte for byte."""
    with running(tmp_path, demo_recording()) as server, server.client() as client:
        task = _task(client, DEMO_GOAL)
        assert task["status"] == "created"
        assert task["artifacts"] == []
        steps = [_step(client, task["task_id"]) for _ in range(4)]
        assert [s["step_id"] for s in steps] == ["1", "2", "3", "4"]
        assert [s["name"] for s in steps] == ["write_file", "remember", "recall", "finish"]
        assert [s["is_last"] for s in steps] == [False, False, False, True]
        assert all(s["status"] == "completed" for s in steps)
        assert "Wrote 70 characters to haiku.txt" in steps[0]["output"]
        assert [a["file_name"] for a in steps[0]["artifacts"]] == ["haiku.txt"]

        ended = client.post(f"{API}/{task['task_id']}/steps", json={})
        assert ended.status_code == 409
        assert "has ended" in ended.json()["message"]

        listed = client.get(f"{API}/{task['task_id']}/steps", params={"page_size": 3})
        conforms("TaskStepsListResponse", listed.json())
        assert [s["step_id"] for s in listed.json()["steps"]] == ["1", "2", "3"]
        assert listed.json()["pagination"] == {
            "total_items": 4,
            "total_pages": 2,
            "current_page": 1,
            "page_size": 3,
        }
        one = client.get(f"{API}/{task['task_id']}/steps/4").json()
        conforms("Step", one)
        assert one["is_last"] is True

        final = client.get(f"{API}/{task['task_id']}").json()
        conforms("Task", final)
        assert final["status"] == "finished"
        assert "haiku" in final["result"]
        artifacts = client.get(f"{API}/{task['task_id']}/artifacts").json()
        conforms("TaskArtifactsListResponse", artifacts)
        (artifact,) = artifacts["artifacts"]
        assert artifact["agent_created"] is True
        download = client.get(f"{API}/{task['task_id']}/artifacts/{artifact['artifact_id']}")
        assert download.status_code == 200
        written = (server.data_dir / "workspaces" / task["task_id"] / "haiku.txt").read_bytes()
        assert download.content == written
        assert b"plugins" in written


@pytest.mark.parametrize(("answer", "written"), [("approve", True), ("deny", False)])
def test_a_step_that_needs_consent_says_so_and_the_next_input_answers(
    tmp_path: Path, answer: str, written: bool
) -> None:
    """Without fs.write granted, writing a file waits for consent: the step says so (status
    running, what it waits for); the next step's input answers it."""
    replay = recording(tmp_path / "r.json", *WRITE_AND_FINISH)
    with running(tmp_path, replay, grant=["fs.read"]) as server, server.client() as client:
        task_id = _task(client, "write out.txt")["task_id"]
        waiting = _step(client, task_id)
        assert waiting["status"] == "running"
        assert waiting["is_last"] is False
        assert waiting["step_id"] == "1"
        asked = waiting["additional_output"]["waiting_for"]
        assert asked["kind"] == "confirmation"
        assert asked["command"] == "write_file"
        assert asked["missing_permissions"] == ["fs.write"]
        assert "approve" in waiting["output"]
        assert client.get(f"{API}/{task_id}").json()["status"] == "waiting"

        bad = client.post(f"{API}/{task_id}/steps", json={"input": "perhaps"})
        assert bad.status_code == 422
        assert "'approve', 'always' or 'deny'" in bad.json()["message"]

        done = _step(client, task_id, {"input": answer})
        assert done["step_id"] == "1"
        assert done["status"] == "completed"
        assert done["additional_output"]["result"]["ok"] is written
        out = server.data_dir / "workspaces" / task_id / "out.txt"
        assert out.exists() is written
        last = _step(client, task_id)
        assert last["is_last"] is True
        assert last["name"] == "finish"


def test_autonomous_task_streams_events_and_takes_an_approval_over_http(tmp_path: Path) -> None:
    """An autonomous task runs on its own; its events stream as SSE; the consent it needs
    appears as confirmation_needed and is approved over HTTP; the stream ends with
    finished. A second watcher resuming from Last-Event-ID gets exactly the rest."""
    replay = recording(tmp_path / "r.json", *WRITE_AND_FINISH)
    with running(tmp_path, replay, grant=["fs.read"]) as server, server.client() as client:
        task_id = _task(client, "write out.txt", autonomous=True)["task_id"]
        seen = []
        with client.stream("GET", f"{API}/{task_id}/events") as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            for event_id, kind, data in sse_events(stream):
                seen.append((event_id, kind, data))
                if kind == "confirmation_needed":
                    pending = client.get(f"{API}/{task_id}/confirmations").json()["pending"]
                    assert [p["id"] for p in pending] == [data["id"]]
                    assert data["command"] == "write_file"
                    answered = client.post(
                        f"{API}/{task_id}/confirmations/{data['id']}", json={"decision": "approve"}
                    )
                    assert answered.status_code == 200, answered.text
        kinds = [kind for _, kind, _ in seen]
        assert kinds[0] == "session_start"
        assert kinds[-1] == "finished"
        assert kinds.index("confirmation_needed") < kinds.index("confirmation")
        assert {"plan", "command", "result"} <= set(kinds)
        assert seen[-1][2]["status"] == "finished"
        assert (server.data_dir / "workspaces" / task_id / "out.txt").exists()
        stored = [(int(i), kind) for i, kind, _ in seen if i is not None]
        assert [i for i, _ in stored] == sorted({i for i, _ in stored})

        middle = stored[len(stored) // 2][0]
        with client.stream(
            "GET", f"{API}/{task_id}/events", headers={"Last-Event-ID": str(middle)}
        ) as again:
            rest = [(int(i), kind) for i, kind, _ in sse_events(again) if i is not None]
        assert rest == [(i, kind) for i, kind in stored if i > middle]


def test_tokens_are_needed_and_tasks_are_their_owners(tmp_path: Path) -> None:
    with running(tmp_path, demo_recording()) as server, server.client() as alice:
        task_id = _task(alice, DEMO_GOAL)["task_id"]
        with server.client(None) as nobody:
            missing = nobody.get(API)
            assert missing.status_code == 401
            assert missing.headers["www-authenticate"].startswith("Bearer")
            assert "bearer token" in missing.json()["message"]
            wrong = nobody.get(API, headers={"Authorization": "Bearer not-a-token-at-all-x"})
            assert wrong.status_code == 401
            assert nobody.get(f"{API}/{task_id}/events").status_code == 401
            # Two Authorization headers are refused, even with alice's first: a proxy in
            # front could have read the other one.
            alice_token = f"Bearer {TOKENS['alice']}"
            for pair in ((alice_token, "Bearer nope"), ("Bearer nope", alice_token)):
                doubled = nobody.get(API, headers=[("Authorization", p) for p in pair])
                assert doubled.status_code == 401
            # The console page itself holds no data: it loads without a token.
            page = nobody.get("/")
            assert page.status_code == 200
            assert "text/html" in page.headers["content-type"]
            assert "script-src 'self'" in page.headers["content-security-policy"]
        with server.client("bob") as bob:
            for method, path in [
                ("GET", f"{API}/{task_id}"),
                ("POST", f"{API}/{task_id}/steps"),
                ("GET", f"{API}/{task_id}/steps"),
                ("GET", f"{API}/{task_id}/artifacts"),
                ("GET", f"{API}/{task_id}/events"),
                ("POST", f"{API}/{task_id}/run"),
            ]:
                response = bob.request(method, path, json={} if method == "POST" else None)
                assert response.status_code == 404, (method, path)
                assert response.json() == {"message": f"no task with id {task_id!r}"}
            assert bob.get(API).json()["tasks"] == []
        assert [t["task_id"] for t in alice.get(API).json()["tasks"]] == [task_id]


def test_bad_requests_get_a_message_naming_what_is_wrong(tmp_path: Path) -> None:
    with (
        running(tmp_path, demo_recording(), body_bytes=4096, upload_bytes=2048) as server,
        server.client() as client,
    ):
        task_id = _task(client, DEMO_GOAL)["task_id"]
        cases = [
            (client.post(API, content=b"{not json"), 422, "not valid JSON"),
            (client.post(API, json=[1, 2]), 422, "must be a JSON object"),
            (client.post(API, json={"input": 7}), 422, "input: must be a string"),
            (client.post(API, json={}), 422, "input: the task's goal is missing"),
            (
                client.post(API, json={"input": "x", "additional_input": []}),
                422,
                "additional_input: must be an object",
            ),
            (
                client.post(API, json={"input": "x", "additional_input": {"autonomous": "yes"}}),
                422,
                "additional_input.autonomous",
            ),
            (client.get(API, params={"page_size": 0}), 422, "page_size"),
            (client.get(API, params={"current_page": "x"}), 422, "current_page"),
            (client.post(API, json={"input": "x" * 5000}), 413, "at most 4096 bytes"),
            (client.get(f"{API}/nope"), 404, "no task with id 'nope'"),
            (client.get(f"{API}/{task_id}/steps/9"), 404, "no step with id '9'"),
            (client.get(f"{API}/{task_id}/artifacts/x"), 404, "no artifact with id 'x'"),
            (client.get("/ap/v1/elsewhere"), 404, "no such endpoint"),
            (client.delete(f"{API}/{task_id}"), 405, "method not allowed"),
            (
                client.post(f"{API}/{task_id}/artifacts", files={"file": ("a.txt", b"x" * 4000)}),
                413,
                "an upload may be at most 2048 bytes",
            ),
            (client.post(f"{API}/{task_id}/artifacts", json={}), 422, "multipart/form-data"),
            (client.post(f"{API}/{task_id}/cancel"), 409, "is not running"),
        ]
        for response, status, message in cases:
            assert response.status_code == status, (message, response.text)
            assert message in response.json()["message"], response.json()


def test_uploads_land_in_the_workspace_and_traversal_is_refused(tmp_path: Path) -> None:
    with running(tmp_path, demo_recording()) as server, server.client() as client:
        task_id = _task(client, DEMO_GOAL)["task_id"]
        workspace = server.data_dir / "workspaces" / task_id
        url = f"{API}/{task_id}/artifacts"
        made = client.post(
            url, files={"file": ("data.csv", b"a,b\n1,2\n")}, data={"relative_path": "in/put"}
        )
        assert made.status_code == 200, made.text
        artifact = made.json()
        conforms("Artifact", artifact)
        assert artifact == {
            "artifact_id": artifact["artifact_id"],
            "agent_created": False,
            "file_name": "data.csv",
            "relative_path": "in/put",
        }
        assert (workspace / "in" / "put" / "data.csv").read_bytes() == b"a,b\n1,2\n"
        got = client.get(f"{url}/{artifact['artifact_id']}")
        assert got.content == b"a,b\n1,2\n"
        assert 'filename="data.csv"' in got.headers["content-disposition"]

        outside = tmp_path / "outside"
        outside.mkdir()
        (workspace / "link").symlink_to(outside)
        for name, directory in [
            ("x.txt", "../.."),
            ("x.txt", "/etc"),
            ("x.txt", "link"),
            ("../x.txt", ""),
            ("..", ""),
            ("a/../../x.txt", "in"),
            ("..\\x.txt", ""),
        ]:
            response = client.post(
                url, files={"file": (name, b"nope")}, data={"relative_path": directory}
            )
            assert response.status_code == 422, (name, directory, response.text)
            assert "message" in response.json()
        assert list(outside.iterdir()) == []
        assert not (tmp_path / "x.txt").exists()
        listed = client.get(url).json()["artifacts"]
        assert [a["file_name"] for a in listed] == ["data.csv"]


def test_past_max_sessions_new_work_gets_503_with_retry_after(tmp_path: Path) -> None:
    replay = recording(tmp_path / "r.json", *WRITE_AND_FINISH)
    with (
        running(tmp_path, replay, grant=["fs.read"], max_sessions=1) as server,
        server.client() as client,
    ):
        first = _task(client, "write out.txt", autonomous=True)["task_id"]
        with client.stream("GET", f"{API}/{first}/events") as stream:
            for _ in sse_events(stream, until="confirmation_needed"):
                pass
        refused = client.post(API, json={"input": "more", "additional_input": {"autonomous": True}})
        assert refused.status_code == 503
        assert int(refused.headers["retry-after"]) > 0
        stepped = _task(client, "step me")["task_id"]
        busy = client.post(f"{API}/{stepped}/steps", json={})
        assert busy.status_code == 503
        assert "--max-sessions" in busy.json()["message"]
        cancelled = client.post(f"{API}/{first}/cancel")
        assert cancelled.status_code == 200
        assert cancelled.json()["status"] == "interrupted"
        assert client.post(f"{API}/{stepped}/steps", json={}).status_code == 200


def test_a_restarted_server_lists_the_same_tasks_and_continues_them(tmp_path: Path) -> None:
    with running(tmp_path, demo_recording()) as server, server.client() as client:
        task_id = _task(client, DEMO_GOAL)["task_id"]
        assert _step(client, task_id)["step_id"] == "1"
        assert _step(client, task_id)["step_id"] == "2"
        upload = client.post(f"{API}/{task_id}/artifacts", files={"file": ("n.txt", b"kept")})
        assert upload.status_code == 200
    with running(tmp_path, demo_recording()) as server, server.client() as client:
        (task,) = client.get(API).json()["tasks"]
        assert task["task_id"] == task_id
        assert task["status"] == "interrupted"
        assert sorted(a["file_name"] for a in task["artifacts"]) == ["haiku.txt", "n.txt"]
        assert [s["step_id"] for s in client.get(f"{API}/{task_id}/steps").json()["steps"]] == [
            "1",
            "2",
        ]
        rest = [_step(client, task_id) for _ in range(2)]
        assert [(s["step_id"], s["is_last"]) for s in rest] == [("3", False), ("4", True)]
        events = client.get(f"{API}/{task_id}/events")
        kinds = [line[7:] for line in events.text.splitlines() if line.startswith("event: ")]
        assert kinds.count("session_start") == 2
        assert kinds[-1] == "finished"
        # Each command ran once, across both servers.
        commands = [
            json.loads(line[6:])["command"]
            for block in events.text.split("\n\n")
            if "event: command" in block
            for line in block.splitlines()
            if line.startswith("data: ")
        ]
        assert commands == ["write_file", "remember", "recall", "finish"]


def test_fifty_clients_step_fifty_tasks_at_once_and_nothing_crosses(tmp_path: Path) -> None:
    """50 clients, each stepping its own task to the end at the same time: every task
    completes, and each one's steps and events are its own."""
    with running(tmp_path, demo_recording()) as server, server.client() as client:
        goals = [f"{DEMO_GOAL} (task {i})" for i in range(50)]
        ids = [_task(client, goal)["task_id"] for goal in goals]

        def drive(task_id: str) -> list[dict]:
            with server.client() as own:
                steps = []
                while not (steps and steps[-1]["is_last"]):
                    steps.append(_step(own, task_id))
                    assert len(steps) <= 4
                return steps

        with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
            results = list(pool.map(drive, ids))
        for task_id, goal, steps in zip(ids, goals, results, strict=True):
            assert {s["task_id"] for s in steps} == {task_id}
            assert [s["step_id"] for s in steps] == ["1", "2", "3", "4"]
            events = client.get(f"{API}/{task_id}/events").text
            starts = [
                json.loads(line[6:])
                for block in events.split("\n\n")
                if "event: session_start" in block
                for line in block.splitlines()
                if line.startswith("data: ")
            ]
            assert [s["goal"] for s in starts] == [goal]
            assert starts[0]["workspace"].endswith(task_id)
            for other in ids:
                if other != task_id:
                    assert other not in events
            task = client.get(f"{API}/{task_id}").json()
            assert task["status"] == "finished"
            assert [a["file_name"] for a in task["artifacts"]] == ["haiku.txt"]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
_BODIES = st.one_of(
    _JSON,
    st.fixed_dictionaries(
        {},
        optional={
            "input": st.none() | st.text(max_size=30) | _JSON,
            "additional_input": st.none()
            | st.fixed_dictionaries(
                {}, optional={"continuous": st.booleans() | _JSON, "other": _JSON}
            )
            | _JSON,
        },
    ),
)


def _valid_task_request(body: object) -> bool:
    if not isinstance(body, dict):
        return False
    goal = body.get("input")
    extra = body.get("additional_input")
    if not (isinstance(goal, str) and goal.strip()):
        return False
    if extra is None:
        return True
    if not isinstance(extra, dict):
        return False
    return all(isinstance(extra.get(k, False), bool) for k in ("autonomous", "continuous"))


def test_any_json_body_gets_a_task_or_a_422_naming_the_problem(tmp_path: Path) -> None:
    """Whatever JSON a client sends to create a task: a valid request makes a task that
    conforms to the spec; anything else is a 422 with a message; never a 500."""
    with running(tmp_path, demo_recording()) as server, server.client() as client:

        @given(body=_BODIES)
        @settings(max_examples=150)
        def check(body: object) -> None:
            response = client.post(API, content=json.dumps(body))
            if _valid_task_request(body):
                assert response.status_code == 200, (body, response.text)
                conforms("Task", response.json())
                assert response.json()["input"] == body["input"]  # type: ignore[index]
            else:
                assert response.status_code == 422, (body, response.text)
                assert set(response.json()) == {"message"}
                assert response.json()["message"]

        check()


def test_any_step_input_is_answered_or_refused_by_name(tmp_path: Path) -> None:
    """Whatever a client sends as a step's body to a task waiting for consent: a 422 that
    says what is wanted, or an answer; the task keeps waiting until it is answered."""
    replay = recording(tmp_path / "r.json", *WRITE_AND_FINISH)
    with running(tmp_path, replay, grant=["fs.read"]) as server, server.client() as client:
        task_id = _task(client, "write out.txt")["task_id"]
        assert _step(client, task_id)["status"] == "running"
        answers = {"approve", "approved", "yes", "y", "allow", "ok", "always", "deny"}
        answers |= {"denied", "no", "n", "refuse", "reject"}

        @given(body=_BODIES)
        @settings(max_examples=100)
        def check(body: object) -> None:
            text = body.get("input") if isinstance(body, dict) else None
            extra = body.get("additional_input") if isinstance(body, dict) else None
            shaped = isinstance(body, dict) and (text is None or isinstance(text, str))
            shaped = shaped and (extra is None or isinstance(extra, dict))
            assume(not (shaped and isinstance(text, str) and text.strip().lower() in answers))
            response = client.post(f"{API}/{task_id}/steps", content=json.dumps(body))
            assert response.status_code == 422, (body, response.text)
            assert set(response.json()) == {"message"}
            assert response.json()["message"]

        check()
        assert client.get(f"{API}/{task_id}").json()["status"] == "waiting"
        done = _step(client, task_id, {"input": " Approve "})
        assert done["additional_output"]["result"]["ok"] is True


def _serve_process(tmp_path: Path, replay: Path) -> tuple[subprocess.Popen[str], str]:
    env = cli_env(tmp_path, AUTOGPT_TOKEN=TOKENS["alice"])
    (tmp_path / "config.yaml").write_text(
        "plugins: {settings: {llm_replay: {strict: false}}}\n", "utf-8"
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "autogpt_core", "serve", "--port", "0", "--llm", f"replay:{replay}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if "listening on" in line:
            return process, line.split("listening on ")[1].split()[0]
    raise AssertionError(f"autogpt serve did not start: {process.stderr.read()}")  # type: ignore[union-attr]


def test_sigterm_during_steps_loses_nothing_and_runs_no_command_twice(tmp_path: Path) -> None:
    """SIGTERM while 10 clients step 10 tasks: the server stops with exit 0; a new server on
    the same data continues every task to its end; each task's file has every line once."""
    lines = [("append_file", {"path": "log.txt", "content": f"line {i}\n"}) for i in range(8)]
    replay = recording(tmp_path / "r.json", *lines, ("finish", {"result": "done"}))
    headers = {"Authorization": f"Bearer {TOKENS['alice']}"}
    process, url = _serve_process(tmp_path, replay)
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            ids = [_task(client, f"log {i}")["task_id"] for i in range(10)]
            stepped = threading.Semaphore(0)

            def drive(task_id: str) -> None:
                with httpx.Client(base_url=url, headers=headers, timeout=60) as own:
                    with contextlib.suppress(httpx.HTTPError):
                        while own.post(f"{API}/{task_id}/steps", json={}).status_code == 200:
                            stepped.release()

            workers = [threading.Thread(target=drive, args=(i,)) for i in ids]
            for worker in workers:
                worker.start()
            for _ in range(15):
                assert stepped.acquire(timeout=60)
            process.send_signal(signal.SIGTERM)
            for worker in workers:
                worker.join(60)
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        assert "stopped; every task was saved" in err
        assert "Traceback" not in err
    finally:
        process.kill()
        process.wait()

    process, url = _serve_process(tmp_path, replay)
    try:
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            for task_id in ids:
                steps = []
                while not (steps and steps[-1]["is_last"]):
                    steps.append(_step(client, task_id))
                    assert len(steps) <= 9
                listed = client.get(f"{API}/{task_id}/steps", params={"page_size": 20}).json()
                assert [s["step_id"] for s in listed["steps"]] == [str(n) for n in range(1, 10)]
                log = (tmp_path / "data" / "workspaces" / task_id / "log.txt").read_text()
                assert log == "".join(f"line {i}\n" for i in range(8))
    finally:
        process.terminate()
        process.communicate(timeout=60)


def test_an_interrupted_autonomous_task_shows_as_such_and_runs_again(tmp_path: Path) -> None:
    """An autonomous task waiting for an approval when the server stops is saved before
    the command it waits for runs; the next server shows it interrupted, and …/run
    continues it from its last completed cycle."""
    replay = recording(
        tmp_path / "r.json",
        ("read_file", {"path": "missing.txt"}),
        *WRITE_AND_FINISH,
    )
    with running(tmp_path, replay, grant=["fs.read"]) as server, server.client() as client:
        task_id = _task(client, "write out.txt", autonomous=True)["task_id"]
        with client.stream("GET", f"{API}/{task_id}/events") as stream:
            for _ in sse_events(stream, until="confirmation_needed"):
                pass
        assert client.get(f"{API}/{task_id}").json()["status"] == "waiting"
    with running(tmp_path, replay, grant=["fs.read"]) as server, server.client() as client:
        task = client.get(f"{API}/{task_id}").json()
        assert task["status"] == "interrupted"
        assert [s["step_id"] for s in client.get(f"{API}/{task_id}/steps").json()["steps"]] == ["1"]
        assert client.post(f"{API}/{task_id}/run").json()["status"] in ("running", "waiting")
        assert client.post(f"{API}/{task_id}/run").status_code == 409
        with client.stream("GET", f"{API}/{task_id}/events") as stream:
            for _, kind, data in sse_events(stream):
                if kind == "confirmation_needed":
                    client.post(
                        f"{API}/{task_id}/confirmations/{data['id']}", json={"decision": "approve"}
                    )
        final = client.get(f"{API}/{task_id}").json()
        assert final["status"] == "finished"
        assert (server.data_dir / "workspaces" / task_id / "out.txt").exists()
        steps = client.get(f"{API}/{task_id}/steps").json()["steps"]
        assert [(s["step_id"], s["name"]) for s in steps] == [
            ("1", "read_file"),
            ("2", "write_file"),
            ("3", "finish"),
        ]


def _start(tmp_path: Path, *args: str) -> tuple[subprocess.Popen[str], list[str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "autogpt_core", "serve", "--port", "0", *args],
        env=cli_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("autogpt serve: tokens from") or "'cat " in line:
            return process, lines
    raise AssertionError(f"autogpt serve did not start: {process.stderr.read()}")  # type: ignore[union-attr]


def test_serve_demo_makes_a_token_once_and_runs_the_demo_offline(tmp_path: Path) -> None:
    """A new user's first start: a token is made, stored for its owner only and printed
    once; with it, the demo task runs to its end over HTTP."""
    process, lines = _start(tmp_path, "--demo")
    try:
        url = lines[0].split("listening on ")[1].split()[0]
        token = lines[2].strip()
        token_file = tmp_path / "data" / "server-token"
        assert token_file.read_text().strip() == token
        assert token_file.stat().st_mode & 0o077 == 0
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            task_id = _task(client, "anything: the demo plays its recording")["task_id"]
            steps = [_step(client, task_id) for _ in range(4)]
            assert steps[-1]["is_last"] is True
    finally:
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert token not in out + err
    process, lines = _start(tmp_path, "--demo")
    process.terminate()
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert token not in "\n".join(lines) + out + err
    assert f"tokens from {token_file}" in "\n".join(lines)


SLOW_START = """
from pathlib import Path
import os
import trio
from hookspecs import hookimpl

@hookimpl
async def autogpt_startup(runtime):
    Path(os.environ["MARKS"], "startup-began").touch()
    await trio.sleep(600)
    Path(os.environ["MARKS"], "startup-ended").touch()

@hookimpl
def autogpt_shutdown(runtime):
    Path(os.environ["MARKS"], "shutdown").touch()
"""


@pytest.mark.parametrize("command", ["serve", "mcp"])
def test_a_signal_while_the_server_starts_stops_it_there(tmp_path: Path, command: str) -> None:
    """Ctrl-C while a plugin is still starting (a slow autogpt_startup) stops the server
    there, cleanly: the start is cancelled, plugins are shut down, nothing is served, exit
    0. It used to wait for the start to end (the hook's deadline) and then stop."""
    site, marks = tmp_path / "site", tmp_path / "marks"
    marks.mkdir()
    write_plugin(site, "slowstart", SLOW_START)
    args = ["--port", "0"] if command == "serve" else ["--http", "--port", "0"]
    process = subprocess.Popen(
        [sys.executable, "-m", "autogpt_core", command, *args],
        env={**cli_env(tmp_path, site=site), "MARKS": str(marks)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(600):
            if (marks / "startup-began").exists() or process.poll() is not None:
                break
            time.sleep(0.1)
        assert (marks / "startup-began").exists(), process.communicate(timeout=60)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert f"autogpt {command}: stopping before the server started" in err
    assert f"autogpt {command}: stopped before it started" in err
    assert "listening on" not in out
    assert "serving MCP" not in out
    assert (marks / "shutdown").exists()
    assert not (marks / "startup-ended").exists()


def test_many_watchers_of_one_task_each_get_every_event(tmp_path: Path) -> None:
    """Eight clients watch one autonomous task from before it starts: each gets the same
    events, in the same order, ending with finished."""
    with running(tmp_path, demo_recording()) as server, server.client() as client:
        task_id = _task(client, DEMO_GOAL)["task_id"]
        connected = threading.Barrier(9)

        def watch() -> list[tuple[str | None, str]]:
            with server.client() as own, own.stream("GET", f"{API}/{task_id}/events") as stream:
                connected.wait(30)
                return [(i, kind) for i, kind, _ in sse_events(stream)]

        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            futures = [pool.submit(watch) for _ in range(8)]
            connected.wait(30)
            assert client.post(f"{API}/{task_id}/run").status_code == 200
            seen = [f.result(timeout=60) for f in futures]
        assert all(s == seen[0] for s in seen)
        kinds = [kind for _, kind in seen[0]]
        assert kinds[0] == "session_start"
        assert kinds[-1] == "finished"
        assert kinds.count("result") == 4


def test_concurrent_looks_record_a_new_file_once(tmp_path: Path) -> None:
    """Eight clients listing a task's artifacts at once, just after the agent made files:
    each file is one artifact, the same one for all."""
    with running(tmp_path, demo_recording()) as server, server.client() as client:
        ids = [_task(client, DEMO_GOAL)["task_id"] for _ in range(5)]
        for task_id in ids:
            for name in ("a.txt", "b.txt"):
                (server.data_dir / "workspaces" / task_id / name).write_text(name)

        def look(task_id: str) -> list[str]:
            with server.client() as own:
                found = own.get(f"{API}/{task_id}/artifacts").json()["artifacts"]
                return sorted(a["artifact_id"] for a in found)

        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            for task_id in ids:
                seen = list(pool.map(look, [task_id] * 8))
                assert all(len(s) == 2 for s in seen), seen
                assert all(s == seen[0] for s in seen)


class _FakeHandle:
    """What serve_until_signalled needs of a started server."""

    def __init__(self) -> None:
        self.stopping = trio.Event()
        self.runtime = self
        self.stopped_gracefully = False

    def warnings(self) -> list[str]:
        return []

    def stop(self) -> None:
        self.stopped_gracefully = True
        self.stopping.set()


def test_a_signal_as_the_server_starts_stops_it_gracefully(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A signal that arrives as the start completes either comes before the server serves
    (the start is cancelled) or after (the server is stopped the graceful way), never in
    between: a server that serves is never cancelled as if it were still starting. The
    signal lands 0-2 checkpoints before the start completes, many times, since trio runs
    the tasks woken together in a random order."""
    import os

    from autogpt_core.cli._cli_serve import serve_until_signalled

    for attempt in range(30):
        handle = _FakeHandle()
        served = False

        async def start(
            task_status: Any, handle: _FakeHandle = handle, checkpoints: int = attempt % 3
        ) -> None:
            nonlocal served
            os.kill(os.getpid(), signal.SIGINT)  # delivered at a coming checkpoint
            for _ in range(checkpoints):
                await trio.lowlevel.checkpoint()
            task_status.started(handle)
            served = True
            await handle.stopping.wait()  # serves until stopped, then drains

        started = serve_until_signalled(start, lambda _: None, "autogpt serve", "stopping")
        err = capsys.readouterr().err
        assert started is served
        if served:
            assert handle.stopped_gracefully, attempt
            assert "before the server started" not in err
        else:
            assert "before the server started" in err


@pytest.mark.parametrize("command", [["serve"], ["mcp", "--http"]])
def test_a_port_in_use_is_one_clear_line(tmp_path: Path, command: list[str]) -> None:
    """A port something else listens on: exit 2 with the address, the reason and the fix,
    not a traceback of exception groups."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "autogpt_core", *command, "--port", str(port)],
            env={**cli_env(tmp_path), "AUTOGPT_TOKEN": "t" * 32},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"autogpt: error: Cannot listen on 127.0.0.1:{port}: Address already in use. Fix: "
        "choose another --port (0 takes a free one), or stop what listens there; for "
        "--host, give an address of this machine."
    ]
