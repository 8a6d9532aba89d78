"""``autogpt run`` and ``autogpt sessions``."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._config import Config, load_config

if TYPE_CHECKING:
    from ..store._storage import SessionFootprint

DEMO_GOAL = (
    "Write a haiku about plugins to haiku.txt, remember it for later sessions, "
    "check that you can recall it, then finish."
)
DEMO_RECORDING = "demo.replay.json"
#: The built-in plugin whose settings --record, --no-strict and --demo set.
REPLAY_PLUGIN = "llm_replay"


def add_run_parser(sub: Any) -> None:
    run = sub.add_parser("run", help="run an agent for a goal in this terminal")
    run.add_argument("goal", nargs="?", help="what the agent should achieve")
    run.add_argument(
        "--llm",
        metavar="PROVIDER",
        help="LLM provider: openai (default) or replay:FILE (a recorded session)",
    )
    run.add_argument("--model", help="model name (default from config or the provider)")
    run.add_argument("--base-url", help="OpenAI-compatible endpoint (Ollama, llama.cpp, vLLM)")
    run.add_argument("--max-cycles", type=_positive_int, metavar="N", help="stop after N cycles")
    run.add_argument("--max-tokens", type=_positive_int, metavar="N", help="stop after N tokens")
    run.add_argument(
        "--max-cost", type=_positive_float, metavar="USD", help="stop after spending USD"
    )
    run.add_argument(
        "--continuous",
        action="store_true",
        help="unattended: never ask; commands needing ungranted permissions are refused",
    )
    run.add_argument("--workspace", type=Path, metavar="DIR", help="the agent's file sandbox")
    run.add_argument(
        "--resume",
        metavar="SESSION_ID",
        help="continue a stored session (its id, or enough of its start to be unique)",
    )
    run.add_argument("--record", type=Path, metavar="FILE", help="record model traffic to FILE")
    run.add_argument(
        "--no-strict", action="store_true", help="replay: tolerate requests that differ"
    )
    run.add_argument(
        "--demo", action="store_true", help="run the bundled offline demo (no key, no network)"
    )
    run.set_defaults(handler=cmd_run)

    sessions = sub.add_parser(
        "sessions", help="list stored sessions, or delete one ('autogpt sessions delete ID')"
    )
    sessions.add_argument("--json", action="store_true", help="machine-readable output")
    sessions.add_argument(
        "--limit", type=_positive_int, default=20, help="how many, newest first (default 20)"
    )
    sessions.set_defaults(handler=cmd_sessions)
    actions = sessions.add_subparsers(dest="sessions_command", metavar="ACTION")
    delete = actions.add_parser(
        "delete",
        help="delete a stored session: its cycles, events, artifacts and memories",
        description="Delete a stored session: its cycles, events and artifact records in the "
        "session store, and its memories in every memory backend. Its workspace directory "
        "is kept unless --workspace is given. A session that is running is refused.",
    )
    delete.add_argument(
        "session_id", metavar="SESSION_ID", help="its id, or enough of its start to be unique"
    )
    delete.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    delete.add_argument(
        "--workspace",
        action="store_true",
        help="remove its workspace directory too (only one autogpt made under the data dir)",
    )
    delete.set_defaults(handler=cmd_sessions_delete)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not more than 0")
    return value


def demo_recording() -> Path:
    path = resources.files("autogpt_core").joinpath("demo", DEMO_RECORDING)
    return Path(str(path))


def cmd_run(args: argparse.Namespace) -> int:
    import trio

    from hookspecs import printable

    from .._errors import ConfigError
    from ..agent._options import RunOptions
    from ..agent._runtime import Runtime
    from ..hooks._tracing import trace_factory

    config = _with_replay_settings(load_config(args.config), args)
    goal = args.goal
    llm = args.llm
    if args.demo:
        if args.llm or args.resume or args.goal:
            raise ConfigError(
                "--demo plays a bundled recording of its own goal: drop GOAL, --llm and --resume"
            )
        goal = DEMO_GOAL
        llm = f"replay:{demo_recording()}"
    if args.resume and args.goal:
        raise ConfigError("--resume continues a stored session's goal: drop GOAL")
    if not goal and not args.resume:
        raise ConfigError(
            'no goal: give one, e.g. autogpt run "Summarise notes.txt", or run '
            "'autogpt run --demo'"
        )
    from ..agent._session import new_session_id

    session_id = _resolve_session_id(config, args.resume) if args.resume else new_session_id()
    options = RunOptions(
        session_id=None if args.resume else session_id,
        llm=llm,
        model=args.model,
        base_url=args.base_url,
        max_cycles=args.max_cycles,
        max_tokens=args.max_tokens,
        max_cost=args.max_cost,
        continuous=args.continuous,
        workspace=args.workspace,
    )

    async def main() -> Any:
        async with Runtime(config, pm_factory=trace_factory(args.trace_hooks)) as runtime:
            for warning in runtime.warnings():
                print(f"autogpt: warning: {printable(warning)}", file=sys.stderr)
            if args.record and REPLAY_PLUGIN not in runtime.view().plugins:
                raise ConfigError(
                    f"--record needs the {REPLAY_PLUGIN!r} plugin: "
                    f"autogpt plugins enable {REPLAY_PLUGIN}"
                )
            async with trio.open_nursery() as nursery:
                stopped = False

                async def watch_signals() -> None:
                    nonlocal stopped
                    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                        async for _ in signals:
                            if stopped:
                                raise KeyboardInterrupt
                            stopped = True
                            print("\nautogpt: stopping at the next safe point...", file=sys.stderr)
                            run_scope.cancel()

                nursery.start_soon(watch_signals)
                outcome = None
                with trio.CancelScope() as run_scope:
                    if args.resume:
                        outcome = await runtime.resume(session_id, options)
                    else:
                        outcome = await runtime.run(goal, options)
                nursery.cancel_scope.cancel()
            return outcome

    outcome = run_unwrapped(main)
    if outcome is None:
        print(
            "autogpt: interrupted; the session was saved: resume it with "
            f"'autogpt run --resume {session_id}'",
            file=sys.stderr,
        )
        return 130
    code = 0 if outcome.status == "finished" else 1
    workspace = args.workspace or config.data_dir / "workspaces" / session_id
    if args.resume:
        from ..store._open import open_store

        with open_store(config.store_location) as store:
            workspace = store.get_session(session_id).workspace
    lines = [
        # The result is the model's words: shown, never acted on by the terminal.
        f"\nSession {outcome.status} after {outcome.cycles} cycle(s): {printable(outcome.result)}",
        f"Workspace: {workspace.resolve()}",
    ]
    if args.record:
        lines.append(
            f"Recorded the model's answers to {args.record} (replay: --llm replay:{args.record})"
        )
    lines.append(f"Session id: {session_id} (see 'autogpt sessions')")
    try:
        print("\n".join(lines), flush=True)
    except BrokenPipeError:
        # Nobody reads the summary (| head): the exit code still tells how the run ended.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return code


def _with_replay_settings(config: Config, args: argparse.Namespace) -> Config:
    """``config`` with the replay plugin's settings that ``--record``, ``--no-strict`` and
    ``--demo`` stand for, over the config file's (``plugins.settings.llm_replay``).

    The options reach the plugin the way its settings always do, validated against its
    manifest and given to it alone: the engine below names no plugin.
    """
    import attrs

    values = dict(config.plugin_settings.get(REPLAY_PLUGIN, {}))
    if args.record is not None:
        values["record"] = str(args.record.expanduser().absolute())
    if args.no_strict or args.demo:
        # The demo tolerates extra plugins (a tool list that differs from the recording's).
        values["strict"] = False
    if not values:
        return config
    return attrs.evolve(config, plugin_settings={**config.plugin_settings, REPLAY_PLUGIN: values})


def _resolve_session_id(config: Config, text: str) -> str:
    """The id of the stored session that ``text`` names: all of its id, or a unique prefix."""
    from .._errors import SessionNotFound
    from ..store._open import open_store

    path = config.store_location
    if isinstance(path, Path) and not path.exists():
        raise SessionNotFound(
            f"No session {text!r}: there are no stored sessions yet ({path}). Fix: start one "
            "with 'autogpt run GOAL'."
        )
    with open_store(path) as store:
        return store.resolve_session_id(text)


def run_unwrapped(main: Any) -> Any:
    """``trio.run(main)``, where ``main`` runs its work in a nursery beside a signal
    watcher: our own errors (a missing key, a bad recording) and a second Ctrl-C are
    raised as themselves, not as an exception group. The garbage collector is set for a
    process that runs sessions first (``_gc.tune``)."""
    import trio

    from .. import _gc

    _gc.tune()  # this process runs sessions: see _gc.py
    try:
        return trio.run(main)
    except BaseExceptionGroup as group:
        interrupted, _ = group.split(KeyboardInterrupt)
        if interrupted is not None:
            raise KeyboardInterrupt from None
        ours = _only_autogpt_errors(group)
        if ours is None:
            raise
        raise ours from None


def _only_autogpt_errors(group: BaseExceptionGroup[BaseException]) -> Exception | None:
    from .._errors import AutoGPTError

    leaves: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        exc = stack.pop()
        if isinstance(exc, BaseExceptionGroup):
            stack.extend(exc.exceptions)
        else:
            leaves.append(exc)
    if leaves and all(isinstance(e, AutoGPTError) for e in leaves):
        first = leaves[0]
        assert isinstance(first, Exception)
        return first
    return None


def cmd_sessions(args: argparse.Namespace) -> int:
    from hookspecs import printable

    from ..store._open import open_store

    config = load_config(args.config)
    path = config.store_location
    if isinstance(path, Path) and not path.exists():
        print("No sessions yet: start one with 'autogpt run GOAL'.")
        return 0
    with open_store(path) as store:
        page = store.list_sessions(limit=args.limit)
    rows = [
        {
            "id": s.id,
            "status": str(s.status),
            "goal": s.goal,
            "cycles": None if s.damage else s.budget.get("cycles", 0),
            "updated": s.updated_at,
            "workspace": str(s.workspace),
            "damage": s.damage or None,
        }
        for s in page.items
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("No sessions yet: start one with 'autogpt run GOAL'.")
        return 0
    import time

    print(f"{'SESSION':<32}  {'UPDATED':<16}  {'STATUS':<16}  {'CYCLES':>6}  GOAL")
    for session in page.items:
        updated = time.strftime("%Y-%m-%d %H:%M", time.localtime(session.updated_at))
        goal = _shown_goal(session.goal)
        status = "DAMAGED" if session.damage else str(session.status)
        cycles = "?" if session.damage else session.budget.get("cycles", 0)
        print(f"{session.id:<32}  {updated:<16}  {status:<16}  {cycles!s:>6}  {goal}")
    if page.total > len(rows):
        print(f"({len(rows)} of {page.total}; --limit N shows more)")
    for session in page.items:
        if session.damage:
            # The store's message: the file, the session, the column and the fix.
            print(f"autogpt: warning: {printable(session.damage)}", file=sys.stderr)
    return 0


def _shown_goal(goal: str) -> str:
    """A goal on one line of at most 60 characters, safe for a terminal."""
    from hookspecs import printable

    shown = printable(goal, newlines=False)
    return shown if len(shown) <= 60 else shown[:59] + "…"


def cmd_sessions_delete(args: argparse.Namespace) -> int:
    """``autogpt sessions delete ID``: the session's rows, its memories, maybe its workspace."""
    import trio

    from hookspecs import printable

    from ..store._lease import in_use
    from ..store._open import open_store

    def say(text: str) -> None:
        # Ids, goals and paths come from the store: shown, never acted on by the terminal.
        print(printable(text))

    config = load_config(args.config)
    session_id = _resolve_session_id(config, args.session_id)
    with open_store(config.store_location) as store:
        footprint = store.session_footprint(session_id)
        lease = store.get_lease(session_id)
    if lease is not None and lease.live():
        raise in_use(lease)
    workspace, removable = _workspace_to_remove(config, footprint.workspace)
    say(f"Session {session_id} ({footprint.status}): {_shown_goal(footprint.goal)}")
    say(
        f"  in the session store: {footprint.cycles} cycle(s), {footprint.events} event(s), "
        f"{footprint.artifacts} artifact record(s)"
    )
    say("  its memories, in every memory backend")
    if args.workspace and removable:
        say(f"  its workspace directory {workspace}")
    if not args.yes and not _confirmed(printable(f"Delete session {session_id}?")):
        say("Nothing deleted.")
        return 1
    deleted, forgotten = trio.run(_delete_session, config, session_id, args.trace_hooks)
    say(
        f"Deleted session {session_id}: {deleted.cycles} cycle(s), {deleted.events} event(s), "
        f"{deleted.artifacts} artifact record(s); {forgotten} memory item(s) forgotten."
    )
    say(_remove_workspace(workspace, removable) if args.workspace else _kept(workspace))
    return 0


