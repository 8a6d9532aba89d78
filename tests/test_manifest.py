"""Manifests: valid ones load, every invalid one says where, what and how to fix it."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autogpt_core import ManifestError
from autogpt_core.plugins._manifest import (
    MAX_MANIFEST_BYTES,
    MAX_MANIFEST_DEPTH,
    Manifest,
    SettingDecl,
    load_manifest,
    parse_manifest,
    setting_problem,
    validate_manifest,
)
from tests.strategies import (
    hostile_yaml,
    json_values,
    manifest_dicts,
    valid_manifest_dict,
    valid_manifests,
    yaml_documents,
)

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


# --- reading is bounded: no aliases, a size limit, a depth limit ------------------------

LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True)
)


@pytest.mark.parametrize(
    "text",
    [
        LAUGHS,
        "&loop [*loop]\n",
        "a: &m {x: *m}\n",
        "manifest_version: 1\nid: &id notes\nname: *id\nversion: '1'\n",
        "base: &b {x: 1}\nother: {<<: *b}\n",
        "x: *undefined\n",
    ],
    ids=["billion-laughs", "recursive-list", "recursive-map", "scalar", "merge-key", "unknown"],
)
def test_anchors_and_aliases_are_refused(text: str) -> None:
    """Any YAML anchor or alias is refused before it expands, naming its line and the fix."""
    assert len(text) < 700  # the billion-laughs file is the 600-byte one that hung the CLI
    [(field, problem)] = _issues(text)
    assert field == ""
    assert problem.startswith("line ")
    assert "anchor or alias" in problem


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_yaml)
def test_fuzzed_aliases_and_deep_nesting_are_refused(text: str) -> None:
    """Generated documents with anchors, (recursive) aliases or deep nesting are refused.

    They are small by construction and refused at their first anchor or 33rd level, so
    each example takes milliseconds; before, recursive aliases took seconds or forever.
    """
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, source="fuzz.yaml")
    [issue] = info.value.issues
    assert issue.file == "fuzz.yaml"
    assert "anchor or alias" in issue.problem or "levels deep" in issue.problem
    assert issue.fix


def test_nesting_deeper_than_the_limit_is_refused() -> None:
    """MAX_MANIFEST_DEPTH levels of lists and mappings parse; one more is refused."""
    at_limit = "x: " + "[" * (MAX_MANIFEST_DEPTH - 1) + "]" * (MAX_MANIFEST_DEPTH - 1) + "\n"
    fields = {f for f, _ in _issues(at_limit)}
    assert "x" in fields  # parsed: only the schema complains
    (field, problem), *_ = _issues(at_limit.replace("[", "[[", 1).replace("]", "]]", 1))
    assert problem == (
        f"line 1, column {MAX_MANIFEST_DEPTH + 3}: the YAML nests lists and mappings more "
        f"than {MAX_MANIFEST_DEPTH} levels deep"
    )


def test_a_manifest_larger_than_the_limit_is_refused(tmp_path: Any) -> None:
    """A file or text over MAX_MANIFEST_BYTES is refused unread, naming the file and limit."""
    text = VALID + "# " + "x" * MAX_MANIFEST_BYTES + "\n"
    path = tmp_path / "autogpt-plugin.yaml"
    path.write_text(text, encoding="utf-8")
    for error in (
        pytest.raises(ManifestError, load_manifest, path),
        pytest.raises(ManifestError, parse_manifest, text, source=str(path)),
    ):
        [issue] = error.value.issues
        assert issue.file == str(path)
        assert issue.problem == "the file is larger than 256 KiB, the limit for a manifest"
        assert "a few KiB" in issue.fix
    # Multi-byte characters count as the bytes they take in the file.
    assert _issues("# " + "\u00e9" * (MAX_MANIFEST_BYTES // 2))[0][1].startswith("the file is")
    path.write_text(VALID + "# " + "x" * (MAX_MANIFEST_BYTES - len(VALID) - 10), "utf-8")
    assert load_manifest(path).id == "notes"


@pytest.mark.parametrize(
    ("value", "reason"),
    [("2001-13-01", "month must be in 1..12"), ("9" * 5000, "Exceeds the limit")],
)
def test_values_python_cannot_build_are_located_errors(value: str, reason: str) -> None:
    """A date or integer YAML accepts but Python cannot build is an issue, not a traceback."""
    [(field, problem)] = _issues(f"manifest_version: 1\nversion: {value}\n")
    assert problem.startswith("line 2, column 10: the value ")
    assert reason in problem


# --- every problem at once ---------------------------------------------------------------


def test_schema_and_semantic_problems_are_reported_together() -> None:
    """An unknown field, wrong types and semantic problems all come in one error."""
    data = valid_manifest_dict()
    data["colour"] = "red"  # schema: unknown field
    data["enabled_by_default"] = "yes"  # schema: wrong type
    data["capabilities"]["commands"][0]["permissions"] = ["shell"]  # semantic
    data["requires_core"] = "at least 1"  # semantic
    data["load_after"] = ["sample"]  # semantic: names itself
    data["capabilities"]["commands"][0]["parameters"]["properties"]["url"]["$ref"] = "#/nope"
    with pytest.raises(ManifestError) as info:
        validate_manifest(data, source="m.yaml")
    assert {i.field for i in info.value.issues} == {
        "colour",
        "enabled_by_default",
        "capabilities.commands[0].permissions[0]",
        "requires_core",
        "load_after[0]",
        "capabilities.commands[0].parameters.properties.url.$ref",
    }
    assert all(i.file == "m.yaml" and i.problem and i.fix for i in info.value.issues)


def test_semantic_checks_skip_what_the_schema_reports() -> None:
    """Malformed values get the schema's issue only: no crash, no second, wrong advice."""
    data = valid_manifest_dict()
    data["permissions"] = 5
    data["requirements"] = [7]
    data["capabilities"]["commands"] = [{"name": 3, "permissions": ["root"], "parameters": []}]
    data["config"]["settings"] = {"t": {"type": "text", "env": "A B", "default": 1}}
    with pytest.raises(ManifestError) as info:
        validate_manifest(data, source="m.yaml")
    problems = [(i.field, i.problem) for i in info.value.issues]
    assert not any("top-level 'permissions'" in p or "secret" in p for _, p in problems)
    assert len({f for f, _ in problems}) == len(problems)


