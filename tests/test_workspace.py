"""The workspace sandbox (``agent._workspace``); the plugin is in test_plugin_workspace."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from autogpt_core._errors import WorkspaceError
from autogpt_core.agent._workspace import DEFAULT_READ_LIMIT, Workspace, show_path

from .strategies import (
    SECRET,
    Layout,
    PathSpec,
    add_hard_links,
    build_layout,
    hard_link_path_specs,
    path_specs,
)


def _snapshot(layout: Layout) -> dict[str, tuple[Any, ...]]:
    """Everything under ``layout.tmp`` except the workspace: types, contents, link targets."""
    seen: dict[str, tuple[Any, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(layout.tmp):
        if Path(dirpath) == layout.tmp:
            dirnames[:] = [d for d in dirnames if d != layout.root.name]
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                seen[str(path)] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                seen[str(path)] = ("dir", info.st_mode)
            else:
                seen[str(path)] = ("file", info.st_mode, info.st_mtime_ns, path.read_bytes())
    return seen


def _assert_names_path(error: WorkspaceError, path: str) -> None:
    assert show_path(path) in str(error)


def _run(ws: Workspace, op: str, path: str, content: str) -> Any:
    if op == "resolve":
        return ws.resolve(path)
    if op == "exists":
        return ws.exists(path)
    if op == "read":
        return ws.read_text(path)
    if op == "write":
        return ws.write_text(path, content)
    if op == "append":
        return ws.append_text(path, content)
    if op == "list":
        return ws.list_dir(path)
    if op == "list_recursive":
        return ws.list_dir(path, recursive=True)
    assert op == "delete"
    return ws.delete(path)


OPS = ("resolve", "exists", "read", "write", "append", "list", "list_recursive", "delete")


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(paths=st.lists(path_specs(), min_size=1, max_size=3), data=st.data())
def test_every_path_stays_inside_or_is_refused(paths: list[PathSpec], data: st.DataObject) -> None:
    """Any operation on any path either stays inside the root or raises a WorkspaceError
    naming the path; nothing outside the root is ever created, changed or read."""
    with tempfile.TemporaryDirectory() as tmp:
        layout = build_layout(Path(tmp))
        before = _snapshot(layout)
        ws = Workspace(layout.root)
        # A few operations on a few paths, so that reads and lists meet what writes made.
        for _ in range(data.draw(st.integers(1, 5), label="steps")):
            path = data.draw(st.sampled_from(paths)).render(layout)
            op = data.draw(st.sampled_from(OPS))
            content = data.draw(st.text(max_size=20))
            try:
                result = _run(ws, op, path, content)
            except WorkspaceError as error:
                _assert_names_path(error, path)
                event(f"{op}: refused")
            else:
                event(f"{op}: done")
                resolved = ws.resolve(path)
                assert resolved == layout.root or resolved.is_relative_to(layout.root)
                if op == "read":
                    assert SECRET not in result
            assert _snapshot(layout) == before


def _resolved_by_realpath(root: Path, path: str) -> Path | None:
    """What ``resolve`` must return, by its definition: ``realpath`` of the path joined to
    the root, if that is the root or inside it (``None``: it must be refused)."""
    real = Path(os.path.realpath(os.path.join(root, path)))
    return real if real == root or real.is_relative_to(root) else None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(paths=st.lists(path_specs(), min_size=1, max_size=8))
def test_resolve_is_realpath_confined_to_the_root(paths: list[PathSpec]) -> None:
    """Resolving walks down from the root, one lookup per name, when the path allows it
    (relative, no '..', no link on the way). Whatever route it takes, the result is what
    realpath makes of the path under the root, and a path realpath puts outside is refused."""
    with tempfile.TemporaryDirectory() as tmp:
        layout = build_layout(Path(tmp))
        ws = Workspace(layout.root)
        for spec in paths:
            path = spec.render(layout)
            try:
                got: Path | None = ws.resolve(path)
            except WorkspaceError as error:
                _assert_names_path(error, path)
                got = None
                event("refused")
            try:
                encoded = os.fsencode(path)
            except UnicodeError:
                continue  # refused before any lookup: no file name can hold it
            if b"\0" in encoded or not path.strip() or len(encoded) > 4096:
                continue  # refused before any lookup (test_refusals_name_the_path...)
            if max(len(part) for part in encoded.split(b"/")) > 255:
                continue
            assert got == _resolved_by_realpath(layout.root, path), path


def test_a_root_replaced_by_a_link_is_not_walked_down(layout: Layout) -> None:
    """The workspace directory moved away and a link put in its place: paths are resolved
    through the link, as realpath sees them, and refused, as before the walk existed."""
    ws = Workspace(layout.root)
    assert ws.resolve("sub/notes.txt") == layout.root / "sub" / "notes.txt"
    layout.root.rename(layout.tmp / "moved")
    layout.root.symlink_to(layout.outside)
    for attempt in (ws.resolve, ws.exists, ws.read_text):
        with pytest.raises(WorkspaceError, match="symbolic link that points outside"):
            attempt("secret.txt")
    # A file system may give the link the directory's inode number (ext4 reuses them): the
    # identity alone would pass, the kind does not.
    info = os.lstat(layout.root)
    ws._root_id = (info.st_dev, info.st_ino)
    with pytest.raises(WorkspaceError, match="symbolic link that points outside"):
        ws.resolve("secret.txt")


def test_resolve_walks_down_from_the_root(layout: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain relative path costs one lookup per name of its own, not one per name of the
    root's absolute path too; a link on the way still takes realpath's route."""
    ws = Workspace(layout.root)
    looked_up: list[str] = []
    real_lstat = os.lstat

    def counting_lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        looked_up.append(str(path))
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", counting_lstat)
    assert ws.resolve("sub/notes.txt") == layout.root / "sub" / "notes.txt"
    root = str(layout.root)
    assert looked_up == [root, f"{root}/sub", f"{root}/sub/notes.txt"]
    looked_up.clear()
    assert ws.resolve(".") == layout.root
    assert looked_up == [root]
    assert ws.resolve("inner/notes.txt") == layout.root / "sub" / "notes.txt"
    with pytest.raises(WorkspaceError, match="symbolic link"):
        ws.resolve("out/secret.txt")