async def _delete_session(
    config: Config, session_id: str, trace: bool
) -> tuple[SessionFootprint, int]:
    """Forget the session's memories through every backend, then delete its rows, holding
    its lease throughout so that nobody resumes it halfway."""
    from hookspecs import MemoryQuery, SessionView

    from .._errors import HookError
    from ..agent._runtime import Runtime
    from ..hooks._tracing import trace_factory

    async with Runtime(config, pm_factory=trace_factory(trace)) as runtime:
        store = runtime.store
        async with runtime.leases.hold(session_id):
            footprint = await store.session_footprint(session_id)
            view = SessionView(id=session_id, goal=footprint.goal, workspace=footprint.workspace)
            # Empty text with scope "session": every item of this session (the hook's contract).
            # Before the rows: if a backend fails, the session is still there to delete again.
            try:
                counts = await runtime.pm.ahook.memory_forget.call(
                    {"session": view, "query": MemoryQuery("", limit=0, scope="session")},
                    timeout=runtime.hook_timeout,
                )
            except HookError as exc:
                raise HookError(
                    exc.plugin,
                    exc.hook,
                    f"{exc}; session {session_id} was not deleted: fix or disable plugin "
                    f"{exc.plugin!r}, then run 'autogpt sessions delete {session_id}' again",
                ) from exc
            deleted = await store.delete_session(session_id)
    return deleted, sum(n for n in counts if isinstance(n, int))


