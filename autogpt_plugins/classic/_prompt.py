"""What a classic plugin's ``post_prompt`` fills in, and how its commands' argument hints
become JSON Schema.

Auto-GPT 0.4 handed ``post_prompt`` its ``PromptGenerator``; ``PromptGenerator`` here has
the same methods and attributes (``add_command(command_label, command_name, args,
function)``, ``add_constraint``, ``add_resource``, ``add_performance_evaluation``, the
lists ``commands``, ``constraints``, ``resources``, ``performance_evaluation``) and only
records what the plugin adds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from .._bridge import command_name as bridged_name

#: ``optional`` in a hint, with the brackets or colon around it: ``(optional)``,
#: ``optional:``, ``[optional]``.
_OPTIONAL = re.compile(r"[(\[]?\s*\boptional\b\s*[)\]]?\s*:?", re.IGNORECASE)
#: A hint's word -> the JSON Schema type (anything else is a string).
HINT_TYPES = {
    "int": "integer",
    "integer": "integer",
    "float": "number",
    "number": "number",
    "bool": "boolean",
    "boolean": "boolean",
    "list": "array",
}


class PromptGenerator:
    """Auto-GPT 0.4's ``PromptGenerator`` as ``post_prompt`` uses it: it records.

    ``commands`` holds Auto-GPT's dicts: ``{"label", "name", "args", "function"}``.
    """

    def __init__(self) -> None:
        self.constraints: list[str] = []
        self.commands: list[dict[str, Any]] = []
        self.resources: list[str] = []
        self.performance_evaluation: list[str] = []
        self.goals: list[str] = []
        self.command_registry: object = None
        self.name = "Auto-GPT"
        self.role = "an AI designed to autonomously carry out a goal"

    def add_constraint(self, constraint: str) -> None:
        self.constraints.append(str(constraint))

    def add_command(
        self,
        command_label: str,
        command_name: str,
        args: Mapping[str, Any] | None = None,
        function: Callable[..., Any] | None = None,
    ) -> None:
        self.commands.append(
            {
                "label": command_label,
                "name": command_name,
                "args": dict(args) if isinstance(args, Mapping) else args,
                "function": function,
            }
        )

    def add_resource(self, resource: str) -> None:
        self.resources.append(str(resource))

    def add_performance_evaluation(self, evaluation: str) -> None:
        self.performance_evaluation.append(str(evaluation))

    def generate_prompt_string(self) -> str:
        """The text Auto-GPT would have made of it (a plugin may call this)."""
        return prompt_text(self)


def prompt_text(prompt: PromptGenerator) -> str:
    """The constraints, resources and performance evaluations a plugin added, as text
    (``""`` when it added none)."""
    parts = []
    for title, items in (
        ("Constraints", prompt.constraints),
        ("Resources", prompt.resources),
        ("Performance evaluation", prompt.performance_evaluation),
    ):
        if items:
            parts.append(title + ":\n" + "\n".join(f"- {item}" for item in items))
    return "\n\n".join(parts)


def command_name(name: object) -> str:
    """The ``NAME`` of ``PREFIX.NAME`` for a classic command name (``""``: none left)."""
    return bridged_name(str(name)) if name is not None else ""


def hint_schema(hint: object) -> tuple[dict[str, Any], bool]:
    """``(JSON Schema, required)`` of one argument from its Auto-GPT hint.

    ``"<int>"``/``"<integer>"`` is an integer, ``"<float>"``/``"<number>"`` a number,
    ``"<bool>"``/``"<boolean>"`` a boolean, ``"<list>"`` or a list an array; anything else
    a string, with the hint as its description. ``optional`` anywhere in the hint makes
    the argument optional.
    """
    if isinstance(hint, (list, tuple)):
        return {"type": "array", "description": _shown(hint)}, True
    text = hint if isinstance(hint, str) else _shown(hint)
    optional = _OPTIONAL.search(text) is not None
    core = _OPTIONAL.sub(" ", text).strip()
    bracketed = re.fullmatch(r"<(.*)>", core, re.DOTALL)
    word = (bracketed.group(1) if bracketed else core).strip(" \t,;:").lower()
    kind = HINT_TYPES.get(word, "string")
    return {"type": kind, "description": text}, not optional


def parameters_schema(args: Mapping[Any, Any]) -> dict[str, Any]:
    """The JSON Schema (an object) of a classic command's ``args`` hints."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for key, hint in args.items():
        name = str(key)
        schema, needed = hint_schema(hint)
        properties[name] = schema
        if needed and name not in required:
            required.append(name)
    # Auto-GPT called the function with the arguments as keywords: one it does not take
    # would fail the call, so the model is not offered any.
    schema_: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema_["required"] = required
    return schema_


def _shown(value: object) -> str:
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):
        return repr(value)
