"""The memory backends' shared contract: ``memory_sqlite``'s ``MemoryDB`` and
``memory_postgres``'s ``PostgresMemoryDB`` run the same tests (recall, ranking, scopes,
owners, forgetting, odd query text, group commit), the PostgreSQL one on a real server
(``postgres_url``). What only one of them has (a file, its migrations) is tested in
tests/test_memory_sqlite.py and tests/test_memory_postgres.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from autogpt_core._errors import StorageError
from autogpt_plugins._memory import MemoryBackend, MemoryWriter
from autogpt_plugins.memory_postgres import PostgresMemoryDB
from autogpt_plugins.memory_sqlite import MemoryDB
from hookspecs import MemoryItem, MemoryQuery


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MemoryBackend]:
    opened: MemoryBackend
    if request.param == "sqlite":
        opened = MemoryDB(tmp_path / "data" / "memory.sqlite3")
    else:
        opened = PostgresMemoryDB(request.getfixturevalue("postgres_url"))
    try:
        yield opened
    finally:
        opened.close()


def _remember(db: MemoryBackend, session_id: str, *texts: str) -> list[str]:
    return [db.memory_store(MemoryItem(text=t, session_id=session_id)) for t in texts]


def test_recall_ranks_the_best_match_first(db: MemoryBackend) -> None:
    """The item matching more (and rarer) query words ranks first, with a score in (0, 1)."""
    _remember(
        db,
        "s",
        "The weather in Paris was sunny today.",
        "Python 3.11 is required to build the project.",
        "Remember to water the plants.",
        "The build fails on Python 3.10 with a syntax error.",
        "Lunch is at noon.",
    )
    _remember(db, "other", "Python everywhere: python python python.")
    for scope in ("session", "all"):
        query = MemoryQuery("which python version builds the project?", scope=scope)
        hits = db.memory_recall(query, "s")
        assert hits[0].item.text == "Python 3.11 is required to build the project."
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert all(0 < h.score < 1 for h in hits)
        assert "Lunch is at noon." not in [h.item.text for h in hits]


def test_recall_stems_and_folds_accents(db: MemoryBackend) -> None:
    """Recall finds other forms of a word and ignores diacritics."""
    _remember(db, "s", "We learned that caching helps.", "Meet at the café.", "Unrelated.")
    assert db.memory_recall(MemoryQuery("learning"), "s")[0].item.text.startswith("We learned")
    assert db.memory_recall(MemoryQuery("cafe"), "s")[0].item.text == "Meet at the café."


def test_recall_scope_session_or_all(db: MemoryBackend) -> None:
    """Scope 'session' sees the session's own items only; 'all' sees every session's."""
    _remember(db, "a", "alpha fact about deployment")
    _remember(db, "b", "beta fact about deployment")
    own = db.memory_recall(MemoryQuery("deployment", scope="session"), "a")
    assert [h.item.session_id for h in own] == ["a"]
    every = db.memory_recall(MemoryQuery("deployment", scope="all"), "a")
    assert sorted(h.item.session_id for h in every) == ["a", "b"]
    assert db.memory_recall(MemoryQuery("deployment"), "nobody") == []
    for text in ("x", ""):
        with pytest.raises(ValueError, match="unknown memory scope"):
            db.memory_recall(MemoryQuery(text, scope="everything"), "a")
        with pytest.raises(ValueError, match="unknown memory scope"):
            db.memory_forget(MemoryQuery(text, scope="everything"), "a")


def test_empty_query_recalls_the_most_recent(db: MemoryBackend) -> None:
    """An empty query returns the newest items first, up to the limit."""
    for n in range(4):
        db.memory_store(MemoryItem(text=f"item {n}", session_id="s", created_at=100.0 + n))
    db.memory_store(MemoryItem(text="newest, elsewhere", session_id="t", created_at=200.0))
    hits = db.memory_recall(MemoryQuery("", limit=2), "s")
    assert [h.item.text for h in hits] == ["item 3", "item 2"]
    assert all(h.score == 0.0 for h in hits)
    every = db.memory_recall(MemoryQuery("", limit=2, scope="all"), "s")
    assert [h.item.text for h in every] == ["newest, elsewhere", "item 3"]


def test_memory_items_round_trip_and_upsert(db: MemoryBackend) -> None:
    """An item keeps its kind and metadata; storing the same id again replaces it, in its
    session or moved to another."""
    item = MemoryItem(text="old text", session_id="s", kind="fact", metadata={"source": "web"})
    item_id = db.memory_store(item)
    (hit,) = db.memory_recall(MemoryQuery("old"), "s", backend="test")
    assert (hit.item.id, hit.item.kind, hit.item.metadata, hit.backend) == (
        item_id,
        "fact",
        {"source": "web"},
        "test",
    )
    db.memory_store(MemoryItem(text="new words", session_id="s", id=item_id))
    assert db.memory_recall(MemoryQuery("old"), "s") == []
    assert db.memory_recall(MemoryQuery("new"), "s")[0].item.id == item_id
    db.memory_store(MemoryItem(text="moved words", session_id="t", id=item_id))
    assert db.memory_recall(MemoryQuery("words"), "s") == []
    (moved,) = db.memory_recall(MemoryQuery("words", scope="all"), "s")
    assert (moved.item.id, moved.item.session_id) == (item_id, "t")
    assert db.memory_recall(MemoryQuery("moved"), "t")[0].item.id == item_id


def test_recall_accepts_any_text(db: MemoryBackend) -> None:
    """No query text, however odd (quotes, operators, '*', '-', unicode), raises."""
    if True:
        _remember(db, "s", 'a "quoted" AND NEAR(x y) - * ^ text', "ordinary words here")

        @settings(max_examples=300, deadline=None)
        @given(
            text=st.one_of(
                st.text(),
                st.lists(
                    st.sampled_from(
                        [
                            '"',
                            "AND",
                            "OR",
                            "NOT",
                            "NEAR(",
                            ")",
                            "*",
                            "-",
                            "^",
                            ":",
                            "&",
                            "|",
                            "!",
                            "'",
                            "\\",
                            ":*",
                            "<->",
                            "(",
                            "the",
                        ]
                    )
                ).map(" ".join),
            ),
            scope=st.sampled_from(["session", "all"]),
        )
        def check(text: str, scope: str) -> None:
            hits = db.memory_recall(MemoryQuery(text, scope=scope), "s")
            assert len(hits) <= 5
            db.memory_forget(MemoryQuery(text + " zzzunmatched", scope="session"), "none")

        check()
        assert len(db.memory_recall(MemoryQuery("", limit=10), "s")) == 2


def test_forget_by_query_by_session_and_everything(db: MemoryBackend) -> None:
    """forget removes matching items in scope, a whole session's, or every item."""
    _remember(db, "a", "keep this note", "drop this secret", "another secret")
    _remember(db, "b", "b's secret", "b's note")
    assert db.memory_forget(MemoryQuery("secret"), "a") == 2
    assert [h.item.text for h in db.memory_recall(MemoryQuery("secret", scope="all"), "a")] == [
        "b's secret"
    ]
    assert db.memory_forget(MemoryQuery("!!!"), "a") == 0  # no words: nothing
    assert db.memory_forget(MemoryQuery("secret"), "nobody") == 0
    assert db.memory_forget(MemoryQuery(""), "b") == 2
    assert db.memory_recall(MemoryQuery("", scope="all"), "b")[0].item.text == "keep this note"
    assert db.memory_forget(MemoryQuery("", scope="all"), "x") == 1
    assert db.memory_recall(MemoryQuery("", scope="all"), "x") == []


