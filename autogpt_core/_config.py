"""The user's configuration: one YAML file, every field optional.

Where it is: ``--config FILE``, else ``$AUTOGPT_CONFIG``, else ``config.yaml`` in the user's
config directory. A fresh install has no file at all and runs on defaults: each plugin
enabled as its manifest's ``enabled_by_default`` says, ``fs.read`` and ``fs.write``
granted (file commands are confined to the session's workspace anyway).

::

    plugins:
      enable: [shell]            # enable plugins that are off by default
      disable: [jsonlog]         # disable plugins that are on by default
      settings:                  # per plugin, validated against its manifest's config
        web: {timeout: 10}
    permissions:
      grant: [fs.read, fs.write] # granted to every plugin's commands without asking
    llm: {provider: openai, model: gpt-4o-mini, base_url: null}
    limits: {max_cycles: 25, hook_timeout: 30, command_timeout: 120, max_failures: 3}
    data_dir: ~/somewhere        # sessions, memory and logs (default: user data dir)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import yaml

from ._errors import ConfigError
from ._files import write_atomically
from ._permissions import PERMISSION, PERMISSION_NAMES

APP_NAME = "autogpt"
DEFAULT_GRANTS = frozenset({"fs.read", "fs.write"})

_TOP_LEVEL = {"plugins", "permissions", "llm", "limits", "data_dir"}
_SECTIONS: dict[str, set[str]] = {
    "plugins": {"enable", "disable", "settings"},
    "permissions": {"grant"},
    "llm": {"provider", "model", "base_url"},
    "limits": {
        "max_cycles",
        "max_tokens",
        "max_cost",
        "hook_timeout",
        "command_timeout",
        "max_failures",
    },
}


@attrs.frozen
class Limits:
    """Budgets and deadlines; ``None`` means no limit."""

    max_cycles: int | None = 25
    max_tokens: int | None = None
    max_cost: float | None = None
    hook_timeout: float | None = 30.0
    command_timeout: float | None = 120.0
    # A person answers confirmations and questions: by default there is no deadline.
    confirm_timeout: float | None = None
    max_failures: int = 3


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
    data_dir: Path = attrs.field(factory=lambda: default_data_dir())

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
    try:
        data = yaml.safe_load(text)
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
    return parse_config(raw, path=path, exists=path.exists())


def parse_config(raw: Mapping[str, Any], *, path: Path, exists: bool = True) -> Config:
    def fail(field: str, problem: str, fix: str) -> ConfigError:
        return ConfigError(f"{path}: {field}: {problem} (fix: {fix})")

    for key in raw:
        if key not in _TOP_LEVEL:
            raise fail(str(key), "unknown section", f"use one of {', '.join(sorted(_TOP_LEVEL))}")
    sections: dict[str, dict[str, Any]] = {}
    for name, allowed in _SECTIONS.items():
        section = raw.get(name) or {}
        if not isinstance(section, dict):
            raise fail(
                name,
                f"expected a mapping, got {type(section).__name__}",
                "indent its fields under it",
            )
        for key in section:
            if key not in allowed:
                raise fail(
                    f"{name}.{key}", "unknown field", f"use one of {', '.join(sorted(allowed))}"
                )
        sections[name] = section

    def id_list(section: str, key: str) -> frozenset[str]:
        value = sections[section].get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise fail(
                f"{section}.{key}", "expected a list of plugin ids", "write it like [shell, web]"
            )
        return frozenset(value)

    settings = sections["plugins"].get("settings") or {}
    if not isinstance(settings, dict) or not all(isinstance(v, dict) for v in settings.values()):
        raise fail(
            "plugins.settings", "expected a mapping of plugin id to settings", "see the docs"
        )
    grants = sections["permissions"].get("grant", sorted(DEFAULT_GRANTS))
    if not isinstance(grants, list) or not all(isinstance(v, str) for v in grants):
        raise fail(
            "permissions.grant", "expected a list of permissions", "write it like [fs.read, shell]"
        )
    for grant in grants:
        if not PERMISSION.fullmatch(grant):
            raise fail(
                "permissions.grant",
                f"{grant!r} is not a permission",
                f"use {PERMISSION_NAMES}",
            )

    limits_raw = sections["limits"]
    limit_kwargs: dict[str, Any] = {}
    for key, value in limits_raw.items():
        if key == "max_failures":
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        else:
            ok = value is None or (
                isinstance(value, int | float) and not isinstance(value, bool) and value > 0
            )
        if not ok:
            raise fail(
                f"limits.{key}", f"{value!r} is not a positive number", "use a number > 0 or null"
            )
        limit_kwargs[key] = value

    llm = sections["llm"]
    for key in ("provider", "model", "base_url"):
        if llm.get(key) is not None and not isinstance(llm[key], str):
            raise fail(f"llm.{key}", "expected a string", "quote the value")
    data_dir_raw = raw.get("data_dir")
    if data_dir_raw is not None and not isinstance(data_dir_raw, str):
        raise fail("data_dir", "expected a path", "quote the value")
    data_dir = (
        Path(data_dir_raw).expanduser()
        if data_dir_raw and not os.environ.get("AUTOGPT_DATA_DIR")
        else default_data_dir()
    )
    return Config(
        path=path,
        exists=exists,
        enable=id_list("plugins", "enable"),
        disable=id_list("plugins", "disable"),
        plugin_settings={str(k): dict(v) for k, v in settings.items()},
        grants=frozenset(grants),
        llm_provider=llm.get("provider"),
        llm_model=llm.get("model"),
        llm_base_url=llm.get("base_url"),
        limits=Limits(**limit_kwargs),
        data_dir=data_dir,
    )


def write_raw(path: Path, raw: Mapping[str, Any]) -> None:
    """Write the config atomically: a crash leaves the old file or the new one, never half."""
    write_atomically(path, yaml.safe_dump(dict(raw), sort_keys=False, default_flow_style=False))


def set_plugin_state(path: Path, plugin_ids: list[str], *, enabled: bool) -> None:
    """Persist enabling or disabling plugins, keeping the rest of the file."""
    raw = read_raw(path)
    parse_config(raw, path=path)  # refuse to rewrite a file that is already invalid
    plugins = raw.setdefault("plugins", {}) or {}
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
    write_raw(path, raw)
