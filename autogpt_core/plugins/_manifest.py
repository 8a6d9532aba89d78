"""Plugin manifests: the ``autogpt-plugin.yaml`` file every plugin package ships.

A manifest is read and validated without importing the plugin. Validation reports every
problem at once, each with the file, the dotted field path, what is wrong and the fix.
The machine-readable schema is ``hookspecs/manifest.schema.json``; the semantic checks
that JSON Schema cannot express (PEP 440 specifiers, PEP 508 requirements, command
permissions within the plugin's permissions, unique command names, command parameter
schemas whose references resolve) live here.

Manifests are read on every command, so reading one is bounded whatever the file holds:
at most ``MAX_MANIFEST_BYTES``, at most ``MAX_MANIFEST_DEPTH`` levels of nesting, and no
YAML anchors or aliases (``&name``/``*name``), which is how a 600-byte file expands into
gigabytes ("billion laughs") or into a structure that contains itself.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import attrs
import yaml

from .._errors import ManifestError, ManifestIssue
from ..agent._redact import is_secret_name
from ._permissions import PERMISSION_NAMES, PERMISSION_PATTERN
from ._yaml import Refused, StrictLoader

MANIFEST_FILENAME = "autogpt-plugin.yaml"
MANIFEST_VERSION = 1
#: The largest manifest read, in bytes: real ones are a few KiB.
MAX_MANIFEST_BYTES = 256 * 1024
#: The deepest nesting of lists and mappings in a manifest: a command's parameters
#: schema starts at level 5, which leaves room for about a dozen nested objects.
MAX_MANIFEST_DEPTH = 32


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
class BridgedDecl:
    """``capabilities.bridged``: the plugin registers commands at run time from its
    configuration (``register_bridged_commands``), named ``PREFIX.NAME`` with ``PREFIX`` a
    key of the setting ``prefixes_from``, each needing at most ``permissions``."""

    prefixes_from: str
    permissions: tuple[str, ...] = ()
    description: str = ""


@attrs.frozen
class CLICommandDecl:
    """An ``autogpt NAME`` command a plugin declares: the only ones it may register."""

    name: str
    help: str


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
    #: Bounds of an integer or number setting (``None``: unbounded), inclusive.
    minimum: int | float | None = None
    maximum: int | float | None = None
    #: The only values a string, integer or number setting may take (``None``: any).
    enum: tuple[Any, ...] | None = None


@attrs.frozen
class Manifest:
    """A validated plugin manifest."""

    id: str
    name: str
    version: str
    description: str = ""
    requires_core: str = ""
    #: ``True``, ``False``, or the kinds of session store (``"sqlite"``, ``"postgresql"``)
    #: with which the plugin is on unless the user says otherwise (``default_on``).
    enabled_by_default: bool | tuple[str, ...] = False
    #: Whether the core gives the plugin the session store's location.
    shares_store: bool = False
    #: ``setup.terms``: what the user accepts before the plugin is enabled ("" for none).
    terms: str = ""
    homepage: str = ""
    codeowners: tuple[str, ...] = ()
    permissions: tuple[str, ...] = ()
    commands: tuple[CommandDecl, ...] = ()
    #: ``capabilities.bridged``: ``None`` unless the plugin registers commands at run time.
    bridged: BridgedDecl | None = None
    #: The ``cli.commands``: what ``autogpt --help`` lists without importing the plugin.
    cli_commands: tuple[CLICommandDecl, ...] = ()
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
        # Indexed: an entry cached before the bounds existed is re-read (KeyError).
        fields["settings"] = tuple(
            SettingDecl(
                **{
                    **s,
                    "minimum": s["minimum"],
                    "maximum": s["maximum"],
                    "enum": None if s["enum"] is None else tuple(s["enum"]),
                }
            )
            for s in fields["settings"]
        )
        bridged = fields["bridged"]  # indexed: an entry cached before the field is re-read
        fields["bridged"] = (
            None
            if bridged is None
            else BridgedDecl(**{**bridged, "permissions": tuple(bridged["permissions"])})
        )
        # Indexed, not .get(): an entry cached before the field existed is re-read.
        fields["cli_commands"] = tuple(CLICommandDecl(**c) for c in fields["cli_commands"])
        for name in (
            "codeowners",
            "permissions",
            "requires",
            "load_after",
            "load_before",
            "requirements",
        ):
            fields[name] = tuple(fields[name])
        fields["enabled_by_default"] = _enabled_by_default(fields.get("enabled_by_default"))
        return cls(**fields)

    @property
    def terms_digest(self) -> str:
        """What ``plugins.accepted`` records of the terms accepted: a change asks again."""
        import hashlib

        return hashlib.sha256(self.terms.encode("utf-8")).hexdigest()[:16]

    def default_on(self, store_kind: str) -> bool:
        """Whether the plugin is on unless the user says otherwise, with a session store of
        ``store_kind`` (``"sqlite"`` or ``"postgresql"``)."""
        if isinstance(self.enabled_by_default, tuple):
            return store_kind in self.enabled_by_default
        return self.enabled_by_default


@cache
def manifest_schema() -> dict[str, Any]:
    """The JSON Schema of a manifest, as shipped in ``hookspecs``."""
    text = resources.files("hookspecs").joinpath("manifest.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def load_manifest(path: Path) -> Manifest:
    """Read and validate the manifest at ``path``; raise ``ManifestError`` listing all problems."""
    try:
        with path.open("rb") as file:
            # Never more than the limit (plus one byte to notice it is exceeded) in memory.
            raw = file.read(MAX_MANIFEST_BYTES + 1)
        text = raw.decode("utf-8")
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
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ManifestError([_too_large(str(path))])
    return parse_manifest(text, source=str(path))


def _too_large(source: str) -> ManifestIssue:
    return ManifestIssue(
        source,
        "",
        f"the file is larger than {MAX_MANIFEST_BYTES // 1024} KiB, the limit for a manifest",
        "keep only the manifest's fields in it (a few KiB); data belongs in the package",
    )


def parse_manifest(text: str, *, source: str = "<manifest>") -> Manifest:
    """Parse YAML ``text`` into a validated ``Manifest``; ``source`` names it in errors."""
    # Characters are never more than bytes: the cheap test first, then the exact one.
    if len(text) > MAX_MANIFEST_BYTES or len(text.encode("utf-8", "replace")) > MAX_MANIFEST_BYTES:
        raise ManifestError([_too_large(source)])
    try:
        loader = StrictLoader(text, max_depth=MAX_MANIFEST_DEPTH)  # checks the characters
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
    except Refused as exc:
        raise ManifestError([ManifestIssue(source, "", exc.problem, exc.fix)]) from None
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
    # Non-string keys cannot be expressed in JSON Schema; report them before jsonschema sees
    # them (it would compare them with string patterns and fail in unhelpful ways), alone.
    issues = [
        ManifestIssue(
            source,
            _dotted(path) or "(top level)",
            f"the key {key!r} is a {_json_type(key)}, not a string",
            "quote the key so it is a string",
        )
        for path, key in _non_string_keys(data, ())
    ]
    if issues:
        raise ManifestError(issues)
    issues = _schema_issues(data, source)
    # The semantic checks run on schema-invalid data too, so that one error lists every
    # problem; they skip whatever the schema check reports. Should one of them still trip
    # over a value it did not expect, that is this manifest's error, not every command's.
    try:
        issues.extend(_semantic_issues(data, source))
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError) as exc:
        if not issues:
            issues.append(
                ManifestIssue(
                    source,
                    "",
                    f"the manifest could not be checked ({type(exc).__name__}: {exc})",
                    "report this as a bug in autogpt-core, with the manifest",
                )
            )
    if issues:
        raise ManifestError(issues)
    return _build(data, source)


# --- schema validation -----------------------------------------------------------------


def _schema_issues(data: dict[str, Any], source: str) -> list[ManifestIssue]:
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(manifest_schema())
    issues: list[ManifestIssue] = []
    for error in sorted(validator.iter_errors(data), key=lambda e: list(map(str, e.path))):
        # jsonschema reports each missing required field as an error of its own, and each
        # of those lists them all: every issue once.
        issues.extend(i for i in _explain(error, source) if i not in issues)
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
    if kind == "anyOf" and path == ["enabled_by_default"]:
        return [
            ManifestIssue(
                source,
                field,
                f"expected true, false or a list of store kinds, got {_short(value)}",
                "write 'enabled_by_default: true', 'false', or e.g. '[postgresql]' (kinds: "
                "sqlite, postgresql; each once)",
            )
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


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _mapping(value: object) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


_PERMISSION = re.compile(f"^{PERMISSION_PATTERN}$")
_ENV_NAME = re.compile("^[A-Za-z_][A-Za-z0-9_]*$")


def _semantic_issues(data: dict[str, Any], source: str) -> list[ManifestIssue]:
    """The checks JSON Schema cannot express. ``data`` may fail the schema: every value is
    type-checked before use, and a value of the wrong type is left to the schema's issue."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    issues: list[ManifestIssue] = []
    spec = data.get("requires_core", "")
    if isinstance(spec, str) and spec:
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
    for i, req in enumerate(_list(data.get("requirements"))):
        if not isinstance(req, str) or not req:
            continue
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
    plugin_id = data.get("id")
    for field in ("requires", "load_after", "load_before"):
        for i, other in enumerate(_list(data.get(field))):
            if isinstance(plugin_id, str) and other == plugin_id:
                issues.append(
                    ManifestIssue(
                        source, f"{field}[{i}]", "a plugin cannot name itself", "remove this entry"
                    )
                )
    declared = {p for p in _list(data.get("permissions")) if isinstance(p, str)}
    seen: dict[str, str] = {}
    commands = _list(_mapping(data.get("capabilities")).get("commands"))
    for i, command in enumerate(commands):
        if not isinstance(command, dict):
            continue
        where = f"capabilities.commands[{i}]"
        for j, perm in enumerate(_list(command.get("permissions"))):
            # A malformed permission is the schema's issue; "add it" would be bad advice.
            if isinstance(perm, str) and _PERMISSION.match(perm) and perm not in declared:
                issues.append(
                    ManifestIssue(
                        source,
                        f"{where}.permissions[{j}]",
                        f"permission {perm!r} is not in the plugin's top-level 'permissions'",
                        f"add {perm!r} to 'permissions', or remove it from the command",
                    )
                )
        for k, name in enumerate([command.get("name"), *_list(command.get("aliases"))]):
            if not isinstance(name, str):
                continue
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
        issues.extend(parameter_issues(command.get("parameters"), f"{where}.parameters", source))
    issues.extend(_cli_issues(data, source))
    settings = _mapping(_mapping(data.get("config")).get("settings"))
    issues.extend(_bridged_issues(data, declared, settings, source))
    for name, setting in settings.items():
        if not isinstance(setting, dict):
            continue
        where = f"config.settings.{name}"
        env = setting.get("env")
        secret = setting.get("secret") is True
        if isinstance(env, str) and _ENV_NAME.match(env) and (secret or is_secret_name(env)):
            if f"secrets:{env}" not in declared:
                issues.append(
                    ManifestIssue(
                        source,
                        f"{where}.env",
                        f"reading the secret ${env} needs the permission 'secrets:{env}'",
                        f"add 'secrets:{env}' to 'permissions'",
                    )
                )
            if not secret:
                issues.append(
                    ManifestIssue(
                        source,
                        f"{where}.secret",
                        f"${env} looks like a secret but the setting is not marked secret",
                        "add 'secret: true' so that its value is never shown",
                    )
                )
        want = setting.get("type")
        default = setting.get("default")
        if default is not None and want in _SETTING_TYPES and not matches_type(default, want):
            issues.append(
                ManifestIssue(
                    source,
                    f"{where}.default",
                    f"the default {_short(default)} is not {TYPE_NAMES[want]}",
                    f"make the default {TYPE_NAMES[want]}, or change 'type'",
                )
            )
        if want in _SETTING_TYPES:
            issues.extend(_constraint_issues(setting, want, where, source))
    return issues