def test_forget_respects_kinds(db: MemoryBackend) -> None:
    """Forgetting observations leaves notes alone."""
    db.memory_store(MemoryItem("a note", "s", kind="note"))
    db.memory_store(MemoryItem("an observation", "s", kind="observation"))
    assert db.memory_forget(MemoryQuery("", kinds=("observation",)), "s") == 1
    (hit,) = db.memory_recall(MemoryQuery(""), "s")
    assert hit.item.kind == "note"
    assert db.memory_forget(MemoryQuery("note", kinds=("observation",)), "s") == 0


def test_metadata_that_is_not_json_is_refused_alone(db: MemoryBackend) -> None:
    """store_each stores the good items of a batch and reports the one whose metadata is
    not JSON."""
    outcomes = db.store_each(
        [
            MemoryItem("good", "s", id="g"),
            MemoryItem("bad", "s", metadata={"x": float("nan")}),
        ]
    )
    assert outcomes[0] == "g"
    assert isinstance(outcomes[1], StorageError)
    with pytest.raises(StorageError, match="Cannot store memory item"):
        db.memory_store(MemoryItem("bad", "s", metadata={"x": object()}))
    assert [h.item.text for h in db.memory_recall(MemoryQuery(""), "s")] == ["good"]


async def test_the_writer_group_commits_concurrent_stores(db: MemoryBackend) -> None:
    """Items stored at once by many sessions are written in few transactions, and each
    caller gets its item's id or its own error."""
    writer = MemoryWriter(db)
    batches: list[int] = []
    store_each = db.store_each

    def counting(items: Any) -> Any:
        batches.append(len(items))
        return store_each(items)

    db.store_each = counting  # type: ignore[method-assign]
    ids: dict[int, str] = {}
    errors: list[StorageError] = []

    async def store(n: int) -> None:
        metadata = {"bad": float("inf")} if n == 7 else {}
        try:
            ids[n] = await writer.store(MemoryItem(f"note {n}", f"s{n % 5}", metadata=metadata))
        except StorageError as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        for n in range(40):
            nursery.start_soon(store, n)
    await writer.flush()
    assert sum(batches) == 40
    assert len(batches) < 10
    assert len(ids) == 39
    assert len(errors) == 1
    assert len(db.memory_recall(MemoryQuery("", scope="all", limit=100), "s0")) == 39


