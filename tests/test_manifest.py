"""Manifests: valid ones load, every invalid one says where, what and how to fix it."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from autogpt_core import ManifestError
from autogpt_core._manifest import Manifest, load_manifest, parse_manifest, validate_manifest
from tests.strategies import json_values, manifest_dicts, valid_manifests, yaml_documents

VALID = """
manifest_version: 1
id: notes
name: Notes
version: 1.2.0
description: Keeps notes.
requires_core: ">=0.1"
enabled_by_default: true
permissions: [fs.write, "secrets:NOTES_TOKEN"]
capabilities:
  commands:
    - name: add_note
      description: Add a note.
      aliases: [note]
      permissions: [fs.write]
      parameters:
        type: object
        properties: {text: {type: string}}
        required: [text]
requires: [workspace]
load_after: [memory_sqlite]
requirements: ["httpx>=0.27"]
config:
  settings:
    token: {type: string, secret: true, env: NOTES_TOKEN}
    limit: {type: integer, default: 10}
codeowners: ["@me"]
"""


def _issues(text: str) -> list[tuple[str, str]]:
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, source="m.yaml")
    for issue in info.value.issues:
        assert issue.file == "m.yaml"
        assert issue.fix
    return [(i.field, i.problem) for i in info.value.issues]


def test_valid_manifest_loads_every_field() -> None:
    """A complete manifest becomes a Manifest with every field carried over."""
    m = parse_manifest(VALID, source="m.yaml")
    assert m.id == "notes"
    assert m.enabled_by_default is True
    assert m.commands[0].aliases == ("note",)
    assert m.commands[0].permissions == ("fs.write",)
    assert m.requires == ("workspace",)
    assert {s.name: s.secret for s in m.settings} == {"limit": False, "token": True}
    assert m.source == "m.yaml"


def test_unknown_field_is_an_error_naming_the_field() -> None:
    """An unknown field, top-level or nested, is reported with its path and the known fields."""
    text = VALID.replace("codeowners:", "colour: red\ncodeowners:").replace(
        "      aliases: [note]", "      aliases: [note]\n      bogus: 1"
    )
    issues = _issues(text)
    fields = [f for f, _ in issues]
    assert "colour" in fields
    assert "capabilities.commands[0].bogus" in fields
    assert all(p == "unknown field" for _, p in issues)


def test_several_errors_are_all_reported() -> None:
    """Wrong types, a missing field and a bad pattern are all listed in one error."""
    text = """
manifest_version: 1
id: Bad Id
version: [1]
enabled_by_default: "yes"
permissions: [root]
"""
    fields = {f for f, _ in _issues(text)}
    assert {"id", "name", "version", "enabled_by_default", "permissions[0]"} <= fields


def test_semantic_errors() -> None:
    """Command permissions beyond the plugin's, duplicate names, bad specifiers are reported."""
    data = yaml.safe_load(VALID)
    data["capabilities"]["commands"][0]["permissions"] = ["shell"]
    data["capabilities"]["commands"].append(
        {"name": "other", "description": "x", "aliases": ["note"]}
    )
    data["requires_core"] = "at least 1"
    data["requirements"] = ["not a requirement!!"]
    data["load_after"] = ["notes"]
    data["config"]["settings"]["limit"]["default"] = "ten"
    with pytest.raises(ManifestError) as info:
        validate_manifest(data, source="m.yaml")
    fields = {i.field for i in info.value.issues}
    assert fields == {
        "capabilities.commands[0].permissions[0]",
        "capabilities.commands[1].aliases[0]",
        "requires_core",
        "requirements[0]",
        "load_after[0]",
        "config.settings.limit.default",
    }


