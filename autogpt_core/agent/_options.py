"""``RunOptions``: the runtime's input for one session, and what of it a session keeps.

The CLI builds a ``RunOptions`` from ``autogpt run``'s options (the HTTP server will from a
task's request); ``Runtime.run`` and ``Runtime.resume`` take it. What a particular plugin
needs for a run (replay's strictness, a recording's file) is that plugin's settings, not
a field here: the core names no plugin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from .._errors import ConfigError
from ..store._open import shown_location


@attrs.frozen
class RunOptions:
    """How to run one session (what the CLI's ``autogpt run`` options map to)."""

    llm: str | None = None
    model: str | None = None
    base_url: str | None = None
    api_key: str | None = attrs.field(default=None, repr=False)
    max_cycles: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    continuous: bool = False
    workspace: Path | None = None
    session_id: str | None = None
    # Who the session belongs to: the name of the server token that created it (None for
    # the terminal's sessions). Stored; the server shows a session only to its owner.
    owner: str | None = None
    # A server task created to run on its own: on a shared store, another server continues
    # it if the server running it dies. Stored.
    autonomous: bool = False


#: The options stored with a session (never the API key), so that a resume runs it alike,
#: and the type each must have (``None`` allowed for all but the booleans).
STORED_OPTIONS: dict[str, type | tuple[type, ...]] = {
    "llm": str,
    "model": str,
    "base_url": str,
    "max_cycles": int,
    "max_tokens": int,
    "max_cost": (int, float),
    "continuous": bool,
    "owner": str,
    "autonomous": bool,
}


def options_to_store(options: RunOptions) -> dict[str, Any]:
    """What of ``options`` is stored with a new session."""
    return {name: getattr(options, name) for name in STORED_OPTIONS}


def options_for_resume(
    given: RunOptions, stored: Any, *, session_id: str, workspace: Path, store_path: Path | str
) -> RunOptions:
    """``given``, with what the session stored where ``given`` keeps a default.

    ``stored`` is checked first: the store is a file anyone can edit. Keys stored by older
    versions (``strict_replay``) are ignored.
    """
    saved = _checked(session_id, stored, shown_location(store_path))
    defaults = RunOptions()
    return attrs.evolve(
        given,
        workspace=workspace,
        session_id=session_id,
        **{
            name: saved[name]
            for name in STORED_OPTIONS
            if name in saved and getattr(given, name) == getattr(defaults, name)
        },
    )


def _checked(session_id: str, config: Any, path: str) -> dict[str, Any]:
    """The options stored with a session, checked."""
    if not isinstance(config, dict):
        raise ConfigError(
            f"{path}: the stored options of session {session_id} are not a mapping; "
            "start a new session, or delete this one with 'autogpt sessions delete'"
        )
    for name, want in STORED_OPTIONS.items():
        if name not in config:
            continue
        value = config[name]
        nullable = want is not bool
        wrong_bool = isinstance(value, bool) and want is not bool
        if (value is None and nullable) or (isinstance(value, want) and not wrong_bool):
            continue
        raise ConfigError(
            f"{path}: session {session_id} has a stored option {name}={value!r}, which is "
            "not valid (the store was damaged or edited); start a new session"
        )
    return dict(config)
