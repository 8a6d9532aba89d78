"""The HTTP API: Agent Protocol v1 and its documented extensions (docs/server.md).

Every answer is JSON (but downloads and event streams); every error is
``{"message": …}`` with the status: 401 without a valid token, 404 for what does not exist
or is another token's, 409 for what the task's state does not allow, 413 past the size
limits, 422 naming the field that is wrong, 503 (with ``Retry-After``) past
``--max-sessions``.
"""

from __future__ import annotations

import json
import math
import os
import posixpath
import stat
import sys
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from importlib import resources
from typing import Any
from urllib.parse import quote

import attrs
import trio
from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._errors import WorkspaceError
from ..agent._workspace import Workspace
from ..store._records import ArtifactRecord, CycleRecord, SessionRecord, SessionStatus
from ._auth import Tokens
from ._plugins import plugin_routes
from ._tasks import ENDED, POLL_SECONDS, TaskError, Tasks

PREFIX = "/ap/v1/agent"
MAX_PAGE_SIZE = 100
#: The spec's paging parameters are int32s: larger numbers are malformed.
MAX_INT32 = 2**31 - 1
MAX_DOWNLOAD = 256 * 1024 * 1024
KEEPALIVE_SECONDS = 15.0


class Limits:
    """Body size limits: ``upload`` for artifact uploads, ``body`` for everything else."""

    def __init__(self, body: int = 1024 * 1024, upload: int = 50 * 1024 * 1024) -> None:
        self.body = body
        self.upload = upload


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"message": message}, status_code=status, headers=headers)


