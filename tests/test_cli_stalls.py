"""``autogpt run`` as a process: Ctrl-C stops a run whose plugin blocks the event loop."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.clirun import cli_env
from tests.distfactory import write_plugin
from tests.fake_openai import FakeToolCall, Reply, fake_openai_in_thread

# A plugin whose plain sync implementation blocks forever in the hook STUCK_HOOK names: in
# build_prompt from its first call; in on_event from the first plan event, and then in
# every later event too (so the session's own ending, which sends events, blocks again).
STUCK_PLUGIN = """
import os
import time
from pathlib import Path

from hookspecs import EventKind, hookimpl

HOOK = os.environ["STUCK_HOOK"]
stuck = False


def block():
    global stuck
    stuck = True
    Path(os.environ["STUCK_MARKER"]).write_text("stuck", encoding="utf-8")
    while True:
        try:
            time.sleep(1000)
        except BaseException:
            # A careless plugin: a bare except that swallows KeyboardInterrupt too.
            if not os.environ.get("STUCK_SWALLOWS"):
                raise


if HOOK == "build_prompt":

    @hookimpl
    def build_prompt(prompt):
        block()

else:

    @hookimpl
    def on_event(event):
        if stuck or event.kind is EventKind.PLAN:
            block()
"""

SCRIPT = [
    Reply(tool_calls=(FakeToolCall("write_file", {"path": "a.txt", "content": "a"}, id="w1"),)),
    Reply(tool_calls=(FakeToolCall("finish", {"result": "done"}, id="f1"),)),
]


def _interrupt_stuck_run(
    tmp_path: Path, hook: str, *, swallows: bool, signum: int = signal.SIGINT
) -> tuple[int, str]:
    """Start a run with the stuck plugin, wait until it blocks, send ``signum``; return the
    exit code and stderr."""
    site = tmp_path / "site"
    write_plugin(site, "stuck", STUCK_PLUGIN)
    marker = tmp_path / "stuck.marker"
    extra = {"STUCK_HOOK": hook, "STUCK_MARKER": str(marker)}
    if swallows:
        extra["STUCK_SWALLOWS"] = "1"
    env = cli_env(tmp_path, site=site, **extra)
    with fake_openai_in_thread(SCRIPT) as server:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "autogpt_core",
                "run",
                "Write a.txt",
                "--base-url",
                server.base_url,
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            for _ in range(1200):  # bounded: a run that ends instead fails the test
                if marker.exists():
                    break
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.05)
            else:
                raise AssertionError("the plugin never blocked")
            proc.send_signal(signum)
            # A hang guard, not a performance threshold: without the fix it never ends.
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return proc.returncode, err


def _status(tmp_path: Path) -> str:
    with sqlite3.connect(tmp_path / "data" / "sessions.sqlite3") as conn:
        ((status,),) = conn.execute("SELECT status FROM sessions").fetchall()
    return str(status)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("hook", "signum"),
    [
        ("on_event", signal.SIGINT),
        ("build_prompt", signal.SIGINT),
        ("build_prompt", signal.SIGTERM),
    ],
    ids=["on_event-SIGINT", "build_prompt-SIGINT", "build_prompt-SIGTERM"],
)
def test_ctrl_c_stops_a_sync_hook_that_blocks_forever(
    tmp_path: Path, hook: str, signum: int
) -> None:
    """A plain def hook sleeping forever on the event loop: one SIGINT (or SIGTERM) still
    ends the run with 130, the session saved as interrupted, and the plugin named with the
    fix. Blocking in on_event, it blocks again as the session ends, and is stopped again."""
    code, err = _interrupt_stuck_run(tmp_path, hook, swallows=False, signum=signum)
    assert code == 130, err
    assert "Traceback" not in err
    assert "plugin 'stuck' blocked the event loop for" in err
    assert f"in hook {hook!r}" in err
    assert "fix: mark it @hookimpl(blocking=True)" in err
    assert _status(tmp_path) == "interrupted"


@pytest.mark.slow
def test_ctrl_c_ends_the_process_when_the_plugin_swallows_keyboard_interrupt(
    tmp_path: Path,
) -> None:
    """A plugin catching KeyboardInterrupt and blocking on: the process saves the session as
    interrupted through a connection of its own and exits 130, naming where it was stuck."""
    code, err = _interrupt_stuck_run(tmp_path, "build_prompt", swallows=True)
    assert code == 130, err
    assert "Traceback" not in err
    assert "plug_stuck/__init__.py" in err
    assert "ignored Ctrl-C" in err
    assert _status(tmp_path) == "interrupted"
