"""Every hook has a runnable example in docs/hooks.md, and every example works."""

from __future__ import annotations

import argparse
import ast
import inspect
import re
import sys
import types
from pathlib import Path
from typing import Any

import pluggy
import pytest

import hookspecs
from hookspecs import (
    Budget,
    CommandCall,
    CommandResult,
    CommandReview,
    ConfirmationRequest,
    Event,
    EventKind,
    LLMProvider,
    LLMRequest,
    LLMResponse,
    MemoryItem,
    MemoryQuery,
    Message,
    Plan,
    PlanningContext,
    PlanReview,
    PluginSettings,
    PromptBuilder,
    ProviderOptions,
    Role,
    RuntimeView,
    SessionOutcome,
    SessionView,
    ToolCall,
    ToolSpec,
)

DOC = Path(__file__).parent.parent / "docs" / "hooks.md"
SPEC_NAMES = [
    name
    for name, value in vars(hookspecs.specs).items()
    if inspect.isfunction(value) and hasattr(value, f"{hookspecs.PROJECT_NAME}_spec")
]


def examples() -> list[tuple[str, int, str]]:
    """(section, line, code) of every ```python block, the section being the ## heading."""
    found = []
    section = ""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("## "):
            section = line[3:].strip().strip("`")
        elif line.strip() == "```python":
            end = lines.index("```", index + 1)
            found.append((section, index + 2, "\n".join(lines[index + 1 : end]) + "\n"))
            index = end
        index += 1
    return found


EXAMPLES = examples()


def load(line: int, code: str) -> types.ModuleType:
    """Exec ``code`` into a fresh module, as if it were a plugin's file."""
    module = types.ModuleType(f"hooks_example_line_{line}")
    exec(compile(code, f"{DOC}:{line}", "exec"), module.__dict__)
    return module


def manager(module: types.ModuleType) -> pluggy.PluginManager:
    """A plugin manager with the specs; pluggy checks the impls' names and arguments."""
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs.specs)
    pm.register(module)
    return pm


def test_sections_follow_the_specs() -> None:
    """There is one section per hook, in the order of hookspecs/_specs.py."""
    headings = re.findall(r"^## `(\w+)`$", DOC.read_text(encoding="utf-8"), flags=re.M)
    assert headings == SPEC_NAMES


def test_every_hook_has_exactly_one_example() -> None:
    """Each hook section holds one python block, and no python block is outside them."""
    assert [section for section, _, _ in EXAMPLES] == SPEC_NAMES


def test_every_hook_is_implemented_by_an_example() -> None:
    """Across all examples, every hook of the contract is implemented at least once."""
    implemented = set()
    for _, line, code in EXAMPLES:
        pm = manager(load(line, code))
        implemented |= {caller.name for caller in pm.get_hookcallers(pm.get_plugins().pop()) or []}
    assert implemented == set(SPEC_NAMES)


