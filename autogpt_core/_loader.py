"""Loading plugins: scan manifests, decide what is enabled, order, import, register.

``scan`` reads every manifest and imports nothing. ``load`` imports only the enabled
plugins, in dependency order, registers them with a ``HookManager``, hands each its
settings (``configure``) and collects its commands and LLM providers. A plugin that fails
at any step is unregistered and reported as ``broken`` with the reason; the others load.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import pluggy

from hookspecs import LLMProviderFactory, PluginSettings

from ._commands import CommandRegistry
from ._config import Config
from ._discovery import (
    ManifestCache,
    PluginSource,
    default_cache_path,
    iter_sources,
    read_manifest,
)
from ._errors import ManifestError, PluginError, RegistrationError
from ._hookcall import HookManager
from ._manifest import Manifest
from ._ordering import resolve_order
from ._settings import resolve_settings
from ._version import __version__

LOADED = "loaded"
DISABLED = "disabled"
BROKEN = "broken"
ENABLED = "enabled"  # enabled and valid, not (yet) imported: what `scan` reports


@attrs.define
class PluginRecord:
    """What is known about one installed plugin."""

    id: str
    source: PluginSource | None
    manifest: Manifest | None = None
    enabled: bool = False
    status: str = DISABLED
    reason: str = ""
    plugin: object = attrs.field(default=None, repr=False)
    settings: PluginSettings | None = None

    @property
    def builtin(self) -> bool:
        return self.source is not None and self.source.builtin

    def fail(self, reason: str) -> None:
        self.status = BROKEN
        self.reason = reason


def load_plugins_env(environ: Mapping[str, str] | None = None) -> frozenset[str] | None:
    """``$AUTOGPT_LOAD_PLUGINS``: the exact set of plugin ids to load (empty = none)."""
    env = os.environ if environ is None else environ
    raw = env.get("AUTOGPT_LOAD_PLUGINS")
    if raw is None:
        return None
    return frozenset(p.strip() for p in raw.split(",") if p.strip())


def scan(
    config: Config,
    *,
    sources: Iterable[PluginSource] | None = None,
    cache: ManifestCache | None = None,
    environ: Mapping[str, str] | None = None,
) -> list[PluginRecord]:
    """Every installed plugin with its manifest and whether it is enabled; imports nothing."""
    env = os.environ if environ is None else environ
    sources = list(iter_sources() if sources is None else sources)
    cache = cache if cache is not None else ManifestCache(default_cache_path())
    only = load_plugins_env(env)
    records: dict[str, PluginRecord] = {}
    for source in sources:
        if source.id in records:
            first = records[source.id]
            reason = (
                f"plugin id {source.id!r} is claimed by distributions "
                f"{first.source.distribution if first.source else '?'} and {source.distribution}: "
                "uninstall one of them"
            )
            first.fail(reason)
            first.enabled = False
            continue
        record = PluginRecord(id=source.id, source=source)
        records[source.id] = record
        try:
            record.manifest = read_manifest(source, cache)
        except ManifestError as exc:
            record.enabled = (only is not None and source.id in only) or (
                only is None and source.id in config.enable
            )
            record.fail(f"invalid manifest: {exc}")
            continue
        manifest = record.manifest
        if only is not None:
            record.enabled = source.id in only
        else:
            record.enabled = config.is_enabled(source.id, manifest.enabled_by_default)
        record.status = ENABLED if record.enabled else DISABLED
    cache.save()
    _check_conflicts(records)
    for record in records.values():
        if record.status == ENABLED:
            _check_compat(record)
    return sorted(records.values(), key=lambda r: r.id)


def _check_conflicts(records: Mapping[str, PluginRecord]) -> None:
    """Two enabled plugins offering the same command (or alias): the later id fails."""
    owners: dict[str, str] = {}
    for record in sorted(records.values(), key=lambda r: r.id):
        if record.status != ENABLED or record.manifest is None:
            continue
        for command in record.manifest.commands:
            for name in (command.name, *command.aliases):
                owner = owners.get(name)
                if owner is not None:
                    record.fail(
                        f"command {name!r} is also provided by plugin {owner!r}: "
                        f"disable one of them ('autogpt plugins disable {record.id}')"
                    )
                    break
            if record.status == BROKEN:
                break
        if record.status != BROKEN:
            for command in record.manifest.commands:
                for name in (command.name, *command.aliases):
                    owners[name] = record.id


def _check_compat(record: PluginRecord) -> None:
    """``requires_core`` and ``requirements``, checked from metadata, importing nothing."""
    manifest = record.manifest
    assert manifest is not None
    if not manifest.requires_core and not manifest.requirements:
        return
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    if manifest.requires_core and not SpecifierSet(manifest.requires_core).contains(
        __version__, prereleases=True
    ):
        record.fail(
            f"needs autogpt-core {manifest.requires_core}, but {__version__} is running: "
            f"upgrade autogpt-core or install a version of the plugin made for {__version__}"
        )
        return
    missing = []
    for text in manifest.requirements:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version(requirement.name)
        except PackageNotFoundError:
            missing.append(f"{text} (not installed)")
            continue
        if requirement.specifier and not requirement.specifier.contains(
            installed, prereleases=True
        ):
            missing.append(f"{text} ({installed} installed)")
    if missing:
        quoted = " ".join(f"'{m.split(' (')[0]}'" for m in missing)
        record.fail(f"missing requirement(s) {', '.join(missing)}: pip install {quoted}")


@attrs.define
class PluginSet:
    """The loaded plugins: hook manager, records, commands, providers, secrets."""

    records: dict[str, PluginRecord]
    pm: HookManager
    order: list[str]
    commands: CommandRegistry
    providers: dict[str, tuple[str, LLMProviderFactory]]
    secrets: list[str]

    @property
    def loaded(self) -> list[str]:
        return [pid for pid in self.order if self.records[pid].status == LOADED]

    def manifest(self, plugin_id: str) -> Manifest:
        manifest = self.records[plugin_id].manifest
        assert manifest is not None
        return manifest

    def problems(self) -> list[str]:
        return [
            f"{r.id}: {r.reason}" for r in self.records.values() if r.status == BROKEN and r.enabled
        ]


def _instantiate(obj: object) -> object:
    # An entry point may name a module (module-level hookimpls) or a class, which is
    # instantiated with no arguments (a plugin object with hookimpl methods).
    if isinstance(obj, type):
        return obj()
    return obj


def load(
    config: Config,
    *,
    records: list[PluginRecord] | None = None,
    pm_factory: Callable[[], HookManager] = HookManager,
    environ: Mapping[str, str] | None = None,
) -> PluginSet:
    """Import and register the enabled plugins of ``records`` (scanned when not given)."""
    records = scan(config, environ=environ) if records is None else records
    by_id = {r.id: r for r in records}
    candidates = {
        r.id: r.manifest for r in records if r.status == ENABLED and r.manifest is not None
    }
    unavailable = {
        r.id: ("disabled" if r.status == DISABLED else f"broken ({r.reason})")
        for r in records
        if r.id not in candidates
    }
    order, failed = resolve_order(candidates, unavailable)
    for plugin_id, why in failed.items():
        by_id[plugin_id].fail(why)

    pm = pm_factory()
    commands = CommandRegistry()
    providers: dict[str, tuple[str, LLMProviderFactory]] = {}
    secrets: list[str] = []
    for plugin_id in order:
        record = by_id[plugin_id]
        manifest = record.manifest
        assert manifest is not None
        assert record.source is not None
        settings, plugin_secrets, problems = resolve_settings(
            manifest,
            config.plugin_settings.get(plugin_id, {}),
            data_dir=config.data_dir,
            environ=environ,
        )
        secrets.extend(plugin_secrets)
        if problems:
            record.fail("; ".join(problems))
            continue
        record.settings = settings
        # A dependency that failed after ordering fails its dependents too.
        dead = [d for d in manifest.requires if by_id[d].status != LOADED]
        if dead:
            record.fail(f"requires {dead[0]!r}, which failed to load")
            continue
        try:
            plugin = _instantiate(record.source.entry_point.load())
        except Exception as exc:  # any import-time error is the plugin's, not ours
            record.fail(f"import of {record.source.value!r} failed: {type(exc).__name__}: {exc}")
            continue
        try:
            pm.register(plugin, name=plugin_id)
        except (pluggy.PluginValidationError, ValueError) as exc:
            record.fail(f"invalid hook implementation: {exc}")
            continue
        record.plugin = plugin
        try:
            _call_per_plugin(pm, plugin, "configure", settings=settings)
            _call_per_plugin(pm, plugin, "register_commands", register=commands.binder(manifest))
            _call_per_plugin(
                pm,
                plugin,
                "register_llm_providers",
                register=_provider_binder(plugin_id, providers),
            )
        except Exception as exc:
            commands.remove_plugin(plugin_id)
            for name in [n for n, (owner, _) in providers.items() if owner == plugin_id]:
                del providers[name]
            pm.unregister(plugin)
            record.plugin = None
            if isinstance(exc, PluginError):
                record.fail(str(exc))
            else:
                record.fail(f"failed while registering: {type(exc).__name__}: {exc}")
            continue
        record.status = LOADED
    return PluginSet(
        records=by_id,
        pm=pm,
        order=order,
        commands=commands,
        providers=providers,
        secrets=secrets,
    )


def _call_per_plugin(pm: HookManager, plugin: object, hook: str, **kwargs: Any) -> None:
    """Call ``hook`` on ``plugin``'s implementations alone, with arguments bound to it."""
    tracer = pm.on_call
    for name, impl in pm.impls_by_plugin(hook):
        if impl.plugin is not plugin:
            continue
        args = [kwargs[argname] for argname in impl.argnames]
        started = time.perf_counter()
        try:
            result = impl.function(*args)
        except BaseException as exc:
            if tracer is not None:
                # The type only: a message could quote a secret.
                tracer(hook, name, time.perf_counter() - started, f"raised {type(exc).__name__}")
            raise
        if tracer is not None:
            tracer(hook, name, time.perf_counter() - started, "ok")
        if inspect.isawaitable(result):
            if inspect.iscoroutine(result):
                result.close()  # never awaited by design: silence the warning
            raise RegistrationError(
                name,
                f"plugin {name!r}: hook {hook!r} must be a plain function, "
                "not async: it runs once at load time; remove 'async'",
            )


def _provider_binder(
    plugin_id: str, providers: dict[str, tuple[str, LLMProviderFactory]]
) -> Callable[[str, LLMProviderFactory], None]:
    def register(name: str, factory: LLMProviderFactory) -> None:
        owner = providers.get(name)
        if owner is not None:
            raise RegistrationError(
                plugin_id,
                f"plugin {plugin_id!r} registered LLM provider {name!r}, already registered by "
                f"plugin {owner[0]!r}: disable one of them",
            )
        if not callable(factory):
            raise RegistrationError(
                plugin_id, f"plugin {plugin_id!r} registered provider {name!r} without a factory"
            )
        providers[name] = (plugin_id, factory)

    return register
