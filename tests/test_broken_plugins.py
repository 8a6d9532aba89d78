"""Broken plugins as a user meets them: announced by a run, shown by list and check, and
never able to stop, exit or hang an ``autogpt`` command."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.clirun import autogpt, cli_env
from tests.distfactory import write_plugin


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    return site


def test_run_announces_broken_plugins_and_keeps_the_builtins(site: Path, tmp_path: Path) -> None:
    """A plugin taking a built-in's id, one with a misspelt hook and one with an invalid
    manifest: the demo still writes its file, and its stderr names each, one line each."""
    write_plugin(site, "workspace", "", package="rival_ws", distribution="autogpt-plugin-ws")
    write_plugin(
        site,
        "typo",
        """
        from hookspecs import hookimpl
        @hookimpl
        def post_commands(session, call, result):
            pass
        """,
    )
    manifest = "manifest_version: 1\nid: badman\nname: x\nversion: 1\nbad: 1\n"
    write_plugin(site, "badman", "", manifest=manifest)
    workspace = tmp_path / "ws"
    env = cli_env(tmp_path, site=site)
    result = autogpt("run", "--demo", "--workspace", str(workspace), env=env)
    assert result.returncode == 0, result.stderr
    assert "Small hooks wait in line" in (workspace / "haiku.txt").read_text()
    warnings = [line for line in result.stderr.splitlines() if line.startswith("autogpt: warn")]
    assert len(warnings) == 3, result.stderr
    badman, typo, rival = warnings
    assert badman.startswith("autogpt: warning: plugin badman: invalid manifest: ")
    assert "bad: unknown field" in badman
    assert "version: expected a string" in badman
    assert "implements post_commands, which is not a hook: did you mean post_command?" in typo
    assert rival.startswith("autogpt: warning: plugin workspace [autogpt-plugin-ws]: ")
    assert "built-in plugin of autogpt-core and by autogpt-plugin-ws" in rival

    rows = {r["id"]: r for r in json.loads(autogpt("plugins", "list", "--json", env=env).stdout)}
    assert rows["workspace [autogpt-plugin-ws]"]["status"] == "broken"
    assert rows["workspace [autogpt-plugin-ws]"]["distribution"] == "autogpt-plugin-ws"
    everything = json.loads(autogpt("plugins", "list", "--all", "--json", env=env).stdout)
    builtin = next(r for r in everything if r["id"] == "workspace")
    assert (builtin["status"], builtin["builtin"]) == ("loaded", True)
    check = autogpt("plugins", "check", env=env)
    assert check.returncode == 1
    assert "✗ workspace [autogpt-plugin-ws]: plugin id 'workspace' is claimed" in check.stdout
    assert "✗ typo: it implements post_commands" in check.stdout


@pytest.mark.slow
def test_no_command_exits_or_hangs_because_of_a_plugin_import(site: Path, tmp_path: Path) -> None:
    """SystemExit at a plugin's import and an import that never ends: plugins list and
    check still answer, listing both as broken, and the process exits promptly."""
    write_plugin(site, "exits", "raise SystemExit(3)\n")
    write_plugin(site, "hangs", "import time\nwhile True:\n    time.sleep(1)\n")
    env = cli_env(tmp_path, site=site, AUTOGPT_IMPORT_TIMEOUT="1")
    started = time.monotonic()
    listed = autogpt("plugins", "list", "--json", env=env, timeout=30)
    assert time.monotonic() - started < 15
    assert listed.returncode == 0, listed.stderr
    rows = {r["id"]: r for r in json.loads(listed.stdout)}
    assert rows["exits"]["status"] == rows["hangs"]["status"] == "broken"
    assert "SystemExit: 3" in rows["exits"]["reason"]
    assert "did not finish within 1 s" in rows["hangs"]["reason"]
    check = autogpt("plugins", "check", env=env, timeout=30)
    assert check.returncode == 1
    assert "Traceback" not in check.stderr
    assert "✗ hangs: import of 'plug_hangs' did not finish within 1 s" in check.stdout
