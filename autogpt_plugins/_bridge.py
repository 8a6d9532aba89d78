"""What the built-in bridges (``openapi``, ``classic``) share: how a name from elsewhere
(an ``operationId``, an ``add_command`` name) becomes the ``NAME`` of ``PREFIX.NAME``."""

from __future__ import annotations

import re

#: A command name keeps letters, digits, ``_`` and ``-`` (the core's ``BRIDGED_NAME``);
#: any other character becomes ``_``.
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")


def command_name(name: str) -> str:
    """``name`` as the ``NAME`` of a bridged command (``""`` when nothing is left)."""
    return _NAME_CHARS.sub("_", name.strip())
