"""Load order: deterministic, respects every edge, names every plugin in a cycle."""

from __future__ import annotations

from hypothesis import given, settings

from autogpt_core.plugins._manifest import Manifest
from autogpt_core.plugins._ordering import resolve_order
from tests.strategies import plugin_graphs


def _m(
    pid: str, requires: list[str] = (), after: list[str] = (), before: list[str] = ()
) -> Manifest:  # type: ignore[assignment]
    return Manifest(
        id=pid,
        name=pid,
        version="1",
        requires=tuple(requires),
        load_after=tuple(after),
        load_before=tuple(before),
    )


def test_ties_are_broken_by_id() -> None:
    """Independent plugins load in id order, whatever order they were given in."""
    order, failed = resolve_order({p: _m(p) for p in ["c", "a", "b"]})
    assert order == ["a", "b", "c"]
    assert failed == {}


def test_requires_and_soft_edges() -> None:
    """requires and load_after put the other first; load_before puts this one first."""
    manifests = {
        "a": _m("a", requires=["z"]),
        "z": _m("z"),
        "m": _m("m", after=["a", "absent"], before=["b"]),
        "b": _m("b"),
    }
    order, failed = resolve_order(manifests)
    assert failed == {}
    assert order.index("z") < order.index("a") < order.index("m") < order.index("b")


def test_cycle_names_every_member() -> None:
    """A cycle fails each plugin in it with a message naming all of them; others load."""
    manifests = {
        "a": _m("a", after=["b"]),
        "b": _m("b", after=["c"]),
        "c": _m("c", requires=["a"]),
        "d": _m("d"),
        "e": _m("e", after=["a"]),
    }
    order, failed = resolve_order(manifests)
    assert order == ["d"]
    for pid in "abc":
        assert "cycle" in failed[pid]
        assert all(name in failed[pid] for name in "abc")
    assert "cannot be ordered" in failed["e"]


def test_missing_hard_dependency_fails_transitively() -> None:
    """A missing requires fails the plugin and whoever requires it, with the fix."""
    manifests = {"a": _m("a", requires=["gone"]), "b": _m("b", requires=["a"]), "c": _m("c")}
    order, failed = resolve_order(manifests, {"off": "disabled"})
    assert order == ["c"]
    assert "pip install autogpt-plugin-gone" in failed["a"]
    assert "'a'" in failed["b"]
    order, failed = resolve_order({"x": _m("x", requires=["off"])}, {"off": "disabled"})
    assert "autogpt plugins enable off" in failed["x"]


@settings(max_examples=300, deadline=None)
@given(plugin_graphs())
def test_order_respects_every_edge(graph: dict[str, dict[str, list[str]]]) -> None:
    """Every plugin is ordered or failed, every edge is respected, input order is irrelevant."""
    manifests = {
        pid: _m(pid, edges["requires"], edges["load_after"], edges["load_before"])
        for pid, edges in graph.items()
    }
    order, failed = resolve_order(manifests)
    assert set(order) | set(failed) == set(manifests)
    assert not set(order) & set(failed)
    pos = {pid: i for i, pid in enumerate(order)}
    for pid in order:
        m = manifests[pid]
        for dep in (*m.requires, *m.load_after):
            if dep in pos:
                assert pos[dep] < pos[pid]
        for dep in m.requires:
            assert dep in pos
        for dep in m.load_before:
            if dep in pos:
                assert pos[pid] < pos[dep]
    reordered = dict(reversed(list(manifests.items())))
    assert resolve_order(reordered) == (order, failed)
