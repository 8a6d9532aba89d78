"""Calling one mapped operation: the request from the arguments, the response as text.

The web plugin's rule for addresses applies: a service on this machine or its network
(loopback, private, link-local, ...) is reached only with ``network.local``, checked on every
address its host resolves to, and the request goes to an address that was checked (no DNS
rebinding between the check and the connection). Redirects are not followed: a redirect is
reported with its status and location, so credentials never go to another host.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import attrs
import httpx
import trio

from autogpt_plugins.web import LOCAL_PERMISSION, IPAddress, allowed_addresses, send_pinned
from hookspecs import CommandContext, CommandResult

from ._mapping import BODY, Operation

USER_AGENT = "autogpt-core-openapi/0.1"
_DEFAULT_PORTS = {"http": 80, "https": 443}


@attrs.frozen
class Auth:
    """How a service's calls authenticate: ``kind`` is "none", "bearer" or "api_key"."""

    kind: str = "none"
    header: str = "Authorization"
    token: str | None = attrs.field(default=None, repr=False)

    def headers(self) -> dict[str, str]:
        if self.kind == "none" or not self.token:
            return {}
        if self.kind == "bearer":
            return {"Authorization": f"Bearer {self.token}"}
        return {self.header: self.token}


@attrs.frozen
class Service:
    """One configured service: its name (the commands' prefix), base URL and auth."""

    name: str
    base_url: str
    auth: Auth = Auth()


@attrs.frozen
class Limits:
    timeout: float = 30.0
    max_bytes: int = 1024 * 1024
    max_output: int = 20_000


def build_request(
    service: Service, operation: Operation, arguments: Mapping[str, Any]
) -> tuple[str, str, list[tuple[str, str]], dict[str, str], bytes | None]:
    """``(method, url, query, headers, body)`` for a call with ``arguments`` (validated)."""
    path = operation.path
    query: list[tuple[str, str]] = []
    headers: dict[str, str] = {"User-Agent": USER_AGENT, "Accept": "application/json, */*"}
    for param in operation.parameters:
        if param.name not in arguments:
            continue
        value = arguments[param.name]
        if param.location == "path":
            path = path.replace("{" + param.name + "}", quote(_scalar(value), safe=""))
        elif param.location == "query":
            values = value if isinstance(value, list) else [value]
            query.extend((param.name, _scalar(v)) for v in values)
        else:
            headers[param.name] = _scalar(value)
    headers.update(service.auth.headers())
    body = None
    if operation.has_body and BODY in arguments:
        body = json.dumps(arguments[BODY]).encode("utf-8")
        headers["Content-Type"] = "application/json"
    url = service.base_url.rstrip("/") + "/" + path.lstrip("/")
    return operation.method, url, query, headers, body


def _scalar(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


async def call(
    service: Service,
    operation: Operation,
    arguments: Mapping[str, Any],
    ctx: CommandContext,
    limits: Limits,
) -> CommandResult:
    """Send the operation's request and return the status and the body's text."""
    method, url, query, headers, body = build_request(service, operation, arguments)
    command = f"{service.name}.{operation.name}"
    try:
        target = httpx.URL(url, params=query)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        return CommandResult.failure(f"{command}: the URL {url} is not valid ({exc})")
    if target.scheme not in _DEFAULT_PORTS or not target.host:
        return CommandResult.failure(
            f"{command}: the service's base URL {service.base_url!r} is not an http(s) URL with "
            f"a host; fix plugins.settings.openapi.services.{service.name}.base_url"
        )
    try:
        with trio.fail_after(limits.timeout):
            addresses = await _checked_addresses(target, ctx, command)
            if isinstance(addresses, CommandResult):
                return addresses
            return await _send(target, method, headers, body, addresses, limits)
    except (trio.TooSlowError, httpx.TimeoutException):
        return CommandResult.failure(
            f"{command}: {method} {target.copy_with(query=None)} took longer than "
            f"{limits.timeout:g} s and was stopped; try again later, or ask the user to raise "
            "the openapi plugin's timeout setting"
        )
    except httpx.HTTPError as exc:
        return CommandResult.failure(
            f"{command}: {method} {target.copy_with(query=None)} failed: "
            f"{type(exc).__name__}: {exc}"
        )


async def _checked_addresses(
    target: httpx.URL, ctx: CommandContext, command: str
) -> list[IPAddress] | CommandResult:
    """The addresses the service may be called at (the web plugin's rule for local ones)."""
    host = target.raw_host.decode("ascii")
    return await allowed_addresses(
        host,
        target.port or _DEFAULT_PORTS[target.scheme],
        ctx,
        asked=lambda what: f"the service {host} resolves to {what} on this machine or its network",
        unresolved=lambda error: (
            f"{command}: the service's host {host!r} could not be resolved ({error})"
        ),
        refused=lambda what: (
            f"{command} was not called: the service's host {host!r} resolves to {what}, "
            f"which needs the {LOCAL_PERMISSION!r} permission, not given. Ask the user to "
            f"grant {LOCAL_PERMISSION} under permissions.grant in the config"
        ),
    )


async def _send(
    target: httpx.URL,
    method: str,
    headers: dict[str, str],
    body: bytes | None,
    addresses: list[IPAddress],
    limits: Limits,
) -> CommandResult:
    # The explicit transport keeps httpx from using a proxy from the environment, which
    # would connect wherever the name resolves for it, not to the address checked.
    async with httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(), timeout=limits.timeout
    ) as client:
        named = client.build_request(method, target, headers=headers, content=body)
        response = await send_pinned(client, named, addresses)
        try:
            return await _read(response, limits)
        finally:
            await response.aclose()


async def _read(response: httpx.Response, limits: Limits) -> CommandResult:
    body = bytearray()
    # Cancelled rather than left with `break`: that unwinds httpx's async generators now.
    with trio.CancelScope() as reading:
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > limits.max_bytes:
                reading.cancel()
    cut = len(body) > limits.max_bytes
    del body[limits.max_bytes :]
    content_type = response.headers.get("content-type", "")
    status = f"{response.status_code} {httpx.codes.get_reason_phrase(response.status_code)}"
    text = _text(bytes(body), content_type, response.charset_encoding, cut)
    lines = [f"status: {status.strip()}", f"content-type: {content_type or '(none)'}"]
    if response.has_redirect_location:
        lines.append(f"location: {response.headers['location']} (not followed)")
    output = "\n".join(lines) + "\n\n" + text
    note = ""
    if cut:
        note = f"\n[body cut at {limits.max_bytes:,} bytes]"
    if len(output) > limits.max_output:
        output = output[: limits.max_output]
        note = f"\n[output cut at {limits.max_output:,} characters]" + note
    # An error status is the service's answer, for the model to read: not a failed call.
    return CommandResult.success(
        output + note,
        data={"status": response.status_code, "content_type": content_type, "truncated": cut},
    )


def _text(body: bytes, content_type: str, charset: str | None, cut: bool) -> str:
    media_type = content_type.split(";", 1)[0].strip().lower()
    if media_type == "application/json" or media_type.endswith("+json"):
        if not cut:
            try:
                return json.dumps(json.loads(body), indent=2, ensure_ascii=False)
            except (ValueError, RecursionError):
                pass  # not JSON after all: shown as text
    elif media_type and not (
        media_type.startswith("text/") or media_type.endswith("+xml") or "xml" in media_type
    ):
        return f"({len(body):,} bytes of {media_type}, not shown)"
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")
