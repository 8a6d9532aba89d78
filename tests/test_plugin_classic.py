"""The classic bridge against real Auto-GPT 0.4 plugins: written here in Auto-GPT's style
(``autogpt_plugins/NAME/__init__.py`` with a subclass of ``AutoGPTPluginTemplate`` that adds
commands in ``post_prompt``), zipped with zipfile, and loaded by the real loader.

Every run goes through the real runtime with a scripted model, so consent, masking and
tracing are the core's. A plugin's command appends to a log file, so a test sees what ran.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import json
import os
import re
import sys
import tempfile
import textwrap
import threading
import zipfile
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import autogpt_plugins.classic as classic_module
import autogpt_plugins.classic._loading as classic_loading
from autogpt_core._config import DEFAULT_GRANTS, Config
from autogpt_core.agent._options import RunOptions
from autogpt_core.agent._runtime import Runtime
from autogpt_core.plugins._commands import CommandRegistry
from autogpt_core.plugins._loader import LOADED, PluginSet, load
from autogpt_core.plugins._manifest import load_manifest
from autogpt_core.store._storage import Store
from autogpt_plugins.classic import ClassicBridge, hint_schema, package_dirs, parameters_schema
from autogpt_plugins.classic._thread import PluginClosed, PluginThread
from hookspecs import LLMResponse, Message, PluginSettings, Role, Usage
from tests import strategies
from tests.clirun import autogpt, cli_env
from tests.scripted import Answerer, ScriptedProvider, _reply, _tool_answers

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "autogpt_plugins" / "classic" / "autogpt-plugin.yaml"

#: The template's methods, each answered "cannot handle" by ``Defaults`` (they are abstract
#: in AutoGPTPluginTemplate, so every classic plugin defines them all).
_TEMPLATE_METHODS = (
    "on_response",
    "post_prompt",
    "on_planning",
    "post_planning",
    "pre_instruction",
    "on_instruction",
    "post_instruction",
    "pre_command",
    "post_command",
)
DEFAULTS = (
    "class Defaults:\n"
    + "".join(
        f"    def can_handle_{m}(self, *args, **kwargs):\n        return False\n\n"
        f"    def {m}(self, *args, **kwargs):\n        return None\n\n"
        for m in _TEMPLATE_METHODS
    )
    + "    def can_handle_chat_completion(self, *args, **kwargs):\n        return False\n\n"
    + "    def handle_chat_completion(self, *args, **kwargs):\n        return None\n"
)

HEADER = """\
from pathlib import Path

from auto_gpt_plugin_template import AutoGPTPluginTemplate

from ._defaults import Defaults

LOG = Path(@LOG@)


def log(line):
    with LOG.open("a") as f:
        f.write(line + "\\n")
"""

GREETER = """
from .words import greeting


class Greeter(Defaults, AutoGPTPluginTemplate):
    \"\"\"Greets people; a classic plugin with two commands.\"\"\"

    def __init__(self):
        super().__init__()
        self._name = "autogpt-greeter"

    def can_handle_post_prompt(self):
        return True

    def post_prompt(self, prompt):
        prompt.add_constraint("Greet people by their name.")
        prompt.add_resource("A greeting service.")
        prompt.add_command(
            "Greet someone", "greet", {"who": "<name>", "times": "<int>"}, self.greet
        )
        prompt.add_command("Fail on purpose", "fail", {"why": "<reason>"}, self.fail)
        return prompt

    def greet(self, who, times):
        log(f"greet {who} {times}")
        return greeting(who, int(times))

    def fail(self, why):
        log(f"fail {why}")
        raise RuntimeError(f"cannot do it: {why}")
"""
WORDS = 'def greeting(who, times):\n    return " ".join([f"Hello, {who}!"] * times)\n'

WATCHER = """

class Watcher(Defaults, AutoGPTPluginTemplate):
    \"\"\"Watches everything: the hooks of a classic plugin.\"\"\"

    def can_handle_on_response(self):
        return True

    def on_response(self, response, *args, **kwargs):
        return response + " [watched]"

    def can_handle_on_planning(self):
        return True

    def on_planning(self, prompt, messages):
        return f"on_planning saw {len(messages)} messages"

    def can_handle_post_planning(self):
        return True

    def post_planning(self, response):
        if response["command"]["name"].endswith("greet"):
            response["command"]["args"]["times"] = 1
        return response

    def can_handle_pre_command(self):
        return True

    def pre_command(self, command_name, arguments):
        if command_name.endswith("greet"):
            arguments = {**arguments, "who": arguments["who"].upper()}
        return command_name, arguments

    def can_handle_post_command(self):
        return True

    def post_command(self, command_name, response):
        return f"{response} (post_command saw {command_name})"

    def can_handle_report(self):
        return True

    def report(self, message):
        log("report " + message.replace("\\n", " | "))

    def can_handle_pre_instruction(self):
        return True

    def can_handle_text_embedding(self, text):
        return True

    def handle_text_embedding(self, text):
        return [0.0]
"""

ORACLE = """

class Oracle(Defaults, AutoGPTPluginTemplate):
    \"\"\"Answers the model's requests about the oracle, and the user's questions.\"\"\"

    def can_handle_chat_completion(self, messages, model, temperature, max_tokens):
        return any("ask the oracle" in m["content"] for m in messages)

    def handle_chat_completion(self, messages, model, temperature, max_tokens):
        log(f"chat_completion {len(messages)} {messages[0]['role']}")
        return "The oracle has spoken."

    def can_handle_user_input(self, user_input):
        return "colour" in user_input

    def user_input(self, user_input):
        log(f"user_input {user_input}")
        return "blue"
