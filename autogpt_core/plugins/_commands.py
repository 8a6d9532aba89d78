"""The command registry: what plugins may run on the model's behalf.

A plugin registers the functions behind the commands its manifest declares, through the
``register`` callable its ``register_commands`` hook receives. The registry checks each
registration against the manifest (name declared, parameters matching the JSON Schema),
owns aliases, turns commands into tools for the model, validates arguments and invokes
the function the way its kind requires (inline, awaited, or in a worker thread).

A bridge (a manifest with ``capabilities.bridged``) registers commands it makes at run time
through ``bridge_binder``: named ``PREFIX.NAME``, each checked like a declared one, needing
``bridge:PLUGIN_ID`` besides its own permissions; one that fails a check is skipped with the
reason and the others are kept.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import json
import re
import signal
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

import attrs
import trio

from hookspecs import (
    BLOCKING_ATTR,
    CommandContext,
    CommandFunction,
    CommandResult,
    RegisterBridgedCommand,
    RegisterCommand,
    ToolSpec,
)

from .._errors import (
    CommandArgumentsError,
    ConflictError,
    RegistrationError,
    UnknownCommandError,
)
from ._manifest import CommandDecl, Manifest, parameter_issues, schema_registry
from ._permissions import bridge_permission

#: Seconds that validating one call's arguments may take before it is abandoned. Real
#: validations take milliseconds; this bounds how long a catastrophic ``pattern`` can hold
#: the event loop (see ``_abandon_after``).
VALIDATION_DEADLINE = 1.0

#: A bridged command's name: the prefix (a key of the bridge's configuration), then the
#: operation or tool, dot-separated (``petstore.listPets``).
BRIDGED_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}(?:\.[A-Za-z0-9_-]{1,128}){1,4}")
#: What a tool name may be (OpenAI's function names: ``^[a-zA-Z0-9_-]{1,64}$``): a dot is
#: not allowed, so a bridged command's tool name writes each dot as ``__``.
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class _Abandoned(BaseException):
    """Raised inside a validation to abandon it: ``reason`` is "deadline" or "interrupt".

    A BaseException, like KeyboardInterrupt, so that no ``except Exception`` on the way
    (in jsonschema or a format checker) can swallow it.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@contextlib.contextmanager
def _abandon_after(seconds: float) -> Iterator[None]:
    """Raise ``_Abandoned`` inside the block after ``seconds``, or at the first Ctrl-C.

    Why signals: jsonschema checks ``pattern`` with Python's ``re``, which backtracks
    (``^(a+)+$`` against 40 a's and a '!' runs for hours), has no timeout, and holds the
    GIL for the whole match. A worker thread with a deadline therefore does not help: the
    loop's thread cannot run until the match ends, and an abandoned match would go on
    stalling the whole process. Deciding which patterns backtrack badly is hard in general,
    and other engines (RE2, ``regex``) are not dependencies. But ``re`` does look for
    pending signals every few thousand steps and lets a Python signal handler raise, so an
    interval timer (SIGALRM) stops a match in time, and a SIGINT handler makes Ctrl-C stop
    it too -- 'autogpt run' listens for Ctrl-C through trio, whose handler only queues the
    signal for a task that cannot run while the match holds the loop. The Ctrl-C is then
    raised again once the old handler is back, so whoever listened still gets it.

    Signal handlers belong to the main thread, and Windows has no interval timers: there
    the block runs unguarded.
    """
    if (
        not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return
    old_alarm = signal.getsignal(signal.SIGALRM)
    old_interrupt = signal.getsignal(signal.SIGINT)
    if old_alarm is None or old_interrupt is None:
        yield  # handlers installed outside Python cannot be put back: leave them alone
        return
    # Ctrl-C deliberately ignored stays ignored.
    catch_interrupt = old_interrupt is not signal.SIG_IGN
    state = {"armed": True, "interrupted": False}

    def on_alarm(signum: int, frame: object) -> None:
        if state["armed"]:
            raise _Abandoned("deadline")

    def on_interrupt(signum: int, frame: object) -> None:
        state["interrupted"] = True
        if state["armed"]:
            raise _Abandoned("interrupt")

    started = time.monotonic()
    old_timer = (0.0, 0.0)
    signal.signal(signal.SIGALRM, on_alarm)
    if catch_interrupt:
        signal.signal(signal.SIGINT, on_interrupt)
    try:
        old_timer = signal.setitimer(signal.ITIMER_REAL, seconds)
        yield
    finally:
        # Disarmed first: a signal still pending runs its handler (signal.signal runs
        # pending handlers before it changes one), which must not raise any more.
        state["armed"] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_alarm)
        if catch_interrupt:
            signal.signal(signal.SIGINT, old_interrupt)
        if old_timer[0] > 0:  # someone else's timer: put back what is left of it
            left = max(old_timer[0] - (time.monotonic() - started), 1e-6)
            signal.setitimer(signal.ITIMER_REAL, left, old_timer[1])
        if state["interrupted"]:
            signal.raise_signal(signal.SIGINT)


