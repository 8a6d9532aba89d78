"""What is secret, and masking it in everything that leaves the process.

One rule decides what is secret, used everywhere (the masking boundary, manifest checks,
the environment of processes the agent starts):

- the values of settings a manifest declares ``secret`` (read through ``secrets:NAME``);
- the values of environment variables whose names look secret: a whole ``_``-separated
  word of the name is one of ``SECRET_WORDS`` (``GITHUB_TOKEN``, ``DB_PASSWD``,
  ``MY_SERVICE_KEY``, ``AWS_SHARED_CREDENTIALS``; not ``MAX_TOKENS`` or ``KEYBOARD``);
- the API key a session's model is called with.

Values shorter than ``MIN_SECRET_LENGTH`` characters are not masked: a one-letter "key"
would turn every word that contains the letter into a mask. Longer values are masked
wherever they appear, as ``MASK``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from hookspecs import LLMRequest, LLMResponse, Message

MASK = "***"
MIN_SECRET_LENGTH = 6
SECRET_WORDS = (
    "API_KEY",
    "APIKEY",
    "KEY",
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASS",
    "PASSPHRASE",
    "CREDENTIAL",
    "CREDENTIALS",
    "AUTH",
    "COOKIE",
)
_SECRET_NAME = re.compile(
    r"(?:^|_)(?:" + "|".join(SECRET_WORDS) + r")(?:_|$)",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    """Whether an environment variable called ``name`` holds a secret, by its name."""
    return _SECRET_NAME.search(name) is not None


def environment_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of the variables in ``environ`` (``os.environ``) whose names look secret."""
    env = os.environ if environ is None else environ
    return [value for name, value in env.items() if is_secret_name(name)]


class Redactor:
    """Replaces every known secret value in strings, recursively through JSON values."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self.add(secrets)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Redactor:
        """A redactor for the secret-looking variables of ``environ`` (``os.environ``)."""
        return cls(environment_secrets(environ))

    def add(self, secrets: Iterable[str]) -> None:
        new = {s for s in secrets if isinstance(s, str) and len(s) >= MIN_SECRET_LENGTH}
        if new - self._secrets:
            self._secrets |= new
            ordered = sorted(self._secrets, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(s) for s in ordered))

    @property
    def active(self) -> bool:
        """Whether there is any secret to mask."""
        return self._pattern is not None

    def knows(self, value: str) -> bool:
        """Whether ``value`` contains a secret this redactor masks."""
        return self._pattern is not None and self._pattern.search(value) is not None

    def text(self, value: str) -> str:
        if self._pattern is None:
            return value
        return self._pattern.sub(MASK, value)

    def __call__(self, value: Any) -> Any:
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self._pattern.sub(MASK, value)
        if isinstance(value, dict):
            return {self(k): self(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self(v) for v in value]
        return value


def masked_message(message: Message, text: Callable[[str], str]) -> Message:
    """``message`` with ``text`` (a redactor's) applied to its content and tool arguments."""
    return attrs.evolve(
        message,
        content=text(message.content),
        tool_calls=tuple(attrs.evolve(c, arguments=text(c.arguments)) for c in message.tool_calls),
    )


@attrs.define
class MaskedProvider:
    """Wraps a session's provider so that what the model sends back is masked before
    anything (the session, a recording) keeps it.

    Requests are masked where they are built (the session keeps its conversation masked),
    which costs a cycle nothing per earlier message; answers are masked here.
    """

    inner: Any
    redactor: Redactor

    async def complete(self, request: LLMRequest) -> LLMResponse:
        response: LLMResponse = await self.inner.complete(request)
        if not self.redactor.active:
            return response
        return attrs.evolve(response, message=masked_message(response.message, self.redactor.text))

    async def aclose(self) -> None:
        await self.inner.aclose()
