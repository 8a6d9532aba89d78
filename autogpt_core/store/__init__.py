"""The session store: its interface and records, the SQLite and PostgreSQL
implementations, their schema migrations, the async facade, leases.

Private: the public API is ``autogpt_core``'s.

- ``_interface.py``: ``SessionStore``, the contract every implementation follows;
- ``_records.py``: the values a store keeps and returns (``SessionRecord``, ``Page``, ...);
- ``_sqlite.py``: ``Store``, the SQLite implementation;
- ``_sqlite_file.py``: a SQLite file created whole and migrated; WAL; a connection pool;
- ``_migrations.py``: the SQLite schema as numbered migrations, and what applies them;
- ``_postgres.py``: ``PostgresStore``, the PostgreSQL implementation (psycopg, a pool);
- ``_postgres_migrations.py``: its schema as numbered migrations, under an advisory lock;
- ``_open.py``: ``open_store``, the implementation a path or a ``postgresql://`` URL names;
- ``_columns.py``: records to JSON columns and back, damage reported by column;
- ``_async.py``: ``AsyncStore``, forwarders generated from ``SessionStore``; group commit;
- ``_lease.py``: who runs a session: leases, heartbeats, takeovers;
- ``_storage.py``: the names' old home, re-exported for the modules importing from there.
"""