"""


def classic_zip(
    path: Path, package: str, body: str, log: Path, *, extra: dict[str, str] | None = None
) -> Path:
    """A classic plugin's zip as published: ``autogpt_plugins/PACKAGE/...`` under a
    repository directory, with the relative imports Auto-GPT's plugins use."""
    files = {
        "__init__.py": HEADER.replace("@LOG@", repr(str(log))) + body,
        "_defaults.py": DEFAULTS,
        **(extra or {}),
    }
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("Auto-GPT-Plugins-master/src/autogpt_plugins/__init__.py", "")
        for name, text in files.items():
            archive.writestr(f"Auto-GPT-Plugins-master/src/autogpt_plugins/{package}/{name}", text)
    return path


def _log(tmp_path: Path) -> list[str]:
    path = tmp_path / "classic.log"
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def greeter(tmp_path: Path) -> Path:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    return classic_zip(
        plugins / "greeter.zip",
        "greeter",
        GREETER,
        tmp_path / "classic.log",
        extra={"words.py": WORDS},
    )


def _config(
    tmp_path: Path,
    sources: list[str],
    allowed: list[str],
    *,
    grants: tuple[str, ...] = (),
) -> Config:
    return Config(
        path=tmp_path / "config.yaml",
        data_dir=tmp_path / "data",
        enable=frozenset({"classic"}),
        plugin_settings={
            "classic": {"sources": sources, "plugins": {name: {} for name in allowed}}
        },
        grants=DEFAULT_GRANTS | set(grants),
    )


def _load(config: Config) -> PluginSet:
    plugins = load(config, environ={})
    assert plugins.records["classic"].status == LOADED, plugins.records["classic"].reason
    return plugins


async def _run(
    tmp_path: Path,
    config: Config,
    replies: list[LLMResponse],
    *,
    answerer: Answerer | None = None,
    continuous: bool = False,
    goal: str = "greet ada",
    max_cycles: int | None = None,
) -> tuple[Any, ScriptedProvider, list[dict[str, Any]]]:
    plugins = _load(config)
    provider = ScriptedProvider(list(replies))
    plugins.providers["scripted"] = ("tests", lambda options: provider)
    if answerer is not None:
        plugins.pm.register(answerer, name="answerer")
    async with Runtime(config, plugins=plugins) as rt:
        outcome = await rt.run(
            goal,
            RunOptions(
                llm="scripted",
                workspace=tmp_path / "ws",
                continuous=continuous,
                max_cycles=max_cycles,
            ),
        )
    with Store(tmp_path / "data" / "sessions.sqlite3") as store:
        session = store.list_sessions().items[0]
        events = [{"kind": e.kind, "data": e.data} for e in store.list_events(session.id)]
    return outcome, provider, events


GREET = _reply("Greeter__greet", {"who": "ada", "times": 2}, "c1")
FINISH = _reply("finish", {"result": "done"}, "f1")


# --- loading and mapping -----------------------------------------------------------------


def test_a_zipped_plugin_becomes_bridged_commands(greeter: Path, tmp_path: Path) -> None:
    """Each add_command of post_prompt is the command PLUGIN.NAME (PLUGIN__NAME for the
    model) with its hints as a JSON Schema and the label as description; it needs
    bridge:classic; a relative source is relative to the config file's directory."""
    plugins = _load(_config(tmp_path, ["plugins/greeter.zip"], ["Greeter"]))
    assert plugins.records["classic"].unmapped == []
    bridged = {c.name: c for c in plugins.commands if c.bridged}
    assert set(bridged) == {"Greeter.greet", "Greeter.fail"}
    greet = bridged["Greeter.greet"].decl
    assert greet.description == "Greet someone"
    assert greet.parameters == {
        "type": "object",
        "properties": {
            "who": {"type": "string", "description": "<name>"},
            "times": {"type": "integer", "description": "<int>"},
        },
        "additionalProperties": False,
        "required": ["who", "times"],
    }
    assert greet.permissions == ("bridge:classic",)
    assert {"Greeter__greet", "Greeter__fail"} <= {t.name for t in plugins.commands.tool_specs()}
    assert _log(tmp_path) == []  # listed, not called


def test_classic_plugins_never_shadow_the_builtins(tmp_path: Path) -> None:
    """A classic package named like a built-in (autogpt_plugins/workspace) loads under a
    private name: autogpt_plugins.workspace stays the built-in, sys.modules gains no
    autogpt_plugins.<classic> entry, and the namespace path holds no zip."""
    body = """

class ClassicWorkspace(Defaults, AutoGPTPluginTemplate):
    def can_handle_post_prompt(self):
        return True

    def post_prompt(self, prompt):
        from . import helper

        prompt.add_command("Say where", "where", {}, helper.where)
        return prompt
"""
    helper = "def where():\n    return __name__\n"
    classic_zip(
        tmp_path / "ws.zip",
        "workspace",
        body,
        tmp_path / "classic.log",
        extra={"helper.py": helper},
    )
    before = {name for name in sys.modules if name.startswith("autogpt_plugins.")}
    plugins = _load(_config(tmp_path, ["ws.zip"], ["ClassicWorkspace"]))
    after = {name for name in sys.modules if name.startswith("autogpt_plugins.")}
    for name in after - before:
        assert name.split(".")[1] in {p.name for p in (ROOT / "autogpt_plugins").iterdir()}
    for name in after:
        module_file = getattr(sys.modules[name], "__file__", None) or ""
        assert str(ROOT / "autogpt_plugins") in module_file, name
    workspace = importlib.import_module("autogpt_plugins.workspace")
    assert Path(workspace.__file__ or "").parent == ROOT / "autogpt_plugins" / "workspace"
    assert not any(".zip" in p for p in importlib.import_module("autogpt_plugins").__path__)
    names = {c.name for c in plugins.commands}
    assert {"write_file", "read_file", "ClassicWorkspace.where"} <= names
    where = plugins.commands.get("ClassicWorkspace.where")
    classic = [n for n in sys.modules if n.endswith(".workspace.helper")]
    assert classic
    assert all(n.startswith("_autogpt_classic_") for n in classic)
    assert where.function is not None


