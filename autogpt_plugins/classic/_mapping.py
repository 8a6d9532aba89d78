"""Which method of a classic plugin runs in which hook, and the values they trade.

======================== ===================== ===========================================
classic method           hook here             what it receives and what it changes
======================== ===================== ===========================================
post_prompt              (at load)             the commands it adds; its constraints,
                         build_prompt          resources and evaluations, as quoted data
on_planning              build_prompt          the conversation of the session's last model
                                               request; its text, as quoted data
handle_chat_completion   llm_request           answers the request with its text
on_response              llm_request (wrapper) rewrites the text of the model's answer
post_planning            post_plan             Auto-GPT's reply dict; may change the text
                                               and the command's name and arguments
pre_command              pre_command           rewrites the call (before the checks)
post_command             post_command          rewrites what the model sees of the result
user_input               user_input            answers a question asked of the user
report                   on_event              a line per thought, plan, result, message
pre_instruction,         (none)                reported: Auto-GPT called them only around
on_instruction,                                its sub-agents
post_instruction
handle_text_embedding    (none)                reported: no hook makes embeddings
======================== ===================== ===========================================
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from hookspecs import CommandCall, Event, EventKind, Message, Plan

#: Methods no hook of this core can call, and why (``autogpt plugins check`` lists each
#: one a loaded plugin says it handles).
UNMAPPED: Mapping[str, str] = {
    "pre_instruction": (
        "Auto-GPT called it only on the messages of its sub-agents (start_agent, "
        "message_agent); this core has no sub-agents, so it is never called"
    ),
    "on_instruction": (
        "Auto-GPT called it only on the messages of its sub-agents (start_agent, "
        "message_agent); this core has no sub-agents, so it is never called"
    ),
    "post_instruction": (
        "Auto-GPT called it only on the replies of its sub-agents (start_agent, "
        "message_agent); this core has no sub-agents, so it is never called"
    ),
    "text_embedding": (
        "this core has no hook for text embeddings (each memory backend indexes text its "
        "own way), so handle_text_embedding is never called"
    ),
}


def message_dicts(messages: tuple[Message, ...] | list[Message]) -> list[dict[str, str]]:
    """Auto-GPT's messages: ``{"role", "content"}`` dicts (a tool's answer as ``user``, the
    role Auto-GPT gave command results)."""
    out = []
    for message in messages:
        role = str(message.role)
        out.append({"role": "user" if role == "tool" else role, "content": message.content})
    return out


def reply_dict(plan: Plan) -> dict[str, Any]:
    """The plan as Auto-GPT's assistant reply (what ``post_planning`` received)."""
    call = plan.call
    return {
        "thoughts": {
            "text": plan.text,
            "reasoning": "",
            "plan": "",
            "criticism": "",
            "speak": "",
        },
        "command": {
            "name": call.command if call is not None else "",
            "args": dict(call.arguments) if call is not None else {},
        },
    }


class ReplyError(Exception):
    """What ``post_planning`` returned cannot be read back into a plan."""


def plan_from_reply(reply: object, plan: Plan) -> Plan:
    """``plan`` with the changes of ``post_planning``'s ``reply`` (a dict, or its JSON)."""
    if isinstance(reply, str):
        try:
            reply = json.loads(reply)
        except ValueError:
            raise ReplyError("it returned text that is not the reply's JSON") from None
    if not isinstance(reply, Mapping):
        raise ReplyError(f"it returned {type(reply).__name__}, not the reply dict")
    thoughts = reply.get("thoughts")
    text = plan.text
    if isinstance(thoughts, Mapping) and isinstance(thoughts.get("text"), str):
        text = thoughts["text"]
    command = reply.get("command")
    call = plan.call
    if isinstance(command, Mapping):
        name, args = command.get("name"), command.get("args", {})
        if not isinstance(name, str) or not isinstance(args, Mapping):
            raise ReplyError("its command is not {name: text, args: {...}}")
        if call is None and name:
            raise ReplyError("it added a command to a plan without one (the model asked for none)")
        if call is not None and not name:
            raise ReplyError("it removed the command")
        if call is not None and (name != call.command or dict(args) != dict(call.arguments)):
            call = CommandCall(name, dict(args), call.call_id)
    return attrs.evolve(plan, text=text, call=call)


def report_text(event: Event) -> str | None:
    """The line Auto-GPT would have reported for ``event`` (``None``: none)."""
    data = event.data
    if event.kind is EventKind.PLAN:
        call = data.get("call")
        parts = []
        if data.get("text"):
            parts.append(f"THOUGHTS: {data['text']}")
        if isinstance(call, Mapping):
            arguments = json.dumps(call.get("arguments"), ensure_ascii=False, default=str)
            parts.append(f"NEXT ACTION: COMMAND = {call.get('command')} ARGUMENTS = {arguments}")
        return "\n".join(parts) or None
    if event.kind is EventKind.RESULT:
        said = data.get("output") if data.get("ok") else data.get("error")
        return f"SYSTEM: Command {data.get('command')} returned: {said}"
    if event.kind in (EventKind.THOUGHT, EventKind.MESSAGE):
        return str(data.get("text") or "") or None
    if event.kind is EventKind.SESSION_END:
        return f"SESSION END: {data.get('status')}: {data.get('result') or ''}".rstrip(": ")
    return None
