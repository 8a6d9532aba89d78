"""``Listener``: an ASGI app on hypercorn's trio worker, in the caller's nursery, that
stops accepting on ``stop()`` and is closed for good by ``close()``.

``autogpt serve`` and ``autogpt mcp --http`` both serve this way; nothing of a request is
logged (requests carry tokens).
"""

from __future__ import annotations

from typing import Any

import trio

from .._errors import ConfigError

#: After ``stop()``: how long responses in flight may take to go out before ``close()``
#: closes the connections still open (event streams stay open by design).
CLOSE_SECONDS = 2.0


class Listener:
    def __init__(self, app: Any, host: str, port: int, *, graceful_seconds: float) -> None:
        import hypercorn.config

        self.app = app
        self.config = hypercorn.config.Config()
        bind_host = f"[{host}]" if ":" in host else host
        self.config.bind = [f"{bind_host}:{port}"]
        self.config.graceful_timeout = graceful_seconds
        self.config.accesslog = None  # requests carry tokens; nothing of them is logged
        self.stopping = trio.Event()
        self._scope = trio.CancelScope()
        self._done = trio.Event()

    async def start(self, nursery: trio.Nursery) -> list[str]:
        """Listen, in ``nursery``; returns the URLs it listens on."""
        urls: list[str] = await nursery.start(self._serve)
        return urls

    async def _serve(self, task_status: trio.TaskStatus[list[str]]) -> None:
        import hypercorn.trio

        listening = RecordingStatus(task_status)
        with self._scope:
            try:
                await hypercorn.trio.serve(
                    self.app,
                    self.config,
                    shutdown_trigger=self.stopping.wait,
                    task_status=listening,
                )
            except* OSError as group:
                if listening.values:
                    raise
                # The address cannot be bound (in use, not this machine's, a privileged
                # port): the user's --host/--port, said as such, not as a traceback.
                first = _first_leaf(group)
                why = (first.strerror if isinstance(first, OSError) else None) or str(first)
                raise ConfigError(
                    f"Cannot listen on {self.config.bind[0]}: {why}. Fix: choose another "
                    "--port (0 takes a free one), or stop what listens there; for --host, "
                    "give an address of this machine."
                ) from None
        self._done.set()

    def stop(self) -> None:
        """Stop accepting; requests in flight go on."""
        self.stopping.set()

    async def close(self, seconds: float = CLOSE_SECONDS) -> None:
        """Wait up to ``seconds`` for hypercorn to finish, then close what is left."""
        with trio.move_on_after(seconds):
            await self._done.wait()
        self._scope.cancel()


class RecordingStatus:
    """A task status that passes ``started`` on and keeps its value in ``values`` (``into``
    when given): whoever holds it knows the task started the moment it does, before
    ``nursery.start`` returns."""

    def __init__(self, task_status: Any, into: list[Any] | None = None) -> None:
        self.task_status = task_status
        self.values: list[Any] = [] if into is None else into

    def started(self, value: Any = None) -> None:
        self.values.append(value)
        self.task_status.started(value)


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    found: BaseException = group
    while isinstance(found, BaseExceptionGroup):
        found = found.exceptions[0]
    return found
