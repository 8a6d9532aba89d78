"""The awaitable hook caller: pluggy's semantics, awaited; kinds, deadlines, isolation."""

from __future__ import annotations

import functools
import math
import threading
import types
import warnings
from collections.abc import Callable
from typing import Any

import pluggy
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from pluggy import HookCallError, PluginValidationError

import hookspecs
from autogpt_core._errors import HookError, HookTimeout
from autogpt_core.hooks import _hookcall
from autogpt_core.hooks._hookcall import (
    ASYNC,
    ASYNC_WRAPPER,
    BLOCKING,
    MAYBE_ASYNC,
    OLD_WRAPPER,
    SYNC,
    WRAPPER,
    AsyncHookCaller,
    HookManager,
    impl_kind,
)
from hookspecs import hookimpl, hookspec

from .strategies import ImplPlan, Scenario, scenarios, timed_impls


class Spec:
    """Hooks for these tests: the parity pair, plus a few for focused tests."""

    @hookspec
    def collect(self, a: object, b: object, c: object = 10) -> list[object]:
        """All results, as a list."""

    @hookspec(firstresult=True)
    def first(self, a: object, b: object, c: object = 10) -> object:
        """The first non-None result."""

    @hookspec(historic=True)
    def replayed(self, a: object) -> None:
        """A historic hook."""


class Plugin(types.SimpleNamespace):
    """A plugin object; compared by identity (pluggy refuses a plugin registered twice)."""

    __eq__ = object.__eq__
    __hash__ = object.__hash__


def plugin(**impls: Callable[..., Any]) -> Plugin:
    """A plugin object whose attributes are the given (marked) functions."""
    return Plugin(**impls)


def manager(*plugins: tuple[str, object]) -> HookManager:
    pm = HookManager(specs=Spec)
    for name, obj in plugins:
        pm.register(obj, name=name)
    return pm


# --- parity with pluggy (property test) ------------------------------------------------

NON_WRAPPER = """
def impl(SIG):
    return behave(ARGS)
"""
ASYNC_NON_WRAPPER = """
async def impl(SIG):
    if CHECKPOINT:
        await checkpoint()
    return behave(ARGS)
"""
SYNC_WRAPPER = """
def impl(SIG):
    setup(ARGS)
    try:
        res = yield
    except Exception as e:
        return on_exc(e)
    return on_res(res)
"""
# The async twin of SYNC_WRAPPER under the documented protocol: a second yield replaces
# the result; finishing keeps the inner result, or leaves None after a swallowed error.
ASYNC_WRAPPER_SOURCE = """
async def impl(SIG):
    setup(ARGS)
    if CHECKPOINT:
        await checkpoint()
    try:
        res = yield
    except Exception as e:
        out = on_exc(e)
        if out is not None or EXPLICIT:
            yield out
        return
    if CHECKPOINT:
        await checkpoint()
    out = on_res(res)
    if out is not res or EXPLICIT:
        yield out
"""
OLD_STYLE_WRAPPER = """
def impl(SIG):
    setup(ARGS)
    outcome = yield
    old_teardown(outcome)
"""


def build_impl(
    pid: int, hook: str, plan: ImplPlan, log: list[Any], twin: bool, isolated: bool = False
) -> Any:
    """The implementation ``plan`` describes; ``twin=True`` gives its plain-sync equivalent,
    and ``isolated=True`` a twin that does what isolation makes of a raising non-wrapper:
    it is reported (logged as our isolate callback logs it) and counts as ``None``."""
    tag = f"p{pid}.{hook}"
    mode = plan.outcome

    def behave(args: dict[str, object]) -> object:
        log.append(("call", tag, sorted(args.items())))
        if mode == "value":
            return ("value", tag, tuple(sorted(args.items())))
        if mode == "raise":
            if isolated:
                log.append(("isolated", tag, "ValueError", ("impl", pid, hook)))
                return None
            raise ValueError("impl", pid, hook)
        return None

    def setup(args: dict[str, object]) -> None:
        log.append(("setup", tag, sorted(args.items())))
        if mode == "setup_raise":
            raise ValueError("setup", pid, hook)

    def on_exc(exc: Exception) -> object:
        log.append(("saw", tag, type(exc).__name__, exc.args))
        if mode == "swallow":
            return ("swallowed", tag)
        if mode == "swallow_none":
            return None
        if mode == "new":
            raise ValueError("new", pid, hook) from exc
        raise exc

    def on_res(res: object) -> object:
        log.append(("got", tag, res))
        if mode == "replace":
            return ("replaced", tag, res)
        if mode == "raise_after":
            raise ValueError("after", pid, hook)
        return res

    def old_teardown(outcome: pluggy.Result[object]) -> None:
        exc = outcome.exception
        if exc is None:
            log.append(("old got", tag, outcome.get_result()))
            if mode == "replace":
                outcome.force_result(("replaced", tag, outcome.get_result()))
        else:
            log.append(("old saw", tag, type(exc).__name__, exc.args))
            if mode == "swallow":
                outcome.force_result(("swallowed", tag))
            elif mode == "swallow_none":
                outcome.force_result(None)
            elif mode == "new":
                outcome.force_exception(ValueError("new", pid, hook))
        if mode == "raise_after":
            raise ValueError("after", pid, hook)

    if plan.wrapper:
        template = {"sync": SYNC_WRAPPER, "async": ASYNC_WRAPPER_SOURCE, "old": OLD_STYLE_WRAPPER}
        source = template["sync" if twin and plan.flavor == "async" else plan.flavor]
    else:
        source = ASYNC_NON_WRAPPER if plan.flavor == "async" and not twin else NON_WRAPPER
    names = [param.split("=")[0] for param in plan.params]
    source = source.replace("SIG", ", ".join(plan.params)).replace(
        "ARGS", "{" + ", ".join(f"{name!r}: {name}" for name in names) + "}"
    )
    namespace: dict[str, Any] = {
        "behave": behave,
        "setup": setup,
        "on_exc": on_exc,
        "on_res": on_res,
        "old_teardown": old_teardown,
        "checkpoint": trio.lowlevel.checkpoint,
        "CHECKPOINT": plan.checkpoint,
        "EXPLICIT": plan.explicit_yield,
    }
    exec(compile(source, f"<parity {tag}>", "exec"), namespace)
    return hookimpl(
        namespace["impl"],
        wrapper=plan.wrapper and plan.flavor != "old",
        hookwrapper=plan.wrapper and plan.flavor == "old",
        tryfirst=plan.position == "tryfirst",
        trylast=plan.position == "trylast",
        blocking=plan.flavor == "blocking" and not plan.wrapper and not twin,
    )


