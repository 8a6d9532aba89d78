"""An example plugin, packaged as its own distribution."""

from __future__ import annotations

from hookspecs import PluginSettings, PromptBuilder, RegisterCommand, SessionView, hookimpl

_greeting = "Hello"


@hookimpl
def configure(settings: PluginSettings) -> None:
    global _greeting
    _greeting = str(settings.values.get("greeting") or "Hello")


def say_hello(name: str) -> str:
    return f"{_greeting}, {name}!"


@hookimpl
def register_commands(register: RegisterCommand) -> None:
    register("say_hello", say_hello)


@hookimpl
def build_prompt(session: SessionView, prompt: PromptBuilder) -> None:
    prompt.add_constraint("Be polite: greet people with the say_hello command.")
