"""``autogpt plugins install/upgrade/uninstall``: real pip, real wheels, a throwaway venv.

Each test gets a fresh virtualenv (``python -m venv --without-pip``, a few milliseconds)
that sees this environment's packages -- the core, pip and the rest -- through one
``site.addsitedir`` line, so pip installs plugins into the throwaway venv alone and can
uninstall them again. Plugins are real wheels (``tests/distfactory.write_wheel``) in a
local directory that pip reads with ``--no-index``: nothing leaves the machine. Questions
are answered on a real pseudo-terminal; a pipe is not a terminal, and gets no question.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from autogpt_core._errors import ConfigError
from autogpt_core.plugins import _install, _permissions
from autogpt_core.plugins._install import (
    ConfigSnapshot,
    consent_text,
    detect_environment,
    forget_plugin,
    manifest_change,
    parse_direct_url,
    plugin_specs,
    spec_distribution,
)
from autogpt_core.plugins._manifest import parse_manifest
from tests.distfactory import write_wheel
from tests.venvkit import Venv

NOTES_V1 = """\
manifest_version: 1
id: notes
name: Notes
version: "1.0"
description: Keeps notes for the agent.
enabled_by_default: true
homepage: https://example.org/notes
codeowners: ["@notes-team"]
permissions: [fs.write, "secrets:NOTES_TOKEN"]
capabilities:
  commands:
    - name: add_note
      description: Add a note.
      aliases: [note]
      permissions: [fs.write]
      parameters:
        type: object
        properties:
          text: {type: string, description: The note.}
        required: [text]
requirements: ["autogpt-test-helper>=1"]
"""
NOTES_V2 = """\
manifest_version: 1
id: notes
name: Notes
version: "2.0"
enabled_by_default: true
permissions: [fs.write, shell]
capabilities:
  commands:
    - {name: add_note, description: Add a note., permissions: [fs.write]}
    - {name: run_note, description: Run a note as a shell command., permissions: [shell]}
requirements: ["autogpt-test-helper>=1"]
"""
QUIET = """\
manifest_version: 1
id: quiet
name: Quiet
version: "1.0"
"""
NEEDY = """\
manifest_version: 1
id: needy
name: Needy
version: "1.0"
requirements: ["autogpt-test-absent>=1"]
"""
CODE = "from hookspecs import hookimpl\n"


def _plugin_wheel(directory: Path, plugin_id: str, version: str, manifest: str) -> Path:
    package = f"plug_{plugin_id}"
    return write_wheel(
        directory,
        f"autogpt-plugin-{plugin_id}",
        version,
        {f"{package}/__init__.py": CODE, f"{package}/autogpt-plugin.yaml": manifest},
        entry_points=f"[autogpt.plugins]\n{plugin_id} = {package}\n",
    )


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local package index: notes 1.0 and 2.0, quiet, needy, and notes' requirement."""
    out = tmp_path_factory.mktemp("wheels")
    _plugin_wheel(out, "notes", "1.0", NOTES_V1)
    _plugin_wheel(out, "notes", "2.0", NOTES_V2)
    _plugin_wheel(out, "quiet", "1.0", QUIET)
    _plugin_wheel(out, "needy", "1.0", NEEDY)
    write_wheel(out, "autogpt-test-helper", "1.0", {"autogpt_test_helper/__init__.py": ""})
    return out


@pytest.fixture
def venv(tmp_path: Path, wheels: Path) -> Venv:
    home = tmp_path / "home"
    home.mkdir()
    return Venv(tmp_path / "venv", wheels, home)


