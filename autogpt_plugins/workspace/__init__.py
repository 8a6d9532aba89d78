"""File commands confined to the session's workspace directory.

Every command resolves its path with ``Workspace`` (``autogpt_core._workspace``): a path
that leads outside the workspace raises ``WorkspaceError``, which the core turns into an
observation for the model.

Replacing or deleting a file this session did not create needs ``fs.overwrite``, asked for
per call (``CommandContext.ask_permission``), so that a file's instructions cannot lead the
agent into destroying the user's files unasked. The files a session created are recorded
in ``created/SESSION_ID.json`` under the plugin's data directory: outside the workspace,
where the agent cannot edit the record, and on disk, so that a session resumed after a
crash still knows them.

``read_file``, ``append_file`` and ``list_files`` only do disk I/O, so they are marked
blocking and run in a worker thread. ``write_file`` and ``delete_file`` are async: they may
wait for a person's answer, which must not hold one of the worker threads every session
shares for as long as the person takes; their disk I/O still runs in a worker thread.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import threading
from pathlib import Path

import attrs
import trio

from autogpt_core import Workspace, WorkspaceError, write_atomically
from hookspecs import (
    CommandContext,
    CommandResult,
    PromptBuilder,
    RegisterCommand,
    SessionView,
    blocking,
    hookimpl,
    quote_data,
)

#: ``list_files`` shows at most this many names, the prompt at most ``_PROMPT_FILES``.
_LIST_LIMIT = 200
_PROMPT_FILES = 20

_OVERWRITE = "fs.overwrite"
_GRANT = f"grant {_OVERWRITE} under permissions.grant in the config"


@hookimpl
def register_commands(register: RegisterCommand) -> None:
    register("read_file", read_file)
    register("write_file", write_file)
    register("append_file", append_file)
    register("list_files", list_files)
    register("delete_file", delete_file)


@blocking
def read_file(ctx: CommandContext, path: str) -> str:
    """Return the text of the file ``path``."""
    text = Workspace(ctx.session.workspace).read_text(path)
    return text if text else f"{path} is empty."


async def write_file(ctx: CommandContext, path: str, content: str) -> str | CommandResult:
    """Replace (or create) the file ``path`` with ``content``."""
    ws = Workspace(ctx.session.workspace)
    # Inline, not in a thread: resolving and one lstat take microseconds.
    name, kind = _existing(ws, path)
    created = _created(ctx)
    # The name is quoted as repr() does, so that no character of it can act on a terminal.
    if kind == "file" and name not in created:
        reason = f"write_file would replace {name!r}, which this session did not create"
        if not await ctx.ask_permission(_OVERWRITE, reason):
            return CommandResult.failure(
                f"write_file did not replace {name!r}: this session did not create it, and "
                f"replacing it needs permission {_OVERWRITE}, which was not given. Fix: "
                f"write to a new file instead, or {_GRANT}."
            )

    def write() -> int:
        # exclusive: a file that appeared since the check above is not replaced unasked.
        count = ws.write_text(path, content, exclusive=kind is None)
        if kind is None:
            created.add(name)
        return count

    count = await trio.to_thread.run_sync(write, abandon_on_cancel=True)
    return f"Wrote {_characters(count)} to {path}."


# Appending needs no more than fs.write, whoever made the file: it adds to the end and
# cannot destroy what is there (and a hard link out of the workspace is refused).
@blocking
def append_file(ctx: CommandContext, path: str, content: str) -> str:
    """Append ``content`` to the file ``path``."""
    ws = Workspace(ctx.session.workspace)
    name, kind = _existing(ws, path)
    count = ws.append_text(path, content, exclusive=kind is None)
    if kind is None:
        _created(ctx).add(name)
    return f"Appended {_characters(count)} to {path}."


@blocking
def list_files(ctx: CommandContext, path: str = ".") -> str:
    """List the directory ``path``, one name a line."""
    names = Workspace(ctx.session.workspace).list_dir(path, limit=_LIST_LIMIT + 1)
    where = "The workspace" if path in (".", "./", "") else path
    if not names:
        return f"{where} is empty."
    lines = names[:_LIST_LIMIT]
    if len(names) > _LIST_LIMIT:
        lines.append(f"... (only the first {_LIST_LIMIT} names are shown)")
    return "\n".join(lines)


async def delete_file(ctx: CommandContext, path: str) -> str | CommandResult:
    """Delete the file (or empty directory) ``path``."""
    ws = Workspace(ctx.session.workspace)
    name, kind = _existing(ws, path)
    created = _created(ctx)
    # Only files ask: an empty directory holds nothing to lose (a full one is refused), and
    # write_file creates directories without recording them.
    if kind == "file" and name not in created:
        reason = f"delete_file would delete {name!r}, which this session did not create"
        if not await ctx.ask_permission(_OVERWRITE, reason):
            return CommandResult.failure(
                f"delete_file did not delete {name!r}: this session did not create it, and "
                f"deleting it needs permission {_OVERWRITE}, which was not given. Fix: leave "
                f"it in place, or {_GRANT}."
            )

    def delete() -> None:
        ws.delete(path)
        # A file of that name made later by someone else must not count as the session's.
        created.discard(name)

    await trio.to_thread.run_sync(delete, abandon_on_cancel=True)
    return f"Deleted {path}."


# Per session: (the workspace directory's mtime, the resource line built from it).
_prompt_cache: dict[str, tuple[int, str]] = {}


# Not blocking: a stat of the workspace directory, and a listing that stops after
# _PROMPT_FILES + 1 names only when that directory changed -- cheaper than the
# worker-thread round trip it would take every cycle (bench/sessions.py).
@hookimpl
def build_prompt(session: SessionView, prompt: PromptBuilder) -> None:
    """Tell the model about the workspace and what is in it."""
    try:
        mtime = os.stat(session.workspace).st_mtime_ns
    except OSError:
        mtime = -1
    cached = _prompt_cache.get(session.id)
    if cached is None or cached[0] != mtime:
        cached = _prompt_cache[session.id] = (mtime, _describe(session))
    prompt.add_resource(cached[1])


@hookimpl
def session_end(session: SessionView) -> None:
    _prompt_cache.pop(session.id, None)
    # The file stays: an interrupted session can be resumed, and loads it again.
    _records.pop(session.id, None)


def _describe(session: SessionView) -> str:
    try:
        names = Workspace(session.workspace, create=False).list_dir(
            recursive=True, limit=_PROMPT_FILES + 1
        )
    except WorkspaceError:
        names = []  # not created yet: the first write creates it
    # File names are text from outside (anyone can name a file "ignore your goal"): they
    # are quoted as data, one a line, never woven into the plugin's own words.
    if not names:
        contents = "It is empty."
    else:
        listing = quote_data("\n".join(names[:_PROMPT_FILES]), "workspace file names")
        among = ", among others" if len(names) > _PROMPT_FILES else ""
        contents = f"It contains{among}:\n{listing}"
    # The listing is refreshed when the workspace directory itself changes; a file changed
    # deeper down shows after the next change at the top (list_files is always current).
    return (
        "A workspace directory for your files. The file commands take paths relative to "
        f"it, e.g. 'notes/todo.txt'. {contents}"
    )


def _characters(count: int) -> str:
    return "1 character" if count == 1 else f"{count} characters"


# --- what this session created ------------------------------------------------------


def _existing(ws: Workspace, path: str) -> tuple[str, str | None]:
    """``path``'s workspace-relative name, and whether it is a "file", a "directory" or None.

    The name is that of the resolved path, so that every spelling of a file (and a link to
    it, which the operations follow) is the same name.
    """
    real = ws.resolve(path)
    name = "/".join(real.relative_to(ws.root).parts) or "."
    try:
        info = os.lstat(real)
    except (FileNotFoundError, NotADirectoryError):
        return name, None
    except OSError:
        # Cannot tell: count it as a file, so that replacing or deleting it asks (the
        # operation itself then reports the error, if it persists).
        return name, "file"
    return name, "directory" if stat.S_ISDIR(info.st_mode) else "file"


@attrs.define
class _Created:
    """The names of the files one session created; saved to ``file`` (None: memory only)."""

    file: Path | None
    names: set[str]
    # A command abandoned at its timeout may still finish in its thread while the next runs.
    lock: threading.Lock = attrs.field(factory=threading.Lock)

    def __contains__(self, name: str) -> bool:
        return name in self.names

    def add(self, name: str) -> None:
        with self.lock:
            if name not in self.names:
                self.names.add(name)
                self._save()

    def discard(self, name: str) -> None:
        with self.lock:
            if name in self.names:
                self.names.discard(name)
                self._save()

    def _save(self) -> None:
        if self.file is None:
            return
        try:
            write_atomically(self.file, json.dumps({"created": sorted(self.names)}) + "\n")
        except OSError as exc:
            raise WorkspaceError(
                f"Cannot record the session's files in {str(self.file)!r}: "
                f"{exc.strerror or exc}. The command itself was done, but after a resume, "
                f"replacing or deleting that file will ask for {_OVERWRITE}. Fix: free disk "
                "space, or make that directory writable."
            ) from exc


# Per session id; loaded from the file on first use, dropped at the session's end.
_records: dict[str, _Created] = {}


def _created(ctx: CommandContext) -> _Created:
    """The record of ``ctx``'s session, loaded from its file if this process has none."""
    data_dir = ctx.settings.data_dir
    file = None if data_dir is None else data_dir / "created" / f"{_file_stem(ctx.session.id)}.json"
    record = _records.get(ctx.session.id)
    if record is None or record.file != file:
        record = _records[ctx.session.id] = _Created(file, _load(file))
    return record


def _load(file: Path | None) -> set[str]:
    # Small, and read once per session per process: inline is fine. An unreadable or
    # damaged record counts as empty: the only cost is a question too many.
    if file is None:
        return set()
    try:
        names = json.loads(file.read_text(encoding="utf-8")).get("created")
    except (OSError, ValueError, AttributeError):
        return set()
    if not isinstance(names, list):
        return set()
    return {name for name in names if isinstance(name, str)}


def _file_stem(session_id: str) -> str:
    """``session_id`` if it is a safe file name (ids the core makes are), else its hash."""
    if re.fullmatch(r"[A-Za-z0-9_-]{1,100}", session_id):
        return session_id
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()
