"""Loading plugins: broken ones are reported and skipped, the rest load, in order."""

from __future__ import annotations

import importlib
import itertools
from pathlib import Path

import pytest

from autogpt_core._config import Config
from autogpt_core._discovery import ManifestCache, iter_sources
from autogpt_core._loader import BROKEN, DISABLED, LOADED, PluginSet, load, scan
from hookspecs import PromptBuilder, SessionView
from tests.distfactory import write_plugin

_counter = itertools.count()


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh site directory on sys.path, with unique package names per test."""
    site = tmp_path / f"site{next(_counter)}"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    return site


def _load(site: Path, tmp_path: Path, **config: object) -> PluginSet:
    importlib.invalidate_caches()
    sources = [s for s in iter_sources() if not s.builtin]
    cfg = Config(path=tmp_path / "config.yaml", data_dir=tmp_path / "data", **config)  # type: ignore[arg-type]
    records = scan(cfg, sources=sources, cache=ManifestCache(None), environ={})
    return load(cfg, records=records, environ={})


def _uid(name: str) -> str:
    return f"{name}{next(_counter)}"


def test_good_plugin_loads_and_its_hooks_run(site: Path, tmp_path: Path) -> None:
    """A valid plugin is imported, registered and called through the hook manager."""
    pid = _uid("good")
    write_plugin(
        site,
        pid,
        """
        from hookspecs import hookimpl
        @hookimpl
        def build_prompt(session, prompt):
            prompt.add_constraint("from good")
        """,
    )
    plugins = _load(site, tmp_path)
    assert plugins.records[pid].status == LOADED
    prompt = PromptBuilder(goal="g")
    plugins.pm.hook.build_prompt(session=SessionView("s", "g", tmp_path), prompt=prompt)
    assert prompt.constraints == ["from good"]


def test_broken_plugins_are_reported_and_others_load(site: Path, tmp_path: Path) -> None:
    """Import error, missing manifest, bad hookimpl, core too new, missing requirement: each
    is broken with its reason, and a good plugin still loads."""
    ids = {k: _uid(k) for k in ["raises", "nomanifest", "badarg", "newcore", "needs", "good"]}
    write_plugin(site, ids["raises"], "raise RuntimeError('kaboom at import')\n")
    write_plugin(site, ids["nomanifest"], "", manifest="")
    write_plugin(
        site,
        ids["badarg"],
        """
        from hookspecs import hookimpl
        @hookimpl
        def build_prompt(session, promt):
            pass
        """,
    )
    write_plugin(site, ids["newcore"], "", requires_core=">=99")
    write_plugin(site, ids["needs"], "", requirements='["surely-not-installed-pkg>=1"]')
    write_plugin(site, ids["good"], "")
    plugins = _load(site, tmp_path)
    rec = plugins.records
    assert rec[ids["good"]].status == LOADED
    assert rec[ids["raises"]].status == BROKEN
    assert "kaboom at import" in rec[ids["raises"]].reason
    assert "manifest" in rec[ids["nomanifest"]].reason
    assert "promt" in rec[ids["badarg"]].reason
    assert ">=99" in rec[ids["newcore"]].reason
    assert "pip install 'surely-not-installed-pkg>=1'" in rec[ids["needs"]].reason


def test_old_plugin_keeps_working_when_a_spec_gains_arguments(site: Path, tmp_path: Path) -> None:
    """An implementation taking fewer arguments than the spec (opt-in args) is called."""
    pid = _uid("old")
    write_plugin(
        site,
        pid,
        """
        from hookspecs import hookimpl
        seen = []
        @hookimpl
        def on_event(event):
            seen.append(event.kind)
        """,
    )
    plugins = _load(site, tmp_path)
    assert plugins.records[pid].status == LOADED
    from hookspecs import Event, EventKind

    event = Event(EventKind.MESSAGE, "s", 1)
    plugins.pm.hook.on_event(session=SessionView("s", "g", tmp_path), event=event)
    assert plugins.records[pid].plugin.seen == [EventKind.MESSAGE]  # type: ignore[attr-defined]


def test_load_order_follows_manifest_and_decides_call_order(site: Path, tmp_path: Path) -> None:
    """A plugin that loads after another is called before it (pluggy calls LIFO)."""
    first, second = _uid("zfirst"), _uid("asecond")
    code = """
    from hookspecs import hookimpl
    @hookimpl
    def build_prompt(session, prompt):
        prompt.add_context(__name__)
    """
    write_plugin(site, first, code)
    write_plugin(site, second, code, load_after=f"[{first}]")
    plugins = _load(site, tmp_path)
    assert plugins.order.index(first) < plugins.order.index(second)
    prompt = PromptBuilder(goal="g")
    plugins.pm.hook.build_prompt(session=SessionView("s", "g", tmp_path), prompt=prompt)
    assert prompt.context == [f"plug_{second}", f"plug_{first}"]


def test_missing_and_disabled_dependencies(site: Path, tmp_path: Path) -> None:
    """requires on a disabled plugin or an absent one: broken with how to fix it."""
    off, user, orphan = _uid("off"), _uid("user"), _uid("orphan")
    write_plugin(site, off, "", enabled=False)
    write_plugin(site, user, "", requires=f"[{off}]")
    write_plugin(site, orphan, "", requires="[nowhere-to-be-found]")
    plugins = _load(site, tmp_path)
    assert plugins.records[off].status == DISABLED
    assert f"autogpt plugins enable {off}" in plugins.records[user].reason
    assert "not installed" in plugins.records[orphan].reason


def test_duplicate_ids_and_commands_are_errors(site: Path, tmp_path: Path) -> None:
    """Two distributions with one id, or two plugins with one command name, are errors."""
    dup = _uid("dup")
    write_plugin(site, dup, "", package=f"pa_{dup}", distribution=f"first-{dup}")
    write_plugin(site, dup, "", package=f"pb_{dup}", distribution=f"second-{dup}")
    a, b = _uid("cmda"), _uid("cmdb")
    command = "[{name: shout, description: Shout., aliases: [yell]}]"
    other = "[{name: holler, description: Holler., aliases: [shout]}]"
    write_plugin(site, a, "", commands=command)
    write_plugin(site, b, "", commands=other)
    plugins = _load(site, tmp_path)
    assert plugins.records[dup].status == BROKEN
    assert "claimed by distributions" in plugins.records[dup].reason
    assert plugins.records[a].status == LOADED
    assert plugins.records[b].status == BROKEN
    assert "'shout'" in plugins.records[b].reason


def test_registering_undeclared_commands_is_refused(site: Path, tmp_path: Path) -> None:
    """A plugin registering a command its manifest lacks, or with other parameters, fails."""
    sneaky, mismatch, fine = _uid("sneaky"), _uid("mismatch"), _uid("fine")
    decl = (
        "[{name: greet, description: Greet., parameters: {type: object, "
        "properties: {name: {type: string}}, required: [name]}}]"
    )
    write_plugin(
        site,
        sneaky,
        """
        from hookspecs import hookimpl
        @hookimpl
        def register_commands(register):
            register("rm_rf", lambda: None)
        """,
        commands=decl,
    )
    write_plugin(
        site,
        mismatch,
        """
        from hookspecs import hookimpl
        def greet(person): return person
        @hookimpl
        def register_commands(register):
            register("greet", greet)
        """,
        commands=decl.replace("greet", "welcome"),
    )
    write_plugin(
        site,
        fine,
        """
        from hookspecs import hookimpl
        def hi(name): return "hi " + name
        @hookimpl
        def register_commands(register):
            register("hi", hi)
        """,
        commands=decl.replace("greet", "hi").replace("Greet.", "Hi."),
    )
    plugins = _load(site, tmp_path)
    assert plugins.records[sneaky].status == BROKEN
    assert "'rm_rf', which its manifest does not declare" in plugins.records[sneaky].reason
    assert plugins.records[mismatch].status == BROKEN
    assert "welcome" in plugins.records[mismatch].reason
    assert plugins.records[fine].status == LOADED
    assert [c.name for c in plugins.commands] == ["hi"]
    assert "welcome" not in {t.name for t in plugins.commands.tool_specs()}


def test_settings_and_secrets_reach_only_their_plugin(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """configure gets the plugin's own settings: env beats config beats default; secrets
    are collected for redaction; a bad value breaks only that plugin."""
    pid, bad = _uid("conf"), _uid("badconf")
    manifest = f"""\
