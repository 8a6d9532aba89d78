"""The command dispatcher: from a model's call to a result the model reads next.

One call goes through, in order::

    validate ─► pre_command (rewrite / refuse) ─► the call is copied and validated again
      ─► permissions (granted, or the person consents; refused in continuous mode)
      ─► the lease is checked ─► the command of the plugin that owns it ─► post_command

Every failure on the way (unknown command, bad arguments, a refusal, an exception, a
timeout) becomes a failed ``CommandResult``: the model's next observation. A running
command may ask the person something (``ctx.ask_user``) or for a permission only some calls
need (``ctx.ask_permission``): its deadline stops while the person answers.

The dispatcher receives what it uses: the session's hook caller and emitter, the command
registry and the plugins' records (settings, manifests), the grants, the consent function
(who answers ``confirm``), the question function (``user_input``) and the store's lease
check. It knows nothing of the session's cycle.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager

import attrs
import trio

from hookspecs import (
    CommandCall,
    CommandContext,
    CommandResult,
    CommandReview,
    Confirmation,
    ConfirmationRequest,
    EventKind,
    MemoryQuery,
    PluginControl,
)

from .._errors import AutoGPTError, PermissionDenied, SessionInUse
from ..plugins._commands import CommandRegistry, RegisteredCommand
from ..plugins._loader import PluginRecord
from ._caller import HookCaller
from ._emitter import Emitter, result_json

#: Asks the person whether something may happen (what, the text to show): always asks.
AskAlways = Callable[[str, str], Awaitable[bool]]
#: Makes ``CommandContext.plugins`` for one call, given how to ask about it.
PluginControlFactory = Callable[[AskAlways], PluginControl]

#: Asks whoever answers for the session (the ``confirm`` hook) about a request; returns a
#: ``Confirmation``, or anything else for no answer.
Consent = Callable[[ConfirmationRequest], Awaitable[object]]
#: Asks the person a question (the ``user_input`` hook); returns the answer, or anything
#: but a string for no answer.
Question = Callable[[str], Awaitable[object]]
#: Raises ``SessionInUse`` unless this process still holds the session's lease.
LeaseCheck = Callable[[], Awaitable[None]]


@attrs.define
class Grants:
    """The permissions a command may use without asking.

    ``config``: granted to every plugin (``permissions.grant``). ``remembered``: granted to
    one plugin for the rest of the session, by an "always" answer.
    """

    config: frozenset[str]
    remembered: set[tuple[str, str]] = attrs.field(factory=set)

    def missing(self, plugin_id: str, permissions: Iterable[str]) -> tuple[str, ...]:
        """Those of ``permissions`` that ``plugin_id`` has not been granted."""
        return tuple(
            p for p in permissions if p not in self.config and (plugin_id, p) not in self.remembered
        )

    def remember(self, plugin_id: str, permissions: Iterable[str]) -> None:
        self.remembered.update((plugin_id, p) for p in permissions)


class Dispatcher:
    """Reviews, checks, confirms and runs one session's commands."""

    def __init__(
        self,
        *,
        hooks: HookCaller,
        emitter: Emitter,
        commands: CommandRegistry,
        records: Mapping[str, PluginRecord],
        grants: Grants,
        consent: Consent,
        question: Question,
        check_lease: LeaseCheck,
        continuous: bool = False,
        command_timeout: float | None = None,
        plugin_control: PluginControlFactory | None = None,
    ) -> None:
        self._hooks = hooks
        self._plugin_control = plugin_control
        #: Awaited with the call just before a command with effects runs (the session
        #: records its cycle as provisional then); ``None``: nothing is recorded.
        self.before_effects: Callable[[CommandCall], Awaitable[None]] | None = None
        self._emitter = emitter
        self._commands = commands
        self._records = records
        self.grants = grants
        self._consent = consent
        self._question = question
        self._check_lease = check_lease
        self._continuous = continuous
        self._command_timeout = command_timeout
        # The deadline of the command running now, if any (see _command_clock_stopped).
        self._command_scope: trio.CancelScope | None = None

    def rebind(self, commands: CommandRegistry, records: Mapping[str, PluginRecord]) -> None:
        """Dispatch to ``commands`` from now on (the runtime loaded plugins anew, between
        cycles)."""
        self._commands = commands
        self._records = records

    async def execute(self, call: CommandCall) -> tuple[CommandResult, CommandCall]:
        """Review, check, confirm and run ``call``; every failure becomes a result.

        Returns the result and the call that was actually run (after ``pre_command``).
        ``pre_command`` runs first, so that what is validated and confirmed is exactly
        what runs: the arguments are copied after the review, and the copy is what the
        permission check, the confirmation and the command see. A ``pre_command``
        implementation that fails counts as a refusal (a failed check never lets a
        command through).
        """
        emit = self._emitter.emit
        try:
            command = self._commands.get(call.command)
            command.validate(call.arguments)
            if self._hooks.implemented("pre_command"):
                call = await self._reviewed(call)
                command = self._commands.get(call.command)
                command.validate(call.arguments)
            else:
                # Nothing can review it: the call validated is the call run (a copy).
                call = CommandCall(call.command, copy.deepcopy(dict(call.arguments)), call.call_id)
            await self._consent_to(call, command, command.decl.permissions)
        except AutoGPTError as exc:
            refused = CommandResult.failure(str(exc))
            await emit(EventKind.RESULT, {"command": call.command, **result_json(refused)})
            return refused, call

        await emit(
            EventKind.COMMAND,
            {
                "command": command.name,
                "plugin": command.plugin_id,
                "arguments": copy.deepcopy(dict(call.arguments)),
            },
        )
        if self.before_effects is not None and _has_effects(command):
            # Recorded before it runs: a process that dies while it runs leaves this record,
            # and the session resumed elsewhere does not run it again (at most once).
            await self.before_effects(call)
        result = await self._invoke(call, command)
        replaced = await self._hooks.call("post_command", call=call, result=result)
        if isinstance(replaced, CommandResult):
            result = replaced
        await emit(EventKind.RESULT, {"command": command.name, **result_json(result)})
        return result, call

    async def _reviewed(self, call: CommandCall) -> CommandCall:
        """``pre_command``'s version of ``call``, copied: what is checked and run."""
        review = CommandReview(call)
        _, errors = await self._hooks.call_checked("pre_command", review=review)
        if errors:
            raise PermissionDenied(
                f"command {call.command!r} was not run: the pre_command check of plugin "
                f"{errors[0].plugin!r} failed ({errors[0]})"
            )
        if review.refused is not None:
            raise PermissionDenied(f"command {call.command!r} was refused: {review.refused}")
        if not isinstance(review.call, CommandCall):
            raise PermissionDenied(
                f"command {call.command!r} was not run: a pre_command implementation "
                f"replaced it with {type(review.call).__name__}, not a CommandCall"
            )
        # The model's call id stays: its tool call is the one answered with the result.
        return CommandCall(
            review.call.command, copy.deepcopy(dict(review.call.arguments)), call.call_id
        )

    async def _invoke(self, call: CommandCall, command: RegisteredCommand) -> CommandResult:
        timeout = command.decl.timeout or self._command_timeout
        ctx = CommandContext(
            session=self._emitter.view,
            plugin_id=command.plugin_id,
            settings=self._records[command.plugin_id].settings,  # type: ignore[arg-type]
            ask_user=self.ask_user,
            redact=self._emitter.text,
            ask_permission=functools.partial(self.ask_permission, call, command),
            forget=self.forget,
            plugins=self._plugins_for(call, command),
        )
        result: CommandResult | None = None
        # The last moment before the side effect: a process that stalled (stopped, swapped
        # out, asleep at a prompt) past its lease must not run a command another process
        # may be running too.
        # What is about to run is shown before it runs (on_events).
        await self._emitter.deliver()
        await self._check_lease()
        with trio.move_on_after(timeout if timeout else math.inf) as scope:
            self._command_scope = scope
            try:
                result = await command.invoke(copy.deepcopy(dict(call.arguments)), ctx)
            except SessionInUse:
                raise  # taken over while the command waited for a person: stop here
            except Exception as exc:  # the plugin's failure is the model's observation
                result = CommandResult.failure(
                    f"command {command.name!r} failed: {type(exc).__name__}: {exc}"
                )
            finally:
                self._command_scope = None
        if scope.cancelled_caught or result is None:
            # A worker thread cannot be stopped: a blocking command may still finish later.
            result = CommandResult.failure(
                f"command {command.name!r} did not finish within {timeout}s; it was abandoned "
                "and its effects, if any, may still appear"
            )
        return result

    # -- what a running command may ask for -----------------------------------------------

    async def ask_user(self, question: str) -> str | None:
        """``CommandContext.ask_user``: the person's answer; ``None`` in continuous mode or
        when nobody answers. The command's deadline stops meanwhile."""
        if self._continuous:
            return None
        with self._command_clock_stopped():
            answer = await self._question(question)
        return answer if isinstance(answer, str) else None

    async def ask_permission(
        self, call: CommandCall, command: RegisteredCommand, permission: str, reason: str
    ) -> bool:
        """``CommandContext.ask_permission`` for the command running ``call``."""
        manifest = self._records[command.plugin_id].manifest
        if manifest is None or permission not in manifest.permissions:
            raise PermissionDenied(
                f"plugin {command.plugin_id!r} asked for permission {permission!r}, which its "
                f"manifest does not declare; add it to 'permissions' in the manifest"
            )
        try:
            with self._command_clock_stopped():
                await self._consent_to(call, command, (permission,), reason=reason)
        except PermissionDenied:
            return False
        # The person may have answered long after the question: if another process has
        # taken the session over meanwhile, this one must not act on it.
        await self._check_lease()
        return True

    def _plugins_for(self, call: CommandCall, command: RegisteredCommand) -> PluginControl | None:
        """``CommandContext.plugins``: for a plugin whose manifest declares ``install``."""
        manifest = self._records[command.plugin_id].manifest
        if self._plugin_control is None or manifest is None:
            return None
        if "install" not in manifest.permissions:
            return None
        return self._plugin_control(functools.partial(self.ask_always, call, command))

    async def ask_always(
        self, call: CommandCall, command: RegisteredCommand, what: str, shown: str
    ) -> bool:
        """Ask the person whether ``what`` may happen (a plugin enabled or installed),
        showing ``shown`` (its manifest), whatever the config grants; ``False`` when
        refused or unanswered, and without asking in continuous mode."""
        decided = {"command": call.command, "plugin": command.plugin_id, "missing": ["install"]}
        if self._continuous:
            await self._emitter.emit(
                EventKind.CONFIRMATION,
                {**decided, "approved": False, "reason": "continuous mode"},
            )
            return False
        arguments = self._emitter.value(copy.deepcopy(dict(call.arguments)))
        request = ConfirmationRequest(
            call=CommandCall(call.command, arguments, call.call_id),
            plugin_id=command.plugin_id,
            missing_permissions=("install",),
            description=self._emitter.text(what),
            reason=self._emitter.text(shown),
        )
        with self._command_clock_stopped():
            answer = await self._consent(request)
        approved = isinstance(answer, Confirmation) and answer.approved
        answered = answer.reason if isinstance(answer, Confirmation) else "nobody answered"
        await self._emitter.emit(
            EventKind.CONFIRMATION, {**decided, "approved": approved, "reason": answered}
        )
        if approved:
            await self._check_lease()
        return approved

    async def forget(self, query: MemoryQuery) -> int:
        """``memory_forget`` in every backend; how many items they forgot in all."""
        answers = await self._hooks.call("memory_forget", query=query) or []
        return sum(n for n in answers if isinstance(n, int) and not isinstance(n, bool))

    @contextmanager
    def _command_clock_stopped(self) -> Iterator[None]:
        """While a running command waits for the person, its own deadline does not run:
        the time spent answering is added back to it."""
        scope = self._command_scope
        if scope is None:
            yield
            return
        saved, started = scope.deadline, trio.current_time()
        scope.deadline = math.inf
        try:
            yield
        finally:
            scope.deadline = saved + (trio.current_time() - started)

    # -- permissions ----------------------------------------------------------------------

    async def _consent_to(
        self,
        call: CommandCall,
        command: RegisteredCommand,
        permissions: tuple[str, ...],
        *,
        reason: str = "",
    ) -> None:
        """Return if ``command`` may use ``permissions`` for ``call``; else ask the person,
        or raise ``PermissionDenied`` (always in continuous mode).

        Grants from the config apply to every plugin; an "always" answer grants the
        permissions to that plugin only, for the rest of the session.
        """
        plugin_id = command.plugin_id
        missing = self.grants.missing(plugin_id, permissions)
        if not missing:
            return
        perms = ", ".join(missing)
        why = f" ({reason})" if reason else ""
        decided = {"command": call.command, "plugin": plugin_id, "missing": list(missing)}
        if self._continuous:
            await self._emitter.emit(
                EventKind.CONFIRMATION,
                {**decided, "approved": False, "reason": "continuous mode"},
            )
            raise PermissionDenied(
                f"command {call.command!r} needs permission {perms}{why}, which is not granted, "
                "and this session runs unattended (continuous mode), so it was not run. Use "
                f"another command; an operator can grant {perms} under permissions.grant in "
                "the config"
            )
        # The confirmer gets its own copy (nothing it does can change what runs), whole but
        # for secrets, which a confirmer could print: those show as "***".
        shown = self._emitter.value(copy.deepcopy(dict(call.arguments)))
        request = ConfirmationRequest(
            call=CommandCall(call.command, shown, call.call_id),
            plugin_id=plugin_id,
            missing_permissions=missing,
            description=command.decl.description,
            reason=reason,
        )
        answer = await self._consent(request)
        approved = isinstance(answer, Confirmation) and answer.approved
        answered = answer.reason if isinstance(answer, Confirmation) else "nobody answered"
        await self._emitter.emit(
            EventKind.CONFIRMATION, {**decided, "approved": approved, "reason": answered}
        )
        if not approved:
            raise PermissionDenied(
                f"the user did not allow command {call.command!r} (needs {perms}{why})"
                + (f": {answered}" if answered else "")
                + ". Try another way to reach the goal"
            )
        if isinstance(answer, Confirmation) and answer.remember:
            self.grants.remember(plugin_id, missing)


def _has_effects(command: RegisteredCommand) -> bool:
    """Whether running ``command`` twice could differ from running it once: it declares a
    permission beyond reading the workspace (writing, the network, the shell, a bridge)."""
    return bool(set(command.decl.permissions) - {"fs.read"})
