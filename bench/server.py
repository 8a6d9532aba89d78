"""``autogpt serve`` under load, against a bare hypercorn endpoint measured in the same run.

One command: ``python bench/server.py`` (``--quick``: a smoke run of a few clients;
``--clients``, ``--tasks``, ``--cycles``, ``--requests``, ``--sse-tasks``, ``--subscribers``
change sizes).

Every server runs in a subprocess of its own, so that its CPU time (``/proc/PID/stat``:
every thread) and peak RSS (``VmHWM``) are its own; the load generator is this process, a
raw HTTP/1.1 client on trio with one keep-alive connection per client, whose CPU time is
printed next to the server's (on 2 cores the two compete: their sum shows the ceiling).

1. Baseline: a tiny ASGI app answering every request with a fixed JSON body, served by
   ``hypercorn.trio.serve`` with the same hypercorn settings as ``autogpt serve``;
   ``--clients`` concurrent clients each POST the same request a step is (measured before
   and after the server's run; the better is the baseline).
2. ``autogpt serve`` (``--llm replay:FILE --no-strict``, the default plugins, a token in
   ``$AUTOGPT_TOKEN``): ``--clients`` concurrent clients each create a task and POST
   ``…/steps`` until ``is_last``, ``--tasks`` times; the recording has ``--cycles`` cycles
   (``write_file`` of a new file, then ``finish``). Printed: steps per second, step
   latency, and steps per second / the baseline's requests per second (goal >= 0.7). For
   comparison, the same clients then ``GET …/tasks/{id}`` finished tasks: the API's cost
   without a cycle.
3. Event fan-out, on a fresh ``autogpt serve``: ``--sse-tasks`` tasks are created,
   ``--subscribers`` subscribers per task open ``GET …/events`` before the tasks start,
   then each task is started autonomously (``POST …/run``). Checked: every subscriber got
   every event of its task, in order, the same as the task's whole stream read afterwards.
   Printed: delivery latency (the event's ``timestamp`` to its arrival, both wall clock on
   this machine) and the server's peak RSS (goal <= 300 MB).

Only ratios and CPU shares are headline numbers; absolute times are printed for reference.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

API = "/ap/v1/agent/tasks"
TOKEN = "bench-token-0123456789abcdef"
TICKS = os.sysconf("SC_CLK_TCK")
LISTENING = re.compile(r"listening on (http://[^\s]+)")
#: What the baseline answers: about the size of a step's answer (its JSON is ~1 KB).
BARE_BODY = json.dumps(
    {
        "task_id": "0" * 32,
        "step_id": "1",
        "name": "write_file",
        "status": "completed",
        "input": None,
        "additional_input": {},
        "output": "Step 1: write_file.\n" + "x" * 600,
        "additional_output": {},
        "artifacts": [],
        "is_last": False,
    }
).encode()


# -- the baseline: a bare hypercorn-trio endpoint ----------------------------------------


async def bare_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A fixed JSON answer to every request, after reading its body."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    while (await receive()).get("more_body"):
        pass
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(BARE_BODY)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": BARE_BODY})


async def serve_bare() -> None:
    """Serve ``bare_app`` on an ephemeral port (hypercorn configured as autogpt serve
    configures it), print where, and serve until SIGTERM/SIGINT."""
    import functools

    import hypercorn.config
    import hypercorn.trio

    config = hypercorn.config.Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    stopping = trio.Event()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            functools.partial(
                hypercorn.trio.serve,
                bare_app,  # type: ignore[arg-type]
                config,
                shutdown_trigger=stopping.wait,
            )
        )
        print(f"listening on {urls[0]}", flush=True)
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for _ in signals:
                stopping.set()
                break


# -- servers in subprocesses ----------------------------------------------------------------


@attrs.define
class Server:
    """A server subprocess: where it listens, and its CPU time and peak RSS."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path

    @classmethod
    def start(cls, argv: Sequence[str], env: dict[str, str], log: Path) -> Server:
        """Start ``argv`` with its output in ``log``; wait until it says where it listens."""
        with open(log, "wb") as out:
            process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = LISTENING.search(log.read_text("utf-8", "replace"))
            if found:
                return cls(process, found.group(1), log)
            if process.poll() is not None:
                break
            time.sleep(0.05)
        process.kill()
        raise SystemExit(f"the server did not start:\n{log.read_text('utf-8', 'replace')}")

    @property
    def address(self) -> tuple[str, int]:
        host, _, port = self.url.removeprefix("http://").rstrip("/").rpartition(":")
        return host, int(port)

    def cpu(self) -> float:
        """CPU seconds of the process so far, every thread, user and system."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / TICKS

    def peak_rss_mb(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# -- the load generator: raw HTTP/1.1 over trio ----------------------------------------------


class Closed(Exception):
    pass


class Http:
    """One keep-alive HTTP/1.1 connection; reconnects when the server closed it (hypercorn
    closes idle connections after 5 s and any after 1,000 requests)."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self.stream: trio.SocketStream | None = None
        self.buf = bytearray()
        self.arrived = 0.0  # wall clock of the last bytes received
        self.used = 0.0
        host, port = address
        self.head = (
            f"Host: {host}:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Type: application/json\r\n"
        ).encode()

    async def connect(self) -> None:
        self.stream = await trio.open_tcp_stream(*self.address)
        self.buf.clear()
        self.used = time.monotonic()

    async def aclose(self) -> None:
        if self.stream is not None:
            await self.stream.aclose()
            self.stream = None

    async def _fill(self) -> None:
        assert self.stream is not None
        data = await self.stream.receive_some(65536)
        if not data:
            raise Closed
        self.arrived = time.time()
        self.buf += data

    async def _line(self) -> bytes:
        while (end := self.buf.find(b"\r\n")) < 0:
            await self._fill()
        line = bytes(self.buf[:end])
        del self.buf[: end + 2]
        return line

    async def _exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            await self._fill()
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    async def send(self, method: str, path: str, body: bytes = b"") -> None:
        if self.stream is None or time.monotonic() - self.used > 4.0:
            await self.aclose()
            await self.connect()
        assert self.stream is not None
        length = f"Content-Length: {len(body)}\r\n\r\n".encode() if method == "POST" else b"\r\n"
        await self.stream.send_all(
            f"{method} {path} HTTP/1.1\r\n".encode() + self.head + length + body
        )

    async def response_head(self) -> tuple[int, dict[bytes, bytes]]:
        while (end := self.buf.find(b"\r\n\r\n")) < 0:
            await self._fill()
        lines = bytes(self.buf[:end]).split(b"\r\n")
        del self.buf[: end + 4]
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        return int(lines[0].split(b" ", 2)[1]), headers

    async def chunks(self) -> AsyncIterator[bytes]:
        """A chunked body, chunk by chunk (``self.arrived``: when each came)."""
        while True:
            size = int((await self._line()).split(b";")[0], 16)
            if size == 0:
                await self._line()
                return
            data = await self._exactly(size)
            await self._exactly(2)
            yield data

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        await self.send(method, path, body)
        status, headers = await self.response_head()
        if b"content-length" in headers:
            data = await self._exactly(int(headers[b"content-length"]))
        else:
            data = b"".join([chunk async for chunk in self.chunks()])
        self.used = time.monotonic()
        if headers.get(b"connection", b"").lower() == b"close":
            await self.aclose()
        return status, data


