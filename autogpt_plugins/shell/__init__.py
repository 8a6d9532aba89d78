"""``run_shell``: run a shell command in the session's workspace, with a time limit."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Mapping

import trio

from autogpt_core import is_secret_name
from hookspecs import CommandContext, CommandResult, RegisterCommand, hookimpl

MAX_TIMEOUT = 600.0
DEFAULT_MAX_OUTPUT = 10_000


# The model chooses the command, so `env` or `echo $OPENAI_API_KEY` would copy a secret
# into the output. The child gets no variable that the core treats as secret (by its name,
# or because its value is a declared secret); its output is masked as well, since a child
# can still find secrets elsewhere (a file, its parent's /proc entry).
@hookimpl
def register_commands(register: RegisterCommand) -> None:
    register("run_shell", run_shell)


# `timeout` is the model's argument (the manifest's schema), applied with trio.fail_after.
async def run_shell(command: str, ctx: CommandContext, timeout: float = 60) -> CommandResult:  # noqa: ASYNC109
    """Run ``command`` with ``/bin/sh -c`` in the workspace; report exit code and output."""
    timeout = min(float(timeout), MAX_TIMEOUT)
    max_output = int(ctx.settings.values.get("max_output", DEFAULT_MAX_OUTPUT))
    try:
        with trio.fail_after(timeout):
            env = child_environment(os.environ, lambda value: ctx.redact(value) != value)
            completed = await _run(["/bin/sh", "-c", command], ctx.session.workspace, env)
    except trio.TooSlowError:
        return CommandResult.failure(
            f"the shell command {_shorten(command)} timed out after {timeout:g} s and was "
            f"killed; run something quicker, or pass a larger timeout (at most "
            f"{MAX_TIMEOUT:g} s)"
        )
    # Masked before cutting: a secret cut in two would be matched by neither half.
    stdout = _truncate(ctx.redact(completed.stdout.decode("utf-8", errors="replace")), max_output)
    stderr = _truncate(ctx.redact(completed.stderr.decode("utf-8", errors="replace")), max_output)
    parts = [f"exit code: {completed.returncode}"]
    if stdout:
        parts.append(f"stdout:\n{stdout}")
    if stderr:
        parts.append(f"stderr:\n{stderr}")
    if not (stdout or stderr):
        parts.append("(no output)")
    # A non-zero exit is still a command that ran: the model needs its output to react.
    return CommandResult.success("\n".join(parts), data={"exit_code": completed.returncode})


def child_environment(
    environ: Mapping[str, str], is_masked: Callable[[str], bool] = lambda value: False
) -> dict[str, str]:
    """``environ`` without the variables whose names look secret (``is_secret_name``) or
    whose values ``is_masked`` says hold a secret."""
    return {
        name: value
        for name, value in environ.items()
        if not is_secret_name(name) and not is_masked(value)
    }


async def _run(
    argv: list[str], cwd: os.PathLike[str], env: Mapping[str, str]
) -> subprocess.CompletedProcess[bytes]:
    completed: subprocess.CompletedProcess[bytes] | None = None

    async def run(task_status: trio.TaskStatus[trio.Process] = trio.TASK_STATUS_IGNORED) -> None:
        nonlocal completed
        completed = await trio.run_process(
            argv,
            cwd=cwd,
            env=env,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            # Its own process group, so that the shell's children can be killed with it.
            start_new_session=True,
            deliver_cancel=_kill_group_async,
            task_status=task_status,
        )

    async with trio.open_nursery() as nursery:
        process: trio.Process = await nursery.start(run)
        try:
            await process.wait()
        finally:
            # Background jobs (`server &`) would hold the output pipes open and outlive the
            # session with nothing left to stop them: the group ends with the shell.
            _kill_group(process.pid)
    assert completed is not None
    return completed


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # everyone in the group has already exited


async def _kill_group_async(process: trio.Process) -> None:
    _kill_group(process.pid)


def _truncate(text: str, limit: int) -> str:
    """Keep the head and the tail of ``text`` (errors tend to be at the end)."""
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    return f"{text[:head]}\n… [{len(text) - limit} characters cut] …\n{text[len(text) - tail :]}"


def _shorten(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")
