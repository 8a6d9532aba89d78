"""Hook specifications: the reference for plugin authors.

Every hook is called with keyword arguments only. An implementation may accept fewer
arguments than the specification lists (pluggy's opt-in arguments), so a plugin written
against an older contract keeps working when a hook gains an argument.

Unless a hook says *sync only*, its implementations may be plain functions, ``async def``
functions, or plain functions marked ``@hookimpl(blocking=True)`` (run in a worker thread).
The core awaits them with pluggy's order: wrappers outside the rest; ``tryfirst``, normal,
``trylast`` groups; within a group, the plugin registered last is called first. For
``firstresult`` hooks the first *awaited* value that is not ``None`` wins.

*Per-plugin* hooks (``configure``, ``register_commands``, ``register_bridged_commands``,
``register_llm_providers``, ``register_cli_commands``) are called once for each plugin with
arguments bound to that plugin: its own settings, and a ``register`` that checks what it
registers against its own manifest.
"""

from __future__ import annotations

from ._markers import hookspec
from ._types import (
    CommandCall,
    CommandResult,
    CommandReview,
    Confirmation,
    ConfirmationRequest,
    Event,
    LLMRequest,
    LLMResponse,
    MemoryHit,
    MemoryItem,
    MemoryQuery,
    Plan,
    PlanningContext,
    PlanReview,
    PluginSettings,
    PromptBuilder,
    ReadSecret,
    RegisterBridgedCommand,
    RegisterCLICommand,
    RegisterCommand,
    RegisterLLMProvider,
    ReportUnmapped,
    RuntimeView,
    SessionOutcome,
    SessionView,
)

# --- lifecycle -------------------------------------------------------------------------


@hookspec
def autogpt_startup(runtime: RuntimeView) -> None:
    """Called once when a runtime starts, after every plugin is loaded and configured.

    Open long-lived resources here. The return value is ignored.
    """


@hookspec
def autogpt_shutdown(runtime: RuntimeView) -> None:
    """Called once when the runtime stops, even after an error or Ctrl-C.

    Close what ``autogpt_startup`` opened. The return value is ignored. Also called when
    the start is cut short, so this plugin's ``autogpt_startup`` may not have run or
    finished: close only what exists.
    """


@hookspec
def session_start(session: SessionView) -> None:
    """Called when a session starts or is resumed, before its first cycle.

    The return value is ignored.
    """


@hookspec
def session_end(session: SessionView, outcome: SessionOutcome) -> None:
    """Called when a session ends, whatever the reason (``outcome.status``).

    The return value is ignored.
    """


# --- configuration and registration (per plugin, sync only) ----------------------------


@hookspec
def configure(settings: PluginSettings) -> None:
    """Per plugin, sync only: receive this plugin's settings, validated against its manifest.

    Called once at load, before ``autogpt_startup``. Secrets declared in the manifest's
    ``config`` are included; no other plugin sees them.
    """


@hookspec
def register_commands(register: RegisterCommand) -> None:
    """Per plugin, sync only: register the functions behind the commands your manifest declares.

    Call ``register(name, function)`` once per command. ``name`` must be a command of your
    manifest's ``capabilities.commands`` (not an alias); the function's parameters must be
    the declared JSON-Schema properties, plus optionally ``ctx`` (a ``CommandContext``).
    Anything else is refused with a ``RegistrationError`` naming your plugin. The function
    may be sync, ``async def``, or marked ``hookspecs.blocking``; it returns a string, a
    ``CommandResult``, or any JSON value.
    """


@hookspec
def register_bridged_commands(
    register: RegisterBridgedCommand,
    settings: PluginSettings,
    unmapped: ReportUnmapped,
    secret: ReadSecret,
) -> None:
    """Per plugin, sync only: a bridge registers the commands it makes from its configuration.

    Called once at load, after ``configure`` and ``register_commands``, for a plugin whose
    manifest has ``capabilities.bridged`` (for another plugin, calling ``register`` is a
    ``RegistrationError``). ``settings`` are the plugin's (what ``configure`` received):
    the configuration to bridge. Call ``register(name, function, description=...,
    parameters=..., permissions=...)`` per command (see ``RegisterBridgedCommand``): the name
    is ``PREFIX.NAME`` with ``PREFIX`` a key of the setting ``capabilities.bridged.
    prefixes_from`` names. A command the core refuses (a bad schema, a permission the
    manifest does not allow, a clash) is skipped with the reason; the others are kept.
    Report what you could not map with ``unmapped(what, reason)``; read a secret the user
    named in your configuration (an ``env`` value) with ``secret(ENV_NAME)``, which the core
    then masks. Every bridged command needs ``bridge:PLUGIN_ID`` besides its permissions:
    each call is asked of the user unless they grant it, and refused in continuous mode.
    The return value is ignored.
    """


@hookspec
def register_llm_providers(register: RegisterLLMProvider) -> None:
    """Per plugin, sync only: ``register(name, factory)`` for each LLM provider you offer.

    ``factory(options: ProviderOptions)`` returns an ``LLMProvider``. Users pick one with
    ``--llm NAME``. ``options.settings`` are this plugin's settings, ``options.resume_after``
    the cycles a resumed session already completed.
    """


