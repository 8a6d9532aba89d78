"""Load order: a deterministic topological sort of the enabled plugins.

Edges: ``requires`` and ``load_after`` put the named plugin first; ``load_before`` puts
this plugin first. ``load_after``/``load_before`` are soft (ignored when the other plugin
is absent); a missing ``requires`` fails the plugin and, transitively, whoever requires it.
Ties are broken by plugin id, so the order never depends on installation order.

Load order decides hook call order: pluggy calls the implementation registered *last*
first. So **if A loads after B, A's implementations are called before B's** (within the
same tryfirst / normal / trylast group): a plugin that loads after another can override
its ``firstresult`` answers and wraps it.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from ._manifest import Manifest


def resolve_order(
    manifests: Mapping[str, Manifest], unavailable: Mapping[str, str] | None = None
) -> tuple[list[str], dict[str, str]]:
    """Order the plugins in ``manifests``; return ``(order, failed)``.

    ``unavailable`` maps ids that are installed but not loadable (disabled, broken) to why;
    a plugin that ``requires`` one of them, or an id not present at all, fails too.
    ``failed`` maps each failed id to a message naming the cause and the fix.
    """
    unavailable = dict(unavailable or {})
    failed: dict[str, str] = {}
    active = dict(manifests)
    # Missing hard dependencies, to a fixed point: a plugin failing may fail its dependents.
    changed = True
    while changed:
        changed = False
        for plugin_id, manifest in sorted(active.items()):
            for dep in manifest.requires:
                if dep in active:
                    continue
                if dep in failed:
                    why = f"requires {dep!r}, which failed to load"
                elif dep in unavailable:
                    why = f"requires {dep!r}, which is {unavailable[dep]}"
                    if unavailable[dep] == "disabled":
                        why += f": run 'autogpt plugins enable {dep}'"
                else:
                    why = (
                        f"requires {dep!r}, which is not installed: "
                        f"pip install autogpt-plugin-{dep}"
                    )
                failed[plugin_id] = why
                del active[plugin_id]
                changed = True
                break

    after: dict[str, set[str]] = {pid: set() for pid in active}
    for plugin_id, manifest in active.items():
        for dep in (*manifest.requires, *manifest.load_after):
            if dep in active:
                after[plugin_id].add(dep)
        for dep in manifest.load_before:
            if dep in active:
                after[dep].add(plugin_id)

    indegree = {pid: len(deps) for pid, deps in after.items()}
    dependents: dict[str, list[str]] = {pid: [] for pid in active}
    for pid, deps in after.items():
        for dep in deps:
            dependents[dep].append(pid)
    ready = [pid for pid, n in indegree.items() if n == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        pid = heapq.heappop(ready)
        order.append(pid)
        for nxt in dependents[pid]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                heapq.heappush(ready, nxt)

    if len(order) < len(active):
        stuck = {pid for pid in active if pid not in set(order)}
        for cycle in _cycles(after, stuck):
            path = " -> ".join([*cycle, cycle[0]])
            for pid in cycle:
                failed[pid] = (
                    f"load-order cycle {path}: remove one of these 'requires', 'load_after' "
                    "or 'load_before' entries"
                )
        # Plugins stuck only because they come after a cycle.
        for pid in sorted(stuck):
            if pid not in failed:
                blockers = sorted(d for d in after[pid] if d in stuck)
                failed[pid] = f"must load after {', '.join(blockers)}, which cannot be ordered"
    return order, failed


def _cycles(after: Mapping[str, set[str]], nodes: set[str]) -> list[list[str]]:
    """The strongly connected components of size > 1 (or self-loops) among ``nodes``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    result: list[list[str]] = []
    counter = 0

    def visit(root: str) -> None:
        nonlocal counter
        # Iterative Tarjan: plugin graphs are small, but recursion limits are not ours to set.
        work = [(root, iter(sorted(d for d in after[root] if d in nodes)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(d for d in after[child] if d in nodes))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in after[node]:
                    result.append(sorted(component))

    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return result
