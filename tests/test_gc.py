"""The collector's schedule for the commands that run sessions (``autogpt_core._gc``)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
import trio

from autogpt_core import _gc
from autogpt_core.cli._cli_run import run_unwrapped


@pytest.fixture(autouse=True)
def _restore() -> Iterator[None]:
    previous = gc.get_threshold()
    yield
    gc.set_threshold(*previous)


def test_the_commands_that_run_sessions_collect_less_often() -> None:
    """run_unwrapped (autogpt run, serve, mcp) sets the thresholds before trio runs."""
    gc.set_threshold(700, 10, 10)
    seen: list[tuple[int, int, int]] = []

    async def main() -> None:
        await trio.lowlevel.checkpoint()
        seen.append(gc.get_threshold())

    run_unwrapped(main)
    assert seen == [_gc.THRESHOLDS]


def test_tune_never_collects_more_often_or_turns_a_disabled_threshold_on() -> None:
    gc.set_threshold(100_000, 10, 10)
    _gc.tune()
    assert gc.get_threshold() == (100_000, 10, 10)
    gc.set_threshold(0, 10, 10)  # generational collection off: the user's choice
    _gc.tune()
    assert gc.get_threshold()[0] == 0
