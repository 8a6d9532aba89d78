"""run_shell: real subprocesses in the workspace, with time limits and a clean environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from autogpt_plugins import shell
from hookspecs import CommandContext, PluginSettings, SessionView
from tests.plugincheck import check_plugin


def context(workspace: Path, **settings: object) -> CommandContext:
    async def ask_user(question: str) -> str | None:
        return None

    return CommandContext(
        session=SessionView(id="s1", goal="g", workspace=workspace),
        plugin_id="shell",
        settings=PluginSettings(plugin_id="shell", values=settings),
        ask_user=ask_user,
    )


async def assert_exits(pid: int) -> None:
    """Wait until process ``pid`` is gone (or a zombie nobody reaped yet)."""
    with trio.fail_after(10):
        while True:
            try:
                stat = await trio.Path(f"/proc/{pid}/stat").read_text()
            except (FileNotFoundError, ProcessLookupError):
                return
            if stat.rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return
            await trio.sleep(0.01)


async def test_runs_in_the_workspace(tmp_path: Path) -> None:
    """`echo hi` runs with the workspace as its working directory."""
    result = await shell.run_shell(command="echo hi; pwd -P", ctx=context(tmp_path))
    assert result.ok
    assert result.data == {"exit_code": 0}
    workspace = await trio.Path(tmp_path).resolve()
    assert result.output == f"exit code: 0\nstdout:\nhi\n{workspace}\n"


async def test_reports_exit_code_and_stderr(tmp_path: Path) -> None:
    """A failing command still returns its exit code and stderr to the model."""
    result = await shell.run_shell(command="echo oops >&2; exit 3", ctx=context(tmp_path))
    assert result.data == {"exit_code": 3}
    assert "exit code: 3" in result.output
    assert "stderr:\noops" in result.output


async def test_timeout_kills_the_command(tmp_path: Path) -> None:
    """A command running past its timeout is killed, with its children, and reported."""
    result = await shell.run_shell(
        command="sleep 100 & echo $! > bg.pid; sleep 100", ctx=context(tmp_path), timeout=0.5
    )
    assert not result.ok
    assert result.error is not None
    assert "timed out after 0.5 s" in result.error
    await assert_exits(int((tmp_path / "bg.pid").read_text()))


async def test_background_jobs_end_with_the_command(tmp_path: Path) -> None:
    """A job left running in the background is killed when the shell exits."""
    result = await shell.run_shell(
        command="sleep 100 & echo $! > bg.pid; echo started", ctx=context(tmp_path)
    )
    assert "started" in result.output
    await assert_exits(int((tmp_path / "bg.pid").read_text()))


async def test_secret_environment_variables_are_not_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Variables named like keys, tokens, secrets and passwords stay out of the child."""
    secrets = {
        "OPENAI_API_KEY": "sk-one",
        "GITHUB_TOKEN": "ghp-two",
        "client_secret": "three",
        "DB_PASSWORD": "four",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HARMLESS_SETTING", "visible")
    result = await shell.run_shell(command="env", ctx=context(tmp_path))
    assert "HARMLESS_SETTING=visible" in result.output
    for name, value in secrets.items():
        assert name not in result.output
        assert value not in result.output
    assert "OPENAI_API_KEY" in os.environ  # the parent keeps its environment


async def test_long_output_is_truncated(tmp_path: Path) -> None:
    """Output beyond max_output keeps its head and its tail."""
    command = "printf 'HEAD'; for i in $(seq 1000); do printf 'x'; done; printf 'TAIL'"
    result = await shell.run_shell(command=command, ctx=context(tmp_path, max_output=100))
    stdout = result.output.split("stdout:\n", 1)[1]
    assert stdout.startswith("HEAD")
    assert stdout.endswith("TAIL")
    assert "characters cut" in stdout
    assert len(stdout) < 200


def test_manifest_declares_exactly_the_registered_commands() -> None:
    """The manifest is valid, disabled by default, and matches run_shell's parameters."""
    manifest = check_plugin(shell)
    assert manifest["enabled_by_default"] is False
    assert manifest["permissions"] == ["shell"]
    assert manifest["capabilities"]["commands"][0]["permissions"] == ["shell"]
