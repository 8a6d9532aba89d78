"""The awaitable hook caller: pluggy's call semantics, awaited under trio.

``HookManager`` is a ``pluggy.PluginManager`` for project ``autogpt``. Next to pluggy's
synchronous relay ``pm.hook`` it has ``pm.ahook``::

    plan = await pm.ahook.plan(session=session, context=context)
    hits = await pm.ahook.memory_recall.call(kwargs, timeout=5.0, isolate=report)

**Order and arguments** are pluggy's (1.7) exactly: the implementations are walked in the
reverse of ``HookCaller.get_hookimpls()``, so wrappers run outside the rest, ``tryfirst``
before normal before ``trylast``, and within a group the plugin registered last runs first.
Calls are keyword-only; the hookspec's argument defaults are applied first; a missing spec
argument gives pluggy's "cannot be found in this hook call" warning; an implementation
receives only the arguments it names (its parameters with defaults only when given), and
one it needs but the call lacks raises ``pluggy.HookCallError``. ``firstresult`` hooks stop
at the first non-``None`` *awaited* value. Historic hooks are refused (``TypeError``).

**Kinds**, decided once per implementation when the call plan is built:

* ``sync`` -- a plain function, called inline on the event loop;
* ``async`` -- an ``async def``, awaited;
* ``blocking`` -- a plain function marked ``@hookimpl(blocking=True)``, run in a worker
  thread (``trio.to_thread.run_sync(..., abandon_on_cancel=True)``);
* ``maybe_async`` -- anything else callable (decorated functions, callable objects): called
  inline, and its return value awaited if it is awaitable;
* ``wrapper`` / ``old_wrapper`` -- a ``wrapper=True`` generator or an old-style
  ``hookwrapper=True`` generator, driven exactly as pluggy drives them;
* ``async_wrapper`` -- a ``wrapper=True`` *async* generator (see below).

**Async wrappers.** An async generator cannot ``return`` a value, so it replaces the
result by *yielding a second time*::

    @hookimpl(wrapper=True)
    async def llm_request(session, request):
        started = trio.current_time()
        try:
            response = yield              # the awaited result of the inner implementations
        except TimeoutError:
            yield CACHED_RESPONSE         # swallow the error: this is the result now
            return
        log(trio.current_time() - started)
        # falling off the end keeps ``response``; ``yield other`` would replace it

The first ``yield`` is where the inner implementations run; it receives their result or
raises their exception, as in a sync wrapper. A second ``yield VALUE`` makes ``VALUE`` the
result (and clears an exception the wrapper caught); the generator is then resumed once more
and must finish. Finishing without a second yield keeps the outcome: the inner result, or
``None`` if the wrapper caught the exception and did not re-raise it (what a sync wrapper's
bare ``return`` gives). A third yield is an error of that wrapper.

**Errors.** Wrappers see the *original* exception thrown into them, as in pluggy, and may
swallow or replace it. The exception that leaves the call is wrapped in
``HookError(plugin, hook, message)`` naming the implementation that raised it (a wrapper
that raised a new one is named itself), with the original as ``__cause__``. Not wrapped:
a ``HookError`` from a nested hook call (it already names its plugin), a ``HookCallError``
(the caller's mistake, not a plugin's) and base exceptions that are not ``Exception``
(``trio.Cancelled``, ``KeyboardInterrupt``).

**Deadlines.** ``timeout=`` seconds (default ``HookManager.default_timeout``, itself ``None``
= no deadline; ``math.inf`` also means none) bounds the whole call; on expiry a
``HookTimeout`` names the implementation that was running. A plain sync implementation
cannot be interrupted by a deadline: put blocking work in ``blocking=True`` implementations.

**Result types.** With ``returns=Type`` (or a tuple of types) a non-``None`` value of an
implementation that is not of that type is an error of that implementation: a
``HookError`` naming the plugin, the type it returned and the one expected (reported and
counted as ``None`` with ``isolate``). For a firstresult hook, a wrapper replacing the
result with a value of another type is named the same way.

**Slow inline calls.** Plain sync (and ``maybe_async``) implementations run on the event
loop; one that takes ``SLOW_SECONDS`` or longer holds up every other task, as asyncio's
slow-callback warning says. ``HookManager.on_slow(hook, plugin, seconds)`` hears of it once
per (plugin, hook); by default it prints the fix to stderr. The general path reads
``time.perf_counter()`` around each inline call; the fast path around each run of
consecutive inline implementations (see Speed). ``on_slow = None`` turns it off.

**Ctrl-C in stuck code.** While an implementation blocks the loop, trio cannot take a
signal: a handler that only queues it (``trio.open_signal_receiver``) waits until the code
returns, which may be never. Inside ``stall_interrupts()`` a SIGINT that the loop does not
take within ``STALL_SECONDS`` is raised as ``KeyboardInterrupt`` where the main thread is
stuck, and again a ``STALL_SECONDS`` later; stuck still, the process saves what it can and
exits with 130.

**Isolation.** With ``isolate=callback`` a non-wrapper implementation that raises an
``Exception`` is reported as ``callback(HookError)`` and counts as having returned ``None``;
the call goes on with the next implementation. With both ``isolate`` and ``timeout`` the
deadline applies to *each* implementation (and to each step of an async wrapper) instead
of the whole call: one that overruns is reported as a ``HookTimeout`` and counts as ``None``.
Wrappers are never isolated: their errors (timeouts included) end the call as usual.

**Tracing.** ``HookManager.on_call = fn(hook, plugin, seconds, outcome)`` is called after each
implementation (a wrapper once, after its teardown, with setup and teardown time summed).
``None`` (the default) costs nothing.

**Speed.** Each ``AsyncHookCaller`` keeps a plan per registration generation: the reversed
implementation steps ``(function, argnames, kwargnames, kind, plugin_name, impl)``, the
spec's defaults and the exact set of argument names a well-formed call passes. ``register``,
``unregister``, ``add_hookspecs``, ``set_blocked`` and setting ``on_call`` or
``default_timeout`` or ``on_slow`` drop the plans. When a hook has no wrappers and nothing is
traced or timed, the plan also compiles a straight-line coroutine that unpacks each argument
once and calls the implementations one after another; a call whose argument names differ
from the spec's falls back to the general path (which warns and raises as pluggy does).
That coroutine times each run of consecutive inline implementations as a whole (two clock
readings, whatever their number); a run of several that was slow sends the hook's later
calls to the general path, which times each implementation and so names the slow one.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import math
import os
import signal
import sys
import threading
import time
import types
import warnings
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

import pluggy
import trio
from pluggy import HookCaller, HookCallError, HookImpl, PluginValidationError
from pluggy._callers import run_old_style_hookwrapper

import hookspecs
from hookspecs import BLOCKING_ATTR, PROJECT_NAME

from .._errors import HookError, HookTimeout

HookTracer = Callable[[str, str, float, str], object]
"""``on_call(hook_name, plugin_name, duration_seconds, outcome)``; outcome is e.g. ``"value"``,
``"none"``, ``"raised ValueError"``, ``"wrapper"``, ``"timeout"``."""

IsolateCallback = Callable[[HookError], object]
"""Receives the ``HookError`` (or ``HookTimeout``) of an isolated implementation."""

SlowReporter = Callable[[str, str, float], object]
"""``on_slow(hook_name, plugin_name, seconds)``: an inline implementation blocked the loop."""

ResultTypes = type | tuple[type, ...]
"""What ``returns=`` accepts: the type (or types) of a hook's non-``None`` values."""

