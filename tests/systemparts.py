"""System programs some tests drive for real (Chromium, the PostgreSQL server).

The README's test command installs them first (``.ci/system-packages``). A test that
cannot find one fails, saying what is missing and how to install it: it is never skipped,
so a run that did not drive the browser or the database never passes as one that did.
"""

from __future__ import annotations

from typing import NoReturn

import pytest


def missing(part: str, message: str) -> NoReturn:
    """Fail the test for want of the system program ``part``."""
    pytest.fail(
        f"{message} ({part} is missing: 'bash .ci/system-packages' installs it)", pytrace=False
    )
