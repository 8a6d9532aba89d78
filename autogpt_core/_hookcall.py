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
cannot be interrupted: put blocking work in ``blocking=True`` implementations.

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
``default_timeout`` drop the plans. When a hook has no wrappers and nothing is traced or
timed, the plan also compiles a straight-line coroutine that unpacks each argument once and
calls the implementations one after another; a call whose argument names differ from the
spec's falls back to the general path (which warns and raises as pluggy does).
"""

from __future__ import annotations

import functools
import inspect
import linecache
import math
import time
import types
import warnings
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, Final

import pluggy
import trio
from pluggy import HookCaller, HookCallError, HookImpl, PluginValidationError
from pluggy._callers import run_old_style_hookwrapper

import hookspecs
from hookspecs import BLOCKING_ATTR, PROJECT_NAME

from ._errors import HookError, HookTimeout

HookTracer = Callable[[str, str, float, str], object]
"""``on_call(hook_name, plugin_name, duration_seconds, outcome)``; outcome is e.g. ``"value"``,
``"none"``, ``"raised ValueError"``, ``"wrapper"``, ``"timeout"``."""

IsolateCallback = Callable[[HookError], object]
"""Receives the ``HookError`` (or ``HookTimeout``) of an isolated implementation."""

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


def _compile_fast(plan: _Plan, fallback: Callable[..., Coroutine[Any, Any, Any]]) -> _FastCall:
    """Generate the straight-line coroutine for a hook without wrappers.

    Every argument is looked up once, every implementation is called in plan order with
    its own arguments, and ``i`` tracks which one is running so an error can name it.
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
    }
    local: dict[str, str] = {}

    def value(argname: str) -> str:
        if argname not in local:
            local[argname] = f"v{len(local)}"
        return local[argname]

    calls: list[str] = []
    for index, (function, argnames, kwargnames, kind, _plugin, _impl) in enumerate(plan.steps):
        namespace[f"F{index}"] = function
        positional = [value(name) for name in argnames]
        keywords = [f"{name}={value(name)}" for name in kwargnames if name in plan.keys]
        args = ", ".join(positional + keywords)
        calls.append(f"        i = {index}")
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
            calls.append("        if ISAWAITABLE(r):")
            calls.append("            r = await r")
        calls.append("        if r is not None:")
        calls.append(
            "            return r" if plan.firstresult else "            results.append(r)"
        )

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


async def _invoke(function: Callable[..., Any], kind: str, args: list[object], kw: Any) -> Any:
    """Call one non-wrapper implementation according to its kind."""
    if kind == ASYNC:
        return await function(*args, **kw)
    if kind == BLOCKING:
        target = functools.partial(function, *args, **kw)
        return await trio.to_thread.run_sync(target, abandon_on_cancel=True)
    result = function(*args, **kw)
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
) -> tuple[Any, str | None]:
    """Run one implementation so that its failure is reported, not raised."""
    function, _argnames, _kwargnames, kind, plugin, _impl = step
    error: HookError
    try:
        # A plain sync implementation cannot be interrupted, so a deadline (a cancel scope
        # per call, on the hot path of every cycle) would buy nothing for it.
        if kind == SYNC:
            return function(*args, **kw), None
        if seconds is None:
            return await _invoke(function, kind, args, kw), None
        with trio.move_on_after(seconds):
            return await _invoke(function, kind, args, kw), None
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
                    res, outcome = await _isolated(step, args, kw, hook, isolate, step_seconds)
                elif kind == SYNC:
                    res = function(*args, **kw)
                else:
                    res = await _invoke(function, kind, args, kw)
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
    ) -> Any:
        """Call the hook with ``kwargs``.

        ``timeout``: seconds for the whole call (per implementation with ``isolate``);
        ``None`` uses the manager's ``default_timeout``; ``math.inf`` means no deadline.
        ``isolate``: report failing non-wrapper implementations to this callback instead
        of raising, and count them as having returned ``None``.
        """
        return await self._call(kwargs, timeout, isolate, 4)

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
                self._fast = _compile_fast(plan, self._call)
        return plan

    async def _call(
        self,
        kwargs: Mapping[str, object],
        seconds: float | None,
        isolate: IsolateCallback | None,
        stacklevel: int,
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
        if isolate is not None or seconds is None:
            return await _run(plan, kwargs, isolate, seconds, None, on_call)
        culprit = _Culprit()
        with trio.move_on_after(seconds):
            return await _run(plan, kwargs, None, None, culprit, on_call)
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