SpecNamespace = types.ModuleType | type
"""A module or class holding ``@hookspec`` functions."""

SYNC: Final = "sync"
ASYNC: Final = "async"
BLOCKING: Final = "blocking"
MAYBE_ASYNC: Final = "maybe_async"
WRAPPER: Final = "wrapper"
ASYNC_WRAPPER: Final = "async_wrapper"
OLD_WRAPPER: Final = "old_wrapper"
_WRAPPERS: Final = frozenset({WRAPPER, ASYNC_WRAPPER, OLD_WRAPPER})

_EMPTY: Final[Mapping[str, object]] = types.MappingProxyType({})

#: An inline implementation taking this long (seconds) or longer is reported to ``on_slow``.
#: asyncio's slow-callback warning uses the same 100 ms.
SLOW_SECONDS: Final = 0.1
#: How long the loop may leave a Ctrl-C untaken before it is raised where the loop is stuck.
STALL_SECONDS: Final = 1.0

# The clock of the slow-call check; a module global so that tests can drive it.
_clock = time.perf_counter

# (function, argnames, kwargnames, kind, plugin_name, impl)
_Step = tuple[Callable[..., Any], tuple[str, ...], tuple[str, ...], str, str, HookImpl]
_FastCall = Callable[[Mapping[str, object]], Coroutine[Any, Any, Any]]
_Teardown = tuple[_Step, Any, float]


def impl_kind(impl: HookImpl) -> str:
    """Classify a hook implementation: one of the kind constants of this module."""
    function = impl.function
    if impl.hookwrapper:
        return OLD_WRAPPER
    if impl.wrapper:
        return ASYNC_WRAPPER if inspect.isasyncgenfunction(function) else WRAPPER
    if inspect.iscoroutinefunction(function):
        return ASYNC
    if getattr(function, BLOCKING_ATTR, False):
        return BLOCKING
    plain = function.__func__ if inspect.ismethod(function) else function
    # A decorated function (``__wrapped__``) or a callable object may hand back an awaitable
    # although it is not an ``async def``: those get their result checked on every call.
    if isinstance(plain, types.FunctionType) and not hasattr(plain, "__wrapped__"):
        return SYNC
    return MAYBE_ASYNC


def _hook_error(plugin: str, hook: str, exc: Exception) -> Exception:
    """``exc`` as raised out of a hook call: wrapped in a ``HookError`` naming ``plugin``."""
    if isinstance(exc, HookError):
        return exc
    error = HookError(
        plugin=plugin,
        hook=hook,
        message=f"plugin {plugin!r} raised {type(exc).__name__} in hook {hook!r}: {exc}",
    )
    error.__cause__ = exc
    return error


def _timeout_error(plugin: str, hook: str, seconds: float) -> HookTimeout:
    return HookTimeout(
        plugin=plugin,
        hook=hook,
        message=(
            f"plugin {plugin!r} did not finish hook {hook!r} within {float(seconds)}s; "
            "fix: make it return sooner, run blocking work in a @hookimpl(blocking=True) "
            "implementation, or give the call a longer timeout="
        ),
    )


def _type_names(types_: ResultTypes) -> str:
    return " or ".join(t.__name__ for t in (types_ if isinstance(types_, tuple) else (types_,)))


def _wrong_type(plugin: str, hook: str, value: object, expected: ResultTypes) -> HookError:
    names = _type_names(expected)
    error = HookError(
        plugin=plugin,
        hook=hook,
        message=(
            f"plugin {plugin!r} returned {type(value).__name__} from hook {hook!r}, which "
            f"expects {names} or None; fix: return a {names}, or None to pass"
        ),
    )
    error.__cause__ = TypeError(f"expected {names}, got {type(value).__name__}")
    return error