# --- explicit cases --------------------------------------------------------------------


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return build_layout(tmp_path)


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("../x", "outside the workspace through '..'"),
        ("a/../../b", "outside the workspace through '..'"),
        ("/etc/passwd", "absolute path outside the workspace"),
        ("out/secret.txt", "symbolic link that points outside"),
        ("secret_link", "symbolic link that points outside"),
        ("dangling", "symbolic link that points outside"),
        ("sub/back/secret.txt", "symbolic link that points outside"),
        ("up/outside/secret.txt", "symbolic link that points outside"),
        ("notes\x00.txt", "NUL character"),
        ("", "is empty"),
        ("   ", "is empty"),
        ("x" * 256, "at most 255"),
        ("a/" * 2100, "too long"),
    ],
)
def test_refusals_name_the_path_the_problem_and_the_fix(
    layout: Layout, path: str, problem: str
) -> None:
    """Each refused path raises WorkspaceError with the path, the problem and an example fix."""
    ws = Workspace(layout.root)
    for attempt in (
        lambda: ws.resolve(path),
        lambda: ws.write_text(path, "data"),
        lambda: ws.read_text(path),
    ):
        with pytest.raises(WorkspaceError) as info:
            attempt()
        message = str(info.value)
        assert show_path(path) in message
        assert problem in message
        assert "relative to the workspace, e.g. 'notes/todo.txt'" in message


