"""Records to column values and back: JSON text written strictly, and read back checked, so
that a damaged row (edited by hand, damaged on disk) is reported as ``Damaged`` naming the
column instead of a ``JSONDecodeError``, ``KeyError`` or ``RecursionError`` deep inside.

For any store keeping JSON as text; ``SessionStore`` implementations turn ``Damaged`` into
a ``StorageError`` naming their database, the row and the fix.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from hookspecs import JSON, Budget, Message, Role, ToolCall

from ._records import CycleRecord, SessionRecord, SessionStatus

# Budget fields, which must read back as numbers (or null): the runtime does sums with them.
_BUDGET_NUMBERS = ("max_cycles", "max_tokens", "max_cost_usd", "cycles", "tokens", "cost_usd")


class Damaged(Exception):
    """A column that does not read back as what was stored: ``column`` and what is wrong."""

    def __init__(self, column: str, problem: str) -> None:
        self.column = column
        self.problem = problem
        super().__init__(f"its {column} column {problem}")


# --- writing ---------------------------------------------------------------------------


def dumps(value: JSON) -> str:
    """``value`` as compact JSON text; ``ValueError`` for NaN or infinities, ``TypeError``
    for what is not JSON."""
    return _ENCODE(value)


# allow_nan=False: NaN is not JSON, and the server would send it to clients as is. Made
# once: json.dumps with options builds a new encoder on every call.
_ENCODE = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


def budget_json(budget: Budget | Mapping[str, JSON]) -> dict[str, JSON]:
    if isinstance(budget, Budget):
        return attrs.asdict(budget)
    return dict(budget)


def messages_json(messages: tuple[Message, ...]) -> str:
    return dumps([_message_to_json(m) for m in messages])


def _message_to_json(message: Message) -> dict[str, JSON]:
    return {
        "role": message.role.value,
        "content": message.content,
        "tool_calls": [
            {"id": call.id, "name": call.name, "arguments": call.arguments}
            for call in message.tool_calls
        ],
        "tool_call_id": message.tool_call_id,
    }


# --- reading ---------------------------------------------------------------------------


def _refuse_constant(name: str) -> JSON:
    raise ValueError(f"{name} is not a JSON number")


def loads(value: object, column: str) -> JSON:
    """A JSON column's value; ``Damaged`` naming ``column`` if it does not read back."""
    if not isinstance(value, str | bytes):
        # SQLite keeps whatever type was written: a hand edit may leave a number or a blob.
        raise Damaged(column, f"holds {type(value).__name__} {shown(value)}, not JSON text")
    try:
        # NaN and Infinity are refused: the store never writes them (allow_nan=False).
        return json.loads(value, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise Damaged(
            column, f"is not valid JSON ({exc.msg} at character {exc.pos}: {shown(value)})"
        ) from None
    except RecursionError:
        raise Damaged(column, "is JSON nested too deeply to read") from None
    except ValueError as exc:  # a refused constant, or bytes that are not UTF-8
        raise Damaged(column, f"is not valid JSON ({exc})") from None


def json_object(value: object, column: str) -> dict[str, JSON]:
    """A JSON object column's value; ``Damaged`` if it is not one."""
    loaded = loads(value, column)
    if not isinstance(loaded, dict):
        raise Damaged(column, f"holds {shown(value)}, not a JSON object")
    return loaded


def shown(value: object, limit: int = 40) -> str:
    """``value``'s repr, cut to ``limit`` characters: for messages."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def time_or_zero(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def session_from_row(row: Any) -> SessionRecord:
    """A row ``(id, goal, status, workspace, created_at, updated_at, config, result,
    budget)`` as a record; ``Damaged`` if a column does not read back."""
    for index, column in ((4, "created_at"), (5, "updated_at")):
        if isinstance(row[index], bool) or not isinstance(row[index], int | float):
            raise Damaged(column, f"holds {shown(row[index])}, not a time")
    budget = json_object(row[8], "budget")
    for name in _BUDGET_NUMBERS:
        value = budget.get(name)
        if value is not None and not _is_amount(value):
            raise Damaged("budget", f"has {name} {shown(value)}, not a number >= 0")
    return SessionRecord(
        id=row[0],
        goal=row[1],
        status=SessionStatus(row[2]),
        workspace=Path(row[3]),
        created_at=row[4],
        updated_at=row[5],
        config=json_object(row[6], "config"),
        result=row[7],
        budget=budget,
    )


def _is_amount(value: object) -> bool:
    """Whether ``value`` is a finite number >= 0 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value >= 0


def cycle_from_row(row: Any) -> CycleRecord:
    """A row ``(session_id, number, plan, command, result, usage, messages, completed_at)``
    as a record; ``Damaged`` if a column does not read back."""
    raw_messages = loads(row[6], "messages")
    if not isinstance(raw_messages, list):
        raise Damaged("messages", f"holds {shown(row[6])}, not a list of messages")
    messages = []
    for index, raw in enumerate(raw_messages):
        try:
            messages.append(_message_from_json(raw))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise Damaged(
                "messages", f"has message {index} {shown(raw)}, which is not a message"
            ) from None
    return CycleRecord(
        session_id=row[0],
        number=row[1],
        plan=loads(row[2], "plan"),
        command=loads(row[3], "command"),
        result=loads(row[4], "result"),
        usage=loads(row[5], "usage"),
        messages=tuple(messages),
        completed_at=row[7],
    )


def _message_from_json(data: Mapping[str, Any]) -> Message:
    """A stored message; ``ValueError`` (or ``KeyError``, ``TypeError``) if it is not one."""
    content = data.get("content", "")
    tool_call_id = data.get("tool_call_id")
    calls = data.get("tool_calls", ())
    if not isinstance(content, str) or not isinstance(tool_call_id, str | None):
        raise ValueError("content must be text and tool_call_id text or null")
    if not isinstance(calls, list | tuple):
        raise ValueError("tool_calls must be a list")
    tool_calls = []
    for call in calls:
        fields = (call["id"], call["name"], call["arguments"])
        if not all(isinstance(field, str) for field in fields):
            raise ValueError("a tool call's id, name and arguments must be text")
        tool_calls.append(ToolCall(*fields))
    return Message(
        role=Role(data["role"]),
        content=content,
        tool_calls=tuple(tool_calls),
        tool_call_id=tool_call_id,
    )
