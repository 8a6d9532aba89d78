"""The awaitable hook caller: pluggy's call semantics, awaited under trio.

``HookManager`` is a ``pluggy.PluginManager`` for project ``autogpt``. Next to pluggy's
synchronous relay ``pm.hook`` it has ``pm.ahook``::

    plan = await pm.ahook.plan(session=session, context=context)
    hits = await pm.ahook.memory_recall.call(kwargs, timeout=5.0, isolate=report)

**One path.** Both forms run the same loop, ``_multicall``: pluggy's ``_multicall`` with
awaiting, deadlines, isolation, result types, tracing and the slow-call check added. What
pluggy itself offers no public API for is reached through ``_compat`` (one comment per use).

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

**Isolation.** With ``isolate=callback`` a non-wrapper implementation that raises an
``Exception`` is reported as ``callback(HookError)`` and counts as having returned ``None``;
the call goes on with the next implementation. With both ``isolate`` and ``timeout`` the
deadline applies to *each* implementation (and to each step of an async wrapper) instead
of the whole call: one that overruns is reported as a ``HookTimeout`` and counts as ``None``.
Its deadline runs from the moment it first suspends (what runs before that cannot be
interrupted anyway). Wrappers are never isolated: their errors (timeouts included) end the
call as usual.

**One cancel scope per call.** A call with a deadline whose plan can await (an ``async``,
``blocking``, ``maybe_async`` or ``async_wrapper`` step) runs inside one ``trio.CancelScope``,
opened before its first step and closed after its last (``_with_deadline``); a plan of plain
functions gets none, since nothing there could be interrupted. For the whole-call deadline
the scope has it from the start, and the step running when it fires is named: ``_multicall``
keeps the running step in a local variable, which is what the ``except`` that sees the
``Cancelled`` reads. For per-implementation deadlines the scope is re-armed, not re-opened:
``_multicall`` notes the step that may await, and ``_drive``, which forwards the call's
traps to trio, sets ``scope.deadline = now + timeout`` when that step yields its first one.
A step that returns without suspending -- most do -- costs an attribute store. Only a scope
that fired is replaced (a cancelled scope stays cancelled), between steps, where it is the
innermost one.

**Result types.** With ``returns=Type`` (or a tuple of types) a non-``None`` value of an
implementation that is not of that type is an error of that implementation: a
``HookError`` naming the plugin, the type it returned and the one expected (reported and
counted as ``None`` with ``isolate``). For a firstresult hook, a wrapper replacing the
result with a value of another type is named the same way.

**Slow inline calls.** Plain sync (and ``maybe_async``) implementations run on the event
loop; one that takes ``SLOW_SECONDS`` or longer holds up every other task, as asyncio's
slow-callback warning says. ``HookManager.on_slow(hook, plugin, seconds)`` hears of it once
per (plugin, hook); by default it prints the fix to stderr. Each inline call is timed, also
when it raised (a Ctrl-C that ended a long block is worth reporting): one
``time.perf_counter()`` reading after it, plus one before the first of a run of consecutive
inline implementations (the end of one is the start of the next). ``on_slow = None`` turns
it off.

**Ctrl-C in stuck code.** While an implementation blocks the loop, trio cannot take a
signal: a handler that only queues it (``trio.open_signal_receiver``) waits until the code
returns, which may be never. Inside ``stall_interrupts()`` a SIGINT that the loop does not
take within ``STALL_SECONDS`` is raised as ``KeyboardInterrupt`` where the main thread is
stuck, and again a ``STALL_SECONDS`` later; stuck still, the process saves what it can and
exits with 130.

**Tracing.** ``HookManager.on_call = fn(hook, plugin, seconds, outcome)`` is called after each
implementation (a wrapper once, after its teardown, with setup and teardown time summed).
``None`` (the default) costs a test per implementation.

**Speed.** Each ``AsyncHookCaller`` keeps a plan per registration generation: the steps in
call order, each ``(function, argument getter, kind, plugin_name, fresh)``, bound to the
argument names of a well-formed call (the spec's, after its defaults) -- an
``operator.itemgetter`` fetches an implementation's positional arguments in one C call, and
opt-in keyword arguments are folded in by a small adapter. A call with other argument names
(which pluggy warns about or fails) gets steps bound to its own names, cached per name set.
``register``, ``unregister``, ``add_hookspecs``, ``set_blocked`` and setting ``on_call``,
``default_timeout`` or ``on_slow`` drop the plans. ``bench/hook_dispatch.py`` times the
engine's call against pluggy's own (``docs/benchmarks.md``).
"""

