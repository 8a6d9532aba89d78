"""``autogpt plugins new ID``: a new plugin distribution, tested and ready to ``pip install -e``.

``create_plugin`` writes ``autogpt-plugin-ID/``::

    pyproject.toml               entry point in autogpt.plugins, a `test` extra, pytest's options
    README.md                    what is where, and the commands to try it
    demo.replay.json             a scripted model calling the command, for `autogpt run`
    .github/workflows/test.yml   CI: install, `autogpt plugins check`, pytest
    .gitignore
    autogpt_plugin_ID/
        __init__.py              one command (ID_echo) and one hook (build_prompt)
        autogpt-plugin.yaml      the manifest
    tests/test_ID.py             tests through the `autogpt` fixture (docs/testing-plugins.md)

The templates below use ``__NAME__`` placeholders rather than ``str.format``: the
workflow's ``${{ ... }}`` and the manifest's ``{type: string}`` stay as they are written.
"""

from __future__ import annotations

import re
from pathlib import Path

from .._errors import ConfigError

_PYPROJECT = """\
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "autogpt-plugin-__DASH__"
version = "0.1.0"
description = "__TITLE__: an autogpt plugin"
readme = "README.md"
requires-python = ">=3.11"
dependencies = ["autogpt-core>=0.1"]

[project.optional-dependencies]
# pip install -e '.[test]': pytest, and autogpt-core's pytest plugin (the `autogpt` fixture).
test = ["pytest>=8", "autogpt-core>=0.1"]

[project.entry-points."autogpt.plugins"]
__ID__ = "__PACKAGE__"

[tool.setuptools]
packages = ["__PACKAGE__"]

[tool.setuptools.package-data]
__PACKAGE__ = ["autogpt-plugin.yaml"]

[tool.pytest.ini_options]
testpaths = ["tests"]
addopts = ["--strict-markers", "--strict-config"]
filterwarnings = ["error"]
"""

_MANIFEST = """\
manifest_version: 1
id: __ID__
name: __TITLE__
version: 0.1.0
description: Describe what __TITLE__ does.
requires_core: ">=0.1"
enabled_by_default: true
codeowners: []
# Each command lists the permissions it needs (fs.read, fs.write, network, shell, ...);
# beyond fs.read and fs.write the user is asked first (docs/manifest.md).
permissions: []
capabilities:
  commands:
    - name: __COMMAND__
      description: Repeat the given text back. Describe what your command does for the model.
      parameters:
        type: object
        properties:
          text: {type: string, minLength: 1, description: The text to repeat.}
        required: [text]
        additionalProperties: false
"""

_CODE = '''\
"""__TITLE__: an autogpt plugin. Its manifest is autogpt-plugin.yaml, beside this file."""

from __future__ import annotations

from hookspecs import PromptBuilder, RegisterCommand, SessionView, hookimpl


def __COMMAND__(text: str) -> str:
    """The command: what it returns is what the model reads next."""
    return text


@hookimpl
def register_commands(register: RegisterCommand) -> None:
    # Only the commands the manifest declares, with the parameters it declares.
    register("__COMMAND__", __COMMAND__)


@hookimpl
def build_prompt(session: SessionView, prompt: PromptBuilder) -> None:
    # A hook: every cycle, add a line to what the model is told.
    prompt.add_resource("The __COMMAND__ command repeats the text it is given.")
'''

_TESTS = '''\
"""The __TITLE__ plugin in a real autogpt runtime: the `autogpt` fixture of autogpt-core's
test harness loads this plugin (with only the built-ins a session needs) and a scripted
model calls its command (docs/testing-plugins.md in autogpt-core)."""

from autogpt_core.testing import call, finish


def test_the_command_repeats_its_text(autogpt):
    """__COMMAND__ returns the text it was given."""
    autogpt.use("__ID__")
    result = autogpt.command("__COMMAND__", text="sunny")
    assert result.ok, result.error
    assert result.output == "sunny"


def test_an_empty_text_is_refused_before_the_command_runs(autogpt):
    """The manifest's schema (minLength: 1) refuses an empty text; the model is told why."""
    autogpt.use("__ID__")
    result = autogpt.command("__COMMAND__", text="")
    assert not result.ok
    assert "text" in result.error


def test_a_goal_calls_the_command_and_the_prompt_names_it(autogpt):
    """The model is told about the command (build_prompt), calls it, then finishes."""
    autogpt.use("__ID__")
    run = autogpt.run("Repeat sunny", [call("__COMMAND__", text="sunny"), finish("repeated")])
    assert run.status == "finished", run.outcome
    assert run.result_of("__COMMAND__").output == "sunny"
    assert "The __COMMAND__ command repeats" in run.system_prompt
    assert "__COMMAND__" in run.tools
'''