def test_writing_through_a_link_to_an_outside_directory_is_refused(layout: Layout) -> None:
    """A write through a link to an outside directory creates nothing outside."""
    ws = Workspace(layout.root)
    with pytest.raises(WorkspaceError, match="symbolic link"):
        ws.write_text("out/planted.txt", "x")
    with pytest.raises(WorkspaceError, match="symbolic link"):
        ws.append_text("out_abs/secret.txt", "x")
    assert sorted(p.name for p in layout.outside.iterdir()) == ["secret.txt"]
    assert (layout.outside / "secret.txt").read_text(encoding="utf-8") == SECRET


def test_writing_through_a_dangling_link_to_outside_is_refused(layout: Layout) -> None:
    """A dangling link whose target is outside cannot be used to create that target."""
    ws = Workspace(layout.root)
    for path in ("dangling", "dangling_dir"):
        with pytest.raises(WorkspaceError, match="symbolic link"):
            ws.write_text(path, "x")
    assert not (layout.outside / "new.txt").exists()
    assert not (layout.outside / "newdir").exists()


def test_deleting_through_links_to_outside_is_refused(layout: Layout) -> None:
    """delete refuses a link to an outside file, and the file survives."""
    ws = Workspace(layout.root)
    with pytest.raises(WorkspaceError):
        ws.delete("secret_link")
    with pytest.raises(WorkspaceError):
        ws.delete("out/secret.txt")
    assert (layout.outside / "secret.txt").read_text(encoding="utf-8") == SECRET


def test_paths_inside_the_root_work_however_they_are_spelled(layout: Layout) -> None:
    """Absolute paths inside the root, '..' that stays inside and inside links are fine."""
    ws = Workspace(layout.root)
    ws.write_text(f"{layout.root}/abs.txt", "a")
    ws.write_text("sub/../rel.txt", "b")
    ws.write_text("inner/linked.txt", "c")
    assert ws.read_text("abs.txt") == "a"
    assert ws.read_text("./rel.txt") == "b"
    assert (layout.root / "sub" / "linked.txt").read_text(encoding="utf-8") == "c"
    assert ws.relative("inner/linked.txt") == "sub/linked.txt"
    assert ws.relative(".") == "."


def test_a_link_swapped_in_after_resolving_is_not_followed(layout: Layout) -> None:
    """If a directory becomes a link to outside between resolve and open, nothing escapes."""

    class Racy(Workspace):
        def resolve(self, path: str) -> Path:
            real = super().resolve(path)
            (layout.root / "d").rename(layout.root / "d-old")
            os.symlink(layout.outside, layout.root / "d")
            return real

    (layout.root / "d").mkdir()
    with pytest.raises(WorkspaceError, match="symbolic link"):
        Racy(layout.root).write_text("d/planted.txt", "x")
    assert sorted(p.name for p in layout.outside.iterdir()) == ["secret.txt"]


def test_write_replaces_atomically_and_keeps_the_mode(tmp_path: Path) -> None:
    """write_text replaces the whole file, leaves no temporary file and keeps its mode."""
    ws = Workspace(tmp_path)
    assert ws.write_text("notes/todo.txt", "first version, longer") == 21
    (tmp_path / "notes" / "todo.txt").chmod(0o600)
    ws.write_text("notes/todo.txt", "second")
    assert ws.read_text("notes/todo.txt") == "second"
    assert ws.list_dir("notes") == ["todo.txt"]
    assert stat.S_IMODE((tmp_path / "notes" / "todo.txt").stat().st_mode) == 0o600


def test_a_failed_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    """Writing onto a directory fails cleanly, without leaving a temporary file behind."""
    ws = Workspace(tmp_path)
    ws.write_text("sub/keep.txt", "x")
    with pytest.raises(WorkspaceError, match="'sub': it is a directory"):
        ws.write_text("sub", "data")
    assert ws.list_dir(recursive=True) == ["sub/", "sub/keep.txt"]
    with pytest.raises(WorkspaceError, match="it is a file, not a directory"):
        ws.list_dir("sub/keep.txt")


def test_append_creates_then_appends(tmp_path: Path) -> None:
    """append_text creates a missing file and adds to an existing one."""
    ws = Workspace(tmp_path)
    ws.append_text("log/a.txt", "one\n")
    ws.append_text("log/a.txt", "two\n")
    assert ws.read_text("log/a.txt") == "one\ntwo\n"


