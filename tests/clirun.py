"""Run the real ``autogpt`` CLI in a subprocess with an isolated environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def cli_env(tmp_path: Path, *, site: Path | None = None, **extra: str) -> dict[str, str]:
    """An environment whose config, cache and data live under ``tmp_path``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AUTOGPT_", "OPENAI_")) and k != "PYTHONPATH"
    }
    env.update(
        AUTOGPT_CONFIG=str(tmp_path / "config.yaml"),
        AUTOGPT_CACHE_DIR=str(tmp_path / "cache"),
        AUTOGPT_DATA_DIR=str(tmp_path / "data"),
        PYTHONDONTWRITEBYTECODE="1",
        NO_COLOR="1",
    )
    if site is not None:
        env["PYTHONPATH"] = str(site)
    env.update(extra)
    return env


def autogpt(
    *args: str, env: dict[str, str], input: str | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -m autogpt_core ARGS`` (the console script's code) and its output."""
    return subprocess.run(
        [sys.executable, "-m", "autogpt_core", *args],
        env=env,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
