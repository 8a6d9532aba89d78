"""``autogpt serve`` against the Agent Protocol as others read it: schemathesis and the
official client, each in a virtualenv of its own, against a real server.

- schemathesis runs every check it has over every operation of the spec (examples,
  coverage, fuzzing and stateful phases); the few failures it may not count, each with its
  reason, are in tests/conformance/schemathesis_hooks.py.
- ``agent-protocol-client`` (which needs pydantic 1, so it cannot share the project's
  environment) drives the demo task to its last step and downloads its artifact.

The virtualenvs are built once, from the pinned requirements in tests/conformance/, and kept
in a cache directory keyed by those files and the Python version: ``$AUTOGPT_TEST_CACHE``,
else ``$XDG_CACHE_HOME/autogpt-core-tests``, else ``~/.cache/autogpt-core-tests``. Building
one needs the package index; without it these tests fail (they check what no other test
does, so a machine that cannot run them must say so).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest

from autogpt_core.cli._cli_run import DEMO_GOAL, demo_recording

from .serverkit import API, SPEC, TOKENS, conforms, running

HERE = Path(__file__).resolve().parent / "conformance"
# Read when the module is imported: tests/conftest.py removes every AUTOGPT_* variable from
# the environment each test sees.
CACHE_OVERRIDE = os.environ.get("AUTOGPT_TEST_CACHE")
SCHEMATHESIS_EXAMPLES = 40
#: Fixed, so that a failure reproduces (``--seed`` as printed); change it to explore.
SCHEMATHESIS_SEED = 20261204


def _cache_root() -> Path:
    if CACHE_OVERRIDE:
        return Path(CACHE_OVERRIDE)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "autogpt-core-tests"


def _tool_env() -> dict[str, str]:
    """The environment for the tools' own pythons: pip's settings (index, proxy) stay."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PYTHONDONTWRITEBYTECODE="1", PIP_DISABLE_PIP_VERSION_CHECK="1", NO_COLOR="1")
    return env


def _python(venv: Path) -> Path:
    return venv / ("Scripts" if os.name == "nt" else "bin") / "python"