async def test_the_agent_calls_a_zipped_plugins_command(greeter: Path, tmp_path: Path) -> None:
    """Through a real run, the model calls Greeter__greet and reads its result; events
    and traces name the canonical Greeter.greet; the plugin's prompt text reaches the
    model as quoted data with its source, not in the system message."""
    config = _config(tmp_path, ["plugins/greeter.zip"], ["Greeter"], grants=("bridge:classic",))
    outcome, provider, events = await _run(tmp_path, config, [GREET, FINISH])
    assert outcome.status == "finished"
    assert _log(tmp_path) == ["greet ada 2"]
    assert "\nHello, ada! Hello, ada!\n</data>" in _tool_answers(provider.requests[1])[0]
    commands = [e["data"]["command"] for e in events if e["kind"] == "command"]
    assert commands == ["Greeter.greet", "finish"]
    first = provider.requests[0].messages
    assert "Greet people by their name." not in first[0].content
    data = [m.content for m in first[1:] if m.role is Role.USER]
    assert any(
        "Greet people by their name." in t and "classic Auto-GPT plugin Greeter" in t for t in data
    )


async def test_consent_is_asked_and_a_refusal_runs_nothing(greeter: Path, tmp_path: Path) -> None:
    """Ungranted, each call is asked of the user (bridge:classic) with the whole call;
    refused, the plugin's function never runs; approved, it does."""
    config = _config(tmp_path, ["plugins/greeter.zip"], ["Greeter"])
    refuse = Answerer(False)
    outcome, provider, _ = await _run(tmp_path, config, [GREET, FINISH], answerer=refuse)
    assert outcome.status == "finished"
    assert [a.missing_permissions for a in refuse.asked] == [("bridge:classic",)]
    assert dict(refuse.asked[0].call.arguments) == {"who": "ada", "times": 2}
    assert _log(tmp_path) == []
    assert "did not allow command 'Greeter__greet'" in _tool_answers(provider.requests[1])[0]

    approve = Answerer(True)
    outcome, provider, _ = await _run(tmp_path, config, [GREET, FINISH], answerer=approve)
    assert len(approve.asked) == 1
    assert _log(tmp_path) == ["greet ada 2"]


async def test_unattended_runs_refuse_and_a_grant_lets_it_run(
    greeter: Path, tmp_path: Path
) -> None:
    """In continuous mode an ungranted classic command is refused without asking; with
    bridge:classic granted it runs without asking, even unattended."""
    answerer = Answerer(True)
    config = _config(tmp_path, ["plugins/greeter.zip"], ["Greeter"])
    _, provider, _ = await _run(
        tmp_path, config, [GREET, FINISH], answerer=answerer, continuous=True
    )
    assert answerer.asked == []
    assert _log(tmp_path) == []
    assert "continuous mode" in _tool_answers(provider.requests[1])[0]

    granted = _config(tmp_path, ["plugins/greeter.zip"], ["Greeter"], grants=("bridge:classic",))
    _, provider, _ = await _run(
        tmp_path, granted, [GREET, FINISH], answerer=answerer, continuous=True
    )
    assert answerer.asked == []
    assert _log(tmp_path) == ["greet ada 2"]


async def test_hooks_are_mapped_and_change_the_run(greeter: Path, tmp_path: Path) -> None:
    """on_response rewrites the model's text, on_planning adds data, post_planning and
    pre_command rewrite the call before it is checked, post_command what the model reads,
    report sees each step; methods no hook can call are reported with the reason."""
    # Watcher unzipped in the plugins directory, next to Greeter's zip.
    packed = classic_zip(tmp_path / "watcher.zip", "watcher", WATCHER, tmp_path / "classic.log")
    with zipfile.ZipFile(packed) as archive:
        archive.extractall(tmp_path / "plugins")
    config = _config(
        tmp_path,
        ["plugins"],  # a plugins directory: its zips and its unzipped plugins
        ["Greeter", "Watcher"],
        grants=("bridge:classic",),
    )
    unmapped = dict(_load(config).records["classic"].unmapped)
    assert "sub-agents" in unmapped["Watcher: pre_instruction"]
    assert "no hook for text embeddings" in unmapped["Watcher: text_embedding"]
    assert "Watcher: post_instruction" not in unmapped  # it does not handle that one

    thinking = LLMResponse(
        message=Message(Role.ASSISTANT, "I will greet ada", tool_calls=GREET.message.tool_calls),
        usage=Usage(10, 5),
    )
    outcome, provider, events = await _run(tmp_path, config, [thinking, FINISH])
    assert outcome.status == "finished"
    log = _log(tmp_path)
    # post_planning set times to 1, pre_command put the name in capitals.
    assert [line for line in log if line.startswith("greet")] == ["greet ADA 1"]
    answer = _tool_answers(provider.requests[1])[0]
    assert "\nHello, ADA! (post_command saw greet)\n</data>" in answer
    assistant = [m for m in provider.requests[1].messages if m.role is Role.ASSISTANT]
    assert assistant[0].content == "I will greet ada [watched]"
    planned = [e["data"] for e in events if e["kind"] == "plan"]
    assert planned[0]["text"] == "I will greet ada [watched]"
    texts = [[m.content for m in r.messages] for r in provider.requests]
    assert any("on_planning saw 0 messages" in t for t in texts[0])
    assert any(re.search(r"on_planning saw [1-9]\d* messages", t) for t in texts[1])
    reports = [line for line in log if line.startswith("report")]
    assert any("NEXT ACTION: COMMAND = Greeter__greet" in r for r in reports)
    assert any("SYSTEM: Command Greeter.greet returned: Hello, ADA!" in r for r in reports)