def _constraint_issues(
    setting: dict[Any, Any], want: str, where: str, source: str
) -> list[ManifestIssue]:
    """A setting's ``minimum``, ``maximum`` and ``enum``: each fits its type, the bounds
    are finite numbers in order, the choices have the setting's type, are finite and obey
    the bounds, and the default (if it has the setting's type) obeys them all. A bound or
    a choice the schema already refuses (not a number, not a list) is skipped here."""
    issues: list[ManifestIssue] = []
    bounds: dict[str, int | float] = {}
    for key in ("minimum", "maximum"):
        if key not in setting:
            continue
        bound = setting[key]
        if want not in ("integer", "number"):
            issues.append(
                ManifestIssue(
                    source,
                    f"{where}.{key}",
                    f"'{key}' applies to integer and number settings, not to {TYPE_NAMES[want]}",
                    f"remove '{key}', or make the type integer or number",
                )
            )
        elif not _is_number(bound):
            continue  # the schema says what it is
        elif isinstance(bound, float) and not math.isfinite(bound):
            issues.append(
                ManifestIssue(
                    source,
                    f"{where}.{key}",
                    f"{_short(bound)} is not a finite number",
                    f"give a finite '{key}', or remove it for no bound",
                )
            )
        else:
            bounds[key] = bound
    low, high = bounds.get("minimum"), bounds.get("maximum")
    if low is not None and high is not None and low > high:
        issues.append(
            ManifestIssue(
                source,
                f"{where}.minimum",
                f"the minimum {_short(low)} is above the maximum {_short(high)}",
                "swap them, or fix the one that is wrong",
            )
        )
    bounded = SettingDecl(name=where, type=want, minimum=low, maximum=high)
    choices = setting.get("enum")
    valid_choices: list[Any] = []
    if isinstance(choices, list) and choices:
        if want not in ("string", "integer", "number"):
            issues.append(
                ManifestIssue(
                    source,
                    f"{where}.enum",
                    f"'enum' applies to string, integer and number settings, not to "
                    f"{TYPE_NAMES[want]}",
                    "remove 'enum', or make the type string, integer or number",
                )
            )
        else:
            for i, choice in enumerate(choices):
                problem = setting_problem(bounded, choice)
                if problem is None:
                    valid_choices.append(choice)
                    continue
                issues.append(
                    ManifestIssue(
                        source,
                        f"{where}.enum[{i}]",
                        f"the choice {_short(choice)} {problem}",
                        "make every choice a value the setting may take, or change "
                        "'type', 'minimum' or 'maximum'",
                    )
                )
    default = setting.get("default")
    if issues or default is None or not matches_type(default, want):
        return issues
    if isinstance(choices, list) and choices:
        bounded = attrs.evolve(bounded, enum=tuple(valid_choices))
    problem = setting_problem(bounded, default)
    if problem is not None:
        issues.append(
            ManifestIssue(
                source,
                f"{where}.default",
                f"the default {_short(default)} {problem}",
                "change the default, or the bounds or choices it breaks",
            )
        )
    return issues


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_SETTING_TYPES = ("string", "integer", "number", "boolean", "array", "object")


