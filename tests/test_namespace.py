"""``autogpt_plugins`` is shared: another distribution may install into it, either way round.

PyPI's ``autogpt-plugins`` 0.0.2 installs a top-level ``autogpt_plugins`` package with an
``__init__.py``. These tests pip-install the core (a wheel, and editable) and a wheel of
that shape into fresh virtualenvs, in both orders, and uninstall each: the built-ins must
load and the demo run, and the other distribution must keep its files.
"""

from __future__ import annotations

import configparser
import json
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.clirun import cli_env
from tests.distfactory import write_wheel

ROOT = Path(__file__).resolve().parent.parent
LEGACY_MARKER = "autogpt-plugins 0.0.2"


def _builtin_ids(source: Path) -> list[str]:
    parser = configparser.ConfigParser()
    parser.read(source / "setup.cfg")
    lines = parser["options.entry_points"]["autogpt.plugins"].strip().splitlines()
    return sorted(line.partition("=")[0].strip() for line in lines)


@pytest.fixture(scope="module")
def core_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the core's source, so that builds leave nothing in the repository."""
    source = tmp_path_factory.mktemp("core-src") / "autogpt-core"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    source.mkdir()
    for name in ("setup.cfg", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("hookspecs", "autogpt_core", "autogpt_plugins"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    return source


@pytest.fixture(scope="module")
def core_wheel(core_source: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The core built by pip, as ``pip install .`` builds it."""
    out = tmp_path_factory.mktemp("core-wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out)]
        + [str(core_source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("autogpt_core-*.whl")
    return wheel


@pytest.fixture(scope="module")
def legacy_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel shaped like PyPI's autogpt-plugins 0.0.2: autogpt_plugins/__init__.py + a module."""
    return write_wheel(
        tmp_path_factory.mktemp("legacy-wheel"),
        "autogpt-plugins",
        "0.0.2",
        {
            "autogpt_plugins/__init__.py": f"MARKER = {LEGACY_MARKER!r}\n",
            "autogpt_plugins/legacy_tool.py": "def tool():\n    return 'legacy tool'\n",
        },
    )


@pytest.fixture(scope="module")
def deps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This environment's installed packages minus autogpt-core itself, as one directory.

    Each fresh venv reads it through a ``.pth`` line: installing trio, openai and the rest
    per venv would cost most of the test's time, and the core must come only from the
    install under test.
    """
    here = Path(sysconfig.get_paths()["purelib"])
    out = tmp_path_factory.mktemp("deps")
    for entry in here.iterdir():
        if entry.name.startswith(("autogpt", "__editable__")) or entry.suffix == ".pth":
            continue
        (out / entry.name).symlink_to(entry)
    return out


class Venv:
    """A fresh virtualenv with the shared dependencies; pip and the CLI run inside it."""

    def __init__(self, path: Path, deps: Path, home: Path) -> None:
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(path)],
            check=True,
            capture_output=True,
        )
        self.python = path / "bin" / "python"
        purelib = subprocess.run(
            [str(self.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        Path(purelib, "deps.pth").write_text(f"{deps}\n")
        self.purelib = Path(purelib)
        self.home = home
        # Not the repository: '' on sys.path must not find its autogpt_plugins.
        self.cwd = home

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = cli_env(self.home)
        env.pop("VIRTUAL_ENV", None)
        return subprocess.run(
            [str(self.python), *args],
            env=env,
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def pip(self, *args: str) -> None:
        result = self.run("-m", "pip", "--no-input", *args)
        assert result.returncode == 0, result.stdout + result.stderr

    def assert_core_works(self, builtins: list[str]) -> None:
        listed = self.run("-m", "autogpt_core", "plugins", "list", "--all", "--json")
        assert listed.returncode == 0, listed.stderr
        rows = {r["id"]: r for r in json.loads(listed.stdout)}
        assert sorted(rows) == builtins
        broken = {pid: r["reason"] for pid, r in rows.items() if r["status"] == "broken"}
        assert broken == {}
        workspace = self.home / "ws"
        shutil.rmtree(workspace, ignore_errors=True)
        demo = self.run("-m", "autogpt_core", "run", "--demo", "--workspace", str(workspace))
        assert demo.returncode == 0, demo.stderr
        assert "warning" not in demo.stderr
        assert (workspace / "haiku.txt").is_file()

    def assert_legacy_works(self) -> None:
        code = (
            "import autogpt_plugins, autogpt_plugins.legacy_tool as t; "
            "print(autogpt_plugins.MARKER, '|', t.tool())"
        )
        result = self.run("-c", code)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"{LEGACY_MARKER} | legacy tool"


def test_wheel_ships_every_manifest_and_no_package_init(core_wheel: Path) -> None:
    """The built core holds every built-in's manifest and the demo files, and no
    autogpt_plugins/__init__.py that another distribution's could collide with."""
    names = set(zipfile.ZipFile(core_wheel).namelist())
    manifests = {
        str(p.relative_to(ROOT)) for p in (ROOT / "autogpt_plugins").glob("*/autogpt-plugin.yaml")
    }
    assert len(manifests) == len(_builtin_ids(ROOT))
    assert manifests <= names
    demo = {str(p.relative_to(ROOT)) for p in (ROOT / "autogpt_core" / "demo").iterdir()}
    assert demo
    assert demo <= names
    assert "hookspecs/manifest.schema.json" in names
    assert "autogpt_plugins/__init__.py" not in names


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["wheel", "editable"])
def test_sharing_autogpt_plugins_with_another_distribution(
    mode: str,
    core_source: Path,
    core_wheel: Path,
    legacy_wheel: Path,
    deps: Path,
    tmp_path: Path,
) -> None:
    """Core then autogpt-plugins 0.0.2, each uninstalled, then the other order: after every
    step the built-ins load and the demo writes its file, and the other package keeps its
    own __init__.py and module."""
    home = tmp_path / "home"
    home.mkdir()
    venv = Venv(tmp_path / "venv", deps, home)
    core = ["-e", str(core_source)] if mode == "editable" else [str(core_wheel)]
    builtins = _builtin_ids(core_source)

    venv.pip("install", "--no-deps", *core)
    venv.pip("install", "--no-deps", str(legacy_wheel))
    venv.assert_core_works(builtins)
    venv.assert_legacy_works()

    venv.pip("uninstall", "--yes", "autogpt-plugins")
    venv.assert_core_works(builtins)

    venv.pip("install", "--no-deps", str(legacy_wheel))
    venv.pip("uninstall", "--yes", "autogpt-core")
    venv.assert_legacy_works()

    venv.pip("install", "--no-deps", *core)
    venv.assert_core_works(builtins)
    venv.assert_legacy_works()
