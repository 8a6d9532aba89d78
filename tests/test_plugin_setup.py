"""Set-up before use: a plugin whose manifest asks for terms to accept and a required secret
setting is enabled only once the user accepted the terms and typed the secret (without
echo, kept in the secrets file, never in the config file); until then it stays disabled
with the reason. A real wheel pip-installed in a throwaway virtualenv, the real CLI on a
pseudo-terminal."""

from __future__ import annotations

import os
import pty
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from autogpt_core._config import Config
from autogpt_core._errors import ConfigError
from autogpt_core._secrets import read_secrets, store_secret
from autogpt_core.plugins._manifest import parse_manifest
from autogpt_core.plugins._setup import ask_for, needs

from .distfactory import write_wheel
from .venvkit import Venv

TERMS = "Forecasts come from the Example Weather Service. Do not resell them."
MANIFEST = f"""\
manifest_version: 1
id: forecast
name: Forecast
version: "1.0"
enabled_by_default: false
setup:
  terms: "{TERMS}"
permissions: ["secrets:FORECAST_KEY"]
config:
  settings:
    api_key:
      type: string
      secret: true
      required: true
      env: FORECAST_KEY
      description: The weather service's API key.
"""
CODE = """\
from hookspecs import hookimpl

SEEN = {}


@hookimpl
def configure(settings):
    SEEN.update(settings.values)
"""
SECRET = "fc-0123456789abcdef"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    write_wheel(
        out,
        "autogpt-plugin-forecast",
        "1.0",
        {"forecast_plugin/__init__.py": CODE, "forecast_plugin/autogpt-plugin.yaml": MANIFEST},
        entry_points="[autogpt.plugins]\nforecast = forecast_plugin\n",
    )
    return out


