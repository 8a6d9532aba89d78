"""The PostgreSQL session store's schema, as migrations: the mechanism of ``_migrations.py``
(a numbered list of functions, applied in order, each recorded with its work in one
transaction), with PostgreSQL's own list.

Migration ``n`` (``POSTGRES_MIGRATIONS[n - 1]``, from 1) brings a database from schema
version ``n - 1`` to ``n``. Append only: a released migration is not changed. PostgreSQL
has no ``user_version``: the version is the highest number in ``store_migrations``.

``migrate_postgres`` runs in one transaction that first takes an advisory lock
(``MIGRATION_LOCK``): of two processes starting at once on a new database, one migrates
while the other waits, then finds nothing left to do. DDL is transactional in PostgreSQL,
so a migration that fails leaves nothing of itself behind.

Schema (version ``POSTGRES_SCHEMA_VERSION``): the tables of the SQLite store, with
``seq`` columns (insertion order, which SQLite's ``rowid`` gives) and ``json`` columns.

JSON is kept in ``json`` columns, not ``jsonb``: the server checks it is JSON, and keeps
the text as written, so what is read back is exactly what was stored (``jsonb`` reorders
keys, drops duplicate ones, turns ``1e+20`` into an integer and refuses ``\\u0000``). The
store never queries inside these values or indexes them, which is what ``jsonb`` is for;
they are still readable with ``->``/``->>`` for ad-hoc queries.
"""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from ._migrations import APPLICATION_ID, NewerSchema, apply_pending
from ._records import SessionStatus

PostgresMigration = Callable[[psycopg.Connection], None]

POSTGRES_MIGRATIONS: list[PostgresMigration] = []

MIGRATION_LOCK = (APPLICATION_ID << 32) | 1
"""The advisory lock (``pg_advisory_xact_lock``) migrations take: "AGSS", 1."""


def _migration(function: PostgresMigration) -> PostgresMigration:
    POSTGRES_MIGRATIONS.append(function)
    return function


_STATUSES = ", ".join(f"'{status.value}'" for status in SessionStatus)


@_migration
def m001_initial(conn: psycopg.Connection) -> None:
    """Sessions, cycles, events, artifacts and leases.

    Ids are ``COLLATE "C"``: compared byte by byte (code point by code point), so that the
    ids starting with a prefix sort together, as ``resolve_session_id`` needs, whatever
    the database's locale.
    """
    conn.execute(
        f"""
        CREATE TABLE sessions (
            id          text COLLATE "C" PRIMARY KEY,
            seq         bigint GENERATED ALWAYS AS IDENTITY,
            goal        text NOT NULL,
            status      text NOT NULL CHECK (status IN ({_STATUSES})),
            created_at  double precision NOT NULL,
            updated_at  double precision NOT NULL,
            workspace   text NOT NULL,
            config      json NOT NULL DEFAULT '{{}}',
            result      text NOT NULL DEFAULT '',
            budget      json NOT NULL DEFAULT '{{}}'
        )
        """
    )
    conn.execute("CREATE INDEX sessions_by_created ON sessions (created_at DESC, seq DESC)")
    conn.execute(
        """
        CREATE TABLE cycles (
            session_id    text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            number        integer NOT NULL CHECK (number >= 1),
            plan          json NOT NULL DEFAULT 'null',
            command       json NOT NULL DEFAULT 'null',
            result        json NOT NULL DEFAULT 'null',
            usage         json NOT NULL DEFAULT 'null',
            messages      json NOT NULL DEFAULT '[]',
            completed_at  double precision NOT NULL,
            PRIMARY KEY (session_id, number)
        )
        """
    )
    conn.execute(
        """
        CREATE TABLE events (
            id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            session_id  text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            cycle       integer NOT NULL,
            kind        text NOT NULL,
            data        json NOT NULL DEFAULT '{}',
            ts          double precision NOT NULL
        )
        """
    )
    conn.execute("CREATE INDEX events_by_session ON events (session_id, id)")
    conn.execute(
        """
        CREATE TABLE artifacts (
            id             text COLLATE "C" PRIMARY KEY,
            seq            bigint GENERATED ALWAYS AS IDENTITY,
            session_id     text COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
            relative_path  text NOT NULL,
            file_name      text NOT NULL,
            agent_created  boolean NOT NULL DEFAULT true,
            cycle          integer,
            created_at     double precision NOT NULL
        )
        """
    )
    conn.execute("CREATE INDEX artifacts_by_session ON artifacts (session_id, created_at, seq)")
    # No foreign key to sessions: a new session's lease is taken before its row is stored,
    # so that a run which cannot start leaves nothing behind.
    conn.execute(
        """
        CREATE TABLE leases (
            session_id   text COLLATE "C" PRIMARY KEY,
            holder       text NOT NULL,
            hostname     text NOT NULL,
            pid          integer NOT NULL,
            acquired_at  double precision NOT NULL,
            renewed_at   double precision NOT NULL,
            expires_at   double precision NOT NULL
        )
        """
    )
    conn.execute("CREATE INDEX leases_by_host ON leases (hostname, expires_at)")


POSTGRES_SCHEMA_VERSION = len(POSTGRES_MIGRATIONS)
"""The schema version this code writes; a database with a higher one is refused."""


class NotAStore(Exception):
    """The database holds tables of the store's names, but is not a session store."""


def schema_version(conn: psycopg.Connection, table: str) -> int | None:
    """The database's schema version, ``None`` if ``table`` does not exist."""
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
    if row is None or not row[0]:
        return None
    found = conn.execute(f"SELECT coalesce(max(number), 0) FROM {table}").fetchone()
    return int(found[0]) if found is not None else 0


def migrate_postgres(
    conn: psycopg.Connection,
    migrations: list[PostgresMigration],
    *,
    table: str,
    now: float | None = None,
    claims: str = "sessions",
) -> int:
    """Apply the ``migrations`` not yet applied to ``conn``'s database, in order, recording
    each in ``table``; return how many were applied.

    Call it inside a transaction: it takes ``MIGRATION_LOCK`` for the rest of it, so that
    two processes migrating at once apply each migration once. Raises ``NewerSchema`` for
    a database of a newer schema, ``NotAStore`` for one with a ``claims`` table (the first
    one the migrations make) that no migration made. Plugins keeping tables in the store's
    database (``memory_postgres``) use it with migrations and tables of their own.
    """
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
    version = schema_version(conn, table)
    if version is None:
        row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (claims,)).fetchone()
        if row is not None and row[0]:
            raise NotAStore()
        conn.execute(
            f"CREATE TABLE {table} (number integer PRIMARY KEY, name text NOT NULL,"
            " applied_at double precision)"
        )
        version = 0
    if version > len(migrations):
        raise NewerSchema(version)
    return apply_pending(conn, migrations, table, "%s", now)