# --- command parameter schemas -----------------------------------------------------------


def _parameter_issues(parameters: Any) -> dict[str, str]:
    data = valid_manifest_dict()
    data["capabilities"]["commands"][0]["parameters"] = parameters
    with pytest.raises(ManifestError) as info:
        validate_manifest(data, source="m.yaml")
    prefix = "capabilities.commands[0].parameters"
    assert all(i.field.startswith(prefix) and i.fix for i in info.value.issues)
    return {i.field[len(prefix) :]: i.problem for i in info.value.issues}


def test_unresolvable_references_are_refused() -> None:
    """Every $ref must resolve inside the schema: missing, remote, malformed, not a schema."""
    issues = _parameter_issues(
        {
            "type": "object",
            "properties": {
                "a": {"$ref": "#/$defs/missing"},
                "b": {"$ref": "https://example.com/s.json"},
                "c": {"$ref": "#/required"},
                "d": {"items": {"$ref": "#nothing"}},
                "e": {"$ref": "#/properties"},
            },
            "required": ["a"],
        }
    )
    assert issues.pop(".properties.e.$ref").startswith(
        "the reference '#/properties' does not resolve: it points at {'a': {'$ref':"
    )
    assert issues == {
        ".properties.a.$ref": "the reference '#/$defs/missing' does not resolve: nothing is at "
        "that location in the schema",
        ".properties.b.$ref": "the reference 'https://example.com/s.json' does not resolve: it "
        "names another document, and other documents are never fetched",
        ".properties.c.$ref": "the reference '#/required' does not resolve: it points at ['a'], "
        "which is not a schema",
        ".properties.d.items.$ref": "the reference '#nothing' does not resolve: no '$anchor' in "
        "the schema has that name",
    }