@pytest.fixture
def venv(tmp_path: Path, wheels: Path) -> Venv:
    home = tmp_path / "home"
    home.mkdir()
    made = Venv(tmp_path / "venv", wheels, home)
    done = subprocess.run(
        [str(made.python), "-m", "pip", "install", "autogpt-plugin-forecast"],
        env=made.env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    made.env.pop("FORECAST_KEY", None)
    return made


def _converse(venv: Venv, args: list[str], steps: list[tuple[bytes, str]]) -> tuple[int, str]:
    """Run the CLI on a pseudo-terminal, answering each question (output ending with
    the step's bytes) in turn; return the exit status and everything it wrote."""
    main, secondary = pty.openpty()
    proc = subprocess.Popen(
        [str(venv.python), "-m", "autogpt_core", *args],
        env=venv.env,
        cwd=venv.home,
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
    )
    os.close(secondary)
    seen = b""
    try:
        for question, reply in steps:
            while not seen.rstrip().endswith(question.rstrip()):
                try:
                    chunk = os.read(main, 4096)
                except OSError:
                    chunk = b""
                assert chunk, f"no question {question!r} came: {seen.decode()}"
                seen += chunk
            os.write(main, reply.encode() + b"\n")
        while True:
            try:
                chunk = os.read(main, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        code = proc.wait(timeout=120)
    finally:
        os.close(main)
    return code, seen.decode("utf-8", "replace")


def _status(venv: Venv) -> tuple[str, str]:
    listed = venv.autogpt("plugins", "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    for n, line in enumerate(lines):
        if line.startswith("forecast "):
            reason = lines[n + 1].strip() if n + 1 < len(lines) else ""
            return line.split()[2], reason if reason.startswith("!") else ""
    raise AssertionError(listed.stdout)


@pytest.mark.slow
def test_enable_asks_for_the_terms_and_the_secret_and_keeps_it_out_of_the_config(
    venv: Venv,
) -> None:
    code, screen = _converse(
        venv,
        ["plugins", "enable", "forecast"],
        [(b"Accept them? [y/N]", "y"), (b"as $FORECAST_KEY:", SECRET)],
    )
    assert code == 0, screen
    assert TERMS in screen
    assert SECRET not in screen  # read without echo
    config = venv.config.read_text()
    assert SECRET not in config
    raw = yaml.safe_load(config)
    assert raw["plugins"]["enable"] == ["forecast"]
    assert set(raw["plugins"]["accepted"]) == {"forecast"}
    secrets = venv.home / "data" / "secrets.env"
    assert read_secrets(secrets) == {"FORECAST_KEY": SECRET}
    assert secrets.stat().st_mode & 0o777 == 0o600
    assert _status(venv) == ("loaded", "")
    # The plugin got the secret where it reads it, and nothing shows it.
    shown = venv.autogpt("plugins", "info", "forecast")
    assert SECRET not in shown.stdout + shown.stderr


@pytest.mark.slow
def test_declining_the_terms_changes_nothing(venv: Venv) -> None:
    code, screen = _converse(venv, ["plugins", "enable", "forecast"], [(b"[y/N]", "n")])
    assert code == 1
    assert "stays disabled" in screen
    assert not venv.config.exists()
    assert not (venv.home / "data" / "secrets.env").exists()
    assert _status(venv)[0] == "disabled"


@pytest.mark.slow
def test_without_a_terminal_nothing_is_asked_or_changed(venv: Venv) -> None:
    done = venv.autogpt("plugins", "enable", "forecast")
    assert done.returncode == 1
    assert "not enabled: plugin 'forecast' needs its terms to be accepted" in done.stderr
    assert "the setting 'api_key' (set $FORECAST_KEY)" in done.stderr
    assert not venv.config.exists()


@pytest.mark.slow
def test_scripts_accept_the_terms_and_give_the_secret_in_the_environment(venv: Venv) -> None:
    venv.env["FORECAST_KEY"] = SECRET
    done = venv.autogpt("plugins", "enable", "--accept-terms", "forecast")
    assert done.returncode == 0, done.stderr
    assert _status(venv) == ("loaded", "")
    # Terms changed by an upgrade: off again until accepted again.
    raw = yaml.safe_load(venv.config.read_text())
    raw["plugins"]["accepted"]["forecast"] = "0" * 16
    venv.config.write_text(yaml.safe_dump(raw))
    status, reason = _status(venv)
    assert status == "disabled"
    assert "its terms are not accepted (or changed since)" in reason


def test_needs_names_what_is_missing(tmp_path: Path) -> None:
    manifest = parse_manifest(MANIFEST)
    config = Config(path=tmp_path / "c.yaml", data_dir=tmp_path)
    need = needs(manifest, config, environ={})
    assert need.terms == TERMS
    assert [d.name for d in need.settings] == ["api_key"]
    accepted = Config(
        path=tmp_path / "c.yaml",
        data_dir=tmp_path,
        accepted_terms={"forecast": manifest.terms_digest},
    )
    assert not needs(manifest, accepted, environ={"FORECAST_KEY": "k"})


def test_the_secrets_file_is_private_and_strict(tmp_path: Path) -> None:
    path = tmp_path / "secrets.env"
    store_secret(path, "SOME_TOKEN", "abc")
    store_secret(path, "OTHER_KEY", "def")
    store_secret(path, "SOME_TOKEN", "ghi")
    assert read_secrets(path) == {"OTHER_KEY": "def", "SOME_TOKEN": "ghi"}
    assert os.environ.pop("SOME_TOKEN") == "ghi"
    os.environ.pop("OTHER_KEY")
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="may be read by others"):
        read_secrets(path)
    path.chmod(0o600)
    path.write_text("not a pair\n")
    with pytest.raises(ConfigError, match="line 1 is not NAME=value"):
        read_secrets(path)
    with pytest.raises(ConfigError, match="one line"):
        store_secret(tmp_path / "other.env", "A_KEY", "two\nlines")


def test_an_answer_outside_the_settings_bounds_is_refused(tmp_path: Path) -> None:
    """A required setting asked for at enable time obeys its manifest's bounds and
    choices: an answer outside them is refused with the rule, and nothing is kept."""
    manifest = parse_manifest(
        "manifest_version: 1\nid: quota\nname: Quota\nversion: '1'\nconfig:\n  settings:\n"
        "    per_day: {type: integer, required: true, minimum: 1, maximum: 100}\n"
        "    plan: {type: string, required: true, enum: [free, paid]}\n"
    )
    config = Config(path=tmp_path / "c.yaml", data_dir=tmp_path)
    need = needs(manifest, config, environ={})
    for answers, problem in [
        (["0", "free"], "plugin 'quota': per_day must be at least 1, not '0'"),
        (["7", "gold"], "plugin 'quota': plan must be one of 'free', 'paid', not 'gold'"),
    ]:
        given = iter(answers)
        with pytest.raises(ConfigError, match=re.escape(problem)):
            ask_for(
                [(manifest, need)],
                ask=lambda _, given=given: next(given),
                ask_secret=lambda _: "",
                say=lambda _: None,
            )
    given = iter(["100", "paid"])
    answers = ask_for(
        [(manifest, need)], ask=lambda _: next(given), ask_secret=lambda _: "", say=print
    )
    assert answers is not None
    assert answers.settings == {"quota": {"per_day": 100, "plan": "paid"}}


def test_a_secret_answer_is_checked_and_never_shown(tmp_path: Path) -> None:
    """A secret typed at enable time obeys its setting's rules too (it would break the
    plugin at its next load otherwise), and the refusal does not repeat it."""
    manifest = parse_manifest(
        "manifest_version: 1\nid: vault\nname: Vault\nversion: '1'\n"
        "permissions: ['secrets:VAULT_PIN']\nconfig:\n  settings:\n"
        "    pin: {type: integer, secret: true, env: VAULT_PIN, required: true, minimum: 1000}\n"
    )
    need = needs(manifest, Config(path=tmp_path / "c.yaml", data_dir=tmp_path), environ={})
    with pytest.raises(ConfigError) as info:
        ask_for([(manifest, need)], ask=input, ask_secret=lambda _: "42", say=print)
    assert str(info.value) == "plugin 'vault': pin must be at least 1000, not what was typed"
    answers = ask_for([(manifest, need)], ask=input, ask_secret=lambda _: "4242", say=print)
    assert answers is not None
    assert answers.secrets == {"VAULT_PIN": "4242"}