def _bridged_issues(
    data: dict[str, Any], declared: set[str], settings: dict[Any, Any], source: str
) -> list[ManifestIssue]:
    """``capabilities.bridged``: its permissions are among the top-level ones, and
    ``prefixes_from`` names a setting of type ``object`` (the prefixes are its keys)."""
    bridged = _mapping(_mapping(data.get("capabilities")).get("bridged"))
    issues: list[ManifestIssue] = []
    for j, perm in enumerate(_list(bridged.get("permissions"))):
        if isinstance(perm, str) and _PERMISSION.match(perm) and perm not in declared:
            issues.append(
                ManifestIssue(
                    source,
                    f"capabilities.bridged.permissions[{j}]",
                    f"permission {perm!r} is not in the plugin's top-level 'permissions'",
                    f"add {perm!r} to 'permissions', or remove it from capabilities.bridged",
                )
            )
    setting = bridged.get("prefixes_from")
    if isinstance(setting, str):
        decl = settings.get(setting)
        if not isinstance(decl, dict) or decl.get("type") != "object":
            known = ", ".join(sorted(str(k) for k in settings)) or "none"
            issues.append(
                ManifestIssue(
                    source,
                    "capabilities.bridged.prefixes_from",
                    f"{setting!r} is not a setting of type 'object' under config.settings "
                    f"(settings: {known})",
                    "name the object setting whose keys are the bridged commands' prefixes",
                )
            )
    return issues


