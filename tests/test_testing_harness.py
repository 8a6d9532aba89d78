"""autogpt_core.testing: the harness runs a real runtime with only the plugins under test,
and its pytest plugin (entry point ``pytest11``/``autogpt``) gives the ``autogpt`` fixture
to outside test files while staying inert in suites that do not use it."""

from __future__ import annotations
import __future__

import re
import textwrap
import types
from pathlib import Path

import pytest

import autogpt_core.testing
from autogpt_core import PluginLoadError
from autogpt_core.testing import BASE_PLUGINS, Harness, call, call_raw, finish, say
from hookspecs import Confirmation, ConfirmationRequest, Role
from tests.distfactory import write_plugin

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
HELLO = ROOT / "examples" / "autogpt-plugin-hello" / "autogpt_plugin_hello"

COMMANDS_OF = """[{{name: {name}, description: d, permissions: {permissions},
  parameters: {{type: object, properties: {{city: {{type: string}}}},
    required: [city], additionalProperties: false}}}}]"""

FLAKY = """
from hookspecs import hookimpl

def forecast(city):
    raise ValueError(f"no weather for {city}")

@hookimpl
def register_commands(register):
    register("forecast", forecast)
"""

BYSTANDER = """
from hookspecs import hookimpl

def wave(city):
    return "waved"

@hookimpl
def register_commands(register):
    register("wave", wave)

@hookimpl
def build_prompt(session, prompt):
    prompt.add_constraint("BYSTANDER WAS HERE")
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site directory holding the hello example and two test plugins, as pip lays them
    out: ``flaky`` (its command raises) and ``bystander`` (enabled by default)."""
    site = tmp_path_factory.mktemp("harness-site")
    write_plugin(
        site,
        "hello",
        (HELLO / "__init__.py").read_text(encoding="utf-8"),
        package="autogpt_plugin_hello_harness",
        manifest=(HELLO / "autogpt-plugin.yaml").read_text(encoding="utf-8"),
    )
    write_plugin(
        site,
        "flaky",
        FLAKY,
        package="harness_flaky",
        commands=COMMANDS_OF.format(name="forecast", permissions="[]"),
    )
    write_plugin(
        site,
        "bystander",
        BYSTANDER,
        package="harness_bystander",
        commands=COMMANDS_OF.format(name="wave", permissions="[]"),
    )
    write_plugin(site, "broken", "raise ImportError('no module named weatherlib')")
    return site


