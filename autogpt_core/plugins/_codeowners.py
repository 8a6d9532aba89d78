"""A CODEOWNERS file for a repository of plugins, from their manifests' ``codeowners``.

Each plugin's source -- the project directory it was installed from (PEP 610
``direct_url.json``: ``pip install -e plugins/notes``), else the package directory that
holds its manifest -- becomes one rule, relative to the repository root, followed by its
owners. An owner is a GitHub user (``@user``), a team (``@org/team``) or an e-mail address;
anything else is an error naming the plugin and the handle. Rules are sorted by path, so a
directory inside another plugin's comes later and wins, as CODEOWNERS' last match does.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

import attrs

from .._errors import ConfigError
from ._discovery import PluginSource, package_dir
from ._install import installed_from
from ._loader import PluginRecord

# GitHub's rules for names: letters, digits and single hyphens, not at either end, at
# most 39 characters; a team's slug is letters, digits, '-' and '_'.
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}"
_USER = re.compile(rf"@{_NAME}")
_SLUG = r"[A-Za-z0-9_][A-Za-z0-9_-]{0,99}"
_USER_OR_TEAM = re.compile(rf"{_NAME}(?:/{_SLUG})?")
_TEAM = re.compile(rf"@{_NAME}/{_SLUG}")
# An e-mail address as CODEOWNERS can hold one: no space, and no '#' (it starts a comment).
_LOCAL = r"[A-Za-z0-9!$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!$%&'*+/=?^_`{|}~-]+)*"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_EMAIL = re.compile(rf"{_LOCAL}@{_LABEL}(?:\.{_LABEL})+")
# What a CODEOWNERS path cannot hold literally: glob characters, the negation and range
# syntax GitHub does not support, comments, escapes, and anything unprintable.
_UNWRITABLE = re.compile(r"[*?\[\]!#\\]|[^\S ]|[\x00-\x1f\x7f]")


def owner_problem(handle: str) -> str:
    """What is wrong with ``handle`` as a code owner, and the fix; ``""`` if nothing."""
    if _USER.fullmatch(handle) or _TEAM.fullmatch(handle) or _EMAIL.fullmatch(handle):
        return ""
    shown = repr(handle)
    if handle and "@" not in handle and _USER_OR_TEAM.fullmatch(handle):
        return f"{shown} is not a handle: did you mean '@{handle}'?"
    if handle.startswith("@") and handle.count("/") > 1:
        return f"{shown}: a team is '@org/team', with one '/'"
    return (
        f"{shown} is not a code owner: write '@user', '@org/team' or an e-mail address "
        "(GitHub names are letters, digits and single hyphens)"
    )


def is_owner(handle: str) -> bool:
    return not owner_problem(handle)


@attrs.frozen
class PluginOwners:
    """One plugin's id, source directory (``None``: not known) and declared owners."""

    id: str
    source: Path | None
    owners: tuple[str, ...]


@attrs.frozen
class CodeOwners:
    """The file's text, and a note for each plugin left out of it."""

    text: str
    notes: tuple[str, ...]
    rules: int


def codeowners_path(directory: Path, root: Path) -> str | None:
    """``directory`` as a CODEOWNERS pattern anchored at ``root`` (``/a/b/``), or ``None``
    when it is not inside ``root``. Spaces are escaped; ``ConfigError`` for a path
    CODEOWNERS cannot match literally."""
    try:
        relative = directory.resolve().relative_to(root.resolve())
    except ValueError:
        return None
    text = PurePosixPath(*relative.parts).as_posix()
    if text == ".":
        return "*"
    if _UNWRITABLE.search(text):
        raise ConfigError(
            f"{directory}: the path has a character CODEOWNERS cannot match literally "
            "('*', '?', '[', ']', '!', '#', '\\' or a control character): rename the directory"
        )
    return "/" + text.replace(" ", "\\ ") + "/"


def build_codeowners(plugins: Sequence[PluginOwners], root: Path) -> CodeOwners:
    """The CODEOWNERS text for ``plugins`` under ``root``.

    ``ConfigError`` names the first plugin with an invalid handle (all of its bad handles).
    Plugins outside ``root``, without a known source or without owners are left out, each
    with a note. Plugins sharing a directory share its rule, owners merged in order.
    """
    for plugin in plugins:
        bad = [(h, owner_problem(h)) for h in plugin.owners if owner_problem(h)]
        if bad:
            raise ConfigError(
                f"plugin {plugin.id!r}: invalid codeowners in its manifest: "
                + "; ".join(problem for _, problem in bad)
            )
    notes: list[str] = []
    rules: dict[str, tuple[list[str], list[str]]] = {}
    for plugin in sorted(plugins, key=lambda p: p.id):
        if plugin.source is None:
            notes.append(f"{plugin.id}: left out, its source directory is not known")
            continue
        try:
            path = codeowners_path(plugin.source, root)
        except ConfigError as exc:
            raise ConfigError(f"plugin {plugin.id!r}: {exc}") from None
        if path is None:
            notes.append(
                f"{plugin.id}: left out, its source {plugin.source} is outside {root.resolve()}"
            )
            continue
        if not plugin.owners:
            notes.append(f"{plugin.id}: left out, its manifest names no codeowners")
            continue
        ids, owners = rules.setdefault(path, ([], []))
        ids.append(plugin.id)
        owners.extend(o for o in plugin.owners if o not in owners)
    lines = [
        "# Generated by 'autogpt plugins codeowners --output' from each plugin's manifest:",
        "# change the manifests' codeowners and generate it again instead of editing it.",
    ]
    for path in sorted(rules, key=_order):
        ids, owners = rules[path]
        lines.append("")
        lines.append(f"# {', '.join(ids)}")
        lines.append(f"{path} {' '.join(owners)}")
    return CodeOwners("\n".join(lines) + "\n", tuple(notes), len(rules))


def _order(path: str) -> tuple[int, str]:
    # '*' (the whole repository) first: every later, more specific rule overrides it.
    return (0, "") if path == "*" else (1, path)


def source_directory(source: PluginSource, *, alone: bool) -> Path | None:
    """Where ``source``'s plugin lives: the project directory its distribution was
    installed from when that distribution holds only this plugin (``alone``), else the
    package directory of its manifest; ``None`` when neither is known."""
    if alone:
        origin = installed_from(source.distribution)
        if origin is not None and origin.directory is not None:
            return origin.directory
    return package_dir(source.module)


def plugin_owners(records: Sequence[PluginRecord]) -> tuple[list[PluginOwners], list[str]]:
    """Each scanned plugin's owners and source, and a note for each whose manifest could
    not be read (its owners are unknown)."""
    per_dist = Counter(r.source.distribution for r in records if r.source)
    found: list[PluginOwners] = []
    notes: list[str] = []
    for record in records:
        if record.source is None:
            continue
        if record.manifest is None:
            notes.append(f"{record.id}: left out, its manifest is invalid ({record.reason})")
            continue
        alone = per_dist[record.source.distribution] == 1
        directory = source_directory(record.source, alone=alone)
        found.append(PluginOwners(record.id, directory, record.manifest.codeowners))
    return found, notes