def _workspace_to_remove(config: Config, workspace: Path) -> tuple[Path, bool]:
    """The workspace, and whether ``--workspace`` may remove it: only a directory autogpt
    made for the session (under the data dir's ``workspaces``), never one the user chose."""
    made = (config.data_dir / "workspaces").resolve()
    try:
        resolved = workspace.resolve()
    except OSError:
        return workspace, False
    return workspace, resolved.parent == made and not workspace.is_symlink()


def _kept(workspace: Path) -> str:
    if not workspace.exists():
        return f"Its workspace {workspace} no longer exists."
    return f"Kept its workspace {workspace} (remove it with --workspace, or by hand)."


def _remove_workspace(workspace: Path, removable: bool) -> str:
    import shutil

    if not workspace.exists():
        return f"Its workspace {workspace} no longer exists."
    if not removable:
        return (
            f"Kept its workspace {workspace}: it was chosen with --workspace, not made by "
            "autogpt, so it is not removed; remove it by hand if you no longer need it."
        )
    try:
        shutil.rmtree(workspace)
    except OSError as exc:
        return f"Could not remove its workspace {workspace} ({exc}); remove it by hand."
    return f"Removed its workspace {workspace}."


def _confirmed(question: str) -> bool:
    """Ask on stdin (a terminal or a pipe); no answer is no."""
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        print("\nNo answer (stdin is closed): add --yes to delete without asking.")
        return False
    return answer.strip().lower() in ("y", "yes")
