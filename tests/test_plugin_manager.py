"""The agent asks for a plugin (the built-in ``plugin_manager`` and the core's
``CommandContext.plugins``): it finds plugins, and enables or installs one only when the
user says yes, every time, shown the manifest; unattended runs are refused. Enabled, the
plugin's commands are offered from the next cycle, without a restart.

In-process tests run a real runtime with a scripted model; the end-to-end tests pip
install a real wheel listed in a local plugin index into a throwaway virtualenv and run
the real CLI on a pseudo-terminal (``tests/venvkit.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml

from autogpt_core._config import load_config
from autogpt_core.agent._options import RunOptions
from autogpt_core.agent._runtime import Channel, Runtime
from autogpt_core.plugins._loader import LOADED, load
from hookspecs import Confirmation, ConfirmationRequest

from .distfactory import write_wheel
from .scripted import ScriptedProvider, _reply, _tool_answers
from .venvkit import Venv


def _config_file(home: Path, **plugins: Any) -> Path:
    path = home / "config.yaml"
    raw = {"plugins": {"enable": ["plugin_manager"], **plugins}}
    path.write_text(yaml.safe_dump(raw), "utf-8")
    return path


async def _run(
    tmp_path: Path, replies: list[Any], *, answer: bool | None, continuous: bool = False
) -> tuple[Any, ScriptedProvider, list[ConfirmationRequest], Runtime]:
    config = load_config(_config_file(tmp_path))
    config = attrs.evolve(config, data_dir=tmp_path / "data")
    plugins = load(config, environ={})
    provider = ScriptedProvider(list(replies))
    plugins.providers["scripted"] = ("tests", lambda options: provider)
    asked: list[ConfirmationRequest] = []

    async def consent(request: ConfirmationRequest) -> Confirmation | None:
        asked.append(request)
        if answer is None:
            return None
        return Confirmation(approved=answer, reason="test said so", remember=True)

    async with Runtime(config, plugins=plugins) as rt:
        options = RunOptions(llm="scripted", workspace=tmp_path / "ws", continuous=continuous)
        outcome = await rt.run("use the shell", options, channel=Channel(consent=consent))
    return outcome, provider, asked, rt


def _tools(request: Any) -> set[str]:
    return {tool.name for tool in request.tools}


SCRIPT = [
    _reply("find_plugins", {"query": "shell commands"}, "c1"),
    _reply("enable_plugin", {"plugin_id": "shell", "reason": "to list the files"}, "c2"),
    _reply("finish", {"result": "done"}, "c3"),
]


async def test_enabling_asks_showing_the_manifest_and_offers_its_commands_next(
    tmp_path: Path,
) -> None:
    outcome, provider, asked, rt = await _run(tmp_path, SCRIPT, answer=True)
    assert outcome.status == "finished"
    first, second, third = provider.requests
    found = _tool_answers(second)[-1]
    assert "- shell (disabled)" in found
    assert "run_shell" in found
    # Asked once, with the manifest: what it is, its commands, its permissions.
    (request,) = asked
    assert request.call.command == "enable_plugin"
    assert request.missing_permissions == ("install",)
    assert "Enable plugin 'shell'? to list the files" == request.description
    assert "run_shell" in request.reason
    assert "permissions:" in request.reason
    assert "run_shell" not in _tools(first) | _tools(second)
    assert "Enabled plugin 'shell'" in _tool_answers(third)[-1]
    assert "run_shell" in _tools(third)  # the next cycle, no restart
    assert rt.plugins.records["shell"].status == LOADED
    assert "shell" in yaml.safe_load((tmp_path / "config.yaml").read_text())["plugins"]["enable"]


@pytest.mark.parametrize("answer", [False, None])
async def test_a_refusal_changes_nothing(tmp_path: Path, answer: bool | None) -> None:
    before = _config_file(tmp_path).read_text()
    outcome, provider, asked, rt = await _run(tmp_path, SCRIPT, answer=answer)
    assert outcome.status == "finished"
    assert len(asked) == 1
    told = _tool_answers(provider.requests[2])[-1]
    assert "plugin 'shell' was not enabled: enabling plugin 'shell' was not allowed" in told
    assert "run_shell" not in _tools(provider.requests[2])
    assert (tmp_path / "config.yaml").read_text() == before
    assert rt.plugins.records["shell"].status != LOADED


async def test_granting_install_does_not_skip_the_question(tmp_path: Path) -> None:
    config = load_config(_config_file(tmp_path, settings={}))
    granted = attrs.evolve(
        config, data_dir=tmp_path / "data", grants=config.grants | {"install", "shell"}
    )
    plugins = load(granted, environ={})
    provider = ScriptedProvider(list(SCRIPT))
    plugins.providers["scripted"] = ("tests", lambda options: provider)
    asked: list[ConfirmationRequest] = []

    async def consent(request: ConfirmationRequest) -> Confirmation:
        asked.append(request)
        return Confirmation(approved=False)

    async with Runtime(granted, plugins=plugins) as rt:
        options = RunOptions(llm="scripted", workspace=tmp_path / "ws")
        await rt.run("use the shell", options, channel=Channel(consent=consent))
    assert [r.call.command for r in asked] == ["enable_plugin"]


async def test_unattended_runs_are_refused_without_a_question(tmp_path: Path) -> None:
    before = _config_file(tmp_path).read_text()
    outcome, provider, asked, rt = await _run(tmp_path, SCRIPT, answer=True, continuous=True)
    assert asked == []
    assert "was not allowed" in _tool_answers(provider.requests[2])[-1]
    assert (tmp_path / "config.yaml").read_text() == before


async def test_without_an_index_nothing_is_installed_or_contacted(tmp_path: Path) -> None:
    script = [
        _reply("install_plugin", {"plugin_id": "weather", "reason": "forecast"}, "c1"),
        _reply("finish", {"result": "done"}, "c2"),
    ]
    outcome, provider, asked, rt = await _run(tmp_path, script, answer=True)
    assert asked == []
    assert "no plugin index is configured" in _tool_answers(provider.requests[1])[-1]


# --- end to end: a local index, a wheel the test builds, the real CLI -----------------

WEATHER_MANIFEST = {
    "manifest_version": 1,
    "id": "weather",
    "name": "Weather",
    "version": "1.0",
    "description": "Weather forecasts for the agent.",
    "codeowners": ["@weather-team"],
    "permissions": [],
    "capabilities": {
        "commands": [
            {
                "name": "forecast",
                "description": "Tomorrow's weather in a city.",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string", "description": "A city."}},
                    "required": ["city"],
                    "additionalProperties": False,
                },
                "permissions": [],
            }
        ]
    },
}
WEATHER_CODE = """\
from hookspecs import hookimpl


