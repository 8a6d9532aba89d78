"""``autogpt config``: where things live and the effective configuration, as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

from autogpt_core._config import SECTIONS
from tests.clirun import autogpt, cli_env


def test_config_json_shows_every_limit(tmp_path: Path) -> None:
    """A config setting limits.confirm_timeout is accepted, and --json shows every limit."""
    (tmp_path / "config.yaml").write_text("limits: {confirm_timeout: 300, max_cycles: 7}\n")
    result = autogpt("config", "--json", env=cli_env(tmp_path))
    assert result.returncode == 0, result.stderr
    limits = json.loads(result.stdout)["limits"]
    assert list(limits) == list(SECTIONS["limits"])
    assert limits["confirm_timeout"] == 300
    assert limits["max_cycles"] == 7
    assert limits["hook_timeout"] == 30


def test_config_errors_name_every_field(tmp_path: Path) -> None:
    """An invalid config exits 2 with one line per problem, each naming file and field."""
    path = tmp_path / "config.yaml"
    path.write_text("limits: {max_cycles: 2.5, colour: red}\npermissions: {grant: [shel]}\n")
    result = autogpt("config", env=cli_env(tmp_path))
    assert result.returncode == 2
    assert f"{path}: limits.colour: unknown field" in result.stderr
    assert f"{path}: limits.max_cycles: expected an integer > 0 or null, got 2.5" in result.stderr
    assert f"{path}: permissions.grant[0]: 'shel' is not a permission" in result.stderr
