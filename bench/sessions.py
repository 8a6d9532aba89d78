"""Many concurrent sessions through the real runtime, against a bare trio skeleton.

One command: ``python bench/sessions.py`` (``--sessions``, ``--cycles``, ``--big``, and
``--gc default`` to run the runtime with CPython's collector settings rather than those
``autogpt run`` and ``autogpt serve`` set: ``autogpt_core/_gc.py``).

Both sides run N concurrent sessions of C cycles in which "the model" answers after 50 ms
(``trio.sleep``): the skeleton does only the sleeps; the runtime does everything a real
session does with the default plugins enabled -- prompt building, planning, permission
checks, commands (a file write, a memory store and recall, listings, finish), SQLite
memory, the console and JSON-lines output (sent to /dev/null and a temp dir), and every
cycle and event committed to the session store. Printed: CPU per cycle (goal <= 300 us;
worker threads run on the second core, so wall time alone would hide them), the wall-time
ratio runtime/skeleton (goal <= 6), peak RSS (goal <= 100 MB), SQLite writes per second,
and a larger run (``--big`` sessions, default 10,000) that must end without error, with
its CPU per cycle against the first run's (goal <= 1.2x).

Two floors are measured in the same run, to show what the goals are measured against: the
skeleton's own CPU per cycle (trio scheduling the sleeps), and the engine alone -- the same
runtime with no plugin doing work (the console, JSON-lines log, memory and workspace plugins
disabled) and a model that calls ``ask_user`` (nobody answers) until its last cycle: the
prompt, the plan, every hook call under isolation and deadline, the dispatcher, the
emitter, the lease and a store commit per cycle, and nothing else (``--no-floor`` skips it).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import resource
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import trio

from autogpt_core import _gc
from autogpt_core._config import Config, Limits
from autogpt_core.agent._runtime import Runtime
from autogpt_core.agent._session import RunOptions
from autogpt_core.plugins._loader import load
from hookspecs import LLMRequest, LLMResponse, Message, Role, ToolCall, Usage

LATENCY = 0.05


#: The plugins the engine-alone run disables: every one that does work in a cycle.
WORKING_PLUGINS = frozenset({"console", "jsonlog", "memory_sqlite", "workspace"})


def _answer(cycle: int, last: int, engine_only: bool = False) -> tuple[str, dict[str, Any]]:
    if cycle >= last:
        return "finish", {"result": "done"}
    if engine_only:
        return "ask_user", {"question": "go on?"}
    if cycle == 1:
        return "write_file", {"path": "notes.txt", "content": "benchmark notes\n"}
    if cycle == 2:
        return "remember", {"text": "the benchmark wrote notes.txt"}
    if cycle == 3:
        return "recall", {"query": "benchmark notes"}
    return "list_files", {}


@attrs.define
class SleepyProvider:
    """Answers after LATENCY seconds, with a tool call chosen by the cycle number."""

    cycles: int
    engine_only: bool = False
    calls: int = 0

    async def complete(self, request: LLMRequest) -> LLMResponse:
        await trio.sleep(LATENCY)
        self.calls += 1
        name, args = _answer(self.calls, self.cycles, self.engine_only)
        call = ToolCall(f"c{self.calls}", name, json.dumps(args))
        return LLMResponse(Message(Role.ASSISTANT, "", tool_calls=(call,)), Usage(100, 10))

    async def aclose(self) -> None:
        pass


async def skeleton(sessions: int, cycles: int) -> float:
    async def one() -> None:
        for _ in range(cycles):
            await trio.sleep(LATENCY)

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(sessions):
            nursery.start_soon(one)
    return time.perf_counter() - started


@attrs.frozen
class Timed:
    wall: float
    cpu: float
    outcomes: dict[str, int]


#: Whether the runtime runs with the collector as ``autogpt run``/``serve`` set it
#: (``autogpt_core._gc.tune``); ``--gc default`` keeps CPython's defaults, to compare.
TUNED_GC = True


def timed_runtime(root: Path, sessions: int, cycles: int, engine_only: bool = False) -> Timed:
    """The runtime's run, with its wall time and the CPU time of the whole process (every
    thread: the event loop, the store's writer, the workers)."""
    cpu = time.process_time()
    took, outcomes = trio.run(runtime, root, sessions, cycles, engine_only)
    return Timed(took, time.process_time() - cpu, outcomes)


def timed_skeleton(sessions: int, cycles: int) -> Timed:
    cpu = time.process_time()
    took = trio.run(skeleton, sessions, cycles)
    return Timed(took, time.process_time() - cpu, {})


@contextlib.contextmanager
def collector_as_the_cli_sets_it() -> Iterator[None]:
    """The garbage collector as the commands that run sessions set it (``TUNED_GC``),
    restored afterwards (the skeleton and the peers keep CPython's defaults)."""
    previous = gc.get_threshold()
    if TUNED_GC:
        _gc.tune()
    try:
        yield
    finally:
        gc.set_threshold(*previous)


async def runtime(
    root: Path, sessions: int, cycles: int, engine_only: bool = False
) -> tuple[float, dict[str, int]]:
    config = Config(
        path=root / "config.yaml",
        data_dir=root / "data",
        limits=Limits(max_cycles=cycles + 1),
        disable=WORKING_PLUGINS if engine_only else frozenset(),
    )
    plugins = load(config, environ={})
    if engine_only and WORKING_PLUGINS & set(plugins.loaded):
        raise SystemExit(f"the engine-alone run loaded {sorted(plugins.loaded)}")
    plugins.providers["sleepy"] = (
        "bench",
        lambda options: SleepyProvider(cycles, engine_only),
    )
    outcomes: dict[str, int] = {}
    started = time.perf_counter()
    with collector_as_the_cli_sets_it():
        await _run_sessions(root, sessions, plugins, config, outcomes)
    return time.perf_counter() - started, outcomes


