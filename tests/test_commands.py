"""The command registry: registration against the manifest, aliases, tools, invocation."""

from __future__ import annotations

import os
import signal
import urllib.request
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings

from autogpt_core import (
    CommandArgumentsError,
    ConflictError,
    ManifestError,
    RegistrationError,
    UnknownCommandError,
)
from autogpt_core.plugins import _commands
from autogpt_core.plugins._commands import CommandRegistry
from autogpt_core.plugins._manifest import CommandDecl, Manifest, validate_manifest
from hookspecs import CommandContext, CommandResult, blocking
from tests.strategies import argument_dicts, parameter_schemas, valid_manifest_dict

PARAMS = {
    "type": "object",
    "properties": {"text": {"type": "string"}, "times": {"type": "integer", "minimum": 1}},
    "required": ["text"],
    "additionalProperties": False,
}


def _manifest(pid: str = "p", name: str = "echo", aliases: tuple[str, ...] = ("say",)) -> Manifest:
    decl = CommandDecl(name=name, description="Echo.", aliases=aliases, parameters=PARAMS)
    return Manifest(id=pid, name=pid, version="1", commands=(decl,), source=f"{pid}.yaml")


def echo(text: str, times: int = 1) -> str:
    return text * times


async def test_registers_validates_and_invokes_every_kind() -> None:
    """Sync, async and blocking functions run; results are normalised; aliases resolve."""
    registry = CommandRegistry()
    registry.binder(_manifest())("echo", echo)
    command = registry.get("say")
    assert command.name == "echo"
    assert await command.invoke({"text": "ab", "times": 2}, None) == CommandResult.success("abab")  # type: ignore[arg-type]

    async def aecho(text: str, ctx: CommandContext, times: int = 1) -> dict[str, Any]:
        return {"echo": text}

    other = CommandRegistry()
    other.binder(_manifest())("echo", aecho)
    result = await other.get("echo").invoke({"text": "x"}, "CTX")  # type: ignore[arg-type]
    assert result.data == {"echo": "x"}
    assert other.get("echo").wants_ctx

    third = CommandRegistry()
    third.binder(_manifest())("echo", blocking(echo))
    assert third.get("echo").kind == "blocking"
    assert (await third.get("echo").invoke({"text": "t"}, None)).output == "t"  # type: ignore[arg-type]


def test_arguments_are_validated_with_every_problem_named() -> None:
    """Bad arguments give one error listing each problem and the schema."""
    registry = CommandRegistry()
    registry.binder(_manifest())("echo", echo)
    with pytest.raises(CommandArgumentsError) as info:
        registry.get("echo").validate({"times": 0, "extra": 1})
    message = str(info.value)
    assert "'text' is a required property" in message
    assert "times: 0 is less than the minimum of 1" in message
    assert "'extra' was unexpected" in message


@pytest.mark.parametrize(
    ("name", "function", "expected"),
    [
        ("shout", echo, "which its manifest does not declare (declared: echo)"),
        ("say", echo, "which is an alias of 'echo'"),
        ("echo", lambda words: words, "does not accept declared parameter(s) text"),
        ("echo", lambda text, secret: text, "requires parameter(s) secret"),
        ("echo", lambda text, times: text, "no default for optional parameter(s) times"),
        ("echo", "not callable", "not a function"),
    ],
)
def test_registration_is_checked_against_the_manifest(
    name: str, function: Any, expected: str
) -> None:
    """Undeclared names, aliases and mismatched parameters are refused, naming the plugin."""
    with pytest.raises(RegistrationError, match="plugin 'p'") as info:
        CommandRegistry().binder(_manifest())(name, function)
    assert expected in str(info.value)


def test_conflicts_and_unknown_names() -> None:
    """A name or alias claimed twice is a conflict; an unknown name suggests close ones."""
    registry = CommandRegistry()
    registry.binder(_manifest("a"))("echo", echo)
    with pytest.raises(ConflictError, match="plugin 'b' and plugin 'a' both provide command 'say'"):
        registry.binder(_manifest("b", name="other", aliases=("say",)))("other", echo)
    with pytest.raises(UnknownCommandError, match="Did you mean echo"):
        registry.get("ecko")
    registry.remove_plugin("a")
    assert len(registry) == 0
    assert registry.tool_specs() == ()


def test_tool_specs_are_sorted_and_mention_aliases() -> None:
    """Tools for the model: sorted by name, with the parameters schema and the aliases."""
    registry = CommandRegistry()
    registry.binder(_manifest("z", name="zeta", aliases=()))("zeta", echo)
    registry.binder(_manifest("a"))("echo", echo)
    tools = registry.tool_specs()
    assert [t.name for t in tools] == ["echo", "zeta"]
    assert tools[0].description == "Echo. (aliases: say)"
    assert tools[0].parameters == PARAMS


