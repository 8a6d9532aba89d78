"""Hook dispatch: the awaitable caller against pluggy's own call and a bare loop.

Run ``python bench/hook_dispatch.py`` (no arguments; about 20 seconds). Everything is measured
in one trio run, in interleaved rounds so that all variants share the machine's noise; each
variant's median per-call time over the rounds is compared as a ratio:

a. pluggy's ``pm.hook.x(a=..., b=...)`` over 10 plain sync implementations;
b. ``await pm.ahook.x(a=..., b=...)`` over the same 10 implementations;
c. ``await pm.ahook.y(a=..., b=...)`` over 10 ``async def`` implementations;
d. a bare Python loop calling the same 10 functions with the arguments (in a function, as
   any dispatcher is one call);
e. pluggy over 1 implementation inside 1 ``wrapper=True`` generator;
f. ``ahook`` over the same pair;
g. ``ahook`` over 1 ``async def`` implementation inside 1 async-generator wrapper.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any

import trio

from autogpt_core.hooks._hookcall import HookManager
from hookspecs import hookimpl, hookspec

ROUNDS = 15
CALLS_PER_ROUND = 20_000
IMPLS = 10


class Spec:
    @hookspec
    def x(self, a: int, b: int) -> None:
        """10 sync implementations."""

    @hookspec
    def y(self, a: int, b: int) -> None:
        """10 async implementations."""

    @hookspec(firstresult=True)
    def w(self, a: int, b: int) -> int | None:
        """1 implementation inside 1 wrapper."""


def make_plugin(index: int) -> object:
    class Plugin:
        @hookimpl
        def x(self, a: int, b: int) -> None:
            return None

        @hookimpl
        async def y(self, a: int, b: int) -> None:
            return None

    Plugin.__name__ = f"Plugin{index}"
    return Plugin()


class SyncPair:
    @hookimpl(specname="w")
    def w_impl(self, a: int, b: int) -> int:
        return a + b

    @hookimpl(wrapper=True, specname="w")
    def w_wrapper(self, a: int) -> Generator[None, int, int]:
        return (yield)


class AsyncPair:
    @hookimpl(specname="w")
    async def w_impl(self, a: int, b: int) -> int:
        return a + b

    @hookimpl(wrapper=True, specname="w")
    async def w_wrapper(self, a: int) -> Any:
        yield


def build() -> tuple[HookManager, HookManager, HookManager]:
    main = HookManager(specs=Spec)
    for index in range(IMPLS):
        main.register(make_plugin(index), name=f"p{index}")
    sync_pair = HookManager(specs=Spec)
    sync_pair.register(SyncPair(), name="sync_pair")
    async_pair = HookManager(specs=Spec)
    async_pair.register(AsyncPair(), name="async_pair")
    return main, sync_pair, async_pair


async def measure() -> dict[str, list[float]]:
    main, sync_pair, async_pair = build()
    functions = [impl.function for impl in reversed(main.hook.x.get_hookimpls())]
    n = CALLS_PER_ROUND

    def bare(a: int, b: int) -> None:
        for function in functions:
            function(a, b)

    async def a() -> None:
        hook = main.hook
        for _ in range(n):
            hook.x(a=1, b=2)

    async def b() -> None:
        ahook = main.ahook
        for _ in range(n):
            await ahook.x(a=1, b=2)

    async def c() -> None:
        ahook = main.ahook
        for _ in range(n):
            await ahook.y(a=1, b=2)

    async def d() -> None:
        for _ in range(n):
            bare(1, 2)

    async def e() -> None:
        hook = sync_pair.hook
        for _ in range(n):
            hook.w(a=1, b=2)

    async def f() -> None:
        ahook = sync_pair.ahook
        for _ in range(n):
            await ahook.w(a=1, b=2)

    async def g() -> None:
        ahook = async_pair.ahook
        for _ in range(n):
            await ahook.w(a=1, b=2)

    variants: dict[str, Callable[[], Awaitable[None]]] = {
        "a": a,
        "b": b,
        "c": c,
        "d": d,
        "e": e,
        "f": f,
        "g": g,
    }
    # Same answers first: the comparison is between equivalent calls.
    assert await main.ahook.x(a=1, b=2) == main.hook.x(a=1, b=2) == []
    assert await sync_pair.ahook.w(a=1, b=2) == sync_pair.hook.w(a=1, b=2) == 3
    assert await async_pair.ahook.w(a=1, b=2) == 3

    samples: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for variant in names:  # warm-up: build plans, fill caches
        await variants[variant]()
    gc.disable()
    try:
        for round_ in range(ROUNDS):
            # Rotate the order each round so no variant always runs first or last.
            shift = round_ % len(names)
            for variant in names[shift:] + names[:shift]:
                started = time.perf_counter_ns()
                await variants[variant]()
                samples[variant].append((time.perf_counter_ns() - started) / n)
            gc.collect()
    finally:
        gc.enable()
    return samples


def main() -> None:
    samples = trio.run(measure)
    med = {name: statistics.median(values) for name, values in samples.items()}
    print(f"Hook dispatch: median per-call time, {ROUNDS} interleaved rounds x {CALLS_PER_ROUND}")
    print("calls each, one trio run. Ratios (lower is faster):")
    rows = [
        ("b/a", "ahook, 10 sync impls   / pluggy pm.hook, 10 sync impls", "goal <= 0.8"),
        ("b/d", "ahook, 10 sync impls   / bare loop over the 10 functions", "goal <= 3"),
        ("c/a", "ahook, 10 async impls  / pluggy pm.hook, 10 sync impls", ""),
        ("c/d", "ahook, 10 async impls  / bare loop over the 10 functions", ""),
        ("f/e", "ahook, 1 impl + 1 wrapper / pluggy, same pair", ""),
        ("g/e", "ahook, async impl + async wrapper / pluggy, sync pair", ""),
    ]
    for key, label, goal in rows:
        top, bottom = key.split("/")
        ratio = med[top] / med[bottom]
        verdict = ""
        if goal:
            limit = float(goal.split()[-1])
            verdict = f"  {goal}: {'met' if ratio <= limit else 'NOT MET'}"
        print(f"  {key}  {ratio:5.2f}   {label}{verdict}")
    print("Medians per call, for reference (machine-dependent):")
    for name, label in [
        ("a", "pluggy, 10 sync"),
        ("b", "ahook, 10 sync"),
        ("c", "ahook, 10 async"),
        ("d", "bare loop, 10"),
        ("e", "pluggy, impl + wrapper"),
        ("f", "ahook, impl + wrapper"),
        ("g", "ahook, async impl + async wrapper"),
    ]:
        print(f"  {name}  {med[name]:8.0f} ns  {label}")


if __name__ == "__main__":
    main()