def slow_warning(hook: str, plugin: str, seconds: float) -> str:
    """What ``print_slow`` says: who blocked the event loop, for how long, and the fix."""
    return (
        f"autogpt: warning: plugin {plugin!r} blocked the event loop for {seconds:.2f}s in "
        f"hook {hook!r}: a plain def runs on the loop, and while it runs no other session, "
        "deadline or Ctrl-C gets a turn; fix: mark it @hookimpl(blocking=True) (it then runs "
        "in a worker thread) or make it async def"
    )


def print_slow(hook: str, plugin: str, seconds: float) -> None:
    """The default ``on_slow``: one line on stderr."""
    print(slow_warning(hook, plugin, seconds), file=sys.stderr)


def _wrapfail(gen: Any, message: str) -> RuntimeError:
    code = getattr(gen, "gi_code", None) or gen.ag_code
    return RuntimeError(
        f"wrap_controller at {code.co_name!r} {code.co_filename}:{code.co_firstlineno} {message}"
    )


class _Culprit:
    """Which implementation was running when the first ``trio.Cancelled`` appeared."""

    __slots__ = ("plugin",)

    def __init__(self) -> None:
        self.plugin: str | None = None


class _Plan:
    """What one call of a hook needs, computed once per registration generation."""

    __slots__ = (
        "argnames",
        "fast_ok",
        "firstresult",
        "historic",
        "keys",
        "kwargdefaults",
        "name",
        "steps",
    )

    def __init__(self, hook: HookCaller) -> None:
        self.name: str = hook.name
        self.steps: tuple[_Step, ...] = tuple(
            (impl.function, impl.argnames, impl.kwargnames, impl_kind(impl), impl.plugin_name, impl)
            for impl in reversed(hook.get_hookimpls())
        )
        spec = hook.spec
        self.historic: bool = hook.is_historic()
        self.firstresult: bool = bool(spec.opts.get("firstresult", False)) if spec else False
        self.argnames: tuple[str, ...] = spec.argnames if spec else ()
        self.kwargdefaults: dict[str, object] = dict(spec.kwargdefaults) if spec else {}
        # The argument names of a well-formed call (after the spec's defaults are applied).
        if spec is not None:
            keys = frozenset(spec.argnames) | frozenset(spec.kwargnames)
        else:
            keys = frozenset(name for step in self.steps for name in step[1])
        self.keys: frozenset[str] = keys
        self.fast_ok: bool = not self.historic and all(
            step[3] not in _WRAPPERS and keys.issuperset(step[1]) for step in self.steps
        )

    def prepare(self, kwargs: Mapping[str, object], stacklevel: int) -> Mapping[str, object]:
        """pluggy's ``_apply_defaults`` and ``_verify_all_args_are_provided``."""
        if self.kwargdefaults:
            kwargs = {**self.kwargdefaults, **kwargs}
        for argname in self.argnames:
            if argname not in kwargs:
                notincall = ", ".join(repr(name) for name in self.argnames if name not in kwargs)
                warnings.warn(
                    f"Argument(s) {notincall} which are declared in the hookspec "
                    "cannot be found in this hook call",
                    stacklevel=stacklevel,
                )
                break
        return kwargs


def _compile_fast(
    plan: _Plan,
    fallback: Callable[..., Coroutine[Any, Any, Any]],
    report_slow: SlowReporter | None,
    zoom: Callable[[], object],
) -> _FastCall:
    """Generate the straight-line coroutine for a hook without wrappers.

    Every argument is looked up once, every implementation is called in plan order with
    its own arguments, and ``i`` tracks which one is running so an error can name it.

    With ``report_slow``, each run of consecutive inline implementations (a *segment*) is
    timed as a whole: two clock readings per segment, not per implementation. A slow
    segment of one implementation is reported at once; a slow segment of several calls
    ``zoom()``, which sends the hook's later calls down the general path, where each
    implementation is timed, so the next slow call names the plugin.
    """
    namespace: dict[str, Any] = {
        "KEYS": plan.keys,
        "DEFAULTS": plan.kwargdefaults,
        "FALLBACK": fallback,
        "WRAP": _hook_error,
        "HOOK": plan.name,
        "NAMES": tuple(step[4] for step in plan.steps),
        "TO_THREAD": trio.to_thread.run_sync,
        "PARTIAL": functools.partial,
        "ISAWAITABLE": inspect.isawaitable,
        "CLOCK": _clock,
        "REPORT": report_slow,
        "ZOOM": zoom,
    }
    local: dict[str, str] = {}

    def value(argname: str) -> str:
        if argname not in local:
            local[argname] = f"v{len(local)}"
        return local[argname]

    calls: list[str] = []
    timed = report_slow is not None
    segment: list[int] = []  # the inline steps since ``t = CLOCK()``

    def check_segment(indent: str) -> None:
        calls.append(f"{indent}u = CLOCK()")
        calls.append(f"{indent}if u - t >= {SLOW_SECONDS!r}:")
        if len(segment) == 1:
            calls.append(f"{indent}    REPORT(HOOK, NAMES[{segment[0]}], u - t)")
        else:
            calls.append(f"{indent}    ZOOM()")

    steps = plan.steps
    for index, (function, argnames, kwargnames, kind, _plugin, _impl) in enumerate(steps):
        namespace[f"F{index}"] = function
        positional = [value(name) for name in argnames]
        keywords = [f"{name}={value(name)}" for name in kwargnames if name in plan.keys]
        args = ", ".join(positional + keywords)
        inline = timed and kind in (SYNC, MAYBE_ASYNC)
        calls.append(f"        i = {index}")
        if inline and not segment:
            calls.append("        t = CLOCK()")
        if kind == SYNC:
            calls.append(f"        r = F{index}({args})")
        elif kind == ASYNC:
            calls.append(f"        r = await F{index}({args})")
        elif kind == BLOCKING:
            target = (
                f"PARTIAL(F{index}, {args})" if keywords else ", ".join([f"F{index}", *positional])
            )
            calls.append(f"        r = await TO_THREAD({target}, abandon_on_cancel=True)")
        else:
            calls.append(f"        r = F{index}({args})")
        if inline:
            segment.append(index)
            # The segment ends before anything that may await (other tasks then run on the
            # clock) and at the last step.
            following = steps[index + 1][3] if index + 1 < len(steps) else None
            if kind == MAYBE_ASYNC or following not in (SYNC, MAYBE_ASYNC):
                check_segment("        ")
                segment.clear()
        if kind == MAYBE_ASYNC:
            calls.append("        if ISAWAITABLE(r):")
            calls.append("            r = await r")
        calls.append("        if r is not None:")
        if plan.firstresult:
            if segment:  # an answer ends the call, and with it the open segment
                check_segment("            ")
            calls.append("            return r")
        else:
            calls.append("            results.append(r)")

    lines = ["async def fast(kw):"]
    if plan.kwargdefaults:
        lines.append("    kw = {**DEFAULTS, **kw}")
    lines.append("    if kw.keys() != KEYS:")
    lines.append("        return await FALLBACK(kw, None, None, 4)")
    lines.extend(f"    {var} = kw[{name!r}]" for name, var in local.items())
    if not plan.firstresult:
        lines.append("    results = []")
    if calls:
        lines.append("    try:")
        lines.extend(calls)
        lines.append("    except Exception as e:")
        lines.append("        raise WRAP(NAMES[i], HOOK, e)")
    lines.append("    return None" if plan.firstresult else "    return results")
    source = "\n".join(lines) + "\n"
    filename = f"<autogpt hook {plan.name!r} fast path>"
    # Registered so tracebacks through the generated code show its lines.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    fast: _FastCall = namespace["fast"]
    return fast


