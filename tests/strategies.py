"""Hypothesis strategies shared by the test suite.

Hook calling: ``scenarios()`` draws random plugin sets for the parity property test of the
awaitable hook caller (``tests/test_hookcall.py``) -- plain data that the test turns into
hook implementations, once async-capable and once as their plain-sync equivalents.
"""

from __future__ import annotations

import attrs
from hypothesis import strategies as st

# --- hook calling ------------------------------------------------------------------------

#: The hooks of the parity spec: ``collect(a, b, c=10)`` and firstresult ``first(a, b, c=10)``.
PARITY_HOOKS = ("collect", "first")

#: What a non-wrapper implementation does.
IMPL_OUTCOMES = ("none", "value", "raise")

#: What a wrapper does: pass the outcome on, replace the result, swallow an exception (with
#: a value or ``None``), re-raise it, raise a new one for it, raise after a result, or raise
#: before its first yield.
WRAPPER_MODES = (
    "pass",
    "replace",
    "swallow",
    "swallow_none",
    "reraise",
    "new",
    "raise_after",
    "setup_raise",
)


@attrs.frozen
class ImplPlan:
    """One hook implementation of one plugin, as data.

    ``flavor``: non-wrappers ``sync``/``async``/``blocking``; wrappers ``sync`` (generator),
    ``async`` (async generator) or ``old`` (old-style ``hookwrapper=True``).
    ``params``: its parameter list, e.g. ``("b", "a", "c=5", "zz=7")``.
    ``explicit_yield``: an async wrapper yields the value it keeps instead of finishing.
    ``checkpoint``: an async implementation awaits a checkpoint first.
    """

    wrapper: bool
    flavor: str
    position: str
    outcome: str
    params: tuple[str, ...]
    explicit_yield: bool
    checkpoint: bool


@attrs.frozen
class PluginPlan:
    """A plugin: at most one implementation per parity hook."""

    impls: tuple[tuple[str, ImplPlan], ...]


@attrs.frozen
class CallPlan:
    """One call: which hook, and which arguments it leaves out or adds."""

    hook: str
    omit_b: bool
    pass_c: bool
    extra: bool


@attrs.frozen
class Scenario:
    """Plugins, their registration order, calls, and a plugin unregistered before a re-run."""

    plugins: tuple[PluginPlan, ...]
    order: tuple[int, ...]
    calls: tuple[CallPlan, ...]
    unregister: int | None


@st.composite
def impl_params(draw: st.DrawFn) -> tuple[str, ...]:
    """A parameter list over the spec ``(a, b, c=10)``: a subset in any order, opt-ins too."""
    positional = draw(st.lists(st.sampled_from(("a", "b", "c")), unique=True, max_size=3))
    params = list(positional)
    if "c" not in positional and draw(st.booleans()):
        params.append("c=5")
    if draw(st.integers(0, 3)) == 0:
        params.append("zz=7")  # not in the spec: received only when the call passes it
    return tuple(params)


@st.composite
def impl_plans(draw: st.DrawFn) -> ImplPlan:
    """One implementation; blocking ones are rarer because each costs a thread hop."""
    wrapper = draw(st.integers(0, 2)) == 0
    if wrapper:
        flavor = draw(st.sampled_from(("sync", "async", "async", "old")))
        outcome = draw(st.sampled_from(WRAPPER_MODES))
    else:
        flavor = draw(st.sampled_from(("sync", "sync", "async", "async", "blocking")))
        outcome = draw(st.sampled_from(IMPL_OUTCOMES))
    return ImplPlan(
        wrapper=wrapper,
        flavor=flavor,
        position=draw(st.sampled_from(("normal", "normal", "tryfirst", "trylast"))),
        outcome=outcome,
        params=draw(impl_params()),
        explicit_yield=draw(st.booleans()),
        checkpoint=draw(st.booleans()),
    )


@st.composite
def plugin_plans(draw: st.DrawFn) -> PluginPlan:
    hooks = draw(st.lists(st.sampled_from(PARITY_HOOKS), min_size=1, max_size=2, unique=True))
    return PluginPlan(impls=tuple((hook, draw(impl_plans())) for hook in hooks))


call_plans = st.builds(
    CallPlan,
    hook=st.sampled_from(PARITY_HOOKS),
    omit_b=st.integers(0, 5).map(lambda n: n == 0),
    pass_c=st.booleans(),
    extra=st.booleans(),
)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    """1-8 plugins registered in a random order, 1-3 calls, maybe one unregistered."""
    plugins = draw(st.lists(plugin_plans(), min_size=1, max_size=8))
    order = draw(st.permutations(range(len(plugins))))
    calls = draw(st.lists(call_plans, min_size=1, max_size=3))
    unregister = draw(st.none() | st.integers(0, len(plugins) - 1))
    return Scenario(
        plugins=tuple(plugins), order=tuple(order), calls=tuple(calls), unregister=unregister
    )
