"""The sessions workload on autogpt-core and on LangGraph, without and with its SQLite checkpointer.

One command: ``pip install -e '.[bench]' && python bench/peers.py`` (``--sessions``,
``--cycles``; default 1,000 sessions x 10 cycles, about 75-85 s on 2 cores).

All three run N concurrent sessions of C cycles, "the model" answering after 50 ms:

* autogpt-core: ``bench/sessions.py``'s runtime workload, imported from it -- the real
  ``Runtime`` with the default plugins (console to a non-terminal, JSON-lines log, SQLite
  session store, SQLite memory), every hook call isolated and under its deadline.
* LangGraph: a ``StateGraph`` whose agent node awaits the same 50 ms fake model and whose
  ``ToolNode`` runs a ``write_file`` tool (a small file in a per-session directory, in a
  worker thread as autogpt's ``write_file`` does), looping until the model stops asking for
  tools, every session an ``ainvoke`` under one ``asyncio.run``.
* LangGraph + ``AsyncSqliteSaver`` (``langgraph-checkpoint-sqlite``, one SQLite file), a
  thread id per session, LangGraph's default durability.

Each workload runs in its own subprocess, so its CPU time (``time.process_time()``: every
thread of the process) and peak RSS are its own. Printed: wall time, CPU time, CPU per
cycle, peak RSS, and the baseline autogpt-core's CPU per cycle divided into the others'
(the issue's goal: >= 5x less CPU per cycle than LangGraph with its checkpointer).
"""

# No ``from __future__ import annotations`` here: LangGraph reads the state's and the
# tool's annotations at run time, and those name things imported inside functions (so that
# each subprocess imports only its own framework), which string annotations can't resolve.

import argparse
import asyncio
import contextlib
import importlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

LATENCY = 0.05  # seconds; the same as bench/sessions.py's
WORKLOADS = ("autogpt-core", "langgraph", "langgraph+sqlite")
BASELINE = WORKLOADS[0]


def run_autogpt(root: Path, sessions: int, cycles: int) -> int:
    """bench/sessions.py's runtime workload; returns the number of sessions that finished."""
    import trio
    from sessions import runtime

    os.environ["AUTOGPT_DATA_DIR"] = str(root / "data")
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        _took, outcomes = trio.run(runtime, root, sessions, cycles)
    return outcomes.get("finished", 0)


