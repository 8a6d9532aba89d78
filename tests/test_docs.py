"""Every code, YAML and JSON example in docs/ runs, each the way its kind can run.

``yaml``: manifests (whole, or a fragment completed with an identity) validate with
``parse_manifest``; in configuration.md, config files parse with the config loader and
their plugin settings resolve against the built-in plugins' manifests. ``json``: parses;
in recordings.md, it loads with the replay loader and every tool call names a built-in
command with arguments its parameter schema accepts. ``python``: runs as a plugin module
registered against the hook specs. ``toml``: parses; entry points name modules.
``console``: each ``autogpt`` line parses with the real CLI parser, each ``python
SCRIPT`` names a script that exists. ``text``: not run, and says why in a
``<!-- not run: REASON -->`` line just before it. Any other block fails: name its kind.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
import types
from pathlib import Path
from typing import Any

import attrs
import pluggy
import pytest
import yaml
from jsonschema import Draft202012Validator

import hookspecs
from autogpt_core._config import parse_config
from autogpt_core.cli._cli import build_parser
from autogpt_core.plugins._manifest import (
    MANIFEST_FILENAME,
    CommandDecl,
    Manifest,
    load_manifest,
    parse_manifest,
)
from autogpt_core.plugins._settings import resolve_settings
from autogpt_plugins.llm_replay import Recording

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[^\s`]*)\s*$")
REASON = re.compile(r"^\s*<!-- not run: \S.* -->$")
#: What an unfinished manifest fragment in the docs is completed with.
IDENTITY = {"manifest_version": 1, "id": "example", "name": "Example", "version": "1.0"}


@attrs.frozen
class Block:
    """One fenced block: its file, the line its code starts on, kind, code, and whether
    the line before its fence gives a reason for not running it."""

    doc: str
    line: int
    lang: str
    code: str
    reason: bool

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}:{self.lang or 'untagged'}"


def blocks() -> list[Block]:
    found = []
    for path in sorted(DOCS.glob("*.md")):
        lines = path.read_text(encoding="utf-8").splitlines()
        index = 0
        while index < len(lines):
            match = FENCE.match(lines[index])
            if match is None:
                index += 1
                continue
            indent = match["indent"]
            end = lines.index(f"{indent}```", index + 1)
            code = "\n".join(line.removeprefix(indent) for line in lines[index + 1 : end])
            before = next((line for line in reversed(lines[:index]) if line.strip()), "")
            found.append(
                Block(path.name, index + 2, match["lang"], code + "\n", bool(REASON.match(before)))
            )
            index = end + 1
    return found


BLOCKS = blocks()


def of(*langs: str) -> list[Any]:
    return [pytest.param(b, id=b.id) for b in BLOCKS if b.lang in langs]


def builtin_manifests() -> dict[str, Manifest]:
    # This checkout's built-in plugins (autogpt_plugins may be a namespace package).
    root = ROOT / "autogpt_plugins"
    manifests = (load_manifest(p) for p in sorted(root.glob(f"*/{MANIFEST_FILENAME}")))
    return {m.id: m for m in manifests}


def test_blocks_are_found() -> None:
    """The block finder sees every kind the docs use, indented ones included."""
    kinds = {b.lang for b in BLOCKS}
    assert {"yaml", "json", "python", "console", "toml", "text"} <= kinds
    assert any(b.doc == "plugins.md" and b.lang == "python" for b in BLOCKS)


def _kind_params() -> list[Any]:
    return [pytest.param(b, id=b.id) for b in BLOCKS]


@pytest.mark.parametrize("block", _kind_params())
def test_every_block_has_a_kind_this_test_runs(block: Block) -> None:
    """Each block is of a kind this module runs, or is text with a reason for not running."""
    assert block.lang in {"yaml", "json", "python", "console", "toml", "text"}, (
        f"{block.id}: name the block's kind (```console, ```yaml, ...) so a test runs it, "
        "or mark it ```text with a <!-- not run: REASON --> line before it"
    )
    if block.lang == "text":
        assert block.reason, f"{block.id}: a text block needs <!-- not run: REASON --> before it"


@pytest.mark.parametrize("block", of("yaml"))
def test_yaml_examples_validate(block: Block) -> None:
    """Config examples (configuration.md, server.md, and bridges.md's) parse with the config
    loader (their plugins and settings are real); every other YAML block is a manifest, or a
    fragment of one, that validates."""
    data = yaml.safe_load(block.code)
    # bridges.md holds a manifest fragment and a config file: the config is the one
    # with a 'plugins' section.
    if block.doc in ("configuration.md", "server.md") or (
        block.doc == "bridges.md" and "plugins" in data
    ):
        config = parse_config(data, path=Path(block.id))
        manifests = builtin_manifests()
        named = config.enable | config.disable | set(config.plugin_settings)
        assert named <= set(manifests), f"{block.id}: no built-in plugin {named - set(manifests)}"
        for plugin_id, values in config.plugin_settings.items():
            _, _, problems = resolve_settings(manifests[plugin_id], values, data_dir=None)
            assert not problems, f"{block.id}: {problems}"
        return
    manifest = parse_manifest(yaml.safe_dump({**IDENTITY, **data}), source=block.id)
    assert manifest.id


def _tool_call_problems(recording: Recording, manifests: dict[str, Manifest]) -> list[str]:
    commands: dict[str, CommandDecl] = {}
    for manifest in manifests.values():
        for decl in manifest.commands:
            for name in (decl.name, *decl.aliases):
                commands[name] = decl
    problems = []
    for n, exchange in enumerate(recording.exchanges):
        for tool in exchange.request.get("tools") or []:
            if tool not in commands:
                problems.append(f"exchange {n}: offers {tool!r}, which no built-in declares")
        for call in exchange.response.message.tool_calls:
            command = commands.get(call.name)
            if command is None:
                problems.append(f"exchange {n}: calls {call.name!r}, which no built-in declares")
                continue
            validator = Draft202012Validator(dict(command.parameters))
            problems.extend(
                f"exchange {n}: {call.name}: {error.message}"
                for error in validator.iter_errors(json.loads(call.arguments))
            )
    return problems


@pytest.mark.parametrize("block", of("json"))
def test_json_examples_load(block: Block) -> None:
    """JSON blocks parse; recordings load with the replay loader, and their tool calls
    match the built-in commands' parameter schemas."""
    data = json.loads(block.code)
    if block.doc == "recordings.md":
        recording = Recording.from_json(data, block.id)
        assert recording.exchanges
        assert _tool_call_problems(recording, builtin_manifests()) == []


def test_the_tool_call_check_catches_a_wrong_parameter() -> None:
    """The recordings check refuses write_file called with 'text' (its parameter is
    'content'), and a command no built-in declares."""
    call = {"name": "write_file", "arguments": {"path": "a.txt", "text": "hi"}}
    data = {
        "format": "autogpt-replay",
        "version": 1,
        "exchanges": [{"response": {"tool_calls": [call, {"name": "fly", "arguments": {}}]}}],
    }
    problems = _tool_call_problems(Recording.from_json(data), builtin_manifests())
    assert len(problems) == 3, problems
    assert any("'content' is a required property" in p for p in problems)
    assert any("'text' was unexpected" in p for p in problems)
    assert any("'fly'" in p for p in problems)


@pytest.mark.parametrize("block", of("python"))
def test_python_examples_run_as_plugins(block: Block) -> None:
    """A python block runs as a module and registers against the hook specs (pluggy checks
    its hook names and arguments); what it registers through register_commands is
    callable."""
    module = types.ModuleType(f"docs_example_{block.line}")
    exec(compile(block.code, block.id, "exec"), module.__dict__)
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs.specs)
    pm.register(module)
    registered: dict[str, Any] = {}
    register = getattr(module, "register_commands", None)
    if register is not None:
        register(register=registered.__setitem__)
        assert all(callable(f) for f in registered.values())