from __future__ import annotations

import inspect
import math
import operator
import os
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Coroutine, Generator, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

import trio
from pluggy import HookCaller, HookImpl, PluginValidationError

import hookspecs
from hookspecs import BLOCKING_ATTR, PROJECT_NAME

from .._errors import HookError, HookTimeout
from . import _compat

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
# The kinds whose step may await: a call with a deadline opens its cancel scope for them.
_AWAITING: Final = frozenset({ASYNC, BLOCKING, MAYBE_ASYNC, ASYNC_WRAPPER})

#: An inline implementation taking this long (seconds) or longer is reported to ``on_slow``.
#: asyncio's slow-callback warning uses the same 100 ms.
SLOW_SECONDS: Final = 0.1
#: How long the loop may leave a Ctrl-C untaken before it is raised where the loop is stuck.
STALL_SECONDS: Final = 1.0

# The clock of the slow-call check; a module global so that tests can drive it.
_clock = time.perf_counter

# How many argument-name sets (other than the spec's) a plan keeps steps for.
_BOUND_CACHE: Final = 8

_Getter = Callable[[Mapping[str, object]], tuple[Any, ...]]
# (function, argument getter, kind, plugin_name, fresh): ``function(*getter(kwargs))`` is the
# call; ``fresh`` says that the slow-call check needs a clock reading before it (the step
# before it was not inline).
_Step = tuple[Callable[..., Any], _Getter, str, str, bool]
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


def _hook_error(plugin: str, hook: str, exc: Exception) -> HookError:
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


# --- the call plan ------------------------------------------------------------------------


def _no_arguments(kwargs: Mapping[str, object]) -> tuple[Any, ...]:
    return ()


def _getter(names: tuple[str, ...]) -> _Getter:
    """A function of the call's arguments giving the values of ``names``, as a tuple."""
    if not names:
        return _no_arguments
    if len(names) == 1:
        (name,) = names
        return lambda kwargs: (kwargs[name],)
    getter: _Getter = operator.itemgetter(*names)
    return getter


def _missing(name: str) -> _Getter:
    """The getter of an implementation needing ``name``, which the call lacks."""

    def get(kwargs: Mapping[str, object]) -> tuple[Any, ...]:
        raise _compat.missing_argument_error(name)

    return get


def _with_keywords(
    function: Callable[..., Any], positional: int, keywords: tuple[str, ...]
) -> Callable[..., Any]:
    """``function`` taking all its arguments positionally: the last ``len(keywords)`` are
    passed on by keyword, as pluggy passes an implementation's opt-in arguments."""

    def call(*values: object) -> Any:
        return function(
            *values[:positional], **dict(zip(keywords, values[positional:], strict=True))
        )

    return call


def _old_style(
    impl: HookImpl, hook: str, positional: int, keywords: tuple[str, ...]
) -> Callable[..., Any]:
    """An old-style hookwrapper taking its arguments positionally, set up as pluggy does."""

    def call(*values: object) -> Any:
        kw = dict(zip(keywords, values[positional:], strict=True)) or None
        return _compat.old_style_wrapper(impl, hook, values[:positional], kw)

    return call


