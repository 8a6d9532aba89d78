"""Finding plugins and their manifests without importing them.

Every plugin, built-in or third-party, is an entry point in the group ``autogpt.plugins``
whose name is the plugin id and whose value names the plugin module (or ``module:object``).
The manifest ``autogpt-plugin.yaml`` sits in the directory of the package that holds that
module. It is found through the import system's *finders* only — ``find_spec`` on the
top-level package and then plain directory look-ups — so no plugin code runs.

Validated manifests are cached in one JSON file keyed by the manifest's path, size and
modification time, the distribution's version and the core's version: upgrading or editing
a plugin invalidates its entry.
"""

from __future__ import annotations

import importlib.util
import json
import os
from importlib.metadata import Distribution, EntryPoint, entry_points
from pathlib import Path
from typing import Any

import attrs

from ._errors import ManifestError, ManifestIssue
from ._files import write_atomically
from ._manifest import MANIFEST_FILENAME, Manifest, load_manifest
from ._version import __version__

ENTRY_POINT_GROUP = "autogpt.plugins"
CORE_DISTRIBUTION = "autogpt-core"


@attrs.frozen
class PluginSource:
    """Where a plugin comes from: its entry point and distribution."""

    id: str
    value: str
    distribution: str
    dist_version: str
    entry_point: EntryPoint = attrs.field(eq=False, repr=False)

    @property
    def module(self) -> str:
        return self.value.partition(":")[0].strip()

    @property
    def builtin(self) -> bool:
        return self.distribution == CORE_DISTRIBUTION


def iter_sources(group: str = ENTRY_POINT_GROUP) -> list[PluginSource]:
    """Every entry point of ``group``, sorted by id then distribution (imports nothing)."""
    found: list[PluginSource] = []
    for ep in entry_points(group=group):
        name, version = _name_and_version(ep.dist)
        found.append(PluginSource(ep.name, ep.value, _canonical(name), version, ep))
    found.sort(key=lambda s: (s.id, s.distribution))
    return found


def _name_and_version(dist: Distribution | None) -> tuple[str, str]:
    """A distribution's name and version, from its ``.dist-info`` directory name if it can.

    ``NAME-VERSION.dist-info`` is how installers name it (PEP 427's escaping: no '-' in
    either part), and reading it costs nothing, where ``dist.version`` parses the whole
    METADATA file: with hundreds of plugins installed that was a third of start-up.
    """
    if dist is None:
        return "?", "?"
    path = getattr(dist, "_path", None)  # PathDistribution's; absent on other kinds
    if isinstance(path, Path) and path.suffix == ".dist-info":
        name, sep, version = path.stem.partition("-")
        if sep and version and "-" not in version:
            return name, version
    return dist.name, dist.version


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def package_dir(module: str) -> Path | None:
    """The directory holding ``module``'s manifest, found without importing anything.

    For ``a.b.c`` this is the directory of package ``a.b.c`` or, when ``c`` is a plain
    module, the directory of package ``a.b``.
    """
    parts = module.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not spec.submodule_search_locations:
        # A top-level single-file module: its manifest would sit beside it, among
        # unrelated files, so plugins must be packages.
        return None
    locations = [Path(p) for p in spec.submodule_search_locations]
    for part in parts[1:]:
        for location in locations:
            candidate = location / part
            if candidate.is_dir():
                locations = [candidate]
                break
            if (location / f"{part}.py").is_file():
                return location
        else:
            return None
    return locations[0] if locations else None


def manifest_path(source: PluginSource) -> Path | None:
    directory = package_dir(source.module)
    return None if directory is None else directory / MANIFEST_FILENAME


class ManifestCache:
    """A JSON file of validated manifests; entries go stale when their key changes."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._entries: dict[str, Any] = {}
        self._dirty = False
        if path is not None:
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
                if isinstance(loaded, dict) and loaded.get("core") == __version__:
                    self._entries = loaded.get("entries", {})
            except (OSError, ValueError):
                self._entries = {}

    @staticmethod
    def _key(path: Path, source: PluginSource) -> str | None:
        try:
            stat = path.stat()
        except OSError:
            return None
        return f"{stat.st_size}:{stat.st_mtime_ns}:{source.distribution}=={source.dist_version}"

    def load(self, path: Path, source: PluginSource) -> Manifest:
        """The manifest at ``path``, from the cache when still valid."""
        key = self._key(path, source)
        entry = self._entries.get(str(path))
        if key is not None and entry is not None and entry.get("key") == key:
            try:
                return Manifest.from_json(entry["manifest"])
            except (KeyError, TypeError):
                pass  # an entry from an older layout: re-read the file
        manifest = load_manifest(path)
        if key is not None:
            self._entries[str(path)] = {"key": key, "manifest": manifest.to_json()}
            self._dirty = True
        return manifest

    def save(self) -> None:
        """Write the cache if it changed; a cache that cannot be written is simply skipped."""
        if not self._dirty or self.path is None:
            return
        try:
            write_atomically(self.path, json.dumps({"core": __version__, "entries": self._entries}))
            self._dirty = False
        except OSError:
            pass


def default_cache_path() -> Path | None:
    if os.environ.get("AUTOGPT_NO_CACHE"):
        return None
    env = os.environ.get("AUTOGPT_CACHE_DIR")
    if env:
        return Path(env) / "manifests.json"
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("autogpt")) / "manifests.json"


def read_manifest(source: PluginSource, cache: ManifestCache) -> Manifest:
    """The source's manifest; ``ManifestError`` when missing or invalid."""
    path = manifest_path(source)
    if path is None:
        raise ManifestError(
            [
                ManifestIssue(
                    f"entry point {source.id} = {source.value} ({source.distribution})",
                    "",
                    f"cannot locate the package of module {source.module!r}",
                    "point the entry point at a module inside an installed package",
                )
            ]
        )
    manifest = cache.load(path, source)
    if manifest.id != source.id:
        raise ManifestError(
            [
                ManifestIssue(
                    str(path),
                    "id",
                    f"the manifest says {manifest.id!r} but the entry point is named {source.id!r}",
                    "use the same name for the entry point and the manifest id",
                )
            ]
        )
    return manifest