async def test_chat_completion_and_user_input_are_handled(tmp_path: Path) -> None:
    """handle_chat_completion answers the model request it says it can handle (the
    provider is not asked); user_input answers the user's questions (ask_user)."""
    classic_zip(tmp_path / "oracle.zip", "oracle", ORACLE, tmp_path / "classic.log")
    config = _config(tmp_path, ["oracle.zip"], ["Oracle"])
    _, provider, events = await _run(tmp_path, config, [], goal="ask the oracle", max_cycles=1)
    assert provider.requests == []
    assert [e["data"]["text"] for e in events if e["kind"] == "plan"] == ["The oracle has spoken."]
    assert _log(tmp_path)[0].startswith("chat_completion ")

    ask = _reply("ask_user", {"question": "Which colour?"}, "q1")
    outcome, provider, _ = await _run(tmp_path, config, [ask, FINISH], goal="pick a colour")
    assert outcome.status == "finished"
    assert "blue" in _tool_answers(provider.requests[1])[0]
    assert "user_input Which colour?" in _log(tmp_path)


# --- failures are isolated ---------------------------------------------------------------

EMPTY = "\nVALUE = 1\n"
INIT_RAISES = """

class Broken(Defaults, AutoGPTPluginTemplate):
    def __init__(self):
        raise ValueError("TWITTER_API_KEY is not set")
"""
POST_PROMPT_RAISES = """

class Grumpy(Defaults, AutoGPTPluginTemplate):
    def can_handle_post_prompt(self):
        return True

    def post_prompt(self, prompt):
        prompt.add_command("Never offered", "never", {}, print)
        raise KeyError("no prompt today")
"""
FLAKY = """

class Flaky(Defaults, AutoGPTPluginTemplate):
    def can_handle_on_response(self):
        return True

    def on_response(self, response, *args, **kwargs):
        raise RuntimeError("on_response broke")
"""
LAZY = """

class Lazy(AutoGPTPluginTemplate):
    def can_handle_post_prompt(self):
        return True
"""
NEEDS = """
import tweepy_not_installed


class Needy(Defaults, AutoGPTPluginTemplate):
    pass
"""


async def test_each_bad_source_is_reported_and_the_rest_works(
    greeter: Path, tmp_path: Path
) -> None:
    """A zip with no plugin class, a plugin whose __init__ or post_prompt raises, a missing
    import, a corrupt zip, a missing path, a plugin not allowed: each reported naming the
    source and the fix; the good plugin's commands work, a command that raises is a failed
    result the model reads, and a hook that raises is an error event."""
    log = tmp_path / "classic.log"
    plugins_dir = tmp_path / "plugins"
    classic_zip(plugins_dir / "empty.zip", "empty", EMPTY, log)
    classic_zip(plugins_dir / "broken.zip", "broken", INIT_RAISES, log)
    classic_zip(plugins_dir / "grumpy.zip", "grumpy", POST_PROMPT_RAISES, log)
    classic_zip(plugins_dir / "flaky.zip", "flaky", FLAKY, log)
    classic_zip(plugins_dir / "needy.zip", "needy", NEEDS, log)
    classic_zip(plugins_dir / "lazy.zip", "lazy", LAZY, log)
    (plugins_dir / "corrupt.zip").write_bytes(b"PK\x03\x04 this is not a zip")
    with zipfile.ZipFile(plugins_dir / "readme.zip", "w") as archive:
        archive.writestr("README.md", "no code here")
    sources = [
        f"plugins/{name}.zip"
        for name in ("empty", "broken", "grumpy", "corrupt", "readme", "missing", "needy", "lazy")
    ]
    sources += ["plugins/flaky.zip", "plugins/greeter.zip", str(plugins_dir / "greeter.zip")]
    allowed = ["Greeter", "Broken", "Grumpy", "Flaky", "Needy", "Lazy", "Ghost"]
    config = _config(tmp_path, sources, allowed, grants=("bridge:classic",))
    record = _load(config).records["classic"]
    reasons = dict(record.unmapped)
    assert (
        "no class in its package(s) empty subclasses AutoGPTPluginTemplate"
        in reasons["plugins/empty.zip"]
    )
    assert (
        "creating it failed: ValueError: TWITTER_API_KEY is not set"
        in reasons["plugins/broken.zip: Broken"]
    )
    assert (
        "it raised KeyError: 'no prompt today'; none of its commands"
        in reasons["Grumpy: post_prompt"]
    )
    assert "is not a readable zip file" in reasons["plugins/corrupt.zip"]
    assert "download it again" in reasons["plugins/corrupt.zip"]
    assert "holds no Python package" in reasons["plugins/readme.zip"]
    assert (
        "does not exist: fix the path in plugins.settings.classic.sources"
        in reasons["plugins/missing.zip"]
    )
    assert (
        "it cannot be created: it does not implement can_handle_chat_completion"
        in reasons["plugins/lazy.zip: Lazy"]
    )
    assert "No module named 'tweepy_not_installed'" in reasons["plugins/needy.zip: needy"]
    assert "pip install tweepy_not_installed" in reasons["plugins/needy.zip: needy"]
    assert (
        "already loaded from an earlier source"
        in reasons[f"{plugins_dir / 'greeter.zip'}: Greeter"]
    )
    assert "no source holds a plugin class of that name" in reasons["Ghost"]
    # Allowed but not loaded: named again, pointing at the failure above.
    assert "(or it failed, see above)" in reasons["Broken"]
    assert "(or it failed, see above)" in reasons["Needy"]

    failing = _reply("Greeter__fail", {"why": "testing"}, "c0").message.tool_calls
    fail = LLMResponse(message=Message(Role.ASSISTANT, "Trying.", tool_calls=failing))
    outcome, provider, events = await _run(tmp_path, config, [fail, GREET, FINISH])
    assert outcome.status == "finished"
    assert _log(tmp_path) == ["fail testing", "greet ada 2"]
    failed = _tool_answers(provider.requests[1])[0]
    assert "Greeter.fail of the classic plugin Greeter failed: RuntimeError: cannot do it" in failed
    assert "\nHello, ada! Hello, ada!\n</data>" in _tool_answers(provider.requests[2])[1]
    errors = [e["data"] for e in events if e["kind"] == "error"]
    assert errors
    assert errors[0]["plugin"] == "classic"
    assert (
        "classic plugin Flaky (plugins/flaky.zip): on_response raised RuntimeError"
        in errors[0]["error"]
    )


