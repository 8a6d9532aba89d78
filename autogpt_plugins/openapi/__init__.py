"""The OpenAPI bridge: each configured service's operations become commands.

``plugins.settings.openapi.services`` maps a NAME to ``{spec, base_url, auth}``; every
operation of the service's OpenAPI 3.x document with an ``operationId`` becomes the command
``NAME.operationId`` (the model calls it ``NAME__operationId``). What cannot be mapped is
reported with the reason (``autogpt plugins check``). A ChatGPT plugin manifest
(``ai-plugin.json``) may stand for the document: its ``api.url`` is read, and its
``description_for_model`` goes into the prompt as data from outside.

Every call needs ``bridge:openapi`` (asked each time unless granted) and ``network``; a
service on this machine or its network also ``network.local``, the web plugin's rule.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import attrs
import httpx
import yaml

from hookspecs import (
    CommandContext,
    CommandFunction,
    CommandResult,
    PluginSettings,
    PromptBuilder,
    ReadSecret,
    RegisterBridgedCommand,
    ReportUnmapped,
    SessionView,
    hookimpl,
)

from ._client import Auth, Limits, Service, call
from ._mapping import DocumentMap, Operation, map_document

#: The largest OpenAPI document (or ai-plugin.json) read, in bytes.
MAX_SPEC_BYTES = 4 * 1024 * 1024
_ENTRY_KEYS = ("spec", "base_url", "auth")
_AUTH_KINDS = ("none", "bearer", "api_key")


class ServiceError(Exception):
    """A configured service cannot be used; the message says why and how to fix it."""


@attrs.frozen
class LoadedService:
    service: Service
    mapping: DocumentMap
    description_for_model: str = ""


class OpenAPIBridge:
    """The plugin object: what it keeps is the services' prompt texts of this load."""

    def __init__(self) -> None:
        self._descriptions: list[tuple[str, str]] = []

    @hookimpl
    def register_bridged_commands(
        self,
        register: RegisterBridgedCommand,
        settings: PluginSettings,
        unmapped: ReportUnmapped,
        secret: ReadSecret,
    ) -> None:
        self._descriptions = []
        services = settings.values.get("services") or {}
        limits = limits_from(settings)
        for name, entry in sorted(services.items()):
            try:
                loaded = load_service(
                    str(name), entry, secret, limits, config_dir=settings.config_dir
                )
            except ServiceError as exc:
                unmapped(str(name), str(exc))
                continue
            for operation in loaded.mapping.operations:
                register(
                    f"{name}.{operation.name}",
                    command_function(loaded.service, operation),
                    description=operation.description,
                    parameters=operation.parameters_schema,
                    permissions=["network"],
                )
            for item in loaded.mapping.unmapped:
                unmapped(f"{name}: {item.what}", item.reason)
            if loaded.description_for_model:
                self._descriptions.append((str(name), loaded.description_for_model))

    @hookimpl
    def build_prompt(self, session: SessionView, prompt: PromptBuilder) -> None:
        for name, text in self._descriptions:
            prompt.add_data(text, source=f"ai-plugin.json description of OpenAPI service {name}")


def limits_from(settings: PluginSettings) -> Limits:
    values = settings.values
    return Limits(
        timeout=float(values.get("timeout", 30)),
        max_bytes=int(values.get("max_bytes", 1024 * 1024)),
        max_output=int(values.get("max_output", 20_000)),
    )


def command_function(service: Service, operation: Operation) -> CommandFunction:
    """The function behind one bridged command (its arguments are the schema's)."""

    async def run(ctx: CommandContext, **arguments: Any) -> CommandResult:
        return await call(service, operation, arguments, ctx, limits_from(ctx.settings))

    run.__name__ = operation.name
    return run


def load_service(
    name: str,
    entry: object,
    secret: ReadSecret,
    limits: Limits,
    *,
    config_dir: Path | None = None,
) -> LoadedService:
    """Read, parse and map one configured service; ``ServiceError`` says why it cannot.

    A relative file path in ``spec`` is relative to ``config_dir`` (the config file's
    directory) when given, so it means the same wherever autogpt is started."""
    where = f"plugins.settings.openapi.services.{name}"
    if not isinstance(entry, Mapping) or not isinstance(entry.get("spec"), str):
        raise ServiceError(f"{where} needs 'spec': the path or http(s) URL of its OpenAPI document")
    unknown = sorted(set(map(str, entry)) - set(_ENTRY_KEYS))
    if unknown:
        raise ServiceError(
            f"{where} has unknown key(s) {', '.join(unknown)} (known: {', '.join(_ENTRY_KEYS)})"
        )
    auth = _auth(where, entry.get("auth"), secret)
    spec = str(entry["spec"])
    document, spec_base = read_document(spec, limits, relative_to=config_dir)
    description = ""
    if _is_ai_plugin(document):
        assert isinstance(document, dict)
        description, api_url, plugin_auth = _ai_plugin(where, document, spec_base)
        if plugin_auth in ("service_http", "user_http") and auth.kind == "none":
            raise ServiceError(
                f"its ai-plugin.json asks for {plugin_auth} authentication: give {where}.auth "
                "as {type: bearer, env: VARIABLE}"
            )
        document, spec_base = read_document(api_url, limits)
    base_url = entry.get("base_url")
    if base_url is not None and not isinstance(base_url, str):
        raise ServiceError(f"{where}.base_url must be a URL")
    if not base_url:
        base_url = _server_url(document, spec_base)
    if not base_url:
        raise ServiceError(
            f"its document names no server URL (servers[0].url); give {where}.base_url"
        )
    return LoadedService(Service(name, base_url, auth), map_document(document), description)