def test_reads_are_limited_and_text_only(tmp_path: Path) -> None:
    """Too large, binary, directory and missing files give errors saying so."""
    ws = Workspace(tmp_path)
    (tmp_path / "big.txt").write_bytes(b"a" * (DEFAULT_READ_LIMIT + 1))
    (tmp_path / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\xff\x00")
    (tmp_path / "dir").mkdir()
    cases = {
        "big.txt": "over the 1 MiB read limit",
        "image.png": "not UTF-8 text",
        "dir": "is a directory",
        "missing.txt": "does not exist",
    }
    for path, problem in cases.items():
        with pytest.raises(WorkspaceError, match=problem) as info:
            ws.read_text(path)
        assert repr(path) in str(info.value)
    assert ws.read_text("big.txt", max_bytes=DEFAULT_READ_LIMIT + 1).startswith("aaa")


def test_a_fifo_is_refused_rather_than_blocking(tmp_path: Path) -> None:
    """Reading a named pipe fails at once instead of waiting for a writer."""
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(WorkspaceError, match="not a regular file"):
        Workspace(tmp_path).read_text("pipe")


def test_list_dir_marks_directories_and_recurses_shallowest_first(tmp_path: Path) -> None:
    """list_dir sorts names, ends directories with '/', and recursive lists nested names."""
    ws = Workspace(tmp_path)
    for path in ("b.txt", "a/x.txt", "a/deep/y.txt", "c/z.txt"):
        ws.write_text(path, "-")
    assert ws.list_dir() == ["a/", "b.txt", "c/"]
    assert ws.list_dir("a") == ["deep/", "x.txt"]
    assert ws.list_dir(recursive=True) == [
        "a/",
        "a/deep/",
        "a/deep/y.txt",
        "a/x.txt",
        "b.txt",
        "c/",
        "c/z.txt",
    ]
    assert ws.list_dir(recursive=True, limit=4) == ["a/", "a/deep/", "b.txt", "c/"]


def test_delete_files_and_empty_directories_only(tmp_path: Path) -> None:
    """delete removes files and empty directories, and refuses full ones and the root."""
    ws = Workspace(tmp_path)
    ws.write_text("d/f.txt", "x")
    with pytest.raises(WorkspaceError, match="not empty"):
        ws.delete("d")
    ws.delete("d/f.txt")
    ws.delete("d")
    assert not ws.exists("d")
    with pytest.raises(WorkspaceError, match="workspace itself"):
        ws.delete(".")
    with pytest.raises(WorkspaceError, match="does not exist"):
        ws.delete("d")


def test_a_symlink_loop_is_an_error_not_a_hang(layout: Layout) -> None:
    """A path through a looping link raises WorkspaceError."""
    ws = Workspace(layout.root)
    with pytest.raises(WorkspaceError, match="'loop/x'"):
        ws.write_text("loop/x", "data")


def test_a_file_as_root_is_refused(tmp_path: Path) -> None:
    """A workspace root that is a file gives a WorkspaceError naming it."""
    (tmp_path / "file").write_text("x", encoding="utf-8")
    with pytest.raises(WorkspaceError, match="file"):
        Workspace(tmp_path / "file")


def test_writing_does_not_copy_set_id_bits(tmp_path: Path) -> None:
    """Replacing a set-user-id file keeps its permission bits but not the set-id ones."""
    ws = Workspace(tmp_path)
    ws.write_text("tool", "#!/bin/sh\n")
    (tmp_path / "tool").chmod(0o4750)
    ws.write_text("tool", "echo hi\n")
    assert stat.S_IMODE((tmp_path / "tool").stat().st_mode) == 0o750


def test_exclusive_writes_only_create(tmp_path: Path) -> None:
    """With exclusive=True, write_text and append_text create a file but never change one."""
    ws = Workspace(tmp_path)
    ws.write_text("new.txt", "a", exclusive=True)
    ws.append_text("log.txt", "b", exclusive=True)
    problem = "already exists. Fix: choose a new name"
    with pytest.raises(WorkspaceError, match=problem):
        ws.write_text("new.txt", "replaced", exclusive=True)
    with pytest.raises(WorkspaceError, match=problem):
        ws.append_text("log.txt", "more", exclusive=True)
    assert ws.read_text("new.txt") == "a"
    assert ws.read_text("log.txt") == "b"
    assert ws.list_dir() == ["log.txt", "new.txt"]  # no temporary file left behind


# --- hard links ------------------------------------------------------------------------


def test_a_hard_link_to_an_outside_file_is_not_read_or_appended_to(layout: Layout) -> None:
    """Reading or appending to a hard link to an outside file is refused; that file is unchanged."""
    add_hard_links(layout)
    ws = Workspace(layout.root)
    for attempt, verb in (
        (lambda: ws.read_text("hard_link"), "read"),
        (lambda: ws.append_text("hard_link", "appended"), "append to"),
        (lambda: ws.read_text("inner/hard_link"), "read"),
    ):
        with pytest.raises(WorkspaceError) as info:
            attempt()
        message = str(info.value)
        assert message.startswith(f"Cannot {verb} ")
        assert "has 3 hard links; it may be a file outside the workspace. Fix:" in message
        assert SECRET not in message
    assert (layout.outside / "secret.txt").read_text(encoding="utf-8") == SECRET


def test_writing_or_deleting_a_hard_link_leaves_the_outside_file(layout: Layout) -> None:
    """Writing or deleting a hard link changes the workspace's name only, not the outside file."""
    add_hard_links(layout)
    ws = Workspace(layout.root)
    ws.write_text("hard_link", "new content")
    assert ws.read_text("hard_link") == "new content"
    assert (layout.root / "hard_link").stat().st_nlink == 1
    ws.delete("sub/hard_link")
    assert not ws.exists("sub/hard_link")
    secret = layout.outside / "secret.txt"
    assert secret.read_text(encoding="utf-8") == SECRET
    assert secret.stat().st_nlink == 1


def test_a_link_removed_between_open_and_check_is_still_refused(
    layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hard link unlinked between the open and the fstat is still refused, not read or changed."""
    os.link(layout.outside / "secret.txt", layout.root / "racy")
    real_fstat = os.fstat

    def fstat_after_unlink(fd: int) -> os.stat_result:
        if (layout.root / "racy").exists():
            os.unlink(layout.root / "racy")
        return real_fstat(fd)

    monkeypatch.setattr(os, "fstat", fstat_after_unlink)
    ws = Workspace(layout.root)
    with pytest.raises(WorkspaceError, match="'racy': it does not exist"):
        ws.read_text("racy")
    os.link(layout.outside / "secret.txt", layout.root / "racy")
    with pytest.raises(WorkspaceError, match="'racy': it does not exist"):
        ws.append_text("racy", "appended")
    monkeypatch.undo()
    assert (layout.outside / "secret.txt").read_text(encoding="utf-8") == SECRET


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_hard_links_to_outside_files_leak_and_change_nothing(data: st.DataObject) -> None:
    """No operations on any spelling of hard links to an outside secret read or change it."""
    with tempfile.TemporaryDirectory() as tmp:
        layout = build_layout(Path(tmp))
        add_hard_links(layout)
        before = _snapshot(layout)
        ws = Workspace(layout.root)
        for _ in range(data.draw(st.integers(1, 5), label="steps")):
            path = data.draw(st.one_of(hard_link_path_specs(), path_specs())).render(layout)
            op = data.draw(st.sampled_from(OPS))
            try:
                result = _run(ws, op, path, data.draw(st.text(max_size=20)))
            except WorkspaceError as error:
                _assert_names_path(error, path)
                event(f"{op}: refused")
            else:
                event(f"{op}: done")
                if op == "read":
                    assert SECRET not in result
            assert _snapshot(layout) == before
