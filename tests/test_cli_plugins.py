"""``autogpt plugins``: list, info, enable/disable, check, codeowners, new — as a user runs them."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clirun import autogpt, cli_env
from tests.distfactory import write_plugin

SIDE_EFFECT = """
import pathlib, os
pathlib.Path(os.environ["MARKER"]).write_text("imported")
from hookspecs import hookimpl
@hookimpl
def build_prompt(session, prompt):
    pass
"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    return site


def _json(result) -> object:  # type: ignore[no-untyped-def]
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_version() -> None:
    """autogpt --version prints the core's version."""
    from autogpt_core import __version__

    result = autogpt("--version", env=cli_env(Path("/nonexistent")))
    assert result.returncode == 0
    assert result.stdout.strip() == f"autogpt-core {__version__}"


def test_list_shows_builtins_with_all_and_status(site: Path, tmp_path: Path) -> None:
    """list hides built-ins unless --all; shows version, distribution, status and reason."""
    write_plugin(site, "extra", "")
    write_plugin(site, "crashy", "raise ImportError('no such thing')\n")
    env = cli_env(tmp_path, site=site)
    rows = _json(autogpt("plugins", "list", "--json", env=env))
    assert {r["id"]: r["status"] for r in rows} == {"crashy": "broken", "extra": "loaded"}  # type: ignore[union-attr,index]
    crashy = next(r for r in rows if r["id"] == "crashy")  # type: ignore[union-attr,index]
    assert "no such thing" in crashy["reason"]
    assert crashy["distribution"] == "autogpt-plugin-crashy"
    everything = _json(autogpt("plugins", "list", "--all", "--json", env=env))
    statuses = {r["id"]: r["status"] for r in everything}  # type: ignore[union-attr,index]
    assert statuses["workspace"] == "loaded"
    assert statuses["shell"] == "disabled"
    assert statuses["web"] == "disabled"
    text = autogpt("plugins", "list", env=env)
    assert "crashy" in text.stdout
    assert "! import of 'plug_crashy' failed" in text.stdout


def test_disabled_plugin_is_never_imported(site: Path, tmp_path: Path) -> None:
    """list, info, check and agent start-up never import a disabled plugin."""
    marker = tmp_path / "imported.txt"
    write_plugin(site, "sidefx", SIDE_EFFECT, enabled=False)
    env = cli_env(tmp_path, site=site, MARKER=str(marker))
    for args in (
        ["plugins", "list", "--all"],
        ["plugins", "info", "sidefx"],
        ["plugins", "check"],
        ["run", "--demo", "--workspace", str(tmp_path / "ws")],
    ):
        result = autogpt(*args, env=env)
        assert result.returncode in (0, 1), (args, result.stderr)
        assert not marker.exists(), args
    # The same plugin, enabled, is imported: the marker works.
    assert autogpt("plugins", "enable", "sidefx", env=env).returncode == 0
    autogpt("plugins", "list", env=env)
    assert marker.read_text() == "imported"


def test_info_shows_manifest_hooks_and_requirements(site: Path, tmp_path: Path) -> None:
    """info lists commands, permissions, hooks implemented and requirement status."""
    write_plugin(
        site,
        "rich",
        """
        from hookspecs import hookimpl
        @hookimpl
        def build_prompt(session, prompt): pass
        @hookimpl
        def on_event(event): pass
        """,
        requirements='["attrs", "surely-absent-pkg"]',
        commands="[{name: zap, description: Zap it., aliases: [zz], permissions: [network]}]",
        permissions="[network]",
    )
    env = cli_env(tmp_path, site=site)
    info = _json(autogpt("plugins", "info", "rich", "--json", env=env))
    assert info["status"] == "broken"  # type: ignore[index]
    assert info["hooks"] is None  # type: ignore[index]
    reqs = {r["requirement"]: r["installed"] for r in info["requirements"]}  # type: ignore[index]
    assert reqs["attrs"] is not None
    assert reqs["surely-absent-pkg"] is None
    assert info["commands"][0]["aliases"] == ["zz"]  # type: ignore[index]
    text = autogpt("plugins", "info", "rich", env=env).stdout
    assert "requirement surely-absent-pkg: MISSING" in text
    assert "command zap (aliases: zz) [needs network]" in text
    ok = _json(autogpt("plugins", "info", "workspace", "--json", env=env))
    assert "register_commands" in ok["hooks"]  # type: ignore[index]
    missing = autogpt("plugins", "info", "workspac", env=env)
    assert missing.returncode == 2
    assert "Did you mean workspace" in missing.stderr
    # A setting's bounds, choices and default, from the manifest.
    web = autogpt("plugins", "info", "web", env=env).stdout
    assert "setting timeout: number (at least 0; default 20) Seconds" in web
    console = _json(autogpt("plugins", "info", "console", "--json", env=env))
    color = next(s for s in console["settings"] if s["name"] == "color")  # type: ignore[index]
    assert (color["enum"], color["minimum"], color["default"]) == (
        ["auto", "always", "never"],
        None,
        "auto",
    )


