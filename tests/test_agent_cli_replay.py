"""``autogpt run``'s replay options reach the ``llm_replay`` plugin as its own settings:
``--record`` records through the plugin's ``llm_request`` wrapper, ``--no-strict`` and
``--demo`` make the replay tolerant."""

from __future__ import annotations

import json
from pathlib import Path

from autogpt_plugins.llm_replay import load_recording
from tests.clirun import autogpt, cli_env

DEMO = Path(__file__).resolve().parent.parent / "autogpt_core" / "demo" / "demo.replay.json"


def test_the_demo_recorded_again_gives_the_same_answers(tmp_path: Path) -> None:
    """``--demo --record FILE``: the wrapper records every exchange the demo played, so
    the new file replays the demo (strictly, with the same plugins)."""
    record = tmp_path / "again.json"
    env = cli_env(tmp_path)
    done = autogpt("run", "--demo", "--record", str(record), env=env)
    assert done.returncode == 0, done.stderr
    assert f"Recorded the model's answers to {record}" in done.stdout
    played = [e.response for e in load_recording(DEMO).exchanges]
    assert [e.response for e in load_recording(record).exchanges] == played

    replayed = autogpt("run", "Write the haiku", "--llm", f"replay:{record}", env=env)
    assert replayed.returncode == 0, replayed.stderr
    assert "Session finished" in replayed.stdout


def test_record_needs_the_replay_plugin(tmp_path: Path) -> None:
    """With llm_replay disabled, --record is refused in one line saying how to enable it,
    before a session starts."""
    (tmp_path / "config.yaml").write_text("plugins: {disable: [llm_replay]}\n", "utf-8")
    env = cli_env(tmp_path, OPENAI_API_KEY="sk-test-not-used")
    result = autogpt("run", "say hi", "--record", str(tmp_path / "r.json"), env=env)
    assert result.returncode == 2, result.stderr
    assert "--record needs the 'llm_replay' plugin" in result.stderr
    assert "autogpt plugins enable llm_replay" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "r.json").exists()
    listing = autogpt("sessions", "--json", env=env)
    assert listing.stdout.strip() in ("", "[]") or json.loads(listing.stdout) == []


def test_no_strict_is_the_plugins_setting(tmp_path: Path) -> None:
    """A recording whose tools differ fails strictly, and plays with --no-strict or with
    ``plugins.settings.llm_replay.strict: false`` in the config."""
    recording = tmp_path / "other-tools.json"
    recording.write_text(
        json.dumps(
            {
                "format": "autogpt-replay",
                "version": 1,
                "exchanges": [
                    {
                        "request": {"tools": ["no_such_tool"]},
                        "response": {
                            "tool_calls": [{"name": "finish", "arguments": {"result": "ok"}}]
                        },
                    }
                ],
            }
        ),
        encoding="utf-8",
    )
    env = cli_env(tmp_path)
    strict = autogpt("run", "g", "--llm", f"replay:{recording}", env=env)
    assert strict.returncode == 1
    assert "the tools offered differ" in strict.stdout + strict.stderr
    tolerant = autogpt("run", "g", "--llm", f"replay:{recording}", "--no-strict", env=env)
    assert tolerant.returncode == 0, tolerant.stderr
    (tmp_path / "config.yaml").write_text(
        "plugins: {settings: {llm_replay: {strict: false}}}\n", "utf-8"
    )
    configured = autogpt("run", "g", "--llm", f"replay:{recording}", env=env)
    assert configured.returncode == 0, configured.stderr
