"""Finding and importing classic plugins: a source -> its packages -> their plugin classes.

A published classic plugin is a zip of ``autogpt_plugins/NAME/__init__.py ...`` (often
under a directory such as ``Auto-GPT-Plugins-master/src/``): the same top-level package
name as this project's built-in plugins. Importing it as ``autogpt_plugins.NAME`` would
merge it into the built-ins' namespace package (or shadow one), so each package is imported
under a private parent instead: ``_autogpt_classic_<hash>.NAME``, whose ``__path__`` is the
directory inside the zip (zipimport reads ``ARCHIVE.zip/inner/dir`` path entries) or on
disk. The package's relative imports resolve inside it; ``autogpt_plugins`` is untouched.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.machinery
import inspect
import os
import sys
import types
import zipfile
import zipimport
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import attrs

#: The parent package name every classic package is imported under (plus a hash).
PRIVATE_PREFIX = "_autogpt_classic_"
#: How deep a directory source is searched for packages, and how many entries at most.
_MAX_DEPTH = 5
_MAX_ENTRIES = 20_000
_SKIPPED_DIRS = ("__pycache__", "__MACOSX")
#: What a zip may unpack to: it is checked whole (``testzip``) at every load, so a zip
#: bomb would cost that much CPU each time.
_MAX_UNPACKED = 256 * 1024 * 1024


class SourceError(Exception):
    """A source cannot be read, or a package in it not loaded; the message says why and
    how to fix it."""


@attrs.frozen
class Declared:
    """The names a package's ``__init__.py`` binds at its top level: the classes it defines
    and the names it imports."""

    classes: tuple[str, ...]
    imports: frozenset[str]
    #: Why the file could not be read without running it (then nothing else is known,
    #: and the package is never imported).
    unreadable: str | None = None

    @property
    def names(self) -> frozenset[str]:
        return self.imports.union(self.classes)


@attrs.frozen
class Package:
    """One package of a source: imported from ``location`` (a directory, or
    ``ARCHIVE.zip/inner``) as ``_autogpt_classic_<token>.name``."""

    source: str
    location: str
    name: str
    token: str
    #: What its ``__init__.py`` declares, read without running it (``declared_names``).
    declared: Declared = Declared((), frozenset(), "it was not read")

    @property
    def module_name(self) -> str:
        return f"{PRIVATE_PREFIX}{self.token}.{self.name}"


def resolve(entry: str, config_dir: Path | None) -> Path:
    """A configured source's path: ``~`` expanded, relative to ``config_dir``."""
    path = Path(entry).expanduser()
    if not path.is_absolute() and config_dir is not None:
        path = config_dir / path
    return path


def packages(source: str, path: Path) -> list[Package]:
    """The classic packages of one configured source (a zip, a plugin tree, or a plugins
    directory of zips and trees); ``SourceError`` when it cannot be read."""
    if not path.exists():
        raise SourceError(
            f"{path} does not exist: fix the path in plugins.settings.classic.sources "
            "(relative paths are relative to the config file's directory)"
        )
    if path.is_file():
        return _zip_packages(source, path)
    if not path.is_dir():
        raise SourceError(f"{path} is neither a zip file nor a directory")
    found = _dir_packages(source, path)
    # A plugins directory, as Auto-GPT's plugins_dir: each zip in it is a source too.
    for child in sorted(path.glob("*.zip")):
        found.extend(_zip_packages(f"{source}/{child.name}", child))
    return found


def _zip_packages(source: str, path: Path) -> list[Package]:
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            unpacked = sum(info.file_size for info in archive.infolist())
            if unpacked > _MAX_UNPACKED:
                raise SourceError(
                    f"{path} unpacks to {unpacked:,} bytes, more than a plugin's "
                    f"{_MAX_UNPACKED:,}: it is not a classic plugin's zip (or one packed with "
                    "far more than its code); give the plugin's own zip"
                )
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise SourceError(
            f"{path} is not a readable zip file ({exc}): download it again, or unzip it and "
            "give the directory instead"
        ) from None
    if bad is not None:
        raise SourceError(
            f"{path} is a damaged zip file (the member {bad!r} does not match its checksum): "
            "download it again"
        )

    def read(member: str) -> bytes:
        with zipfile.ZipFile(path) as archive:
            return archive.read(member)

    return _packages(source, path, names, read)