def test_invalid_schemas_and_patterns_are_all_reported() -> None:
    """Each meta-schema violation and each pattern re cannot compile is its own issue."""
    issues = _parameter_issues(
        {
            "type": "object",
            "properties": {
                "a": {"type": "strnig"},
                "b": {"pattern": "("},
                "c": {"pattern": "a{4294967296}"},
                "d": {"minLength": -1},
            },
            "patternProperties": {"[": {}},
        }
    )
    assert issues == {
        ".properties.a.type": "not a valid JSON Schema: 'strnig' is not one of ['array', "
        "'boolean', 'integer', 'null', 'number', 'object', 'string']",
        ".properties.b.pattern": "the pattern '(' does not compile (missing ), unterminated "
        "subpattern at position 0)",
        ".properties.c.pattern": "the pattern 'a{4294967296}' does not compile (the repetition "
        "number is too large)",
        ".properties.d.minLength": "not a valid JSON Schema: -1 is less than the minimum of 0",
        ".patternProperties": "the pattern '[' does not compile (unterminated character set at "
        "position 0)",
    }


@pytest.mark.parametrize(
    ("parameters", "field"),
    [
        ({"$ref": "#"}, ".$ref"),
        ({"anyOf": [{"not": {"$ref": "#"}}]}, ".anyOf[0].not.$ref"),
        (
            {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}},
            ".$defs.a.$ref",
        ),
        ({"$dynamicAnchor": "m", "properties": {}, "$dynamicRef": "#m"}, ".$dynamicRef"),
    ],
)
def test_references_that_loop_without_descending_are_refused(
    parameters: dict[str, Any], field: str
) -> None:
    """A reference that comes back to its own schema for the same value would make
    validation recurse forever: it is reported where the loop closes."""
    issues = _parameter_issues({"type": "object", **parameters})
    assert list(issues) == [field]
    assert "leads back to a schema it is part of" in issues[field]


def test_references_that_resolve_are_accepted() -> None:
    """$defs, anchors, nested $id bases, recursion, the meta-schema; '$ref' as a name is data."""
    data = valid_manifest_dict()
    data["capabilities"]["commands"][0]["parameters"] = {
        "type": "object",
        "$defs": {
            "name": {"$anchor": "name", "type": "string", "pattern": "^[a-z]+$"},
            "doc": {"$id": "doc.json", "$defs": {"n": {"type": "number"}}},
        },
        "properties": {
            "a": {"$ref": "#/$defs/name"},
            "b": {"$ref": "#name"},
            "c": {"$ref": "doc.json#/$defs/n"},
            "d": {"items": {"$ref": "#"}},
            "e": {"$ref": "https://json-schema.org/draft/2020-12/schema"},
            "$ref": {"type": "string", "const": {"$ref": "#/nowhere"}},
        },
    }
    manifest = validate_manifest(data, source="m.yaml")
    assert manifest.commands[0].parameters["properties"]["b"] == {"$ref": "#name"}


@pytest.mark.parametrize("value", ['"yes"', "[mysql]", "[]", "[sqlite, sqlite]", "{a: 1}"])
def test_enabled_by_default_is_a_boolean_or_store_kinds(value: str) -> None:
    """A wrong enabled_by_default is named with what it may be."""
    text = f'manifest_version: 1\nid: x\nname: X\nversion: "1"\nenabled_by_default: {value}\n'
    with pytest.raises(ManifestError) as info:
        parse_manifest(text)
    assert "enabled_by_default: expected true, false or a list of store kinds" in str(info.value)
    kinds = parse_manifest(text.replace(value, "[postgresql]"))
    assert (kinds.default_on("postgresql"), kinds.default_on("sqlite")) == (True, False)
    assert parse_manifest(text.replace(value, "true")).default_on("postgresql") is True


def test_bridged_capability_is_bounded() -> None:
    """capabilities.bridged names an object setting, and its permissions are the plugin's."""
    data = {
        **valid_manifest_dict(),
        "permissions": ["network"],
        "capabilities": {"bridged": {"prefixes_from": "services", "permissions": ["shell"]}},
        "config": {"settings": {"services": {"type": "string"}}},
    }
    with pytest.raises(ManifestError) as caught:
        validate_manifest(data)
    text = str(caught.value)
    assert "capabilities.bridged.permissions[0]: permission 'shell' is not in" in text
    assert "capabilities.bridged.prefixes_from: 'services' is not a setting of type" in text
    data["capabilities"]["bridged"]["permissions"] = ["network"]
    data["config"]["settings"]["services"]["type"] = "object"
    manifest = validate_manifest(data)
    assert manifest.bridged is not None
    assert manifest.bridged.permissions == ("network",)
    assert Manifest.from_json(json.loads(json.dumps(manifest.to_json()))) == manifest