def test_a_plugin_not_allowed_is_reported_not_loaded(greeter: Path, tmp_path: Path) -> None:
    """A classic plugin found in a source but not in the allowlist is never created; the
    report says how to allow it."""
    record = _load(_config(tmp_path, ["plugins/greeter.zip"], [])).records["classic"]
    assert dict(record.unmapped) == {
        "plugins/greeter.zip: Greeter": (
            "not loaded: it is not in the allowlist; add Greeter: {} under "
            "plugins.settings.classic.plugins to load it"
        )
    }


def test_a_package_naming_no_allowed_class_is_never_imported(tmp_path: Path) -> None:
    """Reading a source runs no code of a package whose __init__.py defines or imports no
    allowed class name: allowing one plugin does not run every other package found beside
    it. A package that imports its plugin class from a submodule is imported when that
    name is allowed."""
    log = tmp_path / "classic.log"
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    ran_on_import = '\nlog("imported")\n'
    classic_zip(plugins / "stranger.zip", "stranger", ran_on_import + GREETER, log)
    classic_zip(
        plugins / "split.zip",
        "split",
        '\nfrom ._plugin import Split\nlog("split imported")\n',
        log,
        extra={
            "_plugin.py": "from auto_gpt_plugin_template import AutoGPTPluginTemplate\n"
            "from ._defaults import Defaults\n\n\n"
            "class Split(Defaults, AutoGPTPluginTemplate):\n    pass\n"
        },
    )
    sources = ["plugins/stranger.zip", "plugins/split.zip"]
    record = _load(_config(tmp_path, sources, ["Split"])).records["classic"]
    assert dict(record.unmapped) == {
        "plugins/stranger.zip: Greeter": (
            "not loaded: it is not in the allowlist; add Greeter: {} under "
            "plugins.settings.classic.plugins to load it"
        )
    }
    assert "imported" not in _log(tmp_path)
    assert "split imported" in _log(tmp_path)


def test_a_package_whose_names_cannot_be_read_is_never_imported(tmp_path: Path) -> None:
    """An __init__.py that imports * (or is not Python) cannot say which classes it holds
    without running: it is reported with the fix, and none of its code runs, even with
    the class it would define allowed. A class imported inside a top-level try is seen."""
    log = tmp_path / "classic.log"
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    classic_zip(
        plugins / "star.zip",
        "star",
        '\nfrom os.path import *\nlog("star imported")\n' + GREETER,
        log,
    )
    classic_zip(
        plugins / "guarded.zip",
        "guarded",
        "\ntry:\n    from ._plugin import Guarded\nexcept ImportError:\n    raise\n"
        'log("guarded imported")\n',
        log,
        extra={
            "_plugin.py": "from auto_gpt_plugin_template import AutoGPTPluginTemplate\n"
            "from ._defaults import Defaults\n\n\n"
            "class Guarded(Defaults, AutoGPTPluginTemplate):\n    pass\n"
        },
    )
    sources = ["plugins/star.zip", "plugins/guarded.zip"]
    plugins_set = _load(_config(tmp_path, sources, ["Greeter", "Guarded"]))
    record = plugins_set.records["classic"]
    reasons = dict(record.unmapped)
    star = reasons["plugins/star.zip: star"]
    assert star.startswith("not imported: its ")
    assert "imports * (from os.path import *)" in star
    assert "from .module import PluginClass" in star
    assert "star imported" not in _log(tmp_path)
    assert "guarded imported" in _log(tmp_path)
    # Greeter is allowed but was never found: its package was not imported.
    assert "Greeter" in reasons
    assert "Guarded" not in reasons


KEEPER = """
import sqlite3
import threading
import time


class Keeper(Defaults, AutoGPTPluginTemplate):
    \"\"\"Keeps a SQLite connection made in __init__, as Auto-GPT 0.4 plugins may: usable
    only in the thread that made it.\"\"\"

    def __init__(self):
        super().__init__()
        self.db = sqlite3.connect(":memory:")
        self.threads = {threading.get_ident()}

    def can_handle_post_prompt(self):
        self.threads.add(threading.get_ident())
        return True

    def post_prompt(self, prompt):
        prompt.add_command("Keep a value", "keep", {"value": "<text>"}, self.keep)
        prompt.add_command("Keep a value, loudly", "keep_loud", {"value": "<text>"}, self.loud)
        return prompt

    def keep(self, value):
        self.threads.add(threading.get_ident())
        (kept,) = self.db.execute("SELECT ?", (value,)).fetchone()
        return f"kept {kept} in {len(self.threads)} thread(s)"

    def loud(self, value):
        return self.keep(value.upper())

    def can_handle_pre_command(self):
        return True

    def pre_command(self, command_name, arguments):
        log(f"pre_command {command_name}")
        if command_name == "keep" and arguments.get("value") == "shout":
            return "keep_loud", arguments
        return command_name, arguments

    def can_handle_post_command(self):
        return True

    def post_command(self, command_name, response):
        # Blocking, as a plugin of a single-threaded agent may: the event loop goes on.
        time.sleep(0.3)
        self.threads.add(threading.get_ident())
        log(f"post_command {command_name}")
        return response
"""


