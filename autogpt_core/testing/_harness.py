"""``Harness``: a real runtime with only the plugins under test, driven by a scripted model.

What runs is what ``autogpt run`` runs: plugins found through their entry points and
manifests, loaded by the core's loader, a ``Runtime`` with its session store, the
dispatcher with its permission checks and consent, and the ``llm_replay`` plugin's
``replay`` provider playing the script. What differs, and why:

- **Only some plugins load**: the ones under test (``use``) and ``BASE_PLUGINS``, the
  built-ins a session cannot do without (the planner that asks the model, the ``finish``
  command that ends a session, the provider that plays the script). Nothing else that is
  installed loads, built-in or not: no console, no memory, no workspace file commands,
  unless a test asks for them with ``use``.
- **Everything lives under one directory** (the test's ``tmp_path``): the data directory
  with the session store and the plugins' data, the manifest cache, and ``workspace``,
  the workspace every run uses. No config file is read.
- **The person is the test**: ``confirm`` and ``answers`` answer what the console would
  ask; left ``None``, the loaded plugins' ``confirm`` and ``user_input`` hooks answer, as
  in a real run, and with none loaded nobody answers: a command needing a permission that
  is not granted is refused.
- **An observer** (not a plugin: it has no manifest, no commands) is registered on the
  hook manager. It keeps the model requests (``llm_request``) and the memories stored
  (``memory_store``), which the store does not keep, and answers ``confirm`` and
  ``user_input`` first (``tryfirst``) when the test gave answers, as the console would.

The harness is a client of the engine's public API (``autogpt_core``), as a plugin
author's own script would be.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import sys
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs
import trio

from hookspecs import (
    CommandResult,
    Confirmation,
    ConfirmationRequest,
    LLMRequest,
    LLMResponse,
    MemoryItem,
    Role,
    SessionOutcome,
    SessionView,
    hookimpl,
)

from .. import (
    Config,
    CycleRecord,
    Limits,
    PluginLoadError,
    PluginSet,
    RunOptions,
    Runtime,
    StoredEvent,
    load_plugins,
    scan_plugins,
)
from .._config import DEFAULT_GRANTS
from ..plugins._discovery import ManifestCache
from ..plugins._loader import LOADED
from ._script import Step, call, finish, recording

_T = TypeVar("_T")

#: The built-in plugins every harness loads: ``planner`` (asks the model for each step),
#: ``control`` (``finish`` and ``ask_user``) and ``llm_replay`` (plays the script).
BASE_PLUGINS = ("control", "llm_replay", "planner")

#: The name the observer is registered under (it is no plugin: it has no record).
OBSERVER_NAME = "autogpt_core.testing"

#: Who answers a confirmation: ``True``/``False`` for every one, or a function of the
#: request returning a bool or a ``Confirmation`` (or an awaitable of one).
ConfirmAnswer = (
    bool
    | Callable[
        [ConfirmationRequest],
        bool | Confirmation | Awaitable[bool | Confirmation],
    ]
)
#: Who answers the agent's questions: a list of answers, given in order (then nobody
#: answers), or a function of the question returning the answer or ``None``.
Answers = Sequence[str] | Callable[[str], str | None]


@attrs.frozen
class Run:
    """One session the harness ran, as the store and the observer saw it."""

    goal: str
    session_id: str
    outcome: SessionOutcome
    #: Every event of the session, as stored (``kind``, ``cycle``, ``data``).
    events: tuple[StoredEvent, ...]
    #: Every completed cycle, as stored (``plan``, ``command``, ``result``, ``messages``).
    cycles: tuple[CycleRecord, ...]
    #: Every request the model received, in order (what ``build_prompt`` made, the tools).
    requests: tuple[LLMRequest, ...]
    #: Every item passed to the ``memory_store`` hook: the core's one observation per
    #: cycle, and what plugins stored through the hook.
    memories: tuple[MemoryItem, ...]
    #: The session's workspace directory.
    workspace: Path

    @property
    def status(self) -> str:
        """How the session ended: finished, failed, budget_exhausted or interrupted."""
        return self.outcome.status

    def events_of(self, kind: str) -> list[Mapping[str, Any]]:
        """The ``data`` of each event of ``kind`` (``command``, ``result``, ``error``, ...)."""
        return [event.data for event in self.events if event.kind == kind]

    @property
    def results(self) -> list[CommandResult]:
        """Each command's result, in order, refused and failed ones included."""
        return [
            CommandResult(
                ok=bool(data.get("ok")),
                output=str(data.get("output") or ""),
                error=data.get("error"),
                final=bool(data.get("final")),
            )
            for data in self.events_of("result")
        ]

    def result_of(self, command: str) -> CommandResult:
        """The result of the first call of ``command``; ``LookupError`` if it was not called."""
        for data, result in zip(self.events_of("result"), self.results, strict=True):
            if data.get("command") == command:
                return result
        called = [str(data.get("command")) for data in self.events_of("result")]
        raise LookupError(
            f"command {command!r} was not called in this run (called: "
            f"{', '.join(called) or 'nothing'}); check the script given to run()"
        )

    @property
    def confirmations(self) -> list[Mapping[str, Any]]:
        """Each permission decision: ``command``, ``plugin``, ``missing``, ``approved``,
        ``reason``."""
        return self.events_of("confirmation")

    @property
    def errors(self) -> list[Mapping[str, Any]]:
        """Each hook implementation that failed: ``plugin``, ``hook``, ``error``."""
        return self.events_of("error")

    @property
    def system_prompt(self) -> str:
        """The system message of the first request (what ``build_prompt`` contributed)."""
        if not self.requests:
            return ""
        return next((m.content for m in self.requests[0].messages if m.role is Role.SYSTEM), "")

    @property
    def tools(self) -> list[str]:
        """The names of the commands offered to the model in the first request."""
        return [tool.name for tool in self.requests[0].tools] if self.requests else []


