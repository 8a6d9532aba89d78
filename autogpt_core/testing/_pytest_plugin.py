"""The pytest plugin of autogpt-core: the ``autogpt`` fixture (docs/testing-plugins.md).

pytest loads it in every environment where autogpt-core is installed, through the
``pytest11`` entry point ``autogpt``; ``-p no:autogpt`` turns it off. So it is inert
unless a test asks for the fixture: it adds no command-line options, ini keys, markers
or hooks, touches no environment variable, and imports pytest alone; the harness (and
with it trio and the engine) is imported by the fixture, when a test requests it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ._harness import Harness


@pytest.fixture
def autogpt(tmp_path: Path) -> Harness:
    """A real autogpt runtime loading only the plugins you ``use``, driven by a script.

    ``autogpt.use("hello")``, then ``autogpt.command("say_hello", name="Ada")`` or
    ``autogpt.run(goal, [call(...), finish(...)])``. Its data, session store and workspace
    live in ``tmp_path / "autogpt"``.
    """
    from ._harness import Harness

    return Harness(tmp_path / "autogpt")
