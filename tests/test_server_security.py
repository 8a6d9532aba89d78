"""``autogpt serve``'s trust model: where tokens come from, who sees what, what is masked,
and what an unattended task may do."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import trio

from autogpt_core._config import Config
from autogpt_core._errors import ConfigError
from autogpt_core.server._auth import MIN_TOKEN_LENGTH, TOKEN_FILE, load_tokens
from autogpt_core.server._hosts import is_loopback
from autogpt_core.server._serve import ServeOptions, serve
from autogpt_core.server._tasks import Live, Pending, TaskError, Tasks

from .clirun import autogpt, cli_env
from .serverkit import API, WRITE_AND_FINISH, recording, running, sse_events


def test_a_token_file_is_made_once_for_its_owner_only(tmp_path: Path) -> None:
    first = load_tokens({}, tmp_path / "data", environ={})
    path = tmp_path / "data" / TOKEN_FILE
    assert first.created is not None
    assert len(first.created) >= MIN_TOKEN_LENGTH
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert first.name_of(first.created) == "default"
    again = load_tokens({}, tmp_path / "data", environ={})
    assert again.created is None  # printed once, at the first start only
    assert again.name_of(first.created) == "default"
    assert again.name_of(first.created + "x") is None
    assert again.name_of("") is None


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    load_tokens({}, tmp_path, environ={})
    (tmp_path / TOKEN_FILE).chmod(0o644)
    with pytest.raises(ConfigError, match=r"can be read by others .*chmod 600"):
        load_tokens({}, tmp_path, environ={})


def test_configured_tokens_come_from_their_variables_and_win(tmp_path: Path) -> None:
    environ = {"A_TOKEN": "a" * 20, "B_TOKEN": "b" * 20, "AUTOGPT_TOKEN": "c" * 20}
    tokens = load_tokens({"alice": "A_TOKEN", "bob": "B_TOKEN"}, tmp_path, environ=environ)
    assert tokens.name_of("a" * 20) == "alice"
    assert tokens.name_of("b" * 20) == "bob"
    assert tokens.name_of("c" * 20) is None
    assert not (tmp_path / TOKEN_FILE).exists()
    assert repr(tokens).count("a" * 20) == 0  # no token in a repr (or a log of one)
    with pytest.raises(ConfigError, match=r"server\.tokens\.bob reads .*B_TOKEN.* not set"):
        load_tokens({"alice": "A_TOKEN", "bob": "B_TOKEN"}, tmp_path, environ={"A_TOKEN": "a" * 20})
    with pytest.raises(ConfigError, match=r"\$AUTOGPT_TOKEN is 5 characters long, too short"):
        load_tokens({}, tmp_path, environ={"AUTOGPT_TOKEN": "short"})


def test_the_config_names_variables_never_tokens(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        "server: {tokens: {alice: 'sk-not-a-variable-name!'}}\n", "utf-8"
    )
    result = autogpt("config", env=cli_env(tmp_path))
    assert result.returncode == 2
    assert "server.tokens.alice" in result.stderr
    assert "is not the name of an environment variable" in result.stderr


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.9.9.9", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.4", False),
        ("example.org", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


async def test_no_auth_is_refused_off_loopback(tmp_path: Path) -> None:
    config = Config(path=tmp_path / "config.yaml", data_dir=tmp_path / "data")
    with pytest.raises(ConfigError, match="--no-auth .* loopback only"):
        await serve(config, ServeOptions(host="0.0.0.0", port=0, auth=False))
    assert not (tmp_path / "data").exists()


def test_no_auth_on_loopback_serves_without_a_token(tmp_path: Path) -> None:
    with running(tmp_path, recording(tmp_path / "r.json"), auth=False) as server:
        with server.client(None) as client:
            assert client.get(API).status_code == 200
            assert client.post(API, json={"input": "hi"}).status_code == 200


def test_secrets_are_masked_in_responses_and_events(tmp_path: Path) -> None:
    """A secret from the environment, in a goal and in a command's arguments and output,
    reaches no response and no event."""
    secret = "sk-live-0123456789abcdefSECRET"
    os.environ["SERVICE_API_KEY"] = secret
    try:
        replay = recording(
            tmp_path / "r.json",
            ("write_file", {"path": "key.txt", "content": f"key={secret}"}),
            ("read_file", {"path": "key.txt"}),
            ("finish", {"result": f"the key is {secret}"}),
        )
        with running(tmp_path, replay) as server, server.client() as client:
            task = client.post(API, json={"input": f"use {secret}"}).json()
            seen = [str(task)]
            for _ in range(3):
                seen.append(client.post(f"{API}/{task['task_id']}/steps", json={}).text)
            seen.append(client.get(f"{API}/{task['task_id']}/steps").text)
            seen.append(client.get(f"{API}/{task['task_id']}").text)
            seen.append(client.get(f"{API}/{task['task_id']}/events").text)
            joined = "\n".join(seen)
            assert secret not in joined
            assert "***" in joined
    finally:
        del os.environ["SERVICE_API_KEY"]


def test_an_autonomous_confirmation_nobody_answers_is_refused(tmp_path: Path) -> None:
    replay = recording(tmp_path / "r.json", *WRITE_AND_FINISH)
    with (
        running(tmp_path, replay, grant=["fs.read"], approval_seconds=0.5) as server,
        server.client() as client,
    ):
        task_id = client.post(
            API, json={"input": "write", "additional_input": {"autonomous": True}}
        ).json()["task_id"]
        with client.stream("GET", f"{API}/{task_id}/events") as stream:
            events = [(kind, data) for _, kind, data in sse_events(stream)]
        kinds = [kind for kind, _ in events]
        assert "confirmation_needed" in kinds
        (confirmation,) = [data for kind, data in events if kind == "confirmation"]
        assert confirmation["approved"] is False
        assert confirmation["reason"] == "nobody answered"
        assert not (server.data_dir / "workspaces" / task_id / "out.txt").exists()
        assert events[-1][1]["status"] == "finished"


def test_a_continuous_task_refuses_without_asking(tmp_path: Path) -> None:
    replay = recording(tmp_path / "r.json", *WRITE_AND_FINISH)
    with running(tmp_path, replay, grant=["fs.read"]) as server, server.client() as client:
        task_id = client.post(
            API,
            json={"input": "write", "additional_input": {"autonomous": True, "continuous": True}},
        ).json()["task_id"]
        with client.stream("GET", f"{API}/{task_id}/events") as stream:
            events = [(kind, data) for _, kind, data in sse_events(stream)]
        kinds = [kind for kind, _ in events]
        assert "confirmation_needed" not in kinds
        (result,) = [d for k, d in events if k == "result" and d["command"] == "write_file"]
        assert result["ok"] is False
        assert not (server.data_dir / "workspaces" / task_id / "out.txt").exists()


async def test_the_server_and_its_sessions_share_one_nursery(tmp_path: Path) -> None:
    """serve() runs under the caller's trio: started with nursery.start, it reports where
    it listens; stopping it returns, with no task left running."""
    config = Config(path=tmp_path / "config.yaml", data_dir=tmp_path / "data")
    async with trio.open_nursery() as nursery:
        handle = await nursery.start(serve, config, ServeOptions(port=0, auth=False))
        assert handle.urls[0].startswith("http://127.0.0.1:")
        handle.stop()
    assert handle.tasks.live == {}
    assert handle.tasks.closing is True


def test_requests_from_other_sites_are_refused(tmp_path: Path) -> None:
    """A page of another site cannot post to the server (CSRF), with or without tokens;
    without tokens, a Host that is not a loopback name (DNS rebinding) is refused too."""
    replay = recording(tmp_path / "r.json")
    with running(tmp_path, replay, auth=False) as server, server.client(None) as client:
        own = server.url
        assert client.post(API, json={"input": "x"}, headers={"Origin": own}).status_code == 200
        for origin in ("http://evil.example", "null", own.replace("127.0.0.1", "localhost")):
            refused = client.post(API, json={"input": "x"}, headers={"Origin": origin})
            assert refused.status_code == 403, origin
            assert "refused" in refused.json()["message"]
        rebound = client.get(API, headers={"Host": "evil.example"})
        assert rebound.status_code == 403
        assert "only loopback names" in rebound.json()["message"]
        assert client.get(API, headers={"Host": "localhost"}).status_code == 200
    with running(tmp_path, replay) as server, server.client() as client:
        refused = client.post(API, json={"input": "x"}, headers={"Origin": "http://evil.example"})
        assert refused.status_code == 403
        # With tokens, any Host will do (a proxy's name, say): the token is the check.
        assert client.get(API, headers={"Host": "agents.example"}).status_code == 200


def test_only_admin_tokens_change_plugins(tmp_path: Path) -> None:
    """Plugins are what every token's tasks run with: a token not in server.admins may look
    at them, not change them; the config file stays as it was."""
    with running(tmp_path, recording(tmp_path / "r.json")) as server, server.client("bob") as bob:
        before = (tmp_path / "config.yaml").read_text()
        assert bob.get("/ap/v1/plugins").status_code == 200
        for path, body in [
            ("/ap/v1/plugins/shell/enable", {}),
            ("/ap/v1/plugins/console/disable", {}),
            ("/ap/v1/plugins/shell/settings", {"settings": {"max_output": 10}}),
        ]:
            refused = bob.post(path, json=body)
            assert refused.status_code == 403, path
            assert "may not change plugins: list it in server.admins" in refused.json()["message"]
        assert (tmp_path / "config.yaml").read_text() == before
        with server.client("alice") as alice:
            assert alice.post("/ap/v1/plugins/shell/enable", json={}).status_code == 200
        assert (tmp_path / "config.yaml").read_text() != before


def test_admins_must_be_configured_tokens(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"server\.admins names carol, which server\.tokens"):
        load_tokens(
            {"alice": "A_TOKEN"},
            tmp_path,
            environ={"A_TOKEN": "a" * 20},
            admins=frozenset({"carol"}),
        )
    lone = load_tokens({}, tmp_path, environ={"AUTOGPT_TOKEN": "c" * 20})
    assert lone.may_administer("default")


def test_one_tokens_tasks_never_recall_anothers_memories(tmp_path: Path) -> None:
    """What alice's task remembered, alice's later tasks recall (scope all), bob's do not:
    neither with the recall command nor in the notes of earlier sessions in the prompt."""
    note = "ALICE-PRIVATE: the merger code is BLUEFALCON"
    remember = recording(
        tmp_path / "remember.json", ("remember", {"text": note}), ("finish", {"result": "ok"})
    )
    with running(tmp_path, remember) as server, server.client() as alice:
        task_id = alice.post(API, json={"input": "remember the merger code"}).json()["task_id"]
        for _ in range(2):
            assert alice.post(f"{API}/{task_id}/steps", json={}).status_code == 200
    recall = recording(
        tmp_path / "recall.json",
        ("recall", {"query": "merger code", "scope": "all"}),
        ("finish", {"result": "ok"}),
    )
    with running(tmp_path, recall) as server:
        for who, sees in (("bob", False), ("alice", True)):
            with server.client(who) as client:
                task_id = client.post(API, json={"input": "what is the merger code"}).json()[
                    "task_id"
                ]
                step = client.post(f"{API}/{task_id}/steps", json={}).json()
                output = step["additional_output"]["result"]["output"]
                assert ("BLUEFALCON" in output) is sees, (who, output)
                assert client.post(f"{API}/{task_id}/steps", json={}).json()["is_last"]
                events = client.get(f"{API}/{task_id}/events").text
                assert ("BLUEFALCON" in events) is sees, who


def test_what_the_review_found_stays_fixed(tmp_path: Path) -> None:
    """Chunked bodies past the limit are 413 (not 500); JSON nested too deep or with a
    number too long is 422; any file name downloads; an event id past 2^63 is 422."""
    replay = recording(tmp_path / "r.json", ("write_file", {"path": "x", "content": "x"}))
    with (
        running(tmp_path, replay, body_bytes=16384, upload_bytes=8192) as server,
        server.client() as client,
    ):
        task_id = client.post(API, json={"input": "x"}).json()["task_id"]

        def chunks(data: bytes) -> Iterator[bytes]:
            for start in range(0, len(data), 1000):
                yield data[start : start + 1000]

        big = json.dumps({"input": "a" * 40_000}).encode()
        chunked = client.post(API, content=chunks(big))
        assert chunked.status_code == 413, chunked.text
        assert "at most 16384 bytes" in chunked.json()["message"]
        boundary = "xyz"
        form = (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="b"\r\n\r\n'
            ).encode()
            + b"b" * 20_000
            + f"\r\n--{boundary}--\r\n".encode()
        )
        upload = client.post(
            f"{API}/{task_id}/artifacts",
            content=chunks(form),
            headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
        )
        assert upload.status_code == 413, upload.text
        assert "an upload may be at most 8192 bytes" in upload.json()["message"]

        deep = "[" * 3000 + "]" * 3000
        nested = client.post(API, content='{"input": "x", "additional_input": {"a": ' + deep + "}}")
        assert nested.status_code == 422
        assert "nested too deeply" in nested.json()["message"]
        digits = client.post(API, content='{"input": "x", "n": ' + "9" * 5000 + "}")
        assert digits.status_code == 422

        for name in ("报告.txt", "\u202eevil.txt", 'quo"te.txt'):
            made = client.post(f"{API}/{task_id}/artifacts", files={"file": (name, b"data")})
            assert made.status_code == 200, made.text
            got = client.get(f"{API}/{task_id}/artifacts/{made.json()['artifact_id']}")
            assert got.status_code == 200
            assert got.content == b"data"
            disposition = got.headers["content-disposition"]
            assert disposition.isascii()
            assert "\u202e" not in disposition
            assert "filename*=UTF-8''" in disposition

        for after in ("99999999999999999999999", "-1", "x"):
            response = client.get(f"{API}/{task_id}/events", params={"after": after})
            assert response.status_code == 422, after


def test_two_answers_at_once_one_counts_the_other_is_told(tmp_path: Path) -> None:
    replay = recording(tmp_path / "r.json", *WRITE_AND_FINISH)
    with running(tmp_path, replay, grant=["fs.read"]) as server, server.client() as client:
        task_id = client.post(
            API, json={"input": "write", "additional_input": {"autonomous": True}}
        ).json()["task_id"]
        with client.stream("GET", f"{API}/{task_id}/events") as stream:
            for _, kind, data in sse_events(stream):
                if kind == "confirmation_needed":
                    url = f"{API}/{task_id}/confirmations/{data['id']}"

                    def answer(decision: str, url: str = url) -> httpx.Response:
                        with server.client() as own:
                            return own.post(url, json={"decision": decision})

                    # Both reach the server before the task wakes: one is the answer.
                    statuses = server.call_async_pair(answer, "deny", "approve")
                    # Never both "answered": the other learns it was answered already (409),
                    # or, if the task took the first answer meanwhile, that nothing waits (404).
                    codes = sorted(r.status_code for r in statuses)
                    assert codes in ([200, 404], [200, 409]), codes
                    winner = next(r for r in statuses if r.status_code == 200)
                    decided = winner.request.content
        approved = b"approve" in decided
        assert (server.data_dir / "workspaces" / task_id / "out.txt").exists() is approved


def test_per_token_limit_leaves_room_for_others_and_a_refused_create_leaves_nothing(
    tmp_path: Path,
) -> None:
    replay = recording(tmp_path / "r.json", *WRITE_AND_FINISH)
    with (
        running(
            tmp_path, replay, grant=["fs.read"], max_sessions=4, max_sessions_per_token=1
        ) as server,
        server.client() as alice,
        server.client("bob") as bob,
    ):
        body = {"input": "write", "additional_input": {"autonomous": True}}
        assert alice.post(API, json=body).status_code == 200
        refused = alice.post(API, json=body)
        assert refused.status_code == 503
        assert "--max-sessions-per-token" in refused.json()["message"]
        assert refused.headers["retry-after"] == "5"
        assert alice.get(API).json()["pagination"]["total_items"] == 1  # nothing left behind
        assert bob.post(API, json=body).status_code == 200


def test_a_second_answer_before_the_task_wakes_is_refused() -> None:
    """The race itself, made certain: two answers given before the waiting task runs."""
    send, receive = trio.open_memory_channel[None](1)
    live = Live("t", "alice", "auto", send, receive)
    live.pending = Pending("p", "confirmation", 1, {"command": "write_file"})
    tasks = Tasks.__new__(Tasks)  # answer() reads only the live task
    tasks.answer(live, "p", {"decision": "deny"})
    with pytest.raises(TaskError) as refused:
        tasks.answer(live, "p", {"decision": "approve"})
    assert refused.value.status == 409
    assert live.pending.answer.approved is False


def test_a_bug_of_ours_is_a_json_500_without_details(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    secret = "sk-live-0123456789abcdefSECRET"
    with running(tmp_path, recording(tmp_path / "r.json")) as server, server.client() as client:

        async def broken(*args: object, **kwargs: object) -> None:
            raise RuntimeError(f"a bug that quotes {secret}")

        os.environ["SERVICE_API_KEY"] = secret
        try:
            server.call(server.handle.runtime.redactor.add, [secret])
            server.call(setattr, server.handle.tasks, "list", broken)
            response = client.get(API)
        finally:
            del os.environ["SERVICE_API_KEY"]
        assert response.status_code == 500
        assert response.json() == {"message": "internal error: the server's log says more"}
        assert client.get("/").status_code == 200  # the server goes on
    logged = capfd.readouterr().err
    assert "RuntimeError: a bug that quotes ***" in logged
    assert secret not in logged
