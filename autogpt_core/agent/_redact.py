"""What is secret, and masking it in everything that leaves the process.

One rule decides what is secret, used everywhere (the masking boundary, manifest checks,
the environment of processes the agent starts):

- the values of settings a manifest declares ``secret`` (read through ``secrets:NAME``);
- the values of environment variables whose names look secret (``is_secret_name``:
  ``GITHUB_TOKEN``, ``DB_PASSWD``, ``MY_SERVICE_KEY``, ``PGPASSWORD``, ``SENTRY_DSN``; not
  ``MAX_TOKENS``, ``KEYBOARD`` or ``TOKEN_TYPE``), and the password of any URL in the
  environment (``DATABASE_URL=postgres://app:PASSWORD@db/app``);
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

from hookspecs import Message

MASK = "***"
MIN_SECRET_LENGTH = 6
#: A name holding one of these as a whole ``_``-separated word holds a secret.
SECRET_WORDS = frozenset(
    {
        "KEY",
        "KEYS",
        "APIKEY",
        "TOKEN",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWORDS",
        "PASSWD",
        "PASS",
        "PWD",  # MYSQL_PWD; not PWD alone, the working directory
        "PASSPHRASE",
        "CREDENTIAL",
        "CREDENTIALS",
        "AUTH",
        "COOKIE",
        "PAT",
        "JWT",
        "DSN",
        "WEBHOOK",
    }
)
#: A word ending in one of these holds a secret too: PGPASSWORD, APITOKEN, SECRETKEY.
SECRET_ENDINGS = ("PASSWORD", "PASSWD", "SECRET", "TOKEN", "APIKEY", "SECRETKEY", "PASSPHRASE")
#: A last word saying that the variable describes a secret rather than holds one:
#: TOKEN_TYPE=Bearer, AUTH_METHOD=password, SSH_AUTH_SOCK=/tmp/ssh-XXX/agent.1.
DESCRIBING_WORDS = frozenset(
    {
        "TYPE",
        "METHOD",
        "MODE",
        "SOCK",
        "PATH",
        "FILE",
        "DIR",
        "HOST",
        "PORT",
        "USER",
        "USERNAME",
        "NAME",
        "URL",
        "URI",
        "ENDPOINT",
        "REGION",
        "TIMEOUT",
        "EXPIRY",
        "LENGTH",
        "SIZE",
        "ALGORITHM",
        "VERSION",
    }
)
# The password of scheme://user:password@host (DATABASE_URL, REDIS_URL), whatever the name.
_URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/@:\s]*:([^/@\s]+)@")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable called ``name`` holds a secret, by its name.

    It does when one of its ``_``-separated words is in ``SECRET_WORDS`` or ends with one
    of ``SECRET_ENDINGS`` -- unless its last word is in ``DESCRIBING_WORDS`` (and it is not
    a webhook or DSN, which are secrets whole). ``PWD`` alone is the working directory.
    """
    words = name.upper().split("_")
    if len(words) == 1 and words[0] == "PWD":
        return False
    secret = any(w in SECRET_WORDS or w.endswith(SECRET_ENDINGS) for w in words)
    if not secret:
        return False
    if words[-1] in DESCRIBING_WORDS and not {"WEBHOOK", "DSN"} & set(words):
        return False
    return True


def environment_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """The secrets in ``environ`` (``os.environ``): the values of variables whose names
    look secret, and the password of any URL with one (``postgres://u:PASSWORD@host``)."""
    env = os.environ if environ is None else environ
    found = [value for name, value in env.items() if is_secret_name(name)]
    for value in env.values():
        if "://" in value:
            found.extend(m.group(1) for m in _URL_PASSWORD.finditer(value))
    return found


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
