"""``PluginControl`` for commands of plugins that declare ``install``: find plugins, and
enable or install one while the session runs, always asking the user first.

What it may do and when:

- ``find`` lists the installed plugins that are not running (disabled, or broken with the
  reason) and, only when the user configured one (``plugins.index``), the index's plugins
  not installed yet. Nothing else is contacted.
- ``enable`` and ``install`` show the plugin's manifest (what ``autogpt plugins install``
  shows) and ask, every time, through the session's consent (the terminal's prompt, the
  server's HTTP approval), whatever ``permissions.grant`` says; unattended sessions are
  refused without a question. The agent installs only what the index lists (a
  requirement or a wheel, never a pip option) and the requirements its manifest names;
  what it installs is enabled only if its manifest asks for no more than the index showed
  (permissions, commands, required plugins, requirements). Any plugin pip brought with it
  that was not shown is written to ``plugins.disable``, and so is everything new when the
  installed plugin is refused.
- A yes writes the config file, as ``autogpt plugins enable`` does, then loads the plugins
  anew (``Runtime.reload``): the session is offered the new commands from its next cycle.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
import trio

from hookspecs import JSON, PluginControl

from .._config import Config, set_plugin_state
from ..plugins._index import PluginIndex, ranked, read_index
from ..plugins._install import (
    consent_text,
    detect_environment,
    missing_requirements,
    requirement_states,
)
from ..plugins._loader import BROKEN, LOADED, PluginRecord, PluginSet, scan
from ..plugins._manifest import Manifest
from ..plugins._setup import needs

AskAlways = Callable[[str, str], Awaitable[bool]]
#: At most this many plugins in one ``find`` answer.
_MAX_FOUND = 20


class PluginControls:
    """Makes a session's ``PluginControl`` for one call (``for_call``), over the runtime's
    current config and plugins (``config()``, ``plugins()``) and its ``reload``."""

    def __init__(
        self,
        *,
        config: Callable[[], Config],
        plugins: Callable[[], PluginSet],
        reload: Callable[[Config], Awaitable[PluginSet]],
    ) -> None:
        self._config = config
        self._plugins = plugins
        self._reload = reload
        self._lock = trio.Lock()

    def for_call(self, ask: AskAlways) -> PluginControl:
        return PluginControl(
            find=self.find,
            enable=lambda plugin_id, reason: self.enable(plugin_id, reason, ask),
            install=lambda plugin_id, reason: self.install(plugin_id, reason, ask),
        )

    # -- find -----------------------------------------------------------------------------

    async def find(self, query: str) -> list[dict[str, JSON]]:
        config = self._config()
        records = await trio.to_thread.run_sync(scan, config)
        running = set(self._plugins().loaded)
        found: list[tuple[int, dict[str, JSON]]] = []
        idle = [r for r in records if r.manifest is not None and r.id not in running]
        for score, record in ranked(idle, query, lambda r: r.manifest):
            found.append((score, _described(record.manifest, _status(record), record.reason)))
        index = await self._index(config)
        if index is not None:
            installed = {r.id for r in records}
            listed = [e for e in index.entries if e.manifest.id not in installed]
            for score, entry in ranked(listed, query, lambda e: e.manifest):
                found.append((score, _described(entry.manifest, "not installed", "")))
        found.sort(key=lambda pair: -pair[0])
        return [info for _, info in found[:_MAX_FOUND]]

    async def _index(self, config: Config) -> PluginIndex | None:
        if not config.plugin_index:
            return None
        return await trio.to_thread.run_sync(read_index, config.plugin_index)

    # -- enable -----------------------------------------------------------------------------

    async def enable(self, plugin_id: str, reason: str, ask: AskAlways) -> str:
        async with self._lock:
            config = self._config()
            records = {r.id: r for r in await trio.to_thread.run_sync(scan, config)}
            record = records.get(plugin_id)
            if record is None or record.manifest is None:
                raise LookupError(
                    f"no installed plugin has the id {plugin_id!r}; find_plugins lists the "
                    "ones that can be enabled or installed"
                )
            if plugin_id in self._plugins().loaded:
                return f"Plugin {plugin_id!r} is enabled already; its commands are offered."
            if record.status == BROKEN and record.enabled:
                raise RuntimeError(f"plugin {plugin_id!r} cannot be loaded: {record.reason}")
            needed = _dependencies(record.manifest, records)
            manifests = [records[p].manifest for p in [plugin_id, *needed]]
            lacking = [n for n in (needs(m, config) for m in manifests if m is not None) if n]
            if lacking:
                raise PermissionError(
                    "; ".join(n.words() for n in lacking)
                    + ": the user sets it up with 'autogpt plugins enable', not the agent"
                )
            text = _consent(record, config, records, needed)
            if not await ask(f"Enable plugin {plugin_id!r}? {reason}".strip(), text):
                raise PermissionError(
                    f"enabling plugin {plugin_id!r} was not allowed (the user said no, or the "
                    "run is unattended and nobody could be asked)"
                )
            return await self._turn_on(config, [plugin_id, *needed])

    async def _turn_on(self, config: Config, plugin_ids: list[str]) -> str:
        await trio.to_thread.run_sync(
            lambda: set_plugin_state(config.path, plugin_ids, enabled=True)
        )
        wanted = frozenset(plugin_ids)
        new = await self._reload(
            attrs.evolve(config, enable=config.enable | wanted, disable=config.disable - wanted)
        )
        plugin_id = plugin_ids[0]
        record = new.records.get(plugin_id)
        if record is None or record.status != LOADED:
            why = record.reason if record is not None else "it is not installed"
            return f"Plugin {plugin_id!r} is enabled in {config.path}, but it did not load: {why}"
        commands = sorted(c.name for c in new.commands if c.plugin_id == plugin_id)
        offered = ", ".join(commands) if commands else "no commands"
        return (
            f"Enabled plugin {plugin_id!r} (in {config.path}); from the next step on you may "
            f"use its commands: {offered}."
        )

    # -- install ------------------------------------------------------------------------

    async def install(self, plugin_id: str, reason: str, ask: AskAlways) -> str:
        async with self._lock:
            config = self._config()
            index = await self._index(config)
            if index is None:
                raise LookupError(
                    "no plugin index is configured, so nothing can be installed from here; "
                    "the user may set plugins.index in the config, or install plugins with "
                    "'autogpt plugins install'"
                )
            entry = index.get(plugin_id)
            if entry is None:
                raise LookupError(
                    f"the plugin index {index.location} lists no plugin {plugin_id!r}; "
                    "find_plugins lists what it has"
                )
            records = {r.id: r for r in await trio.to_thread.run_sync(scan, config)}
            if plugin_id in records:
                raise LookupError(
                    f"plugin {plugin_id!r} is installed already: use enable_plugin instead"
                )
            dependencies = {
                d: (
                    "not installed: it cannot be enabled"
                    if d not in records
                    else ("enabled" if records[d].enabled else "disabled: enabled with it")
                )
                for d in entry.manifest.requires
            }
            missing = [d for d, state in dependencies.items() if state.startswith("not")]
            if missing:
                raise LookupError(
                    f"plugin {plugin_id!r} requires {', '.join(missing)}, which is not "
                    "installed; nothing was installed"
                )
            text = consent_text(
                entry.manifest,
                distribution=entry.requirement,
                dist_version="(to be installed)",
                grants=config.grants,
                parameter_lines=_parameter_lines,
                requirements=requirement_states(entry.manifest.requirements),
                dependencies=dependencies,
            )
            question = f"Install and enable plugin {plugin_id!r} ({entry.requirement})? {reason}"
            if not await ask(question.strip(), text):
                raise PermissionError(
                    f"installing plugin {plugin_id!r} was not allowed (the user said no, or the "
                    "run is unattended and nobody could be asked)"
                )
            await self._pip([entry.requirement], entry.requirement)
            after = {r.id: r for r in await trio.to_thread.run_sync(scan, config)}
            # Whatever else pip brought (a dependency that is a plugin) was not shown: off.
            arrived = sorted(set(after) - set(records))
            installed = after.get(plugin_id)
            problem = ""
            if installed is None or installed.manifest is None:
                problem = f"pip installed {entry.requirement}, but it holds no plugin {plugin_id!r}"
            else:
                grown = _grown(entry.manifest, installed.manifest)
                if grown:
                    problem = (
                        f"the installed plugin {plugin_id!r} asks for more than the index "
                        f"showed ({grown})"
                    )
            others = [p for p in arrived if p != plugin_id]
            if problem or installed is None or installed.manifest is None:
                await self._turn_off(config, arrived)
                raise PermissionError(
                    f"{problem}, so nothing was enabled: {', '.join(arrived) or 'nothing new'} "
                    f"is disabled in {config.path}; the user may review it with "
                    "'autogpt plugins info ID'"
                )
            if others:
                await self._turn_off(config, others)
            needs_pip = missing_requirements([installed.manifest])
            if needs_pip:
                await self._pip(needs_pip, f"the requirements of {plugin_id}")
            turned_on = await self._turn_on(
                attrs.evolve(config, disable=config.disable | frozenset(others)),
                [plugin_id, *_dependencies(installed.manifest, after)],
            )
            if others:
                turned_on += (
                    f" Also installed with it, and left disabled: {', '.join(others)} (not "
                    "shown to the user)."
                )
            return turned_on

    async def _turn_off(self, config: Config, plugin_ids: list[str]) -> None:
        if plugin_ids:
            await trio.to_thread.run_sync(
                lambda: set_plugin_state(config.path, plugin_ids, enabled=False)
            )

    async def _pip(self, specs: list[str], what: str) -> None:
        environment = detect_environment(Path(sys.prefix), sys.executable)
        command = environment.install(specs)
        if environment.managed:
            raise RuntimeError(
                f"autogpt-core runs in an environment {environment.describe()} manages, "
                f"where pip must not install; the user may run: {' '.join(command)}"
            )
        done = await trio.run_process(
            command, capture_stdout=True, capture_stderr=True, check=False
        )
        if done.returncode != 0:
            said = done.stderr.decode("utf-8", "replace").strip().splitlines()[-5:]
            raise RuntimeError(
                f"pip could not install {what} (exit status {done.returncode}): "
                + " / ".join(said)
                + "; the config was not changed"
            )


def _status(record: PluginRecord) -> str:
    return "broken" if record.status == BROKEN else "disabled"


def _described(manifest: Manifest | None, status: str, reason: str) -> dict[str, JSON]:
    assert manifest is not None
    return {
        "id": manifest.id,
        "name": manifest.name,
        "description": manifest.description,
        "status": status,
        "reason": reason,
        "commands": [c.name for c in manifest.commands],
        "permissions": list(manifest.permissions),
    }


def _dependencies(manifest: Manifest, records: Mapping[str, PluginRecord]) -> list[str]:
    """The plugins ``manifest`` requires that are installed but not enabled."""
    return [d for d in manifest.requires if d in records and not records[d].enabled]


def _consent(
    record: PluginRecord,
    config: Config,
    records: Mapping[str, PluginRecord],
    needed: list[str],
) -> str:
    from importlib.metadata import PackageNotFoundError, version

    assert record.manifest is not None
    assert record.source is not None
    distribution = record.source.distribution
    try:
        dist_version = version(distribution)
    except PackageNotFoundError:
        dist_version = "?"
    return consent_text(
        record.manifest,
        distribution=distribution,
        dist_version=dist_version,
        grants=config.grants,
        parameter_lines=_parameter_lines,
        requirements=requirement_states(record.manifest.requirements),
        dependencies={d: "disabled: enabled with it" for d in needed},
    )


def _parameter_lines(schema: Mapping[str, Any]) -> list[str]:
    """One line per parameter of a command's JSON Schema: name (type, required): what."""
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    lines = []
    for name, spec in properties.items():
        spec = spec if isinstance(spec, Mapping) else {}
        kind = spec.get("type", "any")
        need = ", required" if name in required else ""
        lines.append(f"{name} ({kind}{need}): {spec.get('description', '')}".rstrip(": "))
    return lines


def _grown(shown: Manifest, installed: Manifest) -> str:
    """What ``installed`` declares beyond ``shown`` (permissions, commands, command-line
    commands, required plugins, requirements), in words."""
    found = {
        "permissions": set(installed.permissions) - set(shown.permissions),
        "commands": {c.name for c in installed.commands} - {c.name for c in shown.commands},
        "command-line commands": {c.name for c in installed.cli_commands}
        - {c.name for c in shown.cli_commands},
        "required plugins": set(installed.requires) - set(shown.requires),
        "requirements": set(installed.requirements) - set(shown.requirements),
        "capabilities": {
            what
            for what, now, before in (
                ("access to the session store", installed.shares_store, shown.shares_store),
                ("bridged commands", installed.bridged, shown.bridged),
                ("terms", installed.terms, shown.terms),
            )
            if now and now != before
        },
    }
    return "; ".join(f"{what} {', '.join(sorted(new))}" for what, new in found.items() if new)