def build_manager(
    scenario: Scenario,
    pm: pluggy.PluginManager,
    log: list[Any],
    twin: bool,
    isolated: bool = False,
) -> None:
    """Register the scenario's plugins, in its order, on ``pm``."""
    for pid in scenario.order:
        impls = {
            hook: build_impl(pid, hook, plan, log, twin, isolated)
            for hook, plan in scenario.plugins[pid].impls
        }
        pm.register(plugin(**impls), name=f"p{pid}")


def call_kwargs(scenario: Scenario) -> list[tuple[str, dict[str, object]]]:
    calls = []
    for call in scenario.calls:
        kwargs: dict[str, object] = {"a": "A"}
        if not call.omit_b:
            kwargs["b"] = "B"
        if call.pass_c:
            kwargs["c"] = "C"
        if call.extra:
            kwargs["zz"] = "Z"
        calls.append((call.hook, kwargs))
    return calls


def normalize(hook: str, exc: Exception | None, result: object) -> tuple[Any, ...]:
    """A call's outcome as comparable data; ours is unwrapped from its HookError first."""
    if exc is None:
        return ("ok", result)
    if isinstance(exc, HookError):
        # The wrapper names the plugin whose exception this is; compare the original.
        cause = exc.__cause__
        assert isinstance(cause, ValueError), exc
        assert (exc.plugin, exc.hook) == (f"p{cause.args[1]}", hook)
        exc = cause
    return ("raised", type(exc), exc.args)


def settle(hook: str, run: Callable[[], object]) -> tuple[Any, ...]:
    """Run one call; its outcome and the warnings it gave."""
    error: Exception | None = None
    result: object = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = run()
        except Exception as exc:
            error = exc
    return normalize(hook, error, result), [(w.category, str(w.message)) for w in caught]


def reference_run(scenario: Scenario, isolated: bool = False) -> list[Any]:
    """pluggy's own synchronous calls over the plain-sync twins (``isolated``: the twins
    of raising non-wrappers report and return ``None``, as isolation has them do)."""
    log: list[Any] = []
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(Spec)
    build_manager(scenario, pm, log, twin=True, isolated=isolated)
    records = []
    for round_ in range(2):
        if round_ and scenario.unregister is not None:
            pm.unregister(name=f"p{scenario.unregister}")
        for hook, kwargs in call_kwargs(scenario):
            del log[:]
            outcome = settle(hook, functools.partial(getattr(pm.hook, hook), **kwargs))
            records.append((hook, outcome, list(log)))
    return records


def our_run(scenario: Scenario, variant: str) -> list[Any]:
    """Our awaited calls over the async-capable implementations.

    ``plain``: ``await pm.ahook.NAME(**kwargs)``; ``traced``: the same with ``on_call`` set;
    ``deadline``: a deadline for the whole call; ``engine``: the call the engine makes, a
    deadline for each implementation and failures isolated.
    """
    log: list[Any] = []
    traced: list[tuple[str, str, float, str]] = []
    pm = HookManager(specs=Spec)
    build_manager(scenario, pm, log, twin=False)
    if variant == "traced":
        pm.on_call = lambda *record: traced.append(record)

    def report(error: HookError) -> None:
        cause = error.__cause__
        log.append(("isolated", f"{error.plugin}.{error.hook}", type(cause).__name__, cause.args))

    async def main() -> list[Any]:
        records = []
        for round_ in range(2):
            if round_ and scenario.unregister is not None:
                pm.unregister(name=f"p{scenario.unregister}")
            for hook, kwargs in call_kwargs(scenario):
                del log[:]
                caller = getattr(pm.ahook, hook)
                if variant == "deadline":
                    coro = caller.call(kwargs, timeout=1e6)
                elif variant == "engine":
                    coro = caller.call(kwargs, timeout=1e6, isolate=report)
                else:
                    coro = caller(**kwargs)
                outcome = await settle_async(hook, coro)
                records.append((hook, outcome, list(log)))
        return records

    records = trio.run(main)
    if variant == "traced":
        names = {f"p{pid}" for pid in range(len(scenario.plugins))}
        assert all(hook in ("collect", "first") and name in names for hook, name, *_ in traced)
    return records


async def settle_async(hook: str, coro: Any) -> tuple[Any, ...]:
    """``settle`` for an awaitable."""
    error: Exception | None = None
    result: object = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = await coro
        except Exception as exc:
            error = exc
    return normalize(hook, error, result), [(w.category, str(w.message)) for w in caught]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_parity_with_pluggy(scenario: Scenario) -> None:
    """Awaited calls equal pluggy's sync calls: call order, arguments, results, errors,
    warnings; the engine's isolated call with deadlines equals pluggy's over twins that do
    what isolation makes of a raising implementation."""
    expected = reference_run(scenario)
    for variant in ("plain", "traced", "deadline"):
        assert our_run(scenario, variant) == expected, variant
    assert our_run(scenario, "engine") == reference_run(scenario, isolated=True)


