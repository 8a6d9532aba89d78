"""``PluginThread``: the one thread a classic plugin's code runs in.

Auto-GPT 0.4 ran a plugin's methods on one thread, one at a time, so plugins keep state
that belongs to a thread (a SQLite connection opened in ``__init__``) and nothing of
theirs is safe to call twice at once. Here every call of one classic plugin -- creating
it, ``post_prompt``, its commands, each ``can_handle_X``/``X`` -- runs in its own thread,
in the order the calls were made, and the event loop never waits on plugin code: trio
awaits the answer (``run``), the loader blocks for it (``call``).

A call its caller gave up on (a command past its deadline, a cancelled session) is
skipped if it has not started; one that has started goes on until it returns, and the
calls after it wait. Once ``close``d, the thread runs nothing more: a call made then, or
still waiting, fails at once with ``PluginClosed``. The thread is a daemon: a plugin stuck
for good never keeps the process from exiting.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import trio

T = TypeVar("T")


class PluginCallError(Exception):
    """A classic plugin raised something that is not an ``Exception`` (``SystemExit``,
    ``KeyboardInterrupt`` from its own code): reported as a failure of that call."""


class PluginClosed(Exception):
    """The plugin was unloaded (its thread closed) before the call ran."""


@attrs.define(eq=False)
class _Job:
    function: Callable[[], Any]
    answer: Callable[[tuple[bool, Any]], None]
    #: Set when the caller no longer waits: the job is skipped if it has not started.
    abandoned: bool = False


class PluginThread:
    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name=f"classic {name}", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                break
            if job.abandoned:
                continue
            try:
                job.answer((True, job.function()))
            except Exception as exc:
                job.answer((False, exc))
            except BaseException as exc:  # noqa: BLE001 - the plugin's, never the process's
                job.answer((False, PluginCallError(f"{type(exc).__name__}: {exc}")))
        # Closed: nothing queued after the close runs (``_submit`` refuses new jobs; this
        # answers any that raced in).
        self._refuse(self._take_queued())

    def _submit(self, job: _Job) -> None:
        with self._lock:
            if self._closed:
                raise PluginClosed(f"the classic plugin {self.name} was unloaded")
            self._jobs.put(job)

    def call(self, function: Callable[[], T], timeout: float | None = None) -> T:
        """Run ``function`` in the thread and return what it returns (or raise what it
        raised), waiting at most ``timeout`` seconds (``TimeoutError``)."""
        answers: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
        job = _Job(function, answers.put)
        self._submit(job)
        try:
            ok, value = answers.get(timeout=timeout)
        except queue.Empty:
            job.abandoned = True
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

        job = _Job(function, answer)
        self._submit(job)
        try:
            await done.wait()
        finally:
            if not box:
                job.abandoned = True  # cancelled while waiting: skipped if not started
        ok, value = box[0]
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def close(self) -> None:
        """End the thread once the call running (if any) returns; calls queued or made
        from now on fail with ``PluginClosed``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            # First in line: queued calls are answered, not run.
            pending = self._take_queued()
            self._jobs.put(None)
        self._refuse(pending)

    def _take_queued(self) -> list[_Job]:
        """The jobs queued now, taken off the queue (a close marker is dropped)."""
        taken: list[_Job] = []
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return taken
            if job is not None:
                taken.append(job)

    def _refuse(self, jobs: list[_Job]) -> None:
        for job in jobs:
            job.answer((False, PluginClosed(f"the classic plugin {self.name} was unloaded")))
