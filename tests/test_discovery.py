"""Discovery: entry points to manifests, without importing plugin code."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from autogpt_core import ManifestError
from autogpt_core._discovery import ManifestCache, iter_sources, package_dir, read_manifest
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