@attrs.frozen
class RegisteredCommand:
    """A command bound to the function of the plugin that declared it."""

    plugin_id: str
    decl: CommandDecl
    function: CommandFunction = attrs.field(repr=False)
    kind: str  # "sync" | "async" | "blocking"
    wants_ctx: bool
    validator: Any = attrs.field(repr=False, eq=False)
    #: Registered at run time by a bridge (``register_bridged_commands``).
    bridged: bool = False
    # Only a regex (which can backtrack for hours) or uniqueItems (quadratic over
    # unhashable items) can make validation slow: a schema with neither needs no deadline
    # (and no interval timer, two signal handlers and their restoring on every call).
    guarded: bool = attrs.field(init=False, repr=False, eq=False)

    @guarded.default
    def _may_be_slow(self) -> bool:
        text = json.dumps(self.decl.parameters, default=_as_json)
        return '"pattern' in text or '"uniqueItems"' in text

    @property
    def name(self) -> str:
        return self.decl.name

    @property
    def tool_name(self) -> str:
        """The name the model calls it by: the name, with each dot written ``__`` (tool
        names may not hold dots). The registry answers to both."""
        return self.decl.name.replace(".", "__")

    def validate(self, arguments: Mapping[str, Any]) -> None:
        """Raise ``CommandArgumentsError`` listing every way ``arguments`` miss the schema.

        Bounded: validation that runs past ``VALIDATION_DEADLINE`` seconds or meets Ctrl-C
        is abandoned, and a schema that jsonschema cannot apply is an error, not a crash.
        """
        plugin = f"plugin {self.plugin_id!r}"
        try:
            with _abandon_after(VALIDATION_DEADLINE) if self.guarded else contextlib.nullcontext():
                errors = sorted(
                    self.validator.iter_errors(dict(arguments)), key=lambda e: list(e.path)
                )
        except _Abandoned as exc:
            if exc.reason == "interrupt":
                raise CommandArgumentsError(
                    f"argument validation for command {self.name!r} was interrupted (Ctrl-C); "
                    "the command was not run"
                ) from None
            raise CommandArgumentsError(
                f"argument validation for command {self.name!r} did not finish in "
                f"{VALIDATION_DEADLINE:g} s: its schema's pattern may be catastrophic. The "
                f"command was not run: call it with shorter arguments, or use another command; "
                f"{plugin} must simplify the pattern in the command's parameters"
            ) from None
        except RecursionError:
            raise CommandArgumentsError(
                f"validating the arguments of command {self.name!r} recursed too deeply: call "
                "it again with flatter arguments. If they are flat, its parameters schema "
                f"refers to itself in a loop: {plugin} must fix it ('autogpt plugins check' "
                "names the reference)"
            ) from None
        except Exception as exc:  # an unresolvable $ref, an unknown type, a bad pattern...
            # 'plugins check' refuses such schemas; a manifest cached by an older core or a
            # CommandDecl made by hand can still hold one. The call fails, the run goes on.
            detail = str(exc) if len(str(exc)) <= 200 else str(exc)[:197] + "..."
            raise CommandArgumentsError(
                f"command {self.name!r} cannot check its arguments: its parameters schema is "
                f"broken ({type(exc).__name__}: {detail}). Fix the command's parameters in the "
                f"manifest of {plugin}; 'autogpt plugins check' names the problem"
            ) from None
        if errors:
            problems = "; ".join(
                f"{'.'.join(map(str, e.path)) or 'arguments'}: {e.message}" for e in errors
            )
            raise CommandArgumentsError(
                f"command {self.name!r} got invalid arguments: {problems}. "
                f"Call it again with arguments matching its parameters: "
                f"{json.dumps(self.decl.parameters, sort_keys=True)}"
            )

    async def invoke(self, arguments: Mapping[str, Any], ctx: CommandContext) -> CommandResult:
        """Run the command and normalise what it returns into a ``CommandResult``."""
        kwargs = dict(arguments)
        if self.wants_ctx:
            kwargs["ctx"] = ctx
        if self.kind == "async":
            value = await self.function(**kwargs)
        elif self.kind == "blocking":
            value = await trio.to_thread.run_sync(
                lambda: self.function(**kwargs), abandon_on_cancel=True
            )
        else:
            value = self.function(**kwargs)
            if inspect.isawaitable(value):
                value = await value
        return to_result(value)


