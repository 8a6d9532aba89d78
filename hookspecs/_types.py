"""Values that cross the hook boundary.

Frozen attrs classes are values: a plugin can keep them, compare them and pass them on.
The few ``attrs.define`` classes are *builders* a hook receives to contribute into
(a prompt under construction, a plan under review); they say so in their docstring.
"""

from __future__ import annotations

import argparse
import enum
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import attrs

JSON = Any
"""A JSON-compatible value: dict, list, str, int, float, bool or None."""


class Role(enum.StrEnum):
    """Who said a chat message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@attrs.frozen
class ToolCall:
    """A model's request to run one command; ``arguments`` is the raw JSON string it sent."""

    id: str
    name: str
    arguments: str


@attrs.frozen
class Message:
    """One chat message as sent to, or received from, a model."""

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


@attrs.frozen
class ToolSpec:
    """A command offered to the model as a tool: name, description, JSON-Schema parameters."""

    name: str
    description: str
    parameters: Mapping[str, JSON]


@attrs.frozen
class Usage:
    """Token counts and cost of one model request, as reported by the provider."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@attrs.frozen
class LLMRequest:
    """One request to a chat model."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None


@attrs.frozen
class LLMResponse:
    """A model's answer: the assistant message (text and/or tool calls) and its usage."""

    message: Message
    usage: Usage = Usage()
    model: str | None = None


@runtime_checkable
class LLMProvider(Protocol):
    """What ``register_llm_providers`` registers a factory for.

    ``complete`` sends one request; ``aclose`` releases connections and is always awaited
    by the core when the provider is no longer needed.
    """

    async def complete(self, request: LLMRequest) -> LLMResponse: ...

    async def aclose(self) -> None: ...


@attrs.frozen
class ProviderOptions:
    """What the core passes to an LLM provider factory when a session needs a provider.

    ``model``, ``base_url`` and ``api_key`` come from the command line (``--model``,
    ``--base-url``) or the config's ``llm`` section; ``None`` leaves the choice to the
    provider. ``extra["path"]`` is what follows the colon in ``--llm NAME:PATH`` (the
    recording of ``replay:FILE``), absent when nothing does.

    ``settings`` are the validated settings of the plugin that registered the provider (what
    its ``configure`` received, secrets included): a factory reads its own configuration
    here, when it makes a provider, instead of keeping what ``configure`` gave it. ``None``
    for a provider registered outside a plugin (tests).

    ``resume_after`` is the number of cycles the session completed before this provider
    was made: 0 for a new session, N when it resumes after cycle N. A provider that plays a
    recording skips what those cycles asked (one request each).
    """

    model: str | None = None
    base_url: str | None = None
    api_key: str | None = attrs.field(default=None, repr=False)
    extra: Mapping[str, JSON] = attrs.field(factory=dict)
    settings: PluginSettings | None = attrs.field(default=None, repr=False)
    resume_after: int = 0


LLMProviderFactory = Callable[[ProviderOptions], LLMProvider]


@attrs.frozen
class Budget:
    """Limits of a session and what has been spent so far (``None`` = unlimited)."""

    max_cycles: int | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    cycles: int = 0
    tokens: int = 0
    cost_usd: float = 0.0


@attrs.frozen
class SessionView:
    """A read-only snapshot of a session, passed to every per-session hook.

    A new snapshot is made each cycle; keep the ``id``, not the object, to follow a session.
    """

    id: str
    goal: str
    workspace: Path
    cycle: int = 0
    continuous: bool = False
    budget: Budget = Budget()
    #: Whose session it is: the token name of the ``autogpt serve`` task, ``None`` for
    #: the terminal's sessions. A memory backend keeps ``scope="all"`` within one owner:
    #: what one owner's sessions remembered, another owner's never recall.
    owner: str | None = None


@attrs.frozen
class RuntimeView:
    """What lifecycle hooks learn about the running core."""

    core_version: str
    data_dir: Path
    plugins: tuple[str, ...] = ()


@attrs.frozen
class PluginSettings:
    """One plugin's validated settings, given to that plugin alone by ``configure``.

    Settings declared ``secret`` in the manifest are here too, and nowhere else.
    """

    plugin_id: str
    values: Mapping[str, JSON] = attrs.field(factory=dict)
    data_dir: Path | None = None
    #: The session store's location (a SQLite file's path or a ``postgresql://`` URL), for
    #: a plugin whose manifest says ``shares_store: true``; ``None`` for the others.
    store: str | None = None
    #: The directory of the config file the settings came from: what a setting naming a
    #: file is relative to. ``None`` when there is no config file (tests).
    config_dir: Path | None = None


