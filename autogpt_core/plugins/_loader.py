"""Loading plugins: scan manifests, decide what is enabled, order, import, register.

``scan`` reads every manifest and imports nothing. ``load`` imports only the enabled
plugins, in dependency order, registers them with a ``HookManager``, hands each its
settings (``configure``) and collects its commands and LLM providers. A plugin that fails
at any step is unregistered and reported as ``broken`` with the reason; the others load.

What a plugin can do to the process at import is bounded: every exception but
``KeyboardInterrupt`` (``SystemExit`` included) makes it broken, and so does an import that
does not finish within ``import_timeout`` seconds (see ``import_plugin``).
"""

from __future__ import annotations

import difflib
import inspect
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import pluggy

from hookspecs import LLMProviderFactory, PluginSettings

from .._config import Config
from .._errors import ManifestError, PluginError, RegistrationError
from .._version import __version__
from ..hooks._hookcall import HookManager
from ._commands import CommandRegistry
from ._discovery import (
    ManifestCache,
    PluginSource,
    default_cache_path,
    iter_sources,
    read_manifest,
)
from ._manifest import Manifest
from ._ordering import resolve_order
from ._settings import resolve_settings

LOADED = "loaded"
DISABLED = "disabled"
BROKEN = "broken"
ENABLED = "enabled"  # enabled and valid, not (yet) imported: what `scan` reports

#: Seconds a plugin's import may take (``$AUTOGPT_IMPORT_TIMEOUT`` overrides it). Generous:
#: a plugin importing a large library on a cold disk takes seconds; one that hangs never ends.
IMPORT_TIMEOUT = 30.0


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
    #: What a bridge could not make into commands at load: ``(what, reason)`` pairs, its
    #: own (``unmapped``) and the core's (a bridged command refused by a check).
    unmapped: list[tuple[str, str]] = attrs.field(factory=list)

    @property
    def builtin(self) -> bool:
        return self.source is not None and self.source.builtin

    def fail(self, reason: str) -> None:
        self.status = BROKEN
        # One line: a run announces each broken plugin on one line of stderr.
        self.reason = "; ".join(line.strip() for line in reason.splitlines() if line.strip())


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
    """Every installed plugin with its manifest and whether it is enabled; imports nothing.

    Two distributions claiming one id each get a record: the first keeps the id, the others
    are ``"ID [DISTRIBUTION]"`` and broken (see ``_fail_clash`` for who wins).
    """
    env = os.environ if environ is None else environ
    sources = list(iter_sources() if sources is None else sources)
    cache = cache if cache is not None else ManifestCache(default_cache_path())
    only = load_plugins_env(env)
    store_kind = config.store_kind

    def wanted(plugin_id: str, enabled_by_default: bool) -> bool:
        if only is not None:
            return plugin_id in only
        return config.is_enabled(plugin_id, enabled_by_default)

    claims: dict[str, list[PluginSource]] = {}
    # Built-ins first, so that they keep their id when a distribution claims it too.
    for source in sorted(sources, key=lambda s: (s.id, not s.builtin, s.distribution)):
        claims.setdefault(source.id, []).append(source)
    records: dict[str, PluginRecord] = {}
    for plugin_id, claimants in claims.items():
        claimed = []
        for n, source in enumerate(claimants):
            key = plugin_id if n == 0 else f"{plugin_id} [{source.distribution}]"
            record = PluginRecord(id=key, source=source)
            records[key] = record
            claimed.append(record)
            try:
                record.manifest = read_manifest(source, cache)
            except ManifestError as exc:
                # Its enabled_by_default is unknown: count it as wanted unless the user
                # disabled it, so that a run announces it instead of starting without it.
                record.enabled = wanted(plugin_id, True)
                record.fail(f"invalid manifest: {exc}")
                continue
            record.enabled = wanted(plugin_id, record.manifest.default_on(store_kind))
            record.status = ENABLED if record.enabled else DISABLED
            terms = record.manifest.terms
            if (
                record.enabled
                and terms
                and (config.accepted_terms.get(plugin_id) != record.manifest.terms_digest)
            ):
                # Set-up before use: it stays off until its user has read and accepted them.
                record.enabled = False
                record.status = DISABLED
                record.reason = (
                    "its terms are not accepted (or changed since): run 'autogpt plugins "
                    f"enable {plugin_id}' to read and accept them"
                )
        if len(claimed) > 1:
            _fail_clash(plugin_id, claimed)
    cache.save()
    _check_conflicts(records)
    for record in records.values():
        if record.status == ENABLED:
            _check_compat(record)
    return sorted(records.values(), key=lambda r: r.id)