_CLI_NAME = re.compile("[a-z][a-z0-9_-]{0,63}")
_CLI_NAME_SEARCH = re.compile("^[a-z][a-z0-9_-]{0,63}$")  # the schema's pattern


def _cli_issues(data: dict[str, Any], source: str) -> list[ManifestIssue]:
    """``cli.commands`` names are unique within the manifest. Whether one is a core
    command's name is checked by ``autogpt plugins check``, not here: a core release that
    adds a command must not make every plugin declaring that name invalid."""
    issues = []
    seen: dict[str, int] = {}
    for i, command in enumerate(_list(_mapping(data.get("cli")).get("commands"))):
        name = _mapping(command).get("name")
        if not isinstance(name, str):
            continue
        if _CLI_NAME_SEARCH.search(name) and not _CLI_NAME.fullmatch(name):
            # jsonschema matches patterns with re.search, where '$' also matches before a
            # final line break: 'export\n' passes the schema's pattern.
            issues.append(
                ManifestIssue(
                    source,
                    f"cli.commands[{i}].name",
                    f"{_short(name)} is not allowed here",
                    _ID_HINT,
                )
            )
        elif name in seen:
            issues.append(
                ManifestIssue(
                    source,
                    f"cli.commands[{i}].name",
                    f"the command line command {name!r} is already declared by "
                    f"cli.commands[{seen[name]}]",
                    "declare each command once",
                )
            )
        else:
            seen[name] = i
    return issues