class SizeLimit:
    """ASGI middleware: 413 for a body over the limit, whether its length was announced
    (refused before it is read) or not (refused as it is read)."""

    def __init__(self, app: ASGIApp, limits: Limits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        upload = scope["method"] == "POST" and scope["path"].endswith("/artifacts")
        limit = self.limits.upload if upload else self.limits.body
        what = "an upload" if upload else "a request body"
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    announced = int(value)
                except ValueError:
                    announced = -1
                if announced < 0:
                    await _error(400, "Content-Length is not a number")(scope, receive, send)
                    return
                if announced > limit:
                    await _too_large(what, limit)(scope, receive, send)
                    return
        seen = 0

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    # Raised inside the app, whose HTTPException handler answers it: an
                    # exception of our own would reach Starlette's 500 first.
                    raise HTTPException(413, _too_large_text(what, limit), headers=_CLOSE)
            return message

        await self.app(scope, limited_receive, send)


def _too_large_text(what: str, limit: int) -> str:
    return f"{what} may be at most {limit} bytes (see autogpt serve --help)"


#: A body refused before it was read leaves the rest of it on the connection: close it.
_CLOSE = {"Connection": "close"}


def _too_large(what: str, limit: int) -> JSONResponse:
    return _error(413, _too_large_text(what, limit), _CLOSE)


class Api:
    """The routes, bound to the server's tasks and tokens (``tokens=None``: no auth)."""

    def __init__(self, tasks: Tasks, tokens: Tokens | None, limits: Limits) -> None:
        self.tasks = tasks
        self.tokens = tokens
        self.limits = limits
        self._artifact_locks: dict[str, trio.Lock] = {}
        self._flights: dict[tuple[str, int], _Flight] = {}

    @property
    def store(self) -> Any:
        return self.tasks.store

    def mask(self, text: str) -> str:
        return self.tasks.runtime.redactor.text(text)

    # -- plumbing -------------------------------------------------------------------

    def app(self) -> ASGIApp:
        def route(
            path: str, handler: Callable[..., Awaitable[Response]], methods: list[str]
        ) -> Route:
            return Route(path, self._guarded(handler), methods=methods)

        t = f"{PREFIX}/tasks"
        routes = [
            Route("/", self.console, methods=["GET"]),
            Route("/console.js", self.console, methods=["GET"]),
            Route("/console.css", self.console, methods=["GET"]),
            route(t, self.create_task, ["POST"]),
            route(t, self.list_tasks, ["GET"]),
            route(t + "/{task_id}", self.get_task, ["GET"]),
            route(t + "/{task_id}/steps", self.execute_step, ["POST"]),
            route(t + "/{task_id}/steps", self.list_steps, ["GET"]),
            route(t + "/{task_id}/steps/{step_id}", self.get_step, ["GET"]),
            route(t + "/{task_id}/artifacts", self.upload_artifact, ["POST"]),
            route(t + "/{task_id}/artifacts", self.list_artifacts, ["GET"]),
            route(t + "/{task_id}/artifacts/{artifact_id}", self.download_artifact, ["GET"]),
            # Extensions (docs/server.md).
            route(t + "/{task_id}/run", self.run_task, ["POST"]),
            route(t + "/{task_id}/cancel", self.cancel_task, ["POST"]),
            route(t + "/{task_id}/events", self.events, ["GET"]),
            route(t + "/{task_id}/confirmations", self.list_pending, ["GET"]),
            route(t + "/{task_id}/confirmations/{pending_id}", self.answer, ["POST"]),
            *plugin_routes(self, route),  # docs/server-plugins.md
        ]

        async def http_error(request: Request, exc: Exception) -> Response:
            assert isinstance(exc, HTTPException)
            message = {404: "no such endpoint", 405: "method not allowed here"}.get(
                exc.status_code, str(exc.detail)
            )
            headers = dict(exc.headers or {})
            if exc.status_code == 405:
                # RFC 9110: a 405 names the methods the path has, over all its routes
                # (Starlette's own names only those of the first route that matched).
                allowed = {
                    method
                    for r in routes
                    if r.matches(request.scope)[0] != Match.NONE
                    for method in r.methods or ()
                }
                headers["Allow"] = ", ".join(sorted(allowed))
            text = f"{message}: {request.method} {request.url.path}"
            return _error(exc.status_code, text, headers)

        app = Starlette(routes=routes, exception_handlers={HTTPException: http_error})
        return SizeLimit(app, self.limits)

    def _guarded(
        self, handler: Callable[[Request, str | None], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def guarded(request: Request) -> Response:
            owner = None
            if self.tokens is not None:
                owner = self.tokens.bearer(request.headers.getlist("authorization"))
                if owner is None:
                    return _error(
                        401,
                        "a valid bearer token is needed: send 'Authorization: Bearer TOKEN' "
                        "(autogpt serve printed where its token is)",
                        {"WWW-Authenticate": 'Bearer realm="autogpt"'},
                    )
            try:
                return await handler(request, owner)
            except TaskError as exc:
                headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after else None
                return _error(exc.status, self.mask(exc.message), headers)
            except ClientDisconnect:
                # The client went away mid-request (or the server is stopping): nobody reads
                # an answer; whatever the request had started stays stored as it was.
                return Response(status_code=400)
            except HTTPException:
                raise  # Starlette's own answers (413 while reading the body, say)
            except Exception as exc:
                # A bug of ours: the client gets a message in the shape of every other
                # error, the operator the traceback, masked (stderr); the server goes on.
                text = "".join(traceback.format_exception(exc))
                print(
                    f"autogpt serve: {request.method} {request.url.path}: {self.mask(text)}",
                    file=sys.stderr,
                    flush=True,
                )
                return _error(500, "internal error: the server's log says more")

        return guarded

    async def _json(self, request: Request) -> dict[str, Any]:
        body = await request.body()
        if not body.strip():
            return {}
        try:
            value = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise TaskError(422, f"the body is not valid JSON: {exc}") from None
        except RecursionError:
            raise TaskError(422, "the body is JSON nested too deeply to read") from None
        except ValueError as exc:  # a number of more digits than Python reads
            raise TaskError(422, f"the body holds a value that cannot be read: {exc}") from None
        if not isinstance(value, dict):
            raise TaskError(422, f"the body must be a JSON object, not {type(value).__name__}")
        return value

    @staticmethod
    def _paging(request: Request) -> tuple[int, int]:
        """``current_page`` and ``page_size``: any int32 from 1 is valid (the spec sets no
        maximum); a page holds at most ``MAX_PAGE_SIZE`` items, and its pagination says so."""
        found = []
        for name, default in (("current_page", 1), ("page_size", 10)):
            text = request.query_params.get(name)
            if text is None:
                found.append(default)
                continue
            try:
                value = int(text)
            except ValueError:
                value = 0
            if not 1 <= value <= MAX_INT32:
                raise TaskError(422, f"{name}: must be a whole number from 1 to {MAX_INT32}")
            found.append(value)
        return found[0], min(found[1], MAX_PAGE_SIZE)

    @staticmethod
    def _pagination(total: int, page: int, size: int) -> dict[str, int]:
        return {
            "total_items": total,
            "total_pages": math.ceil(total / size),
            "current_page": page,
            "page_size": size,
        }

    @staticmethod
    def _input_fields(body: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
        text = body.get("input")
        if text is not None and not isinstance(text, str):
            raise TaskError(422, f"input: must be a string or null, not {type(text).__name__}")
        extra = body.get("additional_input")
        if extra is None:
            extra = {}
        if not isinstance(extra, dict):
            raise TaskError(422, f"additional_input: must be an object, not {type(extra).__name__}")
        return text, extra

    # -- tasks ----------------------------------------------------------------------

    async def console(self, request: Request) -> Response:
        """The web console's page, script and style (no token needed: they hold no data)."""
        name = request.url.path.strip("/") or "console.html"
        kind = _STATIC[name.rpartition(".")[2]]
        body = resources.files(__package__).joinpath("static", name).read_bytes()
        return Response(body, media_type=kind, headers=_STATIC_HEADERS)

    async def _task_json(self, record: SessionRecord) -> dict[str, Any]:
        artifacts = await self._artifacts(record)
        return {
            "task_id": record.id,
            "input": record.goal,
            "additional_input": {},
            "artifacts": [_artifact_json(a) for a in artifacts],
            "status": self.tasks.status(record),
            "result": record.result if record.status in ENDED else None,
            "created_at": record.created_at,
        }

    async def create_task(self, request: Request, owner: str | None) -> Response:
        text, extra = self._input_fields(await self._json(request))
        if text is None or not text.strip():
            raise TaskError(422, "input: the task's goal is missing; give it as 'input'")
        autonomous = extra.get("autonomous", False)
        continuous = extra.get("continuous", False)
        for name, value in (("autonomous", autonomous), ("continuous", continuous)):
            if not isinstance(value, bool):
                raise TaskError(422, f"additional_input.{name}: must be true or false")
        if autonomous and len(self.tasks.live) >= self.tasks.max_sessions:
            raise TaskError(
                503, "this server runs as many tasks as it may; try again shortly", retry_after=5
            )
        task_id = await self.tasks.create(text, owner, continuous=continuous, autonomous=autonomous)
        record = await self.store.get_session(task_id)
        if autonomous:
            try:
                await self.tasks.start(record, "auto")
            except TaskError:
                # Refused (503): the client learns of no task, so none is left behind.
                await self.tasks.discard(record)
                raise
        return JSONResponse(await self._task_json(record))

    async def list_tasks(self, request: Request, owner: str | None) -> Response:
        page, size = self._paging(request)
        records, total = await self.tasks.list(owner, offset=(page - 1) * size, limit=size)
        tasks = [await self._task_json(r) for r in records]
        return JSONResponse({"tasks": tasks, "pagination": self._pagination(total, page, size)})

    async def get_task(self, request: Request, owner: str | None) -> Response:
        record = await self.tasks.get(request.path_params["task_id"], owner)
        return JSONResponse(await self._task_json(record))

    async def run_task(self, request: Request, owner: str | None) -> Response:
        record = await self.tasks.get(request.path_params["task_id"], owner)
        async with self.tasks.lock(record.id):
            await self.tasks.start(record, "auto")
        return JSONResponse(await self._task_json(await self.store.get_session(record.id)))

    async def cancel_task(self, request: Request, owner: str | None) -> Response:
        record = await self.tasks.get(request.path_params["task_id"], owner)
        live = self.tasks.live.get(record.id)
        if live is None:
            raise TaskError(409, f"task {record.id} is not running")
        woken = self.tasks.notifier.event(record.id)
        self.tasks.cancel(record.id)
        while not live.ended:
            await woken.wait()
            woken = self.tasks.notifier.event(record.id)
        return JSONResponse(await self._task_json(await self.store.get_session(record.id)))

    # -- steps ----------------------------------------------------------------------

    async def execute_step(self, request: Request, owner: str | None) -> Response:
        record = await self.tasks.get(request.path_params["task_id"], owner)
        text, extra = self._input_fields(await self._json(request))
        reply: Any = text
        if "decision" in extra:
            reply = {"decision": extra["decision"], "reason": extra.get("reason")}
        live, cycle, completed = await self.tasks.step(record, reply)
        if live is not None and live.pending is not None and not completed:
            return JSONResponse(self._pending_step(record.id, live.pending, text))
        cycles = await self.store.load_cycles(record.id, after=max(cycle - 1, 0))
        record = await self.store.get_session(record.id)
        ended = live is None and record.status in ENDED
        if not cycles or not completed:
            # The task ended (or stopped) without completing a cycle in this step.
            return JSONResponse(await self._end_step(record, cycles, text, ended))
        step = await self._step_json(record, cycles[-1], is_last=ended, given=text)
        return JSONResponse(step)

    def _pending_step(self, task_id: str, pending: Any, given: str | None) -> dict[str, Any]:
        if pending.kind == "confirmation":
            data = pending.data
            output = (
                f"Waiting for your confirmation: command {data['command']} of plugin "
                f"{data['plugin']} needs {', '.join(data['missing_permissions'])}, which is not "
                f"granted. Arguments: {json.dumps(data['arguments'], ensure_ascii=False)}. "
                "Answer with the next step's input: 'approve', 'always' or 'deny'."
            )
        else:
            output = (
                f"The agent asks: {pending.data['question']} (answer with the next step's input)"
            )
        return {
            "task_id": task_id,
            "step_id": str(pending.cycle),
            "name": pending.data.get("command") or "question",
            "status": "running",
            "input": given,
            "additional_input": {},
            "output": output,
            "additional_output": {"waiting_for": pending.json()},
            "artifacts": [],
            "is_last": False,
        }

    async def _end_step(
        self, record: SessionRecord, cycles: list[CycleRecord], given: str | None, ended: bool
    ) -> dict[str, Any]:
        if cycles:
            return await self._step_json(record, cycles[-1], is_last=ended, given=given)
        done = await self.store.last_completed_cycle(record.id)
        status = self.tasks.status(record)
        return {
            "task_id": record.id,
            "step_id": str(done + 1),
            "name": None,
            "status": "completed",
            "input": given,
            "additional_input": {},
            "output": record.result or f"the task stopped ({status})",
            "additional_output": {"task_status": status},
            "artifacts": [],
            "is_last": ended,
        }

    async def _step_json(
        self, record: SessionRecord, cycle: CycleRecord, *, is_last: bool, given: str | None
    ) -> dict[str, Any]:
        artifacts = [a for a in await self._artifacts(record) if a.cycle == cycle.number]
        plan = cycle.plan if isinstance(cycle.plan, dict) else {}
        command = cycle.command if isinstance(cycle.command, dict) else None
        result = cycle.result if isinstance(cycle.result, dict) else None
        lines = [str(plan.get("text") or "").strip()]
        if command is not None:
            args = json.dumps(command.get("arguments", {}), ensure_ascii=False, sort_keys=True)
            lines.append(f"{command.get('command')}({args})")
        if result is not None:
            lines.append(
                f"-> {result.get('output')}"
                if result.get("ok")
                else f"-> Error: {result.get('error')}"
            )
        elif plan.get("error"):
            lines.append(f"-> {plan['error']}")
        # A provisional cycle of a running task: its command runs now (its record is there
        # so that a crash does not run it twice); otherwise its outcome is unknown.
        running = cycle.provisional and str(record.status) == "running"
        return {
            "task_id": record.id,
            "step_id": str(cycle.number),
            "name": command.get("command") if command else None,
            "status": "running" if running else "completed",
            "input": given,
            "additional_input": {},
            "output": "\n".join(line for line in lines if line),
            "additional_output": {
                "thought": plan.get("text"),
                "command": command,
                "result": result,
                "usage": dict(cycle.usage),
            },
            "artifacts": [_artifact_json(a) for a in artifacts],
            "is_last": is_last,
        }

    async def list_steps(self, request: Request, owner: str | None) -> Response:
        record = await self.tasks.get(request.path_params["task_id"], owner)
        page, size = self._paging(request)
        cycles = await self.store.load_cycles(record.id)
        ended = record.status in ENDED and record.id not in self.tasks.live
        chosen = cycles[(page - 1) * size : page * size]
        steps = [
            await self._step_json(
                record, c, is_last=ended and c.number == cycles[-1].number, given=None
            )
            for c in chosen
        ]
        return JSONResponse(
            {"steps": steps, "pagination": self._pagination(len(cycles), page, size)}
        )

    async def get_step(self, request: Request, owner: str | None) -> Response:
        record = await self.tasks.get(request.path_params["task_id"], owner)
        step_id = request.path_params["step_id"]
        number = int(step_id) if step_id.isdigit() and len(step_id) < 10 else 0
        cycles = await self.store.load_cycles(record.id, after=max(number - 1, 0)) if number else []
        if not cycles or cycles[0].number != number:
            raise TaskError(404, f"task {record.id} has no step with id {step_id!r}")
        last = await self.store.last_completed_cycle(record.id)
        ended = record.status in ENDED and record.id not in self.tasks.live
        return JSONResponse(
            await self._step_json(record, cycles[0], is_last=ended and number == last, given=None)
        )

    # -- artifacts ------------------------------------------------------------------

    async def _artifacts(self, record: SessionRecord) -> list[ArtifactRecord]:
        """The task's artifacts, after recording the files the agent made since the last
        look (credited to the last completed cycle). One look per task at a time: two
        could both record a new file."""
        async with self._artifact_lock(record.id):
            return await self._scan_artifacts(record)

    def _artifact_lock(self, task_id: str) -> trio.Lock:
        lock = self._artifact_locks.get(task_id)
        if lock is None:
            lock = self._artifact_locks[task_id] = trio.Lock()
        return lock

    async def _scan_artifacts(self, record: SessionRecord) -> list[ArtifactRecord]:
        known = await self._all_artifacts(record.id)
        paths = {a.relative_path for a in known}

        def scan() -> list[str]:
            try:
                names = Workspace(record.workspace, create=False).list_dir(
                    recursive=True, limit=2000
                )
            except WorkspaceError:
                return []
            # Regular files only: a link (even one inside) is no artifact of the task.
            return [
                n
                for n in names
                if not n.endswith(("/", ".autogpt-tmp"))
                and stat.S_ISREG(os.lstat(record.workspace / n).st_mode)
            ]

        new = [n for n in await trio.to_thread.run_sync(scan) if n not in paths]
        if new:
            cycle = await self.store.last_completed_cycle(record.id)
            for name in new:
                known.append(
                    await self.store.add_artifact(
                        record.id, name, agent_created=True, cycle=cycle or None
                    )
                )
        return known

    async def _all_artifacts(self, task_id: str) -> list[ArtifactRecord]:
        found: list[ArtifactRecord] = []
        while True:
            page = await self.store.list_artifacts(task_id, offset=len(found), limit=500)
            found.extend(page.items)
            if not page.items or len(found) >= page.total:
                return found

    async def list_artifacts(self, request: Request, owner: str | None) -> Response:
        record = await self.tasks.get(request.path_params["task_id"], owner)
        page, size = self._paging(request)
        artifacts = await self._artifacts(record)
        chosen = artifacts[(page - 1) * size : page * size]
        return JSONResponse(
            {
                "artifacts": [_artifact_json(a) for a in chosen],
                "pagination": self._pagination(len(artifacts), page, size),
            }
        )

    async def upload_artifact(self, request: Request, owner: str | None) -> Response:
        record = await self.tasks.get(request.path_params["task_id"], owner)
        if not request.headers.get("content-type", "").startswith("multipart/form-data"):
            raise TaskError(422, "file: send the artifact as multipart/form-data with a 'file'")
        try:
            form = await request.form(max_files=1, max_fields=10)
        except HTTPException as exc:
            if exc.status_code == 413:
                raise
            raise TaskError(422, f"the form cannot be read: {exc.detail}") from None
        try:
            path, data = await _uploaded(form)
        finally:
            await form.close()
        workspace = Workspace(record.workspace)
        # Under the scan's lock: a look between the write and the record would take the
        # upload for a file the agent made.
        async with self._artifact_lock(record.id):
            try:
                await trio.to_thread.run_sync(workspace.write_bytes, path, data)
                relative = workspace.relative(path)
            except WorkspaceError as exc:
                raise TaskError(422, f"relative_path: {exc}") from None
            known = {a.relative_path: a for a in await self._all_artifacts(record.id)}
            artifact = known.get(relative) or await self.store.add_artifact(
                record.id, relative, agent_created=False
            )
        return JSONResponse(_artifact_json(artifact))

    async def download_artifact(self, request: Request, owner: str | None) -> Response:
        record = await self.tasks.get(request.path_params["task_id"], owner)
        artifact_id = request.path_params["artifact_id"]
        artifact = await self.store.get_artifact(record.id, artifact_id)
        if artifact is None:
            raise TaskError(404, f"task {record.id} has no artifact with id {artifact_id!r}")
        workspace = Workspace(record.workspace, create=False)
        try:
            data = await trio.to_thread.run_sync(
                lambda: workspace.read_bytes(artifact.relative_path, max_bytes=MAX_DOWNLOAD)
            )
        except WorkspaceError as exc:
            raise TaskError(404, f"artifact {artifact_id} cannot be read: {exc}") from None
        return Response(
            data,
            media_type="application/octet-stream",
            headers={"Content-Disposition": _attachment(artifact.file_name)},
        )

    # -- live -----------------------------------------------------------------------

    async def list_pending(self, request: Request, owner: str | None) -> Response:
        record = await self.tasks.get(request.path_params["task_id"], owner)
        live = self.tasks.live.get(record.id)
        if (live is None or live.elsewhere) and self.tasks.shared_store:
            # Another server runs it (a shared store): that one says what it waits on.
            try:
                answer = await self.tasks.elsewhere(record.id, "list")
            except TaskError as exc:
                if exc.status != 404:
                    raise
                return JSONResponse({"pending": []})
            return JSONResponse({"pending": answer.get("pending") or []})
        pending = [live.pending.json()] if live is not None and live.pending is not None else []
        return JSONResponse({"pending": pending})

    async def answer(self, request: Request, owner: str | None) -> Response:
        record = await self.tasks.get(request.path_params["task_id"], owner)
        body = await self._json(request)
        live = self.tasks.live.get(record.id)
        if (live is None or live.elsewhere) and self.tasks.shared_store:
            answer = await self.tasks.elsewhere(
                record.id, "answer", pending_id=request.path_params["pending_id"], reply=body
            )
            status = int(answer.get("status", 500))
            if status != 200:
                raise TaskError(status, str(answer.get("message") or "refused"))
            return JSONResponse({"answered": answer.get("answered")})
        if live is None:
            raise TaskError(404, f"task {record.id} is not running, so it waits on nothing")
        pending = live.pending
        self.tasks.answer(live, request.path_params["pending_id"], body)
        assert pending is not None
        return JSONResponse({"answered": pending.json()})

    async def events(self, request: Request, owner: str | None) -> Response:
        record = await self.tasks.get(request.path_params["task_id"], owner)
        given = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
        try:
            after = int(given)
        except ValueError:
            after = -1
        if not 0 <= after < 2**63:
            raise TaskError(422, "Last-Event-ID: must be the id of an event") from None
        return StreamingResponse(
            self._stream(record.id, after),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def _encoded_events(self, task_id: str, after: int) -> list[tuple[int, str]]:
        """The task's stored events after ``after``, each as its event-stream text.

        The watchers of one task all wake at once, and most ask for the same events: one
        of them reads the store and encodes, the others wait for its result (a watcher
        that was cancelled meanwhile leaves the others to read for themselves).
        """
        key = (task_id, after)
        while True:
            flight = self._flights.get(key)
            if flight is None:
                break
            await flight.done.wait()
            if flight.result is not None:
                return flight.result
        flight = self._flights[key] = _Flight()
        try:
            events = await self.store.list_events(task_id, after_id=after, limit=500)
            flight.result = [
                (
                    event.id,
                    _sse(
                        event.kind,
                        {"cycle": event.cycle, "timestamp": event.timestamp, **event.data},
                        event_id=event.id,
                    ),
                )
                for event in events
            ]
            return flight.result
        finally:
            del self._flights[key]
            flight.done.set()

    async def _waiting_elsewhere(self, task_id: str) -> dict[str, Any] | None:
        """What the task waits on in the server that runs it, if another one does."""
        try:
            answer = await self.tasks.elsewhere(task_id, "list")
        except TaskError:
            return None
        pending = answer.get("pending") or []
        return pending[0] if pending and isinstance(pending[0], dict) else None

    async def _stream(self, task_id: str, after: int) -> AsyncIterator[str]:
        """The task's stored events after ``after`` (each with its id, to resume from),
        what it waits on as it starts waiting, and ``finished`` once it ended."""
        shown = None
        shown_elsewhere: Any = None
        spoke = trio.current_time()  # when the stream last sent anything
        yield "retry: 2000\n\n"
        while not self.tasks.closing:
            woken = self.tasks.notifier.event(task_id)
            events = await self._encoded_events(task_id, after)
            if events:
                spoke = trio.current_time()
                after = events[-1][0]
                # One chunk for what one look found: one send, not one per event.
                yield "".join(text for _, text in events)
                continue
            live = self.tasks.live.get(task_id)
            pending = live.pending if live is not None else None
            if pending is not None and pending is not shown:
                shown = pending
                yield _sse(f"{pending.kind}_needed", pending.json())
            if live is None and self.tasks.shared_store and self.tasks.listening:
                # Another server may run it: what it waits on is known there alone.
                waiting = await self._waiting_elsewhere(task_id)
                if waiting is not None and waiting.get("id") != shown_elsewhere:
                    shown_elsewhere = waiting.get("id")
                    yield _sse(f"{waiting.get('kind')}_needed", waiting)
            if live is None:
                record = await self.store.get_session(task_id)
                if record.status in ENDED:
                    # Its last events may have been committed after the look above (by
                    # another server, or just before this one parked it): every event is
                    # stored before the session is marked ended, so one more look now
                    # finds all that is left.
                    while rest := await self._encoded_events(task_id, after):
                        after = rest[-1][0]
                        yield "".join(text for _, text in rest)
                    yield _sse("finished", {"status": str(record.status), "result": record.result})
                    return
            # Another process's writes wake this stream through the store's notifications
            # (listen_for_changes); while there are none, look every POLL_SECONDS.
            wait = KEEPALIVE_SECONDS
            if self.tasks.shared_store and live is None and not self.tasks.listening:
                wait = POLL_SECONDS
            with trio.move_on_after(wait):
                await woken.wait()
            if trio.current_time() - spoke >= KEEPALIVE_SECONDS:
                spoke = trio.current_time()
                yield ": keep-alive\n\n"


async def _uploaded(form: Any) -> tuple[str, bytes]:
    """The workspace path and content of an upload form (``file``, ``relative_path``)."""
    upload = form.get("file")
    if not isinstance(upload, UploadFile):
        raise TaskError(422, "file: missing; send the artifact's content as the 'file' part")
    directory = form.get("relative_path") or ""
    if not isinstance(directory, str):
        raise TaskError(422, "relative_path: must be text")
    name = upload.filename or ""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise TaskError(
            422,
            f"file: the part's file name {name!r} is not a plain file name; name the file "
            "(like notes.txt) and give its directory as relative_path",
        )
    if directory.startswith(("/", "\\")) or "\\" in directory:
        raise TaskError(
            422,
            f"relative_path: {directory!r} must be a directory inside the task's workspace, "
            "written with '/', like data/in",
        )
    directory = directory.strip("/")
    return (posixpath.join(directory, name) if directory else name), await upload.read()


@attrs.define(eq=False)
class _Flight:
    """One store read of a task's events that several watchers wait on."""

    done: trio.Event = attrs.field(factory=trio.Event)
    result: list[tuple[int, str]] | None = None


def _attachment(name: str) -> str:
    """A Content-Disposition for downloading ``name``: an ASCII fallback, and the name
    itself percent-encoded (RFC 6266); control characters never reach the header."""
    shown = "".join(c for c in name if c.isprintable())
    fallback = "".join(c if c.isascii() and c not in '"\\' else "_" for c in shown) or "file"
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(shown, safe='')}"


def _sse(kind: str, data: Mapping[str, Any], *, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return f"{head}event: {kind}\ndata: {body}\n\n"


def _artifact_json(artifact: ArtifactRecord) -> dict[str, Any]:
    directory = posixpath.dirname(artifact.relative_path)
    return {
        "artifact_id": artifact.id,
        "agent_created": artifact.agent_created,
        "file_name": artifact.file_name,
        "relative_path": directory,
    }


_STATIC = {
    "html": "text/html; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8",
}
# The page runs its own script and nothing else: no inline script, no other origin.
_STATIC_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
    "base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}

__all__ = ["Api", "Limits", "SessionStatus"]
