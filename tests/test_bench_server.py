"""``bench/server.py --quick`` runs end to end: every task finishes, every subscriber gets
every event (the script exits non-zero otherwise). No timing is checked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "server.py"


@pytest.mark.slow
def test_the_server_benchmark_runs_quick() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tasks finished: 10 of 10" in done.stdout
    assert "whole stream: 0" in done.stdout
