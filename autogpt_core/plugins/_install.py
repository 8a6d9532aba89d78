"""Installing, upgrading and uninstalling plugins, with the user's consent.

``autogpt plugins install`` runs pip with the running interpreter, reads the new plugin's
manifest the way the loader does (importing nothing), shows it -- commands and their
parameters, permissions and what each allows, requirements, code owners, homepage -- and
asks before enabling it. The pieces are small and mostly pure: mapping what the user typed
to pip requirements (``plugin_specs``), telling a pip environment from one that pipx or
uv's tool mode manages (``detect_environment``), the consent and upgrade texts
(``consent_text``, ``change_text``), config edits (``forget_plugin``) and the snapshot that
puts the config file back byte for byte when something fails (``ConfigSnapshot``).
``Lifecycle`` strings them together; the CLI passes in how to talk to the user.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.util
import json
import os
import shlex
import subprocess
import tempfile
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse
from urllib.request import url2pathname

import attrs

from hookspecs import printable

from .._config import Config, load_config, read_raw, set_plugin_state, write_raw
from .._errors import ConfigError
from ._discovery import CORE_DISTRIBUTION, PluginSource, iter_sources
from ._loader import BROKEN, PluginRecord, scan
from ._manifest import Manifest

PLUGIN_PREFIX = "autogpt-plugin-"
_ARCHIVES = (".whl", ".zip", ".tar.gz", ".tar.bz2", ".tar.xz", ".tgz")

#: What each permission allows, as the consent screen says it (the table of
#: ``_permissions``' docstring and docs/configuration.md; a test keeps the three in step).
PERMISSION_MEANINGS: Mapping[str, str] = {
    "fs.read": "read files in the session's workspace",
    "fs.write": "create files in the workspace, and change the ones this session made",
    "fs.overwrite": "overwrite or delete a workspace file this session did not create",
    "network": "reach hosts on the network",
    "network.local": "reach loopback, link-local and private addresses (this machine, the LAN)",
    "shell": "run shell commands",
    "install": "install or enable plugins",
    "secrets:NAME": "read the secret environment variable NAME",
}


def permission_meaning(permission: str) -> str:
    """What ``permission`` allows, in words (``secrets:TOKEN``: "read ... TOKEN")."""
    if permission.startswith("secrets:"):
        name = permission.partition(":")[2]
        return PERMISSION_MEANINGS["secrets:NAME"].replace("NAME", name)
    if permission.startswith("bridge:"):
        return f"run the bridged commands of plugin {permission.partition(':')[2]} without asking"
    return PERMISSION_MEANINGS.get(permission, "(unknown permission)")


# --- what to install ---------------------------------------------------------------------


def plugin_specs(names: Iterable[str]) -> list[str]:
    """pip requirements for what the user typed: a plugin name means its distribution
    (``hello>=1.0`` is ``autogpt-plugin-hello>=1.0``); paths and archives stay as they are.

    ``ConfigError`` for text that is neither.
    """
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    specs = []
    for name in names:
        if name.startswith("-") or not name.strip() or not name.isprintable():
            # pip would read it as an option (--index-url=..., -r FILE): never from here.
            raise ConfigError(
                f"{name!r} is not a plugin name, a requirement or a path; pip options are "
                "not passed on (run pip yourself for those)"
            )
        if _looks_like_path(name):
            if " @ " in name or not (Path(name).expanduser().exists() or _is_url(name)):
                raise ConfigError(
                    f"{name!r} looks like a path, but there is no such file or directory; "
                    "give a plugin name (e.g. 'hello'), an existing path, or a wheel's URL"
                )
            specs.append(name)
            continue
        try:
            requirement = Requirement(name)
        except InvalidRequirement as exc:
            raise ConfigError(
                f"{name!r} is neither a plugin name (e.g. 'hello' or 'hello>=1.0') nor a "
                f"path: {exc}"
            ) from None
        # Always the plugin's distribution: 'notes==1.0' must never install PyPI's 'notes'.
        if not canonicalize_name(requirement.name).startswith(PLUGIN_PREFIX):
            requirement.name = f"{PLUGIN_PREFIX}{requirement.name}"
        specs.append(str(requirement))
    return specs


def _is_url(name: str) -> bool:
    return name.startswith(("https://", "http://", "file://")) and name.lower().endswith(_ARCHIVES)


def _looks_like_path(name: str) -> bool:
    return "/" in name or "\\" in name or name.startswith(".") or name.lower().endswith(_ARCHIVES)


def spec_distribution(spec: str) -> str | None:
    """The canonical distribution name ``spec`` installs, when it can be told without
    building anything: a requirement's name, or a wheel file's; ``None`` otherwise."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

    if spec.lower().endswith(".whl"):
        try:
            return str(parse_wheel_filename(Path(spec).name)[0])
        except InvalidWheelFilename:
            return None
    if _looks_like_path(spec):
        return None
    try:
        return str(canonicalize_name(Requirement(spec).name))
    except InvalidRequirement:
        return None


