"""Plugin settings: environment over config over default, typed, secrets collected."""

from __future__ import annotations

from pathlib import Path

from autogpt_core.plugins._manifest import parse_manifest
from autogpt_core.plugins._settings import resolve_settings

MANIFEST = """
manifest_version: 1
id: demo
name: Demo
version: "1"
permissions: ["secrets:DEMO_TOKEN"]
config:
  settings:
    token: {type: string, secret: true, env: DEMO_TOKEN, required: true}
    retries: {type: integer, default: 2, env: DEMO_RETRIES}
    verbose: {type: boolean, default: false, env: DEMO_VERBOSE}
    tags: {type: array, default: [], env: DEMO_TAGS}
"""


def test_precedence_and_coercion(tmp_path: Path) -> None:
    """An environment variable beats the config, which beats the default; env text is
    converted to the setting's type; the data dir is the plugin's own."""
    manifest = parse_manifest(MANIFEST)
    env = {"DEMO_TOKEN": "tok-123456", "DEMO_VERBOSE": "yes", "DEMO_TAGS": '["a", "b"]'}
    settings, secrets, problems = resolve_settings(
        manifest, {"retries": 5, "verbose": False}, data_dir=tmp_path, environ=env
    )
    assert problems == []
    assert settings.values == {
        "token": "tok-123456",
        "retries": 5,
        "verbose": True,
        "tags": ["a", "b"],
    }
    assert secrets == ["tok-123456"]
    assert settings.data_dir == tmp_path / "plugins" / "demo"


def test_problems_name_the_setting_and_never_the_secret() -> None:
    """Missing required, wrong types and unknown names are reported; secrets are not shown."""
    manifest = parse_manifest(MANIFEST)
    _, _, problems = resolve_settings(
        manifest,
        {"retries": "many", "colour": "red"},
        data_dir=None,
        environ={"DEMO_VERBOSE": "perhaps"},
    )
    text = "\n".join(problems)
    assert "setting 'colour' in the config is not declared" in text
    assert "setting 'retries' in the config is 'many', not a whole number" in text
    assert "$DEMO_VERBOSE is 'perhaps', not true or false" in text
    assert "setting 'token' is required: set $DEMO_TOKEN" in text
    _, _, problems = resolve_settings(manifest, {"token": 42}, data_dir=None, environ={})
    assert problems == [
        "plugin 'demo': setting 'token' in the config is the secret value, not a string; "
        "fix plugins.settings.demo.token"
    ]
