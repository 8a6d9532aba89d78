"""Finding plugins and their manifests without importing them.

Every plugin, built-in or third-party, is an entry point in the group ``autogpt.plugins``
whose name is the plugin id and whose value names the plugin module (or ``module:object``).
The manifest ``autogpt-plugin.yaml`` sits in the directory of the package that holds that
module. It is found through the import system's *finders* only, the way an import would find
the module, but without importing its parent packages, so no plugin code runs: a plugin may
live in a package other distributions share (``autogpt_plugins`` is a PEP 420 namespace
package), or be installed editable (setuptools' finder resolves it), and still be found.

Validated manifests are cached in one JSON file keyed by the manifest's path, size and
modification time, the distribution's version and the core's version: upgrading or editing
a plugin invalidates its entry.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from importlib.machinery import ModuleSpec
from importlib.metadata import Distribution, EntryPoint, entry_points
from pathlib import Path
from typing import Any

import attrs

from .._errors import ManifestError, ManifestIssue
from .._files import write_atomically
from .._version import __version__
from ._manifest import MANIFEST_FILENAME, Manifest, load_manifest

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


def find_spec_quietly(name: str) -> ModuleSpec | None:
    """The spec the import system would use for module ``name``, running no module's code.

    ``importlib.util.find_spec("a.b")`` imports package ``a`` first, running its
    ``__init__``: someone else's code when ``a`` is shared. Instead, each level asks the
    finders on ``sys.meta_path`` with the search locations of the parent's *spec* -- what
    the import system does with the parent's ``__path__`` once it is imported -- so
    setuptools' editable finder, namespace packages and zip files work as they do for an
    import. A parent already imported is used as it is, its ``__path__`` included.
    """
    module = sys.modules.get(name)
    if module is not None:
        spec = getattr(module, "__spec__", None)
        return spec if isinstance(spec, ModuleSpec) else None
    parent, _, _ = name.rpartition(".")
    if not parent:
        try:
            return importlib.util.find_spec(name)  # top level: finds, imports nothing
        except (ImportError, ValueError):
            return None
    parent_module = sys.modules.get(parent)
    if parent_module is not None:
        path = getattr(parent_module, "__path__", None)
    else:
        parent_spec = find_spec_quietly(parent)
        path = None if parent_spec is None else parent_spec.submodule_search_locations
    if path is None:
        return None  # the parent is a plain module or absent: no submodules
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(name, list(path))
        except Exception:  # a third-party finder's failure means "not found", not a crash
            continue
        if spec is not None:
            return spec if isinstance(spec, ModuleSpec) else None
    return None


def package_dir(module: str) -> Path | None:
    """The directory holding ``module``'s manifest, found without importing anything.

    For ``a.b.c`` this is the directory of package ``a.b.c`` or, when ``c`` is a plain
    module, the directory of package ``a.b``.
    """
    spec = find_spec_quietly(module)
    if spec is None:
        return None
    if spec.origin is not None and spec.has_location:
        if spec.submodule_search_locations is None and "." not in module:
            # A top-level single-file module: its manifest would sit beside it, among
            # unrelated files, so plugins must be packages.
            return None
        return Path(spec.origin).parent
    locations = list(spec.submodule_search_locations or ())
    # A namespace package has no file of its own: only one directory can hold its manifest.
    return Path(locations[0]) if len(locations) == 1 else None


def manifest_path(source: PluginSource) -> Path | None:
    directory = package_dir(source.module)
    return None if directory is None else directory / MANIFEST_FILENAME


#: Raised whenever what a cached manifest has been checked for changes, so that manifests
#: cached by an older check are checked again (2: YAML aliases, schemas, $refs, patterns).
CACHE_FORMAT = 2


class ManifestCache:
    """A JSON file of validated manifests; entries go stale when their key changes."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._entries: dict[str, Any] = {}
        self._dirty = False
        if path is not None:
            # Only a cache: whatever is wrong with the file (truncated, edited, from another
            # version, nested too deep to parse), it is ignored and rewritten.
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError, RecursionError):
                loaded = None
            if (
                isinstance(loaded, dict)
                and loaded.get("core") == __version__
                and loaded.get("format") == CACHE_FORMAT
            ):
                entries = loaded.get("entries")
                if isinstance(entries, dict):
                    self._entries = {k: v for k, v in entries.items() if isinstance(v, dict)}

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
            # The checksum catches an entry damaged or edited since it was written, which
            # could otherwise rebuild a manifest that was never validated.
            if entry.get("sum") == _checksum(entry.get("manifest")):
                try:
                    return Manifest.from_json(entry["manifest"])
                except Exception:  # noqa: BLE001 - from an older layout: re-read the file
                    pass
        manifest = load_manifest(path)
        if key is not None:
            data = manifest.to_json()
            self._entries[str(path)] = {"key": key, "manifest": data, "sum": _checksum(data)}
            self._dirty = True
        return manifest

    def save(self) -> None:
        """Write the cache if it changed; a cache that cannot be written is simply skipped."""
        if not self._dirty or self.path is None:
            return
        try:
            document = {"core": __version__, "format": CACHE_FORMAT, "entries": self._entries}
            write_atomically(self.path, json.dumps(document))
            self._dirty = False
        except OSError:
            pass


def _checksum(data: Any) -> str:
    try:
        text = json.dumps(data, sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        return ""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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
