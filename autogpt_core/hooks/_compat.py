"""Every use of pluggy's internals by the awaitable caller, in one place.

The caller reads what pluggy knows about a hook (its specification, its implementations in
call order) and drives old-style wrappers and validation the way pluggy does. Where pluggy
has no public API for that, the function here does it, with a comment naming what it relies
on. Checked against pluggy 1.7 (``setup.cfg`` allows ``>=1.7,<2``); after an upgrade, read
these comments against pluggy's source and run the parity property test
(``tests/test_hookcall.py``), which compares every call with pluggy's own.

Used only through this module: ``HookCaller.spec`` and its ``HookSpec`` (not exported),
``HookImpl``'s constructor (``:meta private:``), ``PluginManager._verify_hook``,
``pluggy._callers.run_old_style_hookwrapper``, and the behaviour of ``_multicall`` that the
caller reproduces (call order, argument passing, warning and error texts).
"""

from __future__ import annotations

import warnings
from collections.abc import Generator, Mapping, Sequence
from typing import Any, NamedTuple

import pluggy
from pluggy import HookCaller, HookImpl

# Relies on: pluggy's own runner of old-style ``hookwrapper=True`` generators as new-style
# teardowns (it builds the ``pluggy.Result``, handles ``force_result``/``force_exception``
# and warns ``PluggyTeardownRaisedWarning``). Private, in ``pluggy._callers`` since 1.0
# (re-exported there from ``pluggy._execution`` in 1.7).
from pluggy._callers import run_old_style_hookwrapper


class SpecInfo(NamedTuple):
    """What a call needs from a hook's specification."""

    argnames: tuple[str, ...]
    kwargnames: tuple[str, ...]
    kwargdefaults: dict[str, object]
    firstresult: bool
    historic: bool


def spec_info(hook: HookCaller) -> SpecInfo | None:
    """The specification of ``hook``, or ``None`` for a hook that has none."""
    # Relies on: ``HookCaller.spec`` is a ``HookSpec`` (a class pluggy does not export) or
    # ``None``; its ``argnames``/``kwargnames`` come from ``varnames`` like an impl's, and
    # ``kwargdefaults`` maps each kwargname to its default (what ``_apply_defaults`` merges
    # under the call's arguments); ``opts`` is the ``HookspecOpts`` given to ``@hookspec``.
    spec = hook.spec
    if spec is None:
        return None
    return SpecInfo(
        tuple(spec.argnames),
        tuple(spec.kwargnames),
        dict(spec.kwargdefaults),
        bool(spec.opts.get("firstresult", False)),
        hook.is_historic(),  # public
    )


def call_order(hook: HookCaller) -> list[HookImpl]:
    """The implementations of ``hook`` in the order pluggy calls them."""
    # Relies on: ``get_hookimpls()`` (public) lists non-wrappers before wrappers, each group
    # trylast < normal < tryfirst and in registration order within; ``_multicall`` walks
    # that list *reversed*, which is the documented call order (wrappers outermost, the
    # plugin registered last first).
    return list(reversed(hook.get_hookimpls()))


def impl_arguments(impl: HookImpl) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(argnames, kwargnames)``: what ``impl`` receives positionally, and by keyword."""
    # Relies on: ``_multicall`` passes ``argnames`` (parameters without defaults, ``self``
    # stripped) positionally, raising ``HookCallError`` for one the call lacks, and each of
    # ``kwargnames`` (parameters with defaults) by keyword when the call has it. The
    # attributes are public and documented; how ``_multicall`` uses them is not.
    return tuple(impl.argnames), tuple(impl.kwargnames)


def missing_argument_error(name: str) -> pluggy.HookCallError:
    """``_multicall``'s error for an argument an implementation needs and the call lacks."""
    # Relies on: the message of ``_multicall`` (private), so that the caller's mistake
    # reads the same whichever way the hook was called.
    return pluggy.HookCallError(f"hook call must provide argument {name!r}")


def warn_missing_arguments(
    spec_argnames: Sequence[str], kwargs: Mapping[str, object], stacklevel: int
) -> None:
    """pluggy's warning for a call that leaves out arguments its hookspec declares."""
    # Relies on: ``HookCaller._verify_all_args_are_provided`` (private): a ``UserWarning``
    # with this text, the names in spec order. ``stacklevel`` counts from this function.
    notincall = ", ".join(repr(name) for name in spec_argnames if name not in kwargs)
    if notincall:
        warnings.warn(
            f"Argument(s) {notincall} which are declared in the hookspec "
            "cannot be found in this hook call",
            stacklevel=stacklevel + 1,
        )


def wrapfail(gen: Any, message: str) -> RuntimeError:
    """``_multicall``'s error for a wrapper that did not yield, or yielded too often."""
    # Relies on: the text of ``pluggy._callers._raise_wrapfail`` (private); an async
    # generator's code object is ``ag_code`` where a generator's is ``gi_code``.
    code = getattr(gen, "gi_code", None) or gen.ag_code
    return RuntimeError(
        f"wrap_controller at {code.co_name!r} {code.co_filename}:{code.co_firstlineno} {message}"
    )


def old_style_wrapper(
    impl: HookImpl, hook_name: str, args: Sequence[object], kwargs: Mapping[str, object] | None
) -> Generator[None, object, object]:
    """An old-style ``hookwrapper=True`` implementation, set up as pluggy runs it: a
    generator to ``send`` the result to (or ``throw`` the exception into) at teardown."""
    return run_old_style_hookwrapper(impl, hook_name, args, kwargs)


def with_opts(impl: HookImpl, **opts: Any) -> HookImpl:
    """A copy of ``impl`` with some of its ``@hookimpl`` options replaced."""
    # Relies on: ``HookImpl(plugin, plugin_name, function, opts)``, a constructor pluggy
    # marks ``:meta private:``; the copy is only shown to pluggy's validation.
    return HookImpl(impl.plugin, impl.plugin_name, impl.function, {**impl.opts, **opts})  # type: ignore[typeddict-item]


class PluginManager(pluggy.PluginManager):
    """``pluggy.PluginManager`` with its validation of each implementation opened up:
    :meth:`_check_impl` runs first, and may hand pluggy's checks another view of the impl."""

    def _verify_hook(self, hook: HookCaller, hookimpl: HookImpl) -> None:
        # Relies on: ``register()`` and ``add_hookspecs()`` call the private
        # ``_verify_hook(hook, impl)`` for each implementation of a hook that has a spec,
        # before adding it; pluggy's own checks (arguments, wrappers, historic) live there
        # and raise ``PluginValidationError``.
        super()._verify_hook(hook, self._check_impl(hook, hookimpl))

    def _check_impl(self, hook: HookCaller, hookimpl: HookImpl) -> HookImpl:
        """Validate ``hookimpl`` for ``hook``; return what pluggy's checks should see."""
        return hookimpl