# --- argument validation is bounded ------------------------------------------------------

CATASTROPHIC = {
    "type": "object",
    "properties": {"text": {"type": "string", "pattern": "^(a+)+$"}},
    "required": ["text"],
}
#: Backtracks for hours against CATASTROPHIC's pattern.
HOURS = {"text": "a" * 40 + "!"}


def _command(parameters: dict[str, Any]) -> Any:
    decl = CommandDecl(name="echo", description="Echo.", parameters=parameters)
    registry = CommandRegistry()
    registry.binder(Manifest(id="p", name="p", version="1", commands=(decl,)))(
        "echo", lambda **kwargs: "ok"
    )
    return registry.get("echo")


def _handlers() -> tuple[Any, Any, tuple[float, float]]:
    return (
        signal.getsignal(signal.SIGALRM),
        signal.getsignal(signal.SIGINT),
        signal.getitimer(signal.ITIMER_REAL),
    )


def test_a_catastrophic_pattern_is_abandoned_at_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Validation that backtracks for hours is abandoned after the deadline, naming why."""
    monkeypatch.setattr(_commands, "VALIDATION_DEADLINE", 0.2)
    command = _command(CATASTROPHIC)
    before = _handlers()
    with pytest.raises(CommandArgumentsError) as info:
        command.validate(HOURS)
    assert str(info.value).startswith(
        "argument validation for command 'echo' did not finish in 0.2 s: its schema's pattern "
        "may be catastrophic. The command was not run"
    )
    assert "plugin 'p' must simplify the pattern" in str(info.value)
    assert _handlers() == before  # the signal handlers and the timer are put back
    command.validate({"text": "aaaa"})  # and ordinary calls still validate


@pytest.mark.parametrize(
    ("schema", "guarded"),
    [
        ({"type": "object", "properties": {"text": {"type": "string"}}}, False),
        ({"type": "object", "properties": {"text": {"type": "string", "pattern": "^a"}}}, True),
        ({"type": "object", "patternProperties": {"^x": {"type": "integer"}}}, True),
        ({"type": "object", "propertyNames": {"pattern": "^[a-z]+$"}}, True),
        ({"type": "object", "properties": {"xs": {"type": "array", "uniqueItems": True}}}, True),
        (
            {
                "type": "object",
                "properties": {"p": {"$ref": "#/$defs/d"}},
                "$defs": {"d": {"type": "string", "pattern": "(a+)+$"}},
            },
            True,
        ),
    ],
)
def test_only_schemas_with_a_pattern_validate_under_the_deadline(
    schema: dict[str, Any], guarded: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interval timer guards only schemas holding a regex (the one thing that can
    backtrack for hours); the others validate without touching the signal handlers."""
    armed: list[float] = []
    real = signal.setitimer

    def recording(which: int, seconds: float, interval: float = 0.0) -> tuple[float, float]:
        armed.append(seconds)
        return real(which, seconds, interval)

    monkeypatch.setattr(signal, "setitimer", recording)
    command = _command(schema)
    assert command.guarded is guarded
    command.validate({})
    assert bool(armed) is guarded


