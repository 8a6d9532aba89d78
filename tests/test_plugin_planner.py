"""The default planner turns the model's answer into a Plan."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import jsonschema
import pluggy
import yaml

import hookspecs
from autogpt_plugins import planner
from hookspecs import (
    LLMRequest,
    LLMResponse,
    Message,
    PlanningContext,
    PromptBuilder,
    Role,
    SessionView,
    ToolCall,
    ToolSpec,
    Usage,
)

PlanCompleter = Callable[[LLMRequest], Awaitable[LLMResponse]]
SESSION = SessionView(id="s1", goal="write a poem", workspace=Path("."))
NO_USAGE = Usage()
TOOLS = (ToolSpec("write_file", "Write a file.", {"type": "object", "properties": {}}),)


def scripted(*messages: Message, usage: Usage = NO_USAGE) -> tuple[PlanCompleter, list[LLMRequest]]:
    """A ``complete`` function answering with ``messages`` in turn, recording the requests."""
    requests: list[LLMRequest] = []
    answers = iter(messages)

    async def complete(request: LLMRequest) -> LLMResponse:
        requests.append(request)
        return LLMResponse(message=next(answers), usage=usage)

    return complete, requests


def context_for(complete: PlanCompleter) -> PlanningContext:
    return PlanningContext(
        messages=(Message(Role.USER, "go"),), tools=TOOLS, complete=complete, model="m1"
    )


def assistant(content: str = "", *calls: tuple[str, str]) -> Message:
    tool_calls = tuple(ToolCall(id=f"c{i}", name=n, arguments=a) for i, (n, a) in enumerate(calls))
    return Message(Role.ASSISTANT, content, tool_calls=tool_calls)


async def test_tool_call_becomes_the_command_call() -> None:
    """The first tool call is parsed into a CommandCall; text, message and usage are kept."""
    message = assistant("Saving it.", ("write_file", '{"path": "poem.txt", "content": "Roses"}'))
    complete, requests = scripted(message, usage=Usage(prompt_tokens=12, completion_tokens=3))
    plan = await planner.plan(session=SESSION, context=context_for(complete))
    assert plan.call is not None
    assert plan.call.command == "write_file"
    assert plan.call.arguments == {"path": "poem.txt", "content": "Roses"}
    assert plan.call.call_id == "c0"
    assert (plan.text, plan.assistant_message, plan.error) == ("Saving it.", message, None)
    assert plan.usage.total_tokens == 15
    assert requests == [LLMRequest(messages=(Message(Role.USER, "go"),), tools=TOOLS, model="m1")]


async def test_only_the_first_tool_call_is_planned() -> None:
    """With several tool calls, the first one is the plan's call."""
    complete, _ = scripted(assistant("", ("finish", '{"result": "a"}'), ("ls", "{}")))
    plan = await planner.plan(session=SESSION, context=context_for(complete))
    assert plan.call is not None
    assert plan.call.command == "finish"


async def test_arguments_that_are_not_json_become_an_error() -> None:
    """Broken JSON arguments give no call and an error naming the command and the fix."""
    complete, _ = scripted(assistant("", ("write_file", '{"path": "a.txt", ')))
    plan = await planner.plan(session=SESSION, context=context_for(complete))
    assert plan.call is None
    assert plan.error is not None
    assert "your call to write_file had arguments that are not a JSON object" in plan.error
    assert "call it again with valid JSON" in plan.error


async def test_arguments_that_are_not_an_object_become_an_error() -> None:
    """A JSON array as arguments is refused like broken JSON."""
    complete, _ = scripted(assistant("", ("write_file", '["a.txt"]')))
    plan = await planner.plan(session=SESSION, context=context_for(complete))
    assert plan.call is None
    assert plan.error is not None
    assert "not a JSON object: got an array" in plan.error