class _Plan:
    """What a call of one hook needs, computed once per registration generation."""

    __slots__ = (
        "_bound",
        "_impls",
        "awaits",
        "default_timeout",
        "firstresult",
        "historic",
        "keys",
        "kwargdefaults",
        "name",
        "on_call",
        "report_slow",
        "spec_argnames",
        "steps",
    )

    def __init__(self, hook: HookCaller, pm: HookManager) -> None:
        self.name: str = hook.name
        spec = _compat.spec_info(hook)
        self._impls = tuple(
            (impl, impl_kind(impl), *_compat.impl_arguments(impl))
            for impl in _compat.call_order(hook)
        )
        self.historic: bool = hook.is_historic()
        self.firstresult: bool = spec.firstresult if spec else False
        self.spec_argnames: tuple[str, ...] = spec.argnames if spec else ()
        self.kwargdefaults: dict[str, object] = spec.kwargdefaults if spec else {}
        # The argument names of a well-formed call (after the spec's defaults are applied).
        if spec is not None:
            keys = frozenset(spec.argnames) | frozenset(spec.kwargnames)
        else:
            keys = frozenset(
                name for _impl, _kind, argnames, _kw in self._impls for name in argnames
            )
        self.keys: frozenset[str] = keys
        self.awaits: bool = any(kind in _AWAITING for _impl, kind, _a, _k in self._impls)
        self.default_timeout: float | None = pm.default_timeout
        self.on_call: HookTracer | None = pm.on_call
        self.report_slow: SlowReporter | None = pm._report_slow
        self._bound: dict[frozenset[str], tuple[_Step, ...]] = {}
        self.steps: tuple[_Step, ...] = self._bind(keys)

    def _bind(self, keys: frozenset[str]) -> tuple[_Step, ...]:
        """The steps of a call passing exactly the arguments ``keys``."""
        steps: list[_Step] = []
        inline_before = False
        for impl, kind, argnames, kwargnames in self._impls:
            keywords = tuple(name for name in kwargnames if name in keys)
            missing = [name for name in argnames if name not in keys]
            get = _missing(missing[0]) if missing else _getter(argnames + keywords)
            function: Callable[..., Any] = impl.function
            if kind == OLD_WRAPPER:
                function = _old_style(impl, self.name, len(argnames), keywords)
            elif keywords:
                function = _with_keywords(function, len(argnames), keywords)
            inline = kind in (SYNC, MAYBE_ASYNC)
            steps.append((function, get, kind, impl.plugin_name, inline and not inline_before))
            # A maybe_async step may await after its inline part: the clock starts afresh.
            inline_before = kind == SYNC
        return tuple(steps)

    def bind(self, kwargs: Mapping[str, object], stacklevel: int) -> tuple[_Step, ...]:
        """The steps of a call whose argument names are not the spec's: pluggy's warning
        for spec arguments it lacks, and each implementation bound to what it has."""
        _compat.warn_missing_arguments(self.spec_argnames, kwargs, stacklevel + 1)
        keys = frozenset(kwargs)
        steps = self._bound.get(keys)
        if steps is None:
            if len(self._bound) >= _BOUND_CACHE:
                self._bound.clear()
            steps = self._bound[keys] = self._bind(keys)
        return steps


# --- deadlines ----------------------------------------------------------------------------


class _Deadline:
    """The one cancel scope of a call with a deadline, and what the call's steps tell it.

    Entered by hand rather than in a ``with`` block: in per-step mode it is replaced after
    it fired, between two steps, from inside ``_multicall``. ``_with_deadline`` closes it.
    """

    __slots__ = ("armed", "blamed", "per_step", "scope", "seconds", "step")

    def __init__(self, seconds: float, per_step: bool) -> None:
        self.seconds = seconds
        #: True: each step gets ``seconds`` from its first suspension (armed by ``_drive``);
        #: False: the whole call gets ``seconds`` from now.
        self.per_step = per_step
        #: Per step: the step running now (set by ``_multicall`` before each step that may
        #: await), and the one the deadline was last armed for.
        self.step: object = None
        self.armed: object = None
        #: The plugin running when the whole call's deadline fired.
        self.blamed: str | None = None
        self.scope: trio.CancelScope | None = self._open()

    def _open(self) -> trio.CancelScope:
        if self.per_step:
            scope = trio.CancelScope()
        else:
            scope = trio.CancelScope(deadline=trio.current_time() + self.seconds)
        scope.__enter__()
        return scope

    def arm(self) -> None:
        """Per step: the running step is about to suspend for the first time; its deadline
        runs from now."""
        self.armed = self.step
        if self.scope is not None:
            self.scope.deadline = trio.current_time() + self.seconds

    def settle(self) -> None:
        """Per step: a step that suspended is over. Its deadline may have passed after it
        was woken and before it ran; the scope would stay cancelled, so it is replaced."""
        scope = self.scope
        if scope is not None and scope.cancel_called:
            scope.__exit__(None, None, None)
            self.scope = self._open()

    def caught(self, exc: trio.Cancelled) -> bool:
        """Per step: ``exc`` left the running step. True if this scope's deadline raised it
        (the scope is replaced, for the steps after); False if it comes from outside."""
        scope = self.scope
        if scope is None or not scope.cancel_called:
            return False
        self.scope = None
        if scope.__exit__(type(exc), exc, exc.__traceback__):
            self.scope = self._open()
            return True
        return False  # an enclosing scope was cancelled too: it takes precedence

    def close(self, exc: BaseException | None) -> bool:
        """Leave the scope at the end of the call: True if it swallowed ``exc`` (the
        ``Cancelled`` of its own deadline)."""
        scope = self.scope
        if scope is None:
            return False
        self.scope = None
        if exc is None:
            scope.__exit__(None, None, None)
            return False
        return bool(scope.__exit__(type(exc), exc, exc.__traceback__))