async def connected(address: tuple[str, int], n: int, at_once: int = 50) -> list[Http]:
    """``n`` open connections (``at_once`` connecting at a time: the listen backlog is 100)."""
    conns = [Http(address) for _ in range(n)]
    limit = trio.Semaphore(at_once)

    async def one(conn: Http) -> None:
        async with limit:
            await conn.connect()

    async with trio.open_nursery() as nursery:
        for conn in conns:
            nursery.start_soon(one, conn)
    return conns


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


@attrs.define
class Load:
    """One phase's load: its wall time and the CPU time of the server and of this client."""

    wall: float = 0.0
    server_cpu: float = 0.0
    client_cpu: float = 0.0
    latencies: list[float] = attrs.Factory(list)
    errors: Counter[str] = attrs.Factory(Counter)

    def cpu_line(self, what: str, per: int, unit: str) -> str:
        return (
            f"  CPU: {what} {self.server_cpu:.1f} s ({self.server_cpu / self.wall:.2f} cores, "
            f"{self.server_cpu / per * 1e6:,.0f} us per {unit}), load generator "
            f"{self.client_cpu:.1f} s ({self.client_cpu / self.wall:.2f} cores, "
            f"{self.client_cpu / per * 1e6:,.0f} us per {unit}); together "
            f"{(self.server_cpu + self.client_cpu) / self.wall:.2f} of {os.cpu_count()} cores"
        )