def test_enable_names_required_plugins(site: Path, tmp_path: Path) -> None:
    """Enabling a plugin whose requires are disabled names them; --yes enables both."""
    write_plugin(site, "base", "", enabled=False)
    write_plugin(site, "top", "", enabled=False, requires="[base]")
    env = cli_env(tmp_path, site=site)
    refused = autogpt("plugins", "enable", "top", env=env)
    assert refused.returncode == 1
    assert "requires base" in refused.stderr
    assert "--yes" in refused.stderr
    assert autogpt("plugins", "enable", "top", "--yes", env=env).returncode == 0
    rows = _json(autogpt("plugins", "list", "--json", env=env))
    assert {r["id"]: r["status"] for r in rows} == {"base": "loaded", "top": "loaded"}  # type: ignore[union-attr,index]
    assert autogpt("plugins", "disable", "base", env=env).returncode == 0
    rows = _json(autogpt("plugins", "list", "--json", env=env))
    assert {r["id"]: r["status"] for r in rows} == {"base": "disabled", "top": "broken"}  # type: ignore[union-attr,index]


def test_enable_interactively(site: Path, tmp_path: Path) -> None:
    """Without --yes and without a terminal, nothing changes and the exit code is 1."""
    write_plugin(site, "base", "", enabled=False)
    write_plugin(site, "top", "", enabled=False, requires="[base]")
    env = cli_env(tmp_path, site=site)
    assert autogpt("plugins", "enable", "top", env=env, input="y\n").returncode == 1
    assert not (tmp_path / "config.yaml").exists()


def test_check_exit_codes(site: Path, tmp_path: Path) -> None:
    """check exits 0 on a healthy install and 1 naming each problem otherwise."""
    env = cli_env(tmp_path, site=site)
    ok = autogpt("plugins", "check", env=env)
    assert ok.returncode == 0, ok.stdout
    write_plugin(
        site, "bad", "", manifest="manifest_version: 1\nid: bad\nname: x\nversion: 1\nbogus: 1\n"
    )
    (tmp_path / "config.yaml").write_text("plugins: {enable: [ghost]}\n")
    bad = autogpt("plugins", "check", env=env)
    assert bad.returncode == 1
    assert "bad: invalid manifest" in bad.stdout
    assert "bogus: unknown field" in bad.stdout
    assert "'ghost' is named in" in bad.stdout


def test_trace_hooks(tmp_path: Path) -> None:
    """--trace-hooks prints each hook call with plugin and duration to stderr."""
    result = autogpt("--trace-hooks", "plugins", "list", env=cli_env(tmp_path))
    assert result.returncode == 0
    assert "[hook] register_commands <- workspace:" in result.stderr


def test_codeowners_and_new(tmp_path: Path) -> None:
    """codeowners lists owners per plugin; new writes an installable plugin skeleton."""
    env = cli_env(tmp_path)
    owners = _json(autogpt("plugins", "codeowners", "--json", env=env))
    assert "workspace" in owners  # type: ignore[operator]
    created = autogpt("plugins", "new", "my-tool", "--directory", str(tmp_path), env=env)
    assert created.returncode == 0, created.stderr
    root = tmp_path / "autogpt-plugin-my-tool"
    assert (root / "pyproject.toml").exists()
    from autogpt_core.plugins._manifest import load_manifest

    manifest = load_manifest(root / "autogpt_plugin_my_tool" / "autogpt-plugin.yaml")
    assert manifest.id == "my-tool"
    again = autogpt("plugins", "new", "my-tool", "--directory", str(tmp_path), env=env)
    assert again.returncode == 2
    assert "already exists" in again.stderr


