"""Keep every test away from the user's real config, cache, data and API keys."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.pgserver import PostgresFailed, PostgresMissing, PostgresServer, running_server
from tests.systemparts import missing

# CI machines are shared and noisy: a property test is judged by what it finds, never by how
# fast this machine drew or ran an example (no timing threshold in a test).
settings.register_profile("autogpt", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("autogpt")


@pytest.fixture(autouse=True)
def _isolated_environment(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No AUTOGPT_*/OPENAI_* variables from outside; config, cache and data in a temp dir."""
    for name in list(os.environ):
        if name.startswith(("AUTOGPT_", "OPENAI_")):
            monkeypatch.delenv(name)
    home: Path = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("AUTOGPT_CONFIG", str(home / "config.yaml"))
    monkeypatch.setenv("AUTOGPT_CACHE_DIR", str(home / "cache"))
    monkeypatch.setenv("AUTOGPT_DATA_DIR", str(home / "data"))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server for this test run (``tests/pgserver.py``), started when a test
    first asks for it. Not installed, or not starting, the tests that need it fail, saying
    how to install it (``tests/systemparts.py``)."""
    stack = contextlib.ExitStack()
    try:
        server = stack.enter_context(running_server())
    except PostgresMissing as exc:
        missing("postgresql", f"PostgreSQL: {exc}")
    except PostgresFailed as exc:
        pytest.fail(f"PostgreSQL: {exc}", pytrace=False)
    with stack:
        yield server


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """The URL of a new, empty database of its own for the test."""
    return postgres_server.new_database()