# --- async wrappers ----------------------------------------------------------------------


async def test_async_wrapper_sees_awaited_result_and_replaces_it() -> None:
    """An async wrapper receives the awaited result and a second yield replaces it."""
    seen = []

    async def inner(a: str) -> str:
        await trio.lowlevel.checkpoint()
        return a * 2

    async def outer(a: str) -> Any:
        result = yield
        seen.append(result)
        yield ("wrapped", result)

    pm = manager(
        ("inner", plugin(first=hookimpl(inner))),
        ("outer", plugin(first=hookimpl(outer, wrapper=True))),
    )
    assert await pm.ahook.first(a="x", b=0) == ("wrapped", "xx")
    assert seen == ["xx"]


async def test_async_wrapper_that_finishes_keeps_the_result() -> None:
    """An async wrapper that finishes without a second yield leaves the result alone."""

    def inner(a: str) -> str:
        return a

    async def outer() -> Any:
        yield

    pm = manager(
        ("inner", plugin(collect=hookimpl(inner))),
        ("outer", plugin(collect=hookimpl(outer, wrapper=True))),
    )
    assert await pm.ahook.collect(a="x", b=0) == ["x"]


async def test_exception_is_thrown_into_sync_and_async_wrappers() -> None:
    """Both wrapper kinds get the original exception object; the caller gets it as cause."""
    boom = ValueError("boom")
    seen: list[tuple[str, BaseException]] = []

    def broken() -> None:
        raise boom

    def sync_wrapper() -> Any:
        try:
            return (yield)
        except ValueError as exc:
            seen.append(("sync", exc))
            raise

    async def async_wrapper() -> Any:
        try:
            yield
        except ValueError as exc:
            seen.append(("async", exc))
            raise

    pm = manager(
        ("broken", plugin(collect=hookimpl(broken))),
        ("sw", plugin(collect=hookimpl(sync_wrapper, wrapper=True))),
        ("aw", plugin(collect=hookimpl(async_wrapper, wrapper=True))),
    )
    with pytest.raises(HookError) as info:
        await pm.ahook.collect(a=1, b=2)
    assert seen == [("sync", boom), ("async", boom)]  # inside out: registered last is outer
    assert info.value.__cause__ is boom
    assert info.value.plugin == "broken"
    assert info.value.hook == "collect"
    assert str(info.value) == "plugin 'broken' raised ValueError in hook 'collect': boom"


async def test_async_wrapper_swallows_an_exception_with_a_second_yield() -> None:
    """An async wrapper that catches the exception and yields a value makes it the result."""

    def broken() -> None:
        raise ValueError("boom")

    async def rescuer() -> Any:
        try:
            yield
        except ValueError:
            yield "rescued"

    pm = manager(
        ("broken", plugin(first=hookimpl(broken))),
        ("rescuer", plugin(first=hookimpl(rescuer, wrapper=True))),
    )
    assert await pm.ahook.first(a=1, b=2) == "rescued"


async def test_wrapper_raising_its_own_error_is_named() -> None:
    """An error raised by a wrapper names the wrapper's plugin, not the inner one."""

    def inner() -> int:
        return 1

    async def strict() -> Any:
        yield
        raise RuntimeError("refused")

    pm = manager(
        ("inner", plugin(first=hookimpl(inner))),
        ("strict", plugin(first=hookimpl(strict, wrapper=True))),
    )
    with pytest.raises(HookError, match="plugin 'strict' raised RuntimeError") as info:
        await pm.ahook.first(a=1, b=2)
    assert info.value.plugin == "strict"


async def test_async_wrapper_yielding_three_times_is_an_error() -> None:
    """An async wrapper with a third yield fails, naming its plugin."""

    async def chatty() -> Any:
        yield
        yield 1
        yield 2

    pm = manager(("chatty", plugin(first=hookimpl(chatty, wrapper=True))))
    with pytest.raises(HookError, match="third yield") as info:
        await pm.ahook.first(a=1, b=2)
    assert info.value.plugin == "chatty"


async def test_wrapper_that_does_not_yield_is_an_error() -> None:
    """A wrapper that finishes before yielding fails like in pluggy, naming its plugin."""

    async def mute() -> Any:
        if False:
            yield

    pm = manager(("mute", plugin(first=hookimpl(mute, wrapper=True))))
    with pytest.raises(HookError, match="did not yield") as info:
        await pm.ahook.first(a=1, b=2)
    assert info.value.plugin == "mute"


async def test_old_style_hookwrapper_is_supported() -> None:
    """An old-style hookwrapper sees a pluggy Result and can force the result."""

    def inner() -> int:
        return 1

    def old() -> Any:
        outcome = yield
        outcome.force_result(outcome.get_result() + 1)

    pm = manager(
        ("inner", plugin(first=hookimpl(inner))),
        ("old", plugin(first=hookimpl(old, hookwrapper=True))),
    )
    assert await pm.ahook.first(a=1, b=2) == 2


# --- results and arguments ---------------------------------------------------------------


async def test_firstresult_skips_an_async_impl_returning_none() -> None:
    """firstresult is decided on the awaited value: an async None does not win."""
    calls = []

    async def undecided() -> None:
        calls.append("undecided")

    def decided() -> str:
        calls.append("decided")
        return "plan"

    pm = manager(
        ("decided", plugin(first=hookimpl(decided))),
        ("undecided", plugin(first=hookimpl(undecided))),
    )
    assert await pm.ahook.first(a=1, b=2) == "plan"
    assert calls == ["undecided", "decided"]


