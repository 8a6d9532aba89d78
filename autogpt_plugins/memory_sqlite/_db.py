"""``MemoryDB``: memories in a SQLite file of their own, with full-text search (FTS5).

The file is created whole (built under a temporary name, its schema migrated, then linked
into place), so an empty file at the path was emptied since and is refused rather than
silently started afresh. WAL mode, ``synchronous=NORMAL``: a commit survives the process
being killed. Thread-safe: each call borrows a pooled connection; writes are serialised by
a lock.

A session's items have ``seq`` in a range of their own (``_migrations.SLOT_BITS``), so a
recall in one session gives FTS5 a rowid range and reads that session's postings only,
however many other sessions' items match. What remains is FTS5's ``bm25``, which counts
the rows holding each query word in the whole table.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from autogpt_core import StorageError
from hookspecs import JSON, MemoryHit, MemoryItem, MemoryQuery

from .._memory import OWNER_KEY, metadata_json
from . import _migrations
from ._migrations import SLOT_BITS

#: A recall query is an OR of its words; past this many, extra words add cost, not recall.
_MAX_QUERY_TERMS = 32
_WORD = re.compile(r"\w+")
#: Idle connections kept for reuse: as many as trio's default worker threads, so that many
#: sessions recalling at once do not open and close one each.
_MAX_IDLE_CONNECTIONS = 40
_BUSY_TIMEOUT_MS = 10_000
_WHAT = "memory database"


class _Connection(sqlite3.Connection):
    """A pooled connection; ``broken`` marks one that must not be reused."""

    broken = False


class MemoryDB:
    """The memories in the SQLite file ``path`` (created, with its directory, if missing).

    Raises ``StorageError`` naming the file if it cannot be created or read, is not a
    memory database (the session store, say), or was written by a newer plugin.
    ``close()`` it when done, or use it as a context manager.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path).expanduser()
        self._pool_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._idle: list[_Connection] = []
        self._closed = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"Cannot create the directory of the {_WHAT} {self.path}: "
                f"{exc.strerror or exc}. Fix: set the memory_sqlite 'path' setting to a "
                "writable place."
            ) from exc
        self._open()

    def close(self) -> None:
        """Close every idle connection; connections in use are closed when returned."""
        with self._pool_lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def __enter__(self) -> MemoryDB:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"MemoryDB({str(self.path)!r})"

    # -- the memory API -----------------------------------------------------------------

    def memory_store(self, item: MemoryItem) -> str:
        """Store ``item`` (replacing an item with the same id) and return its id.

        An empty ``item.id`` gets a new one; ``created_at`` 0 means now. Raises
        ``StorageError`` if its metadata is not JSON.
        """
        (outcome,) = self.store_each([item])
        if isinstance(outcome, StorageError):
            raise outcome
        return outcome

    def store_each(self, items: Sequence[MemoryItem]) -> list[str | StorageError]:
        """Store several items in one transaction, each on its own: an item that cannot be
        stored gets its ``StorageError`` in the returned list instead of its id, and the
        others are stored. Raises ``StorageError`` if the file cannot be written at all."""
        now = time.time()
        outcomes: list[str | StorageError] = []
        rows: list[tuple[Any, ...] | None] = []
        for item in items:
            try:
                metadata = metadata_json(item)
            except StorageError as exc:
                outcomes.append(exc)
                rows.append(None)
                continue
            item_id = item.id or uuid.uuid4().hex
            outcomes.append(item_id)
            rows.append(
                (item_id, item.session_id, item.kind, item.text, metadata, item.created_at or now)
            )
        with self._write() as conn:
            for row in rows:
                if row is not None:
                    _put(conn, row)
        return outcomes

    def memory_recall(
        self,
        query: MemoryQuery,
        session_id: str,
        *,
        backend: str = "memory_sqlite",
        owner: str | None = None,
    ) -> list[MemoryHit]:
        """Up to ``query.limit`` items matching ``query.text``, best first.

        Any text is accepted: it is split into words, and an item matches if it contains
        any of them; items with more (and rarer) matching words rank higher (FTS5 ``bm25``).
        Scores are in (0, 1), higher is better. Empty text (or no words) returns the most
        recent items, with score 0. ``query.scope`` ``"session"`` searches ``session_id``'s
        items only, ``"all"`` every session's of ``owner`` (an owner's items are marked in
        their metadata; ``owner=None``, the terminal's, sees every item); ``query.kinds``,
        when not empty, keeps items of those kinds only.
        """
        limit = max(query.limit, 0)
        match = _match_expression(query.text)
        columns = "m.id, m.session_id, m.kind, m.text, m.metadata, m.created_at"
        kinds_sql, kinds = _kinds(query, owner)
        with self._read() as conn:
            if match is None:
                # memory_by_session or memory_by_created: the newest, read in index order.
                scope_sql, scope = _scope_by_column(query.scope, session_id)
                sql = (
                    f"SELECT {columns}, 0.0 FROM memory AS m WHERE 1{scope_sql}{kinds_sql}"
                    " ORDER BY m.created_at DESC, m.seq DESC LIMIT ?"
                )
                rows = conn.execute(sql, (*scope, *kinds, limit)).fetchall()
            else:
                found = _scope_by_range(conn, query.scope, session_id, "memory_fts.rowid")
                if found is None:
                    return []
                scope_sql, scope = found
                # A rowid range reaches FTS5 (xBestIndex), which seeks to the session's
                # postings rather than the join filtering every session's.
                sql = (
                    f"SELECT {columns}, bm25(memory_fts) AS rank FROM memory_fts"
                    " JOIN memory AS m ON m.seq = memory_fts.rowid"
                    f" WHERE memory_fts MATCH ?{scope_sql}{kinds_sql} ORDER BY rank LIMIT ?"
                )
                rows = conn.execute(sql, (match, *scope, *kinds, limit)).fetchall()
        return [self._hit(row, backend) for row in rows]

    def memory_forget(
        self, query: MemoryQuery, session_id: str, *, owner: str | None = None
    ) -> int:
        """Forget items and return how many.

        Empty ``query.text`` forgets every item in scope (``"session"``: ``session_id``'s,
        ``"all"``: every item); otherwise the items in scope matching any of its words.
        Non-empty ``query.kinds`` limits it to items of those kinds. Text without any word
        forgets nothing. A session left without items leaves no trace in the file. With
        ``owner``, ``"all"`` is that owner's items only.
        """
        kinds_sql, kinds = _kinds(query, owner)
        match = _match_expression(query.text)
        if query.text.strip() and match is None:
            return 0
        with self._write() as conn:
            if match is None:
                scope_sql, scope = _scope_by_column(query.scope, session_id)
                sql, params = f"DELETE FROM memory AS m WHERE 1{scope_sql}", scope
            else:
                found = _scope_by_range(conn, query.scope, session_id, "rowid")
                if found is None:
                    return 0
                scope_sql, scope = found
                sql = (
                    "DELETE FROM memory AS m WHERE m.seq IN (SELECT rowid FROM memory_fts"
                    f" WHERE memory_fts MATCH ?{scope_sql})"
                )
                params = (match, *scope)
            count = conn.execute(f"{sql}{kinds_sql}", (*params, *kinds)).rowcount
            # No trace of a session without items: its slot goes (a new item gets another).
            conn.execute(
                "DELETE FROM memory_sessions WHERE NOT EXISTS (SELECT 1 FROM memory"
                " WHERE seq BETWEEN slot << ? AND ((slot + 1) << ?) - 1)"
                + ("" if query.scope == "all" else " AND session_id = ?"),
                (SLOT_BITS, SLOT_BITS) + (() if query.scope == "all" else (session_id,)),
            )
        return int(count)

    def _hit(self, row: tuple[Any, ...], backend: str) -> MemoryHit:
        metadata = _metadata(row[4])
        if metadata is None:
            raise StorageError(
                f"The {_WHAT} {self.path} is damaged: memory item {row[0]}: its metadata "
                f"column is not a JSON object ({_shown(row[4])}). Fix: delete that item "
                f"(sqlite3 {self.path} \"DELETE FROM memory WHERE id = '{row[0]}'\"), or "
                "restore the file from a backup."
            )
        item = MemoryItem(
            text=row[3],
            session_id=row[1],
            kind=row[2],
            id=row[0],
            metadata=metadata,
            created_at=row[5],
        )
        return MemoryHit(item=item, score=_score(row[6]), backend=backend)

    # -- the file -----------------------------------------------------------------------

    def _open(self) -> None:
        try:
            size: int | None = self.path.stat().st_size
        except FileNotFoundError:
            size = None
        except OSError as exc:
            raise StorageError(
                f"Cannot open the {_WHAT} {self.path}: {exc.strerror or exc}. Fix: check "
                "that the file and its directory are readable."
            ) from exc
        if size is None:
            self._create()
        elif size == 0:
            raise StorageError(
                f"The {_WHAT} {self.path} is empty (0 bytes) but memories were expected: a "
                f"{_WHAT} this plugin creates always holds its schema, so it may have been "
                "truncated. Fix: move it away (e.g. rename it to *.bak) to start a new one, or "
                "restore it from a backup."
            )
        with self._errors("open"), self._connection() as conn:
            if _migrations.current(conn):
                return
            self._check(conn)
            # journal_mode cannot change inside a transaction; it is a property of the file.
            conn.execute("PRAGMA journal_mode = WAL")
            with _transaction(conn):
                # Another process may have migrated it since.
                self._check(conn)
                _migrations.migrate(conn)

    def _create(self) -> None:
        temporary = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex}.new")
        try:
            with self._errors("create"):
                conn = sqlite3.connect(temporary, isolation_level=None, factory=_Connection)
                try:
                    conn.execute("PRAGMA journal_mode = WAL")
                    with _transaction(conn):
                        _migrations.migrate(conn)
                finally:
                    conn.close()
            try:
                os.link(temporary, self.path)
            except FileExistsError:
                pass  # another process created it first: theirs is as good
            except OSError:
                if not self.path.exists():  # no hard links here
                    os.replace(temporary, self.path)
        except OSError as exc:
            raise StorageError(
                f"Cannot create the {_WHAT} {self.path}: {exc.strerror or exc}. Fix: set the "
                "memory_sqlite 'path' setting to a writable place."
            ) from exc
        finally:
            for leftover in (temporary, *(Path(f"{temporary}{end}") for end in ("-wal", "-shm"))):
                with contextlib.suppress(OSError):
                    leftover.unlink()

    def _check(self, conn: _Connection) -> None:
        """Refuse another application's file, and one of a newer schema."""
        found = _migrations.pragma(conn, "application_id")
        if found not in (0, _migrations.APPLICATION_ID):
            raise StorageError(
                f"Cannot open the {_WHAT} {self.path}: it is another application's SQLite "
                f"database (application id {found:#x}), such as autogpt's session store. "
                "Fix: set the memory_sqlite 'path' setting to a file of its own, or leave it "
                "empty."
            )
        version = _migrations.newer(conn)
        if version is not None:
            raise StorageError(
                f"The {_WHAT} {self.path} was written by a newer memory_sqlite plugin (schema "
                f"version {version}; this one reads up to {len(_migrations.MIGRATIONS)}). "
                "Fix: upgrade autogpt-core, or set the 'path' setting to another file."
            )

    def _connect(self) -> _Connection:
        with self._errors("open"):
            conn = sqlite3.connect(
                self.path,
                timeout=_BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,  # we issue BEGIN/COMMIT ourselves
                check_same_thread=False,  # pooled: used by one thread at a time
                factory=_Connection,
            )
            try:
                # Reading the header here makes a non-database file fail now, not later.
                conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except BaseException:
                conn.close()
                raise
        return conn

    @contextlib.contextmanager
    def _connection(self) -> Iterator[_Connection]:
        with self._pool_lock:
            if self._closed:
                raise StorageError(f"The {_WHAT} {self.path} is closed.")
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._connect()
        try:
            yield conn
        finally:
            with self._pool_lock:
                keep = not (self._closed or conn.broken or conn.in_transaction)
                keep = keep and len(self._idle) < _MAX_IDLE_CONNECTIONS
                if keep:
                    self._idle.append(conn)
            if not keep:
                conn.close()

    @contextlib.contextmanager
    def _read(self) -> Iterator[_Connection]:
        with self._errors("read"), self._connection() as conn:
            yield conn

    @contextlib.contextmanager
    def _write(self) -> Iterator[_Connection]:
        with self._errors("write to"), self._write_lock, self._connection() as conn:
            with _transaction(conn):
                yield conn

    @contextlib.contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        """Turn ``sqlite3`` errors into ``StorageError`` naming the file and the fix."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            text = str(exc)
            if "not a database" in text or "malformed" in text or "corrupt" in text:
                problem = "is not a readable SQLite database"
                fix = "move the file aside (e.g. rename it to *.bak) to start a new one"
            else:
                problem = "cannot be used"
                fix = "check the disk has space and the file and its directory are writable"
            raise StorageError(
                f"Cannot {action} the {_WHAT} {self.path}: it {problem} ({text}). Fix: {fix}."
            ) from exc
        except sqlite3.Error as exc:
            raise StorageError(f"Cannot {action} the {_WHAT} {self.path}: {exc}") from exc


@contextlib.contextmanager
def _transaction(conn: _Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                conn.broken = True
        raise
    conn.execute("COMMIT")


def _put(conn: sqlite3.Connection, row: tuple[Any, ...]) -> None:
    """Insert the item ``row`` (id, session_id, kind, text, metadata, created_at) into its
    session's range, replacing the item with its id."""
    item_id, session_id = row[0], row[1]
    conn.execute("INSERT OR IGNORE INTO memory_sessions (session_id) VALUES (?)", (session_id,))
    (slot,) = conn.execute(
        "SELECT slot FROM memory_sessions WHERE session_id = ?", (session_id,)
    ).fetchone()
    low, high = slot << SLOT_BITS, ((slot + 1) << SLOT_BITS) - 1
    existing = conn.execute("SELECT seq FROM memory WHERE id = ?", (item_id,)).fetchone()
    if existing is not None and low <= existing[0] <= high:
        conn.execute(
            "UPDATE memory SET kind = ?, text = ?, metadata = ?, created_at = ? WHERE seq = ?",
            (*row[2:], existing[0]),
        )
        return
    if existing is not None:
        # Now another session's: it moves to that session's range.
        conn.execute("DELETE FROM memory WHERE seq = ?", (existing[0],))
    (last,) = conn.execute(
        "SELECT max(seq) FROM memory WHERE seq BETWEEN ? AND ?", (low, high)
    ).fetchone()
    seq = low + 1 if last is None else last + 1
    if seq > high:
        raise StorageError(f"Session {session_id!r} has too many memory items (2**32).")
    conn.execute(
        "INSERT INTO memory (seq, id, session_id, kind, text, metadata, created_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?)",
        (seq, *row),
    )