def test_install_shows_the_manifest_and_asks_before_enabling(venv: Venv) -> None:
    """install runs pip, installs the manifest's requirements, shows commands with their
    parameters, permissions with their meaning, requirements, owners and homepage, and
    enables the plugin only after a yes typed on the terminal."""
    code, screen, rest = venv.answer("plugins", "install", "notes==1.0", reply="y")
    assert code == 0, screen + rest
    assert venv.installed() == {"autogpt_plugin_notes": "1.0", "autogpt_test_helper": "1.0"}
    consent = screen[screen.index("notes 1.0 — Notes") :]
    assert consent == (
        "notes 1.0 — Notes (from autogpt-plugin-notes 1.0)\n"
        "  Keeps notes for the agent.\n"
        "  homepage: https://example.org/notes\n"
        "  codeowners: @notes-team\n"
        "  commands:\n"
        "    add_note (aliases: note) [needs fs.write]: Add a note.\n"
        "      text (string, required): The note.\n"
        "  permissions:\n"
        "    fs.write             create files in the workspace, and change the ones this "
        "session made (granted in permissions.grant)\n"
        "    secrets:NOTES_TOKEN  read the secret environment variable NOTES_TOKEN (not "
        "granted: asked before use, refused in unattended runs)\n"
        "  requirements:\n"
        "    autogpt-test-helper>=1: installed 1.0\n"
        "Enable notes? [y/N] "
    )
    assert "autogpt-test-helper>=1: installing it too" in screen
    assert f"Enabled notes in {venv.config}" in rest
    assert venv.config.read_text() == "plugins:\n  enable:\n  - notes\n"
    assert venv.plugins() == {"notes": "loaded"}


def test_declining_leaves_it_installed_and_explicitly_disabled(venv: Venv) -> None:
    """No on the terminal: installed, and disabled in the config because its manifest
    would otherwise turn it on; the message says so and how to enable it."""
    code, screen, rest = venv.answer("plugins", "install", "notes==1.0", reply="n")
    assert code == 0, screen + rest
    assert "Enable notes? [y/N] " in screen
    assert "Declined: notes is installed and explicitly disabled" in rest
    assert "autogpt plugins enable notes" in rest
    assert "autogpt_plugin_notes" in venv.installed()
    assert venv.config.read_text() == "plugins:\n  disable:\n  - notes\n"
    assert venv.plugins() == {"notes": "disabled"}


def test_without_a_terminal_nothing_is_enabled(venv: Venv) -> None:
    """A piped 'y' is not consent: the manifest is shown, the plugin is installed but not
    enabled, and the output says how to enable it. A plugin that is off by default needs
    no config entry at all."""
    done = venv.autogpt("plugins", "install", "quiet", stdin="y\n")
    assert done.returncode == 0, done.stderr
    assert "quiet 1.0 — Quiet" in done.stdout
    assert "[y/N]" not in done.stdout
    assert "Not asked (no terminal, no --yes): quiet is installed but not enabled" in done.stdout
    assert "Enable it with: autogpt plugins enable quiet" in done.stdout
    assert not venv.config.exists()
    done = venv.autogpt("plugins", "install", "notes==1.0", stdin="y\n")
    assert done.returncode == 0, done.stderr
    assert "notes is installed and explicitly disabled" in done.stdout
    assert venv.plugins() == {"notes": "disabled", "quiet": "disabled"}


def test_yes_enables_without_asking(venv: Venv) -> None:
    """--yes shows the manifest and enables the plugin, no terminal needed."""
    done = venv.autogpt("plugins", "install", "--yes", "quiet")
    assert done.returncode == 0, done.stderr
    assert "quiet 1.0 — Quiet" in done.stdout
    assert "[y/N]" not in done.stdout
    assert venv.plugins() == {"quiet": "loaded"}


CONFIG = """\
# my settings -- hand-written, with comments and flow style pip must never see
plugins: {enable: [quiet],   settings: {quiet: {}}}
limits:
  max_cycles: 7   # low on purpose
"""


def test_a_failed_pip_run_leaves_the_config_byte_for_byte(venv: Venv) -> None:
    """pip failing (no such plugin; a requirement nowhere to be found) exits non-zero naming
    what failed, and the config file keeps its exact bytes and mode."""
    venv.config.write_text(CONFIG)
    venv.config.chmod(0o640)
    done = venv.autogpt("plugins", "install", "--yes", "nosuch")
    assert done.returncode == 1
    assert "pip failed (exit status 1) for autogpt-plugin-nosuch" in done.stderr
    assert f"{venv.config} is unchanged" in done.stderr
    done = venv.autogpt("plugins", "install", "--yes", "needy")
    assert done.returncode == 1
    assert "autogpt-test-absent>=1" in done.stderr
    assert "needy is installed but cannot load without autogpt-test-absent>=1" in done.stderr
    assert venv.config.read_bytes() == CONFIG.encode()
    assert venv.config.stat().st_mode & 0o777 == 0o640