def _dir_packages(source: str, path: Path) -> list[Package]:
    inits: list[str] = []
    seen = 0
    for top, dirs, files in os.walk(path):
        depth = len(Path(top).relative_to(path).parts)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIPPED_DIRS)
        if depth >= _MAX_DEPTH:
            dirs[:] = []
        seen += len(files) + len(dirs)
        if seen > _MAX_ENTRIES:
            raise SourceError(
                f"{path} holds more than {_MAX_ENTRIES:,} files within {_MAX_DEPTH} levels: "
                "give the plugin's own directory, not a larger one"
            )
        if "__init__.py" in files:
            inits.append(Path(top, "__init__.py").relative_to(path).as_posix())
    return _packages(source, path, inits, lambda member: (path / member).read_bytes())


def _packages(
    source: str, path: Path, members: Iterable[str], read: Callable[[str], bytes]
) -> list[Package]:
    """The classic packages among ``members`` (``/``-separated paths of ``__init__.py``
    files in the zip file or directory ``path``, read by ``read``), each where it is
    imported from."""
    stat = path.stat()
    base = path.resolve()
    found = []
    for inner, name in package_dirs(members):
        location = os.path.join(base, *inner.split("/")) if inner else str(base)
        init = f"{inner}/{name}/__init__.py" if inner else f"{name}/__init__.py"
        declared = declared_names(read, init)
        found.append(Package(source, location, name, _token(path, inner, stat), declared))
    return found


def declared_names(read: Callable[[str], bytes], init: str) -> Declared:
    """The classes ``init`` (a package's ``__init__.py``) defines and the names it imports,
    read without running it: a package naming no allowed class is never imported.

    Top-level statements count, and those inside top-level ``if``/``try``/``with`` blocks
    (``try: from .x import Plugin``). When the names cannot be told -- the file cannot be
    read, is not Python, or imports ``*`` -- ``unreadable`` says why, and the package is
    never imported either: its code would run before anyone knew which classes it holds.
    """
    try:
        tree = ast.parse(read(init))
    except (RecursionError, MemoryError):
        return Declared((), frozenset(), f"its {init} is nested too deeply to be read")
    except SyntaxError as exc:
        return Declared(
            (), frozenset(), f"its {init} is not valid Python ({exc.msg}, line {exc.lineno})"
        )
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        return Declared((), frozenset(), f"its {init} cannot be read ({exc})")
    classes: list[str] = []
    imports: set[str] = set()
    nodes = list(tree.body)
    while nodes:
        node = nodes.pop(0)
        if isinstance(node, ast.ClassDef):
            classes.append(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    return Declared(
                        (),
                        frozenset(),
                        f"its {init} imports * (from {'.' * getattr(node, 'level', 0)}"
                        f"{getattr(node, 'module', None) or ''} import *), so which classes it "
                        "holds cannot be told without running it: import the plugin class by "
                        "its name there (from .module import PluginClass)",
                    )
                if alias.asname:
                    imports.add(alias.asname)
                elif isinstance(node, ast.ImportFrom):
                    imports.add(alias.name)
                else:
                    imports.add(alias.name.partition(".")[0])  # 'import a.b' binds a
        elif isinstance(node, ast.If | ast.Try | ast.TryStar | ast.With):
            nodes[:0] = [
                *node.body,
                *getattr(node, "orelse", ()),
                *getattr(node, "finalbody", ()),
                *(n for handler in getattr(node, "handlers", ()) for n in handler.body),
            ]
    return Declared(tuple(classes), frozenset(imports))


def package_dirs(names: Iterable[str]) -> list[tuple[str, str]]:
    """``(parent directory, package name)`` of the classic packages among archive member
    names (``/``-separated): each ``…/autogpt_plugins/NAME/__init__.py``; when there is
    none, each top-most package (``NAME/__init__.py`` whose parent is no package)."""
    inits = {
        name.removesuffix("/__init__.py")
        for name in names
        if name.endswith("/__init__.py")
        and not name.startswith((*_SKIPPED_DIRS, "/"))
        and "/." not in f"/{name}"
    }
    classic = []
    for directory in sorted(inits):
        parts = directory.split("/")
        if len(parts) >= 2 and parts[-2] == "autogpt_plugins" and parts[-1].isidentifier():
            classic.append(("/".join(parts[:-1]), parts[-1]))
    if classic:
        return classic
    top = []
    for directory in sorted(inits):
        parts = directory.split("/")
        parent = "/".join(parts[:-1])
        if parent in inits or not parts[-1].isidentifier() or "autogpt_plugins" in parts:
            continue
        top.append((parent, parts[-1]))
    return top


def _token(path: Path, inner: str, stat: os.stat_result) -> str:
    # The file's identity and version: a zip replaced by a newer one is imported afresh.
    key = f"{path.resolve()}\0{inner}\0{stat.st_mtime_ns}\0{stat.st_size}"
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:12]