def forecast(city: str) -> str:
    return f"Sunny tomorrow in {city}."


@hookimpl
def register_commands(register):
    register("forecast", forecast)
"""
GOAL = "What will the weather be in Paris?"


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plugin index listing a weather plugin, and the wheel it points at."""
    out = tmp_path_factory.mktemp("index")
    (out / "wheels").mkdir()
    wheel = write_wheel(
        out / "wheels",
        "autogpt-plugin-weather",
        "1.0",
        {
            "autogpt_plugin_weather/__init__.py": WEATHER_CODE,
            "autogpt_plugin_weather/autogpt-plugin.yaml": yaml.safe_dump(WEATHER_MANIFEST),
        },
        entry_points="[autogpt.plugins]\nweather = autogpt_plugin_weather\n",
    )
    # An attacker's entries: a plugin whose wheel declares more than the index shows, one
    # that brings another plugin with it (a pip dependency), and a pip option.
    shown = {**WEATHER_MANIFEST, "capabilities": {"commands": []}, "enabled_by_default": True}
    greedy = {**shown, "id": "greedy", "name": "Greedy"}
    carrier = {**shown, "id": "carrier", "name": "Carrier"}
    hidden = {**shown, "id": "hidden", "name": "Hidden", "permissions": ["network"]}
    for manifest, actual, requires in (
        (greedy, {**greedy, "permissions": ["shell"]}, ()),
        (carrier, carrier, ("autogpt-plugin-hidden",)),
        (hidden, hidden, ()),
    ):
        package = f"autogpt_plugin_{manifest['id']}"
        write_wheel(
            out / "wheels",
            f"autogpt-plugin-{manifest['id']}",
            "1.0",
            {
                f"{package}/__init__.py": "",
                f"{package}/autogpt-plugin.yaml": yaml.safe_dump(actual),
            },
            entry_points=f"[autogpt.plugins]\n{manifest['id']} = {package}\n",
            requires=requires,
        )
    document = {
        "plugins": [
            {"requirement": str(wheel.relative_to(out)), "manifest": WEATHER_MANIFEST},
            {"requirement": "autogpt-plugin-greedy", "manifest": greedy},
            {"requirement": "autogpt-plugin-carrier", "manifest": carrier},
            {"requirement": "-rreqs.txt", "manifest": {**shown, "id": "sneaky"}},
        ]
    }
    (out / "index.json").write_text(json.dumps(document), "utf-8")
    return out