# --- which environment -------------------------------------------------------------------

#: The files pipx and uv leave at the root of an environment they manage.
PIPX_MARKER = "pipx_metadata.json"
UV_MARKER = "uv-receipt.toml"


@attrs.frozen
class Environment:
    """Where the core runs and which tool owns that environment.

    ``kind`` is ``"pip"`` (an ordinary environment: pip installs into it), ``"pipx"`` or
    ``"uv"`` (an environment that tool made for the core and rebuilds from its own records:
    a package pip added behind its back is lost at the next upgrade, so the tool is used).
    ``tool`` is the name pipx or uv knows the environment by; ``with_requirements`` are the
    extra packages uv recorded (``uv tool install --with``), which a new ``uv tool
    install`` must repeat to keep them.
    """

    kind: Literal["pip", "pipx", "uv"]
    prefix: Path
    python: str
    tool: str = CORE_DISTRIBUTION
    with_requirements: tuple[str, ...] = ()

    @property
    def managed(self) -> bool:
        return self.kind != "pip"

    def describe(self) -> str:
        if self.kind == "pipx":
            return f"pipx (its environment {self.tool!r} at {self.prefix})"
        if self.kind == "uv":
            return f"uv's tool mode (its tool {self.tool!r} at {self.prefix})"
        return f"the environment at {self.prefix}"

    def install(self, specs: Sequence[str]) -> list[str]:
        """The command that installs ``specs`` into this environment."""
        if self.kind == "pipx":
            return ["pipx", "inject", self.tool, *specs]
        if self.kind == "uv":
            kept = [r for r in self.with_requirements if r not in specs]
            return ["uv", "tool", "install", self.tool, *_with(kept + list(specs))]
        return [self.python, "-m", "pip", "install", *specs]

    def uninstall(self, dist: str) -> list[str]:
        """The command that removes distribution ``dist`` from this environment."""
        from packaging.utils import canonicalize_name

        if self.kind == "pipx":
            return ["pipx", "uninject", self.tool, dist]
        if self.kind == "uv":
            name = canonicalize_name(dist)
            kept = [r for r in self.with_requirements if _requirement_name(r) != name]
            return ["uv", "tool", "install", self.tool, *_with(kept)]
        return [self.python, "-m", "pip", "uninstall", "--yes", dist]

    def upgrade(self, dist: str) -> list[str]:
        """The command that upgrades distribution ``dist`` in this environment."""
        if self.kind == "pipx":
            return ["pipx", "upgrade", "--include-injected", self.tool]
        if self.kind == "uv":
            return ["uv", "tool", "upgrade", self.tool]
        return [self.python, "-m", "pip", "install", "--upgrade", dist]


def _with(requirements: Iterable[str]) -> list[str]:
    return [arg for requirement in requirements for arg in ("--with", requirement)]


def _requirement_name(text: str) -> str | None:
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    try:
        return str(canonicalize_name(Requirement(text).name))
    except InvalidRequirement:
        return None


def detect_environment(prefix: Path, python: str) -> Environment:
    """Which tool owns the environment at ``prefix`` (``sys.prefix``).

    pipx writes ``pipx_metadata.json`` and uv ``uv-receipt.toml`` at the root of the
    environments they make; an environment without the file is still theirs when it sits
    where they put them (``.../pipx/venvs/NAME``, ``.../uv/tools/NAME``).
    """
    if (prefix / PIPX_MARKER).is_file():
        return Environment("pipx", prefix, python, tool=_pipx_tool(prefix))
    if (prefix / UV_MARKER).is_file():
        return Environment("uv", prefix, python, prefix.name, _uv_with(prefix))
    parent = prefix.parent
    if parent.name == "venvs" and parent.parent.name in ("pipx", ".pipx"):
        return Environment("pipx", prefix, python, tool=prefix.name)
    if parent.name == "tools" and parent.parent.name == "uv":
        return Environment("uv", prefix, python, tool=prefix.name)
    return Environment("pip", prefix, python)


