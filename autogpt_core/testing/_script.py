"""What the scripted model answers: ``call``, ``finish`` and ``say``, one step per request.

A script is played by the built-in ``llm_replay`` plugin's ``replay`` provider, the one
``autogpt run --llm replay:FILE`` uses: ``recording`` turns the steps into a recording
file (docs/recordings.md) whose requests are left unrecorded, so that strict replay
compares nothing and each step simply answers the next request.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs


@attrs.frozen
class Step:
    """One answer of the scripted model: its words and the tool calls it makes.

    ``calls`` are ``(command, arguments)`` pairs; arguments given as a string are sent
    verbatim, as a model sending malformed JSON would.
    """

    content: str = ""
    calls: tuple[tuple[str, Mapping[str, Any] | str], ...] = ()

    def saying(self, text: str) -> Step:
        """This step with the model's words ``text`` besides its calls (its reasoning)."""
        return attrs.evolve(self, content=text)


def call(command: str, /, **arguments: Any) -> Step:
    """The model calls ``command`` with ``arguments``: ``call("say_hello", name="Ada")``."""
    return Step(calls=((command, dict(arguments)),))


def call_raw(command: str, arguments: str, /) -> Step:
    """The model calls ``command`` with ``arguments`` sent as they are (e.g. broken JSON)."""
    return Step(calls=((command, arguments),))


def finish(result: str = "done", /) -> Step:
    """The model calls the built-in ``finish`` command, ending the session with ``result``."""
    return call("finish", result=result)


def say(text: str, /) -> Step:
    """The model answers in words only, calling no command."""
    return Step(content=text)


def recording(steps: Iterable[Step]) -> dict[str, Any]:
    """The replay recording that answers each request with the next of ``steps``."""
    exchanges = []
    number = 0
    for step in steps:
        if not isinstance(step, Step):
            raise TypeError(f"a script holds steps made by call(), finish() or say(), not {step!r}")
        tool_calls = []
        for command, arguments in step.calls:
            number += 1
            tool_calls.append(
                {
                    "id": f"call_{number}",
                    "name": command,
                    "arguments": arguments
                    if isinstance(arguments, str)
                    else json.dumps(dict(arguments)),
                }
            )
        exchanges.append({"response": {"content": step.content, "tool_calls": tool_calls}})
    return {"format": "autogpt-replay", "version": 1, "exchanges": exchanges}
