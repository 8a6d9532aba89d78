"""Run the HTTP server inside the runtime: one structured-concurrency tree.

``serve`` opens the runtime, a nursery for the tasks, and hypercorn's trio worker in that
same nursery. Stopping (``ServerHandle.stop``, or SIGINT/SIGTERM in ``autogpt serve``):
hypercorn stops accepting; every live task finishes the cycle it is in and parks before
its next one (a task waiting on a person is parked at once; nothing of it is lost, a
later step or ``…/run`` continues it); past ``drain_seconds`` the rest are cancelled,
which saves them as interrupted at their last completed cycle; event streams close.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import trio

from .._config import Config
from .._errors import ConfigError
from ..agent._options import RunOptions
from ..agent._runtime import Runtime
from ..store._open import is_postgres_url
from ._app import Api, Limits
from ._auth import Tokens, load_tokens
from ._hosts import is_loopback
from ._listen import CLOSE_SECONDS, Listener
from ._origin import SameOrigin
from ._tasks import Tasks

#: How often a server on a shared store looks for autonomous tasks whose server died.
ORPHAN_SECONDS = 5.0


@attrs.frozen
class ServeOptions:
    """How ``autogpt serve`` serves: where, for whom, and its limits."""

    host: str = "127.0.0.1"
    port: int = 8000
    auth: bool = True
    max_sessions: int = 100
    max_sessions_per_token: int | None = None
    idle_seconds: float = 300.0
    approval_seconds: float | None = None
    body_bytes: int = 1024 * 1024
    upload_bytes: int = 50 * 1024 * 1024
    drain_seconds: float = 30.0


@attrs.define(eq=False)
class ServerHandle:
    """A running server: where it listens, its tokens, its tasks; ``stop()`` stops it."""

    urls: list[str]
    tokens: Tokens | None
    tasks: Tasks
    runtime: Runtime
    stopping: trio.Event

    def stop(self) -> None:
        self.stopping.set()


async def serve(
    config: Config,
    options: ServeOptions,
    run_options: RunOptions | None = None,
    *,
    pm_factory: Callable[[], Any] | None = None,
    task_status: trio.TaskStatus[ServerHandle] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until stopped; ``task_status.started`` gets the ``ServerHandle``."""
    if not options.auth and not is_loopback(options.host):
        raise ConfigError(
            f"--no-auth serves anyone who reaches {options.host}: it is allowed on loopback "
            "only (--host 127.0.0.1); elsewhere use tokens (docs/server.md#tokens)"
        )
    tokens = (
        load_tokens(config.server_tokens, config.data_dir, admins=config.server_admins)
        if options.auth
        else None
    )
    runtime_kwargs: dict[str, Any] = {} if pm_factory is None else {"pm_factory": pm_factory}
    async with Runtime(config, **runtime_kwargs) as runtime:
        if tokens is not None:
            runtime.redactor.add(tokens.values)
        async with trio.open_nursery() as nursery:
            tasks = Tasks(
                runtime,
                nursery,
                base=run_options or RunOptions(),
                max_sessions=options.max_sessions,
                max_sessions_per_token=options.max_sessions_per_token,
                idle_seconds=options.idle_seconds,
                approval_seconds=options.approval_seconds,
                shared_store=is_postgres_url(runtime.store_location),
            )
            api = Api(tasks, tokens, Limits(options.body_bytes, options.upload_bytes))
            app = SameOrigin(api.app(), loopback_hosts_only=not options.auth)
            listener = Listener(
                app, options.host, options.port, graceful_seconds=options.drain_seconds + 5.0
            )
            stopping = listener.stopping
            urls = await listener.start(nursery)
            if tasks.shared_store:
                nursery.start_soon(tasks.watch_orphans, ORPHAN_SECONDS)
                nursery.start_soon(tasks.listen_for_changes, ORPHAN_SECONDS)
            task_status.started(ServerHandle(urls, tokens, tasks, runtime, stopping))
            await stopping.wait()
            # hypercorn stops accepting now and lets the requests in flight finish; the
            # tasks stop at their next safe point, which ends the steps waiting on them.
            await tasks.drain(options.drain_seconds)
            # Every task is stopped and every stream told to end: what is left are
            # connections hypercorn keeps open; give responses a moment to go out.
            await listener.close(CLOSE_SECONDS)
        # hypercorn has returned: every connection is closed; the nursery is done.
