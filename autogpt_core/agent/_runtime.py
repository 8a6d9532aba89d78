"""The runtime: loaded plugins, the session store and any number of concurrent sessions.

::

    async with Runtime(load_config()) as rt:
        outcome = await rt.run("Write a haiku to haiku.txt", RunOptions(llm="replay:demo.json"))

The CLI runs one session; the HTTP server runs many in one runtime. Model requests go
through the ``llm_request`` hook; the runtime's own ``trylast`` implementation of it sends
the request to the session's provider, so plugins can wrap, cache or log every request.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import attrs
import trio

from hookspecs import (
    Budget,
    LLMProvider,
    LLMRequest,
    LLMResponse,
    ProviderOptions,
    RuntimeView,
    SessionOutcome,
    SessionView,
    hookimpl,
)

from .._config import Config
from .._errors import ConfigError, HookError
from .._version import __version__
from ..hooks._hookcall import HookManager
from ..plugins._loader import PluginSet, load
from ..store._lease import LEASE_EXPIRY, LEASE_PERIOD, Holder, hold_lease
from ..store._storage import AsyncStore
from ._redact import MaskedProvider, Redactor
from ._session import RunOptions, Session, history_from_cycles, new_session_id

CORE_PLUGIN_NAME = "autogpt-core"
# RunOptions stored with a session (never the API key), so that --resume runs it alike.
_STORED_OPTIONS = (
    "llm",
    "model",
    "base_url",
    "max_cycles",
    "max_tokens",
    "max_cost",
    "continuous",
    "strict_replay",
)


# The type each stored option must have (None allowed for all but the booleans).
_OPTION_TYPES: dict[str, type | tuple[type, ...]] = {
    "llm": str,
    "model": str,
    "base_url": str,
    "max_cycles": int,
    "max_tokens": int,
    "max_cost": (int, float),
    "continuous": bool,
    "strict_replay": bool,
}


def _stored_options(session_id: str, config: Any, path: Path) -> dict[str, Any]:
    """The options stored with a session, checked: the store is a file anyone can edit."""
    if not isinstance(config, dict):
        raise ConfigError(
            f"{path}: the stored options of session {session_id} are not a mapping; "
            "start a new session, or delete this one with 'autogpt sessions delete'"
        )
    for name in _STORED_OPTIONS:
        if name not in config:
            continue
        value, want = config[name], _OPTION_TYPES[name]
        nullable = want is not bool
        wrong_bool = isinstance(value, bool) and want is not bool
        if (value is None and nullable) or (isinstance(value, want) and not wrong_bool):
            continue
        raise ConfigError(
            f"{path}: session {session_id} has a stored option {name}={value!r}, which is "
            "not valid (the store was damaged or edited); start a new session"
        )
    return dict(config)


class _ProviderBridge:
    """The core's own ``llm_request`` implementation: the session's provider answers."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    @hookimpl(trylast=True)
    async def llm_request(self, session: SessionView, request: LLMRequest) -> LLMResponse:
        return await self.runtime.provider_for(session.id).complete(request)


