"""``autogpt plugins import-classic FILE``: an Auto-GPT 0.4 ``plugins_config.yaml`` into
this project's config.

Auto-GPT's file maps each plugin (by class name) to ``{config: {...}, enabled: bool}``.
The import enables the ``classic`` plugin, adds the plugins directory to
``plugins.settings.classic.sources`` and puts each enabled name in the allowlist
``plugins.settings.classic.plugins`` (a disabled one is taken out of it); everything else
in the config file is kept.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import yaml

from .._config import change_plugin_state, load_config, parse_config, read_raw, write_raw
from .._errors import ConfigError

PLUGIN_ID = "classic"
_MAX_CHARS = 1024 * 1024


@attrs.frozen
class Imported:
    """What ``import_classic`` changed, to be told."""

    enabled: tuple[str, ...]
    disabled: tuple[str, ...]
    removed: tuple[str, ...]
    source: str
    source_added: bool
    config_path: Path


def read_plugins_config(path: Path) -> dict[str, bool]:
    """Auto-GPT's ``plugins_config.yaml``: plugin name -> enabled. ``ConfigError`` names the
    file, the entry and the fix."""
    from ..plugins import _yaml as strict_yaml

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"{path} does not exist: give the path of Auto-GPT's plugins_config.yaml"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} cannot be read ({exc}): give a UTF-8 YAML file") from None
    if len(text) > _MAX_CHARS:
        raise ConfigError(f"{path} is larger than 1 MiB: it is not a plugins_config.yaml")
    try:
        data = strict_yaml.load(text, max_depth=8)
    except strict_yaml.Refused as exc:
        raise ConfigError(f"{path}: {exc.problem}; {exc.fix}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise ConfigError(
            f"{path}: {where}not valid YAML ({getattr(exc, 'problem', None) or exc}); fix it"
        ) from None
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{path} is not an Auto-GPT plugins_config.yaml: it must map each plugin's name "
            "to {config: {...}, enabled: true or false}"
        )
    plugins: dict[str, bool] = {}
    for name, entry in data.items():
        shape = f"{path}: the entry {name!r} must be {{config: {{...}}, enabled: true or false}}"
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(
                f"{path}: {name!r} is not a plugin name: Auto-GPT named each plugin by its "
                "class name (AutoGPTWeather); fix or remove that entry"
            )
        if not isinstance(entry, Mapping):
            raise ConfigError(shape)
        unknown = sorted(set(map(str, entry)) - {"config", "enabled"})
        if unknown:
            raise ConfigError(f"{shape}, not have {', '.join(unknown)}")
        enabled = entry.get("enabled", False)
        if not isinstance(enabled, bool):
            raise ConfigError(f"{shape} (its enabled is {enabled!r})")
        if entry.get("config") is not None and not isinstance(entry.get("config"), Mapping):
            raise ConfigError(f"{shape} (its config is not a mapping)")
        plugins[name] = enabled
    return plugins


def import_classic(
    config_arg: str | None, plugins_config: Path, plugins_dir: Path | None
) -> Imported:
    """Write what ``plugins_config`` says into the config file (one write)."""
    wanted = read_plugins_config(plugins_config)
    directory = plugins_dir if plugins_dir is not None else plugins_config.parent / "plugins"
    source = str(directory.expanduser().resolve())
    config = load_config(config_arg, must_exist=False)
    raw = read_raw(config.path)
    parse_config(raw, path=config.path)  # refuse to rewrite a file that is already invalid
    change_plugin_state(raw, [PLUGIN_ID], enabled=True)
    plugins_section: dict[str, Any] = raw["plugins"]
    settings = plugins_section.get("settings") or {}
    plugins_section["settings"] = settings
    classic = settings.get(PLUGIN_ID) or {}
    if not isinstance(classic, dict):
        raise ConfigError(
            f"{config.path}: plugins.settings.{PLUGIN_ID} is not a mapping; fix or remove it"
        )
    settings[PLUGIN_ID] = classic
    sources = classic.get("sources") or []
    if not isinstance(sources, list):
        raise ConfigError(f"{config.path}: plugins.settings.{PLUGIN_ID}.sources is not a list")
    added = source not in sources and not _same_path(sources, source, config.path.parent)
    if added:
        sources.append(source)
    classic["sources"] = sources
    allowlist = classic.get("plugins") or {}
    if not isinstance(allowlist, dict):
        raise ConfigError(f"{config.path}: plugins.settings.{PLUGIN_ID}.plugins is not a mapping")
    enabled = tuple(name for name, on in wanted.items() if on)
    disabled = tuple(name for name, on in wanted.items() if not on)
    for name in enabled:
        if allowlist.get(name) is None:
            allowlist[name] = {}
    removed = tuple(name for name in disabled if name in allowlist)
    for name in removed:
        del allowlist[name]
    classic["plugins"] = allowlist
    parse_config(raw, path=config.path)
    write_raw(config.path, raw)
    return Imported(enabled, disabled, removed, source, added, config.path)


def _same_path(sources: list[Any], source: str, base: Path) -> bool:
    for entry in sources:
        if isinstance(entry, str):
            path = Path(entry).expanduser()
            if str((path if path.is_absolute() else base / path).resolve()) == source:
                return True
    return False


def cmd_import_classic(args: argparse.Namespace) -> int:
    from ._cli_plugins import _say

    done = import_classic(
        args.config,
        Path(args.plugins_config).expanduser(),
        Path(args.plugins_dir) if args.plugins_dir else None,
    )
    _say(
        f"Read {len(done.enabled) + len(done.disabled)} classic plugin(s) from "
        f"{args.plugins_config}: enabled {', '.join(done.enabled) or 'none'}; "
        f"disabled {', '.join(done.disabled) or 'none'}"
    )
    _say(f"Enabled the {PLUGIN_ID} plugin in {done.config_path}")
    if done.source_added:
        _say(f"Added the source {done.source} to plugins.settings.{PLUGIN_ID}.sources")
    else:
        _say(f"The source {done.source} was already in plugins.settings.{PLUGIN_ID}.sources")
    if not Path(done.source).exists():
        _say(f"Note: {done.source} does not exist yet: put the plugins' zip files there")
    if done.enabled:
        _say(f"Allowed in plugins.settings.{PLUGIN_ID}.plugins: {', '.join(done.enabled)}")
    if done.removed:
        _say(
            f"Taken out of plugins.settings.{PLUGIN_ID}.plugins (disabled in "
            f"{args.plugins_config}): {', '.join(done.removed)}"
        )
    _say(
        "Each call of their commands is asked of you unless you grant bridge:classic "
        "(permissions.grant); see what loaded with: autogpt plugins info classic"
    )
    return 0
