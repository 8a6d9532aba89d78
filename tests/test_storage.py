"""``store/_storage.py``: the store's names where they were before the store was split.

The store's own tests: tests/test_store_interface.py (the contract, every implementation),
tests/test_store_sqlite.py, tests/test_store_migrations.py, tests/test_store_async.py;
memory: tests/test_memory_sqlite.py.
"""

from __future__ import annotations

import autogpt_core
from autogpt_core.store import _async, _interface, _records, _sqlite, _storage


def test_the_old_import_path_names_the_same_objects() -> None:
    """Every name the agent, the CLI and scripts import from ``_storage`` is the object
    its new module holds, and the public API exports the same ones."""
    moved = {
        "AsyncStore": _async.AsyncStore,
        "SessionStore": _interface.SessionStore,
        "Store": _sqlite.Store,
        **{
            name: getattr(_records, name)
            for name in (
                "ArtifactRecord",
                "CycleRecord",
                "CycleWrite",
                "Page",
                "SessionFootprint",
                "SessionRecord",
                "SessionStatus",
                "StatusWrite",
                "StoredEvent",
            )
        },
    }
    for name, value in moved.items():
        assert getattr(_storage, name) is value, name
        if name in autogpt_core.__all__:
            assert getattr(autogpt_core, name) is value, name
    assert "SessionStore" in autogpt_core.__all__


def test_the_session_store_has_no_memory_api() -> None:
    """Memory is the memory plugins' (memory_sqlite has its own database): neither the
    interface nor its implementations nor the facade store or recall memories."""
    for cls in (_interface.SessionStore, _sqlite.Store, _async.AsyncStore):
        assert not [name for name in dir(cls) if "memory" in name], cls