@attrs.define
class PromptBuilder:
    """Builder passed to ``build_prompt``: each plugin adds what the model should know.

    Mutable on purpose: every ``build_prompt`` implementation contributes into the same
    builder, and the core renders it into the system message after the call.
    """

    goal: str
    constraints: list[str] = attrs.field(factory=list)
    resources: list[str] = attrs.field(factory=list)
    context: list[str] = attrs.field(factory=list)
    #: ``(source, text)`` pairs: text from outside, kept out of the system message.
    data: list[tuple[str, str]] = attrs.field(factory=list)

    def add_constraint(self, text: str) -> None:
        self.constraints.append(text)

    def add_resource(self, text: str) -> None:
        self.resources.append(text)

    def add_context(self, text: str) -> None:
        """Add words of the plugin's own: they go into the system message."""
        self.context.append(text)

    def add_data(self, text: str, source: str) -> None:
        """Add text from outside (file names, a page, notes) the model should see.

        It never goes into the system message: the core sends it after the user's goal,
        quoted as data with ``source`` (see ``quote_data``), as it does command output.
        """
        self.data.append((source, text))

    def render(self) -> str:
        parts = [f"Your goal: {self.goal}"]
        for title, items in (
            ("Constraints", self.constraints),
            ("Resources", self.resources),
            ("Context", self.context),
        ):
            if items:
                parts.append(title + ":\n" + "\n".join(f"- {item}" for item in items))
        return "\n\n".join(parts)


@attrs.frozen
class CommandCall:
    """A request to run one registered command with JSON arguments."""

    command: str
    arguments: Mapping[str, JSON] = attrs.field(factory=dict)
    call_id: str = ""


@attrs.frozen
class Plan:
    """What the planner proposes for this cycle: its reasoning and at most one command.

    ``call is None`` means the model answered in text only; ``text`` holds it.
    ``assistant_message`` is the model's message as received (the core keeps it in the
    conversation and answers every tool call in it). ``error`` describes a problem with the
    model's answer (e.g. a tool call whose arguments are not JSON) that the model is told
    about next cycle.
    """

    text: str = ""
    call: CommandCall | None = None
    usage: Usage = Usage()
    assistant_message: Message | None = None
    error: str | None = None


PlanCompleter = Callable[[LLMRequest], Awaitable[LLMResponse]]


@attrs.frozen
class PlanningContext:
    """What ``plan`` receives: the conversation so far, the tools, and the model.

    ``complete`` sends a request through the ``llm_request`` hook to the session's provider.
    """

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]
    complete: PlanCompleter = attrs.field(repr=False)
    model: str | None = None


@attrs.define
class PlanReview:
    """Builder passed to ``post_plan``: replace ``plan`` to amend it, or ``veto`` it.

    Mutable on purpose: reviewers run in hook order and each sees the previous one's edits.
    """

    plan: Plan
    vetoed: str | None = None

    def veto(self, reason: str) -> None:
        self.vetoed = reason


@attrs.define
class CommandReview:
    """Builder passed to ``pre_command``: replace ``call`` to rewrite it, or ``refuse`` it."""

    call: CommandCall
    refused: str | None = None

    def refuse(self, reason: str) -> None:
        self.refused = reason


@attrs.frozen
class CommandResult:
    """The outcome of one command: its output for the model, or the error.

    ``final=True`` ends the session after this command, with ``output`` as its result
    (what the ``finish`` command returns).
    """

    ok: bool
    output: str = ""
    error: str | None = None
    data: JSON = None
    final: bool = False

    @classmethod
    def success(cls, output: str, data: JSON = None) -> CommandResult:
        return cls(ok=True, output=output, data=data)

    @classmethod
    def finished(cls, result: str) -> CommandResult:
        return cls(ok=True, output=result, final=True)

    @classmethod
    def failure(cls, error: str) -> CommandResult:
        return cls(ok=False, error=error)


def _unchanged(text: str) -> str:
    return text


async def _refuse(permission: str, reason: str) -> bool:
    return False


async def _forget_nothing(query: MemoryQuery) -> int:
    return 0


