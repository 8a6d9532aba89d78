"""The user's configuration: one YAML file, every field optional.

Where it is: ``--config FILE``, else ``$AUTOGPT_CONFIG``, else ``config.yaml`` in the user's
config directory. A fresh install has no file at all and runs on defaults: each plugin
enabled as its manifest's ``enabled_by_default`` says, ``fs.read`` and ``fs.write``
granted (file commands are confined to the session's workspace anyway).

``SECTIONS`` and ``TOP_LEVEL_FIELDS`` describe every field: its type, constraints,
default and what ``null`` means. docs/configuration.md shows them with an example (a test
checks that the two agree).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import attrs
import yaml

from ._errors import ConfigError
from ._files import write_atomically
from .plugins import _yaml as strict_yaml
from .plugins._permissions import GRANT_NAMES, PERMISSION

APP_NAME = "autogpt"
# Read on every command, like manifests: bounded, and without YAML aliases.
_MAX_CONFIG_CHARS = 1024 * 1024
_MAX_CONFIG_DEPTH = 32
DEFAULT_GRANTS = frozenset({"fs.read", "fs.write"})

# --- the schema --------------------------------------------------------------------------
# One declarative description of the file. Validation and its messages, the defaults of
# ``Limits``, ``autogpt config`` and the field table of docs/configuration.md derive from it
# (tests/test_config.py checks the docs against it).


@attrs.frozen
class Items:
    """What the items of a list field, or the keys of a mapping field, must be."""

    name: str
    pattern: re.Pattern[str]
    fix: str


# The manifest schema's id pattern (hookspecs/manifest.schema.json): an id that does not
# match it can never name an installed plugin.
PLUGIN_ID = Items(
    "plugin id",
    re.compile(r"[a-z][a-z0-9_-]{0,63}"),
    "plugin ids are lower case letters, digits, '-' and '_', starting with a letter; "
    "'autogpt plugins list --all' shows them",
)
PERMISSION_ITEM = Items("permission", PERMISSION, f"use {GRANT_NAMES}")
TOKEN_NAME = Items(
    "token name",
    re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"),
    "token names are letters, digits, '.', '-' and '_', like ci-bot",
)
ENV_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


@attrs.frozen
class Field:
    """One field: its type and constraints, its default, and what ``null`` means.

    ``type`` is ``integer``, ``number``, ``string``, ``path``, ``list`` (of ``items``),
    ``mapping`` (from ``items`` to a mapping of settings) or ``variables`` (from ``items``
    to the name of an environment variable). A number must be greater than
    ``exclusive_minimum`` when that is set. ``null`` is refused when ``null_means`` is empty.
    ``example`` is a valid value, for the fix in error messages.
    """

    type: Literal["integer", "number", "string", "path", "list", "mapping", "variables", "texts"]
    default: Any
    null_means: str = ""
    exclusive_minimum: float | None = None
    items: Items | None = None
    example: str = ""

    @property
    def nullable(self) -> bool:
        return bool(self.null_means)

    def describe(self) -> str:
        """The type, as the docs' table and the error messages say it."""
        if self.type == "list" and self.items is not None:
            text = f"list of {self.items.name}s"
        elif self.type == "mapping" and self.items is not None:
            text = f"mapping of {self.items.name} to settings"
        elif self.type == "variables" and self.items is not None:
            text = f"mapping of {self.items.name} to environment variable"
        elif self.type == "texts" and self.items is not None:
            text = f"mapping of {self.items.name} to string"
        else:
            text = self.type
        if self.exclusive_minimum is not None:
            text += f" > {self.exclusive_minimum:g}"
        return text + (" or null" if self.nullable else "")

    def fix(self) -> str:
        return f"write it like {self.example}" + (
            f", or null for {self.null_means}" if self.nullable else ""
        )