def _auth(where: str, raw: object, secret: ReadSecret) -> Auth:
    if raw is None or raw == "none":
        return Auth()
    if not isinstance(raw, Mapping):
        raise ServiceError(
            f"{where}.auth must be none, {{type: bearer, env: VARIABLE}} or "
            "{type: api_key, header: NAME, env: VARIABLE}"
        )
    kind = raw.get("type", "none")
    if kind not in _AUTH_KINDS:
        raise ServiceError(
            f"{where}.auth.type {kind!r} is not supported (oauth and others are not); use "
            f"one of {', '.join(_AUTH_KINDS)}"
        )
    if kind == "none":
        return Auth()
    env = raw.get("env")
    if not isinstance(env, str) or not env:
        raise ServiceError(f"{where}.auth.env must name the environment variable of the token")
    header = raw.get("header", "Authorization")
    if kind == "api_key" and (not isinstance(header, str) or not header or "header" not in raw):
        raise ServiceError(f"{where}.auth.header must name the header that carries the API key")
    token = secret(env)
    if not token:
        raise ServiceError(
            f"the environment variable {env} ({where}.auth.env) is not set; set it (or keep "
            "it in the secrets file) and run again"
        )
    return Auth(kind=kind, header=str(header), token=token)


def read_document(
    spec: str, limits: Limits, *, relative_to: Path | None = None
) -> tuple[object, str]:
    """The parsed document at ``spec`` (a path or an http(s) URL) and the base URL that
    relative URLs in it are resolved against (``""`` for a file). A relative path is
    taken from ``relative_to`` when given (else the working directory)."""
    scheme = urlsplit(spec).scheme.lower()
    if scheme in ("http", "https"):
        text = _fetch(spec, limits)
        base = spec
    elif scheme and len(scheme) > 1:
        raise ServiceError(f"the spec {spec!r} is neither a file path nor an http(s) URL")
    else:
        path = Path(spec).expanduser()
        if relative_to is not None and not path.is_absolute():
            path = relative_to / path
        try:
            if path.stat().st_size > MAX_SPEC_BYTES:
                raise ServiceError(f"the spec {path} is larger than {MAX_SPEC_BYTES:,} bytes")
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ServiceError(f"the spec {path} cannot be read: {exc}") from None
        base = ""
    return parse_document(text, spec), base


def _fetch(url: str, limits: Limits) -> str:
    # Sync on purpose: register_bridged_commands runs once, at load.
    try:
        with (
            httpx.Client(timeout=limits.timeout, follow_redirects=True) as client,
            client.stream("GET", url, headers={"Accept": "application/json, */*"}) as response,
        ):
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > MAX_SPEC_BYTES:
                    raise ServiceError(f"the spec at {url} is larger than {MAX_SPEC_BYTES:,} bytes")
            if not response.is_success:
                raise ServiceError(f"reading the spec at {url} answered {response.status_code}")
            return body.decode(response.charset_encoding or "utf-8", errors="replace")
    except httpx.HTTPError as exc:
        raise ServiceError(
            f"reading the spec at {url} failed: {type(exc).__name__}: {exc}"
        ) from None


def parse_document(text: str, source: str) -> object:
    """JSON, or YAML without anchors and aliases (a small file cannot expand into a huge
    document)."""
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            return json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise ServiceError(f"the spec {source} is not valid JSON: {exc}") from None
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise ServiceError(
                    f"the spec {source} uses YAML anchors or aliases, which are not read"
                )
        return yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise ServiceError(f"the spec {source} is not valid YAML or JSON: {exc}") from None


def _is_ai_plugin(document: object) -> bool:
    return isinstance(document, dict) and "api" in document and "openapi" not in document


def _ai_plugin(where: str, document: dict[str, Any], base: str) -> tuple[str, str, str]:
    """``(description_for_model, the OpenAPI document's URL, auth type)`` of an ai-plugin.json."""
    api = document.get("api")
    if not isinstance(api, Mapping) or api.get("type") != "openapi" or not api.get("url"):
        raise ServiceError("its ai-plugin.json has no 'api' of type openapi with a 'url'")
    auth = document.get("auth")
    kind = str(auth.get("type", "none")) if isinstance(auth, Mapping) else "none"
    if kind not in ("none", "service_http", "user_http"):
        raise ServiceError(
            f"its ai-plugin.json asks for {kind} authentication, which the bridge does not "
            "support (oauth needs a browser sign-in)"
        )
    url = str(api["url"])
    if base:
        url = urljoin(base, url)
    elif not urlsplit(url).scheme:
        raise ServiceError(f"its ai-plugin.json's api.url {url!r} is relative to nothing")
    description = document.get("description_for_model")
    return (description.strip() if isinstance(description, str) else ""), url, kind


def _server_url(document: object, base: str) -> str:
    if not isinstance(document, dict):
        return ""
    servers = document.get("servers")
    if not isinstance(servers, list) or not servers or not isinstance(servers[0], dict):
        return _origin(base)
    url = servers[0].get("url")
    if not isinstance(url, str) or not url:
        return _origin(base)
    variables = servers[0].get("variables")
    for key, variable in (variables or {}).items() if isinstance(variables, dict) else ():
        if isinstance(variable, dict) and "default" in variable:
            url = url.replace("{" + str(key) + "}", str(variable["default"]))
    if urlsplit(url).scheme:
        return url
    return urljoin(base, url) if base else ""


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""


__all__ = ["OpenAPIBridge", "load_service", "map_document", "parse_document", "read_document"]
