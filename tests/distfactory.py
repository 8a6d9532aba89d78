"""Write plugin distributions in the installed layout (package + ``.dist-info``).

This is what ``pip install`` leaves in a site directory: a package and a ``.dist-info``
folder with ``METADATA`` and ``entry_points.txt``. ``importlib.metadata`` finds it on
``sys.path``/``PYTHONPATH`` exactly as it finds a pip-installed one, so discovery runs
for real; only the build step is skipped (``test_distribution.py`` does a real pip install).

``write_wheel`` builds a real wheel file, for tests that pip-install and uninstall one.
"""

from __future__ import annotations

import base64
import hashlib
import textwrap
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path

MANIFEST = """\
manifest_version: 1
id: {id}
name: {id}
version: "{version}"
description: test plugin {id}
requires_core: "{requires_core}"
enabled_by_default: {enabled}
permissions: {permissions}
capabilities:
  commands: {commands}
requires: {requires}
load_after: {load_after}
requirements: {requirements}
"""


def write_plugin(
    site: Path,
    plugin_id: str,
    code: str = "",
    *,
    package: str | None = None,
    manifest: str | None = None,
    enabled: bool = True,
    version: str = "0.1.0",
    requires: str = "[]",
    load_after: str = "[]",
    requirements: str = "[]",
    commands: str = "[]",
    permissions: str = "[]",
    requires_core: str = ">=0.1",
    distribution: str | None = None,
    entry_point: str | None = None,
) -> Path:
    """Install plugin ``plugin_id`` into ``site``; return its package directory."""
    package = package or f"plug_{plugin_id.replace('-', '_')}"
    distribution = distribution or f"autogpt-plugin-{plugin_id}"
    pkg = site / package
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(code), encoding="utf-8")
    if manifest is None:
        manifest = MANIFEST.format(
            id=plugin_id,
            version=version,
            enabled=str(enabled).lower(),
            requires=requires,
            load_after=load_after,
            requirements=requirements,
            commands=commands,
            permissions=permissions,
            requires_core=requires_core,
        )
    if manifest:
        (pkg / "autogpt-plugin.yaml").write_text(manifest, encoding="utf-8")
    dist_dir = site / f"{distribution.replace('-', '_')}-{version}.dist-info"
    dist_dir.mkdir(exist_ok=True)
    (dist_dir / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n", encoding="utf-8"
    )
    (dist_dir / "entry_points.txt").write_text(
        f"[autogpt.plugins]\n{plugin_id} = {entry_point or package}\n", encoding="utf-8"
    )
    (dist_dir / "RECORD").write_text("", encoding="utf-8")
    return pkg


def write_wheel(
    directory: Path,
    distribution: str,
    version: str,
    files: Mapping[str, str],
    *,
    entry_points: str = "",
    requires: Sequence[str] = (),
) -> Path:
    """A pure-Python wheel of ``files`` (path in the wheel -> text), as a build backend
    would make it: ``.dist-info`` with METADATA (``requires`` as Requires-Dist), WHEEL and
    a RECORD of hashes pip checks."""
    stem = f"{distribution.replace('-', '_')}-{version}"
    info = f"{stem}.dist-info"
    contents = dict(files)
    contents[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires)
    )
    contents[f"{info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: tests.distfactory\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n"
    )
    if entry_points:
        contents[f"{info}/entry_points.txt"] = entry_points
    record = []
    for name, text in contents.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{info}/RECORD,,")
    contents[f"{info}/RECORD"] = "\n".join(record) + "\n"
    wheel = directory / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in contents.items():
            archive.writestr(name, text)
    return wheel