class Runtime:
    """Loads plugins once and runs sessions; use it as an async context manager."""

    def __init__(
        self,
        config: Config,
        *,
        plugins: PluginSet | None = None,
        store_path: Path | None = None,
        pm_factory: Callable[[], HookManager] = HookManager,
        lease_period: float = LEASE_PERIOD,
        lease_expiry: float = LEASE_EXPIRY,
    ) -> None:
        self.config = config
        # A session runs in one runtime at a time: its lease is renewed every lease_period
        # seconds and lapses lease_expiry seconds after the last renewal (see _lease.py).
        self.holder = Holder.current()
        self.lease_period = lease_period
        self.lease_expiry = lease_expiry
        self._plugins = plugins
        self._pm_factory = pm_factory
        self.store_path = store_path or config.data_dir / "sessions.sqlite3"
        self._providers: dict[str, LLMProvider] = {}
        # Secret-looking environment variables from the start; declared secrets at load.
        self.redactor = Redactor.from_environment()
        self.hook_timeout = config.limits.hook_timeout
        self._store: AsyncStore | None = None

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def plugins(self) -> PluginSet:
        if self._plugins is None:
            raise RuntimeError("use 'async with Runtime(config) as rt' before running sessions")
        return self._plugins

    @property
    def pm(self) -> HookManager:
        return self.plugins.pm

    @property
    def store(self) -> AsyncStore:
        if self._store is None:
            raise RuntimeError("use 'async with Runtime(config) as rt' before running sessions")
        return self._store

    def redact(self, value: Any) -> Any:
        return self.redactor(value)

    def warnings(self) -> list[str]:
        """Problems worth telling the user before a run: broken enabled plugins, config
        entries naming plugins that are not installed."""
        found = [
            f"plugin {problem} ('autogpt plugins check' lists every problem)"
            for problem in self.plugins.problems()
        ]
        installed = set(self.plugins.records)
        for plugin_id in sorted((self.config.enable | self.config.disable) - installed):
            found.append(f"{self.config.path} names plugin {plugin_id!r}, which is not installed")
        return found

    def view(self) -> RuntimeView:
        return RuntimeView(
            core_version=__version__,
            data_dir=self.config.data_dir,
            plugins=tuple(self.plugins.loaded),
        )

    async def __aenter__(self) -> Runtime:
        if self._plugins is None:
            self._plugins = load(self.config, pm_factory=self._pm_factory)
        self.redactor.add(self.plugins.secrets)
        self.pm.register(_ProviderBridge(self), name=CORE_PLUGIN_NAME)
        try:
            self.config.data_dir.mkdir(parents=True, exist_ok=True)
            self._store = await AsyncStore.open(self.store_path)
            await self.pm.ahook.autogpt_startup.call(
                {"runtime": self.view()}, timeout=self.hook_timeout, isolate=self._warn
            )
        except BaseException:
            # __aexit__ does not run when __aenter__ fails: undo what was done here.
            with trio.CancelScope(shield=True):
                if self._store is not None:
                    await self._store.aclose()
                    self._store = None
            self.pm.unregister(name=CORE_PLUGIN_NAME)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with trio.CancelScope(shield=True):
            try:
                with trio.move_on_after(self.hook_timeout or 30):
                    await self.pm.ahook.autogpt_shutdown.call(
                        {"runtime": self.view()}, timeout=self.hook_timeout, isolate=self._warn
                    )
            finally:
                # Whatever shutdown did (a Ctrl-C into a blocked plugin, say), the store is
                # closed: its group commit holds the last cycle's rows.
                if self._store is not None:
                    await self._store.aclose()
                    self._store = None
                self.pm.unregister(name=CORE_PLUGIN_NAME)

    def _warn(self, error: HookError) -> None:
        print(f"autogpt: warning: {self.redact(str(error))}", file=sys.stderr)

    # -- providers ----------------------------------------------------------------------

    def provider_for(self, session_id: str) -> LLMProvider:
        return self._providers[session_id]

    async def make_provider(self, options: RunOptions, *, resume_from: int = 0) -> LLMProvider:
        """Build the provider ``options.llm`` names (``openai``, ``replay:FILE``, ...)."""
        spec = options.llm or self.config.llm_provider or "openai"
        name, _, argument = spec.partition(":")
        registered = self.plugins.providers
        if name not in registered or name == "record":
            # "record" wraps another provider (--record FILE); it is not one on its own.
            available = ", ".join(sorted(n for n in registered if n != "record")) or "none"
            raise ConfigError(
                f"no LLM provider {name!r} is available (available: {available}); "
                "enable the plugin that provides it with 'autogpt plugins enable ID'"
            )
        if options.record is not None and "record" not in registered:
            raise ConfigError(
                "--record needs the 'llm_replay' plugin: autogpt plugins enable llm_replay"
            )
        extra: dict[str, Any] = {}
        if argument:
            extra["path"] = argument
        extra["strict"] = options.strict_replay
        if resume_from:
            extra["skip"] = resume_from
        provider = registered[name][1](
            ProviderOptions(
                model=options.model or self.config.llm_model,
                base_url=options.base_url or self.config.llm_base_url,
                api_key=options.api_key,
                extra=extra,
            )
        )
        if options.api_key:
            self.redactor.add([options.api_key])
        # Inside the recorder: a recording keeps the model's answers masked too.
        provider = MaskedProvider(provider, self.redactor)
        if options.record is not None:
            try:
                provider = registered["record"][1](
                    ProviderOptions(extra={"path": str(options.record), "inner": provider})
                )
            except BaseException:
                with trio.CancelScope(shield=True):
                    await provider.aclose()
                raise
        return provider

    # -- sessions -----------------------------------------------------------------------

    def _budget(self, options: RunOptions, spent: Any = None) -> Budget:
        limits = self.config.limits
        spent = spent or {}
        return Budget(
            max_cycles=options.max_cycles if options.max_cycles is not None else limits.max_cycles,
            max_tokens=options.max_tokens if options.max_tokens is not None else limits.max_tokens,
            max_cost_usd=options.max_cost if options.max_cost is not None else limits.max_cost,
            cycles=int(spent.get("cycles", 0)),
            tokens=int(spent.get("tokens", 0)),
            cost_usd=float(spent.get("cost_usd", 0.0)),
        )

    async def run(self, goal: str, options: RunOptions | None = None) -> SessionOutcome:
        """Run a new session for ``goal`` to its end and return how it ended."""
        options = options or RunOptions()
        # A secret in the goal would reach the store and the model: it is masked too.
        goal = self.redactor.text(goal)
        session_id = options.session_id or new_session_id()
        workspace = (
            options.workspace or self.config.data_dir / "workspaces" / session_id
        ).resolve()
        stored = {name: getattr(options, name) for name in _STORED_OPTIONS}
        async with (
            # The lease first: a second runtime is refused before anything happens.
            hold_lease(
                self.store,
                session_id,
                self.holder,
                period=self.lease_period,
                expiry=self.lease_expiry,
            ),
            self._provider(options) as provider,
        ):
            # Only now: a run that cannot start (no key, no recording) leaves nothing behind.
            workspace.mkdir(parents=True, exist_ok=True)
            await self.store.create_session(goal, workspace, session_id=session_id, config=stored)
            return await self._drive(
                Session(
                    runtime=self,
                    id=session_id,
                    goal=goal,
                    workspace=workspace,
                    options=options,
                    provider=provider,
                    budget=self._budget(options),
                )
            )

    async def resume(self, session_id: str, options: RunOptions | None = None) -> SessionOutcome:
        """Continue a stored session from its last completed cycle.

        Options given now win over the ones stored with the session; the workspace stays.
        """
        # The lease before reading the session: what it holds (status, cycles) may change
        # until then, and a second runtime is refused before anything happens.
        async with hold_lease(
            self.store, session_id, self.holder, period=self.lease_period, expiry=self.lease_expiry
        ):
            record = await self.store.get_session(session_id)
            if record.status == "finished":
                raise ConfigError(
                    f"session {session_id} already finished ({record.result or 'no result'}); "
                    "start a new one with 'autogpt run GOAL'"
                )
            given = options or RunOptions()
            if given.workspace is not None and given.workspace.resolve() != record.workspace:
                raise ConfigError(
                    f"session {session_id} works in {record.workspace}; a resumed session keeps "
                    "its workspace: drop --workspace"
                )
            saved = _stored_options(session_id, record.config, self.store_path)
            defaults = RunOptions()
            merged = attrs.evolve(
                given,
                workspace=record.workspace,
                session_id=session_id,
                **{
                    name: saved[name]
                    for name in _STORED_OPTIONS
                    if name in saved and getattr(given, name) == getattr(defaults, name)
                },
            )
            cycles = await self.store.load_cycles(session_id)
            done = cycles[-1].number if cycles else 0
            async with self._provider(merged, resume_from=done) as provider:
                await self.store.update_session_status(session_id, "running")
                return await self._drive(
                    Session(
                        runtime=self,
                        id=session_id,
                        goal=record.goal,
                        workspace=record.workspace,
                        options=merged,
                        provider=provider,
                        budget=attrs.evolve(self._budget(merged, record.budget), cycles=done),
                        history=history_from_cycles(cycles),
                        cycle=done,
                    )
                )

    @asynccontextmanager
    async def _provider(
        self, options: RunOptions, *, resume_from: int = 0
    ) -> AsyncIterator[LLMProvider]:
        """The session's provider, always closed at the end (even when cancelled)."""
        provider = await self.make_provider(options, resume_from=resume_from)
        try:
            yield provider
        finally:
            with trio.CancelScope(shield=True):
                await provider.aclose()

    async def _drive(self, session: Session) -> SessionOutcome:
        self._providers[session.id] = session.provider
        try:
            return await session.run()
        finally:
            self._providers.pop(session.id, None)