manifest_version: 1
id: {{id}}
name: x
version: "1"
enabled_by_default: true
permissions: ["secrets:TOKEN_{pid.upper()}"]
config:
  settings:
    token: {{{{type: string, secret: true, env: TOKEN_{pid.upper()}}}}}
    level: {{{{type: integer, default: 1}}}}
"""
    code = """
    from hookspecs import hookimpl
    got = []
    @hookimpl
    def configure(settings):
        got.append(settings)
    """
    write_plugin(site, pid, code, manifest=manifest.format(id=pid))
    write_plugin(site, bad, code, manifest=manifest.format(id=bad))
    environ = {f"TOKEN_{pid.upper()}": "s3cr3t-value"}
    importlib.invalidate_caches()
    sources = [s for s in iter_sources() if not s.builtin]
    cfg = Config(
        path=tmp_path / "c.yaml",
        data_dir=tmp_path / "data",
        plugin_settings={pid: {"level": 5}, bad: {"level": "high"}},
    )
    records = scan(cfg, sources=sources, cache=ManifestCache(None), environ={})
    plugins = load(cfg, records=records, environ=environ)
    got = plugins.records[pid].plugin.got  # type: ignore[attr-defined]
    assert got[0].values == {"token": "s3cr3t-value", "level": 5}
    assert "s3cr3t-value" in plugins.secrets
    assert plugins.records[bad].status == BROKEN
    assert "'high'" in plugins.records[bad].reason


def test_load_plugins_env_overrides(site: Path, tmp_path: Path) -> None:
    """AUTOGPT_LOAD_PLUGINS names exactly the plugins to load; empty loads none."""
    a, b = _uid("envA").lower(), _uid("envb")
    write_plugin(site, a, "", enabled=False)
    write_plugin(site, b, "")
    importlib.invalidate_caches()
    sources = [s for s in iter_sources() if not s.builtin]
    cfg = Config(path=tmp_path / "c.yaml", data_dir=tmp_path / "d")
    only_a = scan(
        cfg, sources=sources, cache=ManifestCache(None), environ={"AUTOGPT_LOAD_PLUGINS": a}
    )
    assert {r.id: r.enabled for r in only_a} == {a: True, b: False}
    none = scan(
        cfg, sources=sources, cache=ManifestCache(None), environ={"AUTOGPT_LOAD_PLUGINS": ""}
    )
    assert not any(r.enabled for r in none)


def test_manifest_cache_is_invalidated_by_changes(site: Path, tmp_path: Path) -> None:
    """A cached manifest is reused until the file or the distribution version changes."""
    pid = _uid("cached")
    pkg = write_plugin(site, pid, "")
    importlib.invalidate_caches()
    cache_path = tmp_path / "cache.json"
    source = next(s for s in iter_sources() if s.id == pid)
    cfg = Config(path=tmp_path / "c.yaml", data_dir=tmp_path / "d")
    scan(cfg, sources=[source], cache=ManifestCache(cache_path), environ={})
    assert str(pkg / "autogpt-plugin.yaml") in cache_path.read_text()
    manifest = pkg / "autogpt-plugin.yaml"
    manifest.write_text(manifest.read_text().replace("test plugin", "edited plugin!"))
    records = scan(cfg, sources=[source], cache=ManifestCache(cache_path), environ={})
    assert records[0].manifest is not None
    assert records[0].manifest.description.startswith("edited plugin!")