def test_uninstall(venv: Venv) -> None:
    """uninstall asks (a pipe cannot answer: --yes), removes the distribution and the
    plugin's enable/disable/settings entries, keeps the rest of the config, and refuses
    built-ins; --keep-config keeps the entries."""
    assert venv.autogpt("plugins", "install", "--yes", "quiet").returncode == 0
    venv.config.write_text(
        "plugins:\n  enable: [quiet, workspace]\n  settings: {quiet: {}}\nlimits: {max_cycles: 7}\n"
    )
    refused = venv.autogpt("plugins", "uninstall", "quiet")
    assert refused.returncode == 1
    assert "needs your confirmation: rerun with --yes" in refused.stderr
    assert "autogpt_plugin_quiet" in venv.installed()
    code, screen, rest = venv.answer("plugins", "uninstall", "quiet", reply="n")
    assert (code, "autogpt_plugin_quiet" in venv.installed()) == (1, True)
    assert f"Uninstall autogpt-plugin-quiet 1.0? its entries in {venv.config}" in screen
    done = venv.autogpt("plugins", "uninstall", "--yes", "quiet")
    assert done.returncode == 0, done.stderr
    assert "autogpt_plugin_quiet" not in venv.installed()
    assert "Removed quiet from plugins.enable, plugins.settings.quiet" in done.stdout
    assert venv.config.read_text() == (
        "plugins:\n  enable:\n  - workspace\nlimits:\n  max_cycles: 7\n"
    )
    check = venv.autogpt("plugins", "check")
    assert check.returncode == 0, check.stdout
    builtin = venv.autogpt("plugins", "uninstall", "--yes", "workspace")
    assert builtin.returncode == 2
    assert "'workspace' is a built-in plugin, part of autogpt-core" in builtin.stderr
    assert "autogpt plugins disable workspace" in builtin.stderr
    assert venv.autogpt("plugins", "install", "--yes", "quiet").returncode == 0
    kept = venv.autogpt("plugins", "uninstall", "--yes", "--keep-config", "quiet")
    assert kept.returncode == 0, kept.stderr
    assert "quiet" in venv.config.read_text()


def test_upgrade_shows_new_permissions_and_asks_again(venv: Venv) -> None:
    """upgrade shows the new version's commands and permissions; a plugin that now wants
    more is kept enabled only after a yes, and disabled after a no."""
    assert venv.autogpt("plugins", "install", "--yes", "notes==1.0").returncode == 0
    code, screen, rest = venv.answer("plugins", "upgrade", "notes", reply="n")
    assert code == 0, screen + rest
    assert venv.installed()["autogpt_plugin_notes"] == "2.0"
    change = screen[screen.index("notes: 1.0 -> 2.0") :]
    assert change == (
        "notes: 1.0 -> 2.0\n"
        "  new command: run_note\n"
        "  permission dropped: secrets:NOTES_TOKEN\n"
        "  NEW PERMISSION: shell — run shell commands\n"
        "notes now also asks for shell. Keep it enabled? [y/N] "
    )
    assert "Declined: notes is disabled" in rest
    assert venv.plugins() == {"notes": "disabled"}
    again = venv.autogpt("plugins", "upgrade", "notes")
    assert again.returncode == 0, again.stderr
    assert "notes is up to date (autogpt-plugin-notes 2.0)" in again.stdout


def test_upgrade_with_yes_keeps_it_enabled(venv: Venv) -> None:
    """upgrade --yes keeps an enabled plugin enabled with its new permissions; a pipe
    without --yes disables it instead; built-ins are the core's to upgrade."""
    assert venv.autogpt("plugins", "install", "--yes", "notes==1.0").returncode == 0
    done = venv.autogpt("plugins", "upgrade", "--yes", "notes")
    assert done.returncode == 0, done.stderr
    assert "NEW PERMISSION: shell" in done.stdout
    assert "notes stays enabled, with shell" in done.stdout
    assert venv.plugins() == {"notes": "loaded"}
    builtin = venv.autogpt("plugins", "upgrade", "web")
    assert builtin.returncode == 2
    assert "upgrade autogpt-core itself" in builtin.stderr


