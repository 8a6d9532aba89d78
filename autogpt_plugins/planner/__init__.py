"""The default planner: asks the model for the next action, one tool call per cycle."""

from __future__ import annotations

import json

from hookspecs import (
    CommandCall,
    LLMRequest,
    Message,
    Plan,
    PlanningContext,
    PromptBuilder,
    SessionView,
    Usage,
    hookimpl,
)

CONSTRAINTS = (
    "Act only through the offered tools, calling exactly one tool per reply.",
    "When the goal is reached, call `finish` with the result; the session ends there.",
    "Be concise: keep your reasoning to a few sentences.",
)


@hookimpl
def build_prompt(session: SessionView, prompt: PromptBuilder) -> None:
    """Add the constraints every tool-calling planner relies on."""
    for constraint in CONSTRAINTS:
        prompt.add_constraint(constraint)


# Deliberately not ``tryfirst``: ``plan`` is firstresult and pluggy calls the plugin
# registered last first, so a third-party planner (registered after the built-ins)
# answers before this one, and can still return ``None`` to fall back to it.
@hookimpl
async def plan(session: SessionView, context: PlanningContext) -> Plan:
    """Ask the model for the next action and turn its first tool call into a ``CommandCall``."""
    request = LLMRequest(messages=context.messages, tools=context.tools, model=context.model)
    response = await context.complete(request)
    return plan_from_message(response.message, response.usage)


def plan_from_message(message: Message, usage: Usage) -> Plan:
    """Build a ``Plan`` from an assistant message: its text and its first tool call, if any."""
    if not message.tool_calls:
        return Plan(text=message.content, usage=usage, assistant_message=message)
    tool_call = message.tool_calls[0]
    name = tool_call.name.strip()
    error: str | None = None
    call: CommandCall | None = None
    if not name:
        error = "your tool call had no command name; call one of the offered tools by its name"
    else:
        arguments, problem = _parse_arguments(tool_call.arguments)
        if arguments is None:
            error = (
                f"your call to {name} had arguments that are not a JSON object: {problem}; "
                "call it again with valid JSON"
            )
        else:
            call = CommandCall(command=name, arguments=arguments, call_id=tool_call.id)
    return Plan(
        text=message.content, call=call, usage=usage, assistant_message=message, error=error
    )


def _parse_arguments(raw: str) -> tuple[dict[str, object] | None, str]:
    """Return ``(arguments, "")``, or ``(None, what is wrong)``."""
    if not raw.strip():
        # Some OpenAI-compatible servers send "" rather than "{}" for a call without
        # arguments; that is not a mistake the model should be told about.
        return {}, ""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return None, f"{exc.msg} at line {exc.lineno} column {exc.colno} in {_shorten(raw)}"
    if not isinstance(value, dict):
        return None, f"got {_JSON_KINDS.get(type(value), 'a value')} {_shorten(raw)}"
    return value, ""


_JSON_KINDS: dict[type, str] = {
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}


def _shorten(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")