@attrs.define
class _Observer:
    """Keeps, per session, the model requests and the memories stored; answers for the
    person when the test says how (``None``: leaves it to the loaded plugins)."""

    requests: dict[str, list[LLMRequest]] = attrs.field(factory=dict)
    memories: dict[str, list[MemoryItem]] = attrs.field(factory=dict)
    confirm_answer: ConfirmAnswer | None = None
    ask: Callable[[str], str | None] | None = None

    @hookimpl(wrapper=True)
    async def llm_request(
        self, session: SessionView, request: LLMRequest
    ) -> AsyncGenerator[None, LLMResponse | None]:
        self.requests.setdefault(session.id, []).append(request)
        yield

    @hookimpl
    def memory_store(self, session: SessionView, item: MemoryItem) -> None:
        self.memories.setdefault(session.id, []).append(item)

    @hookimpl(tryfirst=True)
    async def confirm(
        self, session: SessionView, request: ConfirmationRequest
    ) -> Confirmation | None:
        answer = self.confirm_answer
        if answer is None:
            return None  # another plugin's confirm answers, or nobody: as in a real run
        given = answer(request) if callable(answer) else answer
        if inspect.isawaitable(given):
            given = await given
        if isinstance(given, Confirmation):
            return given
        return Confirmation(
            approved=bool(given),
            reason="approved by the test" if given else "refused by the test",
        )

    @hookimpl(tryfirst=True)
    def user_input(self, session: SessionView, question: str) -> str | None:
        return None if self.ask is None else self.ask(question)


