"""The plugin index: a JSON document, at a path or an ``http(s)`` URL the user configures
(``plugins.index``), listing plugins that can be installed, each with its manifest.

No index is read unless one is configured. The document::

    {"plugins": [
        {"requirement": "autogpt-plugin-weather>=1.0",      # what pip installs
         "manifest": {"manifest_version": 1, "id": "weather", ...}},
        ...
    ]}

``requirement`` is a PEP 508 requirement, or the path or URL of a wheel (a relative path
is taken from the index's directory). Each manifest is validated as an installed plugin's
is; an entry that is not valid is left out, with the reason (``PluginIndex.problems``), so
one bad entry does not hide the others.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs

from .._errors import ConfigError, ManifestError
from ._manifest import Manifest, validate_manifest

#: An index larger than this is refused: it is a list of manifests, not a package store.
MAX_INDEX_BYTES = 4 * 1024 * 1024
_WORD = re.compile(r"\w+")


@attrs.frozen
class IndexEntry:
    """One plugin the index lists: what pip installs, and its manifest."""

    requirement: str
    manifest: Manifest


@attrs.frozen
class PluginIndex:
    """The entries of one index document, and the problems of those left out."""

    location: str
    entries: tuple[IndexEntry, ...]
    problems: tuple[str, ...] = ()

    def get(self, plugin_id: str) -> IndexEntry | None:
        for entry in self.entries:
            if entry.manifest.id == plugin_id:
                return entry
        return None

    def search(self, query: str) -> list[IndexEntry]:
        """The entries matching any word of ``query``, best first (all for no words)."""
        return [entry for _, entry in ranked(self.entries, query, lambda e: e.manifest)]


def ranked(items: Iterable[Any], query: str, manifest_of: Any) -> list[tuple[int, Any]]:
    """``(score, item)`` for the items whose manifest matches a word of ``query``, best
    first: a word in the id or name counts three, in a description or command one."""
    words = {w.lower() for w in _WORD.findall(query)}
    found = []
    for n, item in enumerate(items):
        manifest: Manifest = manifest_of(item)
        strong = " ".join([manifest.id, manifest.name]).lower()
        weak = " ".join(
            [
                manifest.description,
                *(f"{c.name} {' '.join(c.aliases)} {c.description}" for c in manifest.commands),
            ]
        ).lower()
        score = sum(3 * (w in strong) + (w in weak) for w in words)
        if score or not words:
            found.append((-score, n, item))
    found.sort(key=lambda t: (t[0], t[1]))
    return [(-score, item) for score, _, item in found]


def read_index(location: str, *, timeout: float = 30.0) -> PluginIndex:
    """Read and check the index at ``location`` (a path or an ``http(s)`` URL).

    Raises ``ConfigError`` naming the index when it cannot be read or is not an index
    document at all; entries that are not valid are left out, each with its reason.
    """
    text = _fetch(location, timeout)
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(
            f"the plugin index {location} is not JSON ({exc}); fix the file, or set "
            "plugins.index to another one"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("plugins"), list):
        raise ConfigError(
            f'the plugin index {location} is not an index: expected {{"plugins": [...]}}; '
            "see docs/plugins.md"
        )
    base = None if _is_url(location) else Path(location).expanduser().resolve().parent
    entries: list[IndexEntry] = []
    problems: list[str] = []
    seen: set[str] = set()
    for n, item in enumerate(data["plugins"]):
        where = f"{location}: plugins[{n}]"
        if not isinstance(item, dict):
            problems.append(f"{where}: not an object with 'requirement' and 'manifest'")
            continue
        requirement = item.get("requirement")
        problem = _requirement_problem(requirement)
        if problem:
            problems.append(f"{where}: 'requirement' {problem}")
            continue
        assert isinstance(requirement, str)
        try:
            manifest = validate_manifest(item.get("manifest"), source=f"{where}.manifest")
        except ManifestError as exc:
            problems.append(str(exc))
            continue
        if manifest.id in seen:
            problems.append(f"{where}: plugin {manifest.id!r} is listed twice; the first counts")
            continue
        seen.add(manifest.id)
        entries.append(IndexEntry(_resolved(requirement.strip(), base), manifest))
    return PluginIndex(location, tuple(entries), tuple(problems))


def _requirement_problem(requirement: object) -> str:
    """Why ``requirement`` is not something pip may be given from an index: a PEP 508
    requirement, or a wheel's path or URL. Never a pip option (``-r FILE``,
    ``--index-url``), never text with line breaks or control characters."""
    from packaging.requirements import InvalidRequirement, Requirement

    if not isinstance(requirement, str) or not requirement.strip():
        return "must be a requirement or a wheel's path or URL"
    text = requirement.strip()
    if text.startswith("-") or not text.isprintable():
        return f"{text!r} is not a requirement or a wheel (pip options are not accepted)"
    if text.lower().endswith(".whl") and " " not in text:
        return ""
    try:
        Requirement(text)
    except InvalidRequirement as exc:
        return f"{text!r} is not a requirement or a wheel ({exc})"
    return ""


def _is_url(location: str) -> bool:
    return urlsplit(location).scheme in ("http", "https")


def _resolved(requirement: str, base: Path | None) -> str:
    """A relative wheel path taken from the index's directory; anything else as it is."""
    if base is None or _is_url(requirement) or not requirement.endswith((".whl", ".zip")):
        return requirement
    path = Path(requirement).expanduser()
    return str(path if path.is_absolute() else base / path)


def _fetch(location: str, timeout: float) -> str:
    if _is_url(location):
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(location, timeout=timeout) as response:  # noqa: S310
                raw = bytes(response.read(MAX_INDEX_BYTES + 1))
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise ConfigError(
                f"cannot read the plugin index {location}: {exc}; check the URL "
                "(plugins.index in the config)"
            ) from None
    else:
        path = Path(location).expanduser()
        try:
            with path.open("rb") as file:
                raw = file.read(MAX_INDEX_BYTES + 1)
        except OSError as exc:
            raise ConfigError(
                f"cannot read the plugin index {path}: {exc.strerror or exc}; check "
                "plugins.index in the config"
            ) from None
    if len(raw) > MAX_INDEX_BYTES:
        raise ConfigError(
            f"the plugin index {location} is larger than {MAX_INDEX_BYTES // 1024 // 1024} MiB"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"the plugin index {location} is not UTF-8 text") from None