def _fail_clash(plugin_id: str, claimed: list[PluginRecord]) -> None:
    """Several distributions claim ``plugin_id``: a built-in keeps it, otherwise none does.

    A built-in wins because its id is what the docs, the user's config and the demo name:
    installing a plugin must not take away a feature the user already had (the demo used
    to finish without writing its file), nor let a newcomer replace a built-in such as the
    workspace sandbox unasked. Between third-party distributions there is no such ground:
    choosing by name or install order would be arbitrary, so the user chooses.
    """
    dists = [r.source.distribution if r.source else "?" for r in claimed]
    if claimed[0].builtin:
        for record, dist in zip(claimed[1:], dists[1:], strict=True):
            record.fail(
                f"plugin id {plugin_id!r} is claimed by the built-in plugin of {dists[0]} and "
                f"by {dist}: the built-in one is loaded, {dist}'s is not; fix: uninstall it "
                f"('pip uninstall {dist}') or ask its author to choose another id"
            )
        return
    for record in claimed:
        others = " ".join(d for d in dists if d != (record.source and record.source.distribution))
        record.fail(
            f"plugin id {plugin_id!r} is claimed by distributions {' and '.join(dists)}, so "
            f"none of them is loaded; fix: uninstall all but one ('pip uninstall {others}')"
        )


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
    #: The plugins configured by this load (all of them, unless it reused a set's).
    fresh: frozenset[str] = frozenset()

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


class ImportFailed(Exception):
    """``import_plugin`` could not produce the plugin object; the message is the reason."""


def import_timeout_from(environ: Mapping[str, str] | None = None) -> float:
    """``$AUTOGPT_IMPORT_TIMEOUT`` in seconds if it is a positive number, else the default."""
    env = os.environ if environ is None else environ
    try:
        seconds = float(env.get("AUTOGPT_IMPORT_TIMEOUT", ""))
    except ValueError:
        return IMPORT_TIMEOUT
    return seconds if seconds > 0 else IMPORT_TIMEOUT


def import_plugin(source: PluginSource, timeout: float) -> object:
    """Import ``source``'s entry point and instantiate it, bounded; ``ImportFailed`` if not.

    The import runs in a daemon thread that is given ``timeout`` seconds. A thread, not a
    signal in the main thread: a ``SIGALRM`` cannot interrupt a hang in C code, works
    only in the main thread and on POSIX, and would break into the plugin at an arbitrary
    point. A stuck thread cannot be killed, so it is abandoned; being a daemon it does not
    keep the process from exiting. Any ``BaseException`` is contained (``SystemExit`` at
    import used to end every command) except ``KeyboardInterrupt``: the user's Ctrl-C.
    """
    outcome: list[object] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(_instantiate(source.entry_point.load()))
        except BaseException as exc:  # reported by the loading thread, below
            failure.append(exc)

    worker = threading.Thread(target=run, name=f"autogpt import {source.id}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise ImportFailed(
            f"import of {source.value!r} did not finish within {timeout:g} s; fix: make the "
            f"plugin's import fast (no network, no waiting at import time), disable it "
            f"('autogpt plugins disable {source.id}') or allow more time with "
            "AUTOGPT_IMPORT_TIMEOUT=SECONDS"
        )
    if failure:
        exc = failure[0]
        if isinstance(exc, KeyboardInterrupt):
            raise exc
        why = " (a plugin must not end the program)" if isinstance(exc, SystemExit) else ""
        raise ImportFailed(
            f"import of {source.value!r} failed: {type(exc).__name__}: {exc}{why}; fix the "
            f"plugin or disable it ('autogpt plugins disable {source.id}')"
        )
    return outcome[0]


def _unknown_hooks(pm: HookManager, plugin_id: str, plugin: object) -> str | None:
    """Why ``plugin`` implements a hook that does not exist (pluggy's ``check_pending``
    for one plugin), or ``None``. ``@hookimpl(optionalhook=True)`` opts out."""
    known = sorted(
        name
        for name, caller in vars(pm.hook).items()
        if not name.startswith("_") and caller.has_spec()
    )
    for caller in pm.get_hookcallers(plugin) or []:
        if caller.has_spec():
            continue
        if all(impl.optionalhook for impl in caller.get_hookimpls() if impl.plugin is plugin):
            continue
        close = difflib.get_close_matches(caller.name, known, n=1)
        guess = f"did you mean {close[0]}? " if close else ""
        return (
            f"it implements {caller.name}, which is not a hook: {guess}"
            "fix: rename it to one of the hooks in docs/hooks.md, or mark it "
            "@hookimpl(optionalhook=True) if it implements another plugin's hook"
        )
    return None


