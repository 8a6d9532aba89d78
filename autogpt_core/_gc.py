"""The garbage collector's schedule for a process that runs many sessions.

CPython collects its youngest generation every 700 net allocations, and every tenth of
those collections the next one, every tenth of those everything. An agent cycle
allocates thousands of short-lived objects (messages, events, JSON), so with 1,000
concurrent sessions the collector ran about 1,000 times in 10,000 cycles and took 12 %
of the process's CPU, 23 % with 3,000 sessions: each older-generation pass walks every
live session's objects (``bench/sessions.py``, docs/benchmarks.md). Almost all of those
objects die young and are freed by reference counting; the collector exists for the
cycles among them. Collecting the youngest generation every 50,000 allocations instead
keeps cycles collected (measured: the same peak RSS) at a small part of the cost.

``tune()`` is called by the commands that run sessions (``autogpt run``, ``serve``,
``mcp``) -- the process is theirs -- never by the library: an application embedding
``Runtime`` keeps its own collector settings.
"""

from __future__ import annotations

import gc

#: ``gc.set_threshold`` for a process running sessions: the youngest generation every
#: 50,000 net allocations, the middle one every 50 of those, the oldest every 100 of those.
THRESHOLDS = (50_000, 50, 100)


def tune() -> None:
    """Collect less often, as ``THRESHOLDS`` says (never more often than set already)."""
    current = gc.get_threshold()
    if current[0] and current[0] < THRESHOLDS[0]:
        gc.set_threshold(*THRESHOLDS)
