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


BOUNDED = """
manifest_version: 1
id: demo
name: Demo
version: "1"
permissions: ["secrets:DEMO_PIN"]
config:
  settings:
    retries: {type: integer, default: 2, minimum: 0, maximum: 5, env: DEMO_RETRIES}
    mode: {type: string, default: fast, enum: [fast, slow]}
    pin: {type: integer, secret: true, env: DEMO_PIN, minimum: 1000}
"""


def test_bounds_and_choices_refuse_values_from_config_and_environment() -> None:
    """A value outside its setting's bounds or choices is refused, from the config file
    or the environment, naming the setting, the value (unless secret) and the rule; a
    value inside them is taken."""
    manifest = parse_manifest(BOUNDED)
    settings, _, problems = resolve_settings(
        manifest, {"retries": 5, "mode": "slow"}, data_dir=None, environ={"DEMO_PIN": "4321"}
    )
    assert problems == []
    assert settings.values == {"retries": 5, "mode": "slow", "pin": 4321}

    _, _, problems = resolve_settings(
        manifest, {"retries": 6, "mode": "quick"}, data_dir=None, environ={"DEMO_PIN": "12"}
    )
    assert problems == [
        "plugin 'demo': setting 'mode' in the config is 'quick', but it must be one of "
        "'fast', 'slow'; fix plugins.settings.demo.mode",
        "plugin 'demo': setting 'pin': $DEMO_PIN is the secret value, but it must be at "
        "least 1000; fix the environment variable",
        "plugin 'demo': setting 'retries' in the config is 6, but it must be at most 5; "
        "fix plugins.settings.demo.retries",
    ]
    _, _, problems = resolve_settings(
        manifest, {}, data_dir=None, environ={"DEMO_RETRIES": "-1", "DEMO_PIN": "1000"}
    )
    assert problems == [
        "plugin 'demo': setting 'retries': $DEMO_RETRIES is '-1', but it must be at least 0; "
        "fix the environment variable"
    ]
