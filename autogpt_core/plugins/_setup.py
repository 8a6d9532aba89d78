"""Set-up before use, as Home Assistant's integrations have it: what a plugin needs before it
may be enabled, and asking the user for it (``autogpt plugins enable``).

A manifest says what it needs: settings marked ``required`` (an API key, say: a ``secret``
setting read from the environment variable its ``env`` names) and terms to accept
(``setup.terms``, the text or a URL). Enabling asks for what is missing: the terms are
shown and accepted (their digest is recorded in ``plugins.accepted``; changed terms are
asked again), a secret is read without echo and kept in the data directory's secrets file
(``_secrets.py``: where the plugin reads it, its environment variable), never in the config
file; any other setting goes under ``plugins.settings``. Without a terminal nothing is
asked: the plugin is not enabled, and the message says what to set.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from .._config import Config
from .._errors import ConfigError
from ._manifest import TYPE_NAMES, Manifest, SettingDecl


@attrs.frozen
class Needs:
    """What one plugin lacks before it may be enabled."""

    plugin_id: str
    terms: str = ""
    settings: tuple[SettingDecl, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.terms or self.settings)

    def words(self) -> str:
        """What is missing and how to give it, for a message without a terminal."""
        parts = []
        if self.terms:
            parts.append(
                f"its terms to be accepted (run 'autogpt plugins enable {self.plugin_id}' on a "
                "terminal, or add --accept-terms having read them with "
                f"'autogpt plugins info {self.plugin_id}')"
            )
        for decl in self.settings:
            if decl.env:
                how = f"set ${decl.env}"
            else:
                how = f"set plugins.settings.{self.plugin_id}.{decl.name} in the config"
            parts.append(f"the setting {decl.name!r} ({how})")
        return f"plugin {self.plugin_id!r} needs " + "; ".join(parts)


def needs(manifest: Manifest, config: Config, environ: Mapping[str, str] | None = None) -> Needs:
    """What ``manifest``'s plugin lacks under ``config`` and the environment."""
    env = os.environ if environ is None else environ
    terms = ""
    if manifest.terms and config.accepted_terms.get(manifest.id) != manifest.terms_digest:
        terms = manifest.terms
    configured = config.plugin_settings.get(manifest.id, {})
    missing = tuple(
        decl
        for decl in manifest.settings
        if decl.required
        and configured.get(decl.name) in (None, "")
        and not (decl.env and env.get(decl.env))
        and decl.default in (None, "")
    )
    return Needs(manifest.id, terms, missing)


@attrs.frozen
class Answers:
    """What the user gave: accepted terms (digest), plain settings, secrets (env name)."""

    accepted: Mapping[str, str] = attrs.field(factory=dict)
    settings: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    secrets: Mapping[str, str] = attrs.field(factory=dict)


def ask_for(
    wanted: list[tuple[Manifest, Needs]],
    *,
    ask: Callable[[str], str],
    ask_secret: Callable[[str], str],
    say: Callable[[str], None],
) -> Answers | None:
    """Ask for what each plugin needs; ``None`` if the user declines anything."""
    accepted: dict[str, str] = {}
    settings: dict[str, dict[str, Any]] = {}
    secrets: dict[str, str] = {}
    for manifest, need in wanted:
        if need.terms:
            say(f"Plugin {manifest.id} asks you to accept its terms:\n\n{need.terms}\n")
            if ask("Accept them? [y/N] ").strip().lower() not in ("y", "yes"):
                say(f"Not accepted: {manifest.id} stays disabled.")
                return None
            accepted[manifest.id] = manifest.terms_digest
        for decl in need.settings:
            what = f"{decl.name} for {manifest.id}"
            if decl.description:
                what += f" ({' '.join(decl.description.split())})"
            if decl.secret:
                if not decl.env:
                    raise ConfigError(
                        f"plugin {manifest.id!r}: the secret setting {decl.name!r} names no "
                        "environment variable (env:), so it cannot be kept out of the config "
                        "file; ask its author to add one"
                    )
                value = ask_secret(f"{what}, kept in the secrets file as ${decl.env}: ")
                if not value:
                    say(f"Nothing given: {manifest.id} stays disabled.")
                    return None
                # Checked as the environment variable will be read at load; never shown.
                _parsed(manifest.id, decl, value, secret=True)
                secrets[decl.env] = value
                continue
            text = ask(f"{what} [{TYPE_NAMES[decl.type]}]: ").strip()
            if not text:
                say(f"Nothing given: {manifest.id} stays disabled.")
                return None
            settings.setdefault(manifest.id, {})[decl.name] = _parsed(manifest.id, decl, text)
    return Answers(accepted, settings, secrets)


def _parsed(plugin_id: str, decl: SettingDecl, text: str, *, secret: bool = False) -> Any:
    from ._manifest import _short, setting_problem
    from ._settings import _from_env

    try:
        value = _from_env(decl, text)
    except (ValueError, json.JSONDecodeError):
        value = None
    problem = f"must be {TYPE_NAMES[decl.type]}" if value is None else setting_problem(decl, value)
    if problem is not None:
        given = "what was typed" if secret else _short(text)
        raise ConfigError(f"plugin {plugin_id!r}: {decl.name} {problem}, not {given}")
    return value


def apply_answers(raw: dict[str, Any], answers: Answers) -> None:
    """Record ``answers``' accepted terms and plain settings in the config mapping ``raw``."""
    plugins = raw.get("plugins") or {}
    raw["plugins"] = plugins
    if answers.accepted:
        plugins["accepted"] = {**(plugins.get("accepted") or {}), **answers.accepted}
    if answers.settings:
        current = plugins.get("settings") or {}
        for plugin_id, values in answers.settings.items():
            current[plugin_id] = {**(current.get(plugin_id) or {}), **values}
        plugins["settings"] = current