def _as_json(value: object) -> object:
    # A hand-made declaration may hold other mappings and sequences than dicts and lists.
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    return str(value)


def to_result(value: object) -> CommandResult:
    if isinstance(value, CommandResult):
        return value
    if isinstance(value, str):
        return CommandResult.success(value)
    if value is None:
        return CommandResult.success("done")
    try:
        return CommandResult.success(json.dumps(value, default=str), data=value)
    except (TypeError, ValueError):
        return CommandResult.success(str(value))


def _kind(function: CommandFunction) -> str:
    if getattr(function, BLOCKING_ATTR, False):
        return "blocking"
    target = inspect.unwrap(function)
    call = getattr(target, "__call__", None)  # noqa: B004 - callable objects
    if inspect.iscoroutinefunction(target) or (
        call is not None and not inspect.isroutine(target) and inspect.iscoroutinefunction(call)
    ):
        return "async"
    return "sync"


class CommandRegistry:
    """Every registered command by name and alias."""

    def __init__(self) -> None:
        self._commands: dict[str, RegisteredCommand] = {}
        self._names: dict[str, RegisteredCommand] = {}
        self._tools: tuple[ToolSpec, ...] | None = None

    def __len__(self) -> int:
        return len(self._commands)

    def __iter__(self) -> Any:
        return iter(self._commands.values())

    def binder(self, manifest: Manifest) -> RegisterCommand:
        """The ``register`` callable given to ``manifest``'s plugin."""

        def register(name: str, function: CommandFunction) -> None:
            self._register(manifest, name, function)

        return register

    def bridge_binder(
        self, manifest: Manifest, prefixes: Collection[str], skipped: Callable[[str, str], None]
    ) -> RegisterBridgedCommand:
        """The ``register`` given to ``manifest``'s ``register_bridged_commands``.

        ``prefixes`` are what a name may start with (the keys of the bridge's configured
        setting); ``skipped(name, reason)`` hears of each command refused, which is then
        left out while the others are kept. A plugin without ``capabilities.bridged`` may
        not register any: that is a ``RegistrationError``, as for an undeclared command.
        """

        def register(
            name: str,
            function: CommandFunction,
            *,
            description: str,
            parameters: Mapping[str, Any] | None = None,
            permissions: tuple[str, ...] | list[str] = (),
        ) -> bool:
            if manifest.bridged is None:
                raise RegistrationError(
                    manifest.id,
                    f"plugin {manifest.id!r} registered bridged command {name!r}, but its "
                    "manifest has no capabilities.bridged; add it (see docs/bridges.md) in "
                    f"{manifest.source or 'its manifest'}",
                )
            try:
                self._register_bridged(
                    manifest, prefixes, name, function, description, parameters, permissions
                )
            except RegistrationError as exc:
                skipped(str(name), str(exc))
                return False
            return True

        return register

    def _register_bridged(
        self,
        manifest: Manifest,
        prefixes: Collection[str],
        name: str,
        function: CommandFunction,
        description: str,
        parameters: Mapping[str, Any] | None,
        permissions: tuple[str, ...] | list[str],
    ) -> None:
        plugin = manifest.id
        assert manifest.bridged is not None
        what = f"plugin {plugin!r}: bridged command {name!r}"
        if not isinstance(name, str) or not BRIDGED_NAME.fullmatch(name):
            raise RegistrationError(
                plugin,
                f"{what} is not named PREFIX.NAME (letters, digits, '_' and '-', dot-separated: "
                "e.g. 'petstore.listPets'); rename it",
            )
        prefix = name.partition(".")[0]
        if prefix not in prefixes:
            known = ", ".join(sorted(prefixes)) or "none"
            raise RegistrationError(
                plugin,
                f"{what}: its prefix {prefix!r} is not a key of the setting "
                f"{manifest.bridged.prefixes_from!r} (configured: {known}); name it after one",
            )
        tool = name.replace(".", "__")
        if not TOOL_NAME.fullmatch(tool):
            raise RegistrationError(
                plugin,
                f"{what}: its tool name {tool!r} is longer than the 64 characters a model "
                "accepts; shorten the prefix or the operation's name",
            )
        if not isinstance(description, str) or not description.strip():
            raise RegistrationError(plugin, f"{what} has no description; give it one")
        params = {"type": "object", "properties": {}} if parameters is None else parameters
        if not isinstance(params, Mapping):
            raise RegistrationError(plugin, f"{what}: its parameters are not a JSON Schema object")
        try:
            params = json.loads(json.dumps(params))  # a JSON value, owned by the core
            issues = parameter_issues(params, "parameters", f"plugin {plugin!r}")
        except (TypeError, ValueError, RecursionError) as exc:
            raise RegistrationError(
                plugin, f"{what}: its parameters are not a usable JSON Schema ({exc})"
            ) from None
        if issues:
            problems = "; ".join(f"{i.field}: {i.problem} (fix: {i.fix})" for i in issues)
            raise RegistrationError(plugin, f"{what} has invalid parameters: {problems}")
        allowed = manifest.bridged.permissions
        wanted = tuple(str(p) for p in permissions)
        beyond = [p for p in wanted if p not in allowed]
        if beyond:
            raise RegistrationError(
                plugin,
                f"{what} needs {', '.join(beyond)}, which capabilities.bridged.permissions "
                f"does not allow (allowed: {', '.join(allowed) or 'none'})",
            )
        if not callable(function):
            raise RegistrationError(
                plugin, f"{what} was registered with {function!r}, not a function"
            )
        decl = CommandDecl(
            name=name,
            description=description.strip(),
            parameters=params,
            permissions=(*dict.fromkeys(wanted), bridge_permission(plugin)),
        )
        for key in dict.fromkeys((name, tool)):
            other = self._names.get(key)
            if other is not None:
                raise RegistrationError(
                    plugin,
                    f"{what}: {key!r} is already a command of plugin {other.plugin_id!r}; "
                    "rename the configuration entry (the prefix)",
                )
        wants_ctx = _check_signature(plugin, decl, function)
        from jsonschema import Draft202012Validator

        command = RegisteredCommand(
            plugin_id=plugin,
            decl=decl,
            function=function,
            kind=_kind(function),
            wants_ctx=wants_ctx,
            validator=Draft202012Validator(params, registry=schema_registry()),
            bridged=True,
        )
        self._commands[name] = command
        for key in (name, tool):
            self._names[key] = command
        self._tools = None

    def _register(self, manifest: Manifest, name: str, function: CommandFunction) -> None:
        plugin = manifest.id
        decls = {c.name: c for c in manifest.commands}
        decl = decls.get(name)
        if decl is None:
            alias_of = next((c.name for c in manifest.commands if name in c.aliases), None)
            if alias_of is not None:
                raise RegistrationError(
                    plugin,
                    f"plugin {plugin!r} registered {name!r}, which is an alias of "
                    f"{alias_of!r}: register the command under {alias_of!r}; the core adds aliases",
                )
            declared = ", ".join(sorted(decls)) or "none"
            raise RegistrationError(
                plugin,
                f"plugin {plugin!r} registered command {name!r}, which its manifest does not "
                f"declare (declared: {declared}); add it under capabilities.commands in "
                f"{manifest.source or 'its manifest'}",
            )
        if not callable(function):
            raise RegistrationError(
                plugin, f"plugin {plugin!r} registered {name!r} with {function!r}, not a function"
            )
        existing = self._names.get(name)
        if existing is not None and existing.plugin_id == plugin:
            raise RegistrationError(plugin, f"plugin {plugin!r} registered {name!r} twice")
        wants_ctx = _check_signature(plugin, decl, function)
        from jsonschema import Draft202012Validator

        command = RegisteredCommand(
            plugin_id=plugin,
            decl=decl,
            function=function,
            kind=_kind(function),
            wants_ctx=wants_ctx,
            # Only the meta-schemas besides the schema itself: jsonschema's default would
            # fetch a remote $ref over the network, on the event loop.
            validator=Draft202012Validator(dict(decl.parameters), registry=schema_registry()),
        )
        for key in (decl.name, *decl.aliases):
            other = self._names.get(key)
            if other is not None:
                raise ConflictError(
                    plugin,
                    f"plugin {plugin!r} and plugin {other.plugin_id!r} both provide command "
                    f"{key!r}: disable one of them with 'autogpt plugins disable ID'",
                )
        self._commands[decl.name] = command
        for key in (decl.name, *decl.aliases):
            self._names[key] = command
        self._tools = None

    def remove_plugin(self, plugin_id: str) -> None:
        """Forget every command of ``plugin_id`` (used when a plugin fails half-way)."""
        self._commands = {k: v for k, v in self._commands.items() if v.plugin_id != plugin_id}
        self._names = {k: v for k, v in self._names.items() if v.plugin_id != plugin_id}
        self._tools = None

    def get(self, name: str) -> RegisteredCommand:
        """The command called ``name`` or one of its aliases."""
        command = self._names.get(name)
        if command is None:
            close = difflib.get_close_matches(name, list(self._names), n=3)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            available = ", ".join(sorted(self._commands)) or "none"
            raise UnknownCommandError(
                f"there is no command {name!r}.{hint} Available commands: {available}"
            )
        return command

    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """The commands as tools for the model, sorted by name (cached until a change)."""
        if self._tools is None:
            self._tools = tuple(
                ToolSpec(
                    name=c.tool_name,
                    description=c.decl.description
                    + (f" (aliases: {', '.join(c.decl.aliases)})" if c.decl.aliases else ""),
                    parameters=c.decl.parameters,
                )
                for c in sorted(self._commands.values(), key=lambda c: c.name)
            )
        return self._tools