# --- command parameter schemas ---------------------------------------------------------

# The keywords of JSON Schema 2020-12 whose values are schemas: one schema, a list of
# them, or a mapping of names to them. ``definitions`` is not a 2020-12 keyword, but
# references into it resolve like ``$defs`` (``referencing`` treats it the same way).
_IN_VALUE = (
    "additionalProperties",
    "contains",
    "contentSchema",
    "else",
    "if",
    "items",
    "not",
    "propertyNames",
    "then",
    "unevaluatedItems",
    "unevaluatedProperties",
)
_IN_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")
_IN_MAPPING = ("$defs", "definitions", "dependentSchemas", "patternProperties", "properties")

_JSON_SCHEMA_DOCS = "see https://json-schema.org/understanding-json-schema/"


def parameter_issues(params: object, field: str, source: str) -> list[ManifestIssue]:
    """Every problem of a command's ``parameters`` schema at ``field``: it is not of type
    ``object``, not a valid JSON Schema 2020-12 (every ``pattern`` included: it must compile
    with Python's ``re``, which validates arguments), or a ``$ref`` does not resolve.

    Remote references are never fetched (argument validation runs on the event loop), so a
    reference must point inside the schema, or at a JSON Schema meta-schema.
    """
    if not isinstance(params, dict):
        return []  # the manifest schema reports it
    if params.get("type", "object") != "object":
        return [
            ManifestIssue(
                source,
                f"{field}.type",
                "command parameters must be a JSON Schema of type 'object', "
                f"got {_short(params.get('type'))}",
                "use 'type: object' with 'properties'",
            )
        ]
    issues = list(_meta_schema_issues(params, field, source))
    if issues:
        return issues  # references are only looked up in a schema of the right shape
    return list(_reference_issues(params, field, source))