@pytest.mark.parametrize(("section", "line", "code"), EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_example_imports_only_the_contract(section: str, line: int, code: str) -> None:
    """An example imports hookspecs and the standard library, nothing of the engine."""
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            roots = {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots = {(node.module or "").split(".")[0]}
        else:
            continue
        assert roots <= sys.stdlib_module_names | {"hookspecs", "__future__"}, (section, roots)


def arguments(tmp_path: Path) -> dict[str, dict[str, object]]:
    """Simple, valid arguments for a call of each hook."""
    session = SessionView(
        id="s1", goal="count words", workspace=tmp_path, cycle=2, budget=Budget(max_cycles=5)
    )
    call = CommandCall("run_shell", {"command": "ls", "timeout": 300}, call_id="c1")

    async def complete(request: LLMRequest) -> LLMResponse:
        calls = (ToolCall(id="c1", name="finish", arguments='{"result": "done"}'),)
        return LLMResponse(message=Message(Role.ASSISTANT, "Done.", tool_calls=calls))

    return {
        "autogpt_startup": {"runtime": RuntimeView("0.1.0", tmp_path, ("example",))},
        "autogpt_shutdown": {"runtime": RuntimeView("0.1.0", tmp_path, ("example",))},
        "session_start": {"session": session},
        "session_end": {"session": session, "outcome": SessionOutcome("finished", "42", 2)},
        "configure": {"settings": PluginSettings("example", {"greeting": "Hi"}, data_dir=tmp_path)},
        "register_commands": {"register": None},  # filled in by the test
        "register_bridged_commands": {
            "register": None,
            "settings": PluginSettings(
                "example", {"people": {"ada": {"greeting": "Hello"}, "bob": {}}}
            ),
            "unmapped": None,
            "secret": None,
        },
        "register_llm_providers": {"register": None},
        "register_cli_commands": {"register": None},
        "build_prompt": {"session": session, "prompt": PromptBuilder(goal=session.goal)},
        "plan": {
            "session": session,
            "context": PlanningContext(
                messages=(Message(Role.USER, "count the words"),),
                tools=(ToolSpec("finish", "Finish.", {"type": "object"}),),
                complete=complete,
            ),
        },
        "post_plan": {
            "session": session,
            "review": PlanReview(Plan(call=CommandCall("delete_file", {"path": "a.py"}))),
        },
        "pre_command": {"session": session, "review": CommandReview(call)},
        "post_command": {"session": session, "call": call, "result": CommandResult.success("x")},
        "memory_store": {"session": session, "item": MemoryItem("Tuesdays are busy.", "s1")},
        "memory_recall": {"session": session, "query": MemoryQuery("when are releases cut")},
        "memory_forget": {"session": session, "query": MemoryQuery("busy")},
        "on_event": {
            "session": session,
            "event": Event(EventKind.RESULT, "s1", 2, {"command": "ls", "ok": False}),
        },
        "on_events": {
            "session": session,
            "events": (Event(EventKind.PLAN, "s1", 2, {"text": "list"}),),
        },
        "llm_request": {"session": session, "request": LLMRequest((Message(Role.USER, "hi"),))},
        "confirm": {
            "session": session,
            "request": ConfirmationRequest(call, "shell", ("shell",), "Run ls."),
        },
        "user_input": {"session": session, "question": "May I add dependencies?"},
    }


def test_arguments_cover_every_spec(tmp_path: Path) -> None:
    """The sample arguments name exactly the arguments of every spec."""
    samples = arguments(tmp_path)
    assert list(samples) == SPEC_NAMES
    for name in SPEC_NAMES:
        spec = getattr(hookspecs.specs, name)
        assert list(samples[name]) == list(inspect.signature(spec).parameters), name


@pytest.mark.parametrize(("section", "line", "code"), EXAMPLES, ids=[e[0] for e in EXAMPLES])
async def test_example_runs_through_pluggy(
    section: str, line: int, code: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each example registers against the specs, and each hook it implements can be called."""
    module = load(line, code)
    pm = manager(module)
    registered: dict[str, Any] = {}
    cli = argparse.ArgumentParser(prog="autogpt")
    commands = cli.add_subparsers(dest="command")

    def register_cli(name: str, handler: Any) -> argparse.ArgumentParser:
        registered[name] = handler
        parser: argparse.ArgumentParser = commands.add_parser(name)
        return parser

    for caller in pm.get_hookcallers(module) or []:
        kwargs = arguments(tmp_path)[caller.name]
        if caller.name == "register_cli_commands":
            kwargs["register"] = register_cli
        elif caller.name == "register_bridged_commands":
            kwargs["register"] = lambda name, function, **options: registered.update(
                {name: (function, options)}
            )
            kwargs["unmapped"] = lambda what, reason: registered.update({f"! {what}": reason})
            kwargs["secret"] = lambda name: None
        elif "register" in kwargs:
            kwargs["register"] = registered.__setitem__
        result = caller(**kwargs)
        # An async implementation returns a coroutine: pluggy does not await, the core does.
        for value in result if isinstance(result, list) else [result]:
            if inspect.iscoroutine(value):
                value = await value
            if caller.name == "plan":
                assert isinstance(value, Plan)
    if section == "register_commands":
        assert set(registered) == {"word_count"}
        (tmp_path / "a.txt").write_text("one two three")

        async def nobody(question: str) -> str | None:
            return None

        ctx = hookspecs.CommandContext(
            session=SessionView(id="s1", goal="g", workspace=tmp_path),
            plugin_id="example",
            settings=PluginSettings("example"),
            ask_user=nobody,
        )
        assert registered["word_count"](path="a.txt", ctx=ctx).output == "a.txt has 3 words"
    if section == "register_bridged_commands":
        assert set(registered) == {"ada.greet", "! bob"}
        function, options = registered["ada.greet"]
        assert function(name="Grace") == "Hello, Grace!"
        assert options["parameters"]["required"] == ["name"]
        assert registered["! bob"] == "it has no 'greeting' text"
    if section == "register_cli_commands":
        assert set(registered) == {"word-count"}
        (tmp_path / "a.txt").write_text("one two three")
        (tmp_path / "b.txt").write_text("four")
        args = cli.parse_args(["word-count", str(tmp_path / "a.txt"), str(tmp_path / "b.txt")])
        ctx = hookspecs.CLIContext("example", PluginSettings("example"))
        capsys.readouterr()
        assert registered["word-count"](args, ctx) == 0
        assert capsys.readouterr().out.split() == [
            "3",
            str(tmp_path / "a.txt"),
            "1",
            str(tmp_path / "b.txt"),
        ]
        total = cli.parse_args(["word-count", "--total", str(tmp_path / "a.txt")])
        assert registered["word-count"](total, ctx) == 0
        assert capsys.readouterr().out == "3\n"
    if section == "register_llm_providers":
        provider = registered["echo"](ProviderOptions())
        assert isinstance(provider, LLMProvider)
        response = await provider.complete(LLMRequest((Message(Role.USER, "ping"),)))
        assert response.message.content == "ping"
        await provider.aclose()
