"""The config file: optional, validated with located errors, rewritten atomically."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from autogpt_core import ConfigError
from autogpt_core._config import (
    DEFAULT_GRANTS,
    SECTIONS,
    TOP_LEVEL_FIELDS,
    Limits,
    load_config,
    parse_config,
    resolve_config_path,
    set_plugin_state,
)
from tests import strategies


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


# --- the schema, and the docs that describe it -----------------------------------------

DOC = Path(__file__).parent.parent / "docs" / "configuration.md"
SCHEMA_FIELDS = {
    **{
        f"{section}.{key}": field
        for section, fields in SECTIONS.items()
        for key, field in fields.items()
    },
    **TOP_LEVEL_FIELDS,
}


def test_confirm_timeout_is_read(tmp_path: Path) -> None:
    """limits.confirm_timeout, documented, is accepted and read (it was an unknown field)."""
    path = tmp_path / "c.yaml"
    path.write_text("limits: {confirm_timeout: 300}\n")
    assert load_config(path).limits.confirm_timeout == 300
    path.write_text("limits: {confirm_timeout: 0}\n")
    with pytest.raises(ConfigError, match=r"limits\.confirm_timeout: expected a number > 0"):
        load_config(path)


def test_limits_are_the_schemas_limits() -> None:
    """Limits has exactly the schema's limits, with the schema's defaults."""
    assert [f.name for f in attrs.fields(Limits)] == list(SECTIONS["limits"])
    assert attrs.asdict(Limits()) == {k: f.default for k, f in SECTIONS["limits"].items()}


def _doc_table() -> dict[str, list[str]]:
    """The field table of docs/configuration.md: field name -> [type, default, meaning]."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = lines.index("| field | type | default | meaning |")
    rows: dict[str, list[str]] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split(" | ")]
        rows[cells[0].strip("`")] = [cells[1], cells[2].strip("`"), cells[3]]
    return rows


def _yaml_text(value: object) -> str:
    """A default as the docs' table shows it."""
    if value is None:
        return "null"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(map(str, value)) + "]"
    if isinstance(value, dict):
        assert not value
        return "{}"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def test_docs_table_is_the_schema() -> None:
    """The docs' table lists exactly the schema's fields, with its types, defaults and what
    null means."""
    table = _doc_table()
    assert list(table) == list(SCHEMA_FIELDS)
    for name, field in SCHEMA_FIELDS.items():
        kind, default, meaning = table[name]
        assert kind == field.describe(), name
        assert default == _yaml_text(field.default), name
        assert ("(null: " in meaning) == field.nullable, name
        if field.nullable:
            assert f"(null: {field.null_means})" in meaning, name


def _doc_example() -> str:
    text = DOC.read_text(encoding="utf-8")
    (example,) = re.findall(r"^```yaml\n(.*?)^```$", text, flags=re.M | re.S)
    return str(example)


def test_docs_example_has_every_field_and_parses(tmp_path: Path) -> None:
    """The docs' example config sets every field of the schema, and the loader reads it."""
    raw = yaml.safe_load(_doc_example())
    named = {
        f"{key}.{sub}" if isinstance(value, dict) else key
        for key, value in raw.items()
        for sub in (value if isinstance(value, dict) else [None])
    }
    assert named == set(SCHEMA_FIELDS)
    path = tmp_path / "config.yaml"
    path.write_text(_doc_example())
    config = load_config(path)
    assert config.limits.confirm_timeout is None
    assert config.is_enabled("shell", False)


@settings(max_examples=300)
@given(strategies.valid_configs())
def test_valid_configs_parse(drawn: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """A config valid by the docs parses, and every field it sets is read as given."""
    raw, fields = drawn
    config = parse_config(raw, path=Path("c.yaml"))

    def given_or(name: str, default: object) -> Any:
        return fields.get(name, default)

    for key, field in SECTIONS["limits"].items():
        assert getattr(config.limits, key) == given_or(f"limits.{key}", field.default)
    assert config.enable == frozenset(given_or("plugins.enable", None) or ())
    assert config.disable == frozenset(given_or("plugins.disable", None) or ())
    assert config.plugin_settings == (given_or("plugins.settings", None) or {})
    assert config.grants == frozenset(given_or("permissions.grant", DEFAULT_GRANTS))
    assert config.llm_provider == given_or("llm.provider", None)
    assert config.llm_model == given_or("llm.model", None)
    assert config.llm_base_url == given_or("llm.base_url", None)


@settings(max_examples=300)
@given(strategies.invalid_configs())
def test_invalid_configs_name_every_mistake(drawn: tuple[dict[str, Any], list[str]]) -> None:
    """A config with mistakes is a ConfigError with one line per mistake, each naming the
    file and the field (or section) it is in."""
    raw, named = drawn
    with pytest.raises(ConfigError) as info:
        parse_config(raw, path=Path("c.yaml"))
    message = str(info.value)
    for name in named:
        assert re.search(rf"^c\.yaml: {re.escape(name)}[:\[.]", message, flags=re.M), name
    assert all(line.startswith("c.yaml: ") for line in message.splitlines())


@settings(max_examples=200)
@given(
    strategies.yaml_documents()
    | st.dictionaries(
        st.sampled_from(sorted({*SECTIONS, *TOP_LEVEL_FIELDS, "colour"})),
        strategies.json_values,
    ).map(yaml.safe_dump)
)
def test_any_document_loads_or_is_a_config_error(text: str) -> None:
    """Whatever the file holds, loading it gives a Config or a ConfigError, nothing else."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.yaml"
        path.write_text(text, encoding="utf-8")
        error: ConfigError | None = None
        try:
            load_config(path)
        except ConfigError as exc:
            error = exc
        assert error is None or str(path) in str(error)


def test_a_config_with_yaml_aliases_is_refused_at_once(tmp_path: Path) -> None:
    """A "billion laughs" config file is a ConfigError naming the file and the line, not
    a hang: the config is read by every command."""
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(20)
    )
    path = tmp_path / "config.yaml"
    path.write_text(bomb)
    with pytest.raises(ConfigError, match=r"line 1, column 4: uses the YAML anchor or alias"):
        load_config(path)
