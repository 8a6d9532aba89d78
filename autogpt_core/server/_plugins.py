"""The plugins endpoints (docs/server-plugins.md): list, inspect, enable and disable the
installed plugins and change their settings, in the same config file as
``autogpt plugins enable/disable`` and ``plugins.settings.ID``.

What these endpoints change is written to the config file, then the server loads its
plugins anew (``Runtime.reload``): each task takes the change up at its next cycle, and a
cycle in flight ends with the plugins it started with. Every answer says so
(``takes_effect``), and tells what this server runs now (``running``) apart from what the
config file says (``enabled``): they differ when a plugin did not load (``reason``).

Secrets stay where the project keeps them, in the server's environment: a setting marked
``secret`` is never returned (only whether it is set) and never written into the config
file; setting one answers 422 naming the environment variable to set instead.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import trio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .._config import (
    PLUGIN_ID,
    Config,
    change_plugin_state,
    parse_config,
    read_raw,
    write_raw,
)
from .._errors import ConfigError
from ..plugins._loader import BROKEN, PluginRecord, load_plugins_env, scan
from ..plugins._manifest import TYPE_NAMES, Manifest, SettingDecl, matches_type
from ..plugins._settings import resolve_settings
from ._tasks import TaskError

if TYPE_CHECKING:
    from ._app import Api

PREFIX = "/ap/v1/plugins"
TAKES_EFFECT = (
    "takes effect at each task's next step: the server loads its plugins anew, and a step "
    "in flight ends with the plugins it started with"
)

#: What each permission allows (the table of autogpt_core/plugins/_permissions.py).
PERMISSION_WORDS = {
    "fs.read": "read files in the task's workspace",
    "fs.write": "create files in the workspace, and change the ones the task made",
    "fs.overwrite": "overwrite or delete a workspace file the task did not create",
    "network": "reach hosts on the network",
    "network.local": "reach loopback, link-local and private addresses (this machine, the LAN)",
    "shell": "run shell commands",
    "install": "install or enable plugins",
}


def plugin_routes(api: Api, route: Callable[..., Route]) -> list[Route]:
    """The plugins routes, each wrapped by ``route`` (the API's bearer-token guard)."""
    plugins = Plugins(api)
    one = PREFIX + "/{plugin_id}"
    return [
        route(PREFIX, plugins.list, ["GET"]),
        route(one, plugins.get, ["GET"]),
        route(one + "/enable", plugins.enable, ["POST"]),
        route(one + "/disable", plugins.disable, ["POST"]),
        route(one + "/settings", plugins.settings, ["PUT", "POST"]),
    ]


class Plugins:
    """The handlers; ``lock`` keeps this server's own rewrites of the file in turn."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.lock = trio.Lock()

    @property
    def started(self) -> Config:
        """The config the server started with (and runs on)."""
        config: Config = self.api.tasks.runtime.config
        return config

    # -- reading -----------------------------------------------------------------------

    def _config_now(self) -> Config:
        """The config file as it is now (it may have changed since the server started)."""
        path = self.started.path
        try:
            return parse_config(read_raw(path), path=path, exists=path.exists())
        except ConfigError as exc:
            raise TaskError(
                409,
                self.api.mask(f"the config file is not valid, so it is not changed: {exc}"),
            ) from None

    async def _scan(self) -> tuple[Config, dict[str, PluginRecord]]:
        def work() -> tuple[Config, dict[str, PluginRecord]]:
            config = self._config_now()
            return config, {r.id: r for r in scan(config)}

        return await trio.to_thread.run_sync(work)

    async def _record(self, plugin_id: str) -> tuple[Config, dict[str, PluginRecord], PluginRecord]:
        config, records = await self._scan()
        record = records.get(plugin_id)
        if record is None:
            raise TaskError(
                404, self.api.mask(f"no installed plugin has the id {plugin_id!r}; GET {PREFIX}")
            )
        return config, records, record

    def _summary(self, record: PluginRecord, config: Config) -> dict[str, Any]:
        manifest = record.manifest
        running = self.api.tasks.runtime.plugins.records.get(record.id)
        now: dict[str, str | None]
        if running is None:
            now = {"status": "not loaded", "reason": "installed after the server started"}
        else:
            now = {"status": running.status, "reason": running.reason or None}
        enabled_at_start = running is not None and running.enabled
        problems = self._problems(record, config)
        settings_changed = dict(config.plugin_settings.get(record.id, {})) != dict(
            self.started.plugin_settings.get(record.id, {})
        )
        summary: dict[str, Any] = self._masked(
            {
                "id": record.id,
                "name": manifest.name if manifest else record.id,
                "version": manifest.version if manifest else None,
                "description": manifest.description if manifest else "",
                "builtin": record.builtin,
                "distribution": record.source.distribution if record.source else None,
                # What the config file says now: this is what the next start loads.
                "enabled": record.enabled,
                "status": BROKEN if problems else ("enabled" if record.enabled else "disabled"),
                "reason": "; ".join(problems) or None,
                # What this server runs now.
                "running": now,
                "restart_needed": record.enabled != enabled_at_start or settings_changed,
                "permissions": _permissions(manifest, config.grants),
                "configurable": PLUGIN_ID.pattern.fullmatch(record.id) is not None,
            }
        )
        return summary

    def _problems(self, record: PluginRecord, config: Config) -> list[str]:
        """Why the plugin would not load at the next start (what ``scan`` finds, and its
        settings' problems; its import is not tried)."""
        if record.status == BROKEN:
            return [record.reason]
        if not record.enabled or record.manifest is None:
            return []
        _, _, problems = resolve_settings(
            record.manifest, config.plugin_settings.get(record.id, {}), data_dir=None
        )
        return problems

    def _detail(
        self, record: PluginRecord, config: Config, records: Mapping[str, PluginRecord]
    ) -> dict[str, Any]:
        info = self._summary(record, config)
        manifest = record.manifest
        info.update(
            self._masked(
                {
                    "homepage": manifest.homepage if manifest else "",
                    "requires": [
                        {"id": d, "enabled": d in records and records[d].enabled}
                        for d in (manifest.requires if manifest else ())
                    ],
                    "commands": [
                        {
                            "name": c.name,
                            "aliases": list(c.aliases),
                            "description": c.description,
                            "permissions": list(c.permissions),
                            "parameters": _parameters(c.parameters),
                        }
                        for c in (manifest.commands if manifest else ())
                    ],
                }
            )
        )
        info["settings"] = (
            [self._setting(s, config.plugin_settings.get(record.id, {})) for s in manifest.settings]
            if manifest
            else []
        )
        info["overridden_by_environment"] = load_plugins_env() is not None
        info["takes_effect"] = TAKES_EFFECT
        return info

    def _setting(self, decl: SettingDecl, configured: Mapping[str, Any]) -> dict[str, Any]:
        in_env = bool(decl.env) and decl.env in os.environ
        in_file = configured.get(decl.name) is not None
        source = (
            "environment"
            if in_env
            else "config"
            if in_file
            else "default"
            if decl.default is not None
            else None
        )
        row: dict[str, Any] = {
            "name": decl.name,
            "type": decl.type,
            "description": decl.description,
            "env": decl.env,
            "required": decl.required,
            "secret": decl.secret,
            "minimum": decl.minimum,
            "maximum": decl.maximum,
            "enum": None if decl.enum is None else list(decl.enum),
            "set": source is not None,
            "source": source,
            "editable": not decl.secret,
        }
        if decl.secret:
            # Never the value, the default or what the file holds: only whether it is set.
            row.update(default=None, value=None)
        else:
            row.update(
                default=self._masked(decl.default),
                # What the config file holds (null: not set there).
                value=self._masked(configured.get(decl.name)),
            )
        return row

    def _masked(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.api.mask(value)
        if isinstance(value, list):
            return [self._masked(v) for v in value]
        if isinstance(value, dict):
            return {k: self._masked(v) for k, v in value.items()}
        return value

    # -- handlers ----------------------------------------------------------------------

    async def list(self, request: Request, owner: str | None) -> Response:
        config, records = await self._scan()
        rows = [self._summary(r, config) for r in sorted(records.values(), key=lambda r: r.id)]
        return JSONResponse(
            {
                "plugins": rows,
                "restart_needed": any(r["restart_needed"] for r in rows),
                "overridden_by_environment": load_plugins_env() is not None,
                "takes_effect": TAKES_EFFECT,
            }
        )

    async def get(self, request: Request, owner: str | None) -> Response:
        config, records, record = await self._record(request.path_params["plugin_id"])
        return JSONResponse(self._detail(record, config, records))

    async def enable(self, request: Request, owner: str | None) -> Response:
        self._admin(owner)
        body = await self.api._json(request)
        also = body.get("include_required", False)
        if not isinstance(also, bool):
            raise TaskError(422, "include_required: must be true or false")
        async with self.lock:
            config, records, record = await self._record(request.path_params["plugin_id"])
            self._configurable(record)
            wanted = [record.id]
            needed: list[str] = []
            stack = [record.id]
            while stack:
                manifest = records[stack.pop()].manifest
                for dep in manifest.requires if manifest else ():
                    if dep not in records:
                        raise TaskError(
                            409,
                            f"plugin {record.id!r} requires {dep!r}, which is not installed: "
                            f"autogpt plugins install {dep}",
                        )
                    if not records[dep].enabled and dep not in wanted + needed:
                        needed.append(dep)
                        stack.append(dep)
            if needed and not also:
                names = ", ".join(needed)
                raise TaskError(
                    409,
                    f"include_required: {record.id} requires {names}, which "
                    f"{'is' if len(needed) == 1 else 'are'} disabled; send "
                    '{"include_required": true} to enable them too',
                )
            await self._write(lambda raw: change_plugin_state(raw, wanted + needed, enabled=True))
            config, records, record = await self._record(record.id)
        info = self._detail(record, config, records)
        info["changed"] = wanted + needed
        return JSONResponse(info)

    async def disable(self, request: Request, owner: str | None) -> Response:
        self._admin(owner)
        async with self.lock:
            _, records, record = await self._record(request.path_params["plugin_id"])
            self._configurable(record)
            await self._write(lambda raw: change_plugin_state(raw, [record.id], enabled=False))
            config, records, record = await self._record(record.id)
        info = self._detail(record, config, records)
        info["changed"] = [record.id]
        info["dependents"] = sorted(
            r.id
            for r in records.values()
            if r.enabled and r.manifest and record.id in r.manifest.requires
        )
        return JSONResponse(info)

    async def settings(self, request: Request, owner: str | None) -> Response:
        self._admin(owner)
        body = await self.api._json(request)
        changes = body.get("settings")
        if not isinstance(changes, dict):
            raise TaskError(
                422,
                "settings: give the settings to change as an object, like "
                '{"settings": {"timeout": 10}} (null puts a setting back to its default)',
            )
        async with self.lock:
            config, records, record = await self._record(request.path_params["plugin_id"])
            self._configurable(record)
            manifest = record.manifest
            if manifest is None:
                raise TaskError(409, f"plugin {record.id!r} has no valid manifest: {record.reason}")
            merged = _validated(manifest, changes, config.plugin_settings.get(record.id, {}))
            await self._write(lambda raw: _set_settings(raw, record.id, merged))
            config, records, record = await self._record(record.id)
        info = self._detail(record, config, records)
        info["changed"] = sorted(changes)
        return JSONResponse(info)

    # -- writing -----------------------------------------------------------------------

    def _admin(self, owner: str | None) -> None:
        """Plugins are what every task runs with: only an admin token changes them."""
        tokens = self.api.tokens
        if tokens is not None and not tokens.may_administer(owner):
            raise TaskError(
                403,
                f"the token {owner!r} may not change plugins: list it in server.admins in "
                "the config file (docs/server.md#tokens)",
            )

    def _configurable(self, record: PluginRecord) -> None:
        if PLUGIN_ID.pattern.fullmatch(record.id) is None:
            raise TaskError(
                409,
                self.api.mask(
                    f"{record.id!r} is a second distribution claiming an installed plugin's id; "
                    f"the config file cannot name it: uninstall one of them ({record.reason})"
                ),
            )

    async def _write(self, change: Callable[[dict[str, Any]], None]) -> None:
        """Apply ``change`` to the config file's mapping; refuse (409) to rewrite a file
        that is invalid, or to write one that would be."""
        path = self.started.path

        def work() -> None:
            try:
                raw = read_raw(path)
                parse_config(raw, path=path)
                change(raw)
                parse_config(raw, path=path)
                write_raw(path, raw)
            except ConfigError as exc:
                raise TaskError(
                    409, self.api.mask(f"the config file is not changed: {exc}")
                ) from None
            except OSError as exc:
                raise TaskError(
                    409, self.api.mask(f"the config file cannot be written: {exc}")
                ) from None

        await trio.to_thread.run_sync(work)
        await self._reload()

    async def _reload(self) -> None:
        """Load the plugins the config file now names, while the tasks run. What the
        server was started with otherwise (its store, data directory, grants) stays."""
        now = await trio.to_thread.run_sync(self._config_now)
        config = attrs.evolve(
            self.started,
            enable=now.enable,
            disable=now.disable,
            plugin_settings=now.plugin_settings,
            plugin_index=now.plugin_index,
            accepted_terms=now.accepted_terms,
        )
        tasks = self.api.tasks
        await tasks.runtime.reload(config, nursery=tasks.nursery)


def _set_settings(raw: dict[str, Any], plugin_id: str, values: Mapping[str, Any]) -> None:
    plugins = raw.get("plugins") or {}
    raw["plugins"] = plugins
    every = plugins.get("settings") or {}
    if values:
        every[plugin_id] = dict(values)
    else:
        every.pop(plugin_id, None)
    if every:
        plugins["settings"] = every
    else:
        plugins.pop("settings", None)


def _validated(
    manifest: Manifest, changes: Mapping[str, Any], configured: Mapping[str, Any]
) -> dict[str, Any]:
    """The plugin's settings in the config file after ``changes`` (null: back to the
    default); 422 naming the first setting that is wrong."""
    declared = {s.name: s for s in manifest.settings}
    merged = dict(configured)
    for name, value in changes.items():
        field = f"settings.{name}"
        decl = declared.get(name)
        if decl is None:
            known = ", ".join(sorted(declared)) or "none"
            raise TaskError(
                422, f"{field}: plugin {manifest.id!r} has no such setting (its settings: {known})"
            )
        if decl.secret:
            where = (
                f"set ${decl.env} in the server's environment"
                if decl.env
                else f"write plugins.settings.{manifest.id}.{name} into the config file yourself"
            )
            raise TaskError(
                422, f"{field}: a secret, which the server never writes into its config: {where}"
            )
        if value is None:
            merged.pop(name, None)
            continue
        if not matches_type(value, decl.type) or (
            isinstance(value, float) and not math.isfinite(value)
        ):
            raise TaskError(422, f"{field}: must be {TYPE_NAMES[decl.type]}")
        merged[name] = value
    _, _, problems = resolve_settings(manifest, merged, data_dir=None)
    for name in sorted(changes):
        for problem in problems:
            if f"setting {name!r}" in problem:
                raise TaskError(422, f"settings.{name}: {problem}")
    return merged


def _permissions(manifest: Manifest | None, grants: frozenset[str]) -> list[dict[str, Any]]:
    """The plugin's permissions: what each allows, whether the config grants it, and the
    commands that ask for it (a command asks for consent for those not granted)."""
    if manifest is None:
        return []
    return [
        {
            "name": p,
            "description": _permission_words(p),
            "granted": p in grants,
            "commands": [c.name for c in manifest.commands if p in c.permissions],
        }
        for p in manifest.permissions
    ]


def _permission_words(permission: str) -> str:
    if permission.startswith("secrets:"):
        return f"read the secret environment variable {permission[8:]}"
    return PERMISSION_WORDS.get(permission, permission)


def _parameters(schema: Mapping[str, Any]) -> list[dict[str, Any]]:
    required = schema.get("required") or []
    rows = []
    for name, prop in (schema.get("properties") or {}).items():
        prop = prop if isinstance(prop, Mapping) else {}
        kind = prop.get("type")
        rows.append(
            {
                "name": name,
                "type": " or ".join(map(str, kind)) if isinstance(kind, list) else kind,
                "required": name in required,
                "description": str(prop.get("description", "")),
            }
        )
    return rows
