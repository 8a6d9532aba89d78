"""The default planner: asks the model for the next action, one tool call per cycle."""

from __future__ import annotations

import json
import math

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

#: Tool-call arguments longer than this (characters of JSON) are refused, not parsed.
MAX_ARGUMENT_CHARS = 1_000_000
#: Arrays and objects nested deeper than this in tool-call arguments are refused: no
#: command needs more, and every later step (validation, copying, storing) recurses.
MAX_ARGUMENT_DEPTH = 64

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
            error = f"your call to {name} had {problem}"
        else:
            call = CommandCall(command=name, arguments=arguments, call_id=tool_call.id)
    return Plan(
        text=message.content, call=call, usage=usage, assistant_message=message, error=error
    )


def _parse_arguments(raw: str) -> tuple[dict[str, object] | None, str]:
    """Return ``(arguments, "")``, or ``(None, what is wrong and what to do)``."""
    if not raw.strip():
        # Some OpenAI-compatible servers send "" rather than "{}" for a call without
        # arguments; that is not a mistake the model should be told about.
        return {}, ""
    if len(raw) > MAX_ARGUMENT_CHARS:
        return None, (
            f"arguments of {len(raw):,} characters, more than the {MAX_ARGUMENT_CHARS:,} "
            "allowed; call it again with shorter arguments, splitting the work over several "
            "calls"
        )
    flatter = (
        f"arguments nested more than {MAX_ARGUMENT_DEPTH} levels deep (arrays and objects "
        "within each other); call it again with flatter arguments"
    )
    try:
        value = json.loads(raw, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        where = f"{exc.msg} at line {exc.lineno} column {exc.colno} in {_shorten(raw)}"
        return None, f"{_NOT_JSON}: {where}; call it again with valid JSON"
    except RecursionError:
        return None, flatter
    except ValueError as exc:  # NaN or Infinity, or an integer too long to convert
        return None, f"{_NOT_JSON}: {exc} in {_shorten(raw)}; call it again with valid JSON"
    if not isinstance(value, dict):
        kind = _JSON_KINDS.get(type(value), "a value")
        return None, f"{_NOT_JSON}: got {kind} {_shorten(raw)}; call it again with valid JSON"
    found = _unusable(value, MAX_ARGUMENT_DEPTH)
    if found == "deep":
        return None, flatter
    if found == "infinite":
        return None, (
            "arguments with a number too large to represent (such as 1e999); call it again "
            "with numbers in range"
        )
    return value, ""


_NOT_JSON = "arguments that are not a JSON object"


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a number JSON allows")


def _unusable(value: object, limit: int) -> str:
    """``"deep"`` if arrays and objects nest more than ``limit`` deep in ``value``,
    ``"infinite"`` if it holds a number too large for a float (``1e999``), else ``""``."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return "infinite"
        if isinstance(item, dict):
            item = list(item.values())
        if not isinstance(item, list):
            continue
        if depth > limit:
            return "deep"
        stack.extend((child, depth + 1) for child in item)
    return ""


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