def load(
    config: Config,
    *,
    records: list[PluginRecord] | None = None,
    pm_factory: Callable[[], HookManager] = HookManager,
    environ: Mapping[str, str] | None = None,
    import_timeout: float | None = None,
    reuse: PluginSet | None = None,
) -> PluginSet:
    """Import and register the enabled plugins of ``records`` (scanned when not given).

    ``import_timeout``: seconds each plugin's import may take (default: ``IMPORT_TIMEOUT``
    or ``$AUTOGPT_IMPORT_TIMEOUT``). ``reuse``: the set loaded before (a runtime loading
    plugins anew while it runs): a plugin loaded there from the same source, with the same
    settings, keeps its plugin object and is not configured again, so what it holds (an
    open database, say) stays as the sessions in flight use it (``PluginSet.fresh`` names
    the others).
    """
    records = scan(config, environ=environ) if records is None else records
    if import_timeout is None:
        import_timeout = import_timeout_from(environ)
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
    fresh: set[str] = set()
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
            store=str(config.store_location),
            config_dir=config.path.parent,
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
        before = reuse.records.get(plugin_id) if reuse is not None else None
        kept = (
            before is not None
            and before.status == LOADED
            and before.source == record.source
            and before.settings == settings
        )
        try:
            plugin = before.plugin if kept and before is not None else None
            if plugin is None:
                plugin = import_plugin(record.source, import_timeout)
        except ImportFailed as exc:
            record.fail(str(exc))
            continue
        try:
            pm.register(plugin, name=plugin_id)
        except (pluggy.PluginValidationError, ValueError) as exc:
            record.fail(f"invalid hook implementation: {exc}")
            continue
        unknown = _unknown_hooks(pm, plugin_id, plugin)
        if unknown is not None:
            # A misspelt hook would pass silently and never run: refuse the plugin instead.
            pm.unregister(plugin)
            record.fail(unknown)
            continue
        record.plugin = plugin
        try:
            if not kept:
                _call_per_plugin(pm, plugin, "configure", settings=settings)
                fresh.add(plugin_id)
            _call_per_plugin(pm, plugin, "register_commands", register=commands.binder(manifest))
            record.unmapped = []
            _call_per_plugin(
                pm,
                plugin,
                "register_bridged_commands",
                **_bridge_arguments(record, manifest, settings, commands, secrets, environ),
            )
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
        fresh=frozenset(fresh),
    )


def _bridge_arguments(
    record: PluginRecord,
    manifest: Manifest,
    settings: PluginSettings,
    commands: CommandRegistry,
    secrets: list[str],
    environ: Mapping[str, str] | None,
) -> dict[str, Any]:
    """``register``, ``unmapped`` and ``secret`` for one plugin's ``register_bridged_commands``."""
    plugin_id = manifest.id
    configured = (
        settings.values.get(manifest.bridged.prefixes_from)
        if manifest.bridged is not None
        else None
    )
    prefixes = [str(k) for k in configured] if isinstance(configured, Mapping) else []
    env_names = set(_env_values(configured))

    def not_a_bridge(what: str) -> RegistrationError:
        return RegistrationError(
            plugin_id,
            f"plugin {plugin_id!r} called {what} of register_bridged_commands, but its manifest "
            f"has no capabilities.bridged; add it (see docs/bridges.md) in {manifest.source}",
        )

    def unmapped(what: str, reason: str) -> None:
        if manifest.bridged is None:
            raise not_a_bridge("unmapped")
        record.unmapped.append((str(what), str(reason)))

    def secret(name: str) -> str | None:
        if manifest.bridged is None:
            raise not_a_bridge("secret")
        if name not in env_names:
            raise RegistrationError(
                plugin_id,
                f"plugin {plugin_id!r} asked for the environment variable {name!r}, which "
                f"plugins.settings.{plugin_id}.{manifest.bridged.prefixes_from} does not name "
                "as an 'env' value; a bridge reads only the secrets its configuration names",
            )
        value = (os.environ if environ is None else environ).get(name)
        if value:
            secrets.append(value)
        return value

    return {
        "register": commands.bridge_binder(manifest, prefixes, unmapped),
        "settings": settings,
        "unmapped": unmapped,
        "secret": secret,
    }


def _env_values(node: object) -> list[str]:
    """Every string under a key ``env`` in a configured value (the secrets it names)."""
    found: list[str] = []
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, Mapping):
            for key, value in current.items():
                if key == "env" and isinstance(value, str):
                    found.append(value)
                else:
                    stack.append(value)
        elif isinstance(current, list):
            stack.extend(current)
    return found


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
