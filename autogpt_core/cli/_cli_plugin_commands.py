"""``autogpt NAME ...``: the command-line commands plugins add (``register_cli_commands``).

A plugin declares its commands in its manifest (``cli.commands``), so ``autogpt --help``
lists them from the scanned -- and cached -- manifests, importing no plugin, enabled or
not. Only ``autogpt NAME`` imports the plugin that declares ``NAME``, and only when it is
enabled: it is loaded as for an agent run (settings, ``configure``; its ``requires`` too),
its ``register_cli_commands`` adds the real sub-parser, and the handler runs. A core
command (``run``, ``plugins``, ...) scans nothing for this: ``prepare`` returns at once.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import traceback
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .._errors import AutoGPTError, ConflictError, PluginError, PluginLoadError, RegistrationError

if TYPE_CHECKING:
    from hookspecs import CLIContext, CLIHandler

    from .._config import Config
    from ..agent._redact import Redactor
    from ..plugins._loader import PluginRecord
    from ..plugins._manifest import CLICommandDecl

    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

#: The core's commands: a plugin cannot take these names (``tests`` check they are
#: exactly ``build_parser``'s). ``autogpt plugins check`` reports a plugin declaring one.
CORE_COMMANDS = frozenset({"config", "mcp", "plugins", "run", "serve", "sessions", "store"})


def subparsers(parser: argparse.ArgumentParser) -> Subparsers:
    """The sub-command action of ``parser`` (``autogpt``'s ``COMMAND``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    raise AssertionError("the autogpt parser has no sub-commands")


def command_index(parser: argparse.ArgumentParser, argv: Sequence[str]) -> int | None:
    """Where the command word is in ``argv``: the first argument that is neither one of
    ``parser``'s own options nor an option's value (``--config FILE``)."""
    options = parser._option_string_actions
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg == "--":
            return index + 1 if index + 1 < len(argv) else None
        if arg.startswith("-") and arg != "-":
            name, equals, _ = arg.partition("=")
            action = options.get(name)
            if action is None and name.startswith("--"):
                # argparse accepts an unambiguous prefix (--conf for --config).
                matches = {a for o, a in options.items() if o.startswith(name)}
                action = matches.pop() if len(matches) == 1 else None
            if action is not None and action.nargs != 0 and not equals:
                index += 1  # the option's value
            index += 1
            continue
        return index
    return None


@attrs.define
class PluginCommand:
    """A plugin's command, registered and ready to run once ``argv`` is parsed."""

    name: str
    plugin_id: str
    handler: CLIHandler
    ctx: CLIContext
    redactor: Redactor
    trace: bool

    def run(self, args: argparse.Namespace) -> int:
        """Call the handler; an exception is reported naming the plugin (its traceback
        with ``--trace-hooks``), exit status 1. ``SystemExit`` and Ctrl-C pass through."""
        kwargs = {"ctx": self.ctx} if _takes_ctx(self.handler) else {}
        try:
            result = self.handler(args, **kwargs)
            if inspect.isawaitable(result):
                import trio

                result = trio.run(_awaited, result)
        except Exception as exc:  # the plugin's fault: reported, not a crash of autogpt
            self._report(
                f"'autogpt {self.name}' (plugin {self.plugin_id!r}) failed: "
                f"{type(exc).__name__}: {exc}",
                exc,
            )
            return 1
        if result is None:
            return 0
        if isinstance(result, int) and not isinstance(result, bool):
            return result
        self._report(
            f"'autogpt {self.name}' (plugin {self.plugin_id!r}) returned {type(result).__name__}"
            f", not an exit status; fix: make its handler return an int, or None for success",
            None,
        )
        return 1

    def _report(self, message: str, exc: BaseException | None) -> None:
        from hookspecs import printable

        if exc is not None and self.trace:
            text = "".join(traceback.format_exception(exc))
            print(printable(self.redactor.text(text)), file=sys.stderr, end="")
        hint = "" if exc is None or self.trace else " (run with --trace-hooks for the traceback)"
        print(f"autogpt: error: {printable(self.redactor.text(message))}{hint}", file=sys.stderr)


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _takes_ctx(handler: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(handler).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "ctx" or p.kind is p.VAR_KEYWORD for p in parameters)


def prepare(parser: argparse.ArgumentParser, argv: Sequence[str]) -> PluginCommand | None:
    """Make ``parser`` ready for ``argv``; the plugin command to run, if ``argv`` names one.

    A core command: nothing to do. No command (``autogpt``, ``autogpt --help``): every
    declared plugin command is added to the listing, from the manifests. A plugin's
    command: its plugin is loaded and registers the real sub-parser. Any other word: the
    listing is added too, so that argparse's "invalid choice" names the plugin commands.
    """
    sub = subparsers(parser)
    at = command_index(parser, argv)
    word = None if at is None else argv[at]
    if word is not None and word in sub.choices:
        return None
    head = list(argv if at is None else argv[:at])
    if "--version" in head:
        return None  # argparse prints the version and exits
    if "-h" in head or "--help" in head:
        word = None
    options, _ = parser.parse_known_args([a for a in head if a not in ("-h", "--help")])
    from .._config import load_config
    from ..plugins._loader import scan

    if word is None:
        try:
            records = scan(load_config(options.config))
        except AutoGPTError as exc:
            # Help is still shown with a broken config; the reason is said at its end.
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            parser.epilog = f"{parser.epilog or ''} Plugin commands are not listed: {first}"
            return None
        add_listing(sub, records)
        return None
    config = load_config(options.config)
    records = scan(config)
    owners = [
        r
        for r in records
        if r.manifest is not None and any(c.name == word for c in r.manifest.cli_commands)
    ]
    if not owners:
        add_listing(sub, records)
        return None
    record = _owner(word, owners)
    return _load_and_register(sub, word, record, records, config, options.trace_hooks)


def _owner(word: str, owners: list[PluginRecord]) -> PluginRecord:
    from ..plugins._loader import BROKEN, load_plugins_env

    enabled = [r for r in owners if r.enabled]
    if len(enabled) > 1:
        names = " and ".join(repr(r.id) for r in enabled)
        raise ConflictError(
            enabled[-1].id,
            f"the command 'autogpt {word}' is declared by plugins {names}, which are all "
            f"enabled, so none of them runs it; fix: disable all but one "
            f"('autogpt plugins disable {enabled[-1].id}')",
        )
    if not enabled:
        record = owners[0]
        only = load_plugins_env()
        fix = (
            f"add {record.id!r} to $AUTOGPT_LOAD_PLUGINS, which names the plugins to load"
            if only is not None
            else f"enable it with 'autogpt plugins enable {record.id}'"
        )
        raise PluginError(
            record.id,
            f"'autogpt {word}' is a command of plugin {record.id!r}, which is disabled; fix: {fix}",
        )
    record = enabled[0]
    if record.status == BROKEN:
        raise PluginLoadError(
            record.id,
            f"'autogpt {word}' is a command of plugin {record.id!r}, which cannot be used: "
            f"{record.reason}",
        )
    return record


def _with_requirements(record: PluginRecord, records: Iterable[PluginRecord]) -> list[PluginRecord]:
    """``record`` and what it ``requires``, transitively: what loading it needs."""
    by_id = {r.id: r for r in records}
    wanted = {record.id: record}
    stack = [record]
    while stack:
        current = stack.pop()
        for dep in current.manifest.requires if current.manifest is not None else ():
            if dep in by_id and dep not in wanted:
                wanted[dep] = by_id[dep]
                stack.append(by_id[dep])
    return list(wanted.values())


def _load_and_register(
    sub: Subparsers,
    word: str,
    record: PluginRecord,
    records: list[PluginRecord],
    config: Config,
    trace: bool,
) -> PluginCommand:
    from hookspecs import CLIContext

    from ..agent._redact import Redactor
    from ..hooks._tracing import trace_factory
    from ..plugins._loader import ENABLED, LOADED, _call_per_plugin, load

    # Who else declares each name, decided before loading changes the statuses.
    others = {
        c.name: r.id
        for r in records
        if r is not record and r.status == ENABLED and r.manifest is not None
        for c in r.manifest.cli_commands
    }
    plugins = load(
        config, records=_with_requirements(record, records), pm_factory=trace_factory(trace)
    )
    if record.status != LOADED:
        raise PluginLoadError(
            record.id,
            f"'autogpt {word}' is a command of plugin {record.id!r}, which failed to load: "
            f"{record.reason}",
        )
    assert record.manifest is not None
    assert record.settings is not None
    redactor = Redactor.from_environment()
    redactor.add(plugins.secrets)
    registered: dict[str, CLIHandler] = {}
    register = _binder(sub, record.id, record.manifest.cli_commands, others, registered)
    try:
        _call_per_plugin(plugins.pm, record.plugin, "register_cli_commands", register=register)
    except PluginError:
        raise
    except Exception as exc:
        if trace:
            text = "".join(traceback.format_exception(exc))
            from hookspecs import printable

            print(printable(redactor.text(text)), file=sys.stderr, end="")
        raise PluginError(
            record.id,
            redactor.text(
                f"plugin {record.id!r} failed in register_cli_commands: "
                f"{type(exc).__name__}: {exc}; fix the plugin or disable it "
                f"('autogpt plugins disable {record.id}')"
            ),
        ) from None
    handler = registered.get(word)
    if handler is None:
        raise RegistrationError(
            record.id,
            f"plugin {record.id!r} declares the command 'autogpt {word}' but its "
            f"register_cli_commands hook did not register it; fix: call "
            f"register({word!r}, handler) there, or remove it from the manifest's cli.commands",
        )
    ctx = CLIContext(plugin_id=record.id, settings=record.settings, redact=redactor.text)
    return PluginCommand(word, record.id, handler, ctx, redactor, trace)


def _binder(
    sub: Subparsers,
    plugin_id: str,
    declared: Iterable[CLICommandDecl],
    others: dict[str, str],
    registered: dict[str, CLIHandler],
) -> Callable[[str, CLIHandler], argparse.ArgumentParser]:
    helps = {c.name: c.help for c in declared}

    def register(name: str, handler: CLIHandler) -> argparse.ArgumentParser:
        def refuse(problem: str, fix: str) -> RegistrationError:
            return RegistrationError(
                plugin_id,
                f"plugin {plugin_id!r} registered the command line command {name!r}, "
                f"{problem}; fix: {fix}",
            )

        if not isinstance(name, str) or name not in helps:
            raise refuse(
                "which its manifest does not declare",
                f"add '{{name: {name}, help: ...}}' to cli.commands in its "
                "autogpt-plugin.yaml, or stop registering it",
            )
        if name in CORE_COMMANDS:
            raise refuse(
                "which is a core command of autogpt",
                "rename it, in cli.commands of its manifest and in register_cli_commands",
            )
        if name in others:
            raise refuse(
                f"which plugin {others[name]!r} declares too",
                f"disable one of them ('autogpt plugins disable {plugin_id}')",
            )
        if name in registered:
            raise refuse("twice", "register each command once")
        if not callable(handler):
            raise refuse(
                f"with {type(handler).__name__} as its handler, which cannot be called",
                "pass the function that runs the command",
            )
        parser: argparse.ArgumentParser = sub.add_parser(
            name, help=_help_text(helps[name]), description=_description(helps[name])
        )
        registered[name] = handler
        return parser

    return register


def add_listing(sub: Subparsers, records: Iterable[PluginRecord]) -> None:
    """List every declared plugin command in ``sub``'s help, from the manifests alone,
    each with its plugin and whether it is disabled or broken. Core names are left out:
    ``autogpt plugins check`` reports them."""
    from ..plugins._loader import BROKEN

    declared: dict[str, list[tuple[PluginRecord, str]]] = {}
    for record in records:
        for command in record.manifest.cli_commands if record.manifest is not None else ():
            if command.name not in CORE_COMMANDS and command.name not in sub.choices:
                declared.setdefault(command.name, []).append((record, command.help))
    for name in sorted(declared):
        entries = declared[name]
        enabled = [(r, h) for r, h in entries if r.enabled]
        record, text = (enabled or entries)[0]
        if len(enabled) > 1:
            note = f"[plugins {', '.join(r.id for r, _ in enabled)}: clash, see 'plugins check']"
        elif not record.enabled:
            note = f"[plugin {record.id}, disabled]"
        elif record.status == BROKEN:
            note = f"[plugin {record.id}, broken]"
        else:
            note = f"[plugin {record.id}]"
        sub.add_parser(name, help=_help_text(f"{text} {note}"), add_help=False)


def _help_text(text: str) -> str:
    from hookspecs import printable

    # argparse %-formats help strings: a plugin's '%' is text, not a placeholder.
    return printable(text).replace("%", "%%")


def _description(text: str) -> str:
    from hookspecs import printable

    shown = printable(text)
    # argparse %-formats a description only when it holds '%(prog)'.
    return shown.replace("%", "%%") if "%(prog)" in shown else shown


def cli_command_problems(records: Iterable[PluginRecord]) -> list[str]:
    """What ``autogpt plugins check`` reports about ``cli.commands``: a name that is a
    core command's, and a name two enabled plugins declare."""
    from ..plugins._loader import BROKEN

    problems = []
    owners: dict[str, str] = {}
    for record in sorted(records, key=lambda r: r.id):
        for command in record.manifest.cli_commands if record.manifest is not None else ():
            name = command.name
            if name in CORE_COMMANDS:
                problems.append(
                    f"{record.id}: declares the command line command {name!r}, which is a "
                    f"core command of autogpt; fix: rename it, in cli.commands of its manifest "
                    "and in its register_cli_commands"
                )
            elif record.enabled and record.status != BROKEN:
                if name in owners:
                    problems.append(
                        f"{record.id}: declares the command line command {name!r}, which "
                        f"plugin {owners[name]!r} declares too; fix: disable one of them "
                        f"('autogpt plugins disable {record.id}')"
                    )
                else:
                    owners[name] = record.id
    return problems
