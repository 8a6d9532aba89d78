"""``autogpt plugins new ID``: a new plugin distribution, ready to ``pip install -e``."""

from __future__ import annotations

import re
from pathlib import Path

from .._errors import ConfigError

_PYPROJECT = """\
[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "autogpt-plugin-{dash}"
version = "0.1.0"
description = "{title}: an autogpt plugin"
requires-python = ">=3.11"
dependencies = ["autogpt-core>=0.1"]

[project.entry-points."autogpt.plugins"]
{id} = "{package}"

[tool.setuptools]
packages = ["{package}"]

[tool.setuptools.package-data]
{package} = ["autogpt-plugin.yaml"]
"""

_MANIFEST = """\
manifest_version: 1
id: {id}
name: {title}
version: 0.1.0
description: Describe what {title} does.
requires_core: ">=0.1"
enabled_by_default: true
codeowners: []
permissions: []
capabilities:
  commands:
    - name: {command}
      description: Describe what the command does for the model.
      parameters:
        type: object
        properties:
          text: {{type: string, description: The input.}}
        required: [text]
        additionalProperties: false
"""

_CODE = '''\
"""{title}: an autogpt plugin."""

from __future__ import annotations

from hookspecs import PromptBuilder, RegisterCommand, SessionView, hookimpl


def {command}(text: str) -> str:
    return text


@hookimpl
def register_commands(register: RegisterCommand) -> None:
    register("{command}", {command})


@hookimpl
def build_prompt(session: SessionView, prompt: PromptBuilder) -> None:
    prompt.add_resource("The {command} command echoes its input.")
'''


def create_plugin(plugin_id: str, directory: str | Path) -> Path:
    """Write ``autogpt-plugin-ID/`` under ``directory`` and return its path."""
    if not re.fullmatch(r"[a-z][a-z0-9_-]{0,63}", plugin_id):
        raise ConfigError(
            f"{plugin_id!r} is not a valid plugin id: use lower-case letters, digits, '-' and "
            "'_', starting with a letter"
        )
    dash = plugin_id.replace("_", "-")
    package = "autogpt_plugin_" + plugin_id.replace("-", "_")
    values = {
        "id": plugin_id,
        "dash": dash,
        "package": package,
        "title": plugin_id.replace("-", " ").replace("_", " ").title(),
        "command": plugin_id.replace("-", "_") + "_echo",
    }
    root = Path(directory) / f"autogpt-plugin-{dash}"
    if root.exists():
        raise ConfigError(f"{root} already exists: choose another directory or id")
    (root / package).mkdir(parents=True)
    (root / "pyproject.toml").write_text(_PYPROJECT.format(**values), encoding="utf-8")
    (root / package / "autogpt-plugin.yaml").write_text(_MANIFEST.format(**values), "utf-8")
    (root / package / "__init__.py").write_text(_CODE.format(**values), encoding="utf-8")
    return root