#: The sections of the config file and their fields.
SECTIONS: Mapping[str, Mapping[str, Field]] = {
    "plugins": {
        "enable": Field("list", (), "none", items=PLUGIN_ID, example="[shell, web]"),
        "disable": Field("list", (), "none", items=PLUGIN_ID, example="[jsonlog]"),
        "settings": Field("mapping", {}, "none", items=PLUGIN_ID, example="{web: {timeout: 10}}"),
        # Where `autogpt plugins search` and the agent's plugin_manager find plugins to
        # install: a JSON file or an http(s) URL. None: no index is read.
        "index": Field("string", None, "no index", example="~/plugins/index.json"),
        # The terms each plugin's user accepted (a digest of them; `autogpt plugins enable`).
        "accepted": Field(
            "texts", {}, "none", items=PLUGIN_ID, example="{weather: 3f2a9c0d1e4b5a67}"
        ),
    },
    "permissions": {
        "grant": Field(
            "list", tuple(sorted(DEFAULT_GRANTS)), items=PERMISSION_ITEM, example="[fs.read, shell]"
        ),
    },
    "llm": {
        "provider": Field("string", None, "openai", example="openai"),
        "model": Field("string", None, "the provider's default", example="gpt-4o-mini"),
        "base_url": Field(
            "string", None, "the provider's own endpoint", example="http://localhost:11434/v1"
        ),
    },
    "limits": {
        "max_cycles": Field("integer", 25, "no limit", 0, example="25"),
        "max_tokens": Field("integer", None, "no limit", 0, example="100000"),
        "max_cost": Field("number", None, "no limit", 0, example="0.5"),
        "hook_timeout": Field("number", 30.0, "no limit", 0, example="30"),
        "command_timeout": Field("number", 120.0, "no limit", 0, example="120"),
        # A person answers confirmations and questions: by default there is no deadline.
        "confirm_timeout": Field("number", None, "no limit", 0, example="300"),
        "max_failures": Field("integer", 3, "", 0, example="3"),
    },
    "server": {
        # The config names where each token is, never the token itself.
        "tokens": Field(
            "variables", {}, "none", items=TOKEN_NAME, example="{alice: ALICE_AUTOGPT_TOKEN}"
        ),
        # Who may change what every task runs with (plugins, their settings).
        "admins": Field("list", (), "none", items=TOKEN_NAME, example="[alice]"),
    },
}
#: The fields that stand on their own at the top level.
TOP_LEVEL_FIELDS: Mapping[str, Field] = {
    "data_dir": Field("path", None, "the user data directory", example="~/agents"),
    "store": Field(
        "string",
        None,
        "sessions.sqlite3 in the data directory",
        example="postgresql://autogpt@db.example.com/autogpt",
    ),
}

_LIMITS = SECTIONS["limits"]


@attrs.frozen
class Limits:
    """Budgets and deadlines; ``None`` means no limit. Defaults: the schema's."""

    max_cycles: int | None = _LIMITS["max_cycles"].default
    max_tokens: int | None = _LIMITS["max_tokens"].default
    max_cost: float | None = _LIMITS["max_cost"].default
    hook_timeout: float | None = _LIMITS["hook_timeout"].default
    command_timeout: float | None = _LIMITS["command_timeout"].default
    confirm_timeout: float | None = _LIMITS["confirm_timeout"].default
    max_failures: int = _LIMITS["max_failures"].default