def _call_inline(
    step: _Step, args: list[object], kw: Any, hook: str, report_slow: SlowReporter | None
) -> Any:
    """Call a sync (or ``maybe_async``) implementation on the loop, timing it if asked."""
    function = step[0]
    if report_slow is None:
        return function(*args, **kw)
    started = _clock()
    try:
        return function(*args, **kw)
    finally:
        # Also when it raised: a Ctrl-C that ended a long block is worth reporting too.
        elapsed = _clock() - started
        if elapsed >= SLOW_SECONDS:
            report_slow(hook, step[4], elapsed)


async def _invoke(
    step: _Step, args: list[object], kw: Any, hook: str, report_slow: SlowReporter | None
) -> Any:
    """Call one non-wrapper implementation according to its kind."""
    function, kind = step[0], step[3]
    if kind == ASYNC:
        return await function(*args, **kw)
    if kind == BLOCKING:
        target = functools.partial(function, *args, **kw)
        return await trio.to_thread.run_sync(target, abandon_on_cancel=True)
    result = _call_inline(step, args, kw, hook, report_slow)
    if kind == MAYBE_ASYNC and inspect.isawaitable(result):
        return await result
    return result


async def _within(awaitable: Any, seconds: float | None, plugin: str, hook: str) -> Any:
    """Await a wrapper step, under its own deadline when ``seconds`` is given."""
    if seconds is None:
        return await awaitable
    with trio.move_on_after(seconds):
        return await awaitable
    raise _timeout_error(plugin, hook, seconds)


async def _isolated(
    step: _Step,
    args: list[object],
    kw: Any,
    hook: str,
    isolate: IsolateCallback,
    seconds: float | None,
    report_slow: SlowReporter | None,
) -> tuple[Any, str | None]:
    """Run one implementation so that its failure is reported, not raised."""
    kind, plugin = step[3], step[4]
    error: HookError
    try:
        # A plain sync implementation cannot be interrupted, so a deadline (a cancel scope
        # per call, on the hot path of every cycle) would buy nothing for it.
        if kind == SYNC:
            return _call_inline(step, args, kw, hook, report_slow), None
        if seconds is None:
            return await _invoke(step, args, kw, hook, report_slow), None
        with trio.move_on_after(seconds):
            return await _invoke(step, args, kw, hook, report_slow), None
        error = _timeout_error(plugin, hook, seconds)
        outcome = "timeout (isolated)"
    except Exception as exc:
        wrapped = _hook_error(plugin, hook, exc)
        assert isinstance(wrapped, HookError)
        error = wrapped
        outcome = f"raised {type(exc).__name__} (isolated)"
    isolate(error)
    return None, outcome


def _sync_teardown(
    gen: Any, result: object, exception: BaseException | None
) -> tuple[object, BaseException | None, bool]:
    """pluggy's teardown of one sync wrapper: ``(result, exception, yielded_again)``."""
    try:
        if exception is not None:
            try:
                gen.throw(exception)
            except RuntimeError as re:
                # StopIteration from a generator becomes RuntimeError (pluggy #544).
                if isinstance(exception, StopIteration) and re.__cause__ is exception:
                    gen.close()
                    return result, exception, False
                raise
        else:
            gen.send(result)
        gen.close()
    except StopIteration as si:
        return si.value, None, False
    except BaseException as exc:
        return result, exc, False
    return result, exception, True


