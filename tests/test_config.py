"""The config file: optional, validated with located errors, rewritten atomically."""

from __future__ import annotations

from pathlib import Path

import pytest

from autogpt_core import ConfigError
from autogpt_core._config import (
    DEFAULT_GRANTS,
    load_config,
    resolve_config_path,
    set_plugin_state,
)


def test_no_file_means_defaults(tmp_path: Path) -> None:
    """A fresh install with no config file runs on defaults."""
    config = load_config(tmp_path / "none.yaml", must_exist=False)
    assert not config.exists
    assert config.grants == DEFAULT_GRANTS
    assert config.is_enabled("x", True)
    assert not config.is_enabled("x", False)


def test_an_explicit_file_must_exist(tmp_path: Path) -> None:
    """--config naming a missing file is an error, unless the command creates it."""
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "typo.yaml")


def test_path_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--config beats $AUTOGPT_CONFIG beats the user config directory."""
    monkeypatch.setenv("AUTOGPT_CONFIG", str(tmp_path / "env.yaml"))
    assert resolve_config_path(tmp_path / "cli.yaml") == tmp_path / "cli.yaml"
    assert resolve_config_path(None) == tmp_path / "env.yaml"
    monkeypatch.delenv("AUTOGPT_CONFIG")
    assert resolve_config_path(None).name == "config.yaml"


def test_full_config(tmp_path: Path) -> None:
    """Every section is read: plugins, permissions, llm, limits."""
    path = tmp_path / "c.yaml"
    path.write_text(
        "plugins: {enable: [shell], disable: [jsonlog], settings: {web: {timeout: 3}}}\n"
        "permissions: {grant: [fs.read]}\n"
        "llm: {provider: openai, model: m1}\n"
        "limits: {max_cycles: 5, hook_timeout: null}\n"
    )
    config = load_config(path)
    assert config.is_enabled("shell", False)
    assert not config.is_enabled("jsonlog", True)
    assert config.plugin_settings == {"web": {"timeout": 3}}
    assert config.grants == {"fs.read"}
    assert config.llm_model == "m1"
    assert config.limits.max_cycles == 5
    assert config.limits.hook_timeout is None


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("colour: red\n", "colour: unknown section"),
        ("plugins: {enabel: [x]}\n", "plugins.enabel: unknown field"),
        ("plugins: {enable: shell}\n", "plugins.enable: expected a list"),
        ("limits: {max_cycles: -1}\n", "limits.max_cycles"),
        ("plugins: [1]\n", "plugins: expected a mapping"),
        ("a: [\n", "not valid YAML"),
        ("- 1\n", "must be a mapping"),
    ],
)
def test_invalid_config_names_file_and_field(tmp_path: Path, text: str, where: str) -> None:
    """Each mistake is a ConfigError naming the file and the field."""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value)
    assert where in str(info.value)


def test_enable_disable_persist_and_keep_other_sections(tmp_path: Path) -> None:
    """enable/disable rewrite only the plugin lists and keep everything else."""
    path = tmp_path / "sub" / "c.yaml"
    set_plugin_state(path, ["shell"], enabled=True)
    assert load_config(path).is_enabled("shell", False)
    path.write_text(path.read_text() + "llm: {model: keep-me}\n")
    set_plugin_state(path, ["shell", "web"], enabled=False)
    config = load_config(path)
    assert not config.is_enabled("shell", True)
    assert not config.is_enabled("web", True)
    assert config.llm_model == "keep-me"
    assert [p.name for p in path.parent.iterdir()] == ["c.yaml"]


def test_invalid_file_is_not_rewritten(tmp_path: Path) -> None:
    """enable refuses to rewrite an invalid file, which stays byte for byte the same."""
    path = tmp_path / "c.yaml"
    path.write_text("plugins: {enabel: [x]}\n# a comment\n")
    before = path.read_bytes()
    with pytest.raises(ConfigError):
        set_plugin_state(path, ["shell"], enabled=True)
    assert path.read_bytes() == before