_DEMO = """\
{
  "format": "autogpt-replay",
  "version": 1,
  "exchanges": [
    {
      "response": {
        "content": "I will try the __COMMAND__ command.",
        "tool_calls": [
          {"id": "call_1", "name": "__COMMAND__", "arguments": {"text": "Hello from __TITLE__"}}
        ]
      }
    },
    {
      "response": {
        "tool_calls": [
          {"id": "call_2", "name": "finish", "arguments": {"result": "__COMMAND__ answered"}}
        ]
      }
    }
  ]
}
"""

_README = """\
# autogpt-plugin-__DASH__

__TITLE__: a plugin for autogpt-core, made by `autogpt plugins new __ID__`.

- `pyproject.toml` registers the entry point `__ID__ = "__PACKAGE__"` in the group
  `autogpt.plugins`, ships the manifest as package data, and has a `test` extra;
- `__PACKAGE__/autogpt-plugin.yaml` is the manifest: identity, the command
  `__COMMAND__` with its parameters, permissions;
- `__PACKAGE__/__init__.py` implements the command and one hook, `build_prompt`;
- `tests/` tests it in a real autogpt runtime with a scripted model (the `autogpt`
  fixture that autogpt-core's pytest plugin provides);
- `demo.replay.json` is a scripted model that calls `__COMMAND__`, for `autogpt run`;
- `.github/workflows/test.yml` runs `autogpt plugins check` and the tests on every push.

```console
pip install -e '.[test]'
pytest
autogpt plugins info __ID__
autogpt run "Try the __ID__ plugin" --llm replay:demo.replay.json
```
"""

_WORKFLOW = """\
name: test

on:
  push:
  pull_request:

jobs:
  test:
    runs-on: ubuntu-latest
    strategy:
      matrix:
        python-version: ["3.11", "3.12"]
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: ${{ matrix.python-version }}
      - run: pip install -e '.[test]'
      - run: autogpt plugins check
      - run: pytest
"""

_GITIGNORE = """\
__pycache__/
*.egg-info/
build/
dist/
.pytest_cache/
"""


def plugin_names(plugin_id: str) -> dict[str, str]:
    """What the templates are filled with: the id, the distribution's dashed name, the
    package, a title and the example command. ``ConfigError`` if the id is not valid."""
    if not re.fullmatch(r"[a-z][a-z0-9_-]{0,63}", plugin_id):
        raise ConfigError(
            f"{plugin_id!r} is not a valid plugin id: use lower-case letters, digits, '-' and "
            "'_', starting with a letter"
        )
    underscored = plugin_id.replace("-", "_")
    return {
        "ID": plugin_id,
        "DASH": plugin_id.replace("_", "-"),
        "PACKAGE": "autogpt_plugin_" + underscored,
        "TITLE": plugin_id.replace("-", " ").replace("_", " ").title(),
        "COMMAND": underscored + "_echo",
        "MODULE": underscored,
    }


def _fill(template: str, names: dict[str, str]) -> str:
    for key, value in names.items():
        template = template.replace(f"__{key}__", value)
    return template


def create_plugin(plugin_id: str, directory: str | Path) -> Path:
    """Write ``autogpt-plugin-ID/`` under ``directory`` and return its path."""
    names = plugin_names(plugin_id)
    root = Path(directory) / f"autogpt-plugin-{names['DASH']}"
    if root.exists():
        raise ConfigError(f"{root} already exists: choose another directory or id")
    package = names["PACKAGE"]
    files = {
        "pyproject.toml": _PYPROJECT,
        "README.md": _README,
        "demo.replay.json": _DEMO,
        ".gitignore": _GITIGNORE,
        ".github/workflows/test.yml": _WORKFLOW,
        f"{package}/__init__.py": _CODE,
        f"{package}/autogpt-plugin.yaml": _MANIFEST,
        f"tests/test_{names['MODULE']}.py": _TESTS,
    }
    for relative, template in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_fill(template, names), encoding="utf-8")
    return root