@attrs.frozen
class Config:
    """The effective configuration."""

    path: Path
    exists: bool = False
    enable: frozenset[str] = frozenset()
    disable: frozenset[str] = frozenset()
    plugin_settings: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    grants: frozenset[str] = DEFAULT_GRANTS
    llm_provider: str | None = None
    llm_model: str | None = None
    llm_base_url: str | None = None
    limits: Limits = Limits()
    #: ``server.tokens``: token names mapped to the environment variable holding each.
    server_tokens: Mapping[str, str] = attrs.field(factory=dict)
    #: ``server.admins``: the token names that may change plugins over HTTP.
    server_admins: frozenset[str] = frozenset()
    data_dir: Path = attrs.field(factory=lambda: default_data_dir())
    #: ``store``: a PostgreSQL URL or a SQLite file's path; ``None``: the data directory's.
    store: str | None = None
    #: ``plugins.index``: the plugin index (a JSON file or URL); ``None``: none is read.
    plugin_index: str | None = None
    #: ``plugins.accepted``: plugin id -> the digest of the terms its user accepted.
    accepted_terms: Mapping[str, str] = attrs.field(factory=dict)

    @property
    def store_location(self) -> Path | str:
        """Where the session store is: ``store`` (a ``postgresql://`` URL, or the path of
        a SQLite file), else ``sessions.sqlite3`` in the data directory."""
        from .store._open import is_postgres_url

        if not self.store:
            return self.data_dir / "sessions.sqlite3"
        if is_postgres_url(self.store):
            return self.store
        return Path(self.store).expanduser()

    @property
    def store_kind(self) -> str:
        """``"postgresql"`` or ``"sqlite"``: the kind of session store (manifests'
        ``enabled_by_default`` may name them)."""
        from .store._open import is_postgres_url

        return "postgresql" if is_postgres_url(self.store_location) else "sqlite"

    def is_enabled(self, plugin_id: str, enabled_by_default: bool) -> bool:
        """Whether the user wants ``plugin_id`` on (``disable`` beats ``enable``)."""
        if plugin_id in self.disable:
            return False
        if plugin_id in self.enable:
            return True
        return enabled_by_default


def default_config_path() -> Path:
    from platformdirs import user_config_dir

    return Path(user_config_dir(APP_NAME)) / "config.yaml"


def default_data_dir() -> Path:
    env = os.environ.get("AUTOGPT_DATA_DIR")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir(APP_NAME))


def resolve_config_path(explicit: str | os.PathLike[str] | None = None) -> Path:
    """``--config`` beats ``$AUTOGPT_CONFIG`` beats the user config directory."""
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("AUTOGPT_CONFIG")
    if env:
        return Path(env).expanduser()
    return default_config_path()