def test_status_names_agree_with_the_loader() -> None:
    """The CLI's copies of the status names (kept to avoid importing the loader) match."""
    from autogpt_core.cli import _cli_plugins
    from autogpt_core.plugins import _loader

    assert (_cli_plugins.BROKEN, _cli_plugins.LOADED) == (_loader.BROKEN, _loader.LOADED)


def test_install_maps_names_to_plugin_distributions(tmp_path: Path) -> None:
    """install NAME means autogpt-plugin-NAME, pinned versions included; paths are kept;
    a path really installs (here into a pip target directory)."""
    env = cli_env(tmp_path)
    wheel, archive = tmp_path / "x.whl", tmp_path / "pkg.zip"
    wheel.write_bytes(b"")
    archive.write_bytes(b"")
    dry = autogpt(
        "plugins",
        "install",
        "--dry-run",
        "notes==1.0",
        "hello>=2",
        "autogpt_plugin_web",
        str(wheel),
        str(archive),
        env=env,
    )
    assert dry.returncode == 0, dry.stderr
    assert (
        "install autogpt-plugin-notes==1.0 'autogpt-plugin-hello>=2' autogpt_plugin_web "
        f"{wheel} {archive}"
    ) in dry.stdout
    # A path that is not there, and pip's own options, are refused before pip runs.
    for refused in ("./missing.whl", "--index-url=http://elsewhere.test/", "-rreqs.txt"):
        done = autogpt("plugins", "install", "--dry-run", "--", refused, env=env)
        assert done.returncode == 2, refused
        assert "$ " not in done.stdout
    bad = autogpt("plugins", "install", "--dry-run", "not a name!", env=env)
    assert bad.returncode == 2
    assert "neither a plugin name" in bad.stderr
    target = tmp_path / "target"
    example = Path(__file__).resolve().parent.parent / "examples" / "autogpt-plugin-hello"
    build = tmp_path / "src"
    import shutil

    shutil.copytree(example, build)
    # Build the wheel first: PIP_TARGET would leak into pip's isolated build environment.
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(wheels),
            str(build),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("*.whl")
    env = dict(env, PIP_TARGET=str(target), PIP_NO_DEPS="1", PIP_QUIET="1")
    real = autogpt("plugins", "install", str(wheel), env=env, timeout=300)
    assert real.returncode == 0, real.stderr
    assert (target / "autogpt_plugin_hello" / "autogpt-plugin.yaml").exists()


PARAMETERS = """[{name: note, description: Add a note., parameters: {type: object,
  properties: {
    text: {type: string, description: The note.},
    tags: {type: array, items: {type: string}, default: [], description: "Tags\\u001b[2K."},
    limit: {type: [integer, "null"], default: 10},
    kind: {enum: [todo, idea]}},
  required: [text]}}]"""


def test_info_shows_each_commands_parameters(site: Path, tmp_path: Path) -> None:
    """info shows every parameter of every command: name, type, required, description and
    default, in the schema's order, as text and in --json."""
    write_plugin(site, "notes", "", enabled=False, commands=PARAMETERS)
    env = cli_env(tmp_path, site=site)
    info = _json(autogpt("plugins", "info", "notes", "--json", env=env))
    (command,) = info["commands"]  # type: ignore[index]
    assert command["parameters"] == [
        {
            "name": "text",
            "type": "string",
            "required": True,
            "description": "The note.",
            "default": None,
        },
        {
            "name": "tags",
            "type": "array of string",
            "required": False,
            "description": "Tags\x1b[2K.",
            "default": [],
        },
        {
            "name": "limit",
            "type": "integer or null",
            "required": False,
            "description": "",
            "default": 10,
        },
        {
            "name": "kind",
            "type": 'one of "todo", "idea"',
            "required": False,
            "description": "",
            "default": None,
        },
    ]
    assert command["parameters_schema"]["required"] == ["text"]
    text = autogpt("plugins", "info", "notes", env=env).stdout
    assert (
        "  command note: Add a note.\n"
        "    text (string, required): The note.\n"
        "    tags (array of string, optional, default []): Tags\\x1b[2K.\n"
        "    limit (integer or null, optional, default 10)\n"
        '    kind (one of "todo", "idea", optional)\n'
    ) in text


