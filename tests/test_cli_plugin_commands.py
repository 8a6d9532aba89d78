"""``autogpt NAME``: commands plugins add, from real wheels pip-installed, run as a user runs them.

Every plugin here writes ``MARKER_DIR/ID.imported`` when its module is imported and
``MARKER_DIR/ID.registered`` when its ``register_cli_commands`` runs, so a test can tell
what was imported and what was called, not just what was printed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from autogpt_core._errors import ManifestError
from autogpt_core.cli._cli import build_parser
from autogpt_core.cli._cli_plugin_commands import CORE_COMMANDS, command_index, subparsers
from autogpt_core.plugins._manifest import validate_manifest
from tests.clirun import autogpt, cli_env
from tests.distfactory import write_wheel
from tests.strategies import cli_command_names, invalid_cli_command_names, valid_manifest_dict

PRELUDE = """\
import os, pathlib
from hookspecs import hookimpl

def mark(what):
    pathlib.Path(os.environ["MARKER_DIR"], what).write_text("yes")

mark(__name__.removeprefix("plug_") + ".imported")
"""

NOTES = """
@hookimpl
def register_cli_commands(register):
    mark("notes.registered")
    parser = register("notes-export", export)
    parser.add_argument("title")
    parser.add_argument("--format", choices=["md", "txt"], default="md")
    register("notes-count", count)
    register("notes-boom", boom)

def export(args, ctx):
    prefix = ctx.settings.values["prefix"]
    print(f"exported {args.title!r} as {args.format}, prefix {prefix}, by {ctx.plugin_id}")

async def count(args):
    import trio
    await trio.sleep(0)  # fails outside trio
    print("3 notes")
    return 3

def boom(args):
    raise RuntimeError("the disk is full")
"""

SLEEPY = """
@hookimpl
def register_cli_commands(register):
    mark("sleepy.registered")
    register("sleepy-nap", lambda args: 0)
"""

ROGUE = """
@hookimpl
def register_cli_commands(register):
    mark("rogue.registered")
    register("rogue-ok", lambda args: 0)
    register("rogue-extra", lambda args: 0)
"""

CLASHER = """
@hookimpl
def register_cli_commands(register):
    register("clash-go", lambda args: 0)
    register("run", lambda args: 0)
"""

LAZY = """
@hookimpl
def build_prompt(prompt):
    pass
"""

TWIN = """
@hookimpl
def register_cli_commands(register):
    register("notes-export", lambda args: 0)
"""

# id -> (enabled by default, cli.commands, code, extra manifest lines)
PLUGINS: dict[str, tuple[bool, list[dict[str, str]], str, str]] = {
    "notes": (
        True,
        [
            {"name": "notes-export", "help": "Export the notes (100% of them)."},
            {"name": "notes-count", "help": "Count the notes."},
            {"name": "notes-boom", "help": "Fail loudly."},
        ],
        NOTES,
        "config:\n  settings:\n    prefix: {type: string, default: N}\n",
    ),
    "sleepy": (False, [{"name": "sleepy-nap", "help": "Take a nap."}], SLEEPY, ""),
    "rogue": (False, [{"name": "rogue-ok", "help": "Behave."}], ROGUE, ""),
    "clasher": (
        False,
        [{"name": "clash-go", "help": "Go."}, {"name": "run", "help": "Shadow run."}],
        CLASHER,
        "",
    ),
    "lazy": (False, [{"name": "lazy-go", "help": "Never registered."}], LAZY, ""),
    "twin": (False, [{"name": "notes-export", "help": "Export twice."}], TWIN, ""),
}


def _manifest(plugin_id: str, enabled: bool, commands: list[dict[str, str]], extra: str) -> str:
    head = {
        "manifest_version": 1,
        "id": plugin_id,
        "name": plugin_id.title(),
        "version": "1.0",
        "enabled_by_default": enabled,
        "cli": {"commands": commands},
    }
    return yaml.safe_dump(head, sort_keys=False) + extra


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every plugin of PLUGINS as a wheel, pip-installed (no index) into one target dir."""
    wheels = tmp_path_factory.mktemp("cli-wheels")
    for plugin_id, (enabled, commands, code, extra) in PLUGINS.items():
        package = f"plug_{plugin_id}"
        write_wheel(
            wheels,
            f"autogpt-plugin-{plugin_id}",
            "1.0",
            {
                f"{package}/__init__.py": PRELUDE + code,
                f"{package}/autogpt-plugin.yaml": _manifest(plugin_id, enabled, commands, extra),
            },
            entry_points=f"[autogpt.plugins]\n{plugin_id} = {package}\n",
        )
    target = tmp_path_factory.mktemp("cli-site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps"]
        + ["--target", str(target), *map(str, sorted(wheels.glob("*.whl")))],
        check=True,
        capture_output=True,
    )
    assert (target / "plug_notes" / "autogpt-plugin.yaml").is_file()
    return target


