"""Several ``autogpt serve`` processes on one PostgreSQL store, measured in the same run.

One command: ``python bench/replicas.py`` (``--quick``: a smoke run of a few seconds;
``--clients``, ``--tasks``, ``--cycles``, ``--failover-tasks`` change sizes).

A throwaway PostgreSQL server is started with ``tests/pgserver.py`` (``initdb`` and
``pg_ctl`` in a temporary directory, durability off); each phase gets a database of its
own. Every ``autogpt serve`` runs in a subprocess (``--store postgresql://…``, the same
``$AUTOGPT_DATA_DIR`` and ``$AUTOGPT_TOKEN`` for all of them, each on its own port); the
load generator is this process (``bench/server.py``'s trio HTTP/1.1 client).

1. Throughput: ``--clients`` concurrent clients each create a task and POST ``…/steps``
   until ``is_last``, ``--tasks`` times (as ``bench/server.py``'s steps phase), against one
   process, then against two (the clients split evenly between the two URLs). Printed:
   steps per second for each, the ratio two/one (goal >= 1.5 on 2 cores), and the CPU
   seconds of the servers, of PostgreSQL (the postmaster and its children, from
   ``/proc/PID/stat``, children that exited included) and of the load generator.
2. Failover: two processes A and B; ``--failover-tasks`` autonomous tasks are created on A
   with a config granting only ``fs.read``, so that each ``write_file`` waits for an
   approval. The first is approved on A; once every task waits for its second, A is
   killed (``SIGKILL``). Measured: the time from the kill until B shows the first (and
   the last) task waiting again — B looks for orphaned tasks every ``ORPHAN_SECONDS`` —
   against the lease period. Then everything is approved on B until every task finished;
   checked: each task's steps are 1..n (n: the recording's cycles; none lost) and its
   event stream has one ``command`` event per cycle (none run twice).

Exits non-zero if a task did not finish, or a cycle was lost or run twice.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import trio

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent)]

import server as bench  # noqa: E402  (bench/server.py)
from server import API, TICKS, TOKEN, Http, Server, Steps, connected, percentile  # noqa: E402

from autogpt_core.server._serve import ORPHAN_SECONDS  # noqa: E402
from autogpt_core.store._lease import LEASE_EXPIRY, LEASE_PERIOD  # noqa: E402
from tests.pgserver import PostgresServer, running_server  # noqa: E402

# -- PostgreSQL's CPU -----------------------------------------------------------------------


def _stat(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def postgres_cpu(pg: PostgresServer) -> float:
    """CPU seconds of the PostgreSQL server: the postmaster (with its reaped children's)
    and the children still running."""
    postmaster = int((pg.data / "postmaster.pid").read_text().split()[0])
    fields = _stat(postmaster)
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = _stat(int(entry.name))
            if int(fields[1]) == postmaster:
                ticks += int(fields[11]) + int(fields[12])
    return ticks / TICKS


# -- servers -------------------------------------------------------------------------------


#: ``--memory sqlite``: the servers keep memories in the data directory's SQLite file
#: (memory_sqlite) instead of the store's PostgreSQL database (memory_postgres, the default).
MEMORY_CONFIG = {
    "store": "",
    "sqlite": "plugins: {enable: [memory_sqlite], disable: [memory_postgres]}\n",
}
MEMORY = "store"


def serve_replica(
    root: Path, home: Path, replay: Path, store: str, name: str, grant: str
) -> Server:
    """``autogpt serve`` on ``store``, its data directory ``home/data`` (shared)."""
    config = home / f"config-{grant.replace(', ', '-')}.yaml"
    config.write_text(f"permissions: {{grant: [{grant}]}}\n{MEMORY_CONFIG[MEMORY]}", "utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOGPT_", "OPENAI_"))}
    env.update(
        AUTOGPT_CONFIG=str(config),
        AUTOGPT_DATA_DIR=str(home / "data"),
        AUTOGPT_CACHE_DIR=str(home / f"cache-{name}"),
        AUTOGPT_TOKEN=TOKEN,
        NO_COLOR="1",
    )
    argv = [sys.executable, "-m", "autogpt_core", "serve", "--port", "0", "--store", store]
    argv += ["--llm", f"replay:{replay}", "--no-strict", "--max-sessions", "100000"]
    return Server.start(argv, env, root / f"{name}.log")


@attrs.define
class Stepped(Steps):
    stale: int = 0  # step answers that repeated the previous step: no cycle was run


async def run_task(conn: Http, load: Stepped, cycles: int, record: bool = True) -> None:
    """Create a task and step it until ``is_last`` (``bench/server.py``'s, but a step
    answer that repeats the previous step is counted apart: it ran no cycle)."""
    started = time.perf_counter()
    status, body = await conn.request("POST", API, b'{"input": "benchmark goal"}')
    if status != 200:
        load.errors[f"create: HTTP {status}: {body[:200]!r}"] += 1
        return
    if record:
        load.create_latencies.append(time.perf_counter() - started)
        load.creates += 1
    task_id = json.loads(body)["task_id"]
    path = f"{API}/{task_id}/steps"
    last = 0
    for _ in range(cycles * 10):
        started = time.perf_counter()
        status, body = await conn.request("POST", path, b"{}")
        if status != 200:
            load.errors[f"step: HTTP {status}: {body[:200]!r}"] += 1
            return
        step = json.loads(body)
        number = int(step["step_id"])
        if number <= last:
            load.stale += record
            continue
        if number != last + 1:
            load.errors[f"a step skipped from {last} to {number}"] += 1
        last = number
        if record:
            load.latencies.append(time.perf_counter() - started)
            load.steps += 1
        if step["is_last"]:
            if step["name"] == "finish" and number == cycles and record:
                load.finished += 1
            return
    load.errors["a task took ten times more steps than its recording has cycles"] += 1


@attrs.define
class Throughput:
    servers: int
    load: Stepped
    server_cpu: float
    pg_cpu: float
    client_cpu: float

    @property
    def rate(self) -> float:
        return self.load.steps / self.load.wall


async def steps_phase(
    servers: list[Server], pg: PostgresServer, clients: int, tasks: int, cycles: int
) -> Throughput:
    """``clients`` connections, split evenly across ``servers``, each create ``tasks``
    tasks and step them until ``is_last``."""
    conns: list[Http] = []
    for i, server in enumerate(servers):
        share = clients // len(servers) + (1 if i < clients % len(servers) else 0)
        conns += await connected(server.address, share)
    load = Stepped()
    warm = Stepped()
    async with trio.open_nursery() as nursery:  # warm up: a task on a few connections each
        for server in servers:
            for conn in [c for c in conns if c.address == server.address][:4]:
                nursery.start_soon(run_task, conn, warm, cycles, False)
    load.errors.update(warm.errors)

    async def client(conn: Http) -> None:
        for _ in range(tasks):
            await run_task(conn, load, cycles)

    server_cpu = sum(s.cpu() for s in servers)
    pg_cpu = postgres_cpu(pg)
    client_cpu = time.process_time()
    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for conn in conns:
            nursery.start_soon(client, conn)
    load.wall = time.perf_counter() - started
    result = Throughput(
        len(servers),
        load,
        sum(s.cpu() for s in servers) - server_cpu,
        postgres_cpu(pg) - pg_cpu,
        time.process_time() - client_cpu,
    )
    for conn in conns:
        await conn.aclose()
    return result


# -- failover --------------------------------------------------------------------------------


@attrs.define
class Failover:
    tasks: int = 0
    first: float = float("nan")  # seconds from the kill to the first task waiting on B
    last: float = float("nan")
    finished: int = 0
    lost: int = 0
    twice: int = 0
    errors: Counter[str] = attrs.Factory(Counter)
    problems: list[str] = attrs.Factory(list)


async def _json(conn: Http, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = b"" if body is None else json.dumps(body).encode()
    status, text = await conn.request(method, path, data)
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text.decode("utf-8", "replace")


async def _pending(conn: Http, task_id: str) -> dict[str, Any] | None:
    status, body = await _json(conn, "GET", f"{API}/{task_id}/confirmations")
    if status != 200 or not body["pending"]:
        return None
    return body["pending"][0]


async def failover_phase(a: Server, b: Server, n: int, cycles: int, seconds: float) -> Failover:
    result = Failover(tasks=n)
    on_a = (await connected(a.address, 1))[0]
    on_b = (await connected(b.address, 1))[0]
    ids: list[str] = []
    body = {"input": "failover goal", "additional_input": {"autonomous": True}}
    for _ in range(n):
        status, task = await _json(on_a, "POST", API, body)
        if status != 200:
            raise RuntimeError(f"create on A: HTTP {status}: {task}")
        ids.append(task["task_id"])

    async def wait_pending(conn: Http, task_id: str, cycle: int) -> dict[str, Any]:
        while True:
            pending = await _pending(conn, task_id)
            if pending is not None and pending.get("cycle") == cycle:
                return pending
            await trio.sleep(0.02)

    # On A: approve each task's first write, then wait until it waits for its second.
    with trio.fail_after(seconds):
        for task_id in ids:
            pending = await wait_pending(on_a, task_id, 1)
            status, answer = await _json(
                on_a,
                "POST",
                f"{API}/{task_id}/confirmations/{pending['id']}",
                {"decision": "approve"},
            )
            if status != 200:
                result.errors[f"approve on A: HTTP {status}: {answer}"] += 1
        for task_id in ids:
            await wait_pending(on_a, task_id, 2)
    await on_a.aclose()
    a.process.send_signal(signal.SIGKILL)
    killed = time.perf_counter()
    a.process.wait()

    # On B: the time until each task waits again, then approve until all have finished.
    waiting: set[str] = set()
    done: set[str] = set()
    with trio.move_on_after(seconds):
        while len(done) < n:
            for task_id in ids:
                if task_id in done:
                    continue
                pending = await _pending(on_b, task_id)
                if pending is not None:
                    if task_id not in waiting:
                        waiting.add(task_id)
                        elapsed = time.perf_counter() - killed
                        if len(waiting) == 1:
                            result.first = elapsed
                        if len(waiting) == n:
                            result.last = elapsed
                    status, answer = await _json(
                        on_b,
                        "POST",
                        f"{API}/{task_id}/confirmations/{pending['id']}",
                        {"decision": "approve"},
                    )
                    if status not in (200, 409):
                        result.errors[f"approve on B: HTTP {status}: {answer}"] += 1
                    continue
                status, task = await _json(on_b, "GET", f"{API}/{task_id}")
                if status == 200 and task.get("status") == "finished":
                    done.add(task_id)
                elif status == 200 and task.get("status") in ("failed", "cancelled"):
                    done.add(task_id)
                    result.problems.append(f"task {task_id} ended {task.get('status')}")
            await trio.sleep(0.02)

    # Check: steps 1..cycles, one command event per cycle.
    for task_id in ids:
        status, task = await _json(on_b, "GET", f"{API}/{task_id}")
        if status == 200 and task.get("status") == "finished":
            result.finished += 1
        else:
            result.problems.append(f"task {task_id}: {status} {str(task)[:200]}")
        status, steps = await _json(on_b, "GET", f"{API}/{task_id}/steps?page_size=1000")
        numbers = [int(s["step_id"]) for s in steps.get("steps", [])] if status == 200 else []
        expected = list(range(1, cycles + 1))
        if numbers != expected:
            result.lost += len(set(expected) - set(numbers))
            result.problems.append(f"task {task_id}: steps {numbers}, expected 1..{cycles}")
        if task_id not in done:
            continue
        with trio.move_on_after(30) as scope:
            events = await bench.read_events(on_b, task_id, lambda: None)
        if scope.cancelled_caught:
            result.problems.append(f"task {task_id}: its event stream did not end")
            await on_b.aclose()
            continue
        commands = Counter(e.data.get("cycle") for e in events if e.kind == "command")
        twice = sum(count - 1 for count in commands.values() if count > 1)
        result.twice += twice
        if twice or len(commands) != cycles:
            result.problems.append(
                f"task {task_id}: command events by cycle {dict(commands)}, expected one "
                f"in each of 1..{cycles}"
            )
    await on_b.aclose()
    return result


# -- the run ---------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--clients", type=int, help="concurrent clients (200; quick: 10)")
    parser.add_argument("--tasks", type=int, help="tasks per client (3; quick: 1)")
    parser.add_argument("--cycles", type=int, default=10, help="cycles per task (10)")
    parser.add_argument(
        "--failover-tasks", type=int, help="autonomous tasks killed over (20; quick: 3)"
    )
    parser.add_argument(
        "--memory",
        choices=sorted(MEMORY_CONFIG),
        default="store",
        help="where memories go: the store's database (memory_postgres, default) or sqlite",
    )
    args = parser.parse_args()
    global MEMORY
    MEMORY = args.memory
    quick = args.quick
    clients = args.clients or (10 if quick else 200)
    tasks = args.tasks or (1 if quick else 3)
    n_failover = args.failover_tasks or (3 if quick else 20)
    failover_cycles = 4  # 3 writes (each approved), then finish
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the servers inherit it

    root = Path(tempfile.mkdtemp(prefix="autogpt-bench-replicas-"))
    os.chmod(root, 0o755)
    errors = 0
    try:
        with running_server() as pg:
            replay = bench.recording(root / "replay.json", args.cycles)
            short = bench.recording(root / "failover.json", failover_cycles)
            runs: list[Throughput] = []
            for count in (1, 2):
                home = root / f"steps-{count}"
                home.mkdir()
                store = pg.new_database()
                servers: list[Server] = []
                try:
                    for i in range(count):
                        servers.append(
                            serve_replica(
                                root, home, replay, store, f"steps-{count}-{i}", "fs.read, fs.write"
                            )
                        )
                    runs.append(trio.run(steps_phase, servers, pg, clients, tasks, args.cycles))
                finally:
                    for server in servers:
                        server.stop()

            home = root / "failover"
            home.mkdir()
            store = pg.new_database()
            a = serve_replica(root, home, short, store, "failover-a", "fs.read")
            b = serve_replica(root, home, short, store, "failover-b", "fs.read")
            try:
                failover = trio.run(
                    failover_phase, a, b, n_failover, failover_cycles, 60 if quick else 300
                )
            finally:
                if a.process.poll() is None:
                    a.stop()
                b.stop()

        print(
            f"throughput: {clients} clients x {tasks} tasks x {args.cycles} steps (create, then "
            "POST steps until is_last), store on PostgreSQL"
        )
        for run in runs:
            load = run.load
            print(
                f"  {run.servers} process{'es' if run.servers > 1 else ''}: "
                f"{run.rate:,.0f} steps per second; step latency p50 "
                f"{percentile(load.latencies, 0.5) * 1000:.0f} ms, p99 "
                f"{percentile(load.latencies, 0.99) * 1000:.0f} ms; "
                f"tasks finished {load.finished} of {clients * tasks}"
            )
            print(
                f"    step answers repeating the previous step (no cycle run; the client "
                f"steps again): {load.stale} ({load.stale / max(load.steps, 1):.0%} of steps)"
            )
            print(
                f"    CPU: servers {run.server_cpu:.1f} s "
                f"({run.server_cpu / load.wall:.2f} cores), "
                f"PostgreSQL {run.pg_cpu:.1f} s ({run.pg_cpu / load.wall:.2f} cores), "
                f"load generator {run.client_cpu:.1f} s ({run.client_cpu / load.wall:.2f} "
                f"cores); together "
                f"{(run.server_cpu + run.pg_cpu + run.client_cpu) / load.wall:.2f} of "
                f"{os.cpu_count()} cores; per step: servers "
                f"{run.server_cpu / max(load.steps, 1) * 1e6:,.0f} us, PostgreSQL "
                f"{run.pg_cpu / max(load.steps, 1) * 1e6:,.0f} us"
            )
            errors += bench.show_errors(load) + clients * tasks - load.finished
        one, two = runs
        print(
            f"  2 processes / 1 process: {two.rate / one.rate:.2f}x steps per second "
            f"(goal >= 1.5 on this {os.cpu_count()}-core machine)"
        )

        print(
            f"failover: {n_failover} autonomous tasks on A ({failover_cycles} cycles each, every "
            "write approved), A killed with SIGKILL while each waits for its 2nd approval"
        )
        print(
            f"  kill -> first task waiting again on B: {failover.first:.2f} s; all "
            f"{n_failover}: {failover.last:.2f} s (B looks every {ORPHAN_SECONDS:g} s)"
        )
        print(
            f"  = {failover.first / LEASE_PERIOD:.2f}x / {failover.last / LEASE_PERIOD:.2f}x the "
            f"lease period ({LEASE_PERIOD:g} s; lease expiry {LEASE_EXPIRY:g} s: a dead holder "
            "on this machine is seen gone at once)"
        )
        print(
            f"  tasks finished: {failover.finished} of {n_failover}; cycles lost: "
            f"{failover.lost}; commands run twice: {failover.twice}"
        )
        for message, count in failover.errors.most_common(5):
            print(f"  ERROR x{count}: {message}")
        for problem in failover.problems[:10]:
            print(f"  PROBLEM: {problem}")
        errors += sum(failover.errors.values()) + len(failover.problems)
        errors += n_failover - failover.finished + failover.lost + failover.twice
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if errors:
        print(f"{errors} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
