"""One configured MCP server, read from ``plugins.settings.mcp.servers.NAME``."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from hookspecs import ReadSecret

_STDIO_KEYS = ("command", "args", "env", "cwd")
_HTTP_KEYS = ("url", "headers")


class ServerError(Exception):
    """A configured server cannot be used; the message says why and how to fix it."""


@attrs.frozen
class ServerSpec:
    """How to reach one server: a command over stdio, or a streamable HTTP URL."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = attrs.field(factory=dict)
    cwd: str | None = None
    url: str = ""
    headers: Mapping[str, str] = attrs.field(factory=dict)

    @property
    def is_http(self) -> bool:
        return bool(self.url)


def server_spec(name: str, entry: object, secret: ReadSecret) -> ServerSpec:
    """Check one configured entry; ``ServerError`` says what is wrong."""
    where = f"plugins.settings.mcp.servers.{name}"
    if not isinstance(entry, Mapping) or ("command" in entry) == ("url" in entry):
        raise ServerError(
            f"{where} needs either 'command' (a server started over stdio) or 'url' "
            "(a streamable HTTP server)"
        )
    known = _STDIO_KEYS if "command" in entry else _HTTP_KEYS
    unknown = sorted(set(map(str, entry)) - set(known))
    if unknown:
        raise ServerError(
            f"{where} has unknown key(s) {', '.join(unknown)} (known: {', '.join(known)})"
        )
    if "url" in entry:
        url = entry["url"]
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ServerError(f"{where}.url must be an http(s) URL")
        headers = _values(f"{where}.headers", entry.get("headers"), secret, prefixed=True)
        return ServerSpec(name, url=url, headers=headers)
    command, args, cwd = entry["command"], entry.get("args") or [], entry.get("cwd")
    if not isinstance(command, str) or not command:
        raise ServerError(f"{where}.command must name the program that starts the server")
    if not isinstance(args, list) or not all(isinstance(a, (str, int, float)) for a in args):
        raise ServerError(f"{where}.args must be a list of strings")
    if cwd is not None and not isinstance(cwd, str):
        raise ServerError(f"{where}.cwd must be a directory path")
    env = _values(f"{where}.env", entry.get("env"), secret, prefixed=False)
    return ServerSpec(name, command=command, args=tuple(map(str, args)), env=env, cwd=cwd)


def _values(where: str, raw: object, secret: ReadSecret, *, prefixed: bool) -> dict[str, str]:
    """``env`` or ``headers``: each value a string, or ``{env: VARIABLE}`` read through the
    core (so it is masked), for a header with an optional ``prefix`` ("Bearer ")."""
    if raw is None:
        return {}
    shape = "{env: VARIABLE, prefix: TEXT}" if prefixed else "{env: VARIABLE}"
    if not isinstance(raw, Mapping):
        raise ServerError(f"{where} must map names to a string or {shape}")
    values: dict[str, str] = {}
    for key, value in raw.items():
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            values[str(key)] = str(value)
            continue
        variable = value.get("env") if isinstance(value, Mapping) else None
        extra = set(map(str, value)) - {"env", "prefix"} if isinstance(value, Mapping) else set()
        if (
            not isinstance(variable, str)
            or not variable
            or extra
            or not prefixed
            and value.get("prefix")
        ):
            raise ServerError(f"{where}.{key} must be a string or {shape}")
        token = secret(variable)
        if not token:
            raise ServerError(
                f"the environment variable {variable} ({where}.{key}.env) is not set; set it "
                "(or keep it in the secrets file) and run again"
            )
        values[str(key)] = f"{value.get('prefix') or ''}{token}"
    return values