@hookspec
def register_cli_commands(register: RegisterCLICommand) -> None:
    """Per plugin, sync only: add the ``autogpt NAME ...`` commands your manifest declares.

    Called only when the user runs one of them (``autogpt --help`` lists them from the
    manifest's ``cli.commands``, importing nothing), after ``configure``; never in an agent
    run. Call ``register(name, handler)`` once per declared command: it returns the
    command's ``argparse.ArgumentParser``, to which you add arguments. ``handler(args)`` --
    or ``handler(args, ctx)`` with a ``CLIContext`` -- is a ``def`` or an ``async def``
    (run under trio) and returns the exit code (``None`` for 0). A name your manifest does
    not declare, a core command's name or one another enabled plugin declares is refused
    with a ``RegistrationError`` naming your plugin.
    """


# --- planning --------------------------------------------------------------------------


@hookspec
def build_prompt(session: SessionView, prompt: PromptBuilder) -> None:
    """Each cycle, before planning: add constraints, resources and context to ``prompt``.

    The return value is ignored; contribute through ``prompt.add_*``.
    """


@hookspec(firstresult=True)
def plan(session: SessionView, context: PlanningContext) -> Plan | None:
    """firstresult. Propose the next action: usually by asking the model through ``context``.

    Return a ``Plan``; return ``None`` to let the next planner decide. The first non-``None``
    awaited value wins.
    """


@hookspec
def post_plan(session: SessionView, review: PlanReview) -> None:
    """After planning: inspect ``review.plan``, replace it to amend it, or ``review.veto(reason)``.

    A veto skips the command; the reason becomes the model's next observation.
    """


# --- command dispatch ------------------------------------------------------------------


@hookspec
def pre_command(session: SessionView, review: CommandReview) -> None:
    """Before a command's checks: rewrite ``review.call`` or ``review.refuse(reason)`` it.

    Runs before validation, the permission check and any confirmation, so that what is
    validated and confirmed is exactly what runs: the reviewed call is copied, and the copy
    is what is checked and run. An implementation that raises refuses the command (a
    failing check never lets a command through).
    """


@hookspec(firstresult=True)
def post_command(
    session: SessionView, call: CommandCall, result: CommandResult
) -> CommandResult | None:
    """firstresult. After a command ran: return a ``CommandResult`` to replace what the model sees.

    Return ``None`` to leave the result alone; the first non-``None`` value wins.
    """


# --- memory ----------------------------------------------------------------------------


@hookspec
def memory_store(session: SessionView, item: MemoryItem) -> str | None:
    """Store ``item`` in your memory backend; return the id you gave it, or ``None``.

    Every backend is called; each stores its own copy.
    """


@hookspec
def memory_recall(session: SessionView, query: MemoryQuery) -> list[MemoryHit] | None:
    """Return up to ``query.limit`` items matching ``query.text``, best first.

    The core merges the hits of all backends by score and keeps the best ``query.limit``.
    """


@hookspec
def memory_forget(session: SessionView, query: MemoryQuery) -> int | None:
    """Forget items matching ``query`` (``text == ""`` with scope ``session`` = all of this
    session's). Return how many were forgotten."""


# --- output ----------------------------------------------------------------------------


@hookspec
def on_event(session: SessionView, event: Event) -> None:
    """Called for every event of a session: thought, plan, command, result, error, message,
    budget, confirmation, start and end. Console output, JSON-lines logs and the server's
    event stream are implementations of this hook. The return value is ignored.
    """


@hookspec
def on_events(session: SessionView, events: tuple[Event, ...]) -> None:
    """The same events as ``on_event``, in the same order, delivered in batches: a batch
    holds what happened since the last one, and is delivered before a command runs,
    before a person is asked anything, when a cycle is committed and when the session
    ends. Implement it instead of ``on_event`` for output that costs per call (a flush to
    a file, a write to a terminal); implementing both sees every event twice. ``session``
    is the session as it is at delivery; the last batch, holding ``session_end``'s event,
    comes after the ``session_end`` hook. The return value is ignored.
    """


# --- model requests --------------------------------------------------------------------


@hookspec(firstresult=True)
def llm_request(session: SessionView, request: LLMRequest) -> LLMResponse | None:
    """firstresult. Every model request goes through here.

    The core's own ``trylast`` implementation sends the request to the session's provider
    and masks secrets in its answer before any wrapper sees it. Implement it as a
    ``wrapper=True`` generator to log, time, record or account for requests; return a
    response from a normal implementation to answer without the provider (a cache). A
    provider that raises something other than an ``LLMError``, or answers something other
    than an ``LLMResponse``, is reported as a ``HookError`` naming its plugin.
    """


# --- the user --------------------------------------------------------------------------


@hookspec(firstresult=True)
def confirm(session: SessionView, request: ConfirmationRequest) -> Confirmation | None:
    """firstresult. Decide whether a command needing ungranted permissions may run.

    Return ``None`` if you cannot ask (no terminal, not your session). With no answer at all
    the command is refused. Never called in continuous mode: there the command is refused.
    """


@hookspec(firstresult=True)
def user_input(session: SessionView, question: str) -> str | None:
    """firstresult. Ask the user ``question`` and return the answer, or ``None`` if you cannot."""