def _compiles(pattern: object) -> bool:
    if isinstance(pattern, str):
        # re warns of patterns whose meaning a later Python changes ('[[' may become a
        # nested set): refused like the ones it cannot compile, with the warning's text.
        with warnings.catch_warnings():
            warnings.simplefilter("error", FutureWarning)
            re.compile(pattern)
    return True


@cache
def _meta_validator() -> Any:
    from jsonschema import Draft202012Validator, FormatChecker

    # What ``check_schema`` does, except that a pattern that ``re`` cannot compile for
    # another reason than re.error (a repeat count past 2**32, thousands of nested groups)
    # is an issue too, not an OverflowError or RecursionError traceback.
    checker = FormatChecker(formats=())
    checker.checks("regex", raises=(re.error, OverflowError, RecursionError, FutureWarning))(
        _compiles
    )
    return Draft202012Validator(Draft202012Validator.META_SCHEMA, format_checker=checker)


def _meta_schema_issues(params: dict[Any, Any], field: str, source: str) -> Iterator[ManifestIssue]:
    from jsonschema.exceptions import best_match

    errors = sorted(_meta_validator().iter_errors(params), key=lambda e: list(map(str, e.path)))
    for error in errors:
        where = _dotted([field, *error.absolute_path])
        if error.validator == "format" and error.validator_value == "regex":
            yield ManifestIssue(
                source,
                where,
                f"the pattern {_short(error.instance)} does not compile ({error.cause})",
                "write a regular expression that Python's re module accepts",
            )
            continue
        # For anyOf/oneOf the useful message is that of the closest alternative.
        detail = best_match(error.context) if error.context else error
        message = detail.message if detail is not None else error.message
        fix = _JSON_SCHEMA_DOCS
        if error.absolute_path and error.absolute_path[-1] == "type":
            fix = "use one of the types string, number, integer, boolean, array, object, null"
        yield ManifestIssue(source, where, f"not a valid JSON Schema: {message}", fix)


#: Keywords whose schemas apply to the same value as the schema holding them.
_IN_PLACE = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas")

#: A schema applied to the same value as another one: the target, and for a reference its
#: path and text (``None`` for an in-place keyword such as ``allOf``).
_Edge = tuple[object, tuple[object, ...] | None, str | None]


