"""File commands confined to the session's workspace directory.

Every command resolves its path with ``Workspace`` (``autogpt_core.agent._workspace``): a path
that leads outside the workspace raises ``WorkspaceError``, which the core turns into an
observation for the model.

Replacing, appending to or deleting a file this session did not create (or that someone
else has moved over a name the session used) needs ``fs.overwrite``, asked for
per call (``CommandContext.ask_permission``), so that a file's instructions cannot lead the
agent into destroying the user's files unasked. The files a session created are recorded
in ``created/SESSION_ID.json`` under the plugin's data directory: outside the workspace,
where the agent cannot edit the record, and on disk, so that a session resumed after a
crash still knows them.

``read_file`` and ``list_files`` only do disk I/O: on a small file or directory (by one
``stat``, up to ``_INLINE_BYTES``) it takes microseconds, less than a worker-thread round
trip, so it runs inline; a larger one runs in a worker thread. ``write_file``,
``append_file`` and ``delete_file`` may wait for a person's answer, which must not hold one
of the worker threads every session shares for as long as the person takes; their disk
I/O runs in a worker thread.
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
    hookimpl,
)

#: ``list_files`` shows at most this many names, the prompt at most ``_PROMPT_FILES``.
_LIST_LIMIT = 200
_PROMPT_FILES = 20

# read_file and list_files run inline on a file or directory that stat says is this big
# at most (a directory's size grows with its entries): microseconds of work.
_INLINE_BYTES = 64 * 1024

_OVERWRITE = "fs.overwrite"
_GRANT = f"grant {_OVERWRITE} under permissions.grant in the config"


@hookimpl
def register_commands(register: RegisterCommand) -> None:
    register("read_file", read_file)
    register("write_file", write_file)
    register("append_file", append_file)
    register("list_files", list_files)
    register("delete_file", delete_file)


async def read_file(ctx: CommandContext, path: str) -> str:
    """Return the text of the file ``path``."""
    ws = _workspace(ctx.session)
    if _small(ws, path):
        text = ws.read_text(path)
    else:
        text = await trio.to_thread.run_sync(ws.read_text, path, abandon_on_cancel=True)
    return text if text else f"{path} is empty."


# Per session: the workspace path it was made for, and the Workspace (whose root is resolved
# once, not at every command: a mkdir, a realpath and a stat each time).
_workspaces: dict[str, tuple[Path, Workspace]] = {}


def _workspace(session: SessionView) -> Workspace:
    """The session's ``Workspace``, made again if its directory went away meanwhile (so
    that it is created again, as on first use)."""
    cached = _workspaces.get(session.id)
    if cached is None or cached[0] != session.workspace or not os.path.isdir(cached[1].root):
        cached = _workspaces[session.id] = (session.workspace, Workspace(session.workspace))
    return cached[1]


def _small(ws: Workspace, path: str) -> bool:
    """Whether ``path`` is small enough to read or list inline (see ``_INLINE_BYTES``).
    Raises ``WorkspaceError`` for a path outside the workspace; anything stat cannot say
    is left to the worker thread, which reports it."""
    try:
        return os.stat(ws.resolve(path)).st_size <= _INLINE_BYTES
    except OSError:
        return False


async def write_file(ctx: CommandContext, path: str, content: str) -> str | CommandResult:
    """Replace (or create) the file ``path`` with ``content``."""
    ws = _workspace(ctx.session)
    name, kind, refused = await _may_change(ctx, ws, path, "write_file", "replace")
    if refused is not None:
        return refused
    created = _created(ctx)

    def write() -> int:
        # exclusive: a file that appeared since the check above is not replaced unasked.
        count = ws.write_text(path, content, exclusive=kind is None)
        # Replacing makes a new file (a new inode): the record follows it.
        created.add(name, _inode(ws, path))
        return count

    count = await trio.to_thread.run_sync(write, abandon_on_cancel=True)
    return f"Wrote {_characters(count)} to {path}."


# Appending to a file the session did not create asks too: it cannot destroy what is
# there, but added lines change what a file does (a .git/config hook, a config file's
# permissions), which is the user's to allow.
async def append_file(ctx: CommandContext, path: str, content: str) -> str | CommandResult:
    """Append ``content`` to the file ``path``."""
    ws = _workspace(ctx.session)
    name, kind, refused = await _may_change(ctx, ws, path, "append_file", "change")
    if refused is not None:
        return refused
    created = _created(ctx)

    def append() -> int:
        count = ws.append_text(path, content, exclusive=kind is None)
        if kind is None:
            created.add(name, _inode(ws, path))
        return count

    count = await trio.to_thread.run_sync(append, abandon_on_cancel=True)
    return f"Appended {_characters(count)} to {path}."


async def _may_change(
    ctx: CommandContext, ws: Workspace, path: str, command: str, verb: str
) -> tuple[str, str | None, CommandResult | None]:
    """``path``'s name and kind, and the refusal if it is a file this session did not
    create (or that was replaced since by someone else) and ``fs.overwrite`` is not given."""
    # Inline, not in a thread: resolving and one lstat take microseconds.
    name, kind, inode = _existing(ws, path)
    if kind != "file" or _created(ctx).owns(name, inode):
        return name, kind, None
    # The name is quoted as repr() does, so that no character of it can act on a terminal.
    reason = f"{command} would {verb} {name!r}, which this session did not create"
    if await ctx.ask_permission(_OVERWRITE, reason):
        return name, kind, None
    fix = "write to a new file instead" if verb != "delete" else "leave it in place"
    return (
        name,
        kind,
        CommandResult.failure(
            f"{command} did not {verb} {name!r}: this session did not create it, and "
            f"doing so needs permission {_OVERWRITE}, which was not given. Fix: {fix}, "
            f"or {_GRANT}."
        ),
    )


async def list_files(ctx: CommandContext, path: str = ".") -> str:
    """List the directory ``path``, one name a line."""
    ws = _workspace(ctx.session)
    if _small(ws, path):
        return _listing(ws, path)
    return await trio.to_thread.run_sync(_listing, ws, path, abandon_on_cancel=True)


def _listing(ws: Workspace, path: str) -> str:
    names = ws.list_dir(path, limit=_LIST_LIMIT + 1)
    where = "The workspace" if path in (".", "./", "") else path
    if not names:
        return f"{where} is empty."
    lines = names[:_LIST_LIMIT]
    if len(names) > _LIST_LIMIT:
        lines.append(f"... (only the first {_LIST_LIMIT} names are shown)")
    return "\n".join(lines)


async def delete_file(ctx: CommandContext, path: str) -> str | CommandResult:
    """Delete the file (or empty directory) ``path``."""
    ws = _workspace(ctx.session)
    # Only files ask: an empty directory holds nothing to lose (a full one is refused), and
    # write_file creates directories without recording them.
    name, _, refused = await _may_change(ctx, ws, path, "delete_file", "delete")
    if refused is not None:
        return refused
    created = _created(ctx)

    def delete() -> None:
        ws.delete(path)
        # A file of that name made later by someone else must not count as the session's.
        created.discard(name)

    await trio.to_thread.run_sync(delete, abandon_on_cancel=True)
    return f"Deleted {path}."


_SOURCE = "names of the files in the workspace"
# Per session: (the workspace directory's mtime, the resource line, the file names or "").
_prompt_cache: dict[str, tuple[int, str, str]] = {}


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
        cached = _prompt_cache[session.id] = (mtime, *_describe(session))
    prompt.add_resource(cached[1])
    if cached[2]:
        # File names are text from outside (anyone can name a file "ignore your goal"):
        # data, outside the system message, never woven into the plugin's own words.
        prompt.add_data(cached[2], _SOURCE)


@hookimpl
def session_end(session: SessionView) -> None:
    _prompt_cache.pop(session.id, None)
    _workspaces.pop(session.id, None)
    # The file stays: an interrupted session can be resumed, and loads it again.
    _records.pop(session.id, None)


def _describe(session: SessionView) -> tuple[str, str]:
    """The resource line, and the names of the files (one a line; "" if there are none)."""
    # The session's Workspace when its commands made one (resolving a root costs a
    # realpath of every name in it); a new one, not creating the directory, otherwise.
    cached = _workspaces.get(session.id)
    try:
        ws = (
            cached[1]
            if cached is not None and cached[0] == session.workspace
            else Workspace(session.workspace, create=False)
        )
        names = ws.list_dir(recursive=True, limit=_PROMPT_FILES + 1)
    except WorkspaceError:
        names = []  # not created yet: the first write creates it
    if not names:
        contents = "It is empty."
    elif len(names) > _PROMPT_FILES:
        contents = f"The first {_PROMPT_FILES} of its files are listed after the goal."
    else:
        contents = "Its files are listed after the goal."
    # The listing is refreshed when the workspace directory itself changes; a file changed
    # deeper down shows after the next change at the top (list_files is always current).
    resource = (
        "A workspace directory for your files. The file commands take paths relative to "
        f"it, e.g. 'notes/todo.txt'. {contents}"
    )
    return resource, "\n".join(names[:_PROMPT_FILES])


def _characters(count: int) -> str:
    return "1 character" if count == 1 else f"{count} characters"


# --- what this session created ------------------------------------------------------


def _existing(ws: Workspace, path: str) -> tuple[str, str | None, int | None]:
    """``path``'s workspace-relative name; whether it is a "file", a "directory" or None;
    and its inode.

    The name is that of the resolved path, so that every spelling of a file (and a link to
    it, which the operations follow) is the same name.
    """
    real = ws.resolve(path)
    name = "/".join(real.relative_to(ws.root).parts) or "."
    try:
        info = os.lstat(real)
    except (FileNotFoundError, NotADirectoryError):
        return name, None, None
    except OSError:
        # Cannot tell: count it as a file, so that replacing or deleting it asks (the
        # operation itself then reports the error, if it persists).
        return name, "file", None
    return name, "directory" if stat.S_ISDIR(info.st_mode) else "file", info.st_ino


def _inode(ws: Workspace, path: str) -> int | None:
    return _existing(ws, path)[2]


@attrs.define
class _Created:
    """The files one session created: name -> inode as the session left it; saved to
    ``file`` (None: memory only).

    The inode tells the session's file from one the user moved over that name since
    (``mv mine.txt report.txt``), which is the user's again.
    """

    file: Path | None
    names: dict[str, int | None]
    # A command abandoned at its timeout may still finish in its thread while the next runs.
    lock: threading.Lock = attrs.field(factory=threading.Lock)

    def owns(self, name: str, inode: int | None) -> bool:
        recorded = self.names.get(name, -1)
        return inode is not None and recorded == inode

    def add(self, name: str, inode: int | None) -> None:
        with self.lock:
            if self.names.get(name, -1) != inode:
                self.names[name] = inode
                self._save()

    def discard(self, name: str) -> None:
        with self.lock:
            if name in self.names:
                del self.names[name]
                self._save()

    def _save(self) -> None:
        if self.file is None:
            return
        try:
            write_atomically(
                self.file, json.dumps({"created": dict(sorted(self.names.items()))}) + "\n"
            )
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


def _load(file: Path | None) -> dict[str, int | None]:
    # Small, and read once per session per process: inline is fine. An unreadable or
    # damaged record counts as empty: the only cost is a question too many.
    if file is None:
        return {}
    try:
        names = json.loads(file.read_text(encoding="utf-8")).get("created")
    except (OSError, ValueError, AttributeError, RecursionError):
        return {}
    if not isinstance(names, dict):
        return {}  # an older record, without inodes: ask again rather than guess
    return {
        name: inode
        for name, inode in names.items()
        if isinstance(name, str) and isinstance(inode, int) and not isinstance(inode, bool)
    }


def _file_stem(session_id: str) -> str:
    """``session_id`` if it is a safe file name (ids the core makes are), else its hash."""
    if re.fullmatch(r"[A-Za-z0-9_-]{1,100}", session_id):
        return session_id
    return hashlib.sha256(session_id.encode("utf-8", "surrogatepass")).hexdigest()