def test_a_plugin_installed_from_a_file_is_not_upgraded_by_name(venv: Venv, wheels: Path) -> None:
    """A plugin installed from a wheel file is not replaced by a release of its name."""
    (wheel,) = wheels.glob("autogpt_plugin_notes-1.0-*.whl")
    assert venv.autogpt("plugins", "install", "--yes", str(wheel)).returncode == 0
    done = venv.autogpt("plugins", "upgrade", "--yes", "notes")
    assert done.returncode == 2
    assert "was installed from file://" in done.stderr
    assert venv.installed()["autogpt_plugin_notes"] == "1.0"


def test_in_a_pipx_environment_pip_is_not_run(tmp_path: Path, wheels: Path) -> None:
    """Under pipx, install names 'pipx inject' and runs no pip (pip could have installed
    it: the wheel is right there); once pipx put it in, install reviews it and asks."""
    home = tmp_path / "home"
    home.mkdir()
    venv = Venv(tmp_path / "pipx" / "venvs" / "autogpt-core", wheels, home)
    (venv.path / "pipx_metadata.json").write_text(
        json.dumps({"main_package": {"package": "autogpt-core"}, "pipx_metadata_version": "0.5"})
    )
    done = venv.autogpt("plugins", "install", "--yes", "quiet")
    assert done.returncode == 1
    assert "installed with pipx" in done.stderr
    assert "    pipx inject autogpt-core autogpt-plugin-quiet\n" in done.stderr
    assert venv.installed() == {}
    assert not venv.config.exists()
    # What 'pipx inject' does: pip, run by pipx, in that environment.
    subprocess.run(
        [str(venv.python), "-m", "pip", "install", "autogpt-plugin-quiet"],
        env=venv.env,
        check=True,
        capture_output=True,
    )
    done = venv.autogpt("plugins", "install", "--yes", "quiet")
    assert done.returncode == 0, done.stderr
    assert "Already installed by pipx: reviewing." in done.stdout
    assert "quiet 1.0 — Quiet" in done.stdout
    assert venv.plugins() == {"quiet": "loaded"}
    upgrade = venv.autogpt("plugins", "upgrade", "quiet")
    assert upgrade.returncode == 1
    assert "pipx upgrade --include-injected autogpt-core" in upgrade.stderr


# --- the pieces --------------------------------------------------------------------------