def test_scope_all_stays_within_the_owner(db: MemoryBackend) -> None:
    """With an owner, 'all' recalls and forgets that owner's items only (and the items
    of its own session); without one (the terminal), every item."""
    db.memory_store(MemoryItem("alice's deploy note", "a1", metadata={"owner": "alice"}))
    db.memory_store(MemoryItem("alice's other deploy note", "a2", metadata={"owner": "alice"}))
    db.memory_store(MemoryItem("bob's deploy note", "b1", metadata={"owner": "bob"}))
    db.memory_store(MemoryItem("nobody's deploy note", "t1"))
    for text in ("deploy", ""):
        seen = db.memory_recall(MemoryQuery(text, scope="all"), "a1", owner="alice")
        assert sorted(h.item.session_id for h in seen) == ["a1", "a2"]
        every = db.memory_recall(MemoryQuery(text, scope="all"), "a1")
        assert sorted(h.item.session_id for h in every) == ["a1", "a2", "b1", "t1"]
    assert db.memory_forget(MemoryQuery("deploy", scope="all"), "b1", owner="bob") == 1
    remaining = db.memory_recall(MemoryQuery("", scope="all", limit=10), "x")
    assert sorted(h.item.session_id for h in remaining) == ["a1", "a2", "t1"]


def test_stop_words_alone_recall_the_most_recent_or_what_contains_them(
    db: MemoryBackend,
) -> None:
    """A query of common words never raises, and finds at most what an empty query does."""
    _remember(db, "s", "the first", "a second")
    hits = db.memory_recall(MemoryQuery("the a of"), "s")
    assert {h.item.text for h in hits} <= {"the first", "a second"}
