"""Plugin manifests: the ``autogpt-plugin.yaml`` file every plugin package ships.

A manifest is read and validated without importing the plugin. Validation reports every
problem at once, each with the file, the dotted field path, what is wrong and the fix.
The machine-readable schema is ``hookspecs/manifest.schema.json``; the semantic checks
that JSON Schema cannot express (PEP 440 specifiers, PEP 508 requirements, command
permissions within the plugin's permissions, unique command names) live here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import attrs
import yaml

from ._errors import ManifestError, ManifestIssue
from ._permissions import PERMISSION_NAMES, PERMISSION_PATTERN
from ._redact import is_secret_name

MANIFEST_FILENAME = "autogpt-plugin.yaml"
MANIFEST_VERSION = 1


@attrs.frozen
class CommandDecl:
    """A command a plugin declares: the only commands it may register."""

    name: str
    description: str
    aliases: tuple[str, ...] = ()
    parameters: Mapping[str, Any] = attrs.field(factory=dict)
    permissions: tuple[str, ...] = ()
    timeout: float | None = None


@attrs.frozen
class SettingDecl:
    """One entry of a plugin's config schema."""

    name: str
    type: str
    description: str = ""
    default: Any = None
    env: str | None = None
    secret: bool = False
    required: bool = False


@attrs.frozen
class Manifest:
    """A validated plugin manifest."""

    id: str
    name: str
    version: str
    description: str = ""
    requires_core: str = ""
    enabled_by_default: bool = False
    homepage: str = ""
    codeowners: tuple[str, ...] = ()
    permissions: tuple[str, ...] = ()
    commands: tuple[CommandDecl, ...] = ()
    requires: tuple[str, ...] = ()
    load_after: tuple[str, ...] = ()
    load_before: tuple[str, ...] = ()
    requirements: tuple[str, ...] = ()
    settings: tuple[SettingDecl, ...] = ()
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        """The manifest as plain JSON values (what the cache and ``plugins info --json`` use)."""
        return attrs.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Manifest:
        """Rebuild a manifest from :meth:`to_json` output (already validated)."""
        fields = dict(data)
        fields["commands"] = tuple(
            CommandDecl(
                **{
                    **c,
                    "aliases": tuple(c["aliases"]),
                    "permissions": tuple(c["permissions"]),
                }
            )
            for c in fields["commands"]
        )
        fields["settings"] = tuple(SettingDecl(**s) for s in fields["settings"])
        for name in (
            "codeowners",
            "permissions",
            "requires",
            "load_after",
            "load_before",
            "requirements",
        ):
            fields[name] = tuple(fields[name])
        return cls(**fields)


@cache
def manifest_schema() -> dict[str, Any]:
    """The JSON Schema of a manifest, as shipped in ``hookspecs``."""
    text = resources.files("hookspecs").joinpath("manifest.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def load_manifest(path: Path) -> Manifest:
    """Read and validate the manifest at ``path``; raise ``ManifestError`` listing all problems."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(
            [
                ManifestIssue(
                    str(path),
                    "",
                    "the manifest file is missing",
                    f"ship a {MANIFEST_FILENAME} inside the plugin package (see docs/manifest.md)",
                )
            ]
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(
            [ManifestIssue(str(path), "", f"cannot read the file: {exc}", "save it as UTF-8 text")]
        ) from None
    return parse_manifest(text, source=str(path))


def parse_manifest(text: str, *, source: str = "<manifest>") -> Manifest:
    """Parse YAML ``text`` into a validated ``Manifest``; ``source`` names it in errors."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ManifestError(
            [
                ManifestIssue(
                    source,
                    "",
                    f"{where}not valid YAML ({problem})",
                    "fix the YAML syntax; check indentation and quoting",
                )
            ]
        ) from None
    except RecursionError:
        raise ManifestError(
            [ManifestIssue(source, "", "the YAML nests too deeply", "flatten the document")]
        ) from None
    return validate_manifest(data, source=source)


def validate_manifest(data: object, *, source: str = "<manifest>") -> Manifest:
    """Validate already-parsed manifest ``data``; raise ``ManifestError`` with every problem."""
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {_json_type(data)}"
        raise ManifestError(
            [
                ManifestIssue(
                    source,
                    "",
                    f"the manifest is {kind}, not a mapping of fields",
                    "start from the example in docs/manifest.md: 'manifest_version: 1', 'id: ...'",
                )
            ]
        )
    issues = _schema_issues(data, source)
    if not issues:
        issues = _semantic_issues(data, source)
    if issues:
        raise ManifestError(issues)
    return _build(data, source)


# --- schema validation -----------------------------------------------------------------


def _schema_issues(data: dict[Any, Any], source: str) -> list[ManifestIssue]:
    # Non-string keys cannot be expressed in JSON Schema; report them before jsonschema sees
    # them (it would compare them with string patterns and fail in unhelpful ways).
    bad_keys = list(_non_string_keys(data, ()))
    if bad_keys:
        return [
            ManifestIssue(
                source,
                _dotted(path) or "(top level)",
                f"the key {key!r} is a {_json_type(key)}, not a string",
                "quote the key so it is a string",
            )
            for path, key in bad_keys
        ]
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(manifest_schema())
    issues = []
    for error in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.path))):
        issues.extend(_explain(error, source))
    return issues