def _pipx_tool(prefix: Path) -> str:
    try:
        data = json.loads((prefix / PIPX_MARKER).read_text(encoding="utf-8"))
        name = data["main_package"]["package"]
    except (OSError, ValueError, KeyError, TypeError):
        return prefix.name
    return name if isinstance(name, str) and name else prefix.name


def _uv_with(prefix: Path) -> tuple[str, ...]:
    """The ``--with`` requirements of uv's receipt: every recorded one but the tool's own."""
    from packaging.utils import canonicalize_name

    try:
        receipt = tomllib.loads((prefix / UV_MARKER).read_text(encoding="utf-8"))
        entries = receipt["tool"]["requirements"]
    except (OSError, ValueError, KeyError, TypeError):
        return ()
    own = canonicalize_name(prefix.name)
    found = []
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        if canonicalize_name(entry["name"]) == own:
            continue
        for key in ("directory", "path"):
            if isinstance(entry.get(key), str):
                found.append(entry[key])
                break
        else:
            found.append(entry["name"] + str(entry.get("specifier") or ""))
    return tuple(found)


def managed_message(environment: Environment, command: Sequence[str]) -> str:
    """Why pip is not run in a pipx or uv environment, and the command to run instead."""
    return (
        f"autogpt-core was installed with {environment.describe()}: {environment.kind} "
        "rebuilds that environment from its own record of what it installed, so a change "
        f"pip made there would be undone at its next upgrade. Run instead:\n"
        f"    {shlex.join(command)}"
    )


# --- installed from where ----------------------------------------------------------------


@attrs.frozen
class Origin:
    """Where an installed distribution came from (PEP 610 ``direct_url.json``)."""

    url: str
    directory: Path | None  # a local project directory, when it was one
    editable: bool


def installed_from(dist_name: str) -> Origin | None:
    """The ``direct_url.json`` of ``dist_name``: ``None`` when it came from an index."""
    try:
        text = metadata.distribution(dist_name).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    return parse_direct_url(text)


def parse_direct_url(text: str | None) -> Origin | None:
    """An ``Origin`` from the text of a ``direct_url.json``; ``None`` if absent or unusable."""
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        return None
    url = data["url"]
    dir_info = data.get("dir_info")
    directory = None
    parsed = urlparse(url)
    if isinstance(dir_info, dict) and parsed.scheme == "file":
        directory = Path(url2pathname(parsed.path))
    editable = isinstance(dir_info, dict) and dir_info.get("editable") is True
    return Origin(url, directory, editable)


# --- requirements ------------------------------------------------------------------------


def requirement_states(requirements: Iterable[str]) -> dict[str, str | None]:
    """Each requirement's installed version, ``None`` when missing or too old, ``"-"`` when
    its marker excludes this platform (checked from metadata, as the loader checks them)."""
    from packaging.requirements import Requirement

    states: dict[str, str | None] = {}
    for text in requirements:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate():
            states[text] = "-"
            continue
        try:
            installed = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            states[text] = None
            continue
        ok = not requirement.specifier or requirement.specifier.contains(
            installed, prereleases=True
        )
        states[text] = installed if ok else None
    return states


def missing_requirements(manifests: Iterable[Manifest]) -> list[str]:
    """The manifests' requirements that are not installed (or not in a matching version)."""
    missing: list[str] = []
    for manifest in manifests:
        for text, state in requirement_states(manifest.requirements).items():
            if state is None and text not in missing:
                missing.append(text)
    return missing


# --- what the user reads -----------------------------------------------------------------


def _plain(text: str) -> str:
    """Plugin-written text on one line, escapes visible: a description cannot add a line
    that looks like the core's ("permissions: none") or move the cursor."""
    return printable(" ".join(text.split()), newlines=False)


