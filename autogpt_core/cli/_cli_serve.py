"""``autogpt serve``: the agent over HTTP (docs/server.md)."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from .._config import load_config
from ._cli_run import _positive_float, _positive_int, _with_replay_settings, run_unwrapped


def add_serve_parser(sub: Any) -> None:
    serve = sub.add_parser(
        "serve",
        help="serve agents over HTTP: Agent Protocol v1, live events, approvals, a web console",
        description="Serve many simultaneous sessions over HTTP (Agent Protocol v1 at "
        "/ap/v1/agent, a web console at /). Requests need a bearer token: named tokens from "
        "the config (server.tokens), or $AUTOGPT_TOKEN, or one made at the first start and "
        "stored in the data directory. SIGINT/SIGTERM stop it at a safe point.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    serve.add_argument(
        "--port", type=_port, default=8000, help="port to listen on (8000; 0: any free port)"
    )
    serve.add_argument(
        "--llm",
        metavar="PROVIDER",
        help="LLM provider: openai (default) or replay:FILE (a recorded session)",
    )
    serve.add_argument("--model", help="model name (default from config or the provider)")
    serve.add_argument("--base-url", help="OpenAI-compatible endpoint (Ollama, llama.cpp, vLLM)")
    serve.add_argument(
        "--no-strict", action="store_true", help="replay: tolerate requests that differ"
    )
    serve.add_argument(
        "--demo",
        action="store_true",
        help="offline: every task plays the bundled demo recording (no key, no network)",
    )
    serve.add_argument(
        "--max-cycles", type=_positive_int, metavar="N", help="stop each task after N cycles"
    )
    serve.add_argument(
        "--max-sessions",
        type=_positive_int,
        default=100,
        metavar="N",
        help="tasks running at once; past it new work gets 503 (100)",
    )
    serve.add_argument(
        "--store",
        metavar="URL",
        help="the session store: a postgresql:// URL (several servers may share it) or a "
        "SQLite file (default: the config's store, or the data directory's)",
    )
    serve.add_argument(
        "--max-sessions-per-token",
        type=_positive_int,
        metavar="N",
        help="tasks one token may run at once (no limit): one client cannot take every slot",
    )
    serve.add_argument(
        "--no-auth",
        action="store_true",
        help="no tokens: anyone who reaches the port may use it (loopback only)",
    )
    serve.add_argument(
        "--max-body",
        type=_positive_int,
        default=1024 * 1024,
        metavar="BYTES",
        help="largest request body but uploads (1 MiB)",
    )
    serve.add_argument(
        "--max-upload",
        type=_positive_int,
        default=50 * 1024 * 1024,
        metavar="BYTES",
        help="largest artifact upload (50 MiB)",
    )
    serve.add_argument(
        "--idle-timeout",
        type=_positive_float,
        default=300.0,
        metavar="SECONDS",
        help="a stepped task nobody steps is parked after this (300); the next step resumes it",
    )
    serve.add_argument(
        "--approval-timeout",
        type=_positive_float,
        metavar="SECONDS",
        help="an autonomous task's confirmation is refused after this "
        "(default: limits.confirm_timeout, or never)",
    )
    serve.set_defaults(handler=cmd_serve, goal=None, record=None)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port (0 to 65535)")
    return value


def cmd_serve(args: argparse.Namespace) -> int:
    from .._errors import ConfigError
    from ..agent._options import RunOptions
    from ..hooks._tracing import trace_factory
    from ..server._serve import ServeOptions, serve
    from ._cli_run import demo_recording

    config = _with_replay_settings(load_config(args.config), args)
    if args.store:
        import attrs

        config = attrs.evolve(config, store=args.store)
    llm = args.llm
    if args.demo:
        if args.llm:
            raise ConfigError("--demo plays the bundled recording: drop --llm")
        llm = f"replay:{demo_recording()}"
    options = ServeOptions(
        host=args.host,
        port=args.port,
        auth=not args.no_auth,
        max_sessions=args.max_sessions,
        max_sessions_per_token=args.max_sessions_per_token,
        idle_seconds=args.idle_timeout,
        approval_seconds=args.approval_timeout,
        body_bytes=args.max_body,
        upload_bytes=args.max_upload,
    )
    run_options = RunOptions(
        llm=llm, model=args.model, base_url=args.base_url, max_cycles=args.max_cycles
    )

    async def start(task_status: Any) -> None:
        await serve(
            config,
            options,
            run_options,
            pm_factory=trace_factory(args.trace_hooks),
            task_status=task_status,
        )

    if serve_until_signalled(
        start,
        lambda handle: announce(handle, "serve", "listening on {url} (web console: {url}/)"),
        "autogpt serve",
        "autogpt serve: stopping: each task finishes its cycle and is saved",
    ):
        print("autogpt serve: stopped; every task was saved", file=sys.stderr)
    else:
        print("autogpt serve: stopped before it started", file=sys.stderr)
    return 0


def serve_until_signalled(
    start: Callable[[Any], Awaitable[None]],
    announce: Callable[[Any], None],
    name: str,
    stopping_message: str,
) -> bool:
    """Run the server ``start`` starts (its handle has ``runtime``, ``stopping`` and
    ``stop()``) until SIGINT or SIGTERM asks it to stop; a second signal stops it at once.
    ``name`` ("autogpt serve") starts the messages. Returns whether the server had started
    (``False``: a signal stopped it while it started)."""
    import trio

    from hookspecs import printable

    from ..server._listen import RecordingStatus

    started: list[Any] = []  # the server's handle, once it started

    async def main() -> None:
        # Signals are caught from the start and acted on at once. One that comes while the
        # server starts (plugins loading, MCP servers listing their tools) cancels the
        # start: nothing is served or running yet, and the runtime's exit closes what was
        # opened. A later one stops the server, letting what runs finish.
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:

                async def run_server(task_status: Any) -> None:
                    # The handle is in ``started`` the moment the server serves: a signal
                    # from then on stops it gracefully, not as a start.
                    await start(RecordingStatus(task_status, into=started))
                    nursery.cancel_scope.cancel()  # drained and closed: the watcher goes too

                async def watch() -> None:
                    async for _ in signals:
                        if not started:
                            if nursery.cancel_scope.cancel_called:
                                raise KeyboardInterrupt  # a second signal: stop now
                            print(
                                f"{name}: stopping before the server started (again to stop "
                                "at once)",
                                file=sys.stderr,
                                flush=True,
                            )
                            nursery.cancel_scope.cancel()
                        elif started[0].stopping.is_set():
                            raise KeyboardInterrupt  # a second signal: stop now
                        else:
                            print(
                                f"{stopping_message} (again to stop at once)",
                                file=sys.stderr,
                                flush=True,
                            )
                            started[0].stop()

                nursery.start_soon(watch)
                handle = await nursery.start(run_server)
                if handle.stopping.is_set():
                    return  # a signal came as it started: it stops, nothing to announce
                for warning in handle.runtime.warnings():
                    print(f"autogpt: warning: {printable(warning)}", file=sys.stderr)
                announce(handle)

    run_unwrapped(main)
    return bool(started)


def announce(handle: Any, command: str, listening: str) -> None:
    """Where the server listens and which tokens it takes (a new one shown this once)."""
    lines = [f"autogpt {command}: " + listening.format(url=url) for url in handle.urls]
    tokens = handle.tokens
    if tokens is None:
        lines.append(f"autogpt {command}: --no-auth: requests need no token")
    elif tokens.created is not None:
        lines += [
            f"autogpt {command}: made a token for this server, stored in {tokens.source} "
            "(readable by you only); it is shown this once:",
            f"    {tokens.created}",
            f"  send it as 'Authorization: Bearer TOKEN'; 'cat {tokens.source}' shows it again",
        ]
    else:
        lines.append(f"autogpt {command}: tokens from {tokens.source}")
    print("\n".join(lines), flush=True)