@attrs.frozen
class CommandContext:
    """Passed to a command function that declares a ``ctx`` parameter.

    ``redact`` masks every known secret in a text: use it on anything the command keeps
    (a note, a file it writes on the model's behalf) that could carry one.

    ``ask_permission(permission, reason)`` is for a permission that only some calls need
    (``fs.overwrite`` when the file exists, ``network.local`` when the address is
    private): it returns ``True`` when the permission is granted in the config or for the
    session, or when the user allows this call now (shown the whole call and ``reason``);
    ``False`` when refused, and always in continuous (unattended) mode. The plugin's
    manifest must list the permission under ``permissions``.

    ``forget(query)`` forgets what matches ``query`` in every memory backend (the
    ``memory_forget`` hook) and returns how many items were forgotten.
    """

    session: SessionView
    plugin_id: str
    settings: PluginSettings
    ask_user: Callable[[str], Awaitable[str | None]] = attrs.field(repr=False)
    redact: Callable[[str], str] = attrs.field(default=_unchanged, repr=False)
    ask_permission: Callable[[str, str], Awaitable[bool]] = attrs.field(default=_refuse, repr=False)
    forget: Callable[[MemoryQuery], Awaitable[int]] = attrs.field(
        default=_forget_nothing, repr=False
    )
    #: For a plugin whose manifest declares the ``install`` permission (and only then):
    #: find, enable and install plugins, each change asked of the user (``PluginControl``).
    plugins: PluginControl | None = attrs.field(default=None, repr=False)


@attrs.frozen
class PluginControl:
    """What a command may do with plugins (``CommandContext.plugins``), given only to
    plugins whose manifest declares the ``install`` permission.

    ``find(query)`` lists installed plugins that are not running and the configured plugin
    index's, best match first (dicts: ``id``, ``name``, ``description``, ``status``,
    ``reason``, ``commands``, ``permissions``, ``source``). ``enable(plugin_id, reason)``
    and ``install(plugin_id, reason)`` ALWAYS ask the user, showing the plugin's manifest,
    even when ``install`` is granted; in continuous (unattended) mode they are refused
    without asking. Each returns what happened, in words for the model, and raises
    ``PermissionError`` when the user refuses. An enabled plugin's commands are offered
    from the session's next cycle.
    """

    find: Callable[[str], Awaitable[list[dict[str, JSON]]]]
    enable: Callable[[str, str], Awaitable[str]]
    install: Callable[[str, str], Awaitable[str]]


CommandFunction = Callable[..., Any]


@attrs.frozen
class MemoryItem:
    """Something worth remembering; ``session_id`` ties it to the session that stored it."""

    text: str
    session_id: str
    kind: str = "note"
    id: str = ""
    metadata: Mapping[str, JSON] = attrs.field(factory=dict)
    created_at: float = 0.0


@attrs.frozen
class MemoryQuery:
    """A recall request. ``scope`` is ``"session"`` (this session only) or ``"all"`` (every
    session of the same owner, ``SessionView.owner``).

    ``kinds`` limits the recall to items of those kinds (empty: any kind). The core stores
    one ``"observation"`` per cycle; what an agent chose to remember is a ``"note"``.
    """

    text: str
    limit: int = 5
    scope: str = "session"
    kinds: tuple[str, ...] = ()


@attrs.frozen
class MemoryHit:
    """One recalled item with its backend's score (higher is better) and backend name."""

    item: MemoryItem
    score: float
    backend: str = ""


class EventKind(enum.StrEnum):
    """Kinds of events sent through ``on_event``, and the keys of each one's ``data``.

    ============== ==========================================================================
    session_start  ``goal``, ``workspace``, ``resumed_at`` (0, or the cycle resumed after)
    plan           ``text`` (the model's words), ``call`` (``{command, arguments, call_id}``
                   or ``None``), ``error`` (what was wrong with the model's answer, or ``None``)
    thought        ``text``
    confirmation   ``command``, ``plugin``, ``missing`` (permissions), ``approved``, ``reason``
    command        ``command``, ``plugin``, ``arguments``
    result         ``command``, ``ok``, ``output``, ``error``, ``final``
    error          ``plugin``, ``hook``, ``error`` (a plugin failed; the session goes on)
    message        ``text``
    budget         ``cycles``, ``max_cycles``, ``tokens``, ``cost_usd``
    session_end    ``status``, ``result``, ``cycles``
    ============== ==========================================================================
    """

    SESSION_START = "session_start"
    THOUGHT = "thought"
    PLAN = "plan"
    COMMAND = "command"
    RESULT = "result"
    ERROR = "error"
    MESSAGE = "message"
    BUDGET = "budget"
    CONFIRMATION = "confirmation"
    SESSION_END = "session_end"


