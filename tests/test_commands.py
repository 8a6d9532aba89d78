"""The command registry: registration against the manifest, aliases, tools, invocation."""

from __future__ import annotations

from typing import Any

import pytest

from autogpt_core import (
    CommandArgumentsError,
    ConflictError,
    RegistrationError,
    UnknownCommandError,
)
from autogpt_core._commands import CommandRegistry
from autogpt_core._manifest import CommandDecl, Manifest
from hookspecs import CommandContext, CommandResult, blocking

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