class Harness:
    """A runtime for testing plugins: ``use`` them, then ``command`` or ``run`` a goal.

    ::

        harness = Harness(tmp_path)
        harness.use("hello", settings={"greeting": "Hi"})
        assert harness.command("say_hello", name="Ada").output == "Hi, Ada!"

    ``grants`` are the permissions granted without asking (default: ``fs.read`` and
    ``fs.write``, as on a fresh install), ``limits`` the config's limits. ``confirm``,
    ``answers`` and ``continuous`` stand for the person at the terminal (see the module's
    docstring). ``environ`` is where settings with an ``env`` are read from (default: the
    process's environment when the plugins load). Every method but ``arun`` and
    ``acommand`` runs trio itself; inside a trio test, await those two instead.
    """

    def __init__(self, root: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None):
        self.root = Path(root)
        self.workspace = self.root / "workspace"
        self.data_dir = self.root / "data"
        self.environ = environ
        self.grants: set[str] = set(DEFAULT_GRANTS)
        self.limits = Limits()
        self.confirm: ConfirmAnswer | None = None
        self.answers: Answers | None = None
        self.continuous = False
        #: Every run so far, oldest first.
        self.runs: list[Run] = []
        self._under_test: list[str] = []
        self._settings: dict[str, dict[str, Any]] = {}
        self._plugins: PluginSet | None = None
        self._observer = _Observer()

    def __repr__(self) -> str:
        return f"<Harness plugins={[*BASE_PLUGINS, *self._under_test]} root={str(self.root)!r}>"

    # -- what runs ------------------------------------------------------------------------

    def use(self, *plugin_ids: str, settings: Mapping[str, Any] | None = None) -> Harness:
        """Load the installed plugins ``plugin_ids`` too; ``settings`` are their settings
        (as under ``plugins.settings.ID`` in a config file), for one plugin id only."""
        if settings is not None and len(plugin_ids) != 1:
            raise TypeError("use(ID, settings={...}): settings are those of one plugin")
        for plugin_id in plugin_ids:
            if plugin_id not in (*BASE_PLUGINS, *self._under_test):
                self._under_test.append(plugin_id)
            if settings is not None:
                self._settings[plugin_id] = dict(settings)
        self._plugins = None  # loaded again, with them, by the next run
        return self

    def grant(self, *permissions: str) -> Harness:
        """Grant ``permissions`` to every plugin, as ``permissions.grant`` in a config."""
        self.grants.update(permissions)
        return self

    @property
    def plugin_ids(self) -> list[str]:
        """The plugins this harness loads: ``BASE_PLUGINS`` and those under test."""
        return [*BASE_PLUGINS, *self._under_test]

    @property
    def config(self) -> Config:
        """The configuration the runtime gets (made here: no config file is read)."""
        return Config(
            path=self.root / "config.yaml",
            plugin_settings={k: dict(v) for k, v in self._settings.items()},
            grants=frozenset(self.grants),
            limits=self.limits,
            data_dir=self.data_dir,
        )

    def load(self, *, check: bool = True) -> PluginSet:
        """Find, check and import the plugins, once (``use`` makes the next call load again).

        With ``check`` (the default), a plugin of ``plugin_ids`` that is not installed or did
        not load raises ``PluginLoadError`` with the loader's reason; without it, look at
        ``records[ID].status`` and ``.reason`` of the returned ``PluginSet`` yourself.
        """
        if self._plugins is None:
            self._plugins = self._load()
        if check:
            for plugin_id in self.plugin_ids:
                _check_loaded(self._plugins, plugin_id)
        return self._plugins

    def _load(self) -> PluginSet:
        environ = dict(os.environ if self.environ is None else self.environ)
        # The loader's own switch: exactly these plugins are enabled, whatever else is
        # installed and whatever each one's enabled_by_default says.
        environ["AUTOGPT_LOAD_PLUGINS"] = ",".join(self.plugin_ids)
        config = self.config
        cache = ManifestCache(self.root / "cache" / "manifests.json")
        records = scan_plugins(config, cache=cache, environ=environ)
        plugins = load_plugins(config, records=records, environ=environ)
        plugins.pm.register(self._observer, name=OBSERVER_NAME)
        return plugins

    @property
    def loaded(self) -> list[str]:
        """The ids of the plugins that loaded, in load order."""
        return self.load().loaded

    # -- running --------------------------------------------------------------------------

    def command(self, name: str, /, **arguments: Any) -> CommandResult:
        """Run one command as the model would call it, and return its result.

        A session of two steps: the model calls ``name`` with ``arguments``, then
        ``finish``. The result is the one the model would read: a refusal, invalid
        arguments or an exception in the command are a failed result (``ok`` false,
        ``error`` saying why). The whole session is ``runs[-1]``.
        """
        return _sync(self.acommand, name, arguments)

    async def acommand(
        self, name: str, arguments: Mapping[str, Any] | None = None
    ) -> CommandResult:
        """``command`` for async tests: ``await harness.acommand("say_hello", {"name": "Ada"})``."""
        run = await self.arun(
            f"Run the command {name}.", [call(name, **dict(arguments or {})), finish()]
        )
        return run.results[0]

    def run(self, goal: str, script: Iterable[Step]) -> Run:
        """Run a session for ``goal`` to its end, the model answering with ``script``.

        Each step of ``script`` (``call``, ``finish``, ``say``) answers one request of the
        model; a session asking for more than the script holds fails, saying so (as a
        replayed recording that is too short does).
        """
        return _sync(self.arun, goal, script)

    async def arun(self, goal: str, script: Iterable[Step]) -> Run:
        """``run`` for async tests."""
        plugins = self.load()
        session_id = uuid.uuid4().hex
        scripts = self.root / "scripts"
        scripts.mkdir(parents=True, exist_ok=True)
        played = scripts / f"{session_id}.replay.json"
        played.write_text(json.dumps(recording(script), indent=2), encoding="utf-8")
        options = RunOptions(
            llm=f"replay:{played}",
            session_id=session_id,
            workspace=self.workspace,
            continuous=self.continuous,
        )
        self._observer.confirm_answer = self.confirm
        self._observer.ask = self._asker()
        async with Runtime(self.config, plugins=plugins) as runtime:
            outcome = await runtime.run(goal, options)
            store = runtime.store
            await store.flush()
            events = await store.list_events(session_id, limit=sys.maxsize)
            cycles = await store.load_cycles(session_id)
        run = Run(
            goal=goal,
            session_id=session_id,
            outcome=outcome,
            events=tuple(events),
            cycles=tuple(cycles),
            requests=tuple(self._observer.requests.pop(session_id, ())),
            memories=tuple(self._observer.memories.pop(session_id, ())),
            workspace=self.workspace.resolve(),
        )
        self.runs.append(run)
        return run

    def _asker(self) -> Callable[[str], str | None] | None:
        answers = self.answers
        if answers is None or callable(answers):
            return answers
        pending = list(answers)  # each run answers from the start of the list
        return lambda question: pending.pop(0) if pending else None


def _check_loaded(plugins: PluginSet, plugin_id: str) -> None:
    record = plugins.records.get(plugin_id)
    if record is None:
        installed = ", ".join(sorted(plugins.records)) or "none"
        raise PluginLoadError(
            plugin_id,
            f"plugin {plugin_id!r} is not installed in the environment of {sys.executable} "
            f"(installed: {installed}); fix: install its distribution there, e.g. "
            "'pip install -e .' in its directory, and check its entry point in the group "
            f"'autogpt.plugins' is named {plugin_id!r}",
        )
    if record.status != LOADED:
        raise PluginLoadError(
            plugin_id, f"plugin {plugin_id!r} did not load: {record.reason or record.status}"
        )


def _sync(function: Callable[..., Awaitable[_T]], *args: Any) -> _T:
    """Run ``function(*args)`` under a trio loop of its own."""
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        under_trio = False
    else:
        under_trio = True
    if under_trio:
        raise RuntimeError(
            "this test already runs under trio: await harness.arun(...) or "
            "harness.acommand(...) instead of calling run() or command()"
        )
    # Outside the except block: a failure in the test is not shown chained to the probe.
    return trio.run(functools.partial(function, *args))