@pytest.fixture
def markers(tmp_path: Path) -> Path:
    directory = tmp_path / "markers"
    directory.mkdir()
    return directory


def _env(tmp_path: Path, site: Path, markers: Path, enable: tuple[str, ...] = ()) -> dict[str, str]:
    if enable:
        (tmp_path / "config.yaml").write_text(f"plugins: {{enable: [{', '.join(enable)}]}}\n")
    return cli_env(tmp_path, site=site, MARKER_DIR=str(markers))


def _marks(markers: Path) -> set[str]:
    return {p.name for p in markers.iterdir()}


def test_help_lists_plugin_commands_from_manifests_without_importing(
    site: Path, tmp_path: Path, markers: Path
) -> None:
    """autogpt --help (and plain autogpt) lists every declared command with its plugin and
    state, and imports no plugin, enabled or disabled; an unknown word names them too."""
    env = _env(tmp_path, site, markers)
    for args in (["--help"], [], ["--trace-hooks", "-h"], ["-h", "notes-export"]):
        shown = autogpt(*args, env=env)
        assert shown.returncode == 0, shown.stderr
        text = " ".join(shown.stdout.split())  # argparse wraps long lines
        assert "notes-export Export the notes (100% of them). [plugin notes]" in text
        assert "notes-count Count the notes. [plugin notes]" in text
        assert "sleepy-nap Take a nap. [plugin sleepy, disabled]" in text
        assert "run run an agent for a goal" in text
        assert "Shadow run" not in text  # a core name stays the core's
    unknown = autogpt("notes-exprot", env=env)
    assert unknown.returncode == 2
    assert "invalid choice: 'notes-exprot'" in unknown.stderr
    assert "'notes-export'" in unknown.stderr
    assert _marks(markers) == set()
    # The markers work: running the command imports its plugin (and only it).
    assert autogpt("notes-export", "x", env=env).returncode == 0
    assert _marks(markers) == {"notes.imported", "notes.registered"}


