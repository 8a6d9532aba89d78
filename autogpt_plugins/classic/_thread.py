"""``PluginThread``: the one thread a classic plugin's code runs in.

Auto-GPT 0.4 ran a plugin's methods on one thread, one at a time, so plugins keep state
that belongs to a thread (a SQLite connection opened in ``__init__``) and nothing of
theirs is safe to call twice at once. Here every call of one classic plugin -- creating
it, ``post_prompt``, its commands, each ``can_handle_X``/``X`` -- runs in its own thread,
in the order the calls were made, and the event loop never waits on plugin code: trio
awaits the answer (``run``), the loader blocks for it (``call``).

A call abandoned by its caller (a command past its deadline, a cancelled session) goes
on in the thread until it returns; calls made after it wait. The thread is a daemon: a
plugin stuck for good never keeps the process from exiting.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import trio

T = TypeVar("T")

_Job = tuple[Callable[[], Any], Callable[[tuple[bool, Any]], None]]


class PluginCallError(Exception):
    """A classic plugin raised something that is not an ``Exception`` (``SystemExit``,
    ``KeyboardInterrupt`` from its own code): reported as a failure of that call."""


class PluginThread:
    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=f"classic {name}", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            function, answer = job
            try:
                answer((True, function()))
            except Exception as exc:
                answer((False, exc))
            except BaseException as exc:  # noqa: BLE001 - the plugin's, never the process's
                answer((False, PluginCallError(f"{type(exc).__name__}: {exc}")))

    def call(self, function: Callable[[], T], timeout: float | None = None) -> T:
        """Run ``function`` in the thread and return what it returns (or raise what it
        raised), waiting at most ``timeout`` seconds (``TimeoutError``)."""
        answers: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
        self._jobs.put((function, answers.put))
        try:
            ok, value = answers.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"it did not return within {timeout:g} s") from None
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    async def run(self, function: Callable[[], T]) -> T:
        """``call``, awaited under trio: the event loop goes on while the plugin runs."""
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        box: list[tuple[bool, Any]] = []

        def answer(value: tuple[bool, Any]) -> None:
            box.append(value)
            try:
                token.run_sync_soon(done.set)
            except trio.RunFinishedError:
                pass  # the caller's run has ended: nobody waits for this answer

        self._jobs.put((function, answer))
        await done.wait()
        ok, value = box[0]
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def close(self) -> None:
        """End the thread once the calls already made have run."""
        self._jobs.put(None)