@attrs.frozen
class Event:
    """Something that happened in a session. ``data`` holds JSON values only, secrets redacted."""

    kind: EventKind
    session_id: str
    cycle: int
    data: Mapping[str, JSON] = attrs.field(factory=dict)
    timestamp: float = 0.0


@attrs.frozen
class ConfirmationRequest:
    """Asks the user whether a command may run with permissions not granted in the config.

    ``call`` is the whole call that will run if approved, every argument in full: show all
    of it (``describe_call`` renders it safely for a terminal or a page), never a summary.
    ``description`` is the command's description from its manifest; ``reason`` says why
    this call needs the permission, when the command asked for it itself (for example
    "write_file would overwrite notes.txt, which this session did not create").
    """

    call: CommandCall
    plugin_id: str
    missing_permissions: tuple[str, ...]
    description: str = ""
    reason: str = ""


@attrs.frozen
class Confirmation:
    """An answer to a ``ConfirmationRequest``; ``remember`` grants it for the session."""

    approved: bool
    reason: str = ""
    remember: bool = False


@attrs.frozen
class SessionOutcome:
    """How a session ended: ``status`` is finished, interrupted, failed or budget_exhausted."""

    status: str
    result: str = ""
    cycles: int = 0


RegisterCommand = Callable[[str, CommandFunction], None]
RegisterLLMProvider = Callable[[str, LLMProviderFactory], None]


class RegisterBridgedCommand(Protocol):
    """What ``register_bridged_commands`` calls once per command it makes at run time::

        register(name, function, *, description, parameters=None, permissions=()) -> bool

    ``name`` is ``PREFIX.NAME``: ``PREFIX`` a key of the setting the manifest's
    ``capabilities.bridged.prefixes_from`` names (a bridge's configured service, server,
    ...), ``NAME`` the operation or tool (letters, digits, ``_``, ``-``; dots nest).
    ``parameters`` is the JSON Schema of the arguments (type ``object``), checked like a
    declared command's; ``permissions`` must be among ``capabilities.bridged.permissions``.
    The core adds ``bridge:PLUGIN_ID``, so every call is asked of the user unless they
    grant it. Returns ``True`` when registered; ``False`` when refused, the reason
    reported (``autogpt plugins check`` lists it) and the other commands kept.
    """

    def __call__(
        self,
        name: str,
        function: CommandFunction,
        *,
        description: str,
        parameters: Mapping[str, JSON] | None = None,
        permissions: tuple[str, ...] | list[str] = (),
    ) -> bool: ...


ReportUnmapped = Callable[[str, str], None]
"""``unmapped(what, reason)``: something of a bridge's configuration that did not become a
command (an operation without ``operationId``, an unsupported auth scheme), and why.
``autogpt plugins check`` and ``autogpt plugins info`` list it."""

ReadSecret = Callable[[str], "str | None"]
"""``secret(ENV_NAME)``: the value of the environment variable ``ENV_NAME`` (``None`` when
unset), which the core then masks everywhere as a secret. Only a name the plugin's bridged
configuration gives as an ``env`` value may be read; another is a ``RegistrationError``."""


@attrs.frozen
class CLIContext:
    """Passed to a command-line handler (``register_cli_commands``) that declares a ``ctx``
    parameter: the plugin's id and validated settings, and ``redact``, which masks every
    known secret in a text (use it on what the command prints that could carry one)."""

    plugin_id: str
    settings: PluginSettings
    redact: Callable[[str], str] = attrs.field(default=_unchanged, repr=False)


CLIHandler = Callable[..., "int | None | Awaitable[int | None]"]
"""What runs ``autogpt NAME ...``: ``handler(args)`` or ``handler(args, ctx)``, where
``args`` is the ``argparse.Namespace`` and ``ctx`` a ``CLIContext``; ``def`` or
``async def`` (run under trio). Returns the exit code, ``None`` meaning 0."""

RegisterCLICommand = Callable[[str, CLIHandler], argparse.ArgumentParser]
"""``register(name, handler)``: returns the command's ``argparse.ArgumentParser``, to
which the plugin adds its arguments."""