async def test_deeply_nested_arguments_become_an_error_the_model_can_correct() -> None:
    """Arguments nested past the limit (10,000 lists deep, or just one level too many) give
    no call and an error saying so and what to do; at the limit they are a call."""
    limit = planner.MAX_ARGUMENT_DEPTH
    cases = {
        10_000: '{"content": ' + "[" * 10_000 + "]" * 10_000 + "}",
        limit + 1: '{"content": ' + "[" * limit + "]" * limit + "}",
        limit: '{"content": ' + "[" * (limit - 1) + "]" * (limit - 1) + "}",
    }
    for depth, raw in cases.items():
        complete, _ = scripted(assistant("", ("write_file", raw)))
        plan = await planner.plan(session=SESSION, context=context_for(complete))
        if depth <= limit:
            assert plan.call is not None, depth
            assert plan.error is None, depth
            continue
        assert plan.call is None, depth
        assert plan.error == (
            f"your call to write_file had arguments nested more than {limit} levels deep "
            "(arrays and objects within each other); call it again with flatter arguments"
        )


async def test_arguments_too_long_or_not_finite_become_errors() -> None:
    """Over-long arguments are refused unparsed; NaN, Infinity and numbers that overflow to
    infinity (which no store or schema accepts) are refused, each with what to do."""
    too_long = '{"content": "' + "x" * planner.MAX_ARGUMENT_CHARS + '"}'
    expected = {
        too_long: "more than the 1,000,000 allowed; call it again with shorter arguments",
        '{"n": NaN}': "NaN is not a number JSON allows",
        '{"n": -Infinity}': "-Infinity is not a number JSON allows",
        '{"n": [1e999]}': "a number too large to represent (such as 1e999)",
    }
    for raw, problem in expected.items():
        complete, _ = scripted(assistant("", ("write_file", raw)))
        plan = await planner.plan(session=SESSION, context=context_for(complete))
        assert plan.call is None
        assert plan.error is not None
        assert plan.error.startswith("your call to write_file had ")
        assert problem in plan.error
        assert len(plan.error) < 300


async def test_empty_tool_name_becomes_an_error() -> None:
    """A tool call without a name gives no call and an error."""
    complete, _ = scripted(assistant("hmm", (" ", "{}")))
    plan = await planner.plan(session=SESSION, context=context_for(complete))
    assert plan.call is None
    assert plan.error is not None
    assert "no command name" in plan.error


async def test_empty_arguments_mean_no_arguments() -> None:
    """An empty arguments string (sent by some servers) is an empty object."""
    complete, _ = scripted(assistant("", ("list_files", "")))
    plan = await planner.plan(session=SESSION, context=context_for(complete))
    assert plan.call is not None
    assert (plan.call.arguments, plan.error) == ({}, None)


async def test_text_only_answer_has_no_call() -> None:
    """An answer without tool calls is a plan with text and no call or error."""
    message = assistant("I think the poem is done.")
    complete, _ = scripted(message)
    plan = await planner.plan(session=SESSION, context=context_for(complete))
    assert (plan.text, plan.call, plan.error) == ("I think the poem is done.", None, None)
    assert plan.assistant_message == message


def test_build_prompt_adds_the_standard_constraints() -> None:
    """The prompt asks for one tool call per reply and `finish` at the end."""
    prompt = PromptBuilder(goal="g")
    planner.build_prompt(session=SESSION, prompt=prompt)
    rendered = prompt.render()
    assert "one tool per reply" in rendered
    assert "`finish`" in rendered


def test_plugin_registers_against_the_specs_and_manifest_is_valid() -> None:
    """pluggy accepts the module's hook impls, and the manifest matches the schema."""
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs.specs)
    pm.register(planner)
    manifest = yaml.safe_load((Path(planner.__file__).parent / "autogpt-plugin.yaml").read_text())
    schema = json.loads((Path(hookspecs.__file__).parent / "manifest.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(manifest)
    assert (manifest["id"], manifest["enabled_by_default"]) == ("planner", True)
    assert manifest["capabilities"]["commands"] == []