def read_raw(path: Path) -> dict[str, Any]:
    """The config file's YAML mapping (``{}`` when the file does not exist)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except IsADirectoryError:
        raise ConfigError(
            f"{path} is a directory, not a config file: give the file's path"
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text: save the config file as UTF-8") from None
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot read the config file ({exc}); check its permissions"
        ) from None
    if len(text) > _MAX_CONFIG_CHARS:
        raise ConfigError(
            f"{path}: the config file is larger than {_MAX_CONFIG_CHARS // 1024} KiB; a "
            "config needs a few KiB: remove what is not configuration"
        )
    try:
        data = strict_yaml.load(text, max_depth=_MAX_CONFIG_DEPTH)
    except strict_yaml.Refused as exc:
        raise ConfigError(f"{path}: {exc.problem}; {exc.fix}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise ConfigError(
            f"{path}: {where}not valid YAML ({problem}); fix the syntax or delete the file"
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the config must be a mapping of sections (plugins, llm, ...)")
    return data


def load_config(
    explicit: str | os.PathLike[str] | None = None, *, must_exist: bool = True
) -> Config:
    """Read and validate the config file; raise ``ConfigError`` naming the file and field.
    Sets the variables of the data directory's secrets file (``_secrets.py``) that the
    environment lacks.

    A file named with ``--config`` (``explicit``) must exist unless ``must_exist`` is false
    (commands that create it); the default locations may be absent.
    """
    path = resolve_config_path(explicit)
    if explicit and must_exist and not path.exists():
        raise ConfigError(
            f"the config file {path} given with --config does not exist: check the path, "
            "or drop --config to use the defaults"
        )
    raw = read_raw(path)
    config = parse_config(raw, path=path, exists=path.exists())
    # The secrets the user typed for plugins (``autogpt plugins enable``), where the
    # plugins read every secret: the environment (which wins).
    from ._secrets import apply_secrets, secrets_path

    apply_secrets(secrets_path(config.data_dir))
    return config


def parse_config(raw: Mapping[str, Any], *, path: Path, exists: bool = True) -> Config:
    """Validate ``raw`` against the schema; raise ``ConfigError`` listing every problem."""
    values = _validate(raw)
    if isinstance(values, list):
        raise ConfigError(
            "\n".join(f"{path}: {field}: {problem} (fix: {fix})" for field, problem, fix in values)
        )
    data_dir = values["data_dir"]
    return Config(
        path=path,
        exists=exists,
        enable=frozenset(values["plugins.enable"] or ()),
        disable=frozenset(values["plugins.disable"] or ()),
        plugin_settings={k: dict(v) for k, v in (values["plugins.settings"] or {}).items()},
        grants=frozenset(values["permissions.grant"]),
        llm_provider=values["llm.provider"],
        llm_model=values["llm.model"],
        llm_base_url=values["llm.base_url"],
        limits=Limits(**{key: values[f"limits.{key}"] for key in _LIMITS}),
        server_tokens=dict(values["server.tokens"] or {}),
        server_admins=frozenset(values["server.admins"] or ()),
        data_dir=(
            Path(data_dir).expanduser()
            if data_dir and not os.environ.get("AUTOGPT_DATA_DIR")
            else default_data_dir()
        ),
        store=values["store"],
        plugin_index=values["plugins.index"],
        accepted_terms={k: str(v) for k, v in (values["plugins.accepted"] or {}).items()},
    )


#: A problem: the dotted field, what is wrong with it, and the fix.
_Problem = tuple[str, str, str]


def _validate(raw: Mapping[str, Any]) -> dict[str, Any] | list[_Problem]:
    """Every field's value by dotted name (defaults filled in), or every problem found."""
    if not isinstance(raw, Mapping):
        return [
            (
                "(top level)",
                f"expected a mapping of sections, got {_shown(raw)}",
                "start from the example in docs/configuration.md",
            )
        ]
    known = [*SECTIONS, *TOP_LEVEL_FIELDS]
    problems: list[_Problem] = [
        (str(key), "unknown section", f"use one of {', '.join(sorted(known))}")
        for key in raw
        if key not in known
    ]
    values: dict[str, Any] = {}
    fields: list[tuple[str, Field, Mapping[Any, Any]]] = [
        (name, field, raw) for name, field in TOP_LEVEL_FIELDS.items()
    ]
    for section, section_fields in SECTIONS.items():
        given = raw.get(section)
        if given is None:
            given = {}
        elif not isinstance(given, Mapping):
            problems.append(
                (section, f"expected a mapping, got {_shown(given)}", "indent its fields under it")
            )
            given = {}
        problems.extend(
            (f"{section}.{key}", "unknown field", f"use one of {', '.join(sorted(section_fields))}")
            for key in given
            if key not in section_fields
        )
        fields.extend((f"{section}.{key}", field, given) for key, field in section_fields.items())
    for name, field, holder in fields:
        key = name.rpartition(".")[2]
        if key in holder:
            problems.extend(_check(name, field, holder[key]))
            values[name] = holder[key]
        else:
            values[name] = field.default
    return problems or values