async def test_implementations_get_only_the_arguments_they_name() -> None:
    """Opt-in arguments: an impl receives its named args; defaulted params only if passed."""
    got = []

    def few(b: object) -> None:
        got.append(("few", b))

    def opt_in(a: object, zz: object = "default") -> None:
        got.append(("opt_in", a, zz))

    pm = manager(("few", plugin(collect=hookimpl(few))), ("opt", plugin(collect=hookimpl(opt_in))))
    await pm.ahook.collect(a=1, b=2)
    await pm.ahook.collect(a=3, b=4, zz="given")
    assert got == [("opt_in", 1, "default"), ("few", 2), ("opt_in", 3, "given"), ("few", 4)]


async def test_hookspec_argument_defaults_apply() -> None:
    """A spec argument with a default reaches impls when the call leaves it out."""

    def uses_c(c: object) -> object:
        return c

    pm = manager(("c", plugin(first=hookimpl(uses_c))))
    assert await pm.ahook.first(a=1, b=2) == 10
    assert await pm.ahook.first(a=1, b=2, c=3) == 3


async def test_missing_spec_argument_warns_like_pluggy() -> None:
    """Leaving out a spec argument gives pluggy's warning, attributed to the caller, whatever
    the call's options (a deadline over async implementations adds frames in between)."""

    def uses_a(a: object) -> object:
        return a

    async def uses_a_too(a: object) -> None:
        return None

    pm = manager(("a", plugin(first=hookimpl(uses_a))))
    await pm.ahook.first(a=1, b=2)  # binds the plan to the spec's arguments first
    calls = [
        lambda: pm.ahook.first(a=1),
        lambda: pm.ahook.first.call({"a": 1}),
        lambda: pm.ahook.first.call({"a": 1}, timeout=60),
        lambda: pm.ahook.first.call({"a": 1}, timeout=60, isolate=print),
    ]
    for awaiting in (False, True):
        if awaiting:  # the deadline's scope and its driver are only for plans that await
            pm.register(plugin(first=hookimpl(uses_a_too)), name="a2")
        for traced in (False, True):
            pm.on_call = (lambda *record: None) if traced else None
            for call in calls:
                with pytest.warns(
                    UserWarning, match=r"Argument\(s\) 'b' which are declared"
                ) as rec:
                    assert await call() == 1
                assert rec[0].filename == __file__


async def test_a_hook_without_spec_is_called_as_pluggy_calls_it() -> None:
    """A hook only implementations declare: each gets the arguments it names, no warning."""
    pm = manager(
        ("one", plugin(unspecced=hookimpl(lambda a: ("one", a)))),
        ("two", plugin(unspecced=hookimpl(lambda a, b=0: ("two", a, b)))),
    )
    assert pm.hook.unspecced.spec is None
    for kwargs in ({"a": 1}, {"a": 1, "b": 2}):
        assert await pm.ahook.unspecced(**kwargs) == pm.hook.unspecced(**kwargs)
        engine = await pm.ahook.unspecced.call(kwargs, timeout=5, isolate=print)
        assert engine == pm.hook.unspecced(**kwargs)


async def test_missing_impl_argument_raises_hook_call_error() -> None:
    """An impl needing an argument the call lacks raises pluggy's HookCallError, unwrapped."""

    def needs_b(b: object) -> object:
        return b

    pm = manager(("b", plugin(first=hookimpl(needs_b))))
    with (
        pytest.warns(UserWarning, match="cannot be found"),
        pytest.raises(HookCallError, match="hook call must provide argument 'b'"),
    ):
        await pm.ahook.first(a=1)


async def test_decorated_function_returning_a_coroutine_is_awaited() -> None:
    """A decorated impl that hands back a coroutine is awaited (its kind is maybe_async)."""

    async def real(a: object) -> object:
        return ("real", a)

    @functools.wraps(real)
    def decorated(a: object) -> Any:
        return real(a)

    pm = manager(("d", plugin(first=hookimpl(decorated))))
    [(_name, impl)] = pm.impls_by_plugin("first")
    assert impl_kind(impl) == MAYBE_ASYNC
    assert await pm.ahook.first(a=1, b=2) == ("real", 1)


def test_kinds_are_classified_once_per_implementation() -> None:
    """Each implementation gets its kind from its definition and markers."""

    def sync() -> None: ...

    async def coro() -> None: ...

    def blocking() -> None: ...

    def gen() -> Any:
        yield

    def old() -> Any:
        yield

    async def agen() -> Any:
        yield

    pm = manager(
        ("sync", plugin(collect=hookimpl(sync))),
        ("async", plugin(collect=hookimpl(coro))),
        ("blocking", plugin(collect=hookimpl(blocking, blocking=True))),
        ("wrapper", plugin(collect=hookimpl(gen, wrapper=True))),
        ("async_wrapper", plugin(collect=hookimpl(agen, wrapper=True))),
        ("old_wrapper", plugin(first=hookimpl(old, hookwrapper=True))),
    )
    kinds = {
        name: impl_kind(impl)
        for hook in ("collect", "first")
        for name, impl in pm.impls_by_plugin(hook)
    }
    assert kinds == {
        "sync": SYNC,
        "async": ASYNC,
        "blocking": BLOCKING,
        "wrapper": WRAPPER,
        "async_wrapper": ASYNC_WRAPPER,
        "old_wrapper": OLD_WRAPPER,
    }


# --- errors ------------------------------------------------------------------------------


async def test_errors_name_the_plugin_whatever_the_options() -> None:
    """A raising impl is named by the HookError with or without a deadline."""

    async def broken(a: object) -> None:
        raise KeyError(a)

    def fine() -> int:
        return 1

    pm = manager(("broken", plugin(collect=hookimpl(broken))), ("fine", plugin(collect=fine)))
    pm.register(plugin(collect=hookimpl(fine)), name="fine2")
    for call in (
        lambda: pm.ahook.collect(a=1, b=2),
        lambda: pm.ahook.collect.call({"a": 1, "b": 2}, timeout=60),
    ):
        with pytest.raises(HookError) as info:
            await call()
        assert info.value.plugin == "broken"
        assert isinstance(info.value.__cause__, KeyError)