def _recording(path: Path, plugin_id: str = "weather") -> Path:
    calls = [
        ("find_plugins", {"query": "weather"}),
        ("install_plugin", {"plugin_id": plugin_id, "reason": "to answer the question"}),
        ("forecast", {"city": "Paris"}),
        ("finish", {"result": "Sunny."}),
    ]
    exchanges = [
        {
            "response": {
                "content": "",
                "tool_calls": [{"id": f"call_{n}", "name": name, "arguments": args}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5},
            }
        }
        for n, (name, args) in enumerate(calls)
    ]
    path.write_text(json.dumps({"format": "autogpt-replay", "version": 1, "exchanges": exchanges}))
    return path


@pytest.fixture
def venv(tmp_path: Path, index: Path) -> Venv:
    home = tmp_path / "home"
    home.mkdir()
    made = Venv(tmp_path / "venv", index / "wheels", home)
    _config_file(home, index=str(index / "index.json"))
    return made


def _run_args(venv: Venv, *extra: str, plugin_id: str = "weather") -> list[str]:
    recording = _recording(venv.home / f"{plugin_id}.replay.json", plugin_id)
    return ["run", GOAL, "--llm", f"replay:{recording}", "--no-strict", *extra]


@pytest.mark.slow
def test_the_agent_installs_a_plugin_of_the_index_when_the_user_says_yes(venv: Venv) -> None:
    code, screen, rest = venv.answer(*_run_args(venv), reply="y", question=b"[y/N/a(lways)] ")
    assert code == 0, screen + rest
    # The question showed the manifest of the index's plugin.
    assert "Install and enable plugin 'weather'" in screen
    assert "forecast" in screen
    assert "codeowners: @weather-team" in screen
    assert "autogpt_plugin_weather" in venv.installed()
    # Its command ran in the same session, the cycle after.
    assert "Sunny tomorrow in Paris." in rest
    assert venv.plugins()["weather"] == "loaded"


@pytest.mark.slow
def test_refused_interactively_nothing_is_installed(venv: Venv) -> None:
    before = venv.config.read_text()
    code, screen, rest = venv.answer(*_run_args(venv), reply="n", question=b"[y/N/a(lways)] ")
    assert "Install and enable plugin 'weather'" in screen
    assert "was not installed: installing plugin 'weather' was not allowed" in rest
    assert "autogpt_plugin_weather" not in venv.installed()
    assert venv.config.read_text() == before


@pytest.mark.slow
def test_unattended_the_agent_installs_nothing(venv: Venv) -> None:
    before = venv.config.read_text()
    done = venv.autogpt(*_run_args(venv, "--continuous"))
    assert (
        "was not installed: installing plugin 'weather' was not allowed"
        in done.stdout + done.stderr
    )
    assert "Install and enable plugin" not in done.stdout
    assert "autogpt_plugin_weather" not in venv.installed()
    assert venv.config.read_text() == before