async def test_a_plugin_runs_in_one_thread_of_its_own_off_the_event_loop(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Creating a classic plugin, its post_prompt, its commands and its hooks all run in
    one thread (a SQLite connection made in __init__ works in its commands), never on the
    event loop (a post_command that sleeps blocks nothing); pre_command and post_command
    are given add_command's names, and a rename to another of its commands is followed."""
    log = tmp_path / "classic.log"
    (tmp_path / "plugins").mkdir()
    classic_zip(tmp_path / "plugins" / "keeper.zip", "keeper", KEEPER, log)
    config = _config(tmp_path, ["plugins/keeper.zip"], ["Keeper"], grants=["bridge:classic"])
    replies = [
        _reply("Keeper__keep", {"value": "apple"}, "k1"),
        _reply("Keeper__keep", {"value": "shout"}, "k2"),
        FINISH,
    ]
    outcome, provider, events = await _run(tmp_path, config, replies)
    assert outcome.status == "finished"
    results = [e["data"] for e in events if e["kind"] == "result"]
    assert results[0]["output"] == "kept apple in 1 thread(s)"
    assert results[1]["command"] == "Keeper.keep_loud"
    assert results[1]["output"] == "kept SHOUT in 1 thread(s)"
    assert _log(tmp_path) == [
        "pre_command keep",
        "post_command keep",
        "pre_command keep",
        "post_command keep_loud",
        "pre_command finish",
        "post_command finish",
    ]
    assert "blocked the event loop" not in capfd.readouterr().err


PICKY = """

class Picky(Defaults, AutoGPTPluginTemplate):
    def can_handle_pre_command(self):
        raise RuntimeError("cannot tell")
"""


async def test_a_failing_pre_command_check_lets_no_command_through(
    greeter: Path, tmp_path: Path
) -> None:
    """A can_handle_pre_command that raises is a failing check, as a raising pre_command
    is: the command is refused, not run unchecked."""
    classic_zip(tmp_path / "plugins" / "picky.zip", "picky", PICKY, tmp_path / "classic.log")
    sources = ["plugins/greeter.zip", "plugins/picky.zip"]
    config = _config(tmp_path, sources, ["Greeter", "Picky"], grants=["bridge:classic"])
    outcome, provider, events = await _run(tmp_path, config, [GREET, FINISH])
    assert not any(line.startswith("greet") for line in _log(tmp_path))
    results = [e["data"] for e in events if e["kind"] == "result"]
    assert results[0]["ok"] is False
    assert "can_handle_pre_command raised RuntimeError: cannot tell" in results[0]["error"]


COUNTER = """

class Counter(Defaults, AutoGPTPluginTemplate):
    def __init__(self):
        super().__init__()
        log("created")
        self.count = 0

    def can_handle_post_prompt(self):
        return True

    def post_prompt(self, prompt):
        prompt.add_command("Count up", "count_up", {}, self.count_up)
        return prompt

    def count_up(self):
        self.count += 1
        return str(self.count)
"""


async def test_a_reload_keeps_an_unchanged_plugin_and_unloads_a_removed_one(
    tmp_path: Path,
) -> None:
    """Loading again with the same zip keeps the plugin as it is (not created again: its
    state goes on); taken out of the allowlist it is unloaded, and a command of it that a
    cycle still holds fails at once, saying so, instead of waiting."""
    classic_zip(tmp_path / "counter.zip", "counter", COUNTER, tmp_path / "classic.log")
    bridge = ClassicBridge()
    commands: dict[str, Any] = {}
    reported: list[tuple[str, str]] = []

    def register(name: str, function: Any, **kwargs: Any) -> bool:
        commands[name] = function
        return True

    def load_with(allowed: dict[str, Any]) -> None:
        settings_ = PluginSettings(
            "classic", {"sources": ["counter.zip"], "plugins": allowed}, config_dir=tmp_path
        )
        bridge.register_bridged_commands(
            register=register, settings=settings_, unmapped=lambda w, r: reported.append((w, r))
        )

    load_with({"Counter": {}})
    first = commands["Counter.count_up"]
    assert (await first()).output == "1"
    load_with({"Counter": {}})
    assert (await commands["Counter.count_up"]()).output == "2"
    assert _log(tmp_path) == ["created"]
    load_with({})
    with trio.fail_after(10):
        gone = await first()
    assert gone.ok is False
    assert "was unloaded" in (gone.error or "")


STUCK = """

class Stuck(Defaults, AutoGPTPluginTemplate):
    def can_handle_post_prompt(self):
        return True

    def post_prompt(self, prompt):
        import time
        time.sleep(3)
        return prompt
"""


def test_a_plugin_stuck_at_load_is_not_loaded(
    greeter: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plugin code that does not return within the load's limit: the plugin is reported
    as not loaded, the others load."""
    monkeypatch.setattr(classic_module, "LOAD_SECONDS", 0.5)
    classic_zip(tmp_path / "plugins" / "stuck.zip", "stuck", STUCK, tmp_path / "classic.log")
    sources = ["plugins/greeter.zip", "plugins/stuck.zip"]
    plugins = _load(_config(tmp_path, sources, ["Greeter", "Stuck"]))
    reasons = dict(plugins.records["classic"].unmapped)
    assert (
        "not loaded: its post_prompt did not return within 0.5 s"
        in reasons["plugins/stuck.zip: Stuck"]
    )
    names = {c.name for c in plugins.commands if c.bridged}
    assert names == {"Greeter.greet", "Greeter.fail"}


async def test_a_call_given_up_on_never_runs_and_a_closed_thread_runs_nothing() -> None:
    """PluginThread: a call whose caller was cancelled before it started is skipped; after
    close, a call fails at once with PluginClosed."""
    thread = PluginThread("t")
    release = threading.Event()
    ran: list[str] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(thread.run, lambda: release.wait(10))
        await trio.sleep(0.05)
        with trio.move_on_after(0.05):
            await thread.run(lambda: ran.append("late"))
        release.set()
    assert await thread.run(lambda: "after") == "after"
    assert ran == []
    thread.close()
    with pytest.raises(PluginClosed), trio.fail_after(5):
        await thread.run(lambda: ran.append("closed"))
    assert ran == []


def test_a_zip_that_unpacks_too_large_is_refused_unread(
    greeter: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A zip unpacking to more than a plugin could need (a zip bomb) is refused from its
    directory alone, before anything in it is decompressed; the others load."""
    monkeypatch.setattr(classic_loading, "_MAX_UNPACKED", 100_000)
    with zipfile.ZipFile(tmp_path / "plugins" / "bomb.zip", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("autogpt_plugins/bomb/__init__.py", "0" * 200_000)
    config = _config(tmp_path, ["plugins/bomb.zip", "plugins/greeter.zip"], ["Greeter"])
    plugins = _load(config)
    reason = dict(plugins.records["classic"].unmapped)["plugins/bomb.zip"]
    assert "unpacks to 200,000 bytes, more than a plugin's 100,000" in reason
    assert "Greeter.greet" in {c.name for c in plugins.commands}


# --- hints, names ------------------------------------------------------------------------


@given(strategies.classic_hints())
def test_argument_hints_become_json_schema(case: tuple[object, str, bool]) -> None:
    """<int>/<integer> -> integer, <float>/<number> -> number, <bool>/<boolean> -> boolean,
    <list> or a list -> array, anything else a string described by its hint; an argument
    is required unless its hint says optional."""
    hint, kind, required = case
    schema, needed = hint_schema(hint)
    assert schema["type"] == kind
    assert needed is required
    if isinstance(hint, str):
        assert schema["description"] == hint


_SANITISE = re.compile(r"[^A-Za-z0-9_-]")
_work = itertools.count()


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            strategies.classic_names,
            st.dictionaries(strategies.classic_names, strategies.classic_hints(), max_size=3),
        ),
        min_size=1,
        max_size=4,
    )
)
def test_any_command_names_and_arguments_map_or_are_reported(
    commands: list[tuple[str, dict[str, tuple[object, str, bool]]]],
) -> None:
    """Whatever a plugin names its commands and arguments, each becomes PLUGIN.NAME (other
    characters than letters, digits, '_' and '-' become '_') with one property per
    argument, or is reported with the reason; registering never raises."""
    manifest = load_manifest(MANIFEST)
    work = Path(tempfile.mkdtemp(prefix=f"classic{next(_work)}-"))
    listed = [(name, {arg: case[0] for arg, case in args.items()}) for name, args in commands]
    body = f"""

COMMANDS = {listed!r}


class Named(Defaults, AutoGPTPluginTemplate):
    def can_handle_post_prompt(self):
        return True

    def post_prompt(self, prompt):
        for name, args in COMMANDS:
            prompt.add_command("A command", name, args, lambda **kw: "ok")
        return prompt
"""
    classic_zip(work / "named.zip", "named", body, work / "classic.log")
    registry = CommandRegistry()
    reported: list[tuple[str, str]] = []
    register = registry.bridge_binder(manifest, ["Named"], lambda w, r: reported.append((w, r)))
    bridge = ClassicBridge()
    settings_ = PluginSettings(
        "classic", {"sources": ["named.zip"], "plugins": {"Named": {}}}, config_dir=work
    )
    bridge.register_bridged_commands(
        register=register, settings=settings_, unmapped=lambda w, r: reported.append((w, r))
    )
    seen: set[str] = set()
    for name, args in commands:
        sanitised = _SANITISE.sub("_", name.strip())
        if not sanitised:
            assert ("Named: add_command", "it gave no command name") in reported
            continue
        if sanitised in seen:
            assert any(f"'Named.{sanitised}'" in r and "already" in r for _, r in reported)
            continue
        seen.add(sanitised)
        command = registry.get(f"Named.{sanitised}")
        assert command.decl.parameters["properties"].keys() == args.keys()
        required = [arg for arg, case in args.items() if case[2]]
        assert command.decl.parameters.get("required", []) == required
        assert command.decl.parameters == parameters_schema(
            {arg: case[0] for arg, case in args.items()}
        )
    assert len(registry) == len(seen)


