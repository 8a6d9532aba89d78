"""Testing plugins: a real runtime with only the plugins under test and a scripted model.

::

    from autogpt_core.testing import call, finish

    def test_greets(autogpt):            # the pytest fixture (docs/testing-plugins.md)
        autogpt.use("hello")
        run = autogpt.run("Greet Ada", [call("say_hello", name="Ada"), finish("greeted")])
        assert run.result_of("say_hello").output == "Hello, Ada!"

The fixture comes from the pytest plugin ``autogpt_core.testing._pytest_plugin``, which
pytest loads through the ``pytest11`` entry point ``autogpt`` (``-p no:autogpt`` turns it
off). ``Harness`` is the same without pytest.

Names are imported on first use (PEP 562), so that pytest loading the plugin imports
neither trio nor the engine in test suites that never use it.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from ._harness import BASE_PLUGINS as BASE_PLUGINS
    from ._harness import Answers as Answers
    from ._harness import ConfirmAnswer as ConfirmAnswer
    from ._harness import Harness as Harness
    from ._harness import Run as Run
    from ._script import Step as Step
    from ._script import call as call
    from ._script import call_raw as call_raw
    from ._script import finish as finish
    from ._script import say as say

_LAZY: dict[str, tuple[str, str]] = {
    "Answers": ("_harness", "Answers"),
    "BASE_PLUGINS": ("_harness", "BASE_PLUGINS"),
    "ConfirmAnswer": ("_harness", "ConfirmAnswer"),
    "Harness": ("_harness", "Harness"),
    "Run": ("_harness", "Run"),
    "Step": ("_script", "Step"),
    "call": ("_script", "call"),
    "call_raw": ("_script", "call_raw"),
    "finish": ("_script", "finish"),
    "say": ("_script", "say"),
}


def __getattr__(name: str) -> _typing.Any:
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(_importlib.import_module(f".{module}", __name__), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "Answers",
    "BASE_PLUGINS",
    "ConfirmAnswer",
    "Harness",
    "Run",
    "Step",
    "call",
    "call_raw",
    "finish",
    "say",
]