async def measured(server: Server, load: Load, work: Callable[[], Any]) -> None:
    """Run ``work()`` and fill in ``load``'s wall and CPU times."""
    server_cpu, client_cpu = server.cpu(), time.process_time()
    started = time.perf_counter()
    await work()
    load.wall = time.perf_counter() - started
    load.server_cpu = server.cpu() - server_cpu
    load.client_cpu = time.process_time() - client_cpu


# -- phase 1: the baseline -------------------------------------------------------------------


async def bare_phase(server: Server, clients: int, requests: int) -> Load:
    """``clients`` connections each POST a step-sized request ``requests`` times."""
    conns = await connected(server.address, clients)
    load = Load()
    path = f"{API}/{'0' * 32}/steps"

    async def client(conn: Http) -> None:
        for _ in range(requests):
            status, _body = await conn.request("POST", path, b"{}")
            if status != 200:
                load.errors[f"HTTP {status}"] += 1

    async def work() -> None:
        async with trio.open_nursery() as nursery:
            for conn in conns:
                nursery.start_soon(client, conn)

    for conn in conns[:5]:  # warm up
        await conn.request("POST", path, b"{}")
    await measured(server, load, work)
    for conn in conns:
        await conn.aclose()
    return load


# -- phase 2: steps ------------------------------------------------------------------------


@attrs.define
class Steps(Load):
    steps: int = 0
    creates: int = 0
    finished: int = 0
    create_latencies: list[float] = attrs.Factory(list)
    task_ids: list[str] = attrs.Factory(list)


async def run_task(conn: Http, load: Steps, cycles: int, record: bool = True) -> None:
    """Create a task and step it until ``is_last``."""
    started = time.perf_counter()
    status, body = await conn.request("POST", API, b'{"input": "benchmark goal"}')
    if status != 200:
        load.errors[f"create: HTTP {status}: {body[:200]!r}"] += 1
        return
    if record:
        load.create_latencies.append(time.perf_counter() - started)
        load.creates += 1
    task_id = json.loads(body)["task_id"]
    load.task_ids.append(task_id)
    path = f"{API}/{task_id}/steps"
    for _ in range(cycles + 5):
        started = time.perf_counter()
        status, body = await conn.request("POST", path, b"{}")
        if status != 200:
            load.errors[f"step: HTTP {status}: {body[:200]!r}"] += 1
            return
        if record:
            load.latencies.append(time.perf_counter() - started)
            load.steps += 1
        step = json.loads(body)
        if step["is_last"]:
            if step["name"] == "finish" and record:
                load.finished += 1
            return
    load.errors["a task took more steps than its recording has cycles"] += 1


async def steps_phase(server: Server, clients: int, tasks: int, cycles: int) -> Steps:
    conns = await connected(server.address, clients)
    load = Steps()
    warm = Steps()
    async with trio.open_nursery() as nursery:  # warm up: one task on a few connections
        for conn in conns[:4]:
            nursery.start_soon(run_task, conn, warm, cycles, False)
    load.errors.update(warm.errors)

    async def client(conn: Http) -> None:
        for _ in range(tasks):
            await run_task(conn, load, cycles)

    async def work() -> None:
        async with trio.open_nursery() as nursery:
            for conn in conns:
                nursery.start_soon(client, conn)

    await measured(server, load, work)
    for conn in conns:
        await conn.aclose()
    return load


