"""``autogpt serve``: Agent Protocol v1 over a real hypercorn server, the replay model."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from autogpt_core.cli._cli_run import DEMO_GOAL, demo_recording

from .serverkit import API, WRITE_AND_FINISH, conforms, recording, running, sse_events


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