def test_packages_are_found_as_auto_gpt_found_them() -> None:
    """autogpt_plugins/NAME/__init__.py at any depth names the packages (subpackages and
    other packages aside); without one, the top-most packages."""
    names = [
        "repo/src/autogpt_plugins/__init__.py",
        "repo/src/autogpt_plugins/email/__init__.py",
        "repo/src/autogpt_plugins/email/sub/__init__.py",
        "repo/src/autogpt_plugins/twitter/__init__.py",
        "repo/tests/__init__.py",
        "__MACOSX/repo/src/autogpt_plugins/email/__init__.py",
    ]
    assert package_dirs(names) == [
        ("repo/src/autogpt_plugins", "email"),
        ("repo/src/autogpt_plugins", "twitter"),
    ]
    assert package_dirs(["hello/__init__.py", "hello/sub/__init__.py", "README"]) == [("", "hello")]


# --- the command line --------------------------------------------------------------------


def test_import_classic_writes_the_config_and_check_lists_the_rest(
    greeter: Path, tmp_path: Path
) -> None:
    """import-classic enables the classic plugin, adds the plugins directory next to
    Auto-GPT's file, allows its enabled plugins and keeps the rest of the config; check and
    info then show what loaded and what did not."""
    autogpt_dir = tmp_path / "Auto-GPT"
    (autogpt_dir / "plugins").mkdir(parents=True)
    greeter.rename(autogpt_dir / "plugins" / "greeter.zip")
    classic_zip(autogpt_dir / "plugins" / "watcher.zip", "watcher", WATCHER, tmp_path / "x.log")
    (autogpt_dir / "plugins_config.yaml").write_text(
        "Greeter:\n  config: {}\n  enabled: true\nWatcher:\n  config: {}\n  enabled: false\n"
    )
    existing = {
        "plugins": {
            "enable": ["web"],
            "settings": {
                "web": {"timeout": 7},
                "classic": {"plugins": {"Watcher": {}}, "max_output": 500},
            },
        },
        "permissions": {"grant": ["fs.read", "fs.write"]},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(existing))
    env = cli_env(tmp_path)
    done = autogpt("plugins", "import-classic", str(autogpt_dir / "plugins_config.yaml"), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    source = str((autogpt_dir / "plugins").resolve())
    assert "Read 2 classic plugin(s)" in done.stdout
    assert "enabled Greeter; disabled Watcher" in done.stdout
    assert f"Added the source {source}" in done.stdout
    assert "Taken out of plugins.settings.classic.plugins" in done.stdout
    written = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert written["plugins"]["enable"] == ["classic", "web"]
    assert written["plugins"]["settings"]["web"] == {"timeout": 7}
    assert written["plugins"]["settings"]["classic"] == {
        "plugins": {"Greeter": {}},
        "max_output": 500,
        "sources": [source],
    }
    assert written["permissions"] == {"grant": ["fs.read", "fs.write"]}

    again = autogpt("plugins", "import-classic", str(autogpt_dir / "plugins_config.yaml"), env=env)
    assert again.returncode == 0, again.stderr
    assert "was already in plugins.settings.classic.sources" in again.stdout
    assert yaml.safe_load((tmp_path / "config.yaml").read_text()) == written

    check = autogpt("plugins", "check", env=env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert (
        f"! classic: not mapped: {source}/watcher.zip: Watcher: not loaded: it is not in the "
        "allowlist" in check.stdout
    )
    info = autogpt("plugins", "info", "classic", "--json", env=env)
    assert info.returncode == 0, info.stderr
    names = [c["name"] for c in json.loads(info.stdout)["bridged"]["commands"]]
    assert sorted(names) == ["Greeter.fail", "Greeter.greet"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- Greeter\n", "must map each plugin's name"),
        ("Greeter: yes\n", "the entry 'Greeter' must be {config: {...}, enabled: true or false}"),
        ("Greeter:\n  enabled: maybe\n", "its enabled is 'maybe'"),
        ("Greeter: {enabled: true\n", "not valid YAML"),
        ("Greeter bot: {enabled: true}\n", "'Greeter bot' is not a plugin name"),
    ],
)
def test_import_classic_refuses_a_malformed_file(tmp_path: Path, text: str, message: str) -> None:
    """A plugins_config.yaml that is not Auto-GPT's shape is an error naming the file and
    the entry; the config file is not touched."""
    (tmp_path / "plugins_config.yaml").write_text(text)
    (tmp_path / "config.yaml").write_text("plugins:\n  enable: [web]\n")
    done = autogpt(
        "plugins", "import-classic", str(tmp_path / "plugins_config.yaml"), env=cli_env(tmp_path)
    )
    assert done.returncode == 2
    assert "plugins_config.yaml" in done.stderr
    assert message in done.stderr
    assert (tmp_path / "config.yaml").read_text() == "plugins:\n  enable: [web]\n"


def test_manifest_declares_a_bridge_off_by_default() -> None:
    """The manifest is valid, off by default, its prefixes are the allowlist's keys, and
    its bridged commands need nothing but bridge:classic."""
    manifest = load_manifest(MANIFEST)
    assert manifest.enabled_by_default is False
    assert manifest.commands == ()
    assert manifest.bridged is not None
    assert manifest.bridged.prefixes_from == "plugins"
    assert manifest.bridged.permissions == ()
    assert textwrap.dedent(manifest.description)


def _docs_example() -> str:
    text = (ROOT / "docs" / "bridges.md").read_text(encoding="utf-8")
    section = text.split("## Classic Auto-GPT plugins", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None
    return match.group(1)


def test_the_documented_example_loads_and_runs(tmp_path: Path) -> None:
    """The classic plugin of docs/bridges.md, zipped as autogpt_plugins/weather, offers
    AutoGPTWeather.forecast with an integer 'days', and the command answers."""
    with zipfile.ZipFile(tmp_path / "weather.zip", "w") as archive:
        archive.writestr("autogpt_plugins/weather/__init__.py", _docs_example())
    plugins = _load(_config(tmp_path, ["weather.zip"], ["AutoGPTWeather"]))
    assert plugins.records["classic"].unmapped == []
    command = plugins.commands.get("AutoGPTWeather__forecast")
    assert command.name == "AutoGPTWeather.forecast"
    assert command.decl.parameters["properties"]["days"]["type"] == "integer"
    result = trio.run(functools.partial(command.function, city="Oslo", days=2))
    assert result.output == "Oslo: sunny for 2 day(s)"


def test_a_replaced_zip_is_imported_afresh(greeter: Path, tmp_path: Path) -> None:
    """Loading plugins again after a zip was replaced runs the new code, not the old
    module (the private name follows the file's version)."""
    config = _config(tmp_path, ["plugins/greeter.zip"], ["Greeter"])
    first = _load(config).commands.get("Greeter.greet")
    words = WORDS.replace("Hello", "Howdy")
    classic_zip(greeter, "greeter", GREETER, tmp_path / "classic.log", extra={"words.py": words})
    os.utime(greeter, ns=(1, 1))  # another version even if the clock did not move
    second = _load(config).commands.get("Greeter.greet")
    said = [trio.run(functools.partial(c.function, who="ada", times=1)) for c in (first, second)]
    assert [r.output for r in said] == ["Hello, ada!", "Howdy, ada!"]