def consent_text(
    manifest: Manifest,
    *,
    distribution: str,
    dist_version: str,
    grants: frozenset[str],
    parameter_lines: Callable[[Mapping[str, Any]], list[str]],
    requirements: Mapping[str, str | None],
    dependencies: Mapping[str, str],
) -> str:
    """What a plugin is and may do, for the user to read before enabling it.

    ``parameter_lines`` renders a command's parameter schema (one line each);
    ``requirements`` maps each requirement to its installed version (see
    ``requirement_states``); ``dependencies`` maps each plugin of ``requires`` to its state.
    """
    lines = [
        f"{_plain(manifest.id)} {_plain(manifest.version)} — {_plain(manifest.name)} "
        f"(from {_plain(distribution)} {_plain(dist_version)})"
    ]
    if manifest.description:
        lines.append(f"  {_plain(manifest.description)}")
    lines.append(f"  homepage: {_plain(manifest.homepage) or '(none given)'}")
    owners = " ".join(_plain(o) for o in manifest.codeowners)
    lines.append(f"  codeowners: {owners or '(none given)'}")
    if manifest.commands:
        lines.append("  commands:")
        for command in manifest.commands:
            aliases = f" (aliases: {', '.join(map(_plain, command.aliases))})"
            needs = f" [needs {', '.join(command.permissions)}]" if command.permissions else ""
            lines.append(
                f"    {_plain(command.name)}{aliases if command.aliases else ''}{needs}: "
                f"{_plain(command.description)}"
            )
            lines.extend(f"      {_plain(p)}" for p in parameter_lines(command.parameters))
    else:
        lines.append("  commands: none")
    # What else it may do, each of which a user should see before saying yes.
    if manifest.bridged is not None:
        bridged = manifest.bridged
        needs = ", ".join(bridged.permissions) or "no permission"
        lines.append(
            f"  bridged commands: made when it loads, from its {_plain(bridged.prefixes_from)!r} "
            f"setting, each needing at most {needs} and your consent per call "
            f"(bridge:{_plain(manifest.id)})"
        )
    for cli in manifest.cli_commands:
        lines.append(f"  autogpt command: {_plain(cli.name)}: {_plain(cli.help)}")
    if manifest.shares_store:
        lines.append(
            "  session store: it is given the store's location, so it can read and write "
            "every session's records"
        )
    if manifest.terms:
        lines.append("  terms: to be accepted before it is enabled ('autogpt plugins enable')")
    if manifest.permissions:
        lines.append("  permissions:")
        width = max(len(p) for p in manifest.permissions)
        for permission in manifest.permissions:
            granted = (
                "granted in permissions.grant"
                if permission in grants
                else "not granted: asked before use, refused in unattended runs"
            )
            lines.append(f"    {permission:<{width}}  {permission_meaning(permission)} ({granted})")
    else:
        lines.append("  permissions: none")
    if requirements:
        lines.append("  requirements:")
        for text, state in requirements.items():
            shown = {None: "MISSING", "-": "not needed on this platform"}.get(
                state, f"installed {state}"
            )
            lines.append(f"    {_plain(text)}: {shown}")
    for plugin_id, state in dependencies.items():
        lines.append(f"  requires plugin {_plain(plugin_id)}: {state}")
    return "\n".join(lines)


@attrs.frozen
class ManifestChange:
    """What an upgrade changed in a plugin's manifest."""

    old_version: str
    new_version: str
    added_commands: tuple[str, ...] = ()
    removed_commands: tuple[str, ...] = ()
    added_permissions: tuple[str, ...] = ()
    removed_permissions: tuple[str, ...] = ()
    added_requirements: tuple[str, ...] = ()
    added_requires: tuple[str, ...] = ()

    @property
    def permissions_grew(self) -> bool:
        return bool(self.added_permissions)

    @property
    def empty(self) -> bool:
        return not (
            self.added_commands
            or self.removed_commands
            or self.added_permissions
            or self.removed_permissions
            or self.added_requirements
            or self.added_requires
        )


def manifest_change(old: Manifest, new: Manifest) -> ManifestChange:
    """What changed from ``old`` to ``new``, in the order ``new`` lists things."""

    def added(before: Iterable[str], after: Iterable[str]) -> tuple[str, ...]:
        seen = set(before)
        return tuple(x for x in after if x not in seen)

    old_commands = [c.name for c in old.commands]
    new_commands = [c.name for c in new.commands]
    return ManifestChange(
        old_version=old.version,
        new_version=new.version,
        added_commands=added(old_commands, new_commands),
        removed_commands=added(new_commands, old_commands),
        added_permissions=added(old.permissions, new.permissions),
        removed_permissions=added(new.permissions, old.permissions),
        added_requirements=added(old.requirements, new.requirements),
        added_requires=added(old.requires, new.requires),
    )


