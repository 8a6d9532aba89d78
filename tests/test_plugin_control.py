"""The control plugin's commands: finish and ask_user."""

from __future__ import annotations

from pathlib import Path

from autogpt_plugins import control
from hookspecs import CommandContext, PluginSettings, SessionView
from tests.plugincheck import check_plugin


def context(answer: str | None, asked: list[str] | None = None) -> CommandContext:
    async def ask_user(question: str) -> str | None:
        if asked is not None:
            asked.append(question)
        return answer

    return CommandContext(
        session=SessionView(id="s1", goal="g", workspace=Path(".")),
        plugin_id="control",
        settings=PluginSettings(plugin_id="control"),
        ask_user=ask_user,
    )


def test_finish_returns_a_final_result() -> None:
    """finish ends the session with the given result."""
    result = control.finish(result="The poem is in poem.txt.")
    assert (result.ok, result.final, result.output) == (True, True, "The poem is in poem.txt.")


async def test_ask_user_returns_the_answer() -> None:
    """ask_user passes the question on and returns the user's answer."""
    asked: list[str] = []
    answer = await control.ask_user(question="Which colour?", ctx=context("blue", asked))
    assert (answer, asked) == ("blue", ["Which colour?"])


async def test_ask_user_without_a_user_says_to_continue() -> None:
    """With nobody to answer, the model is told to decide on its own."""
    answer = await control.ask_user(question="Which colour?", ctx=context(None))
    assert answer == "No user is available to answer; decide on your own and continue."


async def test_ask_user_empty_answer_is_reported() -> None:
    """An empty reply is described rather than returned as an empty string."""
    assert "empty" in await control.ask_user(question="Anything?", ctx=context("  "))


def test_manifest_declares_exactly_the_registered_commands() -> None:
    """The manifest is valid and its commands match the registered functions' parameters."""
    manifest = check_plugin(control)
    names = [command["name"] for command in manifest["capabilities"]["commands"]]
    assert names == ["finish", "ask_user"]
