"""Each server's tool list, kept between runs so that a server starts only when one of its
tools is called.

``tools-cache.json`` in the plugin's data directory holds, per server, the tools it listed
and a fingerprint of its configured entry (command, arguments, directory, URL, and the
names of its ``env`` variables and ``headers``: never their values, which may be secrets
read from the environment -- not even as digests, which would let a reader of the file
test guesses). At load a server whose
entry has the fingerprint of its cached list is not started; a new or changed entry is
started and listed, and its list kept. Each call session lists the tools again when it
opens, and keeps what it finds, so a server that changed its tools is seen from the next
load on. A cache file that cannot be read is ignored (and replaced at the next write).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from mcp.types import Tool

from ._config import ServerSpec

CACHE_FILE = "tools-cache.json"
_VERSION = 1
#: A kept list older than this is listed again at load (a server may gain tools that no
#: call of its old ones would reveal).
MAX_AGE_SECONDS = 24 * 3600.0


def fingerprint(spec: ServerSpec) -> str:
    """What identifies a server's configured entry; of ``env`` and ``headers`` the names
    only (a changed value is seen when a call session lists the tools again)."""
    shape = {
        "command": spec.command,
        "args": list(spec.args),
        "cwd": spec.cwd,
        "url": spec.url,
        "env": sorted(spec.env),
        "headers": sorted(spec.headers),
    }
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()


class ToolCache:
    def __init__(self, data_dir: Path | None) -> None:
        self.path = data_dir / CACHE_FILE if data_dir is not None else None

    def _read(self) -> dict[str, Any]:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError, MemoryError):
            return {}
        if not isinstance(data, dict) or data.get("version") != _VERSION:
            return {}
        servers = data.get("servers")
        return servers if isinstance(servers, dict) else {}

    def get(self, spec: ServerSpec) -> list[Tool] | None:
        """The cached tools of ``spec``'s server, or ``None``: none kept, its entry changed
        since, the list is older than ``MAX_AGE_SECONDS`` or empty (a server with no tools
        would never be called, so never listed again), or the entry is not one this code
        wrote."""
        entry = self._read().get(spec.name)
        if not isinstance(entry, dict) or entry.get("fingerprint") != fingerprint(spec):
            return None
        tools, listed_at = entry.get("tools"), entry.get("listed_at")
        if not isinstance(tools, list) or not tools or not isinstance(listed_at, (int, float)):
            return None
        if not 0 <= time.time() - listed_at <= MAX_AGE_SECONDS:
            return None
        try:
            return [Tool.model_validate(tool) for tool in tools]
        except (ValueError, TypeError, RecursionError):
            return None

    def put(self, spec: ServerSpec, tools: list[Tool]) -> bool:
        """Keep ``tools`` for ``spec``'s server; ``True`` if that changed the file."""
        if self.path is None:
            return False
        servers = self._read()
        listed = [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in tools]
        old = servers.get(spec.name)
        if (
            isinstance(old, dict)
            and old.get("fingerprint") == fingerprint(spec)
            and old.get("tools") == listed
        ):
            return False
        servers[spec.name] = {
            "fingerprint": fingerprint(spec),
            "listed_at": time.time(),
            "tools": listed,
        }
        self._write({"version": _VERSION, "servers": servers})
        return True

    def _write(self, data: dict[str, Any]) -> None:
        assert self.path is not None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Whole or not at all: written beside, then renamed into place.
            fd, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".tools-cache.")
        except OSError:
            return  # a cache: the next load lists the tools again
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                json.dump(data, file, indent=1, sort_keys=True)
            os.replace(temporary, self.path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
