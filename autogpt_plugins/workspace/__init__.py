"""File commands confined to the session's workspace directory.

Every command resolves its path with ``Workspace`` (``autogpt_core._workspace``): a path
that leads outside the workspace raises ``WorkspaceError``, which the core turns into an
observation for the model. The commands do disk I/O, so they are marked blocking and run
in a worker thread.
"""

from __future__ import annotations

import os

from autogpt_core import Workspace, WorkspaceError
from hookspecs import (
    CommandContext,
    PromptBuilder,
    RegisterCommand,
    SessionView,
    blocking,
    hookimpl,
)

#: ``list_files`` shows at most this many names, the prompt at most ``_PROMPT_FILES``.
_LIST_LIMIT = 200
_PROMPT_FILES = 20


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


@blocking
def write_file(ctx: CommandContext, path: str, content: str) -> str:
    """Replace (or create) the file ``path`` with ``content``."""
    count = Workspace(ctx.session.workspace).write_text(path, content)
    return f"Wrote {_characters(count)} to {path}."


@blocking
def append_file(ctx: CommandContext, path: str, content: str) -> str:
    """Append ``content`` to the file ``path``."""
    count = Workspace(ctx.session.workspace).append_text(path, content)
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


@blocking
def delete_file(ctx: CommandContext, path: str) -> str:
    """Delete the file (or empty directory) ``path``."""
    Workspace(ctx.session.workspace).delete(path)
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


def _describe(session: SessionView) -> str:
    try:
        names = Workspace(session.workspace, create=False).list_dir(
            recursive=True, limit=_PROMPT_FILES + 1
        )
    except WorkspaceError:
        names = []  # not created yet: the first write creates it
    if not names:
        contents = "It is empty."
    elif len(names) > _PROMPT_FILES:
        contents = f"It contains, among others: {', '.join(names[:_PROMPT_FILES])}."
    else:
        contents = f"It contains: {', '.join(names)}."
    # The listing is refreshed when the workspace directory itself changes; a file changed
    # deeper down shows after the next change at the top (list_files is always current).
    return (
        "A workspace directory for your files. The file commands take paths relative to "
        f"it, e.g. 'notes/todo.txt'. {contents}"
    )


def _characters(count: int) -> str:
    return "1 character" if count == 1 else f"{count} characters"