async def test_ctrl_c_stops_a_hung_validation_and_reaches_the_listener(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C during a hung validation stops it at once and still reaches trio's listener.

    'autogpt run' listens for Ctrl-C with trio.open_signal_receiver, whose task cannot run
    while validation holds the loop: before, the Ctrl-C had no effect.
    """
    monkeypatch.setattr(_commands, "VALIDATION_DEADLINE", 60)
    command = _command(CATASTROPHIC)
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        # From another process: a thread of this one cannot run while re holds the GIL.
        killer = await trio.lowlevel.open_process(
            ["sh", "-c", f"sleep 0.5; kill -INT {os.getpid()}"]
        )
        with pytest.raises(CommandArgumentsError) as info:
            command.validate(HOURS)
        assert str(info.value) == (
            "argument validation for command 'echo' was interrupted (Ctrl-C); the command was "
            "not run"
        )
        assert await signals.__anext__() == signal.SIGINT
        await killer.wait()


def test_a_broken_schema_is_an_argument_error_not_a_crash() -> None:
    """A $ref that does not resolve (a stale cache, a hand-made decl) fails the call only."""
    command = _command({"type": "object", "properties": {"x": {"$ref": "#/$defs/gone"}}})
    with pytest.raises(CommandArgumentsError) as info:
        command.validate({"x": 1})
    message = str(info.value)
    assert message.startswith("command 'echo' cannot check its arguments: its parameters schema")
    assert "#/$defs/gone" in message
    assert "'autogpt plugins check' names the problem" in message


def test_remote_references_are_never_fetched(monkeypatch: pytest.MonkeyPatch) -> None:
    """Validation never opens a URL (it runs on the event loop); the call fails instead."""
    opened: list[object] = []
    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: opened.append(a))
    command = _command({"type": "object", "properties": {"x": {"$ref": "http://127.0.0.1:9/s"}}})
    with pytest.raises(CommandArgumentsError, match="cannot check its arguments"):
        command.validate({"x": 1})
    assert opened == []


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parameter_schemas(), argument_dicts)
def test_schemas_the_manifest_accepts_always_validate_cleanly(
    schema: dict[str, Any], arguments: dict[str, Any]
) -> None:
    """A parameters schema is refused by the manifest check, or arguments validate against
    it without error: never a schema jsonschema cannot apply at run time."""
    data = valid_manifest_dict()
    data["capabilities"]["commands"][0]["parameters"] = schema
    issues: tuple[Any, ...] = ()
    try:
        manifest = validate_manifest(data, source="m.yaml")
    except ManifestError as exc:
        issues = exc.issues
    if issues:
        prefix = "capabilities.commands[0].parameters"
        assert all(issue.field.startswith(prefix) and issue.fix for issue in issues)
        return
    registry = CommandRegistry()
    registry.binder(manifest)("fetch", lambda **kwargs: "ok")
    message = ""
    try:
        registry.get("fetch").validate(arguments)
    except CommandArgumentsError as exc:
        message = str(exc)
    assert message == "" or "got invalid arguments" in message


# --- bridged commands (register_bridged_commands) -----------------------------------------


def _bridge(permissions: tuple[str, ...] = ("network",)) -> Manifest:
    from autogpt_core.plugins._manifest import BridgedDecl

    return Manifest(
        id="bridge",
        name="Bridge",
        version="1",
        permissions=("network", "shell"),
        bridged=BridgedDecl(prefixes_from="services", permissions=permissions),
        source="bridge.yaml",
    )


async def _bridged_call(**arguments: Any) -> str:
    return "called"


def test_bridged_commands_are_checked_one_by_one() -> None:
    """A bridged command with a bad schema, a permission beyond capabilities.bridged, an
    unconfigured prefix or too long a tool name is skipped with a reason naming the plugin
    and the command; the good one is kept, needing bridge:ID besides its permissions."""
    registry = CommandRegistry()
    skipped: list[tuple[str, str]] = []
    register = registry.bridge_binder(_bridge(), ["svc"], lambda n, r: skipped.append((n, r)))
    good = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
    assert register("svc.getThing", _bridged_call, description="Get.", parameters=good)
    bad = {"type": "object", "properties": {"id": {"type": "strange"}}}
    assert not register("svc.bad", _bridged_call, description="Bad.", parameters=bad)
    assert not register("svc.sh", _bridged_call, description="Sh.", permissions=["shell"])
    assert not register("other.x", _bridged_call, description="X.")
    assert not register("svc." + "x" * 70, _bridged_call, description="Long.")
    assert not register("nodot", _bridged_call, description="No prefix.")
    reasons = dict(skipped)
    assert "plugin 'bridge': bridged command 'svc.bad' has invalid parameters" in reasons["svc.bad"]
    assert "parameters.properties.id.type" in reasons["svc.bad"]
    assert "needs shell, which capabilities.bridged.permissions does not allow" in reasons["svc.sh"]
    assert "prefix 'other' is not a key of the setting 'services'" in reasons["other.x"]
    assert "longer than the 64 characters" in reasons["svc." + "x" * 70]
    assert "is not named PREFIX.NAME" in reasons["nodot"]
    assert [c.name for c in registry] == ["svc.getThing"]
    command = registry.get("svc.getThing")
    assert command.bridged
    assert command.decl.permissions == ("bridge:bridge",)
    assert registry.get("svc__getThing") is command
    assert [t.name for t in registry.tool_specs()] == ["svc__getThing"]


def test_bridged_names_may_not_take_another_command() -> None:
    """A bridged command whose name or tool name another command has is skipped."""
    registry = CommandRegistry()
    registry.binder(_manifest(name="svc__get", aliases=()))("svc__get", echo)
    skipped: list[tuple[str, str]] = []
    register = registry.bridge_binder(_bridge(), ["svc"], lambda n, r: skipped.append((n, r)))
    assert not register("svc.get", _bridged_call, description="Get.")
    assert "'svc__get' is already a command of plugin 'p'" in skipped[0][1]


def test_only_a_bridge_registers_bridged_commands() -> None:
    """A plugin whose manifest has no capabilities.bridged cannot register bridged commands."""
    register = CommandRegistry().bridge_binder(_manifest(), ["svc"], lambda n, r: None)
    with pytest.raises(RegistrationError, match="has no capabilities.bridged"):
        register("svc.get", _bridged_call, description="Get.")
