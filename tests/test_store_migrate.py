"""``autogpt store migrate`` as a process: sessions made by real runs copied from the
SQLite store into PostgreSQL, compared field by field; and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import attrs

from autogpt_core.cli._cli_run import demo_recording
from autogpt_core.store._lease import Holder
from autogpt_core.store._open import open_store
from autogpt_core.store._sqlite import Store
from tests.clirun import autogpt, cli_env


def _sqlite(tmp_path: Path) -> Path:
    return tmp_path / "data" / "sessions.sqlite3"


def _demo(tmp_path: Path, *args: str, code: int = 0) -> str:
    result = autogpt("run", "--demo", *args, env=cli_env(tmp_path))
    assert result.returncode == code, result.stderr
    listed = json.loads(autogpt("sessions", "--json", env=cli_env(tmp_path)).stdout)
    return str(listed[0]["id"])


def _make_sessions(tmp_path: Path) -> list[str]:
    """A finished demo, a demo stopped by its cycle budget then resumed, and an
    interrupted one with artifacts and no cycles."""
    finished = _demo(tmp_path)
    resumed = _demo(tmp_path, "--max-cycles", "2", code=1)
    replay = f"replay:{demo_recording()}"
    result = autogpt(
        "run",
        "--resume",
        resumed[:8],
        "--llm",
        replay,
        "--no-strict",
        "--max-cycles",
        "9",
        env=cli_env(tmp_path),
    )
    assert result.returncode == 0, (result.stdout, result.stderr)
    with Store(_sqlite(tmp_path)) as store:
        store.add_artifact(finished, "haiku.txt", agent_created=True, cycle=3)
        store.add_artifact(finished, "in/upload.bin", agent_created=False, artifact_id="up-1")
        bare = store.create_session(
            "left running", tmp_path / "ws", session_id="bare", config={"llm": "x"}
        )
        store.add_artifact(bare.id, "notes.md", cycle=None)
    return [finished, resumed, bare.id]


def test_migrate_copies_every_session_field_by_field(tmp_path: Path, postgres_url: str) -> None:
    ids = _make_sessions(tmp_path)
    result = autogpt("store", "migrate", "--to", postgres_url, env=cli_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    with Store(_sqlite(tmp_path)) as source, open_store(postgres_url) as target:
        old = source.list_sessions(limit=100)
        new = target.list_sessions(limit=100)
        assert old.total == new.total == 3
        assert [s.id for s in new.items] == [s.id for s in old.items]
        assert set(ids) == {s.id for s in old.items}
        cycles = events = artifacts = 0
        for session_id in ids:
            before, after = source.get_session(session_id), target.get_session(session_id)
            # updated_at is the copy's time: the interface cannot set it.
            assert attrs.evolve(after, updated_at=0) == attrs.evolve(before, updated_at=0)
            assert target.load_cycles(session_id) == source.load_cycles(session_id)
            cycles += len(source.load_cycles(session_id))
            old_events = source.list_events(session_id, limit=10_000)
            new_events = target.list_events(session_id, limit=10_000)
            # Event ids are the target's own, in the same order.
            assert [attrs.evolve(e, id=0) for e in new_events] == [
                attrs.evolve(e, id=0) for e in old_events
            ]
            assert [e.id for e in new_events] == sorted(e.id for e in new_events)
            events += len(old_events)
            old_artifacts = source.list_artifacts(session_id).items
            new_artifacts = target.list_artifacts(session_id).items
            # created_at is the copy's time: add_artifact cannot set it.
            assert [attrs.evolve(a, created_at=0) for a in new_artifacts] == [
                attrs.evolve(a, created_at=0) for a in old_artifacts
            ]
            artifacts += len(old_artifacts)
            assert target.get_lease(session_id) is None
    assert (cycles, artifacts) == (4 + 4, 3)
    assert events > 0
    assert f"Migrated 3 session(s) from {_sqlite(tmp_path)} to " in result.stdout
    summary = f": {cycles} cycle(s), {events} event(s), 3 artifact record(s)."
    assert summary in result.stdout, result.stdout
    with Store(_sqlite(tmp_path)) as source, open_store(postgres_url) as target:
        assert target.get_session(ids[0]).status == "finished"
        assert target.get_session("bare").status == "interrupted"
        assert target.get_artifact(ids[0], "up-1") == attrs.evolve(
            source.get_artifact(ids[0], "up-1"),
            created_at=target.get_artifact(ids[0], "up-1").created_at,  # type: ignore[union-attr]
        )


def test_migrated_store_is_usable_by_the_cli(tmp_path: Path, postgres_url: str) -> None:
    """After migrating, a config whose store is the URL lists the sessions as before."""
    session_id = _demo(tmp_path)
    before = json.loads(autogpt("sessions", "--json", env=cli_env(tmp_path)).stdout)
    other = tmp_path / "other.sqlite3"
    assert autogpt("store", "migrate", "--to", str(other), env=cli_env(tmp_path)).returncode == 0
    result = autogpt(
        "store", "migrate", "--from", str(other), "--to", postgres_url, env=cli_env(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    (tmp_path / "config.yaml").write_text(f"store: {postgres_url}\n")
    after = json.loads(autogpt("sessions", "--json", env=cli_env(tmp_path)).stdout)
    for row in before + after:
        row.pop("updated")
    assert after == before
    assert after[0]["id"] == session_id


def test_refuses_a_running_session(tmp_path: Path, postgres_url: str) -> None:
    session_id = _demo(tmp_path)
    with Store(_sqlite(tmp_path)) as store:
        store.acquire_lease(session_id, Holder.current(), expiry=600)
        result = autogpt("store", "migrate", "--to", postgres_url, env=cli_env(tmp_path))
    assert result.returncode == 2, result.stdout
    (line,) = result.stderr.splitlines()
    assert f"session {session_id} is running" in line
    assert "nothing was migrated" in line
    assert "stop that process" in line
    with open_store(postgres_url) as target:
        assert target.list_sessions().total == 0


def test_refuses_sessions_the_target_holds_unless_skip_existing(
    tmp_path: Path, postgres_url: str
) -> None:
    first = _demo(tmp_path)
    env = cli_env(tmp_path)
    assert autogpt("store", "migrate", "--to", postgres_url, env=env).returncode == 0
    second = _demo(tmp_path)
    again = autogpt("store", "migrate", "--to", postgres_url, env=env)
    assert again.returncode == 2
    (line,) = again.stderr.splitlines()
    assert f"already holds session {first}" in line
    assert "--skip-existing" in line
    with open_store(postgres_url) as target:
        assert target.list_sessions().total == 1
    skipped = autogpt("store", "migrate", "--to", postgres_url, "--skip-existing", env=env)
    assert skipped.returncode == 0, skipped.stderr
    assert f"Skipped session {first}" in skipped.stdout
    assert "Migrated 1 session(s)" in skipped.stdout
    assert "skipped 1 already there." in skipped.stdout
    with open_store(postgres_url) as target:
        assert {s.id for s in target.list_sessions().items} == {first, second}


def test_refuses_a_missing_source_and_the_same_store(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    missing = autogpt("store", "migrate", "--to", str(tmp_path / "x.sqlite3"), env=env)
    assert missing.returncode == 2
    assert "does not exist" in missing.stderr
    assert "--from" in missing.stderr
    _demo(tmp_path)
    same = autogpt("store", "migrate", "--to", str(_sqlite(tmp_path)), env=env)
    assert same.returncode == 2
    assert "both" in same.stderr
    assert "--to" in same.stderr
