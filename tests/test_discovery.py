"""Discovery: entry points to manifests, without importing plugin code."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autogpt_core import ManifestError
from autogpt_core.plugins._discovery import ManifestCache, iter_sources, package_dir, read_manifest
from tests import strategies
from tests.distfactory import write_plugin


def test_package_dir_finds_nested_packages_without_importing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The manifest directory of a.b (and of module a.b.c) is found; nothing is imported."""
    (tmp_path / "outer_pkg_x" / "inner").mkdir(parents=True)
    (tmp_path / "outer_pkg_x" / "__init__.py").write_text("raise RuntimeError('imported!')\n")
    (tmp_path / "outer_pkg_x" / "inner" / "__init__.py").write_text("raise RuntimeError('x')\n")
    (tmp_path / "outer_pkg_x" / "inner" / "mod.py").write_text("raise RuntimeError('y')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    inner = tmp_path / "outer_pkg_x" / "inner"
    assert package_dir("outer_pkg_x.inner") == inner
    assert package_dir("outer_pkg_x.inner.mod") == inner
    assert package_dir("outer_pkg_x.missing") is None
    assert package_dir("no_such_top_level_pkg") is None
    assert "outer_pkg_x" not in sys.modules


def test_manifest_id_must_match_the_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An entry point named differently from its manifest's id is a located error."""
    write_plugin(
        tmp_path,
        "named",
        "",
        manifest="manifest_version: 1\nid: other\nname: x\nversion: '1'\n",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    source = next(s for s in iter_sources() if s.id == "named")
    assert source.distribution == "autogpt-plugin-named"
    assert not source.builtin
    with pytest.raises(ManifestError, match="the manifest says 'other'"):
        read_manifest(source, ManifestCache(None))


def test_an_unreadable_cache_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A corrupt cache file is treated as empty and rewritten."""
    cache_file = tmp_path / "cache.json"
    cache_file.write_text("{not json")
    write_plugin(tmp_path / "site", "cachey", "")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()
    source = next(s for s in iter_sources() if s.id == "cachey")
    cache = ManifestCache(cache_file)
    assert (
        cache.load(tmp_path / "site" / "plug_cachey" / "autogpt-plugin.yaml", source).id == "cachey"
    )
    cache.save()
    assert '"cachey"' in cache_file.read_text()


def test_package_dir_asks_the_finders_for_a_plugin_inside_a_shared_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin module inside a package another distribution owns (found elsewhere by a
    meta path finder, as setuptools' editable finder does) is found, and the owner's
    __init__ is not run."""
    from importlib.machinery import PathFinder

    (tmp_path / "site" / "shared_pkg_x").mkdir(parents=True)
    (tmp_path / "site" / "shared_pkg_x" / "__init__.py").write_text("raise RuntimeError('ran')\n")
    plugin = tmp_path / "src" / "shared_pkg_x" / "plugin"
    plugin.mkdir(parents=True)
    (plugin / "__init__.py").write_text("raise RuntimeError('imported!')\n")

    class EditableLikeFinder:
        @staticmethod
        def find_spec(fullname, path=None, target=None):
            parent, _, _ = fullname.rpartition(".")
            if parent == "shared_pkg_x":
                return PathFinder.find_spec(fullname, [str(tmp_path / "src" / "shared_pkg_x")])
            return None

    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, EditableLikeFinder])
    importlib.invalidate_caches()
    assert package_dir("shared_pkg_x.plugin") == plugin
    assert package_dir("shared_pkg_x.absent") is None
    assert "shared_pkg_x" not in sys.modules
    assert "shared_pkg_x.plugin" not in sys.modules


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    path=st.lists(st.integers(min_value=0, max_value=50), max_size=8),
    replacement=strategies.json_values,
    cut=st.one_of(st.none(), st.integers(min_value=0, max_value=400)),
)
def test_a_damaged_cache_never_breaks_loading_and_rebuilds(
    cached_plugin: tuple[Path, Path, Any], path: list[int], replacement: object, cut: int | None
) -> None:
    """Whatever is changed in the cache file (any value replaced, the file cut short), the
    manifest read is the one on disk, and the cache is written anew."""
    cache_file, manifest_path, source = cached_plugin
    good = ManifestCache(cache_file)
    expected = good.load(manifest_path, source)
    good._dirty = True
    good.save()
    text = json.dumps(
        strategies.replace_in_json(json.loads(cache_file.read_text()), path, replacement)
    )
    cache_file.write_text(text if cut is None else text[:cut])
    cache = ManifestCache(cache_file)
    assert cache.load(manifest_path, source) == expected
    cache.save()
    assert ManifestCache(cache_file).load(manifest_path, source) == expected


def test_a_cache_nested_too_deep_is_ignored(cached_plugin: tuple[Path, Path, Any]) -> None:
    """A cache file too deeply nested to parse is treated as empty, not a RecursionError."""
    cache_file, manifest_path, source = cached_plugin
    cache_file.write_text("[" * 100_000 + "]" * 100_000)
    assert ManifestCache(cache_file).load(manifest_path, source).id == "cachedmf"


@pytest.fixture
def cached_plugin(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, Path, Any]:
    site = tmp_path_factory.mktemp("site")
    write_plugin(site, "cachedmf", "")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    source = next(s for s in iter_sources() if s.id == "cachedmf")
    return site / "cache.json", site / "plug_cachedmf" / "autogpt-plugin.yaml", source
