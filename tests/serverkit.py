"""A real ``autogpt serve`` (hypercorn on 127.0.0.1, an ephemeral port) for HTTP tests.

``running(...)`` starts the server in a thread of its own (its own ``trio.run``), so that
tests, hypothesis examples among them, talk to it with a plain ``httpx.Client`` over real
sockets. ``spec_validator(name)`` checks a response against the Agent Protocol document.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import httpx
import jsonschema
import trio
import yaml

from autogpt_core._config import load_config
from autogpt_core.agent._options import RunOptions
from autogpt_core.server._serve import ServeOptions, ServerHandle, serve

SPEC = (
    Path(__file__).resolve().parents[1]
    / "autogpt_core"
    / "server"
    / "spec"
    / "agent-protocol-v1.openapi.yml"
)
TOKENS = {"alice": "alice-token-0123456789abcdef", "bob": "bob-token-0123456789abcdef"}
API = "/ap/v1/agent/tasks"


def recording(path: Path, *calls: tuple[str, Mapping[str, Any]]) -> Path:
    """A replay recording whose model makes ``calls`` in turn, one per cycle."""
    exchanges = [
        {
            "response": {
                "content": f"Step {i + 1}: {name}.",
                "tool_calls": [{"id": f"call_{i}", "name": name, "arguments": dict(args)}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5},
            }
        }
        for i, (name, args) in enumerate(calls)
    ]
    path.write_text(
        json.dumps({"format": "autogpt-replay", "version": 1, "exchanges": exchanges}), "utf-8"
    )
    return path


#: A task that writes a file (needs ``fs.write``) and finishes.
WRITE_AND_FINISH = (
    ("write_file", {"path": "out.txt", "content": "hello from the agent\n"}),
    ("finish", {"result": "wrote out.txt"}),
)


@attrs.define
class Running:
    handle: ServerHandle
    url: str
    token: trio.lowlevel.TrioToken
    data_dir: Path

    def client(self, who: str | None = "alice", **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {TOKENS[who]}"} if who else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60, **kwargs)

    def call_async_pair(self, fn: Any, first: Any, second: Any) -> list[Any]:
        """``fn(first)`` and ``fn(second)`` from two threads at once: both requests are on
        their way before either is answered (as two consoles' clicks can be)."""
        barrier = threading.Barrier(2)

        def run(arg: Any) -> Any:
            barrier.wait(30)
            return fn(arg)

        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            return list(pool.map(run, [first, second]))

    def call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` in the server's own trio thread (e.g. to look at its tasks)."""
        return trio.from_thread.run_sync(fn, *args, trio_token=self.token)


def write_config(home: Path, text: str = "", *, grant: Sequence[str] | None = None) -> Path:
    """A config with the two test tokens, replay tolerant of tool lists, and ``text``."""
    path = home / "config.yaml"
    lines = [
        "server: {tokens: {alice: ALICE_TEST_TOKEN, bob: BOB_TEST_TOKEN}, admins: [alice]}",
        "plugins: {settings: {llm_replay: {strict: false}}}",
    ]
    if grant is not None:
        lines.append(f"permissions: {{grant: [{', '.join(grant)}]}}")
    path.write_text("\n".join(lines) + "\n" + text, "utf-8")
    return path


@contextlib.contextmanager
def running(
    home: Path,
    replay: Path,
    *,
    config_text: str = "",
    grant: Sequence[str] | None = None,
    **options: Any,
) -> Iterator[Running]:
    """Serve with the replay provider playing ``replay`` until the block ends."""
    os.environ["ALICE_TEST_TOKEN"] = TOKENS["alice"]
    os.environ["BOB_TEST_TOKEN"] = TOKENS["bob"]
    config = load_config(write_config(home, config_text, grant=grant))
    serve_options = ServeOptions(port=0, **{"drain_seconds": 10.0, **options})
    started: dict[str, Any] = {}
    ready = threading.Event()
    failure: list[BaseException] = []

    async def main() -> None:
        async def report(task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
            await serve(
                config,
                serve_options,
                RunOptions(llm=f"replay:{replay}"),
                task_status=task_status,
            )

        async with trio.open_nursery() as nursery:
            started["handle"] = await nursery.start(report)
            started["token"] = trio.lowlevel.current_trio_token()
            ready.set()

    def thread() -> None:
        try:
            trio.run(main)
        except BaseException as exc:  # noqa: BLE001 - reported to the test below
            failure.append(exc)
        finally:
            ready.set()

    worker = threading.Thread(target=thread, name="autogpt-serve", daemon=True)
    worker.start()
    ready.wait(60)
    if failure:
        raise failure[0]
    handle: ServerHandle = started["handle"]
    server = Running(handle, handle.urls[0], started["token"], config.data_dir)
    try:
        yield server
    finally:
        with contextlib.suppress(trio.RunFinishedError):
            server.call(handle.stop)
        worker.join(60)
        assert not worker.is_alive(), "the server did not stop"
        if failure:
            raise failure[0]


# -- the Agent Protocol document, as JSON Schema ------------------------------------------


def _converted(node: Any) -> Any:
    """OpenAPI 3.0 schema → JSON Schema: ``nullable`` becomes a union with null, and
    component references point into ``$defs``."""
    if isinstance(node, list):
        return [_converted(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: _converted(v) for k, v in node.items() if k not in ("nullable", "example")}
    if "$ref" in out:
        out["$ref"] = out["$ref"].replace("#/components/schemas/", "#/$defs/")
    if node.get("nullable"):
        return {"anyOf": [out, {"type": "null"}]}
    return out


def spec_validator(name: str) -> jsonschema.Draft202012Validator:
    document = yaml.safe_load(SPEC.read_text("utf-8"))
    defs = _converted(document["components"]["schemas"])
    return jsonschema.Draft202012Validator({"$defs": defs, "$ref": f"#/$defs/{name}"})


def conforms(name: str, value: Any) -> None:
    """Raise if ``value`` is not a valid ``name`` (Task, Step, …) of the spec."""
    spec_validator(name).validate(value)
    if name in ("Task", "Step"):
        # The spec allows null for additional_input; clients break on it: always {}.
        assert value["additional_input"] == {}, value


def sse_events(
    response: httpx.Response, *, until: str | Sequence[str] = "finished"
) -> Iterator[tuple[str | None, str, dict[str, Any]]]:
    """Yield ``(id, kind, data)`` from an event stream until an event of a kind in ``until``."""
    stops = {until} if isinstance(until, str) else set(until)
    event_id: str | None = None
    kind = "message"
    data = ""
    for line in response.iter_lines():
        if line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("event: "):
            kind = line[7:]
        elif line.startswith("data: "):
            data += line[6:]
        elif line == "":
            if data:
                yield event_id, kind, json.loads(data)
                if kind in stops:
                    return
            event_id, kind, data = None, "message", ""