async def test_nested_hook_error_passes_through_unchanged() -> None:
    """A HookError from a nested hook call is not wrapped again: it names the real culprit."""

    def broken() -> None:
        raise ValueError("deep")

    pm = manager(("deep", plugin(first=hookimpl(broken))))

    async def outer() -> None:
        await pm.ahook.first(a=1, b=2)

    pm.register(plugin(collect=hookimpl(outer)), name="outer")
    with pytest.raises(HookError) as info:
        await pm.ahook.collect(a=1, b=2)
    assert (info.value.plugin, info.value.hook) == ("deep", "first")


class Stop(BaseException):
    """A base exception that is not an Exception."""


async def test_base_exceptions_are_not_wrapped() -> None:
    """BaseExceptions that are not Exceptions leave the call as they are."""

    def stop() -> None:
        raise Stop

    pm = manager(("stop", plugin(collect=hookimpl(stop))))
    with pytest.raises(Stop):
        await pm.ahook.collect(a=1, b=2)


async def test_historic_hooks_are_refused() -> None:
    """The awaitable caller refuses historic hooks with a clear error."""
    pm = manager()
    with pytest.raises(TypeError, match="historic"):
        await pm.ahook.replayed(a=1)


def test_unknown_hook_is_an_attribute_error() -> None:
    """``pm.ahook.NAME`` for a hook nobody declared raises AttributeError."""
    with pytest.raises(AttributeError, match="no hook named 'nope'"):
        _ = manager().ahook.nope


def test_invalid_markers_are_refused_at_registration() -> None:
    """blocking async impls and async old-style hookwrappers fail validation."""

    async def coro() -> None: ...

    async def agen() -> Any:
        yield

    pm = manager()
    with pytest.raises(PluginValidationError, match="blocking=True is for plain functions"):
        pm.register(plugin(collect=hookimpl(coro, blocking=True)))
    with pytest.raises(PluginValidationError, match="cannot be an async generator"):
        pm.register(plugin(collect=hookimpl(agen, hookwrapper=True)))


# --- threads, deadlines, isolation -------------------------------------------------------


async def test_blocking_impl_runs_in_a_worker_thread() -> None:
    """A blocking impl runs off the event loop, so a concurrent trio task can release it."""
    released = threading.Event()
    threads = []

    def waits(a: object) -> str:
        threads.append(threading.get_ident())
        # Inline on the event loop this would deadlock: the releasing task could never run.
        assert released.wait(timeout=30), "the trio task never ran: impl blocked the loop"
        return "released"

    async def release() -> None:
        released.set()

    pm = manager(("waits", plugin(first=hookimpl(waits, blocking=True))))
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(release)
            assert await pm.ahook.first(a=1, b=2) == "released"
    assert len(threads) == 1
    assert threads[0] != threading.get_ident()


async def test_timeout_names_the_plugin_that_hung(autojump_clock: trio.abc.Clock) -> None:
    """On expiry the call raises HookTimeout naming the implementation that was running."""

    async def hangs() -> None:
        await trio.sleep(100)

    def quick() -> int:
        return 1

    pm = manager(("quick", plugin(collect=hookimpl(quick))), ("hangs", plugin(collect=hangs)))
    pm.register(plugin(collect=hookimpl(hangs)), name="hangs2")
    with pytest.raises(HookTimeout) as info:
        await pm.ahook.collect.call({"a": 1, "b": 2}, timeout=2.0)
    assert (info.value.plugin, info.value.hook) == ("hangs2", "collect")
    assert "plugin 'hangs2' did not finish hook 'collect' within 2.0s; fix:" in str(info.value)


async def test_timeout_abandons_a_hung_blocking_impl(autojump_clock: trio.abc.Clock) -> None:
    """A blocking impl stuck in its thread is abandoned at the deadline and named."""
    release = threading.Event()

    def stuck() -> None:
        release.wait(timeout=30)

    pm = manager(("stuck", plugin(collect=hookimpl(stuck, blocking=True))))
    try:
        with pytest.raises(HookTimeout) as info:
            await pm.ahook.collect.call({"a": 1, "b": 2}, timeout=1)
    finally:
        release.set()
    assert info.value.plugin == "stuck"