async def reads_phase(server: Server, clients: int, requests: int, task_ids: list[str]) -> Load:
    """``clients`` connections each GET a finished task ``requests`` times: the API's
    cost without a cycle (token check, routing, the task's record and artifacts, JSON)."""
    conns = await connected(server.address, clients)
    load = Load()

    async def client(i: int, conn: Http) -> None:
        for j in range(requests):
            status, body = await conn.request("GET", f"{API}/{task_ids[(i + j) % len(task_ids)]}")
            if status != 200:
                load.errors[f"GET task: HTTP {status}: {body[:200]!r}"] += 1

    async def work() -> None:
        async with trio.open_nursery() as nursery:
            for i, conn in enumerate(conns):
                nursery.start_soon(client, i, conn)

    await measured(server, load, work)
    for conn in conns:
        await conn.aclose()
    return load


# -- phase 3: event fan-out ----------------------------------------------------------------


@attrs.define
class Event:
    id: int | None
    kind: str
    arrived: float
    data: dict[str, Any]


async def read_events(conn: Http, task_id: str, ready: Callable[[], None]) -> list[Event]:
    """The task's event stream until ``finished``; ``ready()`` once the stream is open."""
    await conn.send("GET", f"{API}/{task_id}/events")
    status, headers = await conn.response_head()
    if status != 200:
        raise RuntimeError(f"GET events: HTTP {status}")
    events: list[Event] = []
    text = ""
    is_ready = False
    async for chunk in conn.chunks():
        text += chunk.decode()
        *blocks, text = text.split("\n\n")
        for block in blocks:
            event_id, kind, data = None, "message", ""
            for line in block.split("\n"):
                if line.startswith("id: "):
                    event_id = int(line[4:])
                elif line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    data += line[6:]
                elif line.startswith("retry: ") and not is_ready:
                    is_ready = True
                    ready()
            if data:
                events.append(Event(event_id, kind, conn.arrived, json.loads(data)))
                if kind == "finished":
                    await conn.aclose()
                    return events
    raise RuntimeError("the event stream ended without 'finished'")


@attrs.define
class Fanout(Load):
    subscribers: int = 0
    events: int = 0
    delivered: int = 0
    incomplete: int = 0
    peak_rss: float = 0.0


async def sse_phase(server: Server, n_tasks: int, per_task: int) -> Fanout:
    load = Fanout(subscribers=n_tasks * per_task)
    control = await connected(server.address, min(n_tasks, 50))
    task_ids: list[str] = []
    for i in range(n_tasks):
        status, body = await control[i % len(control)].request(
            "POST", API, b'{"input": "benchmark goal"}'
        )
        if status != 200:
            raise RuntimeError(f"create: HTTP {status}: {body[:200]!r}")
        task_ids.append(json.loads(body)["task_id"])
    seen: dict[str, list[list[Event]]] = {task_id: [] for task_id in task_ids}
    subscribers = await connected(server.address, n_tasks * per_task)
    all_ready = trio.Event()
    waiting = len(subscribers)

    def ready() -> None:
        nonlocal waiting
        waiting -= 1
        if not waiting:
            all_ready.set()

    async def subscriber(conn: Http, task_id: str) -> None:
        seen[task_id].append(await read_events(conn, task_id, ready))

    async def start(conn: Http, task_ids: list[str]) -> None:
        for task_id in task_ids:
            status, body = await conn.request("POST", f"{API}/{task_id}/run")
            if status != 200:
                load.errors[f"run: HTTP {status}: {body[:200]!r}"] += 1

    async def work() -> None:
        with trio.fail_after(600):
            async with trio.open_nursery() as nursery:
                for i, conn in enumerate(subscribers):
                    nursery.start_soon(subscriber, conn, task_ids[i % n_tasks])
                await all_ready.wait()
                for i, conn in enumerate(control):
                    nursery.start_soon(start, conn, task_ids[i :: len(control)])

    await measured(server, load, work)
    load.peak_rss = server.peak_rss_mb()
    # Every subscriber's events against the task's whole stream, read now it has ended.
    for i, task_id in enumerate(task_ids):
        conn = control[i % len(control)]
        whole = await read_events(conn, task_id, lambda: None)
        ids = [(e.id, e.kind) for e in whole]
        load.events += sum(1 for e in whole if e.id is not None)
        for events in seen[task_id]:
            load.delivered += sum(1 for e in events if e.id is not None)
            if [(e.id, e.kind) for e in events] != ids:
                load.incomplete += 1
            load.latencies.extend(
                e.arrived - e.data["timestamp"] for e in events if "timestamp" in e.data
            )
    load.incomplete += load.subscribers - sum(len(v) for v in seen.values())
    for conn in control:
        await conn.aclose()
    return load


