"""``autogpt plugins new``: the distribution it writes, and a newcomer following
docs/plugins.md in a fresh virtualenv from nothing to an agent calling the new command."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest
import yaml

from autogpt_core import ConfigError
from autogpt_core.plugins._manifest import load_manifest
from autogpt_core.plugins._scaffold import create_plugin
from autogpt_plugins.llm_replay import load_recording
from tests.clirun import cli_env

ROOT = Path(__file__).resolve().parent.parent
#: The commands a newcomer types, at most this many (the issue's goal).
MOST_COMMANDS = 5


def newcomer_commands() -> list[str]:
    """The command lines of the first block of docs/plugins.md's "Writing a plugin"."""
    text = (ROOT / "docs" / "plugins.md").read_text(encoding="utf-8")
    section = text.split("\n## ", 1)[0]
    block = re.search(r"^```\w*\n(.*?)^```$", section, flags=re.MULTILINE | re.DOTALL)
    assert block is not None, "docs/plugins.md: the 'Writing a plugin' section has no commands"
    return [line for line in block[1].splitlines() if line.strip()]


def test_the_distribution_has_every_part(tmp_path: Path) -> None:
    """The scaffold writes the entry point, a test extra, the manifest, a package with one
    command and one hook, tests using the harness, a README, a replay demo and a CI
    workflow running plugins check and pytest; no template placeholder is left."""
    root = create_plugin("my-tool", tmp_path)
    assert root == tmp_path / "autogpt-plugin-my-tool"
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == [
        ".github/workflows/test.yml",
        ".gitignore",
        "README.md",
        "autogpt_plugin_my_tool/__init__.py",
        "autogpt_plugin_my_tool/autogpt-plugin.yaml",
        "demo.replay.json",
        "pyproject.toml",
        "tests/test_my_tool.py",
    ]
    for path in root.rglob("*"):
        if path.is_file():
            assert not re.search(r"__[A-Z]+__", path.read_text("utf-8")), path
    project = tomllib.loads((root / "pyproject.toml").read_text("utf-8"))
    assert project["project"]["entry-points"]["autogpt.plugins"] == {
        "my-tool": "autogpt_plugin_my_tool"
    }
    assert project["project"]["optional-dependencies"]["test"] == [
        "pytest>=8",
        "autogpt-core>=0.1",
    ]
    manifest = load_manifest(root / "autogpt_plugin_my_tool" / "autogpt-plugin.yaml")
    assert manifest.id == "my-tool"
    assert [c.name for c in manifest.commands] == ["my_tool_echo"]
    code = (root / "autogpt_plugin_my_tool" / "__init__.py").read_text("utf-8")
    assert "def register_commands" in code
    assert "def build_prompt" in code
    tests = (root / "tests" / "test_my_tool.py").read_text("utf-8")
    assert "from autogpt_core.testing import" in tests
    assert "(autogpt)" in tests
    calls = [
        c.name
        for e in load_recording(root / "demo.replay.json").exchanges
        for c in (e.response.message.tool_calls)
    ]
    assert calls == ["my_tool_echo", "finish"]
    workflow = yaml.safe_load((root / ".github" / "workflows" / "test.yml").read_text("utf-8"))
    steps = [s.get("run") for s in workflow["jobs"]["test"]["steps"]]
    assert steps[-3:] == ["pip install -e '.[test]'", "autogpt plugins check", "pytest"]
    with pytest.raises(ConfigError, match="already exists"):
        create_plugin("my-tool", tmp_path)
    with pytest.raises(ConfigError, match="not a valid plugin id"):
        create_plugin("My Tool", tmp_path)


def test_new_prints_the_next_steps_of_the_docs(tmp_path: Path) -> None:
    """``autogpt plugins new weather`` prints the remaining commands of docs/plugins.md."""
    result = subprocess.run(
        [sys.executable, "-m", "autogpt_core", "plugins", "new", "weather"],
        cwd=tmp_path,
        env=cli_env(tmp_path),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "autogpt-plugin-weather" / "pyproject.toml").is_file()
    printed = [line.split("   #")[0].strip() for line in result.stdout.splitlines()[1:]]
    assert printed == newcomer_commands()[1:]


