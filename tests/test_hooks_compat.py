"""The pluggy internals the hook caller relies on still behave as ``hooks/_compat.py`` says."""

from __future__ import annotations

import re
import warnings
from typing import Any

import pluggy
import pytest
from pluggy import HookCaller, HookCallError, HookImpl, PluginValidationError

import hookspecs
from autogpt_core.hooks import _compat
from hookspecs import hookimpl, hookspec


class Spec:
    @hookspec
    def collect(self, a: object, b: object, c: object = 10) -> list[object]:
        """All results."""

    @hookspec(firstresult=True)
    def first(self, a: object) -> object:
        """The first non-None result."""

    @hookspec(historic=True)
    def replayed(self, a: object) -> None:
        """A historic hook."""


def plain_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(Spec)
    return pm


def test_spec_info_reads_the_hookspec() -> None:
    """Argument names, defaults, firstresult and historic come from the spec; none without."""
    pm = plain_manager()
    assert _compat.spec_info(pm.hook.collect) == _compat.SpecInfo(
        ("a", "b"), ("c",), {"c": 10}, False, False
    )
    assert _compat.spec_info(pm.hook.first) == _compat.SpecInfo(("a",), (), {}, True, False)
    assert _compat.spec_info(pm.hook.replayed).historic
    pm.register(type("P", (), {"unspecced": staticmethod(hookimpl(lambda: None))})(), name="p")
    assert _compat.spec_info(pm.hook.unspecced) is None


def test_call_order_is_the_order_pluggy_calls_in() -> None:
    """Wrappers, tryfirst, trylast and registration order: the same order as pluggy's call."""
    pm = plain_manager()
    called: list[str] = []

    def impl(name: str, **opts: Any) -> Any:
        if opts.get("wrapper"):

            def wrapper(a: object) -> Any:
                called.append(name)
                return (yield)

            return hookimpl(wrapper, **opts)

        def function(a: object) -> None:
            called.append(name)

        return hookimpl(function, **opts)

    plugins = [
        ("late", {"trylast": True}),
        ("one", {}),
        ("early", {"tryfirst": True}),
        ("wrap", {"wrapper": True}),
        ("two", {}),
        ("wrap_first", {"wrapper": True, "tryfirst": True}),
    ]
    for name, opts in plugins:
        pm.register(type(name, (), {"collect": staticmethod(impl(name, **opts))})(), name=name)
    pm.hook.collect(a=1, b=2)
    assert [impl.plugin_name for impl in _compat.call_order(pm.hook.collect)] == called


def test_impl_arguments_split_positional_and_opt_in() -> None:
    """Positional parameters without defaults, then those with defaults; ``self`` dropped."""

    class Plugin:
        @hookimpl
        def collect(self, a: object, c: object = 5, zz: object = 7) -> None: ...

    pm = plain_manager()
    pm.register(Plugin(), name="p")
    [impl] = pm.hook.collect.get_hookimpls()
    assert _compat.impl_arguments(impl) == (("a",), ("c", "zz"))


def test_missing_argument_error_reads_as_pluggys() -> None:
    """The HookCallError for an argument the call lacks has pluggy's own message."""
    pm = plain_manager()
    pm.register(type("P", (), {"collect": staticmethod(hookimpl(lambda b: b))})(), name="p")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(HookCallError) as info:
            pm.hook.collect(a=1)
    assert str(info.value) == str(_compat.missing_argument_error("b"))


def test_missing_arguments_warning_reads_as_pluggys() -> None:
    """Leaving out spec arguments: the same UserWarning text as pluggy's, at the caller."""
    pm = plain_manager()
    declared = r"Argument\(s\) 'a', 'b' which are declared in the hookspec"
    with pytest.warns(UserWarning, match=declared) as theirs:
        pm.hook.collect(c=3)
    with pytest.warns(UserWarning, match=declared) as ours:
        _compat.warn_missing_arguments(("a", "b"), {"c": 3}, stacklevel=1)
    assert [str(w.message) for w in ours] == [str(w.message) for w in theirs]
    assert ours[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _compat.warn_missing_arguments(("a", "b"), {"a": 1, "b": 2}, stacklevel=1)


def test_wrapfail_reads_as_pluggys() -> None:
    """A wrapper that does not yield: the same RuntimeError text as pluggy's."""

    def mute(a: object) -> Any:
        if False:
            yield

    pm = plain_manager()
    pm.register(type("P", (), {"first": staticmethod(hookimpl(mute, wrapper=True))})(), name="p")
    with pytest.raises(RuntimeError) as info:
        pm.hook.first(a=1)
    assert str(info.value) == str(_compat.wrapfail(mute(1), "did not yield"))
    assert re.search(r"wrap_controller at 'mute' .*:\d+ did not yield", str(info.value))


def test_old_style_wrapper_is_driven_as_pluggy_drives_it() -> None:
    """Set up by ``old_style_wrapper``, an old-style hookwrapper sees a Result at teardown
    and may force another."""

    def old(a: object) -> Any:
        outcome = yield
        outcome.force_result(("forced", outcome.get_result(), a))

    pm = plain_manager()
    pm.register(type("P", (), {"first": staticmethod(hookimpl(old, hookwrapper=True))})(), name="p")
    [impl] = pm.hook.first.get_hookimpls()
    gen = _compat.old_style_wrapper(impl, "first", ["A"], None)
    next(gen)
    with pytest.raises(StopIteration) as info:
        gen.send("inner")
    assert info.value.value == ("forced", "inner", "A")


def test_with_opts_copies_an_impl() -> None:
    """The copy has the same plugin and function, and the options replaced."""
    pm = plain_manager()
    pm.register(type("P", (), {"first": staticmethod(hookimpl(lambda a: a))})(), name="p")
    [impl] = pm.hook.first.get_hookimpls()
    copy = _compat.with_opts(impl, tryfirst=True)
    assert isinstance(copy, HookImpl)
    assert (copy.plugin, copy.plugin_name, copy.function) == (
        impl.plugin,
        impl.plugin_name,
        impl.function,
    )
    assert copy.tryfirst
    assert not impl.tryfirst


def test_check_impl_runs_before_pluggys_validation() -> None:
    """``_check_impl`` sees each implementation at registration, for specs added before or
    after, and what it returns is what pluggy's own checks see."""
    seen: list[tuple[str, str]] = []

    class Manager(_compat.PluginManager):
        def _check_impl(self, hook: HookCaller, hookimpl: HookImpl) -> HookImpl:
            seen.append((hook.name, hookimpl.plugin_name))
            if hookimpl.plugin_name == "refused":
                raise PluginValidationError(hookimpl.plugin, "refused")
            # pluggy would refuse a plain function as a wrapper; it is shown the copy.
            return _compat.with_opts(hookimpl, wrapper=False)

    pm = Manager(hookspecs.PROJECT_NAME)
    pm.register(type("P", (), {"first": staticmethod(hookimpl(lambda a: a))})(), name="early")
    pm.add_hookspecs(Spec)
    odd = hookimpl(lambda a: a, wrapper=True)
    pm.register(type("P", (), {"first": staticmethod(odd)})(), name="odd")
    with pytest.raises(PluginValidationError, match="refused"):
        pm.register(type("P", (), {"first": staticmethod(hookimpl(lambda a: a))})(), name="refused")
    assert seen == [("first", "early"), ("first", "odd"), ("first", "refused")]