def _check(name: str, field: Field, value: Any) -> list[_Problem]:
    """The problems with one field's value."""
    expected = f"expected {_article(field.describe())}, got {_shown(value)}"
    if value is None:
        return [] if field.nullable else [(name, expected, field.fix())]
    if field.type in ("integer", "number"):
        number = isinstance(value, int if field.type == "integer" else int | float)
        if isinstance(value, bool) or not number:
            return [(name, expected, field.fix())]
        low = field.exclusive_minimum
        # ``not >``: NaN is no number > 0.
        return [] if low is None or value > low else [(name, expected, field.fix())]
    if field.type in ("string", "path"):
        if not isinstance(value, str):
            return [(name, expected, "quote the value")]
        if field.type == "path" and value.startswith("~"):
            try:
                Path(value).expanduser()
            except RuntimeError:
                user = value[1:].partition("/")[0]
                return [
                    (
                        name,
                        f"{_shown(value)} starts in the home of {user!r}, who is no user here",
                        "write the path out in full",
                    )
                ]
        return []
    items = field.items
    assert items is not None
    if field.type == "list":
        if not isinstance(value, list):
            return [(name, expected, field.fix())]
        return [
            (f"{name}[{i}]", f"{_shown(item)} is not {_article(items.name)}", items.fix)
            for i, item in enumerate(value)
            if not (isinstance(item, str) and items.pattern.fullmatch(item))
        ]
    if not isinstance(value, Mapping):
        return [(name, expected, field.fix())]
    problems: list[_Problem] = []
    if field.type == "variables":
        for key, variable in value.items():
            if not (isinstance(key, str) and items.pattern.fullmatch(key)):
                problems.append(
                    (name, f"the key {_shown(key)} is not {_article(items.name)}", items.fix)
                )
            elif not (isinstance(variable, str) and ENV_VARIABLE.fullmatch(variable)):
                problems.append(
                    (
                        f"{name}.{key}",
                        f"{_shown(variable)} is not the name of an environment variable",
                        "give the variable's name, like ALICE_AUTOGPT_TOKEN, never the token",
                    )
                )
        return problems
    if field.type == "texts":
        for key, text in value.items():
            if not (isinstance(key, str) and items.pattern.fullmatch(key)):
                problems.append(
                    (name, f"the key {_shown(key)} is not {_article(items.name)}", items.fix)
                )
            elif not isinstance(text, str):
                problems.append((f"{name}.{key}", f"expected a string, got {_shown(text)}", ""))
        return problems
    for key, settings in value.items():
        if not (isinstance(key, str) and items.pattern.fullmatch(key)):
            problems.append(
                (name, f"the key {_shown(key)} is not {_article(items.name)}", items.fix)
            )
        elif not isinstance(settings, Mapping):
            problems.append(
                (
                    f"{name}.{key}",
                    f"expected a mapping of settings, got {_shown(settings)}",
                    "indent the plugin's settings under its id, like web: {timeout: 10}",
                )
            )
    return problems


def _article(text: str) -> str:
    return ("an " if text[0] in "aeiou" else "a ") + text


def _shown(value: Any) -> str:
    """A value as a message shows it: scalars as YAML writes them, containers by kind."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else repr(value[:40]) + "..."
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return _article(type(value).__name__)


def write_raw(path: Path, raw: Mapping[str, Any]) -> None:
    """Write the config atomically: a crash leaves the old file or the new one, never half."""
    write_atomically(path, yaml.safe_dump(dict(raw), sort_keys=False, default_flow_style=False))


def set_plugin_state(path: Path, plugin_ids: list[str], *, enabled: bool) -> None:
    """Persist enabling or disabling plugins, keeping the rest of the file."""
    raw = read_raw(path)
    parse_config(raw, path=path)  # refuse to rewrite a file that is already invalid
    change_plugin_state(raw, plugin_ids, enabled=enabled)
    write_raw(path, raw)


def change_plugin_state(raw: dict[str, Any], plugin_ids: list[str], *, enabled: bool) -> None:
    """Enable or disable ``plugin_ids`` in the config file's mapping ``raw`` (in place):
    each moves to ``enable`` (or ``disable``) and out of the other list."""
    plugins = raw.get("plugins") or {}
    raw["plugins"] = plugins
    add, remove = ("enable", "disable") if enabled else ("disable", "enable")
    current_add = list(plugins.get(add) or [])
    current_remove = [p for p in (plugins.get(remove) or []) if p not in plugin_ids]
    for plugin_id in plugin_ids:
        if plugin_id not in current_add:
            current_add.append(plugin_id)
    plugins[add] = sorted(current_add)
    if current_remove:
        plugins[remove] = sorted(current_remove)
    else:
        plugins.pop(remove, None)