def _scope_by_column(scope: str, session_id: str) -> tuple[str, tuple[str | int, ...]]:
    """A WHERE clause fragment keeping the items of ``scope``, by ``session_id``."""
    if scope == "session":
        return " AND m.session_id = ?", (session_id,)
    if scope == "all":
        return "", ()
    raise ValueError(f"unknown memory scope {scope!r}; use 'session' or 'all'")


def _scope_by_range(
    conn: sqlite3.Connection, scope: str, session_id: str, rowid: str
) -> tuple[str, tuple[str | int, ...]] | None:
    """A WHERE clause fragment keeping the items of ``scope`` by their ``rowid`` (column
    name) range, or ``None`` if ``session_id`` has no items."""
    if scope == "all":
        return "", ()
    _scope_by_column(scope, session_id)  # the same errors
    row = conn.execute(
        "SELECT slot FROM memory_sessions WHERE session_id = ?", (session_id,)
    ).fetchone()
    if row is None:
        return None
    return f" AND {rowid} BETWEEN ? AND ?", (
        row[0] << SLOT_BITS,
        ((row[0] + 1) << SLOT_BITS) - 1,
    )


def _kinds(query: MemoryQuery, owner: str | None = None) -> tuple[str, tuple[str, ...]]:
    """The WHERE fragment for ``query.kinds`` and, for ``"all"`` of an owner's session,
    the owner (a session's own items are its owner's already)."""
    sql = ""
    params: tuple[str, ...] = ()
    if query.kinds:
        sql, params = f" AND m.kind IN ({', '.join('?' * len(query.kinds))})", query.kinds
    if owner is not None and query.scope == "all":
        sql += f" AND json_extract(m.metadata, '$.{OWNER_KEY}') = ?"
        params = (*params, owner)
    return sql, params


def _match_expression(text: str) -> str | None:
    """An FTS5 query matching any word of ``text``, or ``None`` if it has no words.

    Each word is quoted, so nothing the user typed (quotes, AND, NEAR, ``*``, ``-``,
    column filters) is read as FTS5 syntax.
    """
    words = list(dict.fromkeys(word.lower() for word in _WORD.findall(text)))
    if not words:
        return None
    return " OR ".join(f'"{word}"' for word in words[:_MAX_QUERY_TERMS])


def _score(rank: float) -> float:
    """Map FTS5's ``bm25`` (negative, lower is better) to (0, 1), higher is better."""
    relevance = -rank if rank < 0 else 0.0
    if math.isinf(relevance):
        return 1.0
    return relevance / (1.0 + relevance)


def _metadata(value: object) -> dict[str, JSON] | None:
    """The metadata column as stored, or ``None`` if it does not read back as an object."""
    if not isinstance(value, str | bytes):
        return None
    try:
        loaded = json.loads(value, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        return None
    return loaded if isinstance(loaded, dict) else None


def _refuse_constant(name: str) -> JSON:
    raise ValueError(f"{name} is not a JSON number")


def _shown(value: object, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