async def _with_deadline(
    plan: _Plan,
    kwargs: Mapping[str, object],
    seconds: float,
    isolate: IsolateCallback | None,
    returns: ResultTypes | None,
) -> Any:
    """``_multicall`` inside the call's one cancel scope; the scope's own expiry becomes a
    ``HookTimeout`` naming the implementation that was running."""
    deadline = _Deadline(seconds, per_step=isolate is not None)
    try:
        if isolate is None:
            # Warnings point past this frame too.
            result = await _multicall(plan, kwargs, isolate, returns, deadline, 3)
        else:
            call = _multicall(plan, kwargs, isolate, returns, deadline, 4)
            result = await _drive(call, deadline)
    except BaseException as exc:
        if deadline.close(exc):
            raise _timeout_error(deadline.blamed or "<unknown>", plan.name, seconds) from None
        raise
    deadline.close(None)
    return result


@types.coroutine
def _drive(coro: Coroutine[Any, Any, Any], deadline: _Deadline) -> Generator[Any, Any, Any]:
    """Await ``coro`` (a call with per-step deadlines), arming the deadline for the running
    step when it first suspends."""
    # This is ``await coro`` written out: each trap the call yields goes out to trio's
    # scheduler, and what the scheduler sends back (or throws in: ``Cancelled``) goes into
    # the call. Only the coroutine protocol (PEP 342/492) is used. Seeing the traps here,
    # once per call, spares the steps that never suspend -- most -- any deadline work.
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            trap = coro.send(value) if error is None else coro.throw(error)
        except StopIteration as stop:
            return stop.value
        if deadline.armed is not deadline.step:
            deadline.arm()
        try:
            value, error = (yield trap), None
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            value, error = None, exc


async def _step(awaitable: Any, deadline: _Deadline | None, plugin: str, hook: str) -> Any:
    """Await one step of an async wrapper; with per-step ``deadline``, overrunning it raises
    a ``HookTimeout`` naming the wrapper."""
    if deadline is None:
        return await awaitable
    deadline.step = awaitable
    try:
        return await awaitable
    except trio.Cancelled as exc:
        if deadline.caught(exc):
            raise _timeout_error(plugin, hook, deadline.seconds) from None
        raise
    finally:
        if deadline.armed is awaitable:
            deadline.settle()


# --- teardowns ----------------------------------------------------------------------------


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
    deadline: _Deadline | None,
    plugin: str,
    hook: str,
) -> tuple[object, BaseException | None]:
    """The teardown of one async wrapper (protocol in the module docstring)."""
    try:
        if exception is not None:
            try:
                value = await _step(agen.athrow(exception), deadline, plugin, hook)
            except RuntimeError as re:
                stops = (StopIteration, StopAsyncIteration)
                if isinstance(exception, stops) and re.__cause__ is exception:
                    await agen.aclose()
                    return result, exception
                raise
        else:
            value = await _step(agen.asend(result), deadline, plugin, hook)
    except StopAsyncIteration:
        return (None if exception is not None else result), None
    except BaseException as exc:
        return result, exc
    # A second yield: its value is the result. Let the generator finish.
    try:
        await _step(agen.asend(None), deadline, plugin, hook)
    except StopAsyncIteration:
        return value, None
    except BaseException as exc:
        return value, exc
    try:
        await agen.aclose()
    except BaseException as exc:
        return value, exc
    return value, _compat.wrapfail(agen, "has a third yield")


# --- the call -----------------------------------------------------------------------------