async def _async_teardown(
    agen: Any,
    result: object,
    exception: BaseException | None,
    seconds: float | None,
    plugin: str,
    hook: str,
) -> tuple[object, BaseException | None]:
    """The teardown of one async wrapper (protocol in the module docstring)."""
    try:
        if exception is not None:
            try:
                value = await _within(agen.athrow(exception), seconds, plugin, hook)
            except RuntimeError as re:
                stops = (StopIteration, StopAsyncIteration)
                if isinstance(exception, stops) and re.__cause__ is exception:
                    await agen.aclose()
                    return result, exception
                raise
        else:
            value = await _within(agen.asend(result), seconds, plugin, hook)
    except StopAsyncIteration:
        return (None if exception is not None else result), None
    except BaseException as exc:
        return result, exc
    # A second yield: its value is the result. Let the generator finish.
    try:
        await _within(agen.asend(None), seconds, plugin, hook)
    except StopAsyncIteration:
        return value, None
    except BaseException as exc:
        return value, exc
    try:
        await agen.aclose()
    except BaseException as exc:
        return value, exc
    return value, _wrapfail(agen, "has a third yield")


async def _run(
    plan: _Plan,
    kwargs: Mapping[str, object],
    isolate: IsolateCallback | None,
    step_seconds: float | None,
    culprit: _Culprit | None,
    on_call: HookTracer | None,
    report_slow: SlowReporter | None,
    returns: ResultTypes | None,
) -> Any:
    """The general call path: pluggy's ``_multicall``, awaiting, with errors attributed."""
    hook = plan.name
    firstresult = plan.firstresult
    results: list[object] = []
    exception: BaseException | None = None
    owner: str | None = None  # the plugin that raised ``exception``
    teardowns: list[_Teardown] = []
    started = 0.0
    try:
        for step in plan.steps:
            function, argnames, kwargnames, kind, plugin, impl = step
            owner = None
            try:
                args = list(map(kwargs.__getitem__, argnames))
                if kwargnames:
                    kw: Mapping[str, object] = {
                        name: kwargs[name] for name in kwargnames if name in kwargs
                    }
                else:
                    kw = _EMPTY
            except KeyError as e:
                raise HookCallError(f"hook call must provide argument {e.args[0]!r}") from e
            owner = plugin
            if on_call is not None:
                started = time.perf_counter()
            if kind == WRAPPER:
                gen = function(*args, **kw)
                try:
                    next(gen)
                except StopIteration:
                    raise _wrapfail(gen, "did not yield") from None
                teardowns.append((step, gen, _since(started) if on_call else 0.0))
            elif kind == ASYNC_WRAPPER:
                agen = function(*args, **kw)
                try:
                    await _within(agen.asend(None), step_seconds, plugin, hook)
                except StopAsyncIteration:
                    raise _wrapfail(agen, "did not yield") from None
                teardowns.append((step, agen, _since(started) if on_call else 0.0))
            elif kind == OLD_WRAPPER:
                gen = run_old_style_hookwrapper(impl, hook, args, dict(kw) or None)
                next(gen)
                teardowns.append((step, gen, _since(started) if on_call else 0.0))
            else:
                outcome = None
                if isolate is not None:
                    res, outcome = await _isolated(
                        step, args, kw, hook, isolate, step_seconds, report_slow
                    )
                elif kind == SYNC:
                    res = _call_inline(step, args, kw, hook, report_slow)
                else:
                    res = await _invoke(step, args, kw, hook, report_slow)
                if res is not None and returns is not None and not isinstance(res, returns):
                    wrong = _wrong_type(plugin, hook, res, returns)
                    if isolate is None:
                        raise wrong
                    isolate(wrong)
                    res, outcome = None, f"returned {type(res).__name__} (isolated)"
                if on_call is not None:
                    if outcome is None:
                        outcome = "none" if res is None else "value"
                    on_call(hook, plugin, _since(started), outcome)
                if res is not None:
                    results.append(res)
                    if firstresult:
                        break
    except BaseException as exc:
        exception = exc
        if culprit is not None and culprit.plugin is None and isinstance(exc, trio.Cancelled):
            culprit.plugin = owner
        if on_call is not None and owner is not None:
            on_call(hook, owner, _since(started), _describe(exc))

    result: object = (results[0] if results else None) if firstresult else results
    for step, gen, setup_seconds in reversed(teardowns):
        plugin = step[4]
        before = exception
        if on_call is not None:
            teardown_started = time.perf_counter()
        if step[3] == ASYNC_WRAPPER:
            result, exception = await _async_teardown(
                gen, result, exception, step_seconds, plugin, hook
            )
        else:
            result, exception, yielded_again = _sync_teardown(gen, result, exception)
            if yielded_again:
                # As in pluggy, this error skips the remaining teardowns.
                raise _hook_error(plugin, hook, _wrapfail(gen, "has second yield"))
        if (
            returns is not None
            and firstresult
            and exception is None
            and result is not None
            and not isinstance(result, returns)
        ):
            # Inner values were checked as they came: this one is the wrapper's own.
            exception = _wrong_type(plugin, hook, result, returns)
            result = None
        if exception is not None and exception is not before:
            owner = plugin
            # A wrapper awaiting in its teardown after the deadline raises a fresh Cancelled;
            # the blame stays with whoever was running when the first one appeared.
            if culprit is not None and culprit.plugin is None:
                if isinstance(exception, trio.Cancelled):
                    culprit.plugin = plugin
        if on_call is not None:
            elapsed = setup_seconds + _since(teardown_started)
            raised = exception is not None and exception is not before
            on_call(
                hook, plugin, elapsed, "wrapper " + _describe(exception) if raised else "wrapper"
            )

    if exception is not None:
        if owner is not None and isinstance(exception, Exception):
            raise _hook_error(owner, hook, exception)
        raise exception
    return result


