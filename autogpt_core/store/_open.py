"""``open_store``: the session store a location names, a SQLite file's path or a
PostgreSQL URL (``postgresql://...``): the one place that chooses the implementation."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .._errors import StorageError

if TYPE_CHECKING:  # imported lazily: the config reads is_postgres_url without the store
    from ._interface import SessionStore

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(location: Path | str) -> bool:
    """Whether ``location`` is a PostgreSQL URL rather than a file's path."""
    return isinstance(location, str) and location.startswith(_POSTGRES_SCHEMES)


def shown_location(location: Path | str) -> str:
    """``location`` for messages: a path as is, a URL without its password."""
    if not is_postgres_url(location):
        return str(location)
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(str(location))
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        port = f":{parts.port}" if parts.port else ""
        user = f"{parts.username}@" if parts.username else ""
    except ValueError:
        return "a PostgreSQL URL that cannot be read"
    return urlunsplit((parts.scheme, f"{user}{host}{port}", parts.path, "", ""))


def open_store(location: Path | str) -> SessionStore:
    """The session store at ``location``: ``PostgresStore`` for a ``postgresql://`` (or
    ``postgres://``) URL, else the SQLite ``Store`` in that file (created if missing).

    Raises ``StorageError`` as the store's constructor does, and for a URL when the
    PostgreSQL driver is not installed (saying how to install it).
    """
    if is_postgres_url(location):
        try:
            from ._postgres import PostgresStore
        except ImportError as exc:
            raise StorageError(
                f"The session store {shown_location(location)} is a PostgreSQL database, "
                f"and its driver is not installed ({exc}). Fix: pip install "
                "'autogpt-core[postgres]' (psycopg and psycopg-pool)."
            ) from exc
        return PostgresStore(str(location))
    from ._sqlite import Store

    return Store(location)
