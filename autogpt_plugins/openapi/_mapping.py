"""From an OpenAPI 3.x document to commands: one per operation with an ``operationId``.

Pure: no network, no files. ``map_document`` returns the operations it could map, each with
the JSON Schema of its arguments (path, query and header parameters by name, the JSON body
as ``body``), and what it could not map, each with the reason. Local references
(``#/components/...``) are inlined; a remote or recursive one makes its operation unmapped.
Nothing in a document makes it raise: whatever is malformed becomes a reason.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

import attrs

from .._bridge import command_name

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
#: Where a parameter may be; ``cookie`` parameters are not supported.
LOCATIONS = ("path", "query", "header")
#: Headers the bridge sets itself: the OpenAPI specification says to ignore them.
IGNORED_HEADERS = frozenset({"accept", "content-type", "authorization"})
#: Schema nodes an operation's arguments may expand to, references inlined: a document whose
#: references fan out (each definition naming the next twice) would otherwise grow without
#: end.
MAX_SCHEMA_NODES = 5000
#: The argument that carries the JSON request body.
BODY = "body"
#: Security scheme kinds the bridge can send: ``(type, scheme or "in")``.
SUPPORTED_SECURITY = {("http", "bearer"), ("apikey", "header")}


class Unmappable(Exception):
    """What is wrong with one part of a document; the message is the reason."""


@attrs.frozen
class Parameter:
    """One path, query or header parameter of an operation."""

    name: str
    location: str
    required: bool = False


@attrs.frozen
class Operation:
    """A mapped operation: what the command sends, and the schema of its arguments."""

    name: str  # the command's name after the prefix: the operationId, made name-safe
    operation_id: str
    method: str
    path: str
    description: str
    parameters_schema: Mapping[str, Any]
    parameters: tuple[Parameter, ...] = ()
    has_body: bool = False
    #: Whether the operation sends the configured credentials (its security allows it).
    authenticated: bool = False


@attrs.frozen
class Unmapped:
    """Something of the document that did not become a command, and why."""

    what: str
    reason: str


@attrs.frozen
class DocumentMap:
    """What ``map_document`` made of a document."""

    operations: tuple[Operation, ...]
    unmapped: tuple[Unmapped, ...]


def map_document(document: object) -> DocumentMap:
    """Map every operation of ``document``; never raises for what the document holds."""
    if not isinstance(document, dict):
        return DocumentMap((), (Unmapped("document", "it is not a mapping (an OpenAPI object)"),))
    version = document.get("openapi")
    if not (isinstance(version, str) and version.startswith("3.")):
        found = f"openapi: {version!r}" if version is not None else "no 'openapi' field"
        why = f"it is not an OpenAPI 3.x document ({found}); Swagger 2.0 is not supported"
        return DocumentMap((), (Unmapped("document", why),))
    operations: list[Operation] = []
    unmapped: list[Unmapped] = []
    if document.get("webhooks"):
        unmapped.append(Unmapped("webhooks", "webhooks are requests the service makes; skipped"))
    paths = document.get("paths")
    if not isinstance(paths, dict):
        unmapped.append(Unmapped("paths", "the document has no 'paths' mapping"))
        paths = {}
    names: dict[str, str] = {}
    for path, item in paths.items():
        where = f"paths.{path}"
        try:
            item = _resolved(document, item)
            if not isinstance(item, dict):
                raise Unmappable("the path item is not a mapping")
        except Unmappable as exc:
            unmapped.append(Unmapped(where, str(exc)))
            continue
        for method in METHODS:
            if method not in item:
                continue
            what = f"{method.upper()} {path}"
            operation = item[method]
            op_id = operation.get("operationId") if isinstance(operation, dict) else None
            if isinstance(op_id, str) and op_id:
                what = f"{op_id} ({what})"
            try:
                mapped = _operation(document, str(path), method, item, operation)
            except Unmappable as exc:
                unmapped.append(Unmapped(what, str(exc)))
                continue
            except RecursionError:
                unmapped.append(Unmapped(what, "its schemas nest too deeply to map"))
                continue
            if mapped.name in names:
                unmapped.append(
                    Unmapped(
                        what,
                        f"its command name {mapped.name!r} is already that of "
                        f"{names[mapped.name]}; give the operations distinct operationIds",
                    )
                )
                continue
            names[mapped.name] = what
            operations.append(mapped)
            if isinstance(operation, dict) and operation.get("callbacks"):
                unmapped.append(
                    Unmapped(
                        f"{what} callbacks",
                        "callbacks are requests the service makes later; the operation is "
                        "mapped without them",
                    )
                )
    return DocumentMap(tuple(operations), tuple(unmapped))


def _operation(
    document: dict[str, Any], path: str, method: str, item: dict[str, Any], operation: object
) -> Operation:
    if not isinstance(operation, dict):
        raise Unmappable("the operation is not a mapping")
    op_id = operation.get("operationId")
    if not isinstance(op_id, str) or not op_id.strip():
        raise Unmappable("it has no operationId, which names the command; add one")
    name = command_name(op_id)
    authenticated = _security(document, operation)
    budget = [MAX_SCHEMA_NODES]
    properties: dict[str, Any] = {}
    required: list[str] = []
    parameters: list[Parameter] = []
    merged: dict[tuple[str, str], Any] = {}
    # Parameters of the path item apply to each operation, which may override them.
    for source in (item.get("parameters"), operation.get("parameters")):
        if source is None:
            continue
        if not isinstance(source, list):
            raise Unmappable("'parameters' is not a list")
        for raw in source:
            param = _resolved(document, raw)
            if not isinstance(param, dict):
                raise Unmappable("a parameter is not a mapping")
            pname, location = param.get("name"), param.get("in")
            if not isinstance(pname, str) or not pname or not isinstance(location, str):
                raise Unmappable("a parameter has no 'name' or 'in'")
            merged[(pname, location)] = param
    for (pname, location), param in merged.items():
        if location == "header" and pname.lower() in IGNORED_HEADERS:
            continue
        if location not in LOCATIONS:
            raise Unmappable(
                f"parameter {pname!r} is in {location!r}; only path, query and "
                "header parameters are supported"
            )
        if pname in properties or pname in (BODY, "ctx"):
            raise Unmappable(
                f"parameter {pname!r} clashes with another argument ({BODY!r} is the JSON "
                "body, 'ctx' is reserved)"
            )
        if "schema" in param:
            schema = _schema(document, param["schema"], budget)
        elif "content" in param:
            raise Unmappable(f"parameter {pname!r} is described by 'content', not 'schema'")
        else:
            schema = {}
        if not isinstance(schema, dict):
            schema = {} if schema is True else {"not": {}}
        description = param.get("description")
        if isinstance(description, str) and description and "description" not in schema:
            schema = {**schema, "description": description}
        properties[pname] = schema
        is_required = location == "path" or param.get("required") is True
        if is_required:
            required.append(pname)
        parameters.append(Parameter(pname, location, is_required))
    missing = [p for p in re.findall(r"\{([^{}]+)\}", path) if (p, "path") not in merged]
    if missing:
        raise Unmappable(f"the path names {', '.join(missing)}, which no parameter describes")
    has_body = False
    if "requestBody" in operation:
        body = _resolved(document, operation["requestBody"])
        if not isinstance(body, dict):
            raise Unmappable("its requestBody is not a mapping")
        content = body.get("content")
        if not isinstance(content, dict) or not content:
            raise Unmappable("its requestBody has no content types")
        json_type = next((t for t in content if _is_json(str(t))), None)
        if json_type is None:
            kinds = ", ".join(sorted(map(str, content)))
            raise Unmappable(f"its request body is not JSON ({kinds}); only JSON bodies are sent")
        media = content[json_type] if isinstance(content[json_type], dict) else {}
        schema = _schema(document, media.get("schema", {}), budget)
        description = body.get("description")
        if isinstance(schema, dict) and isinstance(description, str) and description:
            schema = {**schema, "description": description}
        properties[BODY] = schema
        if body.get("required") is True:
            required.append(BODY)
        has_body = True
    schema_out: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema_out["required"] = required
    text = [t for t in (operation.get("summary"), operation.get("description")) if _text(t)]
    description = " ".join(str(t).strip() for t in text)
    if len(description) > 1000:
        description = description[:997] + "..."
    description = (description + " " if description else "") + f"({method.upper()} {path})"
    return Operation(
        name=name,
        operation_id=op_id,
        method=method.upper(),
        path=path,
        description=description,
        parameters_schema=schema_out,
        parameters=tuple(parameters),
        has_body=has_body,
        authenticated=authenticated,
    )


def _text(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _is_json(media_type: str) -> bool:
    base = media_type.split(";")[0].strip().lower()
    return base == "application/json" or base.endswith("+json")


def _security(document: dict[str, Any], operation: dict[str, Any]) -> bool:
    """Whether the operation takes credentials; ``Unmappable`` when it needs a kind of
    authentication the bridge cannot send (OAuth 2, OpenID Connect, a cookie)."""
    requirements = operation.get("security", document.get("security"))
    if not requirements:
        return False
    if not isinstance(requirements, list):
        raise Unmappable("'security' is not a list")
    schemes = _mapping(_mapping(document.get("components")).get("securitySchemes"))
    kinds: list[str] = []
    for alternative in requirements:
        if not isinstance(alternative, dict):
            raise Unmappable("a security requirement is not a mapping")
        if not alternative:
            return False  # {} : authentication is optional
        usable = True
        for scheme_name in alternative:
            scheme = _mapping(_resolved(document, schemes.get(scheme_name)))
            kind = str(scheme.get("type", "")).lower()
            detail = str(scheme.get("scheme" if kind == "http" else "in", "")).lower()
            if (kind, detail) not in SUPPORTED_SECURITY:
                usable = False
                kinds.append(
                    f"{scheme_name} ({kind or 'undefined'}{' ' + detail if detail else ''})"
                )
        if usable:
            return True
    raise Unmappable(
        f"it needs authentication the bridge cannot send: {', '.join(kinds)}; supported are "
        "HTTP bearer tokens and API keys in a header"
    )


def _mapping(value: object) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


def _lookup(document: dict[str, Any], ref: str) -> object:
    """The value a local reference (``#/components/...``) points at."""
    if not ref.startswith("#/"):
        raise Unmappable(
            f"the reference {ref!r} names another document; only references inside the "
            "document ('#/components/...') are followed"
        )
    node: object = document
    for raw in ref[2:].split("/"):
        part = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise Unmappable(f"the reference {ref!r} points at nothing in the document")
    return node


def _resolved(document: dict[str, Any], value: object) -> object:
    """``value``, or what its ``$ref`` points at (following a chain of them)."""
    seen: set[str] = set()
    while isinstance(value, dict) and isinstance(value.get("$ref"), str):
        ref = value["$ref"]
        if ref in seen:
            raise Unmappable(f"the reference {ref!r} refers to itself")
        seen.add(ref)
        value = _lookup(document, ref)
    return value


def _schema(document: dict[str, Any], schema: object, budget: list[int]) -> Any:
    """``schema`` as JSON Schema 2020-12, every local reference inlined (OpenAPI 3.0's
    ``nullable`` and boolean ``exclusiveMinimum``/``exclusiveMaximum`` translated)."""
    return _inline(document, schema, (), budget)


def _inline(
    document: dict[str, Any], node: object, chain: tuple[str, ...], budget: list[int]
) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise Unmappable(
            f"its parameter schemas expand to more than {MAX_SCHEMA_NODES} parts once "
            "references are inlined"
        )
    if isinstance(node, list):
        return [_inline(document, item, chain, budget) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        if ref in chain:
            raise Unmappable(
                f"the schema reference {ref!r} is recursive (it contains itself); a command's "
                "parameters must be finite"
            )
        target = _inline(document, _lookup(document, ref), (*chain, ref), budget)
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        if siblings and isinstance(target, dict):
            return {"allOf": [target], **_inline(document, siblings, chain, budget)}
        return target
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("properties", "patternProperties", "$defs", "definitions") and isinstance(
            value, dict
        ):
            # Names of properties, not keywords: a property called "$ref" is a property.
            out[key] = {k: _inline(document, v, chain, budget) for k, v in value.items()}
        elif key in ("example", "examples", "xml", "externalDocs", "discriminator"):
            continue  # documentation, or OpenAPI-only: nothing a validator needs
        else:
            out[key] = _inline(document, value, chain, budget)
    if out.pop("nullable", None) is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if isinstance(out.get(exclusive), bool):
            if out.pop(exclusive) and bound in out:
                out[exclusive] = out.pop(bound)
    return out
