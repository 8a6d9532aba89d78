"""A throwaway virtualenv that sees this environment's packages, for tests that pip
install real plugin distributions and run the real CLI in it.

``python -m venv --without-pip`` takes a few milliseconds; one ``site.addsitedir`` line
makes the core, pip and the rest visible, so pip installs plugins into the throwaway venv
alone and can uninstall them again. Plugins come from a local directory of wheels that pip
reads with ``--no-index``: nothing leaves the machine. Questions are answered on a real
pseudo-terminal; a pipe is not a terminal, and gets no question.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
import sysconfig
from pathlib import Path

from tests.clirun import cli_env


class Venv:
    """A fresh virtualenv seeing this environment's packages; the CLI runs in it."""

    def __init__(self, path: Path, wheels: Path, home: Path) -> None:
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(path)],
            check=True,
            capture_output=True,
        )
        self.path = path
        self.python = path / "bin" / "python"
        self.purelib = Path(
            subprocess.run(
                [
                    str(self.python),
                    "-c",
                    "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                ],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
        )
        # addsitedir, not a bare path: it runs the .pth files there (the core's editable
        # finder among them), as the interpreter does for its own site-packages.
        here = sysconfig.get_paths()["purelib"]
        (self.purelib / "_shared.pth").write_text(f"import site; site.addsitedir({here!r})\n")
        self.home = home
        self.config = home / "config.yaml"
        env = {k: v for k, v in cli_env(home).items() if not k.startswith("PIP_")}
        env.pop("VIRTUAL_ENV", None)
        env.update(
            PIP_NO_INDEX="1",
            PIP_FIND_LINKS=str(wheels),
            PIP_CONFIG_FILE=os.devnull,
            PIP_DISABLE_PIP_VERSION_CHECK="1",
            PIP_NO_CACHE_DIR="1",
            PIP_QUIET="1",
        )
        self.env = env

    def autogpt(self, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        """The CLI with a pipe for stdin: not a terminal, so it may not ask."""
        return subprocess.run(
            [str(self.python), "-m", "autogpt_core", *args],
            env=self.env,
            cwd=self.home,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    def answer(self, *args: str, reply: str, question: bytes = b"[y/N] ") -> tuple[int, str, str]:
        """The CLI on a pseudo-terminal: waits for its question (output ending with
        ``question``), then types ``reply``.

        Returns the exit status, stdout up to and including the question, and the rest.
        """
        main, secondary = pty.openpty()
        proc = subprocess.Popen(
            [str(self.python), "-m", "autogpt_core", *args],
            env=self.env,
            cwd=self.home,
            stdin=secondary,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        os.close(secondary)
        try:
            assert proc.stdout is not None
            before = b""
            while not before.endswith(question):
                chunk = proc.stdout.read1(4096)
                assert chunk, f"no question came: {before.decode()}"
                before += chunk
            os.write(main, reply.encode() + b"\n")
            after, err = proc.communicate(timeout=300)
        finally:
            os.close(main)
        return proc.returncode, before.decode(), after.decode() + err.decode()

    def installed(self) -> dict[str, str]:
        """Distribution name -> version, of what pip installed into this venv alone."""
        found = {}
        for info in self.purelib.glob("*.dist-info"):
            name, _, version = info.name.removesuffix(".dist-info").partition("-")
            found[name] = version
        return found

    def plugins(self) -> dict[str, str]:
        listed = self.autogpt("plugins", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        return {r["id"]: r["status"] for r in json.loads(listed.stdout)}
