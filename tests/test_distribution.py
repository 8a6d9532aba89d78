"""A plugin shipped as its own distribution: pip-installed for real, discovered, called."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clirun import autogpt, cli_env

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "autogpt-plugin-hello"


@pytest.fixture(scope="module")
def hello_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/autogpt-plugin-hello installed by pip into a fresh target directory."""
    site = tmp_path_factory.mktemp("hello-site")
    build = tmp_path_factory.mktemp("hello-build")
    # Copy the source so the build leaves no artefacts in the repository.
    subprocess.run(["cp", "-r", str(EXAMPLE), str(build)], check=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(site),
            str(build / EXAMPLE.name),
        ],
        check=True,
        capture_output=True,
    )
    assert any(p.name.startswith("autogpt_plugin_hello-0.1.0") for p in site.iterdir())
    return site


def test_installed_distribution_is_discovered_and_listed(hello_site: Path, tmp_path: Path) -> None:
    """plugins list shows the pip-installed plugin with its distribution and version."""
    result = autogpt("plugins", "list", "--json", env=cli_env(tmp_path, site=hello_site))
    assert result.returncode == 0, result.stderr
    rows = {r["id"]: r for r in json.loads(result.stdout)}
    assert rows["hello"]["status"] == "loaded"
    assert rows["hello"]["distribution"] == "autogpt-plugin-hello"
    assert rows["hello"]["dist_version"] == "0.1.0"
    assert rows["hello"]["builtin"] is False


def test_installed_distribution_hooks_and_command_run(hello_site: Path, tmp_path: Path) -> None:
    """Its hooks are called and its command runs, with its setting from the environment."""
    code = """
import trio
from autogpt_core._config import load_config
from autogpt_core.plugins._loader import load
from hookspecs import PromptBuilder, SessionView, CommandContext, PluginSettings
plugins = load(load_config())
prompt = PromptBuilder(goal="g")
plugins.pm.hook.build_prompt(session=SessionView("s", "g", "."), prompt=prompt)
print([c for c in prompt.constraints if "polite" in c][0])
command = plugins.commands.get("greet")
async def main():
    return await command.invoke({"name": "Ada"}, None)
print(trio.run(main).output)
print(sorted(c.name for c in plugins.pm.get_hookcallers(plugins.records["hello"].plugin)))
"""
    env = cli_env(tmp_path, site=hello_site, HELLO_GREETING="Howdy")
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "Be polite: greet people with the say_hello command."
    assert lines[1] == "Howdy, Ada!"
    assert lines[2] == "['build_prompt', 'configure', 'register_commands']"
