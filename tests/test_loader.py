"""Loading plugins: broken ones are reported and skipped, the rest load, in order."""

from __future__ import annotations

import importlib
import itertools
import threading
import time
from pathlib import Path

import pytest

from autogpt_core._config import Config
from autogpt_core.plugins._discovery import ManifestCache, iter_sources
from autogpt_core.plugins._loader import BROKEN, DISABLED, LOADED, PluginSet, load, scan
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


def test_a_plugin_claiming_a_builtin_id_loses_and_both_claims_are_shown(
    site: Path, tmp_path: Path
) -> None:
    """A distribution claiming a built-in's id is broken, naming both distributions, and
    the built-in still loads, whichever name sorts first; between two third-party
    distributions neither loads; every claimant has a record and is announced."""
    write_plugin(site, "workspace", "", package=f"pa_{_uid('ws')}", distribution="aaa-rival")
    write_plugin(site, "workspace", "", package=f"pz_{_uid('ws')}", distribution="zzz-rival")
    dup = _uid("dup")
    write_plugin(site, dup, "", package=f"pa_{dup}", distribution=f"first-{dup}")
    write_plugin(site, dup, "", package=f"pb_{dup}", distribution=f"second-{dup}")
    importlib.invalidate_caches()
    sources = [s for s in iter_sources() if s.id in {"workspace", dup}]
    cfg = Config(path=tmp_path / "c.yaml", data_dir=tmp_path / "data")
    records = scan(cfg, sources=sources, cache=ManifestCache(None), environ={})
    plugins = load(cfg, records=records, environ={})
    rec = plugins.records
    assert rec["workspace"].builtin
    assert rec["workspace"].status == LOADED
    for rival in ("aaa-rival", "zzz-rival"):
        loser = rec[f"workspace [{rival}]"]
        assert loser.status == BROKEN
        assert loser.enabled
        assert "built-in plugin of autogpt-core and by " + rival in loser.reason
        assert f"pip uninstall {rival}" in loser.reason
    assert rec[dup].status == rec[f"{dup} [second-{dup}]"].status == BROKEN
    assert f"first-{dup} and second-{dup}" in rec[f"{dup} [second-{dup}]"].reason
    announced = " ".join(plugins.problems())
    assert announced.count("claimed by") == 4


def test_a_misspelt_hook_breaks_its_plugin_with_a_suggestion(site: Path, tmp_path: Path) -> None:
    """An implementation of a hook that does not exist makes its plugin broken, naming the
    closest hook and nothing of it stays registered; optionalhook=True opts out."""
    typo, optional = _uid("typo"), _uid("optional")
    write_plugin(
        site,
        typo,
        """
        from hookspecs import hookimpl
        @hookimpl
        def build_prompt(session, prompt):
            prompt.add_constraint("must not stay registered")
        @hookimpl
        def post_commands(session, call, result):
            pass
        """,
    )
    write_plugin(
        site,
        optional,
        """
        from hookspecs import hookimpl
        @hookimpl(optionalhook=True)
        def some_other_plugins_hook(x):
            pass
        """,
    )
    plugins = _load(site, tmp_path)
    record = plugins.records[typo]
    assert record.status == BROKEN
    assert record.reason.startswith(
        "it implements post_commands, which is not a hook: did you mean post_command?"
    )
    assert "optionalhook=True" in record.reason
    assert plugins.pm.get_plugin(typo) is None
    prompt = PromptBuilder(goal="g")
    plugins.pm.hook.build_prompt(session=SessionView("s", "g", tmp_path), prompt=prompt)
    assert prompt.constraints == []
    assert plugins.records[optional].status == LOADED


def test_an_invalid_manifest_is_announced_on_one_line(site: Path, tmp_path: Path) -> None:
    """A plugin whose manifest is invalid counts as enabled (its enabled_by_default is
    unknown) unless the config disables it, so it is among the problems a run announces,
    each one line however many issues its manifest has."""
    bad = _uid("badman")
    write_plugin(
        site, bad, "", manifest=f"manifest_version: 1\nid: {bad}\nname: x\nversion: 1\nbogus: 1\n"
    )
    plugins = _load(site, tmp_path)
    record = plugins.records[bad]
    assert (record.status, record.enabled) == (BROKEN, True)
    assert "bogus: unknown field" in record.reason
    assert "version: expected a string" in record.reason
    (problem,) = [p for p in plugins.problems() if p.startswith(bad)]
    assert "\n" not in problem
    quiet = _load(site, tmp_path, disable=frozenset({bad}))
    assert quiet.records[bad].status == BROKEN
    assert not quiet.records[bad].enabled
    assert not [p for p in quiet.problems() if p.startswith(bad)]


def test_any_exception_at_import_but_ctrl_c_is_contained(site: Path, tmp_path: Path) -> None:
    """SystemExit or another BaseException raised by a plugin's import makes only that
    plugin broken, with the reason; KeyboardInterrupt still reaches the user."""
    exits, base, good = _uid("exits"), _uid("base"), _uid("good")
    write_plugin(site, exits, "raise SystemExit(3)\n")
    write_plugin(site, base, "class Odd(BaseException): pass\nraise Odd('odd one')\n")
    write_plugin(site, good, "")
    plugins = _load(site, tmp_path)
    assert plugins.records[good].status == LOADED
    assert plugins.records[exits].status == BROKEN
    assert "SystemExit: 3 (a plugin must not end the program)" in plugins.records[exits].reason
    assert f"autogpt plugins disable {exits}" in plugins.records[exits].reason
    assert "Odd: odd one" in plugins.records[base].reason
    interrupts = _uid("interrupts")
    write_plugin(site, interrupts, "raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        _load(site, tmp_path)


def test_an_import_that_hangs_is_abandoned_after_the_timeout(site: Path, tmp_path: Path) -> None:
    """An import still running after AUTOGPT_IMPORT_TIMEOUT seconds makes its plugin broken
    ("did not finish within"), and the plugins after it load."""
    flag = tmp_path / "release"
    stuck, after = _uid("astuck"), _uid("zafter")
    write_plugin(
        site,
        stuck,
        f"""
        import pathlib, time
        while not pathlib.Path({str(flag)!r}).exists():
            time.sleep(0.01)
        """,
    )
    write_plugin(site, after, "")
    # The abandoned import ends when the flag appears: at the latest after 5 s.
    release = threading.Timer(5, flag.touch)
    release.start()
    importlib.invalidate_caches()
    sources = [s for s in iter_sources() if s.id in {stuck, after}]
    cfg = Config(path=tmp_path / "c.yaml", data_dir=tmp_path / "data")
    records = scan(cfg, sources=sources, cache=ManifestCache(None), environ={})
    started = time.monotonic()
    try:
        plugins = load(cfg, records=records, environ={"AUTOGPT_IMPORT_TIMEOUT": "0.5"})
        elapsed = time.monotonic() - started
    finally:
        release.cancel()
        flag.touch()
    assert elapsed < 4
    assert plugins.records[stuck].status == BROKEN
    assert f"import of 'plug_{stuck}' did not finish within 0.5 s" in plugins.records[stuck].reason
    assert "AUTOGPT_IMPORT_TIMEOUT" in plugins.records[stuck].reason
    assert plugins.records[after].status == LOADED
