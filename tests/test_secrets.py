"""One rule for what is secret, one boundary that masks it in everything leaving the process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autogpt_core.agent._redact import MASK, MIN_SECRET_LENGTH, Redactor, is_secret_name
from autogpt_plugins.shell import child_environment
from tests.clirun import autogpt, cli_env
from tests.fake_openai import FakeToolCall, Reply, fake_openai_in_thread

# Present in the environment, declared by no plugin.
SECRETS = {
    "GITHUB_TOKEN": "ghp_0123456789abcdefghijklmnop",
    "MY_SERVICE_KEY": "svc-key-9f8e7d6c5b4a",
    "DB_PASSWD": "hunter2-but-longer",
    "AWS_SHARED_CREDENTIALS": "aws-cred-77aa88bb",
    "OPENAI_API_KEY": "sk-test-0000111122223333",
}


def _call(name: str, args: dict[str, object], call_id: str) -> Reply:
    return Reply(tool_calls=(FakeToolCall(name, args, id=call_id),))


def test_secrets_from_the_environment_leave_the_process_nowhere(tmp_path: Path) -> None:
    """Secret-looking environment variables no plugin declares are masked in the store,
    the JSON-lines log, the memory database, the recording, the console and the requests
    sent to the model, whether they came in through the goal, a file or a command."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env_file = "\n".join(f"{k}={v}" for k, v in SECRETS.items())
    (workspace / "settings.env").write_text(env_file, encoding="utf-8")
    (tmp_path / "config.yaml").write_text(
        "plugins: {enable: [shell]}\npermissions: {grant: [fs.read, fs.write, shell]}\n",
        encoding="utf-8",
    )
    token = SECRETS["GITHUB_TOKEN"]
    script = [
        _call("read_file", {"path": "settings.env"}, "r1"),
        _call("run_shell", {"command": "env"}, "s1"),
        _call("remember", {"text": f"the db password is {SECRETS['DB_PASSWD']}"}, "m1"),
        _call("write_file", {"path": "out.txt", "content": token}, "w1"),
        _call("finish", {"result": f"token {token}, key {SECRETS['OPENAI_API_KEY']}"}, "f1"),
    ]
    env = cli_env(tmp_path, **SECRETS)
    record = tmp_path / "session.json"
    with fake_openai_in_thread(script) as server:
        done = autogpt(
            "run",
            f"Use the token {token} to check the repo",
            "--base-url",
            server.base_url,
            "--workspace",
            str(workspace),
            "--record",
            str(record),
            env=env,
        )
        requests = json.dumps(server.requests)
    assert done.returncode == 0, done.stderr
    files = [p for p in (tmp_path / "data").rglob("*") if p.is_file()]
    assert any(p.name == "sessions.sqlite3" for p in files)
    assert any(p.suffix == ".jsonl" for p in files)
    assert any(p.name == "memory.sqlite3" for p in files)
    outputs = {
        "stdout": done.stdout,
        "stderr": done.stderr,
        "model requests": requests,
        "recording": record.read_text(encoding="utf-8"),
        **{str(p): p.read_bytes().decode("utf-8", "replace") for p in files},
    }
    for name, value in SECRETS.items():
        for where, text in outputs.items():
            assert value not in text, f"${name} leaked into {where}"
    # Masked, not dropped: the model saw the file and the command's output, with "***".
    assert "GITHUB_TOKEN=***" in requests
    assert f"Use the token {MASK} to check the repo" in requests
    # The shell's child never had them in its environment at all.
    shell_output = [m for m in server.requests[2]["messages"] if m["role"] == "tool"][-1]
    assert "PATH=" in shell_output["content"]
    assert not any(f"{name}=" in shell_output["content"] for name in SECRETS)


def test_a_short_key_is_not_masked_inside_words() -> None:
    """A one-letter key does not turn 'fake' into 'fa***e': short values are not secrets."""
    redact = Redactor.from_environment({"OPENAI_API_KEY": "k", "MY_TOKEN": "abc"})
    text = "fake check: keys and tokens are ok"
    assert redact.text(text) == text
    assert redact({"k": ["fake"]}) == {"k": ["fake"]}


@pytest.mark.parametrize(
    "name",
    [
        "GITHUB_TOKEN",
        "MY_SERVICE_KEY",
        "DB_PASSWD",
        "DB_PASS",
        "AWS_SHARED_CREDENTIALS",
        "GOOGLE_APPLICATION_CREDENTIAL",
        "OPENAI_API_KEY",
        "STRIPE_APIKEY",
        "SESSION_SECRET",
        "SMTP_PASSWORD",
        "GPG_PASSPHRASE",
        "BASIC_AUTH",
        "SESSION_COOKIE",
        "github_token",
        "PGPASSWORD",
        "MYSQL_PWD",
        "SENTRY_DSN",
        "SLACK_WEBHOOK_URL",
        "GITHUB_PAT",
        "CI_JOB_JWT",
        "API_KEYS",
        "APP_SECRETS",
        "SECRETKEY",
        "APITOKEN",
        "AWS_ACCESS_KEY_ID",
        "AUTH_HEADER",
    ],
)
def test_secret_names(name: str) -> None:
    """Names with a whole secret word are secret, in any case."""
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "MAX_TOKENS",
        "KEYBOARD",
        "PATH",
        "HOME",
        "PASSAGE",
        "AUTHOR",
        "PWD",
        "OLDPWD",
        "TOKENIZERS_PARALLELISM",
        "SSH_AUTH_SOCK",
        "TOKEN_TYPE",
        "AUTH_METHOD",
        "API_KEY_FILE",
        "AUTH_URL",
        "MONKEYPATCH",
    ],
)
def test_not_secret_names(name: str) -> None:
    """A secret word inside a longer word does not count."""
    assert not is_secret_name(name)


def test_passwords_in_urls_are_secrets_whatever_the_name() -> None:
    """DATABASE_URL's password is masked, and not the rest of the URL."""
    redact = Redactor.from_environment(
        {
            "DATABASE_URL": "postgres://app:s3cret-pw!@db:5432/app",
            "REDIS_URL": "redis://:r3dis-pw@r",
        }
    )
    assert (
        redact.text("postgres://app:s3cret-pw!@db:5432/app") == f"postgres://app:{MASK}@db:5432/app"
    )
    assert "r3dis-pw" not in redact.text("auth r3dis-pw")


def test_shell_child_environment_uses_the_same_rule() -> None:
    """The shell's child gets no variable the redactor would mask, PASSWD included, and
    none whose value is a declared secret under an innocent name."""
    environ = {**SECRETS, "PATH": "/usr/bin", "LANG": "C.UTF-8", "ENDPOINT": "declared-secret-1"}
    redactor = Redactor.from_environment(environ)
    redactor.add(["declared-secret-1"])
    child = child_environment(environ, redactor.knows)
    assert child == {"PATH": "/usr/bin", "LANG": "C.UTF-8"}


@given(
    name=st.from_regex(r"[A-Z][A-Z0-9_]{0,20}", fullmatch=True),
    value=st.text(min_size=MIN_SECRET_LENGTH, max_size=30),
)
def test_child_environment_never_keeps_what_is_masked(name: str, value: str) -> None:
    """Whatever the name: a variable is kept for the child only if its name is not secret
    and its value holds nothing the redactor masks."""
    environ = {name: value}
    redactor = Redactor.from_environment(environ)
    child = child_environment(environ, redactor.knows)
    assert (name in child) == (not is_secret_name(name) and redactor.text(value) == value)
