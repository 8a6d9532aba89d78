"""The workspace sandbox: a session's file commands can touch its workspace directory only.

``Workspace.resolve`` confines a path given by the model (or a user) to the root: it
resolves ``..`` and every symbolic link, dangling ones included, and refuses the path if
the result is not inside the root, as well as empty, overlong or NUL-containing paths.
Each refusal is a ``WorkspaceError`` naming the path, the problem and the fix.

Resolving first and opening later leaves a window in which a directory on the path could
be swapped for a symbolic link. Where the platform allows (Linux, macOS, the BSDs), the
file operations close it: they walk from the root one directory at a time with
``O_NOFOLLOW`` relative to the previous directory's descriptor, so a link that appears on
the way makes the operation fail instead of following it out of the root.

A hard link is another name for the same file, and no path check can tell that a name in
the workspace is also ``/etc/passwd``. Reading and appending, which would leak or change
that file, refuse a regular file with more than one link; the count is taken from the
opened descriptor, so it is about the very file the operation would use. Replacing and
deleting act on the workspace's name only, so they need no such check (see each method).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

from .._errors import WorkspaceError

DEFAULT_READ_LIMIT = 1024 * 1024
"""``read_text`` refuses files larger than this many bytes, unless told otherwise."""

# Conservative limits common to Linux and macOS: a longer name fails anyway, and
# refusing it here gives a clearer message than ENAMETOOLONG from deep inside a walk.
_NAME_MAX = 255
_PATH_MAX = 4096
# Paths longer than this are shortened in messages; the model sees the error text.
_SHOWN_MAX = 200

_FIX = "use a path relative to the workspace, e.g. 'notes/todo.txt'"

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # so opening a FIFO cannot hang
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC

# Whether we can walk directories by descriptor (POSIX); otherwise operations use paths.
_BY_FD = (
    bool(_O_NOFOLLOW and _O_DIRECTORY)
    # os.replace is missing from supports_dir_fd, but shares os.rename's implementation.
    and {os.open, os.mkdir, os.stat, os.unlink, os.rmdir, os.rename} <= os.supports_dir_fd
    and os.scandir in os.supports_fd
)


def show_path(path: object) -> str:
    """How a path appears in messages: quoted, and shortened when very long."""
    if isinstance(path, str) and len(path) > _SHOWN_MAX:
        head = repr(path[:60])
        return f"{head[:-1]}...{head[-1]} ({len(path)} characters)"
    return repr(path)


class Workspace:
    """The directory ``root`` as a sandbox (created if missing).

    Every method takes paths relative to the root (absolute paths inside it are accepted
    too) and raises ``WorkspaceError`` for a path it refuses or an operation that fails.
    Symbolic links inside the root are followed as long as they stay inside it; the
    operations act on what a link points to.
    """

    def __init__(self, root: Path | str, *, create: bool = True) -> None:
        try:
            if create:
                Path(root).mkdir(parents=True, exist_ok=True)
            real = Path(os.path.realpath(root))
            info = real.stat()
            if not stat.S_ISDIR(info.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "not a directory")
        except OSError as exc:
            raise WorkspaceError(
                f"The workspace {str(root)!r} cannot be used: {exc.strerror or exc}. "
                "Fix: give a directory that exists or can be created."
            ) from exc
        self.root = real
        # The root as the start of a path ("" for "/", so that names join as "/name"), and
        # which directory it is: a root since replaced (by a link, say) is not walked down.
        self._prefix = str(real).rstrip("/")
        self._root_id = (info.st_dev, info.st_ino)

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"

    # -- confinement --------------------------------------------------------------------

    def resolve(self, path: str) -> Path:
        """The real, absolute path ``path`` names inside the workspace.

        Raises ``WorkspaceError`` if it is empty, too long, contains a NUL character, or
        leads outside the root (an absolute path elsewhere, ``..``, a symbolic link).
        """
        if not isinstance(path, str):
            raise WorkspaceError(f"{show_path(path)} is not a path (a string); {_FIX}.")
        if not path.strip():
            raise WorkspaceError(f"The path {show_path(path)} is empty; {_FIX}.")
        if "\0" in path:
            raise _refuse(path, "contains a NUL character")
        try:
            encoded = os.fsencode(path)
        except UnicodeError:
            raise _refuse(path, "cannot be encoded as a file name on this system") from None
        if len(encoded) > _PATH_MAX:
            raise _refuse(path, f"is too long ({len(encoded)} bytes; at most {_PATH_MAX})")
        longest = max(len(part) for part in encoded.split(b"/"))
        if longest > _NAME_MAX:
            raise _refuse(path, f"has a name of {longest} bytes (at most {_NAME_MAX} per name)")

        below = self._below(path)
        if below is not None:
            return below
        candidate = os.path.join(self.root, path)  # an absolute path replaces the root
        real = Path(os.path.realpath(candidate))
        if real == self.root or real.is_relative_to(self.root):
            return real
        if not _inside(Path(os.path.normpath(candidate)), self.root):
            if os.path.isabs(path):
                raise _refuse(path, "is an absolute path outside the workspace")
            raise _refuse(path, "leads outside the workspace through '..'")
        raise _refuse(path, "goes through a symbolic link that points outside the workspace")

    def _below(self, path: str) -> Path | None:
        """What ``os.path.realpath`` makes of ``path`` under the root, found by walking
        down from the root (real already, and checked to be the same directory) with one
        ``lstat`` per name, instead of one per name of the whole absolute path; ``None``
        for a path that needs the general route: an absolute one, one with ``..``, one
        through a symbolic link, or any when the root is no longer that directory.

        Like ``realpath``, a name that cannot be looked up (missing, or under a file) is
        taken as it is.
        """
        if os.sep != "/" or path.startswith("/"):
            return None
        current = self._prefix
        try:
            info = os.lstat(current or "/")
        except OSError:
            return None
        if not stat.S_ISDIR(info.st_mode) or (info.st_dev, info.st_ino) != self._root_id:
            # The root was replaced (a link may even reuse the directory's inode number):
            # realpath's route sees where it leads.
            return None
        for part in path.split("/"):
            if not part or part == ".":
                continue
            if part == "..":
                return None
            current = f"{current}/{part}"
            try:
                mode = os.lstat(current).st_mode
            except OSError:
                continue
            if stat.S_ISLNK(mode):
                return None
        return Path(current) if current else self.root

    def relative(self, path: str) -> str:
        """``path`` as the workspace-relative, '/'-separated name it resolves to."""
        parts = self._parts(self.resolve(path))
        return "/".join(parts) if parts else "."

    # -- operations ---------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        """Whether ``path`` names something inside the workspace."""
        return os.path.lexists(self.resolve(path))

    def read_text(self, path: str, *, max_bytes: int = DEFAULT_READ_LIMIT) -> str:
        """The UTF-8 text of the file ``path``; refuses files over ``max_bytes``."""
        data = self.read_bytes(path, max_bytes=max_bytes)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise WorkspaceError(
                f"Cannot read {show_path(path)}: it is not UTF-8 text (byte {exc.start} is "
                f"invalid; a binary file?). Fix: read text files only."
            ) from None

    def read_bytes(self, path: str, *, max_bytes: int = DEFAULT_READ_LIMIT) -> bytes:
        """The content of the file ``path``; refuses files over ``max_bytes``."""
        parts = self._file_parts(path, "read")
        with _os_errors(path, "read"), self._parent(parts, create=False) as (dir_fd, name):
            fd = os.open(name, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC, dir_fd=dir_fd)
            try:
                size = _own_file_size(fd, dir_fd, name, path, "read")
                if size > max_bytes:
                    raise _too_large(path, size, max_bytes)
                data = _read_at_most(fd, max_bytes + 1)
            finally:
                os.close(fd)
        if len(data) > max_bytes:  # it grew while we read
            raise _too_large(path, len(data), max_bytes)
        return data

    def write_text(self, path: str, content: str, *, exclusive: bool = False) -> int:
        """Replace (or create) the file ``path`` with ``content``; return its length.

        Missing parent directories are created. The write is atomic: a reader sees the old
        content or the new one, never a mix, even if the process dies half-way. With
        ``exclusive``, only create: fail if ``path`` exists.
        """
        self.write_bytes(path, _encode(path, content), exclusive=exclusive)
        return len(content)

    def write_bytes(self, path: str, data: bytes, *, exclusive: bool = False) -> int:
        """Replace (or create) the file ``path`` with ``data``, as ``write_text`` does;
        return its length in bytes."""
        # No hard-link check: the new content goes to a new file that is renamed over the
        # name, so a file the name shared with another directory keeps its old content.
        parts = self._file_parts(path, "write")
        with _os_errors(path, "write"), self._parent(parts, create=True) as (dir_fd, name):
            temp = f".{uuid.uuid4().hex}.autogpt-tmp"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC
            fd = os.open(temp, flags, 0o666, dir_fd=dir_fd)
            try:
                try:
                    old = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    if stat.S_ISREG(old.st_mode):
                        # Keep the permission bits, but never set-id ones: the old file
                        # may be a hard link to a set-user-id program.
                        os.chmod(fd, stat.S_IMODE(old.st_mode) & 0o777)
                except FileNotFoundError:
                    pass
                _write_all(fd, data)
                os.fsync(fd)  # the rename must not be durable before the data
            finally:
                os.close(fd)
            try:
                # Checked as late as possible; there is no portable rename that refuses to
                # replace, so a file created in the last microseconds could still be.
                if exclusive and _lexists(name, dir_fd):
                    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST))
                os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temp, dir_fd=dir_fd)
                raise
        return len(data)

    def append_text(self, path: str, content: str, *, exclusive: bool = False) -> int:
        """Append ``content`` to the file ``path`` (created if missing); return its length.

        With ``exclusive``, only create: fail if ``path`` exists.
        """
        parts = self._file_parts(path, "append to")
        data = _encode(path, content)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC
        if exclusive:
            flags |= os.O_EXCL
        with _os_errors(path, "append to"), self._parent(parts, create=True) as (dir_fd, name):
            fd = os.open(name, flags, 0o666, dir_fd=dir_fd)
            try:
                # Appending writes into the file itself: through a hard link, into the file
                # outside the workspace.
                _own_file_size(fd, dir_fd, name, path, "append to")
                _write_all(fd, data)
            finally:
                os.close(fd)
        return len(content)

    def list_dir(
        self, path: str = ".", *, recursive: bool = False, limit: int | None = None
    ) -> list[str]:
        """The names in directory ``path``, sorted; directories end with ``/``.

        With ``recursive``, names in subdirectories too, as ``sub/name``: the shallowest
        first until ``limit`` names are found, then sorted. Links are not followed.
        """
        real = self.resolve(path)
        if real.is_file():
            raise WorkspaceError(
                f"Cannot list {show_path(path)}: it is a file, not a directory. Fix: read it "
                "with read_file, or list the directory it is in."
            )
        base = self._parts(real)
        names: list[str] = []
        pending: collections.deque[tuple[str, ...]] = collections.deque([()])
        with _os_errors(path, "list"):
            while pending and (limit is None or len(names) < limit):
                sub = pending.popleft()
                prefix = "".join(f"{part}/" for part in sub)
                with self._directory((*base, *sub)) as target, os.scandir(target) as entries:
                    found = sorted((e.name, e.is_dir(follow_symlinks=False)) for e in entries)
                for name, is_dir in found:
                    if limit is not None and len(names) >= limit:
                        break
                    names.append(f"{prefix}{name}/" if is_dir else f"{prefix}{name}")
                    if is_dir and recursive:
                        pending.append((*sub, name))
        return sorted(names)

    def delete(self, path: str) -> None:
        """Delete the file ``path``, or the directory ``path`` if it is empty."""
        parts = self._parts(self.resolve(path))
        if not parts:
            raise _refuse(path, "is the workspace itself, which cannot be deleted")
        with _os_errors(path, "delete"), self._parent(parts, create=False) as (dir_fd, name):
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if not stat.S_ISDIR(info.st_mode):
                # No hard-link check: unlinking removes this name only; a file it shared
                # with another directory stays there, unchanged.
                os.unlink(name, dir_fd=dir_fd)
                return
            try:
                os.rmdir(name, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    raise WorkspaceError(
                        f"Cannot delete {show_path(path)}: it is a directory that is not "
                        "empty. Fix: delete the files in it first (list_files shows them)."
                    ) from None
                raise

    # -- internals ----------------------------------------------------------------------

    def _parts(self, real: Path) -> tuple[str, ...]:
        return real.relative_to(self.root).parts

    def _file_parts(self, path: str, verb: str) -> tuple[str, ...]:
        parts = self._parts(self.resolve(path))
        if not parts:
            raise WorkspaceError(
                f"Cannot {verb} {show_path(path)}: it is the workspace directory itself, not "
                f"a file. Fix: name a file in it, e.g. 'notes/todo.txt'."
            )
        return parts

    @contextlib.contextmanager
    def _parent(self, parts: tuple[str, ...], *, create: bool) -> Iterator[tuple[int | None, str]]:
        """Yield ``(dir_fd, name)`` naming ``parts`` for the ``dir_fd`` variants of ``os``.

        By descriptor, ``dir_fd`` is the parent directory, reached without following any
        link; otherwise ``dir_fd`` is ``None`` and ``name`` the full path.
        """
        if not _BY_FD:
            full = self.root.joinpath(*parts)
            if create:
                full.parent.mkdir(parents=True, exist_ok=True)
            yield None, str(full)
            return
        fd = self._walk(parts[:-1], create=create)
        try:
            yield fd, parts[-1]
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _directory(self, parts: tuple[str, ...]) -> Iterator[int | str]:
        """Yield the directory ``parts`` as something ``os.scandir`` accepts."""
        if not _BY_FD:
            yield str(self.root.joinpath(*parts))
            return
        fd = self._walk(parts, create=False)
        try:
            yield fd
        finally:
            os.close(fd)

    def _walk(self, parts: tuple[str, ...], *, create: bool) -> int:
        """Open directory ``parts`` from the root one level at a time, never following links."""
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for part in parts:
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except NotADirectoryError:
                    # O_DIRECTORY|O_NOFOLLOW on a link: ENOTDIR on Linux; say what it is.
                    if stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP)) from None
                    raise
                except FileNotFoundError:
                    if not create:
                        raise
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o777, dir_fd=fd)
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd


# --- helpers ---------------------------------------------------------------------------


def _inside(path: Path, root: Path) -> bool:
    return path == root or path.is_relative_to(root)


def _refuse(path: str, problem: str) -> WorkspaceError:
    return WorkspaceError(f"The path {show_path(path)} {problem}; {_FIX}.")


def _too_large(path: str, size: int, limit: int) -> WorkspaceError:
    return WorkspaceError(
        f"Cannot read {show_path(path)}: it is {_size(size)}, over the {_size(limit)} read "
        "limit. Fix: read a smaller file, or split this one into parts."
    )


def _size(count: int) -> str:
    if count >= 1024 * 1024 and count % (1024 * 1024) == 0:
        return f"{count // (1024 * 1024)} MiB"
    return f"{count} bytes"


def _encode(path: str, content: str) -> bytes:
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise WorkspaceError(
            f"Cannot write {show_path(path)}: the content is not valid text (character "
            f"{exc.start} cannot be encoded as UTF-8). Fix: write text only."
        ) from None


def _own_file_size(fd: int, dir_fd: int | None, name: str, path: str, verb: str) -> int:
    """The size of the file open as ``fd`` (``name`` in ``dir_fd``), checked to be ours.

    It must be a regular file with a single link: a file with another name may be a file
    outside the workspace. The count is the open file's. The name is checked again after:
    had the workspace's link been removed between the open and the ``fstat``, a count of
    one would be the outside link's, and the name would be gone or another file.
    """
    info = os.fstat(fd)
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
    if not stat.S_ISREG(info.st_mode):
        raise WorkspaceError(
            f"Cannot {verb} {show_path(path)}: it is not a regular file (a pipe, socket or "
            "device). Fix: use regular files only."
        )
    links = info.st_nlink
    if links <= 1:
        entry = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if (entry.st_dev, entry.st_ino) != (info.st_dev, info.st_ino):
            raise WorkspaceError(
                f"Cannot {verb} {show_path(path)}: it was replaced while in use. Fix: try again."
            )
        links = entry.st_nlink
    if links > 1:
        raise WorkspaceError(
            f"Cannot {verb} {show_path(path)}: it has {links} hard links; it may be a file "
            "outside the workspace. Fix: use another file; if this one is meant to be used, "
            "the user can replace it with a copy of its own (cp NAME NAME.new && mv NAME.new "
            "NAME)."
        )
    return info.st_size


def _lexists(name: str, dir_fd: int | None) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _read_at_most(fd: int, count: int) -> bytes:
    chunks: list[bytes] = []
    while count > 0:
        chunk = os.read(fd, min(count, 1024 * 1024))
        if not chunk:
            break
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@contextlib.contextmanager
def _os_errors(path: str, verb: str) -> Iterator[None]:
    """Turn an ``OSError`` from a file operation into a ``WorkspaceError`` saying why."""
    try:
        yield
    except OSError as exc:
        problem, fix = _explain(exc)
        raise WorkspaceError(f"Cannot {verb} {show_path(path)}: {problem}. Fix: {fix}.") from exc


def _explain(exc: OSError) -> tuple[str, str]:
    code = exc.errno
    if code == errno.ENOENT:
        return "it does not exist", "check the name; list_files shows what is there"
    if code == errno.EEXIST:
        return "it already exists", "choose a new name, or call the command again to replace it"
    if code == errno.EISDIR:
        return "it is a directory", "name a file; list_files shows what is in the directory"
    if code == errno.ENOTDIR:
        return "a part of the path is a file, not a directory", "check the path with list_files"
    if code == errno.ELOOP:
        return (
            "it goes through a symbolic link that loops or changed while in use",
            "use a path without that link",
        )
    if code in (errno.EACCES, errno.EPERM):
        return "permission denied", "use a file the agent may access"
    if code == errno.ENAMETOOLONG:
        return "the path is too long", "use shorter names"
    if code in (errno.ENOSPC, errno.EDQUOT):
        return "the disk is full", "free some space, or write less"
    return exc.strerror or str(exc), "check the path with list_files"