def change_text(plugin_id: str, change: ManifestChange) -> str:
    """The upgrade's changes, one line each."""
    lines = [f"{_plain(plugin_id)}: {_plain(change.old_version)} -> {_plain(change.new_version)}"]
    if change.empty:
        lines.append("  no new commands, permissions or requirements")
    for label, items in (
        ("new command", change.added_commands),
        ("command removed", change.removed_commands),
        ("requirement added", change.added_requirements),
        ("now requires plugin", change.added_requires),
        ("permission dropped", change.removed_permissions),
    ):
        lines.extend(f"  {label}: {_plain(item)}" for item in items)
    for permission in change.added_permissions:
        lines.append(f"  NEW PERMISSION: {permission} — {permission_meaning(permission)}")
    return "\n".join(lines)


# --- the config file ---------------------------------------------------------------------


@attrs.frozen
class ConfigSnapshot:
    """The config file's exact bytes (``None``: there was no file) and mode, to put back."""

    path: Path
    content: bytes | None
    mode: int | None

    @classmethod
    def take(cls, path: Path) -> ConfigSnapshot:
        try:
            return cls(path, path.read_bytes(), path.stat().st_mode & 0o7777)
        except FileNotFoundError:
            return cls(path, None, None)

    def changed(self) -> bool:
        return ConfigSnapshot.take(self.path) != self

    def restore(self) -> bool:
        """Put the file back as it was; ``True`` if that changed anything."""
        if not self.changed():
            return False
        if self.content is None:
            self.path.unlink(missing_ok=True)
            return True
        fd, temp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        try:
            with os.fdopen(fd, "wb") as file:
                file.write(self.content)
                file.flush()
                os.fsync(file.fileno())
            if self.mode is not None:
                os.chmod(temp, self.mode)
            os.replace(temp, self.path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
        return True

    @contextlib.contextmanager
    def restored_on_failure(self) -> Iterator[None]:
        """Whatever escapes the block (an error, Ctrl-C) leaves the file as it was."""
        try:
            yield
        except BaseException:
            self.restore()
            raise


def forget_plugin(raw: dict[str, Any], plugin_id: str) -> list[str]:
    """Remove ``plugin_id`` from ``plugins.enable``, ``plugins.disable`` and
    ``plugins.settings`` of the config mapping ``raw`` (in place); return the fields it was
    in. Emptied fields go, and so does an emptied ``plugins`` section."""
    plugins = raw.get("plugins")
    if not isinstance(plugins, dict):
        return []
    removed = []
    for key in ("enable", "disable"):
        items = plugins.get(key)
        if isinstance(items, list) and plugin_id in items:
            plugins[key] = [p for p in items if p != plugin_id]
            removed.append(f"plugins.{key}")
    settings = plugins.get("settings")
    if isinstance(settings, dict) and plugin_id in settings:
        del settings[plugin_id]
        removed.append(f"plugins.settings.{plugin_id}")
    for key in ("enable", "disable", "settings"):
        if key in plugins and not plugins[key]:
            del plugins[key]
    if not plugins:
        del raw["plugins"]
    return removed


# --- the commands ------------------------------------------------------------------------


def ask_terminal(question: str) -> bool | None:
    """Ask on the terminal: ``True`` for yes; ``None`` when stdin is not a terminal (no one
    to ask: a script, a pipe); end of input counts as no."""
    import sys

    if not sys.stdin.isatty():
        return None
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in {"y", "yes"}


@attrs.frozen
class Console:
    """How the commands talk to the user: ``say(text)``, ``warn(text)`` (stderr) and
    ``ask(question)`` (``True``/``False``, or ``None`` when no one can answer)."""

    say: Callable[[str], None]
    warn: Callable[[str], None]
    ask: Callable[[str], bool | None] = ask_terminal


def _key(source: PluginSource) -> tuple[str, str, str]:
    return (source.id, source.distribution, source.dist_version)


@attrs.define
class Lifecycle:
    """``install``, ``upgrade`` and ``uninstall``, as the CLI runs them.

    ``config_file`` is ``--config`` (``None``: the default file); ``yes`` answers every
    question with yes (``--yes``); ``run`` runs a command and returns its exit status (pip's
    output goes to the user). Each returns the command's exit status. The config file is
    changed only after pip succeeded, and put back byte for byte when an error or Ctrl-C
    ends a command midway.
    """

    config_file: str | None
    environment: Environment
    console: Console
    parameter_lines: Callable[[Mapping[str, Any]], list[str]]
    yes: bool = False
    run: Callable[[list[str]], int] = subprocess.call

    def _config(self) -> Config:
        return load_config(self.config_file, must_exist=False)

    def _ask(self, question: str) -> bool | None:
        return True if self.yes else self.console.ask(question)

    def _pip(self, command: list[str], what: str, config: Config) -> bool:
        """Run pip; on failure say what failed and that the config is unchanged."""
        if importlib.util.find_spec("pip") is None:
            raise ConfigError(
                f"pip is not installed in {self.environment.describe()}, so {what} cannot be "
                f"installed: add it with '{self.environment.python} -m ensurepip', or, if uv "
                f"made this environment, run 'uv pip install --python "
                f"{self.environment.python} ...' yourself"
            )
        # Quoted as a shell reads it: 'hello>=1.0' pasted unquoted would redirect to a file.
        self.console.say("$ " + shlex.join(command))
        code = self.run(command)
        if code != 0:
            self.console.warn(
                f"autogpt: error: pip failed (exit status {code}) for {what}; its message is "
                f"above. {config.path} is unchanged"
            )
            return False
        # pip ran in another process: forget what this one cached about sys.path.
        importlib.invalidate_caches()
        return True

    # -- install ---------------------------------------------------------------------------

    def install(self, names: Sequence[str], *, dry_run: bool = False) -> int:
        specs = plugin_specs(names)
        command = self.environment.install(specs)
        if dry_run:
            self.console.say("$ " + shlex.join(command))
            return 0
        config = self._config()  # an invalid config stops us before pip runs
        snapshot = ConfigSnapshot.take(config.path)
        with snapshot.restored_on_failure():
            before = scan(config)
            wanted = {d for d in map(spec_distribution, specs) if d is not None}
            if self.environment.managed:
                installed = {r.source.distribution for r in before if r.source}
                if not wanted or not wanted <= installed:
                    self.console.warn(
                        "autogpt: error: "
                        + managed_message(self.environment, command)
                        + "\nthen run this command again to review and enable the plugin."
                    )
                    return 1
                self.console.say(f"Already installed by {self.environment.kind}: reviewing.")
            elif not self._pip(command, " ".join(specs), config):
                return 1
            return self._review(config, before, wanted, what=" ".join(specs))

    def _review(
        self,
        config: Config,
        before: list[PluginRecord],
        wanted: set[str],
        *,
        what: str,
        upgrading: bool = False,
    ) -> int:
        """After pip: install missing requirements, show each affected plugin, ask."""
        old_keys = {_key(r.source) for r in before if r.source}
        old = {(r.source.id, r.source.distribution): r for r in before if r.source}
        after = scan(config)
        affected = [
            r
            for r in after
            if r.source
            and not r.builtin
            and (_key(r.source) not in old_keys or r.source.distribution in wanted)
        ]
        if not affected:
            # pip did what it was asked; whatever it installed is not a plugin this
            # interpreter can see (no 'autogpt.plugins' entry point, or a --target
            # directory off sys.path), so there is nothing to enable.
            self.console.warn(
                f"Warning: pip installed {what}, but no plugin this autogpt can load came "
                "with it: the distribution declares no entry point in the group "
                "'autogpt.plugins', or pip put it where this Python does not look "
                "('autogpt plugins list' shows what is found)"
            )
            return 0
        missing = missing_requirements(r.manifest for r in affected if r.manifest)
        if missing:
            command = self.environment.install(missing)
            ids = ", ".join(r.id for r in affected)
            if self.environment.managed:
                self.console.warn("autogpt: error: " + managed_message(self.environment, command))
                return 1
            self.console.say(f"{ids} requires {', '.join(missing)}: installing it too.")
            if not self._pip(command, f"the requirement(s) {' '.join(missing)} of {ids}", config):
                self.console.warn(
                    f"{ids} is installed but cannot load without {', '.join(missing)}; fix: "
                    f"{shlex.join(command)}"
                )
                return 1
            after = scan(config)
            keys = {_key(r.source) for r in affected if r.source}
            affected = [r for r in after if r.source and _key(r.source) in keys]
        records = {r.id: r for r in after}
        code = 0
        for record in affected:
            assert record.source is not None
            previous = old.get((record.source.id, record.source.distribution))
            code = max(code, self._consent(config, record, previous, records, upgrading))
        return code

    def _consent(
        self,
        config: Config,
        record: PluginRecord,
        previous: PluginRecord | None,
        records: Mapping[str, PluginRecord],
        upgrading: bool,
    ) -> int:
        assert record.source is not None
        manifest = record.manifest
        if manifest is None or record.id != record.source.id:
            self.console.warn(f"{record.id} is installed but cannot be used: {record.reason}")
            return 1
        needed, absent = _dependencies(records, record.id)
        states = {
            dep: (
                "not installed"
                if dep in absent
                else ("disabled" if dep in needed else "installed and enabled")
            )
            for dep in manifest.requires
        }
        self.console.say(
            "\n"
            + consent_text(
                manifest,
                distribution=record.source.distribution,
                dist_version=record.source.dist_version,
                grants=config.grants,
                parameter_lines=self.parameter_lines,
                requirements=requirement_states(manifest.requirements),
                dependencies=states,
            )
        )
        if previous is not None and previous.manifest is not None:
            if previous.enabled:
                return self._reconsent(config, record, previous.manifest)
            if upgrading:
                self.console.say(
                    change_text(record.id, manifest_change(previous.manifest, manifest))
                )
                self.console.say(f"{record.id} stays disabled.")
                return 0
        problem = self._would_break(config, record.id, needed)
        if problem:
            self.console.warn(f"Warning: {record.id} will not load if enabled: {problem}")
        also = f" (and {', '.join(needed)}, which it requires)" if needed else ""
        answer = self._ask(f"Enable {record.id}{also}?")
        if answer:
            set_plugin_state(config.path, [record.id, *needed], enabled=True)
            self.console.say(f"Enabled {', '.join([record.id, *needed])} in {config.path}")
            return 0
        how = "Declined: " if answer is False else "Not asked (no terminal, no --yes): "
        if record.enabled:
            # Its manifest turns it on by default (or the config names it): off, explicitly.
            set_plugin_state(config.path, [record.id], enabled=False)
            self.console.say(
                f"{how}{record.id} is installed and explicitly disabled in {config.path} "
                f"(it would otherwise be on). Enable it with: autogpt plugins enable {record.id}"
            )
        else:
            self.console.say(
                f"{how}{record.id} is installed but not enabled. Enable it with: "
                f"autogpt plugins enable {record.id}"
            )
        return 0

    def _reconsent(self, config: Config, record: PluginRecord, old: Manifest) -> int:
        """An enabled plugin changed: show how; ask again if it wants more permissions."""
        assert record.manifest is not None
        change = manifest_change(old, record.manifest)
        if record.status == BROKEN:
            self.console.warn(f"Warning: {record.id} will not load: {record.reason}")
        if change.empty and change.old_version == change.new_version:
            self.console.say(f"{record.id} was installed and enabled already.")
            return 0
        self.console.say(change_text(record.id, change))
        if not change.permissions_grew:
            self.console.say(f"{record.id} stays enabled.")
            return 0
        new = ", ".join(change.added_permissions)
        answer = self._ask(f"{record.id} now also asks for {new}. Keep it enabled?")
        if answer:
            self.console.say(f"{record.id} stays enabled, with {new}.")
            return 0
        set_plugin_state(config.path, [record.id], enabled=False)
        how = "Declined" if answer is False else "Not asked (no terminal, no --yes)"
        self.console.say(
            f"{how}: {record.id} is disabled in {config.path} until you enable it again: "
            f"autogpt plugins enable {record.id}"
        )
        return 0

    def _would_break(self, config: Config, plugin_id: str, needed: list[str]) -> str:
        """Why ``plugin_id`` would be broken once enabled (``""``: it would not be)."""
        enabled = {r.id for r in scan(config) if r.enabled}
        environ = dict(os.environ, AUTOGPT_LOAD_PLUGINS=",".join({*enabled, plugin_id, *needed}))
        records = {r.id: r for r in scan(config, environ=environ)}
        record = records.get(plugin_id)
        return record.reason if record is not None and record.status == BROKEN else ""

    # -- upgrade ---------------------------------------------------------------------------

    def _source(self, plugin_id: str, verb: str, done: str) -> PluginSource:
        sources = iter_sources()
        claims = [s for s in sources if s.id == plugin_id]
        if not claims:
            close = difflib.get_close_matches(plugin_id, sorted({s.id for s in sources}), n=3)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise ConfigError(
                f"no installed plugin has the id {plugin_id!r}.{hint} "
                "'autogpt plugins list --all' shows them all"
            )
        if any(s.builtin for s in claims):
            what = (
                "upgrade autogpt-core itself"
                if verb == "upgrade"
                else f"disable it instead: autogpt plugins disable {plugin_id}"
            )
            raise ConfigError(
                f"{plugin_id!r} is a built-in plugin, part of autogpt-core: it cannot be "
                f"{done} on its own; {what}"
            )
        if len(claims) > 1:
            dists = " and ".join(s.distribution for s in claims)
            raise ConfigError(
                f"the plugin id {plugin_id!r} is claimed by {dists}: {verb} the one you mean "
                "with pip directly"
            )
        return claims[0]

    def upgrade(self, plugin_id: str) -> int:
        source = self._source(plugin_id, "upgrade", "upgraded")
        dist = source.distribution
        command = self.environment.upgrade(dist)
        if self.environment.managed:
            self.console.warn("autogpt: error: " + managed_message(self.environment, command))
            return 1
        origin = installed_from(dist)
        if origin is not None and origin.directory is not None:
            how = "editable" if origin.editable else "a directory"
            raise ConfigError(
                f"{dist} was installed from {origin.directory} ({how}): upgrading it by name "
                "would replace it with a release from the package index; reinstall it from "
                f"there instead: autogpt plugins install {shlex.quote(str(origin.directory))}"
            )
        if origin is not None:
            # A wheel or archive given by path or URL: a release of the same name from the
            # package index could be someone else's.
            raise ConfigError(
                f"{dist} was installed from {origin.url}, not from the package index: "
                "upgrading it by name could replace it with another distribution of that "
                "name; install the new version's file instead: autogpt plugins install FILE"
            )
        config = self._config()
        snapshot = ConfigSnapshot.take(config.path)
        with snapshot.restored_on_failure():
            before = scan(config)
            if not self._pip(command, dist, config):
                return 1
            after = {r.id: r for r in scan(config)}
            record = after.get(plugin_id)
            if record is None or record.source is None or record.source.distribution != dist:
                self.console.warn(
                    f"Warning: after the upgrade, {dist} no longer provides the plugin "
                    f"{plugin_id!r}; its config entries stay until you remove them"
                )
                return 1
            if record.source.dist_version == source.dist_version:
                self.console.say(f"{plugin_id} is up to date ({dist} {source.dist_version}).")
                return 0
            return self._review(config, before, {dist}, what=dist, upgrading=True)

    # -- uninstall -------------------------------------------------------------------------

    def uninstall(self, plugin_id: str, *, keep_config: bool = False) -> int:
        source = self._source(plugin_id, "uninstall", "uninstalled")
        dist = source.distribution
        command = self.environment.uninstall(dist)
        if self.environment.managed:
            self.console.warn("autogpt: error: " + managed_message(self.environment, command))
            return 1
        ids = sorted(s.id for s in iter_sources() if s.distribution == dist)
        config = self._config()
        others = [i for i in ids if i != plugin_id]
        also = f" (which also provides {', '.join(others)})" if others else ""
        entries = (
            "its entries in the config file are kept (--keep-config)"
            if keep_config
            else f"its entries in {config.path} (enable, disable, settings) are removed"
        )
        answer = self._ask(f"Uninstall {dist} {source.dist_version}{also}? {entries}.")
        if answer is None:
            self.console.warn(
                f"autogpt: error: uninstalling {dist} needs your confirmation: rerun with --yes"
            )
            return 1
        if not answer:
            self.console.say("Nothing changed.")
            return 1
        snapshot = ConfigSnapshot.take(config.path)
        with snapshot.restored_on_failure():
            if not self._pip(command, dist, config):
                return 1
            self.console.say(f"Uninstalled {dist} ({', '.join(ids)}).")
            if keep_config:
                return 0
            raw = read_raw(config.path)
            removed = {i: forget_plugin(raw, i) for i in ids}
            if any(removed.values()):
                write_raw(config.path, raw)
                for i, fields in removed.items():
                    if fields:
                        self.console.say(f"Removed {i} from {', '.join(fields)} in {config.path}")
        return 0


def _dependencies(
    records: Mapping[str, PluginRecord], plugin_id: str
) -> tuple[list[str], list[str]]:
    """The plugins ``plugin_id`` requires, directly or not: (disabled ones, absent ones)."""
    needed: list[str] = []
    absent: list[str] = []
    stack = [plugin_id]
    seen = {plugin_id}
    while stack:
        record = records.get(stack.pop())
        for dep in record.manifest.requires if record and record.manifest else ():
            if dep in seen:
                continue
            seen.add(dep)
            if dep not in records:
                absent.append(dep)
                continue
            if not records[dep].enabled:
                needed.append(dep)
            stack.append(dep)
    return needed, absent