async def test_timeout_blames_the_hung_impl_not_a_wrapper_cleaning_up(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A wrapper whose teardown hits the cancellation again does not take the blame."""

    async def hangs() -> None:
        await trio.sleep(100)

    async def tidy() -> Any:
        try:
            yield
        finally:
            await trio.sleep(1)  # raises a fresh Cancelled: the deadline has passed

    pm = manager(
        ("hangs", plugin(collect=hookimpl(hangs))),
        ("tidy", plugin(collect=hookimpl(tidy, wrapper=True))),
    )
    with pytest.raises(HookTimeout) as info:
        await pm.ahook.collect.call({"a": 1, "b": 2}, timeout=5)
    assert info.value.plugin == "hangs"


async def test_default_timeout_applies_and_inf_disables_it(autojump_clock: trio.abc.Clock) -> None:
    """``default_timeout`` bounds plain calls; ``timeout=math.inf`` lifts it for one call."""

    async def slow() -> str:
        await trio.sleep(10)
        return "done"

    pm = manager(("slow", plugin(first=hookimpl(slow))))
    pm.default_timeout = 1
    with pytest.raises(HookTimeout):
        await pm.ahook.first(a=1, b=2)
    assert await pm.ahook.first.call({"a": 1, "b": 2}, timeout=float("inf")) == "done"
    pm.default_timeout = None
    assert await pm.ahook.first(a=1, b=2) == "done"


async def test_isolate_reports_the_broken_plugin_and_carries_on() -> None:
    """With isolate, a raising impl is reported, counts as None, and the others still run."""
    reported: list[HookError] = []

    def ok1() -> str:
        return "one"

    async def broken() -> None:
        raise ValueError("broken")

    def ok2() -> str:
        return "two"

    pm = manager(
        ("ok1", plugin(collect=hookimpl(ok1))),
        ("broken", plugin(collect=hookimpl(broken))),
        ("ok2", plugin(collect=hookimpl(ok2))),
    )
    result = await pm.ahook.collect.call({"a": 1, "b": 2}, isolate=reported.append)
    assert result == ["two", "one"]
    [error] = reported
    assert (error.plugin, error.hook) == ("broken", "collect")
    assert isinstance(error.__cause__, ValueError)


async def test_isolate_with_timeout_gives_each_impl_its_own_deadline(
    autojump_clock: trio.abc.Clock,
) -> None:
    """With isolate and timeout, a hung impl is reported as HookTimeout and the rest run."""
    reported: list[HookError] = []

    async def slowish() -> str:
        await trio.sleep(3)  # within its own 5 s, though the call as a whole takes longer
        return "slowish"

    async def hangs() -> None:
        await trio.sleep(100)

    pm = manager(
        ("slowish", plugin(collect=hookimpl(slowish))),
        ("hangs", plugin(collect=hookimpl(hangs))),
        ("slowish2", plugin(collect=hookimpl(slowish))),
    )
    result = await pm.ahook.collect.call({"a": 1, "b": 2}, timeout=5, isolate=reported.append)
    assert result == ["slowish", "slowish"]
    assert [(type(e), e.plugin) for e in reported] == [(HookTimeout, "hangs")]


async def test_an_isolated_deadline_runs_once_per_impl_from_its_first_suspension(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Each implementation's deadline starts when it first suspends and is not restarted by
    its later suspensions: one that keeps suspending past it is cut off and reported."""
    reported: list[HookError] = []

    async def trickles() -> str:
        for _ in range(10):
            await trio.sleep(1)  # each step is short; all ten are twice the deadline
        return "trickled"

    async def steady() -> str:
        await trio.sleep(4)
        return "steady"

    pm = manager(
        ("steady", plugin(collect=hookimpl(steady))),
        ("trickles", plugin(collect=hookimpl(trickles))),
        ("steady2", plugin(collect=hookimpl(steady))),
    )
    started = trio.current_time()
    result = await pm.ahook.collect.call({"a": 1, "b": 2}, timeout=5, isolate=reported.append)
    assert result == ["steady", "steady"]
    assert [(type(e), e.plugin) for e in reported] == [(HookTimeout, "trickles")]
    assert trio.current_time() - started == pytest.approx(4 + 5 + 4)


async def test_deadlines_touch_only_what_they_can_interrupt(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A deadline is a cancel scope only where something can await: plain functions see
    none; with isolation an async impl sees its own once it suspends; a whole-call deadline
    is there from the start."""
    seen: list[tuple[str, float]] = []

    def plain() -> None:
        seen.append(("plain", trio.current_effective_deadline()))

    async def awaits() -> None:
        seen.append(("before", trio.current_effective_deadline() - trio.current_time()))
        await trio.sleep(1)
        seen.append(("after", trio.current_effective_deadline() - trio.current_time()))

    pm = manager(("plain", plugin(collect=hookimpl(plain))))
    await pm.ahook.collect.call({"a": 1, "b": 2}, timeout=5, isolate=print)
    await pm.ahook.collect.call({"a": 1, "b": 2}, timeout=5)
    assert seen == [("plain", math.inf), ("plain", math.inf)]

    pm = manager(("awaits", plugin(collect=hookimpl(awaits))))
    seen.clear()
    await pm.ahook.collect.call({"a": 1, "b": 2}, timeout=5, isolate=print)
    await pm.ahook.collect.call({"a": 1, "b": 2}, timeout=5)
    assert seen == [("before", math.inf), ("after", 4.0), ("before", 5.0), ("after", 4.0)]


async def test_a_deadline_passing_while_a_woken_impl_waits_to_run_spares_the_next(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An implementation woken before its deadline returns normally even if the deadline
    passes before it runs, and the next implementation still gets a deadline of its own."""
    reported: list[HookError] = []
    woken = trio.Event()

    async def waits() -> str:
        await woken.wait()
        return "woken"

    async def next_one() -> str:
        await trio.sleep(1)
        return "next"

    async def waker() -> None:
        await trio.sleep(1)
        woken.set()
        autojump_clock.jump(10)  # the deadline passes before ``waits`` gets to run

    pm = manager(
        ("next", plugin(collect=hookimpl(next_one))),
        ("waits", plugin(collect=hookimpl(waits))),
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(waker)
        result = await pm.ahook.collect.call({"a": 1, "b": 2}, timeout=5, isolate=reported.append)
    assert result == ["woken", "next"]
    assert reported == []


async def test_an_enclosing_cancellation_is_not_an_impls_timeout(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Cancelled from outside, an isolated call with a deadline reports nobody and lets
    the cancellation through."""
    reported: list[HookError] = []
    ran: list[str] = []

    async def slow() -> None:
        await trio.sleep(10)

    def after() -> None:
        ran.append("after")

    pm = manager(("after", plugin(collect=hookimpl(after))), ("slow", plugin(collect=slow)))
    pm.register(plugin(collect=hookimpl(slow)), name="slow2")
    with trio.move_on_after(1) as outer:
        await pm.ahook.collect.call({"a": 1, "b": 2}, timeout=5, isolate=reported.append)
    assert outer.cancelled_caught
    assert reported == []
    assert ran == []


async def test_an_isolated_blocking_impl_that_hangs_is_reported_and_the_rest_run(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A blocking impl stuck in its thread past its deadline is abandoned, reported as a
    HookTimeout, and the implementations after it still run."""
    reported: list[HookError] = []
    release = threading.Event()

    def stuck() -> None:
        release.wait(timeout=30)

    def after() -> str:
        return "after"

    pm = manager(
        ("after", plugin(collect=hookimpl(after))),
        ("stuck", plugin(collect=hookimpl(stuck, blocking=True))),
    )
    try:
        result = await pm.ahook.collect.call({"a": 1, "b": 2}, timeout=1, isolate=reported.append)
    finally:
        release.set()
    assert result == ["after"]
    assert [(type(e), e.plugin) for e in reported] == [(HookTimeout, "stuck")]


async def test_an_async_wrapper_overrunning_its_step_deadline_ends_the_call(
    autojump_clock: trio.abc.Clock,
) -> None:
    """With isolation, each step of an async wrapper has its own deadline; overrunning it
    is a HookTimeout naming the wrapper, not isolated (wrappers never are)."""
    reported: list[HookError] = []

    def inner() -> str:
        return "inner"

    async def stalls_after() -> Any:
        await trio.sleep(4)  # its setup: within the deadline
        yield
        await trio.sleep(100)  # its teardown: not

    pm = manager(
        ("inner", plugin(collect=hookimpl(inner))),
        ("stalls", plugin(collect=hookimpl(stalls_after, wrapper=True))),
    )
    with pytest.raises(HookTimeout) as info:
        await pm.ahook.collect.call({"a": 1, "b": 2}, timeout=5, isolate=reported.append)
    assert (info.value.plugin, info.value.hook) == ("stalls", "collect")
    assert reported == []


# --- plans, relay, tracing, per-plugin calls ---------------------------------------------


async def test_registering_and_unregistering_invalidate_the_plan() -> None:
    """A plugin registered after a call joins the next; unregistered or blocked ones leave."""

    def make(value: str) -> Plugin:
        return plugin(collect=hookimpl(lambda: value))

    pm = manager(("one", make("one")))
    assert await pm.ahook.collect(a=1, b=2) == ["one"]
    pm.register(make("two"), name="two")
    assert await pm.ahook.collect(a=1, b=2) == ["two", "one"]
    pm.unregister(name="one")
    assert await pm.ahook.collect(a=1, b=2) == ["two"]
    pm.set_blocked("two")
    assert await pm.ahook.collect(a=1, b=2) == []


def test_plain_sync_calls_still_work() -> None:
    """``pm.hook.NAME(...)`` is pluggy's own synchronous call."""
    pm = manager(("one", plugin(first=hookimpl(lambda a: a + 1))))
    assert pm.hook.first(a=1, b=2) == 2


def test_relay_caches_callers() -> None:
    """``pm.ahook.NAME`` is one AsyncHookCaller per hook."""
    pm = manager()
    assert isinstance(pm.ahook.collect, AsyncHookCaller)
    assert pm.ahook.collect is pm.ahook.collect


def test_default_hook_manager_knows_the_contract() -> None:
    """``HookManager()`` adds the hookspecs of the plugin contract."""
    pm = HookManager()
    assert pm.project_name == hookspecs.PROJECT_NAME
    assert pm.hook.plan.spec is not None
    assert isinstance(pm.ahook.plan, AsyncHookCaller)


async def test_on_call_traces_each_implementation() -> None:
    """``on_call`` gets hook, plugin, duration and outcome for every impl of a call."""
    records: list[tuple[str, str, float, str]] = []

    def value() -> int:
        return 1

    async def nothing() -> None:
        return None

    def broken() -> None:
        raise ValueError

    def wrapper() -> Any:
        return (yield)

    pm = manager(
        ("value", plugin(collect=hookimpl(value))),
        ("nothing", plugin(collect=hookimpl(nothing))),
        ("wrapper", plugin(collect=hookimpl(wrapper, wrapper=True))),
    )
    pm.on_call = lambda *record: records.append(record)
    assert await pm.ahook.collect(a=1, b=2) == [1]
    pm.register(plugin(collect=hookimpl(broken)), name="broken")
    with pytest.raises(HookError):
        await pm.ahook.collect(a=1, b=2)
    summary = [(hook, name, outcome) for hook, name, _seconds, outcome in records]
    assert summary == [
        ("collect", "nothing", "none"),
        ("collect", "value", "value"),
        ("collect", "wrapper", "wrapper"),
        ("collect", "broken", "raised ValueError"),
        ("collect", "wrapper", "wrapper"),
    ]
    assert all(seconds >= 0 for *_, seconds, _outcome in records)
    pm.on_call = None
    records.clear()
    with pytest.raises(HookError):
        await pm.ahook.collect(a=1, b=2)
    assert records == []


def test_impls_by_plugin_in_call_order() -> None:
    """``impls_by_plugin`` lists each plugin's implementation in call order."""

    def configure(settings: object) -> object:
        return settings

    pm = HookManager()
    for name in ("first", "second", "third"):
        pm.register(plugin(configure=hookimpl(configure)), name=name)
    assert [name for name, _impl in pm.impls_by_plugin("configure")] == [
        "third",
        "second",
        "first",
    ]
    with pytest.raises(ValueError, match="no hook named"):
        pm.impls_by_plugin("nope")


# --- result types, slow inline implementations --------------------------------------------


async def test_returns_names_the_plugin_and_the_type_it_should_have() -> None:
    """With ``returns``, a value of another type is an error of the implementation that
    returned it, naming what it returned and what was expected; isolated, it counts as None.
    A wrapper replacing the result with another type is named the same way."""

    def gives_dict() -> dict[str, str]:
        return {"text": "not an int"}

    def gives_int() -> int:
        return 7

    async def replaces() -> Any:
        yield
        yield "not an int either"

    pm = manager(("good", plugin(first=hookimpl(gives_int))))
    pm.register(plugin(first=hookimpl(gives_dict)), name="bad")
    with pytest.raises(HookError) as info:
        await pm.ahook.first.call({"a": 1, "b": 2}, returns=int)
    assert (info.value.plugin, info.value.hook) == ("bad", "first")
    assert str(info.value) == (
        "plugin 'bad' returned dict from hook 'first', which expects int or None; "
        "fix: return a int, or None to pass"
    )
    reported: list[HookError] = []
    assert await pm.ahook.first.call({"a": 1, "b": 2}, returns=int, isolate=reported.append) == 7
    assert [error.plugin for error in reported] == ["bad"]

    pm.unregister(name="bad")
    pm.register(plugin(first=hookimpl(replaces, wrapper=True)), name="replacer")
    with pytest.raises(HookError, match="plugin 'replacer' returned str from hook 'first'"):
        await pm.ahook.first.call({"a": 1, "b": 2}, returns=(int, float))
    assert await pm.ahook.first(a=1, b=2) == "not an int either"  # unchecked without returns


class FakeClock:
    """The slow-call check's clock; only the implementations under test move it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(_hookcall, "_clock", fake, raising=False)
    return fake


async def test_a_slow_sync_impl_is_reported_once_per_plugin_and_hook(clock: FakeClock) -> None:
    """A plain sync impl taking SLOW_SECONDS or more is reported once per (plugin, hook),
    with or without deadline and isolation; a quick one, and an awaited one, are not."""
    reports: list[tuple[str, str, float]] = []
    isolated: list[HookError] = []

    def slow(a: object) -> None:
        clock.advance(0.25)

    def quick(a: object) -> None:
        clock.advance(0.05)

    async def awaited(a: object) -> None:
        clock.advance(5)  # an await may run other tasks: awaited time is nobody's fault here

    pm = manager(
        ("slow", plugin(collect=hookimpl(slow), first=hookimpl(slow))),
        ("quick", plugin(collect=hookimpl(quick))),
        ("awaited", plugin(collect=hookimpl(awaited))),
    )
    pm.on_slow = lambda *report: reports.append(report)
    for _ in range(3):
        await pm.ahook.collect(a=1, b=2)
        await pm.ahook.collect.call({"a": 1, "b": 2}, timeout=5, isolate=isolated.append)
        await pm.ahook.first(a=1, b=2)
    assert reports == [("collect", "slow", 0.25), ("first", "slow", 0.25)]
    assert isolated == []


async def test_the_default_report_is_one_line_on_stderr_with_the_fix(
    clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """By default a slow impl is reported on stderr: plugin, hook, time and the fix."""

    def slow(a: object) -> None:
        clock.advance(1.5)

    pm = manager(("stalls", plugin(first=hookimpl(slow))))
    await pm.ahook.first(a=1, b=2)
    await pm.ahook.first(a=1, b=2)
    assert capsys.readouterr().err == (
        "autogpt: warning: plugin 'stalls' blocked the event loop for 1.50s in hook 'first': "
        "a plain def runs on the loop, and while it runs no other session, deadline or "
        "Ctrl-C gets a turn; fix: mark it @hookimpl(blocking=True) (it then runs in a "
        "worker thread) or make it async def\n"
    )
    pm.on_slow = None
    pm.unregister(name="stalls")
    pm.register(plugin(first=hookimpl(slow)), name="unwatched")
    await pm.ahook.first(a=1, b=2)
    assert capsys.readouterr().err == ""


def _timed_plugin(kind: str, seconds: float, clock: FakeClock) -> Plugin:
    def impl(a: object) -> None:
        clock.advance(seconds)

    async def async_impl(a: object) -> None:
        clock.advance(seconds)

    if kind == "async":
        return plugin(collect=hookimpl(async_impl))
    if kind == "blocking":
        return plugin(collect=hookimpl(impl, blocking=True))
    if kind == "maybe_async":
        return plugin(collect=hookimpl(functools.wraps(impl)(lambda a: impl(a))))
    return plugin(collect=hookimpl(impl))


@settings(max_examples=200, deadline=None)
@given(timed_impls)
def test_exactly_the_slow_inline_impls_are_reported(impls: list[tuple[str, float]]) -> None:
    """Whatever the mix of kinds and durations, a few calls report each inline (sync or
    maybe_async) impl that took SLOW_SECONDS or more, once, and nothing else: quick impls
    that add up to a slow stretch are not blamed for it."""
    fake = FakeClock()
    reports: list[tuple[str, str, float]] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_hookcall, "_clock", fake, raising=False)
        pm = manager(
            *(
                (f"p{i}", _timed_plugin(kind, seconds, fake))
                for i, (kind, seconds) in enumerate(impls)
            )
        )
        assert [impl_kind(impl) for impl in reversed(pm.hook.collect.get_hookimpls())] == [
            {"sync": SYNC, "maybe_async": MAYBE_ASYNC, "async": ASYNC, "blocking": BLOCKING}[kind]
            for kind, _seconds in reversed(impls)
        ]
        pm.on_slow = lambda *report: reports.append(report)

        async def main() -> None:
            await pm.ahook.collect(a=1, b=2)
            await pm.ahook.collect(a=1, b=2)
            await pm.ahook.collect.call({"a": 1, "b": 2}, timeout=5)
            await pm.ahook.collect.call({"a": 1, "b": 2}, timeout=5, isolate=print)

        trio.run(main)
    slow = {
        f"p{i}"
        for i, (kind, seconds) in enumerate(impls)
        if kind in ("sync", "maybe_async") and seconds >= _hookcall.SLOW_SECONDS
    }
    assert sorted(plugin for _hook, plugin, _seconds in reports) == sorted(slow)