def _since(started: float) -> float:
    return time.perf_counter() - started


def _describe(exc: BaseException | None) -> str:
    return "ok" if exc is None else f"raised {type(exc).__name__}"


class AsyncHookCaller:
    """Awaitable caller of one hook: ``await pm.ahook.NAME(**kwargs)``.

    Same semantics as pluggy's ``pm.hook.NAME(**kwargs)`` (see the module docstring), plus
    per-call ``timeout`` and ``isolate`` through :meth:`call`.
    """

    __slots__ = ("_fast", "_hook", "_plan", "_pm", "name")

    def __init__(self, pm: HookManager, hook: HookCaller) -> None:
        self.name: str = hook.name
        self._pm = pm
        self._hook = hook
        self._plan: _Plan | None = None
        self._fast: _FastCall | None = None

    def __repr__(self) -> str:
        return f"<AsyncHookCaller {self.name!r}>"

    def __call__(self, **kwargs: object) -> Coroutine[Any, Any, Any]:
        """Call the hook with keyword arguments; await the returned coroutine."""
        fast = self._fast
        if fast is None:
            return self._call(kwargs, None, None, 3)
        return fast(kwargs)

    async def call(
        self,
        kwargs: Mapping[str, object],
        *,
        # A per-call deadline is the point of this API (pluggy's callers have no scope to
        # wrap), so the ASYNC109 advice to let the caller use fail_after does not apply.
        timeout: float | None = None,  # noqa: ASYNC109
        isolate: IsolateCallback | None = None,
        returns: ResultTypes | None = None,
    ) -> Any:
        """Call the hook with ``kwargs``.

        ``timeout``: seconds for the whole call (per implementation with ``isolate``);
        ``None`` uses the manager's ``default_timeout``; ``math.inf`` means no deadline.
        ``isolate``: report failing non-wrapper implementations to this callback instead
        of raising, and count them as having returned ``None``.
        ``returns``: the type (or types) every non-``None`` value must have; another is
        an error of the implementation that returned it.
        """
        return await self._call(kwargs, timeout, isolate, 4, returns)

    def get_hookimpls(self) -> list[HookImpl]:
        """The implementations in pluggy's list order (call order is the reverse)."""
        return self._hook.get_hookimpls()

    def _invalidate(self) -> None:
        self._plan = None
        self._fast = None

    def _get_plan(self) -> _Plan:
        plan = self._plan
        if plan is None:
            plan = self._plan = _Plan(self._hook)
            pm = self._pm
            if plan.fast_ok and pm.on_call is None and pm.default_timeout is None:
                self._fast = _compile_fast(plan, self._call, pm._report_slow, self._zoom)
        return plan

    def _zoom(self) -> None:
        # Several inline implementations took long together: until the plan changes, calls
        # take the general path, which times each of them.
        self._fast = None

    async def _call(
        self,
        kwargs: Mapping[str, object],
        seconds: float | None,
        isolate: IsolateCallback | None,
        stacklevel: int,
        returns: ResultTypes | None = None,
    ) -> Any:
        plan = self._get_plan()
        if plan.historic:
            raise TypeError(
                f"hook {self.name!r} is historic: the awaitable caller does not replay calls; "
                f"use pm.hook.{self.name}.call_historic(...) instead"
            )
        kwargs = plan.prepare(kwargs, stacklevel)
        pm = self._pm
        if seconds is None:
            seconds = pm._default_timeout
        if seconds is not None and math.isinf(seconds):
            seconds = None
        on_call = pm._on_call
        report_slow = pm._report_slow
        if isolate is not None or seconds is None:
            return await _run(plan, kwargs, isolate, seconds, None, on_call, report_slow, returns)
        culprit = _Culprit()
        with trio.move_on_after(seconds):
            return await _run(plan, kwargs, None, None, culprit, on_call, report_slow, returns)
        raise _timeout_error(culprit.plugin or "<unknown>", self.name, seconds)


class AsyncHooks:
    """The awaitable relay: ``pm.ahook.NAME`` is the ``AsyncHookCaller`` of hook ``NAME``."""

    def __init__(self, pm: HookManager) -> None:
        self._pm = pm

    def __getattr__(self, name: str) -> AsyncHookCaller:
        hook = None if name.startswith("_") else getattr(self._pm.hook, name, None)
        if hook is None:
            raise AttributeError(f"no hook named {name!r}: check the name against hookspecs")
        caller = AsyncHookCaller(self._pm, hook)
        # Cached in the instance dict, so later lookups skip __getattr__ entirely.
        self.__dict__[name] = caller
        return caller

    def _callers(self) -> list[AsyncHookCaller]:
        return [value for value in vars(self).values() if isinstance(value, AsyncHookCaller)]


def _namespaces(
    specs: SpecNamespace | Iterable[SpecNamespace] | None,
) -> tuple[SpecNamespace, ...]:
    if specs is None:
        return (hookspecs.specs,)
    if isinstance(specs, types.ModuleType | type):
        return (specs,)
    return tuple(specs)


