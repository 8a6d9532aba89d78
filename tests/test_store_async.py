"""``AsyncStore``'s methods are generated from ``SessionStore``'s: one awaitable twin per
method, with its name, signature and contract. Their behaviour over each implementation
is tested in tests/test_store_interface.py."""

from __future__ import annotations

import inspect
import threading
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from autogpt_core._errors import StorageError
from autogpt_core.store._async import AsyncStore
from autogpt_core.store._interface import SessionStore
from autogpt_core.store._records import CycleRecord
from autogpt_core.store._sqlite import Store

#: Not forwarded: closing is ``aclose``; ``write_each`` is what group commit calls.
NOT_FORWARDED = {"close", "write_each"}


def _interface_methods() -> list[str]:
    return sorted(
        name
        for name, value in vars(SessionStore).items()
        if inspect.isfunction(value) and not name.startswith("_") and name not in NOT_FORWARDED
    )


def test_every_interface_method_has_a_generated_awaitable_twin() -> None:
    """Each SessionStore method has an AsyncStore coroutine function of the same name,
    parameters and docstring (headed by how it runs); none is written out by hand."""
    source = inspect.getsource(AsyncStore)
    for name in _interface_methods():
        twin = getattr(AsyncStore, name)
        method = getattr(SessionStore, name)
        assert inspect.iscoroutinefunction(twin), name
        assert twin.__name__ == name
        assert twin.__qualname__ == f"AsyncStore.{name}"
        assert inspect.signature(twin) == inspect.signature(method), name
        assert twin.__doc__.startswith(f"Like ``SessionStore.{name}``, awaitable: "), name
        assert method.__doc__ in twin.__doc__
        assert f"async def {name}(" not in source, name


async def test_forwarders_call_the_implementations_method_by_name(tmp_path: Path) -> None:
    """A forwarder calls the store's own method (an override, not the interface's), with
    the arguments as given, in a worker thread."""
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any], bool]] = []

    class Recording(Store):
        def list_events(self, session_id: str, *, after_id: int = 0, limit: int = 1000) -> Any:
            main = threading.current_thread() is threading.main_thread()
            calls.append(("list_events", (session_id,), {"after_id": after_id}, main))
            return []

    with Recording(tmp_path / "s.sqlite3") as store:
        assert await AsyncStore(store).list_events("s", after_id=3) == []
    assert calls == [("list_events", ("s",), {"after_id": 3}, False)]


async def test_delete_session_waits_for_the_writes_queued_before_it(tmp_path: Path) -> None:
    """A deletion runs after the writes already queued, so it counts and removes them."""
    with Store(tmp_path / "s.sqlite3") as store:
        astore = AsyncStore(store)
        await astore.create_session("g", tmp_path, session_id="s", status="finished")
        footprints = []
        async with trio.open_nursery() as nursery:
            for n in range(1, 4):
                nursery.start_soon(astore.record_cycle, CycleRecord("s", n))
            await trio.testing.wait_all_tasks_blocked()

            async def delete() -> None:
                footprints.append(await astore.delete_session("s"))

            nursery.start_soon(delete)
        assert footprints[0].cycles == 3


async def test_a_write_failing_as_a_whole_fails_every_caller_of_its_batch(
    tmp_path: Path,
) -> None:
    """If the batch's transaction fails (the store is closed, the disk full), every
    caller in it gets the StorageError."""
    store = Store(tmp_path / "s.sqlite3")
    astore = AsyncStore(store)
    await astore.create_session("g", tmp_path, session_id="s")
    store.close()
    errors: list[str] = []

    async def write(n: int) -> None:
        try:
            await astore.record_cycle(CycleRecord("s", n))
        except StorageError as exc:
            errors.append(str(exc))

    async with trio.open_nursery() as nursery:
        for n in range(1, 4):
            nursery.start_soon(write, n)
    assert errors == [f"The session store {store.path} is closed."] * 3
    with pytest.raises(StorageError, match="closed"):
        await astore.get_session("s")