def test_environment_detection(tmp_path: Path) -> None:
    """pipx and uv environments are told by their marker files or, without them, by where
    they sit; each gets its own tool's commands, uv's repeating its recorded --with
    packages; anything else is pip's."""
    pipx = tmp_path / "share" / "pipx" / "venvs" / "agent"
    pipx.mkdir(parents=True)
    (pipx / "pipx_metadata.json").write_text('{"main_package": {"package": "autogpt-core"}}')
    env = detect_environment(pipx, "py")
    assert (env.kind, env.tool) == ("pipx", "autogpt-core")
    assert env.install(["autogpt-plugin-x"]) == [
        "pipx",
        "inject",
        "autogpt-core",
        "autogpt-plugin-x",
    ]
    assert env.uninstall("autogpt-plugin-x") == [
        "pipx",
        "uninject",
        "autogpt-core",
        "autogpt-plugin-x",
    ]
    bare_pipx = tmp_path / ".pipx" / "venvs" / "autogpt-core"
    bare_pipx.mkdir(parents=True)
    assert detect_environment(bare_pipx, "py").kind == "pipx"

    uv = tmp_path / "somewhere" / "autogpt-core"
    uv.mkdir(parents=True)
    (uv / "uv-receipt.toml").write_text(
        "[tool]\nrequirements = [\n"
        '  { name = "autogpt-core" },\n'
        '  { name = "autogpt-plugin-old", specifier = ">=1" },\n'
        '  { name = "autogpt-plugin-dev", directory = "/src/dev" },\n'
        "]\n"
    )
    env = detect_environment(uv, "py")
    assert (env.kind, env.tool) == ("uv", "autogpt-core")
    assert env.install(["autogpt-plugin-x"]) == [
        "uv",
        "tool",
        "install",
        "autogpt-core",
        "--with",
        "autogpt-plugin-old>=1",
        "--with",
        "/src/dev",
        "--with",
        "autogpt-plugin-x",
    ]
    assert env.uninstall("autogpt_plugin_old") == [
        "uv",
        "tool",
        "install",
        "autogpt-core",
        "--with",
        "/src/dev",
    ]
    assert env.upgrade("autogpt-plugin-old") == ["uv", "tool", "upgrade", "autogpt-core"]
    bare_uv = tmp_path / "uv" / "tools" / "autogpt-core"
    bare_uv.mkdir(parents=True)
    assert detect_environment(bare_uv, "py").kind == "uv"

    plain = tmp_path / "project" / ".venv"
    plain.mkdir(parents=True)
    env = detect_environment(plain, "/x/python")
    assert not env.managed
    assert env.install(["a"]) == ["/x/python", "-m", "pip", "install", "a"]
    assert env.upgrade("a") == ["/x/python", "-m", "pip", "install", "--upgrade", "a"]


def test_specs_and_their_distributions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Names map to autogpt-plugin-NAME; a requirement's or wheel's distribution is known,
    a directory's is not; pip options and paths that are not there are refused."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b-1.0-py3-none-any.whl").write_bytes(b"")
    specs = plugin_specs(
        ["notes", "Hello_World>=1", "autogpt-plugin-x", "./d", "a/b-1.0-py3-none-any.whl"]
    )
    assert specs == [
        "autogpt-plugin-notes",
        "autogpt-plugin-Hello_World>=1",
        "autogpt-plugin-x",
        "./d",
        "a/b-1.0-py3-none-any.whl",
    ]
    for bad in [
        "--index-url=http://evil.test/",
        "-r",
        "-rreqs.txt",
        "notes @ https://x.test/y.whl",
    ]:
        with pytest.raises(ConfigError):
            plugin_specs([bad])
    with pytest.raises(ConfigError, match="no such file or directory"):
        plugin_specs(["./missing"])
    assert [spec_distribution(s) for s in specs] == [
        "autogpt-plugin-notes",
        "autogpt-plugin-hello-world",
        "autogpt-plugin-x",
        None,
        "b",
    ]
    with pytest.raises(ConfigError, match="neither a plugin name"):
        plugin_specs(["no good"])


def test_permission_meanings_follow_the_permissions_table() -> None:
    """The consent screen explains every permission in the words of _permissions' table."""
    doc = _permissions.__doc__ or ""
    table = dict(
        re.match(r"(\S+)\s+(.+)", line).groups()  # type: ignore[union-attr]
        for line in doc.splitlines()
        if line and not line.startswith("=") and re.match(r"[a-z]", line)
    )
    assert set(_install.PERMISSION_MEANINGS) == {*_permissions.PERMISSIONS, "secrets:NAME"}
    assert dict(_install.PERMISSION_MEANINGS) == table


def test_consent_text_keeps_plugin_text_on_its_own_line() -> None:
    """A description cannot add lines that look like the core's, nor send escapes."""
    manifest = parse_manifest(
        "manifest_version: 1\nid: sly\nname: Sly\nversion: '1'\n"
        'description: "fine\\n  permissions: none\\u001b[2K"\npermissions: [shell]\n'
    )
    text = consent_text(
        manifest,
        distribution="autogpt-plugin-sly",
        dist_version="1",
        grants=frozenset(),
        parameter_lines=lambda schema: [],
        requirements={},
        dependencies={},
    )
    assert "\x1b" not in text
    assert "  fine permissions: none\\x1b[2K\n" in text
    assert [line for line in text.splitlines() if line.startswith("  permissions")] == [
        "  permissions:"
    ]
    assert "shell  run shell commands (not granted: asked before use" in text