class HookManager(pluggy.PluginManager):
    """pluggy's ``PluginManager`` for project ``autogpt`` with an awaitable relay, ``ahook``.

    ``HookManager()`` knows the hooks of ``hookspecs``; ``specs=`` replaces them (a module,
    a class, or several). ``pm.hook.NAME(...)`` still calls pluggy synchronously (it does
    not await async implementations). The tracer is ``on_call``: pluggy's own ``trace``
    attribute is its internal tag tracer and is left alone.
    """

    def __init__(
        self,
        specs: SpecNamespace | Iterable[SpecNamespace] | None = None,
        *,
        default_timeout: float | None = None,
    ) -> None:
        super().__init__(PROJECT_NAME)
        self._default_timeout = default_timeout
        self._on_call: HookTracer | None = None
        self._on_slow: SlowReporter | None = print_slow
        self._report_slow: SlowReporter | None = self._slow_once
        self._slow_reported: set[tuple[str, str]] = set()
        #: The awaitable relay: ``await pm.ahook.NAME(**kwargs)``.
        self.ahook: Final = AsyncHooks(self)
        for namespace in _namespaces(specs):
            self.add_hookspecs(namespace)

    @property
    def default_timeout(self) -> float | None:
        """Deadline in seconds of an ``ahook`` call given no ``timeout``; ``None``: none."""
        return self._default_timeout

    @default_timeout.setter
    def default_timeout(self, seconds: float | None) -> None:
        self._default_timeout = seconds
        self._invalidate()

    @property
    def on_call(self) -> HookTracer | None:
        """Tracer called after each implementation of an ``ahook`` call, or ``None``."""
        return self._on_call

    @on_call.setter
    def on_call(self, tracer: HookTracer | None) -> None:
        self._on_call = tracer
        self._invalidate()

    @property
    def on_slow(self) -> SlowReporter | None:
        """Told once per (plugin, hook) of an inline implementation that took at least
        ``SLOW_SECONDS``: ``on_slow(hook, plugin, seconds)``. Default ``print_slow``;
        ``None`` stops the timing."""
        return self._on_slow

    @on_slow.setter
    def on_slow(self, reporter: SlowReporter | None) -> None:
        self._on_slow = reporter
        self._report_slow = None if reporter is None else self._slow_once
        self._invalidate()

    def _slow_once(self, hook: str, plugin: str, seconds: float) -> None:
        key = (plugin, hook)
        reporter = self._on_slow
        if key not in self._slow_reported and reporter is not None:
            self._slow_reported.add(key)
            reporter(hook, plugin, seconds)

    def _invalidate(self) -> None:
        for caller in self.ahook._callers():
            caller._invalidate()

    def register(self, plugin: object, name: str | None = None) -> str | None:
        try:
            return super().register(plugin, name)
        finally:
            self._invalidate()

    def unregister(self, plugin: object | None = None, name: str | None = None) -> Any | None:
        try:
            return super().unregister(plugin, name)
        finally:
            self._invalidate()

    def set_blocked(self, name: str) -> None:
        try:
            super().set_blocked(name)
        finally:
            self._invalidate()

    def add_hookspecs(self, module_or_class: SpecNamespace) -> None:
        try:
            super().add_hookspecs(module_or_class)
        finally:
            self._invalidate()

    def impls_by_plugin(self, hook_name: str) -> list[tuple[str, HookImpl]]:
        """``(plugin_name, impl)`` for each implementation of ``hook_name``, in call order.

        For *per-plugin* hooks (``configure``, ``register_*``), which the loader calls one
        plugin at a time with arguments bound to that plugin.
        """
        hook: HookCaller | None = getattr(self.hook, hook_name, None)
        if hook is None:
            raise ValueError(f"no hook named {hook_name!r}: check the name against hookspecs")
        return [(impl.plugin_name, impl) for impl in reversed(hook.get_hookimpls())]

    def _verify_hook(self, hook: HookCaller, hookimpl: HookImpl) -> None:
        # pluggy accepts only generator wrappers; async generators are wrappers here too.
        function = hookimpl.function
        where = f"Plugin {hookimpl.plugin_name!r} for hook {hook.name!r}\n"
        is_asyncgen = inspect.isasyncgenfunction(function)
        if getattr(function, BLOCKING_ATTR, False) and (
            hookimpl.wrapper
            or hookimpl.hookwrapper
            or is_asyncgen
            or inspect.iscoroutinefunction(function)
        ):
            raise PluginValidationError(
                hookimpl.plugin,
                where + "blocking=True is for plain functions, not wrappers or async ones; "
                "fix: drop blocking=True (async code never blocks the event loop)",
            )
        if is_asyncgen and hookimpl.hookwrapper:
            raise PluginValidationError(
                hookimpl.plugin,
                where + "an old-style hookwrapper=True cannot be an async generator; "
                "fix: use wrapper=True",
            )
        if is_asyncgen and hookimpl.wrapper:
            if hook.is_historic():
                raise PluginValidationError(
                    hookimpl.plugin, where + "historic incompatible with yield/wrapper/hookwrapper"
                )
            opts = hookimpl.opts.copy()
            opts["wrapper"] = False
            hookimpl = HookImpl(hookimpl.plugin, hookimpl.plugin_name, function, opts)
        super()._verify_hook(hook, hookimpl)


# --- Ctrl-C in stuck code ----------------------------------------------------------------

# How often the idle watchdog looks for a Ctrl-C, and how often it probes the loop after one.
_WATCH_INTERVAL: Final = 0.2
# Raised this many times in a row without the loop getting free (the code caught the
# KeyboardInterrupt, or blocks where Python cannot raise it), the process gives up.
_ESCALATIONS: Final = 2
_EXIT_INTERRUPTED: Final = 130

AbandonCallback = Callable[[], object]
"""Called from the watchdog thread just before the process exits (see ``stall_interrupts``)."""


# The stop signals watched; the watchdog's own is always SIGINT (KeyboardInterrupt).
_STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)