async def _multicall(
    plan: _Plan,
    kwargs: Mapping[str, object],
    isolate: IsolateCallback | None,
    returns: ResultTypes | None,
    deadline: _Deadline | None,
    stacklevel: int,
) -> Any:
    """The hook call: pluggy's ``_multicall``, awaiting, with isolation, result types,
    tracing, the slow-call check and the steps' side of deadlines (module docstring).
    ``stacklevel``: where pluggy's warnings point, counted from this frame."""
    hook = plan.name
    if plan.historic:
        raise TypeError(
            f"hook {hook!r} is historic: the awaitable caller does not replay calls; "
            f"use pm.hook.{hook}.call_historic(...) instead"
        )
    if plan.kwargdefaults:
        kwargs = {**plan.kwargdefaults, **kwargs}
    steps = plan.steps if kwargs.keys() == plan.keys else plan.bind(kwargs, stacklevel)
    firstresult = plan.firstresult
    on_call = plan.on_call
    report_slow = plan.report_slow
    clock = _clock
    # Per-step deadlines: each step that may await says it is running (``_drive`` arms the
    # deadline when it suspends); the whole call's deadline needs nothing from the steps.
    per_step = deadline if deadline is not None and deadline.per_step else None
    results: list[object] = []
    teardowns: list[_Teardown] = []
    exception: BaseException | None = None
    owner: str | None = None  # the plugin whose exception ``exception`` is
    current: _Step | None = None  # the step running now
    res: Any = None
    t = started = 0.0
    try:
        for step in steps:
            current = None
            args = step[1](kwargs)  # a HookCallError here is the caller's: nobody's step
            current = step
            function, _get, kind, plugin, fresh = step
            if on_call is not None:
                started = time.perf_counter()
                outcome = None
            try:
                if kind is SYNC:
                    if report_slow is None:
                        res = function(*args)
                    else:
                        if fresh:
                            t = clock()
                        try:
                            res = function(*args)
                        finally:
                            u = clock()
                            if u - t >= SLOW_SECONDS:
                                report_slow(hook, plugin, u - t)
                            t = u
                elif kind is ASYNC:
                    if per_step is None:
                        res = await function(*args)
                    else:
                        per_step.step = step
                        res = await function(*args)
                        if per_step.armed is step:
                            per_step.settle()
                elif kind is BLOCKING:
                    if per_step is not None:
                        per_step.step = step
                    res = await trio.to_thread.run_sync(function, *args, abandon_on_cancel=True)
                    if per_step is not None and per_step.armed is step:
                        per_step.settle()
                elif kind is MAYBE_ASYNC:
                    if report_slow is None:
                        res = function(*args)
                    else:
                        if fresh:
                            t = clock()
                        try:
                            res = function(*args)
                        finally:
                            u = clock()
                            if u - t >= SLOW_SECONDS:
                                report_slow(hook, plugin, u - t)
                    if inspect.isawaitable(res):
                        if per_step is not None:
                            per_step.step = step
                        res = await res
                        if per_step is not None and per_step.armed is step:
                            per_step.settle()
                else:
                    gen = function(*args)
                    if kind is ASYNC_WRAPPER:
                        try:
                            await _step(gen.asend(None), per_step, plugin, hook)
                        except StopAsyncIteration:
                            raise _compat.wrapfail(gen, "did not yield") from None
                    else:
                        try:
                            next(gen)
                        except StopIteration:
                            raise _compat.wrapfail(gen, "did not yield") from None
                    setup = time.perf_counter() - started if on_call is not None else 0.0
                    teardowns.append((step, gen, setup))
                    continue
            except Exception as exc:
                if isolate is None or kind in _WRAPPERS:
                    raise
                if per_step is not None and per_step.armed is step:
                    per_step.settle()
                isolate(_hook_error(plugin, hook, exc))
                res, outcome = None, f"raised {type(exc).__name__} (isolated)"
            except trio.Cancelled as exc:
                if (
                    isolate is None
                    or per_step is None
                    or kind in _WRAPPERS
                    or not per_step.caught(exc)
                ):
                    raise
                isolate(_timeout_error(plugin, hook, per_step.seconds))
                res, outcome = None, "timeout (isolated)"
            if res is not None and returns is not None and not isinstance(res, returns):
                wrong = _wrong_type(plugin, hook, res, returns)
                if isolate is None:
                    raise wrong
                isolate(wrong)
                res, outcome = None, f"returned {type(res).__name__} (isolated)"
            if on_call is not None:
                if outcome is None:
                    outcome = "none" if res is None else "value"
                on_call(hook, plugin, time.perf_counter() - started, outcome)
            if res is not None:
                results.append(res)
                if firstresult:
                    break
    except BaseException as exc:
        exception = exc
        if current is not None:
            owner = current[3]
            if deadline is not None and deadline.blamed is None:
                if isinstance(exc, trio.Cancelled):
                    deadline.blamed = owner
            if on_call is not None:
                on_call(hook, owner, time.perf_counter() - started, _describe(exc))

    result: object = (results[0] if results else None) if firstresult else results
    for step, gen, setup_seconds in reversed(teardowns):
        plugin = step[3]
        before = exception
        if on_call is not None:
            started = time.perf_counter()
        if step[2] is ASYNC_WRAPPER:
            result, exception = await _async_teardown(
                gen, result, exception, per_step, plugin, hook
            )
        else:
            result, exception, yielded_again = _sync_teardown(gen, result, exception)
            if yielded_again:
                # As in pluggy, this error skips the remaining teardowns.
                raise _hook_error(plugin, hook, _compat.wrapfail(gen, "has second yield"))
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
        raised = exception is not None and exception is not before
        if raised:
            owner = plugin
            # A wrapper awaiting in its teardown after the deadline raises a fresh
            # Cancelled; the blame stays with whoever was running when the first came.
            if deadline is not None and deadline.blamed is None:
                if isinstance(exception, trio.Cancelled):
                    deadline.blamed = plugin
        if on_call is not None:
            elapsed = setup_seconds + time.perf_counter() - started
            on_call(
                hook, plugin, elapsed, "wrapper " + _describe(exception) if raised else "wrapper"
            )

    if exception is not None:
        if owner is not None and isinstance(exception, Exception):
            raise _hook_error(owner, hook, exception)
        raise exception
    return result