def test_manifest_change() -> None:
    """An upgrade's change lists what was added and removed, in the new manifest's order."""
    old = parse_manifest(NOTES_V1)
    new = parse_manifest(NOTES_V2)
    change = manifest_change(old, new)
    assert change.permissions_grew
    assert change.added_permissions == ("shell",)
    assert change.removed_permissions == ("secrets:NOTES_TOKEN",)
    assert change.added_commands == ("run_note",)
    assert manifest_change(new, new).empty


def test_config_snapshot_puts_back_the_exact_bytes(tmp_path: Path) -> None:
    """Whatever escapes restored_on_failure leaves the file as it was, or absent as it was;
    a block that finishes keeps its changes."""
    path = tmp_path / "config.yaml"
    path.write_bytes(b"# mine\r\nplugins: {enable: [a]}\r\n")
    path.chmod(0o600)
    snapshot = ConfigSnapshot.take(path)

    def interrupted() -> None:
        with snapshot.restored_on_failure():
            path.write_text("plugins: {}\n")
            path.chmod(0o644)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        interrupted()
    assert path.read_bytes() == b"# mine\r\nplugins: {enable: [a]}\r\n"
    assert path.stat().st_mode & 0o777 == 0o600
    with snapshot.restored_on_failure():
        path.write_text("kept\n")
    assert path.read_text() == "kept\n"
    absent = ConfigSnapshot.take(tmp_path / "none.yaml")

    def failed() -> None:
        with absent.restored_on_failure():
            (tmp_path / "none.yaml").write_text("x")
            raise RuntimeError

    with pytest.raises(RuntimeError):
        failed()
    assert not (tmp_path / "none.yaml").exists()


def test_forget_plugin() -> None:
    """forget_plugin removes one plugin's entries, emptied fields and section too."""
    raw = {"plugins": {"enable": ["a", "b"], "disable": ["a"], "settings": {"a": {"k": 1}}}}
    assert forget_plugin(raw, "a") == ["plugins.enable", "plugins.disable", "plugins.settings.a"]
    assert raw == {"plugins": {"enable": ["b"]}}
    assert forget_plugin(raw, "b") == ["plugins.enable"]
    assert raw == {}
    assert forget_plugin(raw, "c") == []


def test_direct_url() -> None:
    """PEP 610 records tell a local project directory (editable or not) from an archive."""
    editable = parse_direct_url(
        json.dumps({"url": "file:///src/my%20plugins/notes", "dir_info": {"editable": True}})
    )
    assert editable is not None
    assert (editable.directory, editable.editable) == (Path("/src/my plugins/notes"), True)
    archive = parse_direct_url(json.dumps({"url": "file:///w/x.whl", "archive_info": {}}))
    assert archive is not None
    assert archive.directory is None
    assert parse_direct_url("not json") is None
    assert parse_direct_url(None) is None


def test_consent_text_shows_every_capability_beyond_commands() -> None:
    """Bridged commands, autogpt commands, access to the session store and terms are shown
    before a yes, as permissions are."""
    manifest = parse_manifest(
        "manifest_version: 1\nid: wide\nname: Wide\nversion: '1'\n"
        "permissions: [network]\nshares_store: true\nsetup: {terms: 'Be nice.'}\n"
        "cli: {commands: [{name: wide-sync, help: Sync everything.}]}\n"
        "capabilities: {bridged: {prefixes_from: services, permissions: [network]}}\n"
        "config: {settings: {services: {type: object, default: {}}}}\n"
    )
    text = consent_text(
        manifest,
        distribution="autogpt-plugin-wide",
        dist_version="1",
        grants=frozenset(),
        parameter_lines=lambda schema: [],
        requirements={},
        dependencies={},
    )
    assert "bridged commands: made when it loads, from its 'services' setting" in text
    assert "each needing at most network and your consent per call (bridge:wide)" in text
    assert "autogpt command: wide-sync: Sync everything." in text
    assert "session store: it is given the store's location" in text
    assert "terms: to be accepted before it is enabled" in text