async def _run_sessions(
    root: Path, sessions: int, plugins: Any, config: Config, outcomes: dict[str, int]
) -> None:
    async with Runtime(config, plugins=plugins) as rt:

        async def one(i: int) -> None:
            outcome = await rt.run(
                "benchmark goal",
                RunOptions(llm="sleepy", workspace=root / "ws" / str(i), continuous=True),
            )
            outcomes[outcome.status] = outcomes.get(outcome.status, 0) + 1

        async with trio.open_nursery() as nursery:
            for i in range(sessions):
                nursery.start_soon(one, i)


def count_writes(root: Path) -> int:
    """Rows written: cycles + events + sessions in the store, memories in the memory DB."""
    total = 0
    with contextlib.closing(sqlite3.connect(root / "data" / "sessions.sqlite3")) as conn:
        for table in ("sessions", "cycles", "events"):
            total += conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    memory = root / "data" / "plugins" / "memory_sqlite" / "memory.sqlite3"
    if memory.exists():
        with contextlib.closing(sqlite3.connect(memory)) as conn:
            total += conn.execute("SELECT count(*) FROM memory").fetchone()[0]
    return total


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--big", type=int, default=10_000, help="0 to skip the big run")
    parser.add_argument(
        "--no-floor", action="store_true", help="skip the engine-alone run (the floor)"
    )
    parser.add_argument(
        "--gc",
        choices=["tuned", "default"],
        default="tuned",
        help="the collector as 'autogpt run' sets it (tuned), or CPython's defaults",
    )
    args = parser.parse_args()
    global TUNED_GC
    TUNED_GC = args.gc == "tuned"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # Each running session keeps its JSON-lines log open.
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    root = Path(tempfile.mkdtemp(prefix="autogpt-bench-"))
    os.environ["AUTOGPT_DATA_DIR"] = str(root / "data")
    try:
        with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
            base = timed_skeleton(args.sessions, args.cycles)
            run = timed_runtime(root / "a", args.sessions, args.cycles)
            base_again = timed_skeleton(args.sessions, args.cycles)
        rss = peak_rss_mb()
        writes = count_writes(root / "a")
        skeleton_time = min(base.wall, base_again.wall)
        skeleton_cpu = min(base.cpu, base_again.cpu) / (args.sessions * args.cycles) * 1e6
        print(
            f"{args.sessions} sessions x {args.cycles} cycles, "
            f"model latency {LATENCY * 1000:.0f} ms, garbage collector {args.gc}"
        )
        per_cycle = run.cpu / (args.sessions * args.cycles) * 1e6
        print(f"  CPU per cycle: {per_cycle:,.0f} us   (goal <= 300)")
        print(f"  runtime / skeleton wall time: {run.wall / skeleton_time:.2f}x   (goal <= 6)")
        print(f"  peak RSS: {rss:.0f} MB   (goal <= 100)")
        print(f"  SQLite rows written: {writes} = {writes / run.wall:,.0f} per second")
        print(f"  outcomes: {run.outcomes}")
        print(
            f"  (absolute, for reference: runtime {run.wall:.2f}s wall, {run.cpu:.2f}s CPU; "
            f"skeleton {skeleton_time:.2f}s)"
        )
        print(f"  floor: the skeleton itself, {skeleton_cpu:,.0f} us of CPU per cycle")
        if not args.no_floor:
            with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
                alone = timed_runtime(root / "e", args.sessions, args.cycles, engine_only=True)
            alone_per_cycle = alone.cpu / (args.sessions * args.cycles) * 1e6
            print(
                f"  floor: the engine alone (no plugin doing work), {alone_per_cycle:,.0f} us "
                f"of CPU per cycle = {alone_per_cycle / per_cycle:.0%} of the run above, "
                f"wall {alone.wall / skeleton_time:.2f}x the skeleton; outcomes {alone.outcomes}"
            )
        if args.big:
            with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
                big_base = timed_skeleton(args.big, args.cycles)
                big = timed_runtime(root / "b", args.big, args.cycles)
            errors = args.big - big.outcomes.get("finished", 0)
            big_per_cycle = big.cpu / (args.big * args.cycles) * 1e6
            print(
                f"{args.big} sessions x {args.cycles} cycles: CPU per cycle {big_per_cycle:,.0f} us"
                f" = {big_per_cycle / per_cycle:.2f}x the {args.sessions}-session run "
                f"(goal <= 1.2), wall {big.wall / big_base.wall:.2f}x the skeleton"
            )
            print(
                f"  {errors} not finished, outcomes {big.outcomes}, peak RSS {peak_rss_mb():.0f} MB"
            )
            big_skeleton_cpu = big_base.cpu / (args.big * args.cycles) * 1e6
            print(
                f"  the skeleton itself: {big_skeleton_cpu:,.0f} us of CPU per cycle = "
                f"{big_skeleton_cpu / skeleton_cpu:.2f}x its {args.sessions}-session run"
            )
            print(
                f"  (absolute, for reference: runtime {big.wall:.1f}s, "
                f"skeleton {big_base.wall:.2f}s)"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
