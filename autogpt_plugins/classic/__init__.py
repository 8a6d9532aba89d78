"""The classic bridge: plugins written for Auto-GPT 0.4 (``AutoGPTPluginTemplate``), loaded
from zip files and directories as Auto-GPT loaded them, as an ordinary bridge.

``plugins.settings.classic.sources`` lists zip files and directories;
``plugins.settings.classic.plugins`` is the allowlist, keyed by each plugin's class name
(the key of Auto-GPT's ``plugins_config.yaml``). At load every package of every source is
imported under a private name (``_loading.py``: never as ``autogpt_plugins.NAME``, so the
built-ins are neither shadowed nor merged), each allowed subclass of
``AutoGPTPluginTemplate`` is created, and its ``post_prompt`` is given a recording
``PromptGenerator`` (``_prompt.py``): each ``add_command`` becomes the command
``PLUGIN.NAME`` (the model calls it ``PLUGIN__NAME``), its argument hints a JSON Schema.

Its ``can_handle_X``/``X`` pairs run in the matching hooks (``_mapping.py`` has the
table), ``X`` only when ``can_handle_X()`` says so; what no hook can call is reported with
the reason (``autogpt plugins check``). Every call of a classic command needs
``bridge:classic`` (asked each time unless granted; refused in continuous mode).

A classic plugin that fails -- at load, in a hook, in a command -- is reported naming it,
and the others and the runtime go on: at load through ``unmapped``; in a command as a
failed result the model reads; in a hook as an error event (of the next ``build_prompt``,
``post_plan`` or ``session_end`` when the failing hook must return its value).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

import attrs

from hookspecs import (
    CommandCall,
    CommandFunction,
    CommandResult,
    CommandReview,
    Event,
    EventKind,
    LLMRequest,
    LLMResponse,
    Message,
    PlanReview,
    PluginSettings,
    PromptBuilder,
    RegisterBridgedCommand,
    ReportUnmapped,
    Role,
    SessionOutcome,
    SessionView,
    hookimpl,
)

from ._loading import (
    PRIVATE_PREFIX,
    Package,
    SourceError,
    import_package,
    package_dirs,
    packages,
    plugin_classes,
    resolve,
)
from ._mapping import (
    UNMAPPED,
    ReplyError,
    message_dicts,
    plan_from_reply,
    reply_dict,
    report_text,
)
from ._prompt import PromptGenerator, command_name, hint_schema, parameters_schema, prompt_text
from ._thread import PluginThread

TEMPLATE_MODULE = "auto_gpt_plugin_template"
#: How long creating a classic plugin, its ``post_prompt`` or a ``can_handle_X`` may take
#: at load before the plugin is reported as stuck (its thread is left to finish).
LOAD_SECONDS = 60.0
_WHERE = "plugins.settings.classic"


class ClassicPluginError(Exception):
    """A classic plugin's method failed in a hook; the message names the plugin and the
    method (the core reports it as an error event, and the session goes on)."""


@attrs.define(eq=False)
class Classic:
    """One loaded classic plugin: its prefix (its allowlist key), where it came from, the
    instance, and what its ``post_prompt`` added."""

    prefix: str
    source: str
    class_name: str
    instance: Any
    prompt: PromptGenerator
    #: Where every call of its code runs, one at a time (``_thread.py``).
    thread: PluginThread
    #: The module it was imported from (``_autogpt_classic_<token>.NAME``): a load of the
    #: same module, class and prefix keeps this plugin rather than creating it again.
    module: str = ""
    prompt_text: str = ""
    #: What was reported of it at load (``unmapped``), reported again when it is kept.
    reports: list[tuple[str, str]] = attrs.field(factory=list)


@attrs.frozen
class _State:
    """What hooks read: the plugins of the last load, swapped in whole (a load runs in
    another thread while hooks of cycles in flight run)."""

    plugins: tuple[Classic, ...] = ()
    #: A classic command's names: the core's (PREFIX.NAME and the tool PREFIX__NAME) ->
    #: add_command's NAME, which the plugins' pre_command/post_command are given ...
    classic_names: Mapping[str, str] = attrs.field(factory=dict)
    #: ... and back, for a pre_command that renames a call to another classic command.
    ours: Mapping[str, str] = attrs.field(factory=dict)


@attrs.define
class _Load:
    """One load in the making."""

    register: RegisterBridgedCommand
    unmapped: ReportUnmapped
    allowed: Mapping[str, str]
    #: The previous load's plugins, by (module, class name, prefix): kept when found again.
    previous: dict[tuple[str, str, str], Classic]
    plugins: list[Classic] = attrs.field(factory=list)
    classic_names: dict[str, str] = attrs.field(factory=dict)
    ours: dict[str, str] = attrs.field(factory=dict)

    @property
    def loaded(self) -> set[str]:
        """The prefixes loaded so far."""
        return {plugin.prefix for plugin in self.plugins}


class _Stuck(Exception):
    """Plugin code did not return within ``LOAD_SECONDS`` at load."""


class ClassicBridge:
    """The plugin object: what it keeps is the classic plugins of this load."""

    def __init__(self) -> None:
        self._state = _State()
        self._errors: dict[str, list[str]] = {}
        self._conversations: dict[str, tuple[Message, ...]] = {}
        self._max_output = 20_000

    @property
    def _plugins(self) -> tuple[Classic, ...]:
        return self._state.plugins

    # --- at load -------------------------------------------------------------------------

    @hookimpl
    def register_bridged_commands(
        self, register: RegisterBridgedCommand, settings: PluginSettings, unmapped: ReportUnmapped
    ) -> None:
        values = settings.values
        self._max_output = int(values.get("max_output", 20_000))
        previous = {(p.module, p.class_name, p.prefix): p for p in self._state.plugins}
        load = _Load(register, unmapped, {}, previous)
        try:
            template = importlib.import_module(TEMPLATE_MODULE).AutoGPTPluginTemplate
        except (ImportError, AttributeError) as exc:
            unmapped(
                "auto-gpt-plugin-template",
                f"it cannot be imported ({exc}), so no classic plugin loads: "
                "pip install 'autogpt-core[classic]'",
            )
        else:
            load.allowed = _allowlist(values.get("plugins"), unmapped)
            for index, entry in enumerate(values.get("sources") or []):
                self._load_source(load, index, entry, settings, template)
            for key in sorted(set(load.allowed.values()) - load.loaded):
                unmapped(
                    key,
                    f"it is in {_WHERE}.plugins, but no source holds a plugin class of that "
                    f"name (or it failed, see above); check the name (the plugin's class "
                    f"name) and {_WHERE}.sources",
                )
        # One assignment: a hook sees the previous load or this one, never a mix.
        self._state = _State(tuple(load.plugins), load.classic_names, load.ours)
        # A plugin not kept is unloaded: a call still made to it (by a cycle that started
        # before this load) fails at once rather than waiting.
        for old in previous.values():
            if old not in load.plugins:
                old.thread.close()

    def _load_source(
        self, load: _Load, index: int, entry: object, settings: PluginSettings, template: type
    ) -> None:
        unmapped = load.unmapped
        if not isinstance(entry, str) or not entry.strip():
            unmapped(f"sources[{index}]", "must be the path of a zip file or a directory")
            return
        path = resolve(entry, settings.config_dir)
        try:
            found = packages(entry, path)
        except SourceError as exc:
            unmapped(entry, str(exc))
            return
        if not found:
            unmapped(
                entry,
                f"{path} holds no Python package: an Auto-GPT 0.4 plugin's zip holds "
                "autogpt_plugins/NAME/__init__.py; give such a zip, or its unzipped directory",
            )
            return
        classes = 0
        searched: list[str] = []
        for package in found:
            declared = package.declared
            if declared.unreadable is not None:
                searched.append(package.name)
                classes += 1  # reported here, not as a package without a plugin class
                unmapped(
                    f"{package.source}: {package.name}", f"not imported: {declared.unreadable}"
                )
                continue
            if not _names_allowed(declared.names, load.allowed):
                # Never imported, so its code never runs: reported as _load reports a class
                # not in the allowlist, for each class it defines (one defining none holds
                # no plugin class, reported below).
                searched.append(package.name)
                for name in declared.classes:
                    classes += 1
                    unmapped(f"{package.source}: {name}", _not_allowed(name))
                continue
            try:
                module = import_package(package)
            except SourceError as exc:
                unmapped(f"{package.source}: {package.name}", str(exc))
                continue
            searched.append(package.name)
            for cls in plugin_classes(module, template):
                classes += 1
                self._load(load, package, cls)
        if searched and not classes:
            unmapped(
                entry,
                f"no class in its package(s) {', '.join(searched)} subclasses "
                "AutoGPTPluginTemplate, so it holds no classic plugin: is it an Auto-GPT "
                "0.4 plugin? (its __init__.py defines or imports the plugin class)",
            )

    def _load(self, load: _Load, package: Package, cls: type) -> None:
        """Create one classic plugin (or keep the previous load's), take its commands,
        report what cannot be mapped."""
        name = cls.__name__
        what = f"{package.source}: {name}"
        key = load.allowed.get(name) or load.allowed.get(command_name(name))
        if key is None:
            load.unmapped(what, _not_allowed(name))
            return
        if key in load.loaded:
            load.unmapped(
                what,
                f"not loaded: a plugin named {key} is already loaded from an earlier source; "
                "keep one of the two",
            )
            return
        kept = load.previous.get((package.module_name, name, key))
        if kept is not None:
            # The same code as before (the module's name changes with its file): neither
            # created nor asked for its commands again.
            load.plugins.append(kept)
            for reported in kept.reports:
                load.unmapped(*reported)
            self._register(load, kept)
            return
        if inspect.isabstract(cls):
            missing = ", ".join(sorted(getattr(cls, "__abstractmethods__", ())))
            load.unmapped(
                what,
                f"it cannot be created: it does not implement {missing}, which "
                "AutoGPTPluginTemplate requires (is it written for another template version?)",
            )
            return
        thread = PluginThread(key)
        try:
            instance = thread.call(cls, timeout=LOAD_SECONDS)
        except Exception as exc:
            thread.close()
            load.unmapped(
                what,
                f"creating it failed: {type(exc).__name__}: {exc}; check what it needs "
                "(its environment variables, its files)",
            )
            return
        plugin = Classic(
            key, package.source, name, instance, PromptGenerator(), thread, package.module_name
        )

        def report(where: str, why: str) -> None:
            plugin.reports.append((where, why))
            load.unmapped(where, why)

        try:
            if self._wants_at_load(plugin, "post_prompt", report):
                try:
                    thread.call(
                        functools.partial(instance.post_prompt, plugin.prompt),
                        timeout=LOAD_SECONDS,
                    )
                except TimeoutError:
                    raise _Stuck(f"post_prompt did not return within {LOAD_SECONDS:g} s") from None
                except Exception as exc:
                    plugin.prompt = PromptGenerator()
                    report(
                        f"{key}: post_prompt",
                        f"it raised {type(exc).__name__}: {exc}; none of its commands are "
                        "offered (its other methods still run): fix what it needs and load again",
                    )
                else:
                    plugin.prompt_text = prompt_text(plugin.prompt)
            for method, reason in UNMAPPED.items():
                if self._wants_at_load(plugin, method, report):
                    report(f"{key}: {method}", reason)
        except _Stuck as exc:
            thread.close()
            load.unmapped(
                what,
                f"not loaded: its {exc} (it is stuck, or waits on something that does not "
                "come); fix it and load again",
            )
            return
        load.plugins.append(plugin)
        self._register(load, plugin)

    def _wants_at_load(
        self, plugin: Classic, method: str, report: Callable[[str, str], None]
    ) -> bool:
        can = getattr(plugin.instance, f"can_handle_{method}", None)
        if not callable(can):
            return False
        try:
            # Auto-GPT asked about embeddings with the text; any text says whether it can.
            args = ("",) if method == "text_embedding" else ()
            return bool(plugin.thread.call(functools.partial(can, *args), timeout=LOAD_SECONDS))
        except TimeoutError:
            raise _Stuck(f"can_handle_{method} did not return within {LOAD_SECONDS:g} s") from None
        except Exception as exc:
            report(
                f"{plugin.prefix}: can_handle_{method}",
                f"it raised {type(exc).__name__}: {exc}; {method} is not used",
            )
            return False

    def _register(self, load: _Load, plugin: Classic) -> None:
        for command in plugin.prompt.commands:
            raw_name, args, function = command["name"], command["args"], command["function"]
            name = command_name(raw_name)
            if not name:
                load.unmapped(f"{plugin.prefix}: add_command", "it gave no command name")
                continue
            where = f"{plugin.prefix}.{name}"
            if not callable(function):
                load.unmapped(where, "its add_command gave no function to run")
                continue
            if args is None:
                args = {}
            if not isinstance(args, Mapping):
                load.unmapped(where, "its add_command args are not a mapping of names to hints")
                continue
            label = str(command["label"] or "").strip()
            raw = str(raw_name)
            load.classic_names.update({where: raw, f"{plugin.prefix}__{name}": raw})
            load.ours.setdefault(raw, where)
            load.register(
                where,
                self._command(plugin, name, function),
                description=label or f"{raw_name}: a command of the classic plugin {plugin.prefix}",
                parameters=parameters_schema(args),
                permissions=[],
            )

    def _command(self, plugin: Classic, name: str, function: Callable[..., Any]) -> CommandFunction:
        """The function behind one bridged command: Auto-GPT called it with the arguments
        as keywords; it runs in the plugin's thread (it may block)."""

        async def run(**arguments: Any) -> CommandResult:
            try:
                output = await plugin.thread.run(functools.partial(function, **arguments))
            except Exception as exc:
                return CommandResult.failure(
                    f"the command {plugin.prefix}.{name} of the classic plugin "
                    f"{plugin.class_name} failed: {type(exc).__name__}: {exc}"
                )
            return CommandResult.success(_cut(_text(output), self._max_output))

        run.__name__ = name
        return run

    # --- in a session --------------------------------------------------------------------

    async def _if_can(
        self,
        session: SessionView,
        plugin: Classic,
        method: str,
        can_args: tuple[Any, ...],
        call: Callable[[], Any],
        *,
        strict: bool = False,
    ) -> tuple[bool, Any]:
        """In the plugin's thread, in one hop: ``can_handle_<method>(*can_args)``, then
        ``call()`` if it said yes. Returns ``(called, what call returned)``. A failing
        ``can_handle`` is noted (raised, with ``strict``); a failing ``call`` raises."""

        def both() -> tuple[str, Any]:
            can = getattr(plugin.instance, f"can_handle_{method}", None)
            if not callable(can):
                return "no", None
            try:
                if not can(*can_args):
                    return "no", None
            except Exception as exc:
                return "can failed", exc
            return "yes", call()

        answer, value = await plugin.thread.run(both)
        if answer == "can failed":
            if strict:
                raise ClassicPluginError(
                    f"classic plugin {plugin.prefix} ({plugin.source}): can_handle_{method} "
                    f"raised {type(value).__name__}: {value}"
                ) from value
            self._note(session, plugin, f"can_handle_{method}", value)
            return False, None
        return answer == "yes", value

    def _note(self, session: SessionView, plugin: Classic, method: str, exc: Exception) -> None:
        self._errors.setdefault(session.id, []).append(
            f"classic plugin {plugin.prefix} ({plugin.source}): {method} raised "
            f"{type(exc).__name__}: {exc}; it was skipped"
        )

    def _report_errors(self, session: SessionView) -> None:
        errors = self._errors.pop(session.id, None)
        if errors:
            raise ClassicPluginError("; ".join(errors))

    @hookimpl
    async def build_prompt(self, session: SessionView, prompt: PromptBuilder) -> None:
        conversation = message_dicts(self._conversations.get(session.id, ()))
        for plugin in self._plugins:
            if plugin.prompt_text:
                prompt.add_data(
                    plugin.prompt_text, source=f"classic Auto-GPT plugin {plugin.prefix}"
                )
            instance = plugin.instance
            try:
                called, text = await self._if_can(
                    session,
                    plugin,
                    "on_planning",
                    (),
                    _late(instance, "on_planning", plugin.prompt, conversation),
                )
            except Exception as exc:
                self._note(session, plugin, "on_planning", exc)
                continue
            if called and isinstance(text, str) and text.strip():
                prompt.add_data(
                    text, source=f"classic Auto-GPT plugin {plugin.prefix} (on_planning)"
                )
        self._report_errors(session)

    @hookimpl(specname="llm_request")
    async def handle_chat_completion(
        self, session: SessionView, request: LLMRequest
    ) -> LLMResponse | None:
        """A classic plugin that handles the chat completion answers it (text only)."""
        messages = message_dicts(request.messages)
        model = request.model or ""
        temperature = request.temperature if request.temperature is not None else 0.0
        max_tokens = request.max_tokens or 0
        args = (messages, model, temperature, max_tokens)
        for plugin in self._plugins:
            try:
                called, text = await self._if_can(
                    session,
                    plugin,
                    "chat_completion",
                    args,
                    _late(plugin.instance, "handle_chat_completion", *args),
                )
            except Exception as exc:
                self._note(session, plugin, "handle_chat_completion", exc)
                continue
            if called and isinstance(text, str):
                return LLMResponse(Message(Role.ASSISTANT, text), model=request.model)
        return None

    @hookimpl(wrapper=True, specname="llm_request")
    async def on_response(
        self, session: SessionView, request: LLMRequest
    ) -> AsyncGenerator[LLMResponse | None, LLMResponse | None]:
        """Keeps the conversation (for ``on_planning``), and lets ``on_response`` rewrite
        the text of the model's answer."""
        self._conversations[session.id] = request.messages
        response = yield None
        if isinstance(response, LLMResponse) and response.message.content:
            text = response.message.content
            for plugin in self._plugins:
                try:
                    called, changed = await self._if_can(
                        session,
                        plugin,
                        "on_response",
                        (),
                        _late(plugin.instance, "on_response", text),
                    )
                except Exception as exc:
                    self._note(session, plugin, "on_response", exc)
                    continue
                if called and isinstance(changed, str):
                    text = changed
            if text != response.message.content:
                message = attrs.evolve(response.message, content=text)
                response = attrs.evolve(response, message=message)
        yield response

    @hookimpl
    async def post_plan(self, session: SessionView, review: PlanReview) -> None:
        for plugin in self._plugins:
            try:
                called, reply = await self._if_can(
                    session,
                    plugin,
                    "post_planning",
                    (),
                    _late(plugin.instance, "post_planning", reply_dict(review.plan)),
                )
                if called:
                    review.plan = plan_from_reply(reply, review.plan)
            except ReplyError as exc:
                self._errors.setdefault(session.id, []).append(
                    f"classic plugin {plugin.prefix} ({plugin.source}): post_planning was "
                    f"ignored: {exc}"
                )
            except Exception as exc:
                self._note(session, plugin, "post_planning", exc)
        self._report_errors(session)

    @hookimpl
    async def pre_command(self, session: SessionView, review: CommandReview) -> None:
        for plugin in self._plugins:
            call = review.call
            # Auto-GPT gave a command's own name (add_command's), not the prefixed one.
            shown = self._state.classic_names.get(call.command, call.command)
            try:
                # A failing check never lets a command through: the core refuses it.
                called, changed = await self._if_can(
                    session,
                    plugin,
                    "pre_command",
                    (),
                    _late(plugin.instance, "pre_command", shown, dict(call.arguments)),
                    strict=True,
                )
            except ClassicPluginError:
                raise
            except Exception as exc:
                raise ClassicPluginError(
                    f"classic plugin {plugin.prefix} ({plugin.source}): pre_command raised "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            if not called:
                continue
            if (
                not isinstance(changed, (tuple, list))
                or len(changed) != 2
                or not isinstance(changed[0], str)
                or not isinstance(changed[1], Mapping)
            ):
                raise ClassicPluginError(
                    f"classic plugin {plugin.prefix} ({plugin.source}): pre_command returned "
                    f"{type(changed).__name__}, not (command name, arguments)"
                )
            name = (
                call.command
                if changed[0] == shown
                else self._state.ours.get(changed[0], changed[0])
            )
            review.call = CommandCall(name, dict(changed[1]), call.call_id)

    @hookimpl
    async def post_command(
        self, session: SessionView, call: CommandCall, result: CommandResult
    ) -> CommandResult | None:
        said = result.output if result.ok else (result.error or "")
        text = said
        shown = self._state.classic_names.get(call.command, call.command)
        for plugin in self._plugins:
            try:
                called, changed = await self._if_can(
                    session,
                    plugin,
                    "post_command",
                    (),
                    _late(plugin.instance, "post_command", shown, text),
                )
            except Exception as exc:
                self._note(session, plugin, "post_command", exc)
                continue
            if called and isinstance(changed, str):
                text = changed
        if text == said:
            return None
        if result.ok:
            return attrs.evolve(result, output=text)
        return attrs.evolve(result, error=text)

    @hookimpl
    async def user_input(self, session: SessionView, question: str) -> str | None:
        for plugin in self._plugins:
            try:
                called, answer = await self._if_can(
                    session,
                    plugin,
                    "user_input",
                    (question,),
                    _late(plugin.instance, "user_input", user_input=question),
                )
            except Exception as exc:
                self._note(session, plugin, "user_input", exc)
                continue
            if called and isinstance(answer, str) and answer:
                return answer
        return None

    @hookimpl
    async def on_event(self, session: SessionView, event: Event) -> None:
        text = report_text(event)
        if text is None:
            return
        for plugin in self._plugins:
            try:
                await self._if_can(
                    session, plugin, "report", (), _late(plugin.instance, "report", text)
                )
            except Exception as exc:
                self._note(session, plugin, "report", exc)
        if event.kind == EventKind.SESSION_END:
            # Its session_end has run: an error noted now has no later hook to be told in.
            self._errors.pop(session.id, None)

    @hookimpl
    def session_end(self, session: SessionView, outcome: SessionOutcome) -> None:
        self._conversations.pop(session.id, None)
        self._report_errors(session)

    @hookimpl
    def autogpt_shutdown(self) -> None:
        self._close_threads()

    def _close_threads(self) -> None:
        for plugin in self._state.plugins:
            plugin.thread.close()


def _late(instance: Any, method: str, *args: Any, **kwargs: Any) -> Callable[[], Any]:
    """``instance.method(*args, **kwargs)``, the method looked up when called (in the
    plugin's thread, after its ``can_handle_X`` said yes: a plugin that cannot handle X
    need not have X)."""
    return lambda: getattr(instance, method)(*args, **kwargs)


def _not_allowed(name: str) -> str:
    return (
        f"not loaded: it is not in the allowlist; add {command_name(name)}: {{}} under "
        f"{_WHERE}.plugins to load it"
    )


def _names_allowed(names: frozenset[str], allowed: Mapping[str, str]) -> bool:
    """Whether any of ``names`` (a package's, see ``declared_names``) is allowed, as
    ``_load`` matches a class name."""
    return any(n in allowed or command_name(n) in allowed for n in names)


def _allowlist(raw: object, unmapped: ReportUnmapped) -> dict[str, str]:
    """``name -> key`` of ``plugins.settings.classic.plugins``: each key as written, and
    the class name it stands for."""
    if not isinstance(raw, Mapping):
        return {}
    allowed: dict[str, str] = {}
    for key, entry in raw.items():
        if entry is not None and (
            not isinstance(entry, Mapping) or set(map(str, entry)) - {"config"}
        ):
            unmapped(
                str(key),
                f"{_WHERE}.plugins.{key} must be {{}} (or {{config: {{...}}}}, kept as "
                "Auto-GPT's plugins_config.yaml had it)",
            )
            continue
        allowed[str(key)] = str(key)
    return allowed


def _text(output: object) -> str:
    if output is None:
        return ""
    if isinstance(output, str):
        return output
    if isinstance(output, bytes):
        return output.decode("utf-8", errors="replace")
    try:
        return json.dumps(output, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(output)


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[cut: {len(text) - limit:,} more characters were not shown]"


__all__ = [
    "PRIVATE_PREFIX",
    "ClassicBridge",
    "ClassicPluginError",
    "PromptGenerator",
    "SourceError",
    "hint_schema",
    "package_dirs",
    "parameters_schema",
]