def test_plugins_search_looks_the_index_up(venv: Venv, index: Path) -> None:
    found = venv.autogpt("plugins", "search", "forecast")
    assert found.returncode == 0, found.stderr
    assert "weather 1.0  Weather forecasts for the agent." in found.stdout
    assert "commands: forecast; autogpt plugins install " in found.stdout
    listed = json.loads(venv.autogpt("plugins", "search", "--json").stdout)
    assert [row["id"] for row in listed] == ["weather", "greedy", "carrier"]
    assert venv.autogpt("plugins", "search", "zzz").stdout.startswith("No plugin of ")
    venv.config.write_text("plugins: {}\n")
    unset = venv.autogpt("plugins", "search", "weather")
    assert unset.returncode != 0
    assert "no plugin index is configured" in unset.stderr


def test_a_bad_index_entry_is_left_out_with_its_reason(tmp_path: Path) -> None:
    from autogpt_core.plugins._index import read_index

    good = {**WEATHER_MANIFEST}
    bad = {**WEATHER_MANIFEST, "id": "Bad Id"}
    path = tmp_path / "index.json"
    path.write_text(
        json.dumps(
            {
                "plugins": [
                    {"requirement": "w.whl", "manifest": good},
                    {"requirement": "x", "manifest": bad},
                    {"requirement": "", "manifest": good},
                    "nonsense",
                ]
            }
        )
    )
    index = read_index(str(path))
    assert [e.manifest.id for e in index.entries] == ["weather"]
    assert index.entries[0].requirement == str(tmp_path / "w.whl")
    assert len(index.problems) == 3
    assert "plugins[1]" in index.problems[0]
    path.write_text("[]")
    with pytest.raises(Exception, match="is not an index"):
        read_index(str(path))


@pytest.mark.slow
def test_a_plugin_asking_for_more_than_the_index_showed_is_left_disabled(venv: Venv) -> None:
    """The index shows greedy without permissions; its wheel declares shell. After the
    user's yes to what was shown, it is installed but disabled, for good (it is on by
    default, so only plugins.disable keeps it off)."""
    code, screen, rest = venv.answer(
        *_run_args(venv, plugin_id="greedy"), reply="y", question=b"[y/N/a(lways)] "
    )
    assert "asks for more than the index showed (permissions shell)" in rest
    assert "autogpt_plugin_greedy" in venv.installed()
    assert "greedy" in yaml.safe_load(venv.config.read_text())["plugins"]["disable"]
    assert venv.plugins()["greedy"] == "disabled"


@pytest.mark.slow
def test_a_plugin_pip_brings_along_unshown_is_left_disabled(venv: Venv) -> None:
    """carrier depends on the distribution of another plugin, hidden, which the user was
    never shown: carrier is enabled, hidden is installed but disabled."""
    code, screen, rest = venv.answer(
        *_run_args(venv, plugin_id="carrier"), reply="y", question=b"[y/N/a(lways)] "
    )
    assert "hidden" not in screen
    assert "left disabled: hidden" in rest
    listed = venv.plugins()
    assert (listed["carrier"], listed["hidden"]) == ("loaded", "disabled")


def test_an_index_entry_that_is_a_pip_option_is_left_out(index: Path) -> None:
    from autogpt_core.plugins._index import read_index

    read = read_index(str(index / "index.json"))
    assert "sneaky" not in [e.manifest.id for e in read.entries]
    assert any("pip options are not accepted" in p for p in read.problems)


def test_a_manifest_that_gains_store_access_or_bridges_has_grown() -> None:
    from autogpt_core.agent._plugin_control import _grown
    from autogpt_core.plugins._manifest import validate_manifest

    shown = validate_manifest(WEATHER_MANIFEST)
    assert _grown(shown, shown) == ""
    wider = validate_manifest({**WEATHER_MANIFEST, "shares_store": True})
    assert _grown(shown, wider) == "capabilities access to the session store"