def test_install_dry_run_prints_a_command_a_shell_runs_as_meant(tmp_path: Path) -> None:
    """The dry run's command is shell-quoted: pasted into sh, 'notes>=1.0' stays one
    argument instead of redirecting into a file named '=1.0'."""
    wheel = tmp_path / "my dir" / "x.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"")
    names = ["notes>=1.0", "hello<2,>=1", str(wheel)]
    dry = autogpt("plugins", "install", "--dry-run", *names, env=cli_env(tmp_path))
    assert dry.returncode == 0, dry.stderr
    (line,) = [line for line in dry.stdout.splitlines() if line.startswith("$ ")]
    meant = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "autogpt-plugin-notes>=1.0",
        "autogpt-plugin-hello<2,>=1",
        str(wheel),
    ]
    assert shlex.split(line[2:]) == meant
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    # printf stands in for the command: sh parses the line exactly as it would run it.
    shell = subprocess.run(
        ["sh", "-c", "printf '%s\\n' " + line[2:]],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    assert shell.stdout.splitlines() == meant
    assert list(cwd.iterdir()) == []


BILLION_LAUGHS = (
    "manifest_version: 1\nid: bomb\nname: x\nversion: '1'\nx0: &x0 [lol, lol]\n"
    + "".join(f"x{i}: &x{i} [*x{i - 1}, *x{i - 1}, *x{i - 1}, *x{i - 1}]\n" for i in range(1, 16))
)
BROKEN_REF = (
    "[{name: badref, description: x, "
    "parameters: {type: object, properties: {a: {$ref: '#/$defs/gone'}}}}]"
)


def test_check_refuses_alias_bombs_and_broken_parameter_schemas(site: Path, tmp_path: Path) -> None:
    """check names an alias bomb and an unresolvable $ref, each with its file, and exits 1;
    the run still starts, without those plugins. Before, this 600-byte bomb (2**31 list
    items once expanded) hung both for hours."""
    write_plugin(site, "bomb", "", manifest=BILLION_LAUGHS)
    write_plugin(site, "badref", "", commands=BROKEN_REF)
    env = cli_env(tmp_path, site=site)
    check = autogpt("plugins", "check", env=env, timeout=60)
    assert check.returncode == 1
    bomb = next(line for line in check.stdout.splitlines() if line.startswith("✗ bomb:"))
    assert str(site / "plug_bomb" / "autogpt-plugin.yaml") in bomb
    assert "line 5, column 5: uses the YAML anchor or alias 'x0'" in bomb
    assert "(fix: write the value out in full everywhere it is used)" in bomb
    assert (
        "capabilities.commands[0].parameters.properties.a.$ref: the reference '#/$defs/gone' "
        "does not resolve: nothing is at that location in the schema"
    ) in check.stdout
    run = autogpt("run", "--demo", "--workspace", str(tmp_path / "ws"), env=env, timeout=60)
    assert run.returncode == 0, run.stderr


def test_plugin_text_cannot_drive_the_terminal(tmp_path: Path) -> None:
    """A manifest's name, description and command descriptions, and a plugin's import
    error, are printed by list, info and check with escapes made visible."""
    site = tmp_path / "site"
    evil = "\\x1b[1A\\x1b[2K\\x1b]0;title\\x07"
    write_plugin(
        site,
        "shady",
        "raise RuntimeError('boom \\x1b[8mhidden')",
        manifest=(
            "manifest_version: 1\nid: shady\n"
            f'name: "Shady{evil}"\nversion: "1"\n'
            f'description: "harmless{evil} permissions: none"\n'
            "enabled_by_default: true\npermissions: [shell]\n"
            "capabilities:\n  commands:\n"
            f'    - {{name: do_it, description: "ok{evil}", permissions: [shell]}}\n'
        ),
    )
    env = cli_env(tmp_path, site=site)
    outputs = [
        autogpt("plugins", "list", "--all", env=env),
        autogpt("plugins", "info", "shady", env=env),
        autogpt("plugins", "check", env=env),
    ]
    for done in outputs:
        for text in (done.stdout, done.stderr):
            assert "\x1b" not in text
            assert "\x07" not in text
    assert "\\x1b[1A" in outputs[1].stdout
    assert "shell" in outputs[1].stdout