@pytest.fixture
def harness(site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Harness:
    """A harness whose environment has the test site on ``sys.path`` (as if installed)."""
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("HELLO_GREETING", raising=False)
    return Harness(tmp_path / "h")


def test_all_lists_every_public_name() -> None:
    """``autogpt_core.testing.__all__`` is sorted and names every public name, lazy ones
    included."""
    module = autogpt_core.testing
    for name in module._LAZY:
        getattr(module, name)
    public = sorted(
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and not isinstance(value, __future__._Feature)
    )
    assert sorted(module.__all__) == public
    assert sorted(module.__all__, key=str) == list(module.__all__)


def test_a_command_runs_and_its_result_is_visible(harness: Harness) -> None:
    """command() runs the plugin's command through the dispatcher; the result, its
    setting and the stored command event show it, alias included."""
    harness.use("hello", settings={"greeting": "Hi"})
    result = harness.command("say_hello", name="Ada")
    assert result.ok, result.error
    assert result.output == "Hi, Ada!"
    run = harness.runs[-1]
    assert run.status == "finished"
    assert run.events_of("command")[0] == {
        "command": "say_hello",
        "plugin": "hello",
        "arguments": {"name": "Ada"},
    }
    assert harness.command("greet", name="Grace").output == "Hi, Grace!"
    assert len(harness.runs) == 2


def test_a_goal_runs_through_the_scripted_model(harness: Harness) -> None:
    """run() plays the script through the replay provider: each step answers one model
    request, the model reads each result quoted as data, the prompt holds the plugin's
    build_prompt line, and the cycles, events and memories are those of a real session."""
    harness.use("hello")
    run = harness.run(
        "Greet Ada",
        [call("say_hello", name="Ada").saying("Greeting."), finish("greeted")],
    )
    assert run.status == "finished"
    assert run.outcome.result == "greeted"
    assert run.outcome.cycles == 2
    assert len(run.requests) == 2
    assert "Be polite: greet people with the say_hello command." in run.system_prompt
    assert "Your goal: Greet Ada" in run.system_prompt
    answer = [m for m in run.requests[1].messages if m.role is Role.TOOL][0]
    assert answer.tool_call_id == "call_1"
    assert '<data source="output of say_hello">' in answer.content
    assert "Hello, Ada!" in answer.content
    assert run.events_of("plan")[0]["text"] == "Greeting."
    assert [e.kind for e in run.events][0] == "session_start"
    assert [e.kind for e in run.events][-1] == "session_end"
    assert [c.number for c in run.cycles] == [1, 2]
    assert run.cycles[0].result["output"] == "Hello, Ada!"  # type: ignore[index]
    assert [m.kind for m in run.memories] == ["observation", "observation"]
    assert "say_hello" in run.memories[0].text
    assert run.workspace == (harness.workspace).resolve()
    assert run.workspace.is_dir()


def test_a_script_too_short_or_not_calling_fails_the_session(harness: Harness) -> None:
    """A model answering in words is told to call a command; one asked for more than the
    script holds fails the session, saying the recording ran out."""
    harness.use("hello")
    run = harness.run("Greet", [say("I would rather not.")])
    assert run.status == "failed"
    assert "has 1 exchange" in run.outcome.result
    assert "You did not call a command" in run.cycles[0].messages[-1].content
    broken = harness.run("Greet", [call_raw("say_hello", '{"name": '), finish()])
    assert broken.status == "finished"
    assert "not a JSON object" in broken.events_of("plan")[0]["error"]


def test_only_the_plugins_under_test_load(harness: Harness) -> None:
    """Only BASE_PLUGINS and the plugins used load: not the installed bystander (enabled by
    default), not the built-in workspace or memory; its hook does not run."""
    harness.use("hello")
    assert sorted(harness.loaded) == sorted([*BASE_PLUGINS, "hello"])
    records = harness.load().records
    assert records["bystander"].status == "disabled"
    assert records["workspace"].status == "disabled"
    run = harness.run("Greet", [finish()])
    assert run.tools == ["ask_user", "finish", "say_hello"]
    assert "BYSTANDER" not in run.system_prompt
    harness.use("bystander")
    assert "bystander" in harness.loaded
    again = harness.run("Greet", [finish()])
    assert "wave" in again.tools
    assert "BYSTANDER WAS HERE" in again.system_prompt


def test_a_failing_command_error_is_visible(harness: Harness) -> None:
    """An exception in the command, and arguments its schema refuses, are failed results
    naming what was wrong; the model is told the error."""
    harness.use("flaky")
    result = harness.command("forecast", city="Atlantis")
    assert not result.ok
    assert result.error == "command 'forecast' failed: ValueError: no weather for Atlantis"
    told = [m for m in harness.runs[-1].requests[1].messages if m.role is Role.TOOL][0]
    assert "no weather for Atlantis" in told.content
    invalid = harness.command("forecast", town="Atlantis")
    assert not invalid.ok
    assert "'city' is a required property" in str(invalid.error)
    assert harness.runs[-1].events_of("command") == [
        {"command": "finish", "plugin": "control", "arguments": {"result": "done"}}
    ]
    unknown = harness.command("wave", city="x")
    assert "there is no command 'wave'" in str(unknown.error)


def test_an_unconfirmed_risky_command_is_refused(harness: Harness) -> None:
    """As in a real run: with nobody to confirm, a command needing an ungranted permission
    is refused and does not run; in continuous mode it is refused without asking."""
    harness.use("shell")
    refused = harness.command("run_shell", command="touch ran.txt")
    assert not refused.ok
    assert "did not allow command 'run_shell' (needs shell): nobody answered" in str(refused.error)
    assert harness.runs[-1].confirmations == [
        {
            "command": "run_shell",
            "plugin": "shell",
            "missing": ["shell"],
            "approved": False,
            "reason": "nobody answered",
        }
    ]
    harness.continuous = True
    unattended = harness.command("run_shell", command="touch ran.txt")
    assert "continuous mode" in str(unattended.error)
    assert not (harness.workspace / "ran.txt").exists()


def test_confirmations_and_grants_let_it_run(harness: Harness) -> None:
    """confirm=True approves (and the request shows the whole call), a function may refuse
    with its reason, and a grant runs the command without asking."""
    harness.use("shell")
    asked: list[ConfirmationRequest] = []

    def refuse(request: ConfirmationRequest) -> Confirmation:
        asked.append(request)
        return Confirmation(approved=False, reason="not on Fridays")

    harness.confirm = refuse
    denied = harness.command("run_shell", command="touch ran.txt")
    assert "not on Fridays" in str(denied.error)
    assert asked[0].call.arguments["command"] == "touch ran.txt"
    assert asked[0].missing_permissions == ("shell",)
    assert not (harness.workspace / "ran.txt").exists()
    harness.confirm = True
    assert harness.command("run_shell", command="touch ran.txt").ok
    assert (harness.workspace / "ran.txt").exists()
    harness.confirm = None
    harness.grant("shell")
    granted = harness.command("run_shell", command="touch again.txt")
    assert granted.ok, granted.error
    assert harness.runs[-1].confirmations == []


def test_the_agents_questions_are_answered_by_the_test(harness: Harness) -> None:
    """answers= answers ask_user in order; without answers nobody does (control's reply)."""
    unanswered = harness.command("ask_user", question="Which city?")
    assert unanswered.output == "No user is available to answer; decide on your own and continue."
    harness.answers = ["Lisbon"]
    assert harness.command("ask_user", question="Which city?").output == "Lisbon"


def test_a_plugin_that_is_missing_or_broken_fails_the_test(harness: Harness) -> None:
    """use() of a plugin that is not installed, or does not import, raises PluginLoadError
    with the loader's reason; load(check=False) lets a test look at the record."""
    harness.use("nowhere")
    with pytest.raises(PluginLoadError, match="plugin 'nowhere' is not installed"):
        harness.load()
    other = Harness(harness.root / "other")
    other.use("broken")
    with pytest.raises(PluginLoadError, match="did not load: import of .* no module named"):
        other.command("anything")
    record = other.load(check=False).records["broken"]
    assert record.status == "broken"


async def test_the_async_api_runs_under_trio(harness: Harness) -> None:
    """acommand/arun are awaited inside a trio test; the sync ones refuse to nest trio."""
    harness.use("hello")
    result = await harness.acommand("say_hello", {"name": "Ada"})
    assert result.output == "Hello, Ada!"
    run = await harness.arun("Greet", [finish("ok")])
    assert run.outcome.result == "ok"
    with pytest.raises(RuntimeError, match=r"await harness\.arun"):
        harness.command("say_hello", name="Ada")


# --- the pytest plugin, from outside test files (pytester) -------------------------------

OUTSIDE_TEST = """
from autogpt_core.testing import call, finish

def test_hello(autogpt):
    autogpt.use("hello")
    run = autogpt.run("Greet Ada", [call("say_hello", name="Ada"), finish("greeted")])
    assert run.result_of("say_hello").output == "Hello, Ada!"
"""


@pytest.fixture
def outside(pytester: pytest.Pytester, site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test site on the PYTHONPATH of the pytest subprocesses pytester starts."""
    monkeypatch.setenv("PYTHONPATH", str(site))


@pytest.mark.usefixtures("outside")
def test_the_fixture_comes_from_the_pytest11_entry_point(pytester: pytest.Pytester) -> None:
    """A test file with no conftest gets the ``autogpt`` fixture from the installed entry
    point, and loses it with ``-p no:autogpt``."""
    pytester.makepyfile(test_outside=OUTSIDE_TEST)
    result = pytester.runpytest_subprocess("-W", "error", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    off = pytester.runpytest_subprocess("-p", "no:autogpt", "-p", "no:cacheprovider")
    off.assert_outcomes(errors=1)
    off.stdout.fnmatch_lines(["*fixture 'autogpt' not found*"])
    fixtures = pytester.runpytest_subprocess("--fixtures", "-p", "no:cacheprovider")
    fixtures.stdout.fnmatch_lines(["autogpt -- *autogpt*_pytest_plugin.py*"])


INERT_TEST = """
import os
import sys

def test_nothing_of_the_engine_is_there(request):
    assert request.config.pluginmanager.hasplugin("autogpt")
    engine = {m for m in sys.modules if m.startswith(("autogpt_core.", "autogpt_plugins"))}
    # The plugin's own module, its package, and what ``import autogpt_core`` imports.
    assert engine <= {
        "autogpt_core.testing",
        "autogpt_core.testing._pytest_plugin",
        "autogpt_core._errors",
        "autogpt_core._version",
    }, engine
    assert "AUTOGPT_LOAD_PLUGINS" not in os.environ
"""


@pytest.mark.usefixtures("outside")
def test_the_plugin_is_inert_for_suites_that_do_not_use_it(pytester: pytest.Pytester) -> None:
    """In a suite that never asks for the fixture, the plugin is loaded but has imported
    nothing of the engine, and pytest's options, ini keys and markers are what they are
    without it."""
    pytester.makepyfile(test_inert=INERT_TEST)
    result = pytester.runpytest_subprocess("-W", "error", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    for args in (["--help"], ["--markers"]):
        with_it = pytester.runpytest_subprocess(*args)
        without = pytester.runpytest_subprocess(*args, "-p", "no:autogpt")
        assert with_it.ret == without.ret == 0
        assert _normal(with_it.outlines) == _normal(without.outlines)


def _normal(lines: list[str]) -> list[str]:
    # --help names the temporary directory pytester ran in; nothing else may differ.
    return [re.sub(r"/\S*pytest-of-\S*", "TMP", line) for line in lines]


def _doc_tests() -> str:
    """The python blocks of docs/testing-plugins.md, as one test module."""
    text = (ROOT / "docs" / "testing-plugins.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)
    assert len(blocks) >= 3, "docs/testing-plugins.md lost its examples"
    return "\n\n".join(textwrap.dedent(block) for block in blocks)


@pytest.mark.usefixtures("outside")
def test_the_examples_of_docs_testing_plugins_pass(pytester: pytest.Pytester) -> None:
    """Every test in docs/testing-plugins.md passes against the hello example, run by
    pytest from an outside test file (the worked example is real)."""
    code = _doc_tests()
    tests = re.findall(r"^(?:async )?def (test_\w+)", code, flags=re.MULTILINE)
    pytester.makepyfile(test_docs_examples=code)
    result = pytester.runpytest_subprocess("-W", "error", "-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=len(tests))
    assert len(tests) >= 6


def test_a_doc_example_that_is_wrong_fails(pytester: pytest.Pytester, outside: None) -> None:
    """The docs check can fail: an example asserting the wrong greeting fails."""
    pytester.makepyfile(test_wrong=_doc_tests().replace('"Hello, Ada!"', '"Hullo, Ada!"', 1))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*Hullo, Ada!*"])