def _reference_issues(params: dict[Any, Any], field: str, source: str) -> Iterator[ManifestIssue]:
    """Look up every ``$ref``/``$dynamicRef`` the way jsonschema will when it validates,
    then look for references that loop back without descending into the value."""
    from referencing.exceptions import InvalidAnchor, NoSuchAnchor, PointerToNowhere, Unresolvable
    from referencing.jsonschema import DRAFT202012

    fix = "point it inside this schema, e.g. '#/$defs/NAME' with the schema under '$defs'"
    # Every schema of the document by id(), with the schemas applied to the same value.
    applied: dict[int, list[_Edge]] = {}
    dynamic_anchors: dict[str, list[object]] = {}
    dynamic_refs: list[tuple[list[_Edge], str, tuple[object, ...]]] = []
    targets: list[_Edge] = []
    root = DRAFT202012.create_resource(params)
    stack: list[tuple[object, tuple[object, ...], Any]] = [
        (params, (), schema_registry().resolver_with_root(root))
    ]
    while stack:
        schema, path, resolver = stack.pop()
        if not isinstance(schema, dict):
            continue
        if path:  # a nested "$id" changes the base that references are relative to
            resolver = resolver.in_subresource(DRAFT202012.create_resource(schema))
        edges = applied.setdefault(id(schema), [])
        if isinstance(schema.get("$dynamicAnchor"), str):
            dynamic_anchors.setdefault(schema["$dynamicAnchor"], []).append(schema)
        for keyword in ("$ref", "$dynamicRef"):
            ref = schema.get(keyword)
            if not isinstance(ref, str):
                continue
            why = ""
            try:
                target = resolver.lookup(ref).contents
            except (PointerToNowhere, TypeError):  # TypeError: a pointer into true/false
                why = "nothing is at that location in the schema"
            except NoSuchAnchor:
                why = "no '$anchor' in the schema has that name"
            except InvalidAnchor:
                why = "what follows '#' is neither a JSON pointer ('#/...') nor an anchor name"
            except Unresolvable:
                why = "it names another document, and other documents are never fetched"
            except ValueError as exc:  # a malformed URI, a list index that is no number
                why = f"it is malformed ({exc})"
            else:
                if not isinstance(target, dict | bool):
                    why = f"it points at {_short(target)}, which is not a schema"
            ref_path = (*path, keyword)
            if why:
                yield ManifestIssue(
                    source,
                    _dotted([field, *ref_path]),
                    f"the reference {ref!r} does not resolve: {why}",
                    fix,
                )
                continue
            edges.append((target, ref_path, ref))
            targets.append((target, ref_path, ref))
            if keyword == "$dynamicRef":
                dynamic_refs.append((edges, ref, ref_path))
        children: list[tuple[object, tuple[object, ...]]] = []
        for key in _IN_VALUE:
            if key in schema:
                children.append((schema[key], (*path, key)))
        for key in _IN_LIST:
            children.extend((sub, (*path, key, i)) for i, sub in enumerate(_list(schema.get(key))))
        for key in _IN_MAPPING:
            children.extend(
                (sub, (*path, key, name)) for name, sub in _mapping(schema.get(key)).items()
            )
        for sub, sub_path in children:
            if sub_path[len(path)] in _IN_PLACE:
                edges.append((sub, None, None))
        stack.extend((sub, sub_path, resolver) for sub, sub_path in reversed(children))
    # '#/properties' or '#/properties/x/const' is a mapping of the document, not a schema.
    mappings = {id(node) for node in _containers(params) if isinstance(node, dict)}
    for target, at, text in targets:
        if id(target) in mappings and id(target) not in applied:
            assert at is not None
            yield ManifestIssue(
                source,
                _dotted([field, *at]),
                f"the reference {text!r} does not resolve: it points at {_short(target)}, "
                "which is not a schema but holds schemas or data",
                fix,
            )
    # At run time a $dynamicRef may land on any schema with that $dynamicAnchor.
    for edges, ref, ref_path in dynamic_refs:
        for target in dynamic_anchors.get(ref.rpartition("#")[2], []):
            edges.append((target, ref_path, ref))
    yield from _reference_loops(applied, field, source)


def _containers(node: object) -> Iterator[object]:
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, dict):
            yield current
            stack.extend(current.values())
        elif isinstance(current, list):
            yield current
            stack.extend(current)


def _reference_loops(
    applied: dict[int, list[_Edge]], field: str, source: str
) -> Iterator[ManifestIssue]:
    """A loop of schemas applied to the same value (``{"$ref": "#"}``, two definitions that
    refer to each other) makes jsonschema recurse until it crashes: report one reference of
    each loop. A reference that descends first (under ``properties``, ``items``) is fine."""
    done: set[int] = set()
    reported: set[tuple[object, ...]] = set()
    for start in applied:
        if start in done:
            continue
        # Iterative depth-first search; ``trail`` holds the edge into each node on the path.
        on_path = {start: 0}
        trail: list[_Edge | None] = [None]
        stack = [(start, iter(applied[start]))]
        while stack:
            node, edges = stack[-1]
            for edge in edges:
                target = id(edge[0])
                if target not in applied or target in done:
                    continue  # outside the document (a meta-schema), or known loop-free
                if target in on_path:
                    loop = [e for e in trail[on_path[target] + 1 :] if e is not None] + [edge]
                    _, ref_path, ref = next(e for e in loop if e[1] is not None)
                    assert ref_path is not None
                    if ref_path not in reported:
                        reported.add(ref_path)
                        yield ManifestIssue(
                            source,
                            _dotted([field, *ref_path]),
                            f"the reference {ref!r} leads back to a schema it is part of "
                            "without descending into a property or an item, so validating "
                            "would never end",
                            "make the reference apply to a property or an item (under "
                            "'properties' or 'items'), or remove it",
                        )
                    continue
                on_path[target] = len(trail)
                trail.append(edge)
                stack.append((target, iter(applied[target])))
                break
            else:
                stack.pop()
                trail.pop()
                del on_path[node]
                done.add(node)