@pytest.mark.parametrize("block", of("toml"))
def test_toml_examples_parse(block: Block) -> None:
    """TOML blocks parse; entry points map plugin ids to module (or module:Class) paths."""
    data = tomllib.loads(block.code)
    entry_points = data.get("project", {}).get("entry-points", {}).get("autogpt.plugins", {})
    for plugin_id, target in entry_points.items():
        assert re.fullmatch(r"[a-z][a-z0-9_-]{0,63}", plugin_id), plugin_id
        assert re.fullmatch(r"[A-Za-z_][\w.]*(:[A-Za-z_]\w*)?", target), target


def console_lines(block: Block) -> list[list[str]]:
    lines = []
    for line in block.code.splitlines():
        argv = shlex.split(line.strip().removeprefix("$ "), comments=True)
        if argv:
            lines.append(argv)
    return lines


@pytest.mark.parametrize("block", of("console"))
def test_console_commands_exist(block: Block, capsys: pytest.CaptureFixture[str]) -> None:
    """Every autogpt command line parses with the real CLI parser (subcommands, options
    and their values); a python line names a script that exists; pip lines are pip's."""
    for argv in console_lines(block):
        if argv[0] == "autogpt":
            try:
                build_parser().parse_args(argv[1:])
            except SystemExit as exc:
                pytest.fail(f"{block.id}: {shlex.join(argv)}: {capsys.readouterr().err} ({exc})")
        elif argv[0] == "python":
            assert (ROOT / argv[1]).is_file(), f"{block.id}: no script {argv[1]}"
        else:
            assert argv[0] == "pip", f"{block.id}: {argv[0]!r}: no test knows this command"


def test_console_check_catches_an_unknown_option(capsys: pytest.CaptureFixture[str]) -> None:
    """The console check refuses an option the CLI does not have."""
    block = Block("x.md", 1, "console", "autogpt run goal --strict-mode\n", False)
    with pytest.raises(pytest.fail.Exception, match="unrecognized arguments: --strict-mode"):
        test_console_commands_exist(block, capsys)
