"""A throwaway PostgreSQL server for the tests: ``initdb`` and ``pg_ctl start`` in a
temporary directory, on a free port of 127.0.0.1 only (its unix socket in that directory),
stopped and removed at the end.

PostgreSQL refuses to run as root: as root, the server runs as the system user
``postgres`` (which the ``postgresql`` package creates), owning the temporary directory.
Durability is off (``fsync``, ``synchronous_commit``, ``full_page_writes``): a test
database is thrown away, and the tests must stay quick on a small machine.

``tests/conftest.py``'s ``postgres_server`` fixture starts one per test run; each test that
uses it gets a database of its own (``PostgresServer.new_database``). Not installed, the
tests that need it fail, saying how to install it (``tests/systemparts.py``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs

INSTALL_HINT = (
    "the PostgreSQL server binaries (initdb, pg_ctl) are needed for the PostgreSQL store's "
    "tests and were not found (looked in `pg_config --bindir`, /usr/lib/postgresql/*/bin "
    "and PATH). Fix: install them, e.g. `apt-get install -y postgresql` (Debian, Ubuntu), "
    "or put their directory on PATH"
)
_SYSTEM_USER = "postgres"
_SUPERUSER = "postgres"


class PostgresMissing(RuntimeError):
    """What the server needs is not installed: its binaries, or (as root) its user."""


class PostgresFailed(RuntimeError):
    """The server is installed, but does not start."""


def find_bindir() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl``; ``PostgresMissing`` if none does."""
    candidates: list[Path] = []
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        found = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, check=True, timeout=30
        )
        candidates.append(Path(found.stdout.strip()))
    # Debian and Ubuntu install the server's binaries here, not on PATH; newest first.
    versions = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += sorted(
        (Path(d) for d in versions), key=lambda d: _version_key(d.parent.name), reverse=True
    )
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).resolve().parent)
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    raise PostgresMissing(INSTALL_HINT)


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".") if part.isdigit())


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@attrs.define
class PostgresServer:
    """A running server: connect to ``url(dbname)`` (superuser ``postgres``, no password:
    trust authentication, on 127.0.0.1 only)."""

    bindir: Path
    root: Path
    port: int
    _as_user: Sequence[str] = ()

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{_SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def new_database(self) -> str:
        """Create an empty database and return its URL."""
        import psycopg

        name = f"test_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            # template0 and FILE_COPY: the quickest copy of a small, unused template.
            conn.execute(f"CREATE DATABASE {name} TEMPLATE template0 STRATEGY FILE_COPY")
        return self.url(name)

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run one of the server's programs (as the server's user)."""
        command = [*self._as_user, str(self.bindir / args[0]), *args[1:]]
        return subprocess.run(
            command, capture_output=True, text=True, check=False, timeout=timeout, cwd=self.root
        )

    def start(self) -> None:
        done = self.run(
            "initdb",
            "--pgdata",
            str(self.data),
            "--username",
            _SUPERUSER,
            "--auth",
            "trust",
            "--encoding",
            "UTF8",
            "--locale",
            "C",
            "--no-sync",
        )
        if done.returncode:
            raise PostgresMissing(
                f"initdb failed ({done.returncode}): {done.stderr or done.stdout}"
            )
        options = " ".join(
            [
                "-c listen_addresses=127.0.0.1",
                f"-c port={self.port}",
                f"-c unix_socket_directories={self.root}",
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
                "-c max_connections=200",
                "-c shared_buffers=32MB",
            ]
        )
        done = self.run(
            "pg_ctl",
            "--pgdata",
            str(self.data),
            "--log",
            str(self.root / "server.log"),
            "--wait",
            "--timeout",
            "60",
            "-o",
            options,
            "start",
        )
        if done.returncode:
            log = (self.root / "server.log").read_text(errors="replace")[-2000:]
            raise PostgresFailed(f"pg_ctl start failed: {done.stderr or done.stdout}\n{log}")

    def stop_command(self) -> list[str]:
        return [
            *self._as_user,
            str(self.bindir / "pg_ctl"),
            "--pgdata",
            str(self.data),
            "--mode",
            "immediate",
            "--wait",
            "stop",
        ]

    def stop(self) -> None:
        subprocess.run(self.stop_command(), capture_output=True, check=False, timeout=120)


@contextlib.contextmanager
def running_server() -> Iterator[PostgresServer]:
    """A PostgreSQL server for the duration of the block; ``PostgresMissing`` if it is not
    installed, ``PostgresFailed`` if it does not start."""
    bindir = find_bindir()
    root = Path(tempfile.mkdtemp(prefix="autogpt-pg-"))
    as_user: tuple[str, ...] = ()
    if os.geteuid() == 0:
        try:
            account = pwd.getpwnam(_SYSTEM_USER)
        except KeyError:
            raise PostgresMissing(
                f"running as root, the test server must run as the user {_SYSTEM_USER!r}, "
                "which does not exist. Fix: `apt-get install -y postgresql` creates it, or "
                "run the tests as an unprivileged user"
            ) from None
        os.chown(root, account.pw_uid, account.pw_gid)
        runuser = shutil.which("runuser")
        if not runuser:
            raise PostgresMissing(
                "running as root, `runuser` (util-linux) is needed to start the test server "
                f"as {_SYSTEM_USER!r}. Fix: install util-linux, or run the tests unprivileged"
            )
        as_user = (runuser, "-u", _SYSTEM_USER, "--")
    server = PostgresServer(bindir, root, _free_port(), as_user)
    # Stops the server and removes its directory if this process dies without doing so
    # (kill -9, a crash): it waits for its stdin, this process's pipe, to close.
    watchdog = subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(root), *server.stop_command()],
        stdin=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
        assert watchdog.stdin is not None
        watchdog.stdin.close()
        watchdog.wait(timeout=60)


_WATCHDOG = """
import shutil, subprocess, sys
sys.stdin.read()
subprocess.run(sys.argv[2:], capture_output=True, check=False, timeout=60)
shutil.rmtree(sys.argv[1], ignore_errors=True)
"""