def cached_venv(requirements: Path) -> Path:
    """The python of a virtualenv with ``requirements`` installed, built at most once.

    Keyed by the file's content and the interpreter, so that a changed pin builds a new one.
    It is built under a temporary name and renamed into place when complete: a build that
    was interrupted is never used, and of two runs that build at once, the first to finish
    wins (the tools run as ``python -m``, so the move breaks no script's first line).
    """
    version = f"{sys.implementation.name}{sys.version_info.major}.{sys.version_info.minor}"
    key = requirements.read_bytes() + f"{version} {sysconfig.get_platform()}".encode()
    digest = hashlib.sha256(key).hexdigest()[:16]
    root = _cache_root()
    venv = root / f"{requirements.stem}-{version}-{digest}"
    if _python(venv).exists():
        return _python(venv)
    root.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{venv.name}-", dir=root))
    try:
        subprocess.run(
            [sys.executable, "-m", "venv", str(building)],
            check=True,
            capture_output=True,
            timeout=300,
        )
        install = subprocess.run(
            [str(_python(building)), "-m", "pip", "install", "--no-input", "--quiet"]
            + ["-r", str(requirements)],
            env=_tool_env(),
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if install.returncode != 0:
            pytest.fail(
                f"cannot build the virtualenv for {requirements.name} (pip needs the package "
                f"index):\n{install.stdout}\n{install.stderr}"
            )
        if venv.exists() and not _python(venv).exists():
            # Left by an interpreter that is gone (its python links to nothing): replaced.
            shutil.rmtree(venv, ignore_errors=True)
        with contextlib.suppress(OSError):  # another run finished first: use its venv
            building.rename(venv)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    assert _python(venv).exists(), venv
    return _python(venv)


@pytest.mark.slow
def test_schemathesis_finds_nothing_with_every_check(tmp_path: Path) -> None:
    """Every schemathesis check over the whole spec, with the server's own bearer token: no
    failure. The server runs with room for the tasks that fuzzing creates (past
    ``--max-sessions`` it answers 503 by design, a 5xx that the checks would count)."""
    python = cached_venv(HERE / "requirements-schemathesis.txt")
    home = tmp_path / "home"
    home.mkdir()
    with running(home, demo_recording(), max_sessions=10_000) as server:
        result = subprocess.run(
            [
                str(python),
                "-m",
                "schemathesis.cli",
                "run",
                str(SPEC),
                "--url",
                server.url,
                "--checks",
                "all",
                # The spec declares no security scheme: the token goes in as a header.
                "--header",
                f"Authorization: Bearer {TOKENS['alice']}",
                "--max-examples",
                str(SCHEMATHESIS_EXAMPLES),
                "--seed",
                str(SCHEMATHESIS_SEED),
                "--generation-database",
                "none",
                "--request-timeout",
                "60",
                "--no-color",
            ],
            env={
                **_tool_env(),
                "SCHEMATHESIS_HOOKS": str(HERE / "schemathesis_hooks.py"),
                "COLUMNS": "120",
            },
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    # Every operation of the spec was tested, in every phase.
    assert "9 selected / 9 total" in report, report
    for phase in ("Examples", "Coverage", "Fuzzing", "Stateful"):
        assert f"✅ {phase}" in report, report


@pytest.mark.slow
def test_the_official_client_drives_the_demo_to_its_last_step(tmp_path: Path) -> None:
    """agent-protocol-client 1.1.0 creates the demo task, executes steps until ``is_last``,
    lists the artifacts and downloads the one the agent wrote: byte for byte the file in the
    task's workspace."""
    python = cached_venv(HERE / "requirements-agent-protocol-client.txt")
    home = tmp_path / "home"
    home.mkdir()
    with running(home, demo_recording()) as server:
        result = subprocess.run(
            [str(python), str(HERE / "drive_task.py"), server.url, TOKENS["alice"], DEMO_GOAL],
            env=_tool_env(),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        seen = json.loads(result.stdout)
        task_id = seen["task"]["task_id"]
        workspace = server.data_dir / "workspaces" / task_id
        assert seen["task"]["input"] == DEMO_GOAL
        assert [s["name"] for s in seen["steps"]] == ["write_file", "remember", "recall", "finish"]
        assert [s["is_last"] for s in seen["steps"]] == [False, False, False, True]
        (artifact,) = seen["artifacts"]
        assert artifact["file_name"] == "haiku.txt"
        assert artifact["agent_created"] is True
        assert seen["pagination"]["total_items"] == 1
        assert [a["artifact_id"] for a in seen["task"]["artifacts"]] == [artifact["artifact_id"]]
        written = (workspace / (artifact["relative_path"] or "") / "haiku.txt").read_bytes()
        assert base64.b64decode(seen["contents"][artifact["artifact_id"]]) == written
        assert b"plugins" in written


def test_what_schemathesis_found_stays_fixed(tmp_path: Path) -> None:
    """A 405 names every method of its path in ``Allow`` (RFC 9110), however many routes
    serve the path; any int32 page size from 1 is valid (the spec sets no maximum), and a page
    holds at most 100 items, as its pagination says; past int32 is malformed (422)."""
    with running(tmp_path, demo_recording()) as server, server.client() as client:
        task_id = client.post(API, json={"input": DEMO_GOAL}).json()["task_id"]
        for path, allowed in [
            (API, "GET, HEAD, POST"),
            (f"{API}/{task_id}", "GET, HEAD"),
            (f"{API}/{task_id}/steps", "GET, HEAD, POST"),
            (f"{API}/{task_id}/artifacts", "GET, HEAD, POST"),
        ]:
            response = client.request("TRACE", path)
            assert response.status_code == 405, response.text
            assert response.headers["allow"] == allowed
            assert "method not allowed" in response.json()["message"]

        listed = client.get(API, params={"current_page": 2, "page_size": 2**31 - 1})
        assert listed.status_code == 200, listed.text
        conforms("TaskListResponse", listed.json())
        assert listed.json()["tasks"] == []
        assert listed.json()["pagination"] == {
            "total_items": 1,
            "total_pages": 1,
            "current_page": 2,
            "page_size": 100,
        }
        for name in ("current_page", "page_size"):
            for value in (0, 2**31, "x"):
                response = client.get(f"{API}/{task_id}/steps", params={name: value})
                assert response.status_code == 422, response.text
                assert name in response.json()["message"]