def test_each_missing_field_is_reported_once() -> None:
    with pytest.raises(ManifestError) as info:
        validate_manifest({"id": "bad"})
    lines = str(info.value).splitlines()
    assert len(lines) == len(set(lines)) == 3


# --- setting bounds and choices --------------------------------------------------------


def _with_setting(setting: str) -> str:
    head = "manifest_version: 1\nid: notes\nname: Notes\nversion: '1'\n"
    return f"{head}config:\n  settings:\n    limit: {setting}\n"


@pytest.mark.parametrize(
    ("setting", "field", "problem"),
    [
        (
            "{type: string, minimum: 1}",
            "config.settings.limit.minimum",
            "'minimum' applies to integer and number settings, not to a string",
        ),
        (
            "{type: integer, minimum: 5, maximum: 2}",
            "config.settings.limit.minimum",
            "the minimum 5 is above the maximum 2",
        ),
        (
            "{type: number, maximum: .inf}",
            "config.settings.limit.maximum",
            "inf is not a finite number",
        ),
        (
            "{type: boolean, enum: [true]}",
            "config.settings.limit.enum",
            "'enum' applies to string, integer and number settings, not to true or false",
        ),
        (
            "{type: integer, enum: [1, two]}",
            "config.settings.limit.enum[1]",
            "the choice 'two' must be a whole number",
        ),
        (
            "{type: number, enum: [.inf, 1.5]}",
            "config.settings.limit.enum[0]",
            "the choice inf must be a finite number",
        ),
        (
            "{type: integer, minimum: 2, enum: [1, 3]}",
            "config.settings.limit.enum[0]",
            "the choice 1 must be at least 2",
        ),
        # Not numbers: the schema says so, and the other checks do not trip over them (YAML
        # 1.1 reads 1e3 as a string).
        ("{type: integer, maximum: 1e3, default: 10}", "config.settings.limit.maximum", "1e3"),
        ("{type: integer, minimum: [1], default: 10}", "config.settings.limit.minimum", "[1]"),
        (
            "{type: string, minimum: 1, default: 10}",
            "config.settings.limit.minimum",
            "'minimum' applies to integer and number settings",
        ),
        (
            "{type: integer, minimum: 1, default: 0}",
            "config.settings.limit.default",
            "the default 0 must be at least 1",
        ),
        (
            "{type: number, maximum: 2.5, default: 3}",
            "config.settings.limit.default",
            "the default 3 must be at most 2.5",
        ),
        (
            "{type: string, enum: [fast, slow], default: quick}",
            "config.settings.limit.default",
            "the default 'quick' must be one of 'fast', 'slow'",
        ),
        (
            "{type: string, enum: []}",
            "config.settings.limit.enum",
            "should be non-empty",
        ),
    ],
)
def test_setting_bounds_and_choices_are_checked(setting: str, field: str, problem: str) -> None:
    """Bounds fit numbers only and are finite and in order, choices have the setting's
    type, and the default obeys both: each mistake is named where it is."""
    issues = _issues(_with_setting(setting))
    assert any(f == field and problem in p for f, p in issues), issues


def test_a_bound_too_large_for_a_float_is_a_bound() -> None:
    """Python's ints have no limit: a 400-digit bound is finite and compares exactly."""
    huge = "1" + "0" * 400
    manifest = parse_manifest(_with_setting(f"{{type: integer, minimum: {huge}}}"))
    (decl,) = manifest.settings
    assert setting_problem(decl, 10**400) is None
    problem = setting_problem(decl, 10**400 - 1)
    assert problem is not None
    assert len(problem) < 100  # the bound is shortened in messages
    issues = _issues(_with_setting(f"{{type: integer, minimum: {huge}, default: 1}}"))
    assert [f for f, _ in issues] == ["config.settings.limit.default"]