def schema_registry() -> Any:
    """The schemas a ``$ref`` may name besides its own document: the JSON Schema
    meta-schemas, and nothing that would have to be fetched."""
    from jsonschema_specifications import REGISTRY  # type: ignore[import-untyped]

    return REGISTRY


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


def setting_problem(decl: SettingDecl, value: object) -> str | None:
    """Why ``value`` cannot be ``decl``'s value, as what it must be ("must be a whole
    number", "must be at least 1", "must be one of 'fast', 'slow'"); ``None`` if it can.

    The same rules as JSON Schema's ``type``, ``minimum``, ``maximum`` and ``enum``, except
    that a number must also be finite (NaN is neither below nor above any bound) and an
    integer setting takes ``3``, not ``3.0`` (its plugin gets the ``int`` it was promised).
    """
    if not matches_type(value, decl.type):
        return f"must be {TYPE_NAMES[decl.type]}"
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    # The manifest's choices have the setting's type (checked), so True is never among
    # the choices of a number setting, where True == 1 would let it in.
    if decl.enum is not None and value not in decl.enum:
        return f"must be one of {', '.join(_short(choice) for choice in decl.enum)}"
    if decl.minimum is not None and value < decl.minimum:  # type: ignore[operator]
        return f"must be at least {_short(decl.minimum)}"
    if decl.maximum is not None and value > decl.maximum:  # type: ignore[operator]
        return f"must be at most {_short(decl.maximum)}"
    return None


def _enabled_by_default(value: object) -> bool | tuple[str, ...]:
    return tuple(str(kind) for kind in value) if isinstance(value, list | tuple) else bool(value)


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
    bridged_data = data.get("capabilities", {}).get("bridged")
    bridged = (
        None
        if bridged_data is None
        else BridgedDecl(
            prefixes_from=bridged_data["prefixes_from"],
            permissions=tuple(bridged_data.get("permissions", ())),
            description=bridged_data.get("description", ""),
        )
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
            minimum=s.get("minimum"),
            maximum=s.get("maximum"),
            enum=tuple(s["enum"]) if "enum" in s else None,
        )
        for name, s in sorted(data.get("config", {}).get("settings", {}).items())
    )
    return Manifest(
        id=data["id"],
        name=data["name"],
        version=str(data["version"]),
        description=data.get("description", ""),
        requires_core=data.get("requires_core", ""),
        enabled_by_default=_enabled_by_default(data.get("enabled_by_default", False)),
        shares_store=bool(data.get("shares_store", False)),
        terms=str(data.get("setup", {}).get("terms", "")),
        homepage=data.get("homepage", ""),
        codeowners=tuple(data.get("codeowners", ())),
        permissions=tuple(data.get("permissions", ())),
        commands=commands,
        bridged=bridged,
        cli_commands=tuple(
            CLICommandDecl(name=c["name"], help=c["help"])
            for c in data.get("cli", {}).get("commands", [])
        ),
        requires=tuple(data.get("requires", ())),
        load_after=tuple(data.get("load_after", ())),
        load_before=tuple(data.get("load_before", ())),
        requirements=tuple(data.get("requirements", ())),
        settings=settings,
        source=source,
    )
