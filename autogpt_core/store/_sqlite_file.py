"""A SQLite database file for a store: created whole, migrated, and used through a pool.

The file is opened in WAL mode with ``synchronous=NORMAL``: every committed transaction
survives the process being killed (``kill -9``, a crash, Ctrl-C at any point), because the
WAL is already in the operating system's cache when ``COMMIT`` returns. Only a power cut
or kernel crash can lose the last few commits; it can never corrupt the file.

Threads: each call borrows a connection from a small pool (``check_same_thread=False``)
for its duration, so no connection is used by two threads at once and reads in different
threads run concurrently. Write transactions are serialised by a lock, so writers in one
process never spin in SQLite's busy handler; ``busy_timeout`` covers writers in other
processes.

A new file is built under a temporary name and linked into place with its schema, so a
file this code created is never empty: an empty file at the path was emptied since (a
truncated copy, a full disk) and is refused rather than silently started afresh.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from .._errors import StorageError
from ._migrations import Migration, NewerSchema, migrate, user_version

# Idle connections kept for reuse: as many as trio runs worker threads by default (40), so
# that a thousand sessions reading at once reuse connections instead of opening and closing
# one per read (bench/sessions.py). The surplus is closed when returned.
_MAX_IDLE_CONNECTIONS = 40
_BUSY_TIMEOUT_MS = 10_000


class Connection(sqlite3.Connection):
    """A pooled connection; ``broken`` marks one that must not be reused."""

    broken = False


class SQLiteFile:
    """The database file ``path`` (created, with its directory, if missing), at the schema
    of ``migrations`` (recorded in ``migrations_table``), marked ``application_id``.

    ``what`` names the file in messages ("session store"); ``on_connect`` is called with
    each new connection (to register SQL functions). Raises ``StorageError`` naming the
    file if it cannot be created or opened, is not a SQLite database, belongs to another
    application, or has a newer schema.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        what: str,
        migrations: list[Migration],
        migrations_table: str,
        application_id: int,
        on_connect: Callable[[sqlite3.Connection], None] = lambda conn: None,
    ) -> None:
        if str(path) in ("", ":memory:") or str(path).startswith("file:"):
            raise ValueError(f"a {what} needs a file path, not {str(path)!r}")
        self.path = Path(path).expanduser()
        self.what = what
        self._migrations = migrations
        self._migrations_table = migrations_table
        self._application_id = application_id
        self._on_connect = on_connect
        self._pool_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._idle: list[Connection] = []
        self._closed = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"Cannot create the directory of the {what} {self.path}: "
                f"{exc.strerror or exc}. Fix: choose a writable data directory."
            ) from exc
        self._initialise()

    def close(self) -> None:
        """Close every idle connection; connections in use are closed when returned."""
        with self._pool_lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        """A connection for reading (autocommit: each statement sees the latest commit)."""
        with self.errors("read"), self._connection() as conn:
            yield conn

    @contextlib.contextmanager
    def write(self) -> Iterator[Connection]:
        """A connection in a write transaction, committed when the block ends, rolled
        back if it raises."""
        with self.errors("write to"), self._write_lock, self._connection() as conn:
            with self._transaction(conn):
                yield conn

    @contextlib.contextmanager
    def errors(self, action: str) -> Iterator[None]:
        """Turn ``sqlite3`` errors, other than constraint violations, into ``StorageError``."""
        try:
            yield
        except sqlite3.IntegrityError:
            raise
        except sqlite3.DatabaseError as exc:
            text = str(exc)
            if "not a database" in text or "malformed" in text or "corrupt" in text:
                fix = (
                    f"move the file aside (e.g. rename it to *.bak) and a new, empty {self.what}"
                    " is created next time"
                )
                problem = "is not a readable SQLite database"
            else:
                fix = "check the disk has space and the file and its directory are writable"
                problem = "cannot be used"
            raise StorageError(
                f"Cannot {action} the {self.what} {self.path}: it {problem} ({text}). Fix: {fix}."
            ) from exc
        except sqlite3.Error as exc:
            raise StorageError(f"Cannot {action} the {self.what} {self.path}: {exc}") from exc

    # -- opening ------------------------------------------------------------------------

    def _initialise(self) -> None:
        try:
            size: int | None = self.path.stat().st_size
        except FileNotFoundError:
            size = None
        except OSError as exc:
            raise StorageError(
                f"Cannot open the {self.what} {self.path}: {exc.strerror or exc}. Fix: check "
                "that the file and its directory are readable."
            ) from exc
        if size is None:
            self._create()
        elif size == 0:
            # Not a new file: ``_create`` never leaves an empty file at the path. Opening it
            # would quietly start an empty store over whatever it held.
            raise StorageError(
                f"The {self.what} {self.path} is empty (0 bytes) but a store was expected: a "
                "store autogpt creates always holds its schema, so it may have been truncated. "
                "Fix: move it away (e.g. rename it to *.bak) to start a new one, or restore it "
                "from a backup."
            )
        with self.errors("open"), self._connection() as conn:
            self._check_application(conn)
            version = user_version(conn)
            if version == len(self._migrations):
                return
            if version > len(self._migrations):
                raise self._newer(version)
            # journal_mode cannot change inside a transaction; it is a property of the file.
            conn.execute("PRAGMA journal_mode = WAL")
            with self._transaction(conn):
                # Another process may have migrated the file since we looked.
                self._migrate(conn)

    def _create(self) -> None:
        """Create the file with its schema under a temporary name, then link it into place.

        So the file never exists at ``path`` without its schema, even for a moment: another
        process opening it meanwhile, or a crash, can never leave it empty there.
        """
        temporary = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex}.new")
        try:
            with self.errors("create"):
                conn = sqlite3.connect(temporary, isolation_level=None, factory=Connection)
                try:
                    # journal_mode is a property of the file: it stays WAL once linked.
                    conn.execute("PRAGMA journal_mode = WAL")
                    with self._transaction(conn):
                        self._migrate(conn)
                finally:
                    conn.close()
            try:
                os.link(temporary, self.path)
            except FileExistsError:
                pass  # another process created it first: theirs is as good
            except OSError:
                # A file system without hard links: a rename, which could replace a store
                # created in the same instant by another process; both are new and empty.
                if not self.path.exists():
                    os.replace(temporary, self.path)
        except OSError as exc:
            raise StorageError(
                f"Cannot create the {self.what} {self.path}: {exc.strerror or exc}. Fix: "
                "choose a writable data directory."
            ) from exc
        finally:
            for leftover in (temporary, *(Path(f"{temporary}{end}") for end in ("-wal", "-shm"))):
                with contextlib.suppress(OSError):
                    leftover.unlink()

    def _migrate(self, conn: Connection) -> None:
        self._check_application(conn)
        try:
            migrate(conn, self._migrations, table=self._migrations_table)
        except NewerSchema as exc:
            raise self._newer(exc.version) from None

    def _check_application(self, conn: Connection) -> None:
        found = int(conn.execute("PRAGMA application_id").fetchone()[0])
        # 0: a file from before application ids were set, or a new one.
        if found not in (0, self._application_id):
            raise StorageError(
                f"Cannot open the {self.what} {self.path}: it is another application's SQLite "
                f"database (application id {found:#x}; a {self.what}'s is "
                f"{self._application_id:#x}), such as a memory plugin's file. Fix: give the "
                f"path of a {self.what}, or of a file that does not exist yet."
            )

    def _newer(self, version: int) -> StorageError:
        return StorageError(
            f"The {self.what} {self.path} was written by a newer autogpt-core (schema "
            f"version {version}; this one reads up to {len(self._migrations)}). Fix: upgrade "
            "autogpt-core, or use another data directory."
        )

    # -- the pool -----------------------------------------------------------------------

    def _connect(self) -> Connection:
        with self.errors("open"):
            conn = sqlite3.connect(
                self.path,
                timeout=_BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,  # we issue BEGIN/COMMIT ourselves
                check_same_thread=False,  # pooled: used by one thread at a time
                factory=Connection,
            )
            try:
                # Reading the header here makes a non-database file fail now, not later.
                conn.execute("PRAGMA synchronous = NORMAL")
                conn.execute("PRAGMA foreign_keys = ON")
                conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
                self._on_connect(conn)
                conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            except BaseException:
                conn.close()
                raise
        return conn

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Connection]:
        with self._pool_lock:
            if self._closed:
                raise StorageError(f"The {self.what} {self.path} is closed.")
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
    def _transaction(self, conn: Connection) -> Iterator[None]:
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