class _StallWatch:
    """One installation of ``stall_interrupts``: the SIGINT (and SIGTERM) handler and its
    watchdog thread.

    The handler touches no lock (it may run in the middle of any code of the main thread):
    it sets a flag that the watchdog polls, and calls the handler it replaced.
    """

    def __init__(
        self, token: trio.lowlevel.TrioToken, inner: dict[int, Callable[..., Any]]
    ) -> None:
        self.token = token
        self.inner = inner
        self.users = 0
        self.abandon: list[AbandonCallback] = []
        self.main_thread = threading.get_ident()
        self.requested = False  # a Ctrl-C came: from now on the loop is watched
        self.closed = False
        self.escalating = False  # the next SIGINT is the watchdog's own
        self.answered = threading.Event()  # the loop ran the last probe
        self.answered.set()
        # One bound method, so that ``signal.getsignal(...) is self.handler`` tells ours.
        self.handler = self.handle
        self.thread = threading.Thread(target=self.watch, name="autogpt-stall-watch", daemon=True)

    def handle(self, signum: int, frame: types.FrameType | None) -> None:
        if self.escalating and signum == signal.SIGINT:
            self.escalating = False
            # Still stuck? Then raise here, inside the code that holds the loop. If the loop
            # got free meanwhile, the Ctrl-C already queued for it does the stopping.
            if not self.answered.is_set():
                raise KeyboardInterrupt
            return
        self.requested = True
        self.inner[signum](signum, frame)

    def watch(self) -> None:
        while not self.requested:
            if self.closed:
                return
            time.sleep(_WATCH_INTERVAL)
        while not self.closed:
            self.answered.clear()
            try:
                self.token.run_sync_soon(self.answered.set)
            except trio.RunFinishedError:
                return
            escalations = 0
            while not self.answered.wait(STALL_SECONDS):
                if self.closed:
                    return
                if escalations == _ESCALATIONS:
                    self.give_up()
                escalations += 1
                self.escalate()
            time.sleep(_WATCH_INTERVAL)

    def escalate(self) -> None:
        self.escalating = True
        try:
            # A real signal: a blocking call (time.sleep, a socket read) is interrupted with
            # EINTR and Python runs the handler at once; interrupt_main() would wait for it.
            signal.pthread_kill(self.main_thread, signal.SIGINT)
        except (AttributeError, OSError):  # no pthread_kill (Windows), or the thread is gone
            import _thread

            _thread.interrupt_main()

    def give_up(self) -> None:
        """The stuck code swallows KeyboardInterrupt, or blocks where Python cannot raise
        it: save what can be saved from this thread, and end the process."""
        frame = sys._current_frames().get(self.main_thread)
        where = f" at {frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else ""
        print(
            f"autogpt: code blocking the event loop{where} ignored Ctrl-C for "
            f"{(_ESCALATIONS + 1) * STALL_SECONDS:g}s; exiting (a plain def hook or command "
            "that blocks should be @hookimpl(blocking=True) / @blocking, or async def)",
            file=sys.stderr,
            flush=True,
        )
        for callback in list(self.abandon):
            try:
                callback()
            except Exception as exc:  # the exit must happen; say what could not be saved
                print(f"autogpt: could not save before exiting: {exc}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(_EXIT_INTERRUPTED)

    def close(self) -> None:
        self.closed = True
        for signum, inner in self.inner.items():
            if signal.getsignal(signum) is self.handler:
                signal.signal(signum, inner)


_stall_watch: _StallWatch | None = None


@contextmanager
def stall_interrupts(on_abandon: AbandonCallback | None = None) -> Iterator[None]:
    """Within this block, a Ctrl-C (or SIGTERM) reaches code that blocks the trio loop.

    A plain sync implementation (or command) that blocks runs on the loop, so a SIGINT
    handler that only queues the signal for a trio task (``trio.open_signal_receiver``)
    never gets its turn. Here the SIGINT and SIGTERM handlers are wrapped: they still call
    the handlers they replaced (a graceful stop goes on as before), and a watchdog thread
    then probes the loop; if the loop has not answered within ``STALL_SECONDS``, SIGINT is
    sent to the main thread and raised as ``KeyboardInterrupt`` where it is stuck, once per
    ``STALL_SECONDS`` while it stays stuck. Nothing is watched until the first signal.

    If the stuck code ignores that too (it catches ``BaseException``, or blocks inside C
    code that retries), the watchdog calls every active block's ``on_abandon`` (which must
    save its state without the loop: another database connection) and exits with 130.

    Use it inside ``trio.run`` on the main thread (elsewhere it does nothing). Blocks may
    nest and overlap (one per session): the handler is installed by the first and the one
    it replaced is restored by the last, unless another has been installed since.
    """
    global _stall_watch
    watch = None
    if threading.current_thread() is threading.main_thread():
        watch = _stall_watch
        # Only Python-level handlers are wrapped: the default action of SIGTERM (the process
        # ends at once) needs no help, and without a SIGINT handler nothing can be raised.
        inner: dict[int, Callable[..., Any]] = {
            signum: handler
            for signum in _STOP_SIGNALS
            if callable(handler := signal.getsignal(signum))
        }
        if watch is None and signal.SIGINT in inner:
            watch = _StallWatch(trio.lowlevel.current_trio_token(), inner)
            for signum in inner:
                signal.signal(signum, watch.handler)
            watch.thread.start()
            _stall_watch = watch
    if watch is not None:
        watch.users += 1
        if on_abandon is not None:
            watch.abandon.append(on_abandon)
    try:
        yield
    finally:
        if watch is not None:
            if on_abandon is not None:
                watch.abandon.remove(on_abandon)
            watch.users -= 1
            if watch.users == 0:
                watch.close()
                _stall_watch = None