# -- the run ---------------------------------------------------------------------------------


def recording(path: Path, cycles: int) -> Path:
    """A replay recording: ``cycles - 1`` writes of a new file each, then ``finish``."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("write_file", {"path": f"notes-{i}.txt", "content": f"benchmark notes {i}\n"})
        for i in range(1, cycles)
    ]
    calls.append(("finish", {"result": "done"}))
    exchanges = [
        {
            "response": {
                "content": f"Step {i + 1}: {name}.",
                "tool_calls": [{"id": f"call_{i}", "name": name, "arguments": args}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5},
            }
        }
        for i, (name, args) in enumerate(calls)
    ]
    path.write_text(
        json.dumps({"format": "autogpt-replay", "version": 1, "exchanges": exchanges}), "utf-8"
    )
    return path


def serve_autogpt(root: Path, replay: Path, name: str) -> Server:
    home = root / name
    home.mkdir()
    (home / "config.yaml").write_text("permissions: {grant: [fs.read, fs.write]}\n", "utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOGPT_", "OPENAI_"))}
    env.update(
        AUTOGPT_CONFIG=str(home / "config.yaml"),
        AUTOGPT_DATA_DIR=str(home / "data"),
        AUTOGPT_CACHE_DIR=str(home / "cache"),
        AUTOGPT_TOKEN=TOKEN,
        NO_COLOR="1",
    )
    argv = [sys.executable, "-m", "autogpt_core", "serve", "--port", "0"]
    argv += ["--llm", f"replay:{replay}", "--no-strict", "--max-sessions", "100000"]
    return Server.start(argv, env, home / "server.log")


def bare(root: Path, clients: int, requests: int) -> Load:
    server = Server.start(
        [sys.executable, os.path.abspath(__file__), "--bare-endpoint"],
        dict(os.environ),
        root / f"bare-{time.monotonic_ns()}.log",
    )
    try:
        return trio.run(bare_phase, server, clients, requests)
    finally:
        server.stop()


def show_errors(load: Load) -> int:
    for message, count in load.errors.most_common(5):
        print(f"  ERROR x{count}: {message}")
    return sum(load.errors.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: a few clients")
    parser.add_argument("--clients", type=int, help="concurrent clients (200; quick: 10)")
    parser.add_argument("--tasks", type=int, help="tasks per client (3; quick: 1)")
    parser.add_argument("--cycles", type=int, default=10, help="cycles per task (10)")
    parser.add_argument(
        "--requests", type=int, help="baseline requests per client (100; quick: 20)"
    )
    parser.add_argument("--sse-tasks", type=int, help="autonomous tasks (100; quick: 5)")
    parser.add_argument("--subscribers", type=int, help="subscribers per task (10; quick: 4)")
    parser.add_argument("--bare-endpoint", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_endpoint:
        trio.run(serve_bare)
        return 0
    quick = args.quick
    clients = args.clients or (10 if quick else 200)
    tasks = args.tasks or (1 if quick else 3)
    requests = args.requests or (20 if quick else 100)
    sse_tasks = args.sse_tasks or (5 if quick else 100)
    per_task = args.subscribers or (4 if quick else 10)
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the servers inherit it

    n_bare, n_reads = clients * requests, clients * max(1, requests // 4)
    root = Path(tempfile.mkdtemp(prefix="autogpt-bench-server-"))
    errors = 0
    try:
        replay = recording(root / "replay.json", args.cycles)
        before = bare(root, clients, requests)
        server = serve_autogpt(root, replay, "steps")
        try:
            steps = trio.run(steps_phase, server, clients, tasks, args.cycles)
            steps_rss = server.peak_rss_mb()
            reads = trio.run(reads_phase, server, clients, n_reads // clients, steps.task_ids)
        finally:
            server.stop()
        after = bare(root, clients, requests)
        server = serve_autogpt(root, replay, "events")
        try:
            fanout = trio.run(sse_phase, server, sse_tasks, per_task)
        finally:
            server.stop()

        base = max(before, after, key=lambda load: n_bare / load.wall)
        base_rps = n_bare / base.wall
        print(f"baseline: bare hypercorn-trio endpoint, {clients} clients x {requests} requests")
        print(
            f"  {base_rps:,.0f} requests per second (the better of before/after: "
            f"{n_bare / before.wall:,.0f} / {n_bare / after.wall:,.0f})"
        )
        print("  " + base.cpu_line("endpoint", n_bare, "request").lstrip())
        errors += show_errors(before) + show_errors(after)

        steps_rate = steps.steps / steps.wall
        print(
            f"autogpt serve: {clients} clients x {tasks} tasks x {args.cycles} steps "
            f"(create, then POST steps until is_last)"
        )
        print(
            f"  {steps_rate:,.0f} steps per second = {steps_rate / base_rps:.2f}x the "
            f"baseline's requests per second (goal >= 0.7); "
            f"{(steps.steps + steps.creates) / steps.wall:,.0f} requests per second with creates"
        )
        print(
            f"  step latency p50 {percentile(steps.latencies, 0.5) * 1000:.0f} ms, "
            f"p99 {percentile(steps.latencies, 0.99) * 1000:.0f} ms; create p50 "
            f"{percentile(steps.create_latencies, 0.5) * 1000:.0f} ms, p99 "
            f"{percentile(steps.create_latencies, 0.99) * 1000:.0f} ms"
        )
        n_steps = max(steps.steps, 1)
        print(steps.cpu_line("server", n_steps, "step"))
        cpu_ratio = (steps.server_cpu / n_steps) / (base.server_cpu / n_bare)
        print(
            f"  server CPU per step = {cpu_ratio:.1f}x"
            " the endpoint's per request (the ratio the machine's other load disturbs least)"
        )
        print(
            f"  tasks finished: {steps.finished} of {clients * tasks}; "
            f"server peak RSS {steps_rss:.0f} MB"
        )
        errors += show_errors(steps) + clients * tasks - steps.finished
        print(
            f"  for comparison, GET …/tasks/{{id}} of a finished task ({clients} clients x "
            f"{n_reads // clients}): {n_reads / reads.wall:,.0f} requests per second = "
            f"{n_reads / reads.wall / base_rps:.2f}x the baseline; server "
            f"{reads.server_cpu / n_reads * 1e6:,.0f} us CPU per request"
        )
        errors += show_errors(reads)

        print(
            f"event fan-out: {sse_tasks} autonomous tasks x {per_task} subscribers "
            f"= {fanout.subscribers} streams, {args.cycles} cycles a task"
        )
        print(
            f"  {fanout.events:,} events, {fanout.delivered:,} delivered "
            f"= {fanout.delivered / fanout.wall:,.0f} per second; subscribers missing "
            f"or disagreeing with the task's whole stream: {fanout.incomplete}"
        )
        print(
            f"  delivery latency p50 {percentile(fanout.latencies, 0.5) * 1000:.0f} ms, "
            f"p99 {percentile(fanout.latencies, 0.99) * 1000:.0f} ms, "
            f"max {max(fanout.latencies, default=float('nan')) * 1000:.0f} ms"
        )
        print(f"  server peak RSS: {fanout.peak_rss:.0f} MB   (goal <= 300)")
        print(fanout.cpu_line("server", max(fanout.delivered, 1), "delivery"))
        errors += show_errors(fanout) + fanout.incomplete
        print(
            f"  (absolute, for reference: baseline {base.wall:.2f}s, steps {steps.wall:.2f}s, "
            f"fan-out {fanout.wall:.2f}s)"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if errors:
        print(f"{errors} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