def _layer(directory: Path) -> Path:
    """A directory of links to this interpreter's installed packages but autogpt-core, pip
    and pytest: the dependencies a newcomer has already installed, with nothing of ours."""
    site = Path(sysconfig.get_paths()["purelib"])
    directory.mkdir()
    for entry in site.iterdir():
        name = entry.name.lower()
        ours = name.startswith(("autogpt", "__editable__", "hookspecs"))
        installed_by_the_steps = name.startswith(("pytest", "_pytest", "py.py", "pip"))
        if ours or installed_by_the_steps or entry.suffix == ".pth" or name == "__pycache__":
            continue
        (directory / entry.name).symlink_to(entry)
    return directory


def _fresh_virtualenv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(purelib) / "autogpt-dependencies.pth").write_text(
        f"{_layer(tmp_path / 'dependencies')}\n", encoding="utf-8"
    )
    # autogpt-core from this checkout, copied so that the build leaves nothing behind.
    core = tmp_path / "autogpt-core"
    core.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, core / name)
    for package in ("hookspecs", "autogpt_core", "autogpt_plugins"):
        shutil.copytree(
            ROOT / package, core / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", str(core)],
        check=True,
        capture_output=True,
    )
    return venv


@pytest.mark.slow
def test_a_newcomer_follows_the_docs_in_a_fresh_virtualenv(tmp_path: Path) -> None:
    """The commands of docs/plugins.md, typed as written in a fresh virtualenv: the plugin
    is created, pip-installed editable with its test extra, its tests pass, it is listed as
    loaded, and ``autogpt run`` with its replayed model calls its command; then the steps of
    its CI workflow pass in its directory.

    The virtualenv is real and new (``python -m venv``), and autogpt-core is pip-installed
    into it from a copy of this checkout (``--no-deps``), with its console script. To stay
    fast and offline but for the pip index the machine is configured with, its
    dependencies are not downloaded again: a ``.pth`` file adds a directory of links to the
    packages this interpreter has (trio, pluggy, attrs, ...), leaving out autogpt-core,
    pip and pytest. So ``pip install -e './autogpt-plugin-weather[test]'`` does the real
    work: it builds and installs the plugin editable and installs pytest from the index
    into the new environment, whose ``pytest`` then runs the plugin's tests.
    """
    commands = newcomer_commands()
    assert len(commands) <= MOST_COMMANDS, commands
    venv = _fresh_virtualenv(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    env = cli_env(tmp_path / "home")
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"

    outputs = []
    for line in commands:
        argv = shlex.split(line)
        program = shutil.which(argv[0], path=env["PATH"])
        assert program == str(venv / "bin" / argv[0]), f"{argv[0]} is not the virtualenv's"
        done = subprocess.run(
            [program, *argv[1:]], cwd=work, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        outputs.append(done.stdout)
    new, install, tests, listing, run = outputs
    assert (work / "autogpt-plugin-weather" / "pyproject.toml").is_file()
    assert "3 passed" in tests
    assert re.search(r"^weather\s+0\.1\.0\s+loaded\s+autogpt-plugin-weather", listing, re.M)
    assert "weather_echo: ok: Hello from Weather" in run
    assert "Session finished after 2 cycle(s): weather_echo answered" in run

    plugin = work / "autogpt-plugin-weather"
    workflow = yaml.safe_load((plugin / ".github" / "workflows" / "test.yml").read_text("utf-8"))
    for step in workflow["jobs"]["test"]["steps"]:
        if "run" in step:
            done = subprocess.run(
                step["run"], shell=True, cwd=plugin, env=env, capture_output=True, text=True
            )
            assert done.returncode == 0, f"{step['run']}\n{done.stdout}\n{done.stderr}"
