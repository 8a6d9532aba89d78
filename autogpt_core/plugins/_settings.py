"""Per-plugin settings: environment, config file and manifest defaults, validated."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hookspecs import PluginSettings

from ._manifest import (
    TYPE_NAMES,
    Manifest,
    SettingDecl,
    _short,
    matches_type,
    setting_problem,
)


def _from_env(decl: SettingDecl, raw: str) -> Any:
    if decl.type == "string":
        return raw
    if decl.type == "boolean":
        lowered = raw.strip().lower()
        if lowered in {"1", "true", "yes", "on"}:
            return True
        if lowered in {"0", "false", "no", "off", ""}:
            return False
        raise ValueError(raw)
    if decl.type == "integer":
        return int(raw)
    if decl.type == "number":
        return float(raw)
    return json.loads(raw)


def resolve_settings(
    manifest: Manifest,
    configured: Mapping[str, Any],
    *,
    data_dir: Path | None,
    environ: Mapping[str, str] | None = None,
    store: str | None = None,
    config_dir: Path | None = None,
) -> tuple[PluginSettings, list[str], list[str]]:
    """Return ``(settings, secret_values, problems)`` for one plugin.

    ``store``, the session store's location, reaches the plugin only if its manifest says
    ``shares_store``; a password in it counts as a secret. ``config_dir`` is the config
    file's directory (what relative paths in settings are relative to).

    An environment variable named by a setting's ``env`` beats the config file, which beats
    the manifest's default. ``problems`` name the plugin, the setting, what is wrong and how
    to fix it; problem messages never include a secret's value.
    """
    env = os.environ if environ is None else environ
    declared = {s.name: s for s in manifest.settings}
    problems: list[str] = []
    for key in configured:
        if key not in declared:
            known = ", ".join(sorted(declared)) or "none"
            problems.append(
                f"plugin {manifest.id!r}: setting {key!r} in the config is not declared by the "
                f"plugin (known settings: {known}); remove it or fix its spelling"
            )
    values: dict[str, Any] = {}
    secrets: list[str] = []
    for name, decl in declared.items():
        where = f"plugin {manifest.id!r}: setting {name!r}"
        shown = "the secret value" if decl.secret else None
        value: Any = decl.default
        present = decl.default is not None
        if name in configured:
            value, present = configured[name], True
            if not matches_type(value, decl.type) and value is not None:
                problems.append(
                    f"{where} in the config is {shown or repr(value)}, "
                    f"not {TYPE_NAMES[decl.type]}; fix plugins.settings.{manifest.id}.{name}"
                )
                continue
            problem = None if value is None else setting_problem(decl, value)
            if problem is not None:
                problems.append(
                    f"{where} in the config is {shown or _short(value)}, but it {problem}; "
                    f"fix plugins.settings.{manifest.id}.{name}"
                )
                continue
        if decl.env and decl.env in env:
            try:
                value, present = _from_env(decl, env[decl.env]), True
            except ValueError:
                problems.append(
                    f"{where}: ${decl.env} is {shown or repr(env[decl.env])}, not "
                    f"{TYPE_NAMES[decl.type]}; fix the environment variable"
                )
                continue
            problem = setting_problem(decl, value)
            if problem is not None:
                problems.append(
                    f"{where}: ${decl.env} is {shown or _short(env[decl.env])}, but it "
                    f"{problem}; fix the environment variable"
                )
                continue
        if decl.required and (not present or value in (None, "")):
            source = f"set ${decl.env} or " if decl.env else "set "
            problems.append(
                f"{where} is required: {source}plugins.settings.{manifest.id}.{name} in the config"
            )
            continue
        values[name] = value
        if decl.secret and isinstance(value, str) and value:
            secrets.append(value)
    plugin_dir = None if data_dir is None else data_dir / "plugins" / manifest.id
    shared = store if manifest.shares_store else None
    if shared is not None:
        secrets.extend(_password(shared))
    return (
        PluginSettings(
            plugin_id=manifest.id,
            values=values,
            data_dir=plugin_dir,
            store=shared,
            config_dir=config_dir,
        ),
        secrets,
        problems,
    )


def _password(location: str) -> list[str]:
    """The password in a URL (``postgresql://user:PASSWORD@host/db``), if it has one."""
    from urllib.parse import unquote, urlsplit

    try:
        password = urlsplit(location).password
    except ValueError:
        return []
    return [p for p in {password, unquote(password or "")} if p]