def import_package(package: Package) -> types.ModuleType:
    """Import ``package`` under its private name; ``SourceError`` says what failed."""
    parent_name = package.module_name.rpartition(".")[0]
    if parent_name not in sys.modules:
        _forget_stale_zip(package.location)
        parent = types.ModuleType(parent_name, f"Classic Auto-GPT plugins of {package.source}")
        spec = importlib.machinery.ModuleSpec(parent_name, None, is_package=True)
        spec.submodule_search_locations = [package.location]
        parent.__spec__ = spec
        parent.__path__ = [package.location]
        parent.__package__ = parent_name
        sys.modules[parent_name] = parent
    try:
        return importlib.import_module(package.module_name)
    except ModuleNotFoundError as exc:
        _forget(package.module_name)
        missing = exc.name or "?"
        if missing == "autogpt_plugins" or missing.startswith("autogpt_plugins."):
            fix = (
                "it imports itself by its absolute name (autogpt_plugins...), which would "
                "mix it with this project's plugins; make those imports relative "
                "(from . import ...)"
            )
        elif missing == "autogpt" or missing.startswith("autogpt."):
            fix = "it needs Auto-GPT itself (the autogpt package), which this core is not"
        else:
            fix = f"install what it needs into this environment (pip install {missing})"
        raise SourceError(
            f"importing its package {package.name} failed: {type(exc).__name__}: {exc}: {fix}"
        ) from None
    except Exception as exc:
        _forget(package.module_name)
        raise SourceError(
            f"importing its package {package.name} failed: {type(exc).__name__}: {exc}"
        ) from None


def _forget(module_name: str) -> None:
    """Drop what a failed import left half-made, so that a reload tries again."""
    for name in [n for n in sys.modules if n == module_name or n.startswith(module_name + ".")]:
        del sys.modules[name]


def _forget_stale_zip(location: str) -> None:
    # zipimport keeps each archive's table of contents by path: a zip replaced since it was
    # last read would be read with the old table.
    cache: dict[str, Any] | None = getattr(zipimport, "_zip_directory_cache", None)
    if cache is None:
        return
    for key in [k for k in cache if location == k or location.startswith(k + os.sep)]:
        del cache[key]
    for key in [k for k in sys.path_importer_cache if k.startswith(location)]:
        del sys.path_importer_cache[key]


def plugin_classes(module: types.ModuleType, template: type) -> list[type]:
    """The subclasses of ``template`` (``AutoGPTPluginTemplate``) that ``module``'s
    package defines, as Auto-GPT's ``scan_plugins`` found them (abstract ones too: the
    caller reports what they lack)."""
    found = []
    for _, value in sorted(vars(module).items()):
        if not inspect.isclass(value) or value is template or not issubclass(value, template):
            continue
        owner = getattr(value, "__module__", "")
        if owner == module.__name__ or owner.startswith(module.__name__ + "."):
            if value not in found:
                found.append(value)
    return found