def _check_signature(plugin: str, decl: CommandDecl, function: Callable[..., Any]) -> bool:
    """Check ``function`` takes the declared parameters; return whether it wants ``ctx``."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return False  # builtins without a signature: trust the manifest
    params = signature.parameters
    properties = set((decl.parameters.get("properties") or {}).keys())
    required = set(decl.parameters.get("required") or ())
    has_var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    accepted = {
        n
        for n, p in params.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    wants_ctx = "ctx" in accepted
    missing = sorted(properties - accepted - {"ctx"}) if not has_var_kw else []
    undeclared = sorted(
        n
        for n, p in params.items()
        if n != "ctx"
        and n not in properties
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and p.default is inspect.Parameter.empty
    )
    optional_without_default = sorted(
        n
        for n in properties - required
        if n in params and params[n].default is inspect.Parameter.empty
    )
    problems = []
    if missing:
        problems.append(f"does not accept declared parameter(s) {', '.join(missing)}")
    if undeclared:
        problems.append(
            f"requires parameter(s) {', '.join(undeclared)} the manifest does not declare"
        )
    if optional_without_default:
        problems.append(
            f"has no default for optional parameter(s) {', '.join(optional_without_default)}"
        )
    if problems:
        raise RegistrationError(
            plugin,
            f"plugin {plugin!r}: the function for command {decl.name!r} "
            + "; ".join(problems)
            + ". Make the function's parameters match capabilities.commands[].parameters "
            "(plus an optional 'ctx')",
        )
    return wants_ctx