def test_setting_bounds_and_choices_load() -> None:
    manifest = parse_manifest(
        _with_setting("{type: integer, minimum: 1, maximum: 9, enum: [1, 3, 9], default: 3}")
    )
    (decl,) = manifest.settings
    assert (decl.minimum, decl.maximum, decl.enum, decl.default) == (1, 9, (1, 3, 9), 3)
    assert Manifest.from_json(json.loads(json.dumps(manifest.to_json()))) == manifest


def test_a_cached_manifest_from_before_the_bounds_is_read_again() -> None:
    """The manifest cache's entries written before settings had bounds lack the keys:
    rebuilding one fails, so the cache reads the file again instead of dropping bounds."""
    data = parse_manifest(_with_setting("{type: integer, minimum: 1}")).to_json()
    for setting in data["settings"]:
        del setting["minimum"], setting["maximum"], setting["enum"]
    with pytest.raises(KeyError):
        Manifest.from_json(data)


_BOUNDED_TYPES = st.sampled_from(["string", "integer", "number"])
_numbers = st.one_of(st.integers(-5, 5), st.floats(-5, 5, allow_nan=False, allow_infinity=False))


@st.composite
def _declared_and_value(draw: st.DrawFn) -> tuple[dict[str, Any], Any]:
    kind = draw(_BOUNDED_TYPES)
    schema: dict[str, Any] = {"type": kind}
    values = {"string": st.sampled_from(["", "a", "b", "ab"]), "integer": st.integers(-5, 5)}
    values["number"] = _numbers
    if kind != "string":
        if draw(st.booleans()):
            schema["minimum"] = draw(_numbers)
        if draw(st.booleans()):
            schema["maximum"] = draw(_numbers)
    if draw(st.booleans()):
        schema["enum"] = draw(st.lists(values[kind], min_size=1, max_size=3, unique=True))
    anything = st.one_of(
        values[kind],
        st.booleans(),
        st.none(),
        st.text(max_size=2),
        _numbers,
        st.just(float("nan")),
        st.just(float("inf")),
        st.lists(st.integers(), max_size=1),
    )
    return schema, draw(anything)


@settings(max_examples=400)
@given(_declared_and_value())
def test_setting_problem_is_json_schema_for_finite_values(case: tuple[dict[str, Any], Any]) -> None:
    """A value breaks a setting's type, bounds or choices exactly when JSON Schema says it
    breaks the same keywords; besides, a number must be finite, and an integer an int."""
    schema, value = case
    decl = SettingDecl(
        name="limit",
        type=schema["type"],
        minimum=schema.get("minimum"),
        maximum=schema.get("maximum"),
        enum=tuple(schema["enum"]) if "enum" in schema else None,
    )
    problem = setting_problem(decl, value)
    valid = jsonschema.Draft202012Validator(schema).is_valid(value)
    if isinstance(value, float) and not math.isfinite(value) and schema["type"] == "number":
        assert problem == "must be a finite number"
    elif isinstance(value, float) and schema["type"] == "integer":
        # JSON Schema takes 3.0 as an integer; a setting takes 3 only, so that a plugin
        # gets the int its manifest promises.
        assert problem == "must be a whole number"
    else:
        assert (problem is None) == valid, (schema, value, problem)


def test_a_check_that_trips_is_this_manifests_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A semantic check that raises on a value it did not expect makes a ManifestError
    for that manifest (discovery and the index go on with the others), listed with the
    schema's problems when there are some."""
    from autogpt_core.plugins import _manifest

    def trips(*args: object) -> list[object]:
        raise TypeError("'>' not supported between instances of 'int' and 'str'")

    monkeypatch.setattr(_manifest, "_constraint_issues", trips)
    issues = _issues(_with_setting("{type: integer, default: 1}"))
    assert issues == [
        (
            "",
            "the manifest could not be checked (TypeError: '>' not "
            "supported between instances of 'int' and 'str')",
        )
    ]
    issues = _issues(_with_setting("{type: integer, default: 1, secret: maybe}"))
    assert [f for f, _ in issues] == ["config.settings.limit.secret"]
