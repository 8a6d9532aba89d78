"""``PostgresMemoryDB``: memories in PostgreSQL tables, with full-text search.

The semantics are ``memory_sqlite``'s ``MemoryDB``'s, sentence for sentence (the contract
suite in tests/test_memory_backends.py runs against both); what differs is how they are had:

- Words are found with PostgreSQL's text search (``english`` configuration: stemmed, stop
  words dropped), in a ``tsvector`` column computed from the text with its diacritics
  removed (``_fold``: "café" is found by "cafe", as FTS5's ``remove_diacritics`` does,
  without the ``unaccent`` extension), and a GIN index on it. A query is an OR of its
  words, each quoted, so nothing typed is read as ``tsquery`` syntax. An item ranks by how
  many of the query's words it has, then by ``ts_rank_cd`` (normalised by its length),
  mapped to (0, 1): FTS5's ``bm25`` also weighs how rare each word is, which this does
  not. A query of stop words
  only ("the") has no words to search for, and recalls the most recent items, as an
  empty one does.
- A session's recall reads that session's rows through the ``(session_id, created_at)``
  index; ``scope="all"`` of an owner reads the ``owner`` column's index. The owner is a
  column, copied from the item's metadata (``OWNER_KEY``) as it is stored.
- Connections come from a ``psycopg_pool.ConnectionPool`` (at most four: memory calls are
  short, and the session store's pool shares the server's ``max_connections``); writes
  take no lock: an item is one row, upserted by id.
- The schema is this module's ``MIGRATIONS``, recorded in ``memory_migrations`` and applied
  on opening by the session store's mechanism (``migrate_postgres``), under its advisory
  lock: tables ``memory_items`` and ``memory_migrations`` in the database the URL names,
  beside the session store's tables when it is the store's.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import time
import unicodedata
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.string import TextLoader
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from autogpt_core import StorageError
from autogpt_core.store._migrations import NewerSchema
from autogpt_core.store._postgres import shown_url
from autogpt_core.store._postgres_migrations import NotAStore, migrate_postgres
from hookspecs import JSON, MemoryHit, MemoryItem, MemoryQuery

from .._memory import OWNER_KEY, metadata_json

Connection = psycopg.Connection[tuple[Any, ...]]

MIGRATIONS_TABLE = "memory_migrations"
#: A recall query is an OR of its words; past this many, extra words add cost, not recall.
_MAX_QUERY_TERMS = 32
_WORD = re.compile(r"\w+")
_CONNECT_TIMEOUT = 10
_WHAT = "memory database"
_COLUMNS = "id, session_id, kind, text, metadata, created_at"

MIGRATIONS: list[Callable[[Connection], None]] = []


def _migration(function: Callable[[Connection], None]) -> Callable[[Connection], None]:
    MIGRATIONS.append(function)
    return function


@_migration
def m001_initial(conn: Connection) -> None:
    """The items, their text's lexemes (``tsv``, of the text without diacritics) and the
    indexes recall reads.

    ``seq`` orders items stored in the same instant (``created_at`` ties), as SQLite's
    ``seq`` does; metadata is ``json``, kept as written (see the store's migrations).
    """
    conn.execute(
        """
        CREATE TABLE memory_items (
            id          text COLLATE "C" PRIMARY KEY,
            seq         bigint GENERATED ALWAYS AS IDENTITY,
            session_id  text COLLATE "C" NOT NULL,
            owner       text,
            kind        text NOT NULL,
            text        text NOT NULL,
            metadata    json NOT NULL DEFAULT '{}',
            created_at  double precision NOT NULL,
            tsv         tsvector NOT NULL
        )
        """
    )
    conn.execute("CREATE INDEX memory_items_fts ON memory_items USING gin (tsv)")
    conn.execute(
        "CREATE INDEX memory_items_by_session ON memory_items (session_id, created_at DESC)"
    )
    conn.execute("CREATE INDEX memory_items_by_owner ON memory_items (owner, created_at DESC)")
    conn.execute("CREATE INDEX memory_items_by_created ON memory_items (created_at DESC)")


def _said(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _connect_defaults(url: str) -> dict[str, Any]:
    given = conninfo_to_dict(url)
    defaults = {"connect_timeout": _CONNECT_TIMEOUT, "application_name": "autogpt-memory"}
    return {key: value for key, value in defaults.items() if key not in given}


def _configure(conn: Connection) -> None:
    # Metadata reads back as the text stored, checked by _metadata as SQLite's is.
    conn.adapters.register_loader("json", TextLoader)


class PostgresMemoryDB:
    """The memories in the PostgreSQL database ``url`` (tables created or upgraded on
    opening).

    Raises ``StorageError`` naming the database (never its password) if the server cannot
    be reached, the database has a ``memory_items`` table no migration made, or a newer
    plugin wrote it. Thread-safe; ``close()`` it when done, or use it as a context manager.
    """

    def __init__(self, url: str, *, max_size: int = 4, timeout: float = 30.0) -> None:
        self.url = url
        self.name = shown_url(url)
        self._closed = False
        self._migrate()
        self._pool: ConnectionPool[Connection] = ConnectionPool(
            url,
            min_size=1,
            max_size=max_size,
            timeout=timeout,
            configure=_configure,
            kwargs=_connect_defaults(url),
            name="autogpt-memory",
            open=True,
        )

    def close(self) -> None:
        self._closed = True
        self._pool.close()

    def __enter__(self) -> PostgresMemoryDB:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PostgresMemoryDB({self.name!r})"

    # -- the memory API -----------------------------------------------------------------

    def memory_store(self, item: MemoryItem) -> str:
        """Store ``item`` (replacing an item with the same id) and return its id."""
        (outcome,) = self.store_each([item])
        if isinstance(outcome, StorageError):
            raise outcome
        return outcome

    def store_each(self, items: Sequence[MemoryItem]) -> list[str | StorageError]:
        """Store several items in one transaction, each on its own: an item that cannot be
        stored gets its ``StorageError`` in the returned list instead of its id."""
        now = time.time()
        outcomes: list[str | StorageError] = []
        rows: list[tuple[Any, ...]] = []
        for item in items:
            try:
                metadata = metadata_json(item)
            except StorageError as exc:
                outcomes.append(exc)
                continue
            if "\x00" in item.text or "\\u0000" in metadata:
                outcomes.append(
                    StorageError(
                        f"Cannot store memory item {item.id!r}: PostgreSQL text cannot hold "
                        "the character U+0000."
                    )
                )
                continue
            item_id = item.id or uuid.uuid4().hex
            owner = item.metadata.get(OWNER_KEY)
            outcomes.append(item_id)
            rows.append(
                (
                    item_id,
                    item.session_id,
                    owner if isinstance(owner, str) else None,
                    item.kind,
                    item.text,
                    metadata,
                    item.created_at or now,
                    _fold(item.text),
                )
            )
        if rows:
            with self._transaction("write to") as conn, conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO memory_items (id, session_id, owner, kind, text, metadata,"
                    " created_at, tsv) VALUES (%s, %s, %s, %s, %s, %s, %s,"
                    " to_tsvector('english', %s)) ON CONFLICT (id) DO UPDATE SET"
                    " session_id = excluded.session_id, owner = excluded.owner,"
                    " kind = excluded.kind, text = excluded.text, metadata = excluded.metadata,"
                    " created_at = excluded.created_at, tsv = excluded.tsv",
                    rows,
                )
        return outcomes

    def memory_recall(
        self,
        query: MemoryQuery,
        session_id: str,
        *,
        backend: str = "memory_postgres",
        owner: str | None = None,
    ) -> list[MemoryHit]:
        """Up to ``query.limit`` items matching ``query.text``, best first (see
        ``memory_sqlite``'s ``MemoryDB.memory_recall``)."""
        limit = max(query.limit, 0)
        where, params = _where(query, session_id, owner)
        words = _tsquery(query.text)
        with self._transaction("read") as conn:
            rows = []
            if words is not None:
                # Rank: how many of the query's words the item has, then how densely.
                rows = conn.execute(
                    f"SELECT {_COLUMNS}, (SELECT count(*) FROM unnest(%s::text[]) AS w"
                    " WHERE tsv @@ to_tsquery('english', w)) + ts_rank_cd(tsv, q, 1) AS rank"
                    " FROM memory_items, to_tsquery('english', %s) AS q"
                    f" WHERE tsv @@ q AND {where} ORDER BY rank DESC, created_at DESC, seq DESC"
                    " LIMIT %s",
                    (words.split(" | "), words, *params, limit),
                ).fetchall()
            # Nothing matched: a query of stop words only has no words to search for, and
            # recalls the most recent items, as an empty one does (asked only then).
            if not rows and (words is None or _usable(conn, words) is None):
                rows = conn.execute(
                    f"SELECT {_COLUMNS}, 0.0 FROM memory_items WHERE {where}"
                    " ORDER BY created_at DESC, seq DESC LIMIT %s",
                    (*params, limit),
                ).fetchall()
        return [self._hit(row, backend) for row in rows]

    def memory_forget(
        self, query: MemoryQuery, session_id: str, *, owner: str | None = None
    ) -> int:
        """Forget items and return how many (see ``memory_sqlite``'s ``MemoryDB``)."""
        where, params = _where(query, session_id, owner)
        words = _tsquery(query.text)
        if query.text.strip() and words is None:
            return 0
        with self._transaction("write to") as conn:
            if words is None:
                cursor = conn.execute(f"DELETE FROM memory_items WHERE {where}", params)
            else:
                match = _usable(conn, words)
                if match is None:
                    return 0  # stop words only: nothing to match
                cursor = conn.execute(
                    f"DELETE FROM memory_items WHERE tsv @@ to_tsquery('english', %s) AND {where}",
                    (match, *params),
                )
            return max(cursor.rowcount, 0)

    def _hit(self, row: tuple[Any, ...], backend: str) -> MemoryHit:
        metadata = _metadata(row[4])
        if metadata is None:
            raise StorageError(
                f"The {_WHAT} {self.name} is damaged: memory item {row[0]}: its metadata is "
                "not a JSON object. Fix: delete that item "
                f"(DELETE FROM memory_items WHERE id = '{row[0]}')."
            )
        item = MemoryItem(
            text=row[3],
            session_id=row[1],
            kind=row[2],
            id=row[0],
            metadata=metadata,
            created_at=row[5],
        )
        return MemoryHit(item=item, score=_score(float(row[6])), backend=backend)

    # -- the database -------------------------------------------------------------------

    def _migrate(self) -> None:
        try:
            conn = psycopg.connect(self.url, **_connect_defaults(self.url))
        except psycopg.OperationalError as exc:
            raise StorageError(
                f"Cannot connect to the {_WHAT} {self.name} ({_said(exc)}). Fix: check that "
                "the PostgreSQL server runs and is reachable, and that the URL is right (the "
                "memory_postgres 'url' setting, or the session store's URL when it is empty)."
            ) from exc
        except psycopg.ProgrammingError as exc:
            raise StorageError(
                f"The {_WHAT} URL is not a PostgreSQL connection string ({_said(exc)}). Fix: "
                "write it like postgresql://user@host:5432/dbname."
            ) from exc
        with conn, self._errors("open"):
            try:
                with conn.transaction():
                    migrate_postgres(
                        conn, MIGRATIONS, table=MIGRATIONS_TABLE, claims="memory_items"
                    )
            except NewerSchema as exc:
                raise StorageError(
                    f"The {_WHAT} {self.name} was written by a newer memory_postgres plugin "
                    f"(schema version {exc.version}; this one reads up to {len(MIGRATIONS)}). "
                    "Fix: upgrade autogpt-core, or set the 'url' setting to another database."
                ) from None
            except NotAStore:
                raise StorageError(
                    f"Cannot open the {_WHAT} {self.name}: it has a 'memory_items' table but no "
                    f"{MIGRATIONS_TABLE} table: it is another application's. Fix: set the "
                    "memory_postgres 'url' setting to a database of its own."
                ) from None

    @contextlib.contextmanager
    def _transaction(self, action: str) -> Iterator[Connection]:
        if self._closed:
            raise StorageError(f"The {_WHAT} {self.name} is closed.")
        with self._errors(action), self._pool.connection() as conn:
            yield conn

    @contextlib.contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except PoolClosed:
            raise StorageError(f"The {_WHAT} {self.name} is closed.") from None
        except PoolTimeout as exc:
            raise StorageError(
                f"Cannot {action} the {_WHAT} {self.name}: no connection to it within "
                f"{self._pool.timeout:g} seconds. Fix: check that the PostgreSQL server runs "
                "and accepts connections (max_connections)."
            ) from exc
        except psycopg.OperationalError as exc:
            raise StorageError(
                f"Cannot {action} the {_WHAT} {self.name} ({_said(exc)}). Fix: check that the "
                "PostgreSQL server runs and is reachable."
            ) from exc
        except psycopg.Error as exc:
            raise StorageError(f"Cannot {action} the {_WHAT} {self.name} ({_said(exc)}).") from exc


def _where(query: MemoryQuery, session_id: str, owner: str | None) -> tuple[str, tuple[Any, ...]]:
    """The WHERE clause keeping the items of ``query``'s scope and kinds."""
    clauses: list[str] = []
    params: list[Any] = []
    if query.scope == "session":
        clauses.append("session_id = %s")
        params.append(session_id)
    elif query.scope == "all":
        if owner is not None:
            clauses.append("owner = %s")
            params.append(owner)
    else:
        raise ValueError(f"unknown memory scope {query.scope!r}; use 'session' or 'all'")
    if query.kinds:
        clauses.append("kind = ANY(%s)")
        params.append(list(query.kinds))
    return " AND ".join(clauses) or "TRUE", tuple(params)


def _tsquery(text: str) -> str | None:
    """A ``tsquery`` matching any word of ``text``, or ``None`` if it has no words.

    Each word is quoted, so nothing the user typed (``&``, ``!``, ``:*``, parentheses) is
    read as ``tsquery`` syntax; ``\\w`` never matches a quote or a backslash.
    """
    words = list(dict.fromkeys(word.lower() for word in _WORD.findall(_fold(text))))
    if not words:
        return None
    return " | ".join(f"'{word}'" for word in words[:_MAX_QUERY_TERMS])


def _fold(text: str) -> str:
    """``text`` without diacritics (decomposed, combining marks dropped)."""
    if text.isascii():
        return text
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def _usable(conn: Connection, words: str) -> str | None:
    """``words`` if its query keeps any lexeme once stop words are dropped, else ``None``."""
    row = conn.execute(
        "SELECT numnode(to_tsquery('english', %s)) > 0", (words,), prepare=True
    ).fetchone()
    return words if row is not None and row[0] else None


def _score(rank: float) -> float:
    """Map a rank (0 or more, higher is better) to [0, 1)."""
    if math.isinf(rank) or math.isnan(rank):
        return 1.0 if rank > 0 else 0.0
    relevance = max(rank, 0.0)
    return relevance / (1.0 + relevance)


def _metadata(value: object) -> dict[str, JSON] | None:
    if not isinstance(value, str | bytes):
        return None
    try:
        loaded = json.loads(value)
    except (ValueError, RecursionError):
        return None
    return loaded if isinstance(loaded, dict) else None
