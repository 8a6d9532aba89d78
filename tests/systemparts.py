"""System programs some tests drive for real (Chromium, the PostgreSQL server).

A machine without one skips those tests, saying what to install. CI installs them and sets
``AUTOGPT_TEST_REQUIRE`` (``chromium,postgresql``, or ``all``), which makes a missing one a
failure instead: there, nothing is skipped. Read at import, before the autouse fixture in
conftest.py clears ``AUTOGPT_*`` variables from each test's environment.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIRED = frozenset(p.strip() for p in os.environ.get("AUTOGPT_TEST_REQUIRE", "").split(","))


def missing(part: str, message: str) -> NoReturn:
    """Skip (or, where ``part`` is required, fail) for want of ``part``."""
    if part in REQUIRED or "all" in REQUIRED:
        pytest.fail(f"{message} (AUTOGPT_TEST_REQUIRE asks for {part})")
    pytest.skip(f"{message}; set AUTOGPT_TEST_REQUIRE={part} to make this a failure, as CI does")