def test_reading_a_secret_needs_the_secrets_permission() -> None:
    """A setting read from a secret-looking variable must be secret and declared."""
    data = yaml.safe_load(VALID)
    data["permissions"] = ["fs.write"]
    data["config"]["settings"]["token"] = {"type": "string", "env": "OPENAI_API_KEY"}
    with pytest.raises(ManifestError) as info:
        validate_manifest(data, source="m.yaml")
    problems = {i.field: i.fix for i in info.value.issues}
    assert problems["config.settings.token.env"] == "add 'secrets:OPENAI_API_KEY' to 'permissions'"
    assert "secret: true" in problems["config.settings.token.secret"]
    data["permissions"].append("secrets:OPENAI_API_KEY")
    data["config"]["settings"]["token"]["secret"] = True
    assert validate_manifest(data, source="m.yaml").permissions[-1] == "secrets:OPENAI_API_KEY"


@pytest.mark.parametrize("name", ["MAX_TOKENS", "KEYBOARD_LAYOUT", "TOKENIZERS_PARALLELISM"])
def test_ordinary_variables_are_not_taken_for_secrets(name: str) -> None:
    """Names that merely contain KEY or TOKEN inside a word need no secrets permission."""
    data = yaml.safe_load(VALID)
    data["config"]["settings"]["plain"] = {"type": "string", "env": name}
    assert validate_manifest(data, source="m.yaml").id == "notes"


def test_yaml_syntax_error_names_line() -> None:
    """Broken YAML is a ManifestError with the line number, not a yaml exception."""
    (field, problem), *_ = _issues("id: [unclosed\nname: x\n")
    assert "line" in problem
    assert "YAML" in problem


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "just text", "42"])
def test_non_mapping_documents(text: str) -> None:
    """A manifest that is empty or not a mapping is one clear issue."""
    issues = _issues(text)
    assert len(issues) == 1
    assert "not a mapping" in issues[0][1]


def test_non_string_keys_are_reported() -> None:
    """Integer or null keys are reported with their location, not crashed on."""
    issues = _issues("manifest_version: 1\n1: x\ncapabilities: {commands: [{null: 2}]}\n")
    assert {f for f, _ in issues} == {"(top level)", "capabilities.commands[0]"}


def test_missing_file(tmp_path: Any) -> None:
    """A missing manifest names the file and says to ship one."""
    with pytest.raises(ManifestError, match="missing") as info:
        load_manifest(tmp_path / "autogpt-plugin.yaml")
    assert str(tmp_path) in str(info.value)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(yaml_documents())
def test_any_yaml_document_is_a_manifest_or_a_manifest_error(text: str) -> None:
    """Arbitrary YAML text either validates or raises ManifestError with located issues."""
    issues = []
    try:
        parse_manifest(text, source="fuzz.yaml")
    except ManifestError as exc:
        issues = list(exc.issues) or [None]
    for issue in issues:
        assert issue is not None
        assert issue.file == "fuzz.yaml"
        assert issue.problem
        assert issue.fix


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifest_dicts())
def test_mutated_manifests_are_valid_or_located_errors(data: dict[str, Any]) -> None:
    """A valid manifest with random fields replaced is valid or names the replaced fields."""
    try:
        manifest = validate_manifest(copy.deepcopy(data), source="m.yaml")
    except ManifestError as exc:
        issues = list(exc.issues)
        manifest = None
    if manifest is not None:
        assert manifest.id == data["id"]
    else:
        assert issues
        assert all(issue.problem and issue.fix for issue in issues)


@settings(deadline=None)
@given(valid_manifests())
def test_json_round_trip(data: dict[str, Any]) -> None:
    """Every valid manifest validates and survives the cache's JSON round trip unchanged."""
    manifest = validate_manifest(data, source="m.yaml")
    text = json.dumps(manifest.to_json())
    assert Manifest.from_json(json.loads(text)) == manifest


@given(json_values)
def test_arbitrary_values_for_top_level(value: Any) -> None:
    """Any JSON value as the whole document gives a Manifest or a ManifestError."""
    with pytest.raises(ManifestError):
        validate_manifest(value, source="v.yaml")
