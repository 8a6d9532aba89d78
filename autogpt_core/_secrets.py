"""The secrets file: values of secret settings the user typed (``autogpt plugins enable``
asks for them without echo), kept out of the config file.

``secrets.env`` in the data directory, readable by its owner only (0600), one
``NAME=value`` per line. Its variables are set in autogpt's environment when the config is
loaded, unless the environment sets them already (the environment wins), so a plugin reads
them where it reads every secret: the environment variable its manifest names
(``env:``, with the ``secrets:NAME`` permission). A file others can read is refused.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from collections.abc import MutableMapping
from pathlib import Path

from ._errors import ConfigError

FILE_NAME = "secrets.env"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def secrets_path(data_dir: Path) -> Path:
    return data_dir / FILE_NAME


def read_secrets(path: Path) -> dict[str, str]:
    """The file's variables; ``{}`` if there is none. Raises ``ConfigError`` for a file
    that others may read, or a line that is not ``NAME=value``."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return {}
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(
            f"the secrets file {path} may be read by others (mode {stat.filemode(info.st_mode)}); "
            f"fix: chmod 600 {path}"
        )
    found: dict[str, str] = {}
    for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or not _NAME.fullmatch(name.strip()):
            raise ConfigError(f"{path}: line {number} is not NAME=value; fix or delete that line")
        found[name.strip()] = value
    return found


def apply_secrets(path: Path, environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Set the file's variables that ``environ`` (``os.environ``) lacks; return their names."""
    env = os.environ if environ is None else environ
    added = []
    for name, value in read_secrets(path).items():
        if name not in env:
            env[name] = value
            added.append(name)
    return added


def store_secret(path: Path, name: str, value: str) -> None:
    """Keep ``name=value`` in the file (replacing an earlier value), written whole, 0600,
    and set it in this process's environment."""
    if not _NAME.fullmatch(name):
        raise ConfigError(f"{name!r} is not an environment variable name")
    if "\n" in value or "\r" in value:
        raise ConfigError(f"the value for {name} must be one line")
    values = read_secrets(path)
    values[name] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{FILE_NAME}.")
    try:
        os.fchmod(descriptor, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write("# Secrets autogpt sets in its environment; keep this file private.\n")
            file.writelines(f"{key}={val}\n" for key, val in sorted(values.items()))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    os.environ[name] = value