def test_running_a_plugin_command(site: Path, tmp_path: Path, markers: Path) -> None:
    """The plugin's parser takes the arguments it added, its handler gets them and its
    settings, an async handler runs under trio, and the returned status is the exit status."""
    env = _env(tmp_path, site, markers)
    done = autogpt("notes-export", "--format", "txt", "Groceries", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "exported 'Groceries' as txt, prefix N, by notes\n"
    (tmp_path / "config.yaml").write_text("plugins: {settings: {notes: {prefix: Z}}}\n")
    assert "prefix Z" in autogpt("notes-export", "G", env=env).stdout
    helped = autogpt("notes-export", "--help", env=env)
    assert helped.returncode == 0
    assert helped.stdout.startswith("usage: autogpt notes-export [-h] [--format {md,txt}] title")
    assert "Export the notes (100% of them)." in helped.stdout
    wrong = autogpt("notes-export", "--format", "pdf", "G", env=env)
    assert wrong.returncode == 2
    assert "invalid choice: 'pdf'" in wrong.stderr
    counted = autogpt("notes-count", env=env)
    assert (counted.returncode, counted.stdout) == (3, "3 notes\n"), counted.stderr
    assert "sleepy.imported" not in _marks(markers)


def test_core_commands_never_call_the_hook(site: Path, tmp_path: Path, markers: Path) -> None:
    """An agent run and plugins list load the plugin but never call register_cli_commands."""
    env = _env(tmp_path, site, markers)
    ran = autogpt("run", "--demo", "--workspace", str(tmp_path / "ws"), env=env)
    assert ran.returncode in (0, 1), ran.stderr
    assert autogpt("plugins", "list", env=env).returncode == 0
    assert _marks(markers) == {"notes.imported"}


def test_a_disabled_plugins_command_says_how_to_enable_it(
    site: Path, tmp_path: Path, markers: Path
) -> None:
    """autogpt NAME of a disabled plugin exits 2 naming the plugin and the fix, importing
    nothing of it; with AUTOGPT_LOAD_PLUGINS the fix names that variable."""
    env = _env(tmp_path, site, markers)
    refused = autogpt("sleepy-nap", env=env)
    assert refused.returncode == 2
    assert refused.stderr == (
        "autogpt: error: 'autogpt sleepy-nap' is a command of plugin 'sleepy', which is "
        "disabled; fix: enable it with 'autogpt plugins enable sleepy'\n"
    )
    only = autogpt("sleepy-nap", env=dict(env, AUTOGPT_LOAD_PLUGINS="notes"))
    assert only.returncode == 2
    assert "add 'sleepy' to $AUTOGPT_LOAD_PLUGINS" in only.stderr
    assert _marks(markers) == set()
    enabled = autogpt("sleepy-nap", env=_env(tmp_path, site, markers, enable=("sleepy",)))
    assert enabled.returncode == 0, enabled.stderr
    assert _marks(markers) == {"sleepy.imported", "sleepy.registered"}


def test_a_command_that_raises_names_its_plugin(site: Path, tmp_path: Path, markers: Path) -> None:
    """A handler's exception: one line naming the command, the plugin and the error, exit
    1; the traceback only with --trace-hooks."""
    env = _env(tmp_path, site, markers)
    failed = autogpt("notes-boom", env=env)
    assert failed.returncode == 1
    assert failed.stderr == (
        "autogpt: error: 'autogpt notes-boom' (plugin 'notes') failed: RuntimeError: the "
        "disk is full (run with --trace-hooks for the traceback)\n"
    )
    traced = autogpt("--trace-hooks", "notes-boom", env=env)
    assert traced.returncode == 1
    assert "Traceback (most recent call last)" in traced.stderr
    assert 'raise RuntimeError("the disk is full")' in traced.stderr
    assert "[hook] register_cli_commands <- notes:" in traced.stderr


def test_registering_an_undeclared_command_is_refused(
    site: Path, tmp_path: Path, markers: Path
) -> None:
    """Registering a name the manifest does not declare, or not registering a declared
    one, is an error naming the plugin, the command and the fix; nothing runs."""
    env = _env(tmp_path, site, markers, enable=("rogue", "lazy"))
    rogue = autogpt("rogue-ok", env=env)
    assert rogue.returncode == 2
    assert rogue.stderr == (
        "autogpt: error: plugin 'rogue' registered the command line command 'rogue-extra', "
        "which its manifest does not declare; fix: add '{name: rogue-extra, help: ...}' to "
        "cli.commands in its autogpt-plugin.yaml, or stop registering it\n"
    )
    lazy = autogpt("lazy-go", env=env)
    assert lazy.returncode == 2
    assert "plugin 'lazy' declares the command 'autogpt lazy-go' but its" in lazy.stderr
    assert "call register('lazy-go', handler)" in lazy.stderr


def test_core_and_plugin_name_clashes(site: Path, tmp_path: Path, markers: Path) -> None:
    """A core command's name, or one two enabled plugins declare, is refused naming the
    plugins and the fix; plugins check reports both from the manifests."""
    env = _env(tmp_path, site, markers, enable=("clasher", "twin"))
    clash = autogpt("clash-go", env=env)
    assert clash.returncode == 2
    assert clash.stderr == (
        "autogpt: error: plugin 'clasher' registered the command line command 'run', which "
        "is a core command of autogpt; fix: rename it, in cli.commands of its manifest and "
        "in register_cli_commands\n"
    )
    both = autogpt("notes-export", "x", env=env)
    assert both.returncode == 2
    assert "'autogpt notes-export' is declared by plugins 'notes' and 'twin'" in both.stderr
    assert "'autogpt plugins disable twin'" in both.stderr
    assert "notes.imported" not in _marks(markers)
    listed = " ".join(autogpt("--help", env=env).stdout.split())
    assert "[plugins notes, twin: clash, see 'plugins check']" in listed
    check = autogpt("plugins", "check", env=env)
    assert check.returncode == 1
    assert (
        "✗ clasher: declares the command line command 'run', which is a core command of "
        "autogpt; fix: rename it"
    ) in check.stdout
    assert (
        "✗ twin: declares the command line command 'notes-export', which plugin 'notes' "
        "declares too; fix: disable one of them ('autogpt plugins disable twin')"
    ) in check.stdout
    # The core's run is untouched by the plugin declaring it.
    assert autogpt("run", "--help", env=env).stdout.startswith("usage: autogpt run")


def test_core_commands_are_the_parsers() -> None:
    """CORE_COMMANDS, the names plugins cannot take, are exactly the parser's commands."""
    assert set(subparsers(build_parser()).choices) == CORE_COMMANDS


@pytest.mark.parametrize(
    ("argv", "index"),
    [
        (["notes-export", "x"], 0),
        (["--config", "c.yaml", "notes-export"], 2),
        (["--config=c.yaml", "--trace-hooks", "notes-export"], 2),
        (["--conf", "c.yaml", "run"], 2),
        (["--trace-hooks"], None),
        (["--", "notes-export"], 1),
    ],
)
def test_command_index_skips_global_options_and_their_values(
    argv: list[str], index: int | None
) -> None:
    """The command word is found after the global options, values and prefixes included."""
    assert command_index(build_parser(), argv) == index


def _with_cli(names: list[str]) -> dict[str, Any]:
    data = valid_manifest_dict()
    data["cli"] = {"commands": [{"name": n, "help": f"Do {n}."} for n in names]}
    return data


@given(st.lists(cli_command_names, max_size=5, unique=True))
def test_valid_cli_command_names_are_declared(names: list[str]) -> None:
    """Distinct names of lower-case letters, digits, '-' and '_' validate, in order."""
    manifest = validate_manifest(_with_cli(names), source="m.yaml")
    assert [c.name for c in manifest.cli_commands] == names
    assert [c.help for c in manifest.cli_commands] == [f"Do {n}." for n in names]


@given(invalid_cli_command_names)
def test_invalid_cli_command_names_are_located_errors(name: Any) -> None:
    """Any other name is an issue at its own field, with a fix."""
    with pytest.raises(ManifestError) as raised:
        validate_manifest(_with_cli(["fine", name]), source="m.yaml")
    assert [i.field for i in raised.value.issues] == ["cli.commands[1].name"]
    assert all(i.fix for i in raised.value.issues)


@given(cli_command_names, st.integers(min_value=1, max_value=3))
def test_a_cli_command_declared_twice_is_an_error(name: str, copies: int) -> None:
    """A name declared more than once is an issue at each repetition."""
    with pytest.raises(ManifestError) as raised:
        validate_manifest(_with_cli([name] * (copies + 1)), source="m.yaml")
    fields = [i.field for i in raised.value.issues]
    assert fields == [f"cli.commands[{k}].name" for k in range(1, copies + 1)]
    assert all(re.search("already declared", i.problem) for i in raised.value.issues)
