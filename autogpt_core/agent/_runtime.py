"""The runtime: loaded plugins, the session store and any number of concurrent sessions.

::

    async with Runtime(load_config()) as rt:
        outcome = await rt.run("Write a haiku to haiku.txt", RunOptions(llm="replay:demo.json"))

The CLI runs one session; the HTTP server runs many in one runtime. The runtime is where a
session's collaborators are made and wired; each receives what it uses, none the runtime:

- ``Emitter`` (``_emitter.py``): the redactor, ``on_event``, the store. Masks and writes
  everything the session says or keeps.
- ``HookCaller`` (``_caller.py``): ``pm.ahook``, the emitter, the hook and person deadlines.
- ``Dispatcher`` (``_dispatcher.py``): the hook caller, the emitter, the command registry,
  the plugins' records, the grants, the consent and question functions (``confirm``,
  ``user_input`` through the hook caller) and the store's lease check for the session.
- ``Session`` (``_session.py``): those three, the commands offered as tools, how long its
  provider may take, the limits.
- ``SessionModel`` (``_model.py``): the session's provider and its plugin, for the core's
  ``trylast`` ``llm_request`` implementation (``ProviderBridge``), so plugins can wrap,
  cache, record or log every request.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

import attrs
import trio

from hookspecs import JSON, Budget, Message, ProviderOptions, RuntimeView, SessionOutcome

from .._config import Config
from .._errors import ConfigError, HookError
from .._version import __version__
from ..hooks._hookcall import HookManager
from ..plugins._loader import PluginSet, load
from ..store._lease import LEASE_EXPIRY, LEASE_PERIOD, Holder, Leases
from ..store._records import PROVISIONAL, CycleRecord
from ..store._storage import AsyncStore
from ._caller import HookCaller
from ._calls import CallSession
from ._dispatcher import Consent, Dispatcher, Grants, Question
from ._emitter import Emitter
from ._model import CORE_PLUGIN_NAME, ProviderBridge, SessionModel, provider_seconds
from ._options import RunOptions, options_for_resume, options_to_store
from ._plugin_control import PluginControls
from ._redact import Redactor
from ._session import Session, history_from_cycles, new_session_id

#: Seconds ``autogpt_shutdown`` may take after a start cut short (``Runtime.__aenter__``).
CUT_START_SHUTDOWN = 5.0


@attrs.frozen
class Channel:
    """Who answers and paces a session that the terminal does not (the HTTP server's).

    ``consent`` answers confirmations and ``question`` the agent's questions, instead of
    the ``confirm`` and ``user_input`` hooks; ``gate`` is awaited before each cycle with
    its number. Each left ``None`` keeps the default.
    """

    consent: Consent | None = None
    question: Question | None = None
    gate: Callable[[int], Awaitable[None]] | None = None


class Runtime:
    """Loads plugins once and runs sessions; use it as an async context manager."""

    def __init__(
        self,
        config: Config,
        *,
        plugins: PluginSet | None = None,
        store: Path | str | None = None,
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
        # The session store: a SQLite file's path, or a PostgreSQL URL (``open_store``).
        self.store_location: Path | str = store or config.store_location
        # The model of each running session, for the core's llm_request implementation.
        self._models: dict[str, SessionModel] = {}
        # Secret-looking environment variables from the start; declared secrets at load.
        self.redactor = Redactor.from_environment()
        self.hook_timeout = config.limits.hook_timeout
        self._store: AsyncStore | None = None
        self._leases: Leases | None = None
        # Called with a session's id after each of its writes (see Emitter); never block.
        self.stored_listeners: list[Callable[[str], None]] = []
        # Plugins loaded anew while running (``reload``): the cycles running with each
        # plugin set, by its id(), and who waits for a set's last cycle to end.
        self._cycles: dict[int, int] = {}
        self._unused: dict[int, trio.Event] = {}
        self._reloading = trio.Lock()
        # Plugins to shut down at the end: unloaded by a reload from inside a cycle.
        self._deferred: list[object] = []
        self._controls = PluginControls(
            config=lambda: self.config, plugins=lambda: self.plugins, reload=self.reload
        )

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

    @property
    def leases(self) -> Leases:
        """The leases of the sessions this runtime runs, renewed together."""
        if self._leases is None:
            raise RuntimeError("use 'async with Runtime(config) as rt' before running sessions")
        return self._leases

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
        self.pm.register(ProviderBridge(self._models), name=CORE_PLUGIN_NAME)
        starting = False
        try:
            self.config.data_dir.mkdir(parents=True, exist_ok=True)
            self._store = await AsyncStore.open(self.store_location)
            self._leases = Leases(
                self._store, self.holder, period=self.lease_period, expiry=self.lease_expiry
            )
            starting = True
            await self.pm.ahook.autogpt_startup.call(
                {"runtime": self.view()}, timeout=self.hook_timeout, isolate=self._warn
            )
        except BaseException:
            # __aexit__ does not run when __aenter__ fails: undo what was done here.
            with trio.CancelScope(shield=True):
                try:
                    if starting:
                        await self._shutdown_cut_start()
                finally:
                    if self._store is not None:
                        await self._store.aclose()
                        self._store = None
                    self.pm.unregister(name=CORE_PLUGIN_NAME)
            raise
        return self

    async def _shutdown_cut_start(self) -> None:
        """``autogpt_shutdown`` after a start cut short (Ctrl-C, a signal to a starting
        server), so that plugins close what their ``autogpt_startup`` opened or began to.
        Whoever cut the start is stopping: this waits at most ``CUT_START_SHUTDOWN``
        seconds, and what goes wrong is a warning, never the error the stop ends with."""
        limit = min(CUT_START_SHUTDOWN, self.hook_timeout or CUT_START_SHUTDOWN)
        try:
            with trio.move_on_after(limit) as waited:
                await self.pm.ahook.autogpt_shutdown.call(
                    {"runtime": self.view()}, timeout=limit, isolate=self._warn
                )
            if waited.cancelled_caught:
                print(
                    f"autogpt: warning: plugins were still shutting down after {limit:g} s "
                    "(the start was cut short); stopped waiting",
                    file=sys.stderr,
                )
        except HookError as error:
            self._warn(error)
        except Exception as exc:  # noqa: BLE001 - the cut start's own error goes on
            print(
                f"autogpt: warning: shutting plugins down after a cut start failed: "
                f"{self.redactor.text(f'{type(exc).__name__}: {exc}')}",
                file=sys.stderr,
            )

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with trio.CancelScope(shield=True):
            try:
                deferred, self._deferred = self._deferred, []
                await self._lifecycle("autogpt_shutdown", deferred)
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

    async def reload(self, config: Config, *, nursery: trio.Nursery | None = None) -> PluginSet:
        """Load the plugins ``config`` enables while sessions run, and return the new set.

        Plugins loaded before with the same settings are kept as they are (not imported or
        configured again, ``load(reuse=...)``); new ones are configured and get
        ``autogpt_startup``. Each session takes up the new set at its next cycle: a cycle in
        flight ends with the plugins it started with, and the next one offers the new
        commands. A plugin no longer loaded gets ``autogpt_shutdown`` once no cycle uses
        the set it was in: waited for here, or in ``nursery`` when given (a server's, since
        a cycle may wait on a person). Raises what ``load`` raises, the runtime unchanged.
        """
        async with self._reloading:
            old = self.plugins
            new = await trio.to_thread.run_sync(
                functools.partial(load, config, pm_factory=self._pm_factory, reuse=old)
            )
            new.pm.register(ProviderBridge(self._models), name=CORE_PLUGIN_NAME)
            self.redactor.add(new.secrets)
            started = [new.records[pid].plugin for pid in new.loaded if pid in new.fresh]
            await self._lifecycle("autogpt_startup", started)
            self._plugins, self.config = new, config
            kept = {id(new.records[pid].plugin) for pid in new.loaded}
            gone = [
                old.records[pid].plugin
                for pid in old.loaded
                if id(old.records[pid].plugin) not in kept
            ]
        if gone:
            if nursery is not None:
                nursery.start_soon(self._retire, old, gone)
            elif self._cycles.get(id(old)):
                # Reloaded from a cycle (a command enabling a plugin): its own cycle uses
                # the old set until it returns, so they are shut down with the runtime.
                self._deferred.extend(gone)
            else:
                await self._retire(old, gone)
        return new

    async def _retire(self, old: PluginSet, plugins: list[object]) -> None:
        """``autogpt_shutdown`` for ``plugins`` of ``old`` once no cycle runs with it."""
        if self._cycles.get(id(old)):
            await self._unused.setdefault(id(old), trio.Event()).wait()
        await self._lifecycle("autogpt_shutdown", plugins)
        old.pm.unregister(name=CORE_PLUGIN_NAME)

    async def _lifecycle(self, hook: str, plugins: list[object]) -> None:
        """Call ``hook`` (``autogpt_startup``, ``autogpt_shutdown``) on ``plugins`` alone."""
        if not plugins:
            return
        only = self._pm_factory()
        for plugin in plugins:
            only.register(plugin)
        with trio.move_on_after(self.hook_timeout or 30):
            await getattr(only.ahook, hook).call(
                {"runtime": self.view()}, timeout=self.hook_timeout, isolate=self._warn
            )

    @contextmanager
    def _cycle_on(self, plugins: PluginSet) -> Iterator[None]:
        """Count a cycle running with ``plugins``; the last one out tells ``_retire``."""
        key = id(plugins)
        self._cycles[key] = self._cycles.get(key, 0) + 1
        try:
            yield
        finally:
            self._cycles[key] -= 1
            if not self._cycles[key]:
                del self._cycles[key]
                unused = self._unused.pop(key, None)
                if unused is not None:
                    unused.set()

    def _warn(self, error: HookError) -> None:
        print(f"autogpt: warning: {self.redactor.text(str(error))}", file=sys.stderr)

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

    async def create(self, goal: str, options: RunOptions | None = None) -> str:
        """Store a new session for ``goal`` without running it, and return its id; run it
        with ``resume``. Its workspace is made now, and it reads as interrupted until then.
        """
        options = options or RunOptions()
        session_id = options.session_id or new_session_id()
        goal = self.redactor.text(goal)
        workspace = self._workspace(options, session_id)
        workspace.mkdir(parents=True, exist_ok=True)
        await self.store.create_session(
            goal,
            workspace,
            session_id=session_id,
            config=options_to_store(options),
            status="interrupted",
        )
        return session_id

    def _workspace(self, options: RunOptions, session_id: str) -> Path:
        return (options.workspace or self.config.data_dir / "workspaces" / session_id).resolve()

    async def run(
        self, goal: str, options: RunOptions | None = None, *, channel: Channel | None = None
    ) -> SessionOutcome:
        """Run a new session for ``goal`` to its end and return how it ended."""
        options = options or RunOptions()
        session_id = options.session_id or new_session_id()
        emitter = self._emitter(session_id)
        # A secret in the goal would reach the store and the model: it is masked too.
        goal = emitter.text(goal)
        workspace = self._workspace(options, session_id)
        async with (
            # The lease first: a second runtime is refused before anything happens.
            self.leases.hold(session_id),
            self._model(options, emitter) as model,
        ):
            # Only now: a run that cannot start (no key, no recording) leaves nothing behind.
            workspace.mkdir(parents=True, exist_ok=True)
            await self.store.create_session(
                goal, workspace, session_id=session_id, config=options_to_store(options)
            )
            return await self._drive(
                emitter,
                model,
                options,
                goal=goal,
                workspace=workspace,
                budget=self._budget(options),
                channel=channel,
            )

    async def resume(
        self, session_id: str, options: RunOptions | None = None, *, channel: Channel | None = None
    ) -> SessionOutcome:
        """Continue a stored session from its last completed cycle.

        Options given now win over the ones stored with the session; the workspace stays.
        """
        # The lease before reading the session: what it holds (status, cycles) may change
        # until then, and a second runtime is refused before anything happens.
        async with self.leases.hold(session_id):
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
            merged = options_for_resume(
                given,
                record.config,
                session_id=session_id,
                workspace=record.workspace,
                store_path=self.store_location,
            )
            cycles = await self.store.load_cycles(session_id)
            if cycles and cycles[-1].provisional:
                # Its command was running when the session stopped: the cycle stays done,
                # its outcome unknown (as the model is told), and is not run again.
                cycles[-1] = await self._settle(cycles[-1])
            done = cycles[-1].number if cycles else 0
            emitter = self._emitter(session_id)
            async with self._model(merged, emitter, resume_after=done) as model:
                await self.store.update_session_status(session_id, "running")
                return await self._drive(
                    emitter,
                    model,
                    merged,
                    goal=record.goal,
                    workspace=record.workspace,
                    budget=attrs.evolve(self._budget(merged, record.budget), cycles=done),
                    history=history_from_cycles(cycles),
                    cycle=done,
                    channel=channel,
                )

    @asynccontextmanager
    async def calls(
        self,
        goal: str,
        options: RunOptions | None = None,
        *,
        who: str = "a client",
        channel: Channel | None = None,
    ) -> AsyncIterator[CallSession]:
        """A new session whose commands are called from outside (``autogpt mcp``): one
        cycle per ``call``, through the same dispatcher, consent and store as a model's.

        ``channel.consent`` answers its confirmations and ``channel.question`` its
        questions (by default the ``confirm`` and ``user_input`` hooks). Its cycles are
        limited by ``options.max_cycles`` only: nobody loops on their own here. At the end
        of the body the session is stored as finished (interrupted when cancelled).
        """
        options = options or RunOptions()
        session_id = options.session_id or new_session_id()
        emitter = self._emitter(session_id)
        goal = emitter.text(goal)
        workspace = self._workspace(options, session_id)
        async with self.leases.hold(session_id):
            workspace.mkdir(parents=True, exist_ok=True)
            await self.store.create_session(
                goal, workspace, session_id=session_id, config=options_to_store(options)
            )
            wired = self._wire(emitter, options, channel)
            session = CallSession(
                id=session_id,
                goal=goal,
                workspace=workspace,
                budget=Budget(max_cycles=options.max_cycles, max_tokens=None, max_cost_usd=None),
                emitter=emitter,
                hooks=wired.hooks,
                dispatcher=wired.dispatcher,
                cycle_scope=wired.cycle_scope,
                who=emitter.text(who)[:120],  # masked, then shortened
                owner=options.owner,
            )
            await session.start()
            try:
                yield session
            except BaseException:
                with trio.CancelScope(shield=True):
                    await session.finish(
                        SessionOutcome(
                            "interrupted", f"stopped while serving {session.who}", session.cycle
                        )
                    )
                raise
            await session.finish(
                SessionOutcome(
                    "finished",
                    f"{session.cycle} command{'' if session.cycle == 1 else 's'} called by "
                    f"{session.who}",
                    session.cycle,
                )
            )

    async def _settle(self, cycle: CycleRecord) -> CycleRecord:
        """A provisional cycle, recorded as completed with its outcome unknown."""
        assert isinstance(cycle.result, dict)
        result = {k: v for k, v in cycle.result.items() if k != PROVISIONAL}
        settled = attrs.evolve(cycle, result=result, completed_at=0.0)
        await self.store.record_cycle(settled)
        return settled

    def _emitter(self, session_id: str) -> Emitter:
        return Emitter(
            session_id=session_id,
            redactor=self.redactor,
            hooks=self.pm.ahook,
            hook_timeout=self.hook_timeout,
            store=self.store,
            store_path=self.store_location,
            stored=self._tell_stored if self.stored_listeners else None,
        )

    def _tell_stored(self, session_id: str) -> None:
        for listener in self.stored_listeners:
            listener(session_id)

    @asynccontextmanager
    async def _model(
        self, options: RunOptions, emitter: Emitter, *, resume_after: int = 0
    ) -> AsyncIterator[SessionModel]:
        """The provider ``options.llm`` names (``openai``, ``replay:FILE``, ...), made with
        its plugin's settings and always closed at the end (even when cancelled)."""
        spec = options.llm or self.config.llm_provider or "openai"
        name, _, argument = spec.partition(":")
        registered = self.plugins.providers
        if name not in registered:
            available = ", ".join(sorted(registered)) or "none"
            raise ConfigError(
                f"no LLM provider {name!r} is available (available: {available}); "
                "enable the plugin that provides it with 'autogpt plugins enable ID'"
            )
        plugin_id, factory = registered[name]
        record = self.plugins.records.get(plugin_id)
        extra: dict[str, JSON] = {"path": argument} if argument else {}
        provider = factory(
            ProviderOptions(
                model=options.model or self.config.llm_model,
                base_url=options.base_url or self.config.llm_base_url,
                api_key=options.api_key,
                extra=extra,
                settings=record.settings if record is not None else None,
                resume_after=resume_after,
            )
        )
        if options.api_key:
            self.redactor.add([options.api_key])
        try:
            yield SessionModel(provider, name, plugin_id, mask=emitter.response)
        finally:
            with trio.CancelScope(shield=True):
                await provider.aclose()

    async def _drive(
        self,
        emitter: Emitter,
        model: SessionModel,
        options: RunOptions,
        *,
        goal: str,
        workspace: Path,
        budget: Budget,
        history: Sequence[Message] = (),
        cycle: int = 0,
        channel: Channel | None = None,
    ) -> SessionOutcome:
        """Wire the session's collaborators and run it to its end."""
        session_id = emitter.session_id
        wired = self._wire(emitter, options, channel)
        limits = self.config.limits
        owner = wired.plugins().records.get(model.plugin_id)
        session = Session(
            id=session_id,
            goal=goal,
            workspace=workspace,
            budget=budget,
            emitter=emitter,
            hooks=wired.hooks,
            dispatcher=wired.dispatcher,
            tools=lambda: wired.plugins().commands.tool_specs(),
            provider_seconds=provider_seconds(owner.settings if owner is not None else None),
            max_failures=limits.max_failures,
            continuous=options.continuous,
            owner=options.owner,
            model=options.model,
            history=list(history),
            cycle=cycle,
            gate=(channel or Channel()).gate,
            cycle_scope=wired.cycle_scope,
        )
        self._models[session_id] = model
        try:
            return await session.run()
        finally:
            self._models.pop(session_id, None)

    def _wire(self, emitter: Emitter, options: RunOptions, channel: Channel | None) -> _Wired:
        """A session's hook caller and dispatcher, and the scope of its cycles, in which
        it takes up the plugins loaded since its last cycle (``reload``)."""
        session_id = emitter.session_id
        channel = channel or Channel()
        limits = self.config.limits
        bound = self.plugins
        hooks = HookCaller(
            hooks=bound.pm.ahook,
            emitter=emitter,
            hook_timeout=self.hook_timeout,
            # A person answers at their own pace: by default no deadline.
            person_seconds=math.inf if limits.confirm_timeout is None else limits.confirm_timeout,
        )
        dispatcher = Dispatcher(
            hooks=hooks,
            emitter=emitter,
            commands=bound.commands,
            records=bound.records,
            grants=Grants(self.config.grants),
            consent=channel.consent
            or (lambda request: hooks.ask_person("confirm", request=request)),
            question=channel.question
            or (lambda question: hooks.ask_person("user_input", question=question)),
            check_lease=functools.partial(self.store.check_held, session_id),
            continuous=options.continuous,
            command_timeout=limits.command_timeout,
            plugin_control=self._controls.for_call,
        )

        @contextmanager
        def cycle_scope() -> Iterator[None]:
            # Between cycles: take up the plugins loaded since (``reload``).
            nonlocal bound
            current = self.plugins
            if current is not bound:
                bound = current
                hooks.rebind(current.pm.ahook)
                emitter.rebind(current.pm.ahook)
                dispatcher.rebind(current.commands, current.records)
            with self._cycle_on(current):
                yield

        return _Wired(hooks, dispatcher, cycle_scope, lambda: bound)


class _Wired(NamedTuple):
    hooks: HookCaller
    dispatcher: Dispatcher
    cycle_scope: Callable[[], AbstractContextManager[None]]
    #: The plugins the session uses now (those of its last cycle).
    plugins: Callable[[], PluginSet]
