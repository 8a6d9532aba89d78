"""Start-up cost of many installed plugins, measured against the same run's baselines.

One command: ``python bench/startup.py`` (``--plugins N``, ``--rounds N`` to change sizes).

It builds two virtual environments that see this checkout's environment (autogpt-core and
its dependencies) through a ``.pth`` file: one with nothing more, one with N generated
plugin distributions pip-installed from wheels built here (all but a few disabled by
default). Then, interleaving the two so both see the same machine noise, it times:

* ``autogpt plugins list`` with N plugins vs with none (goal: at most 1.3x);
* ``autogpt --version`` vs ``python -c "import trio, pluggy, attrs, yaml"`` (goal: 1.2x);

and counts how many plugin modules ``plugins list`` imported (goal: only the enabled ones).
Only ratios are headline numbers; machines here are too noisy for absolute times.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import shutil
import site
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORK = HERE / ".work" / "startup"

MANIFEST = """\
manifest_version: 1
id: {id}
name: Bench plugin {n}
version: "1.0.{n}"
description: A generated plugin for the start-up benchmark.
requires_core: ">=0.1"
enabled_by_default: {enabled}
permissions: []
capabilities:
  commands:
    - name: {id}_cmd
      description: Does nothing.
      parameters: {{type: object, properties: {{text: {{type: string}}}}}}
config:
  settings:
    level: {{type: integer, default: 1}}
"""

CODE = """\
from hookspecs import hookimpl

def {id}_cmd(text=""):
    return text

@hookimpl
def register_commands(register):
    register("{id}_cmd", {id}_cmd)
"""


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(out: Path, n: int, enabled: bool) -> Path:
    """A real wheel (PEP 427) for plugin number ``n``."""
    pid = f"benchplug{n:04d}"
    dist = f"autogpt_plugin_{pid}"
    version = f"1.0.{n}"
    info = f"{dist}-{version}.dist-info"
    files = {
        f"{pid}/__init__.py": CODE.format(id=pid).encode(),
        f"{pid}/autogpt-plugin.yaml": MANIFEST.format(
            id=pid, n=n, enabled=str(enabled).lower()
        ).encode(),
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: autogpt-plugin-{pid}\nVersion: {version}\n"
        ).encode(),
        f"{info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: bench\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
        f"{info}/entry_points.txt": f"[autogpt.plugins]\n{pid} = {pid}\n".encode(),
        f"{info}/top_level.txt": f"{pid}\n".encode(),
    }
    record = [_record_line(name, data) for name, data in files.items()] + [f"{info}/RECORD,,"]
    path = out / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


def make_venv(path: Path) -> Path:
    """A venv that also sees this interpreter's site-packages (autogpt-core and deps)."""
    if path.exists():
        shutil.rmtree(path)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # addsitedir (not a bare path line) so that .pth files there -- the editable install's
    # finder among them -- are processed too.
    parents = [p for p in site.getsitepackages() if Path(p).is_dir()]
    lines = "".join(f"import site; site.addsitedir({p!r})\n" for p in parents)
    Path(purelib, "zz_bench_parent.pth").write_text(lines, encoding="utf-8")
    return python


def timed(cmd: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plugins", type=int, default=200)
    parser.add_argument("--enabled", type=int, default=5, help="how many are enabled")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()

    WORK.mkdir(parents=True, exist_ok=True)
    wheels = WORK / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir()
    print(f"building {args.plugins} plugin wheels ({args.enabled} enabled by default) ...")
    built = [build_wheel(wheels, n, n < args.enabled) for n in range(args.plugins)]
    py0 = make_venv(WORK / "venv-0")
    pyn = make_venv(WORK / "venv-n")
    print("pip-installing them into a fresh virtualenv ...")
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(pyn),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            *map(str, built),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    print(f"  installed in {time.perf_counter() - started:.1f}s")

    base_env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOGPT_")}

    def env_for(name: str) -> dict[str, str]:
        root = WORK / f"home-{name}"
        shutil.rmtree(root, ignore_errors=True)
        return dict(
            base_env,
            AUTOGPT_CONFIG=str(root / "config.yaml"),
            AUTOGPT_CACHE_DIR=str(root / "cache"),
            AUTOGPT_DATA_DIR=str(root / "data"),
        )

    env0, envn = env_for("0"), env_for("n")
    cli = ["-m", "autogpt_core"]
    list0 = [str(py0), *cli, "plugins", "list"]
    listn = [str(pyn), *cli, "plugins", "list"]
    version = [str(pyn), *cli, "--version"]
    imports = [str(pyn), "-c", "import trio, pluggy, attrs, yaml"]

    cold0, coldn = timed(list0, env0), timed(listn, envn)  # fills the manifest caches
    samples: dict[str, list[float]] = {"list0": [], "listn": [], "version": [], "imports": []}
    for _ in range(args.rounds):
        samples["list0"].append(timed(list0, env0))
        samples["listn"].append(timed(listn, envn))
        samples["version"].append(timed(version, envn))
        samples["imports"].append(timed(imports, envn))
    med = {k: statistics.median(v) for k, v in samples.items()}

    count = subprocess.run(
        [
            str(pyn),
            "-c",
            "import sys, contextlib, io\n"
            "from autogpt_core.cli._cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    main(['plugins', 'list'])\n"
            "print(sum(1 for m in sys.modules if m.startswith('benchplug')))\n",
        ],
        env=envn,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()

    listed = subprocess.run(
        [*listn, "--json"], env=envn, check=True, capture_output=True, text=True
    ).stdout
    assert listed.count('"benchplug') >= args.plugins, "not every plugin was discovered"

    print()
    print(
        f"plugins list, {args.plugins} plugins vs none (warm cache): "
        f"{med['listn'] / med['list0']:.2f}x   (goal <= 1.30)"
    )
    print(f"plugins list, {args.plugins} plugins vs none (cold cache, 1 run): {coldn / cold0:.2f}x")
    print(
        f"autogpt --version vs python -c 'import trio, pluggy, attrs, yaml': "
        f"{med['version'] / med['imports']:.2f}x   (goal <= 1.20)"
    )
    print(
        f"plugin modules imported by plugins list: {count} of {args.plugins} "
        f"({args.enabled} enabled)"
    )
    print(
        f"(medians of {args.rounds} interleaved rounds; absolute, for reference only: "
        + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in med.items())
        + ")"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
