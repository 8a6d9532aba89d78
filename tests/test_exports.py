"""The public surfaces are exactly what ``__all__`` says, and the contract stays thin."""

from __future__ import annotations
import __future__

import subprocess
import sys
import types

import pytest

import autogpt_core
import hookspecs


def _public_names(module: types.ModuleType) -> list[str]:
    for name in getattr(module, "_LAZY", {}):
        getattr(module, name)  # lazily exported names appear once used
    return sorted(
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and not isinstance(value, __future__._Feature)
    )


@pytest.mark.parametrize("module", [hookspecs, autogpt_core])
def test_all_lists_every_public_name(module: types.ModuleType) -> None:
    """``__all__`` is sorted and equals the public, non-module names of the package."""
    public = _public_names(module)
    listed = [
        name
        for name in module.__all__
        if not name.startswith("_") and not isinstance(getattr(module, name), types.ModuleType)
    ]
    assert sorted(listed) == public
    assert list(module.__all__) == sorted(module.__all__)


def test_lazy_exports_resolve_and_unknown_names_fail() -> None:
    """Every name in autogpt_core.__all__ resolves; a missing one is an AttributeError."""
    for name in autogpt_core.__all__:
        assert getattr(autogpt_core, name) is not None
    with pytest.raises(AttributeError, match="no_such_name"):
        autogpt_core.no_such_name  # noqa: B018


def test_version_needs_no_engine() -> None:
    """The CLI's parser (all --version builds) imports neither the loader nor storage."""
    code = (
        "import sys\n"
        "from autogpt_core.cli._cli import build_parser\n"
        "build_parser()\n"
        "heavy = ('autogpt_core.plugins._loader', 'autogpt_core.store._storage',"
        " 'autogpt_core.agent._runtime', 'hookspecs._types', 'sqlite3', 'openai')\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_importing_hookspecs_pulls_in_no_engine() -> None:
    """``import hookspecs`` imports neither trio, openai nor autogpt_core."""
    code = (
        "import sys, hookspecs\n"
        "bad = [m for m in ('trio', 'openai', 'autogpt_core', 'yaml') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_every_spec_is_documented_and_typed() -> None:
    """Each hook specification has a docstring and annotations for every argument."""
    import inspect

    specs = [
        obj
        for name, obj in vars(hookspecs.specs).items()
        if inspect.isfunction(obj) and hasattr(obj, "autogpt_spec")
    ]
    assert len(specs) >= 18
    for spec in specs:
        assert spec.__doc__, spec.__name__
        assert len(spec.__doc__.strip()) > 20, spec.__name__
        sig = inspect.signature(spec)
        for param in sig.parameters.values():
            assert param.annotation is not inspect.Parameter.empty, (spec.__name__, param.name)
        assert sig.return_annotation is not inspect.Signature.empty, spec.__name__
