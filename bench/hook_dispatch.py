"""Hook dispatch: the call the engine makes, against pluggy's own sync call.

Run ``python bench/hook_dispatch.py`` (no arguments; about 40 seconds). Everything is measured
in one trio run, in interleaved rounds so that all variants share the machine's noise; each
variant's median per-call time over the rounds (wall and CPU) is compared as a ratio.

The baseline is pluggy's ``pm.hook.x(a=..., b=...)`` over 10 plain sync implementations. The
awaitable caller is timed the way the engine calls it (``HookCaller.call``): isolation and a
deadline on, the argument dict built for each call::

    await pm.ahook.x.call({"a": 1, "b": 2}, timeout=30.0, isolate=report)

a. pluggy's ``pm.hook.x(...)`` over 10 plain sync implementations (the baseline);
b. the engine's call over the same 10 implementations;
c. the engine's call over 10 ``async def`` implementations that return at once;
d. pluggy's ``pm.hook.y(...)`` over those 10 ``async def`` implementations: all pluggy does
   with them is create the 10 coroutines (kept, and closed unawaited after the timing);
e. ``await pm.ahook.x(...)``: no deadline, no isolation (what a plugin's own call costs);
f. a bare Python loop calling the 10 sync functions (inside one function call, as any
   dispatcher is one);
g. the engine's call over 10 ``async def`` implementations that each pass a trio checkpoint
   (they suspend, so the deadline is armed for each);
h. a bare loop awaiting those 10 implementations directly;
i. pluggy over 1 implementation inside 1 ``wrapper=True`` generator (firstresult);
j. the call ``plan`` and ``llm_request`` get (a deadline and a result type, no isolation)
   over the same pair;
k. the same call over 1 ``async def`` implementation inside 1 async-generator wrapper.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any

import trio

from autogpt_core._errors import HookError
from autogpt_core.hooks._hookcall import HookManager
from hookspecs import hookimpl, hookspec

ROUNDS = 15
CALLS_PER_ROUND = 10_000
IMPLS = 10
#: The engine's default ``limits.hook_timeout``.
TIMEOUT = 30.0


class Spec:
    @hookspec
    def x(self, a: int, b: int) -> None:
        """10 sync implementations."""

    @hookspec
    def y(self, a: int, b: int) -> None:
        """10 async implementations that return at once."""

    @hookspec
    def z(self, a: int, b: int) -> None:
        """10 async implementations that pass a checkpoint."""

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

        @hookimpl
        async def z(self, a: int, b: int) -> None:
            await trio.lowlevel.checkpoint()

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


Variant = Callable[[], Awaitable[None]]
#: Run after a variant's timing stops (closing the coroutines pluggy created, say).
Cleanup = list[Callable[[], None]]


def variants(
    main: HookManager, sync_pair: HookManager, async_pair: HookManager, n: int, cleanup: Cleanup
) -> dict[str, Variant]:
    errors: list[HookError] = []
    report = errors.append
    functions = [impl.function for impl in reversed(main.hook.x.get_hookimpls())]
    suspending: list[Callable[..., Any]] = [
        impl.function for impl in reversed(main.hook.z.get_hookimpls())
    ]

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
            await ahook.x.call({"a": 1, "b": 2}, timeout=TIMEOUT, isolate=report)

    async def c() -> None:
        ahook = main.ahook
        for _ in range(n):
            await ahook.y.call({"a": 1, "b": 2}, timeout=TIMEOUT, isolate=report)

    async def d() -> None:
        hook = main.hook
        created: list[list[Any]] = []
        keep = created.append
        for _ in range(n):
            keep(hook.y(a=1, b=2))

        def close() -> None:
            for coros in created:
                for coro in coros:
                    coro.close()

        cleanup.append(close)

    async def e() -> None:
        ahook = main.ahook
        for _ in range(n):
            await ahook.x(a=1, b=2)

    async def f() -> None:
        for _ in range(n):
            bare(1, 2)

    async def g() -> None:
        ahook = main.ahook
        for _ in range(n):
            await ahook.z.call({"a": 1, "b": 2}, timeout=TIMEOUT, isolate=report)

    async def h() -> None:
        for _ in range(n):
            for function in suspending:
                await function(1, 2)

    async def i() -> None:
        hook = sync_pair.hook
        for _ in range(n):
            hook.w(a=1, b=2)

    async def j() -> None:
        ahook = sync_pair.ahook
        for _ in range(n):
            await ahook.w.call({"a": 1, "b": 2}, timeout=TIMEOUT, returns=int)

    async def k() -> None:
        ahook = async_pair.ahook
        for _ in range(n):
            await ahook.w.call({"a": 1, "b": 2}, timeout=TIMEOUT, returns=int)

    return {"a": a, "b": b, "c": c, "d": d, "e": e, "f": f, "g": g, "h": h, "i": i, "j": j, "k": k}


async def measure() -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    main, sync_pair, async_pair = build()
    n = CALLS_PER_ROUND
    cleanup: Cleanup = []
    runs = variants(main, sync_pair, async_pair, n, cleanup)
    # Same answers first: the comparison is between equivalent calls.
    kwargs = {"a": 1, "b": 2}
    assert main.hook.x(**kwargs) == [] == await main.ahook.x(**kwargs)
    assert await main.ahook.x.call(kwargs, timeout=TIMEOUT, isolate=print) == []
    assert await main.ahook.y.call(kwargs, timeout=TIMEOUT, isolate=print) == []
    assert await main.ahook.z.call(kwargs, timeout=TIMEOUT, isolate=print) == []
    assert sync_pair.hook.w(**kwargs) == 3
    assert await sync_pair.ahook.w.call(kwargs, timeout=TIMEOUT, returns=int) == 3
    assert await async_pair.ahook.w.call(kwargs, timeout=TIMEOUT, returns=int) == 3

    wall: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for variant in names:  # warm-up: build plans, fill caches
        await runs[variant]()
        while cleanup:
            cleanup.pop()()
    gc.disable()
    try:
        for round_ in range(ROUNDS):
            # Rotate the order each round so no variant always runs first or last.
            shift = round_ % len(names)
            for variant in names[shift:] + names[:shift]:
                started, cpu_started = time.perf_counter_ns(), time.process_time_ns()
                await runs[variant]()
                cpu[variant].append((time.process_time_ns() - cpu_started) / n)
                wall[variant].append((time.perf_counter_ns() - started) / n)
                while cleanup:
                    cleanup.pop()()
            gc.collect()
    finally:
        gc.enable()
    return wall, cpu


RATIOS = [
    ("b/a", "engine call, 10 sync impls      / pluggy, 10 sync impls", 1.0),
    ("c/d", "engine call, 10 async impls     / pluggy, 10 async impls", 2.0),
    ("c/a", "engine call, 10 async impls     / pluggy, 10 sync impls", None),
    ("e/a", "plain ahook call, 10 sync impls / pluggy, 10 sync impls", None),
    ("b/f", "engine call, 10 sync impls      / bare loop over the 10 functions", None),
    ("g/h", "engine call, 10 suspending impls / bare loop awaiting them", None),
    ("j/i", "plan-style call, impl + wrapper / pluggy, same pair", None),
    ("k/i", "plan-style call, async impl + async wrapper / pluggy, sync pair", None),
]

LABELS = {
    "a": "pluggy pm.hook.x, 10 sync",
    "b": "engine call (timeout + isolate), 10 sync",
    "c": "engine call (timeout + isolate), 10 async",
    "d": "pluggy pm.hook.y, 10 async (creates the coroutines)",
    "e": "plain await pm.ahook.x, 10 sync",
    "f": "bare loop, 10 sync functions",
    "g": "engine call (timeout + isolate), 10 suspending async",
    "h": "bare loop awaiting the 10 suspending async",
    "i": "pluggy, impl + wrapper",
    "j": "call(timeout, returns), impl + wrapper",
    "k": "call(timeout, returns), async impl + async wrapper",
}


def main() -> None:
    wall, cpu = trio.run(measure)
    med = {name: statistics.median(values) for name, values in wall.items()}
    med_cpu = {name: statistics.median(values) for name, values in cpu.items()}
    print(f"Hook dispatch: median per-call time, {ROUNDS} interleaved rounds x {CALLS_PER_ROUND}")
    print("calls each, one trio run. Ratios (lower is faster), wall and CPU:")
    for key, label, goal in RATIOS:
        top, bottom = key.split("/")
        ratio = med[top] / med[bottom]
        cpu_ratio = med_cpu[top] / med_cpu[bottom]
        verdict = ""
        if goal is not None:
            met = ratio <= goal and cpu_ratio <= goal
            verdict = f"  goal <= {goal}: {'met' if met else 'NOT MET'}"
        print(f"  {key}  wall {ratio:5.2f}  cpu {cpu_ratio:5.2f}   {label}{verdict}")
    print("Medians per call, for reference (machine-dependent):")
    for name, label in LABELS.items():
        print(f"  {name}  wall {med[name]:8.0f} ns  cpu {med_cpu[name]:8.0f} ns  {label}")


if __name__ == "__main__":
    main()
