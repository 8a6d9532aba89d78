"""``--trace-hooks``: print every hook call with plugin, duration and outcome."""

from __future__ import annotations

import sys
from collections.abc import Callable

from ._hookcall import HookManager


def print_trace(hook: str, plugin: str, seconds: float, outcome: str) -> None:
    print(f"[hook] {hook} <- {plugin}: {seconds * 1000:.2f} ms, {outcome}", file=sys.stderr)


def trace_factory(enabled: bool) -> Callable[[], HookManager]:
    """A ``HookManager`` factory that traces when ``enabled``."""

    def factory() -> HookManager:
        pm = HookManager()
        if enabled:
            pm.on_call = print_trace
        return pm

    return factory