def _non_string_keys(
    node: object, path: tuple[object, ...]
) -> list[tuple[tuple[object, ...], object]]:
    found: list[tuple[tuple[object, ...], object]] = []
    stack: list[tuple[object, tuple[object, ...]]] = [(node, path)]
    while stack:
        current, where = stack.pop()
        if isinstance(current, dict):
            for key, value in current.items():
                if not isinstance(key, str):
                    found.append((where, key))
                else:
                    stack.append((value, (*where, key)))
        elif isinstance(current, list):
            stack.extend((value, (*where, i)) for i, value in enumerate(current))
    return found


TYPE_NAMES = {
    "string": "a string",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "array": "a list",
    "object": "a mapping",
    "null": "empty",
}


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    return type(value).__name__


def _dotted(path: Sequence[object]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _explain(error: Any, source: str) -> list[ManifestIssue]:
    """Turn one jsonschema error into issues with a plain-language problem and fix."""
    path = list(error.absolute_path)
    field = _dotted(path) or "(top level)"
    kind = error.validator
    value = error.instance
    if kind == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extras = sorted(str(k) for k in value if k not in error.schema.get("properties", {}))
        return [
            ManifestIssue(
                source,
                _dotted([*path, extra]),
                "unknown field",
                f"remove it or correct its spelling; known fields here: {', '.join(allowed)}"
                if allowed
                else "remove it",
            )
            for extra in extras
        ]
    if kind == "required":
        missing = [name for name in error.validator_value if name not in value]
        return [
            ManifestIssue(
                source, _dotted([*path, name]), "required field is missing", f"add '{name}: ...'"
            )
            for name in missing
        ]
    if kind == "type":
        want = error.validator_value
        wants = want if isinstance(want, list) else [want]
        names = " or ".join(TYPE_NAMES.get(str(w), str(w)) for w in wants)
        return [
            ManifestIssue(
                source,
                field,
                f"expected {names}, got {_json_type(value)} {_short(value)}",
                f"make it {names}",
            )
        ]
    if kind == "pattern":
        hint = _PATTERN_HINTS.get(
            error.validator_value, f"match the pattern {error.validator_value}"
        )
        return [ManifestIssue(source, field, f"{_short(value)} is not allowed here", hint)]
    if kind == "const":
        return [
            ManifestIssue(
                source,
                field,
                f"must be {error.validator_value!r}, got {_short(value)}",
                f"set it to {error.validator_value!r}",
            )
        ]
    if kind == "enum":
        options = ", ".join(repr(v) for v in error.validator_value)
        return [
            ManifestIssue(
                source, field, f"{_short(value)} is not one of {options}", f"use one of {options}"
            )
        ]
    if kind == "minLength":
        return [ManifestIssue(source, field, "must not be empty", "give it a value")]
    if kind == "exclusiveMinimum":
        return [
            ManifestIssue(
                source,
                field,
                f"must be greater than {error.validator_value}",
                "use a positive number",
            )
        ]
    if kind == "propertyNames":
        return [
            ManifestIssue(
                source,
                field,
                f"the name {_short(value)} is not allowed",
                "use lower-case letters, digits and '_', starting with a letter",
            )
        ]
    return [ManifestIssue(source, field, error.message, "see docs/manifest.md")]


_ID_HINT = "use lower-case letters, digits, '-' and '_', starting with a letter (at most 64)"
_PATTERN_HINTS = {
    "^[a-z][a-z0-9_-]{0,63}$": _ID_HINT,
    "^[a-z][a-z0-9_]{0,63}$": "use lower-case letters, digits and '_', starting with a letter",
    f"^{PERMISSION_PATTERN}$": f"use one of {PERMISSION_NAMES}",
    "^[A-Za-z_][A-Za-z0-9_]*$": "use an environment variable name: letters, digits and '_'",
}


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --- semantic checks -------------------------------------------------------------------


def _semantic_issues(data: dict[str, Any], source: str) -> list[ManifestIssue]:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    issues: list[ManifestIssue] = []
    spec = data.get("requires_core", "")
    if spec:
        try:
            SpecifierSet(spec)
        except InvalidSpecifier:
            issues.append(
                ManifestIssue(
                    source,
                    "requires_core",
                    f"{spec!r} is not a PEP 440 version specifier",
                    "write it like '>=0.1,<1'",
                )
            )
    for i, req in enumerate(data.get("requirements", [])):
        try:
            Requirement(req)
        except InvalidRequirement as exc:
            issues.append(
                ManifestIssue(
                    source,
                    f"requirements[{i}]",
                    f"{req!r} is not a PEP 508 requirement ({exc})",
                    "write it like 'httpx>=0.27'",
                )
            )
    plugin_id = data["id"]
    for field in ("requires", "load_after", "load_before"):
        for i, other in enumerate(data.get(field, [])):
            if other == plugin_id:
                issues.append(
                    ManifestIssue(
                        source, f"{field}[{i}]", "a plugin cannot name itself", "remove this entry"
                    )
                )
    declared = set(data.get("permissions", []))
    seen: dict[str, str] = {}
    for i, command in enumerate(data.get("capabilities", {}).get("commands", [])):
        where = f"capabilities.commands[{i}]"
        for j, perm in enumerate(command.get("permissions", [])):
            if perm not in declared:
                issues.append(
                    ManifestIssue(
                        source,
                        f"{where}.permissions[{j}]",
                        f"permission {perm!r} is not in the plugin's top-level 'permissions'",
                        f"add {perm!r} to 'permissions', or remove it from the command",
                    )
                )
        for k, name in enumerate([command["name"], *command.get("aliases", [])]):
            field = f"{where}.name" if k == 0 else f"{where}.aliases[{k - 1}]"
            if name in seen:
                issues.append(
                    ManifestIssue(
                        source,
                        field,
                        f"{name!r} is already used by {seen[name]}",
                        "give every command and alias a unique name",
                    )
                )
            else:
                seen[name] = where
        issues.extend(_parameter_issues(command.get("parameters"), f"{where}.parameters", source))
    settings = data.get("config", {}).get("settings", {})
    for name, setting in settings.items():
        env = setting.get("env")
        if env and (setting.get("secret") or is_secret_name(env)):
            where = f"config.settings.{name}"
            if f"secrets:{env}" not in declared:
                issues.append(
                    ManifestIssue(
                        source,
                        f"{where}.env",
                        f"reading the secret ${env} needs the permission 'secrets:{env}'",
                        f"add 'secrets:{env}' to 'permissions'",
                    )
                )
            if not setting.get("secret"):
                issues.append(
                    ManifestIssue(
                        source,
                        f"{where}.secret",
                        f"${env} looks like a secret but the setting is not marked secret",
                        "add 'secret: true' so that its value is never shown",
                    )
                )
        if "default" in setting and setting["default"] is not None:
            want = setting["type"]
            if not matches_type(setting["default"], want):
                issues.append(
                    ManifestIssue(
                        source,
                        f"config.settings.{name}.default",
                        f"the default {_short(setting['default'])} is not {TYPE_NAMES[want]}",
                        f"make the default {TYPE_NAMES[want]}, or change 'type'",
                    )
                )
    return issues


def _parameter_issues(params: object, field: str, source: str) -> list[ManifestIssue]:
    if params is None:
        return []
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    assert isinstance(params, dict)  # guaranteed by the manifest schema
    if params.get("type", "object") != "object":
        return [
            ManifestIssue(
                source,
                f"{field}.type",
                "command parameters must be a JSON Schema of type 'object', "
                f"got {params.get('type')!r}",
                "use 'type: object' with 'properties'",
            )
        ]
    try:
        Draft202012Validator.check_schema(params)
    except SchemaError as exc:
        where = _dotted([*exc.absolute_path]) if exc.absolute_path else ""
        return [
            ManifestIssue(
                source,
                f"{field}.{where}" if where else field,
                f"not a valid JSON Schema: {exc.message}",
                "see https://json-schema.org/understanding-json-schema/",
            )
        ]
    return []


def matches_type(value: object, want: str) -> bool:
    if want == "string":
        return isinstance(value, str)
    if want == "boolean":
        return isinstance(value, bool)
    if want == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if want == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if want == "array":
        return isinstance(value, list)
    return isinstance(value, dict)


def _build(data: dict[str, Any], source: str) -> Manifest:
    commands = tuple(
        CommandDecl(
            name=c["name"],
            description=c["description"],
            aliases=tuple(c.get("aliases", ())),
            parameters=c.get("parameters") or {"type": "object", "properties": {}},
            permissions=tuple(c.get("permissions", ())),
            timeout=float(c["timeout"]) if "timeout" in c else None,
        )
        for c in data.get("capabilities", {}).get("commands", [])
    )
    settings = tuple(
        SettingDecl(
            name=name,
            type=s["type"],
            description=s.get("description", ""),
            default=s.get("default"),
            env=s.get("env"),
            secret=bool(s.get("secret", False)),
            required=bool(s.get("required", False)),
        )
        for name, s in sorted(data.get("config", {}).get("settings", {}).items())
    )
    return Manifest(
        id=data["id"],
        name=data["name"],
        version=str(data["version"]),
        description=data.get("description", ""),
        requires_core=data.get("requires_core", ""),
        enabled_by_default=bool(data.get("enabled_by_default", False)),
        homepage=data.get("homepage", ""),
        codeowners=tuple(data.get("codeowners", ())),
        permissions=tuple(data.get("permissions", ())),
        commands=commands,
        requires=tuple(data.get("requires", ())),
        load_after=tuple(data.get("load_after", ())),
        load_before=tuple(data.get("load_before", ())),
        requirements=tuple(data.get("requirements", ())),
        settings=settings,
        source=source,
    )