def _describe(exc: BaseException | None) -> str:
    return "ok" if exc is None else f"raised {type(exc).__name__}"


class AsyncHookCaller:
    """Awaitable caller of one hook: ``await pm.ahook.NAME(**kwargs)``.

    Same semantics as pluggy's ``pm.hook.NAME(**kwargs)`` (see the module docstring), plus
    per-call ``timeout``, ``isolate`` and ``returns`` through :meth:`call`.
    """

    __slots__ = ("_hook", "_plan", "_pm", "name")

    def __init__(self, pm: HookManager, hook: HookCaller) -> None:
        self.name: str = hook.name
        self._pm = pm
        self._hook = hook
        self._plan: _Plan | None = None

    def __repr__(self) -> str:
        return f"<AsyncHookCaller {self.name!r}>"

    def __call__(self, **kwargs: object) -> Coroutine[Any, Any, Any]:
        """Call the hook with keyword arguments; await the returned coroutine."""
        return self.call(kwargs)

    def call(
        self,
        kwargs: Mapping[str, object],
        *,
        timeout: float | None = None,
        isolate: IsolateCallback | None = None,
        returns: ResultTypes | None = None,
    ) -> Coroutine[Any, Any, Any]:
        """Call the hook with ``kwargs``; await the returned coroutine.

        ``timeout``: seconds for the whole call (per implementation with ``isolate``);
        ``None`` uses the manager's ``default_timeout``; ``math.inf`` means no deadline.
        ``isolate``: report failing non-wrapper implementations to this callback instead
        of raising, and count them as having returned ``None``.
        ``returns``: the type (or types) every non-``None`` value must have; another is
        an error of the implementation that returned it.
        """
        # Plain code handing back a coroutine: one frame fewer on every call. The plan is
        # taken now, as pluggy copies the implementation list when the call is made.
        plan = self._plan
        if plan is None:
            plan = self._plan = _Plan(self._hook, self._pm)
        if timeout is None:
            timeout = plan.default_timeout
        # A plan of plain functions has nothing a deadline could interrupt: no scope.
        if timeout is None or not plan.awaits or math.isinf(timeout):
            return _multicall(plan, kwargs, isolate, returns, None, 2)
        return _with_deadline(plan, kwargs, timeout, isolate, returns)

    def get_hookimpls(self) -> list[HookImpl]:
        """The implementations in pluggy's list order (call order is the reverse)."""
        return self._hook.get_hookimpls()

    def _invalidate(self) -> None:
        self._plan = None


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


class HookManager(_compat.PluginManager):
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
        return [(impl.plugin_name, impl) for impl in _compat.call_order(hook)]

    def _check_impl(self, hook: HookCaller, hookimpl: HookImpl) -> HookImpl:
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
            # Shown to pluggy's checks as a plain function: they accept only generators.
            return _compat.with_opts(hookimpl, wrapper=False)
        return hookimpl


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