async def _langgraph(root: Path, sessions: int, cycles: int, checkpoint: Path | None) -> int:
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.graph.state import CompiledStateGraph
    from langgraph.prebuilt import InjectedState, ToolNode, tools_condition

    class State(MessagesState):
        workspace: str
        cycle: int

    @tool
    def write_file(
        path: str, content: str, workspace: Annotated[str, InjectedState("workspace")]
    ) -> str:
        """Write content to a file in the session's workspace."""
        (Path(workspace) / path).write_text(content)
        return f"wrote {len(content)} characters to {path}"

    async def agent(state: State) -> dict[str, Any]:
        # The fake model: 50 ms, then a write_file call, or a final answer on the last cycle.
        await asyncio.sleep(LATENCY)
        cycle = state["cycle"] + 1
        if cycle >= cycles:
            return {"messages": [AIMessage("done")], "cycle": cycle}
        call = {
            "name": "write_file",
            "args": {"path": "notes.txt", "content": "benchmark notes\n"},
            "id": f"c{cycle}",
            "type": "tool_call",
        }
        return {"messages": [AIMessage("", tool_calls=[call])], "cycle": cycle}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([write_file]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")

    async def run(graph: CompiledStateGraph[State, None, State, State]) -> int:
        finished = 0

        async def one(i: int) -> None:
            nonlocal finished
            workspace = root / "ws" / str(i)
            workspace.mkdir(parents=True)
            state = await graph.ainvoke(
                {
                    "messages": [HumanMessage("benchmark goal")],
                    "workspace": str(workspace),
                    "cycle": 0,
                },
                # Two supersteps (agent, tools) a cycle; LangGraph's default limit is 25.
                {"configurable": {"thread_id": f"session-{i}"}, "recursion_limit": 2 * cycles + 5},
            )
            if state["cycle"] == cycles and (workspace / "notes.txt").exists():
                finished += 1

        await asyncio.gather(*(one(i) for i in range(sessions)))
        return finished

    if checkpoint is None:
        return await run(builder.compile())
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(str(checkpoint)) as saver:
        return await run(builder.compile(checkpointer=saver))


def run_langgraph(root: Path, sessions: int, cycles: int) -> int:
    return asyncio.run(_langgraph(root, sessions, cycles, None))


def run_langgraph_sqlite(root: Path, sessions: int, cycles: int) -> int:
    return asyncio.run(_langgraph(root, sessions, cycles, root / "checkpoints.sqlite3"))


# Imported before the clock starts: a cycle's cost is measured here, start-up in
# bench/startup.py (LangGraph's imports take about 0.5 s of CPU, autogpt-core's 0.15 s).
_LANGGRAPH = "langchain_core.messages langchain_core.tools langgraph.graph.state langgraph.prebuilt"
IMPORTS: dict[str, tuple[str, ...]] = {
    "autogpt-core": ("trio", "sessions"),
    "langgraph": tuple(_LANGGRAPH.split()),
    "langgraph+sqlite": (*_LANGGRAPH.split(), "langgraph.checkpoint.sqlite.aio"),
}
RUNNERS: dict[str, Callable[[Path, int, int], int]] = {
    "autogpt-core": run_autogpt,
    "langgraph": run_langgraph,
    "langgraph+sqlite": run_langgraph_sqlite,
}


def worker(name: str, sessions: int, cycles: int, result: Path) -> None:
    """Run one workload in this process and write its measures to ``result`` as JSON."""
    # Each running autogpt session keeps its JSON-lines log open (as in bench/sessions.py).
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    for module in IMPORTS[name]:
        importlib.import_module(module)
    root = Path(tempfile.mkdtemp(prefix=f"autogpt-peers-{name}-"))
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        finished = RUNNERS[name](root, sessions, cycles)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        shutil.rmtree(root, ignore_errors=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    measures = {"wall": wall, "cpu": cpu, "rss_mb": rss, "finished": finished}
    result.write_text(json.dumps(measures))


def measure(name: str, sessions: int, cycles: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="autogpt-peers-") as tmp:
        result = Path(tmp) / "result.json"
        argv = [sys.executable, __file__, "--worker", name, "--result", str(result)]
        argv += ["--sessions", str(sessions), "--cycles", str(cycles)]
        # stdout to a file, not a terminal: the console plugin prints as it would to a pipe.
        with open(Path(tmp) / "stdout", "w") as out:
            done = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{name} failed (exit {done.returncode}):\n{done.stderr}")
        measures: dict[str, float] = json.loads(result.read_text())
        return measures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--worker", choices=WORKLOADS, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.sessions, args.cycles, args.result)
        return 0

    total = args.sessions * args.cycles
    print(
        f"{args.sessions} sessions x {args.cycles} cycles = {total} cycles per workload, "
        f"model latency {LATENCY * 1000:.0f} ms, {os.cpu_count()} CPUs, "
        f"Python {sys.version.split()[0]}; each workload in its own process"
    )
    results: dict[str, dict[str, float]] = {}
    for name in WORKLOADS:
        results[name] = m = measure(name, args.sessions, args.cycles)
        print(
            f"  {name:<17} wall {m['wall']:6.1f} s   CPU {m['cpu']:6.1f} s   "
            f"CPU/cycle {m['cpu'] / total * 1e6:6.0f} µs   peak RSS {m['rss_mb']:4.0f} MB   "
            f"finished {m['finished']:.0f}/{args.sessions}",
            flush=True,
        )
    base = results[BASELINE]["cpu"]
    for name in WORKLOADS[1:]:
        ratio = results[name]["cpu"] / base
        goal = "   (goal >= 5.0)" if name == "langgraph+sqlite" else ""
        print(f"  CPU per cycle, {name} / {BASELINE}: {ratio:.2f}x{goal}")
    ratio = results["langgraph+sqlite"]["cpu"] / base
    print(f"autogpt-core uses {ratio:.1f}x less CPU per cycle than LangGraph with its checkpointer")
    failed = [name for name, m in results.items() if m["finished"] != args.sessions]
    if failed:
        print(f"NOT ALL SESSIONS FINISHED: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
