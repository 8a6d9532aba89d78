"""Bearer tokens: who may use the server, and whose tasks a request sees.

Where tokens come from, first found wins:

1. ``server.tokens`` in the config: token names mapped to the environment variable that
   holds each token (the config file never holds a token);
2. ``$AUTOGPT_TOKEN``: one token, named ``default``;
3. the token file ``DATA_DIR/server-token``: made at the first start with a new random
   token, readable by its owner only (0600), and printed once, then.

A token shorter than 16 characters is refused: it could be guessed.
"""

from __future__ import annotations

import hmac
import os
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

from .._errors import ConfigError

MIN_TOKEN_LENGTH = 16
TOKEN_FILE = "server-token"


@attrs.frozen
class Tokens:
    """Named bearer tokens. ``created`` is a token made at this start (print it once)."""

    by_name: Mapping[str, str] = attrs.field(repr=False)
    source: str
    created: str | None = attrs.field(default=None, repr=False)
    #: The names that may change what every task runs with (plugins); a lone token may.
    admins: frozenset[str] = frozenset({"default"})

    def may_administer(self, name: str | None) -> bool:
        return name in self.admins

    def bearer(self, headers: Sequence[str]) -> str | None:
        """The name of the token of a request whose ``Authorization`` headers are
        ``headers``: exactly one, ``Bearer TOKEN``. Two or more are refused, whatever they
        say (a proxy and this server could read different ones)."""
        if len(headers) != 1:
            return None
        scheme, _, presented = headers[0].partition(" ")
        presented = presented.strip()
        if scheme.lower() != "bearer" or not presented:
            return None
        return self.name_of(presented)

    def name_of(self, presented: str) -> str | None:
        """The name of the token ``presented``, or ``None``: compared in constant time."""
        found = None
        given = presented.encode()
        for name, token in self.by_name.items():
            if hmac.compare_digest(given, token.encode()):
                found = name
        return found

    @property
    def values(self) -> list[str]:
        return list(self.by_name.values())


def load_tokens(
    configured: Mapping[str, str],
    data_dir: Path,
    environ: Mapping[str, str] = os.environ,
    *,
    admins: frozenset[str] = frozenset(),
) -> Tokens:
    """The server's tokens (see the module's docstring); ``ConfigError`` says what to fix."""
    if configured:
        found: dict[str, str] = {}
        for name, variable in configured.items():
            value = environ.get(variable, "")
            if not value:
                raise ConfigError(
                    f"server.tokens.{name} reads the environment variable {variable}, which is "
                    f"not set: export {variable}=A_LONG_RANDOM_TOKEN"
                )
            found[name] = _checked(value, f"the token in ${variable}")
        unknown = sorted(admins - set(found))
        if unknown:
            raise ConfigError(
                f"server.admins names {', '.join(unknown)}, which server.tokens does not: "
                "list token names from server.tokens"
            )
        return Tokens(found, "the config (server.tokens)", admins=admins)
    if environ.get("AUTOGPT_TOKEN"):
        return Tokens(
            {"default": _checked(environ["AUTOGPT_TOKEN"], "$AUTOGPT_TOKEN")}, "$AUTOGPT_TOKEN"
        )
    path = data_dir / TOKEN_FILE
    created = None
    try:
        token = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        token = created = secrets.token_urlsafe(32)
        data_dir.mkdir(parents=True, exist_ok=True)
        # Made readable by its owner only, before anything is written into it.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(token + "\n")
    except OSError as exc:
        raise ConfigError(f"cannot read the token file {path}: {exc.strerror}") from exc
    mode = path.stat().st_mode & 0o077
    if mode:
        raise ConfigError(
            f"the token file {path} can be read by others (mode {oct(path.stat().st_mode)[-3:]}): "
            f"chmod 600 {path}"
        )
    return Tokens({"default": _checked(token, str(path))}, str(path), created)


def _checked(token: str, where: str) -> str:
    token = token.strip()
    if len(token) < MIN_TOKEN_LENGTH:
        raise ConfigError(
            f"{where} is {len(token)} characters long, too short to be safe: use at least "
            f"{MIN_TOKEN_LENGTH} (python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    return token
