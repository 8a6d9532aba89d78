"""Hypothesis strategies for manifests and plugin graphs."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import strategies as st

scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
plugin_ids = st.from_regex(r"[a-z][a-z0-9_-]{0,10}", fullmatch=True)


def valid_manifest_dict() -> dict[str, Any]:
    return {
        "manifest_version": 1,
        "id": "sample",
        "name": "Sample",
        "version": "1.0",
        "enabled_by_default": True,
        "permissions": ["fs.read", "network"],
        "capabilities": {
            "commands": [
                {
                    "name": "fetch",
                    "description": "Fetch a thing.",
                    "aliases": ["get"],
                    "permissions": ["network"],
                    "parameters": {
                        "type": "object",
                        "properties": {"url": {"type": "string"}},
                        "required": ["url"],
                    },
                }
            ]
        },
        "requires": ["base"],
        "load_after": ["other"],
        "requirements": ["httpx>=0.27"],
        "config": {"settings": {"timeout": {"type": "number", "default": 2.5}}},
        "codeowners": ["@team"],
    }


_PATHS: list[tuple[Any, ...]] = [
    ("manifest_version",),
    ("id",),
    ("name",),
    ("version",),
    ("enabled_by_default",),
    ("permissions",),
    ("permissions", 0),
    ("capabilities",),
    ("capabilities", "commands"),
    ("capabilities", "commands", 0),
    ("capabilities", "commands", 0, "name"),
    ("capabilities", "commands", 0, "aliases"),
    ("capabilities", "commands", 0, "parameters"),
    ("capabilities", "commands", 0, "parameters", "type"),
    ("capabilities", "commands", 0, "permissions", 0),
    ("requires",),
    ("requires", 0),
    ("requirements", 0),
    ("config",),
    ("config", "settings"),
    ("config", "settings", "timeout"),
    ("config", "settings", "timeout", "default"),
    ("config", "settings", "timeout", "type"),
    ("codeowners",),
    ("requires_core",),
    ("unknown_field",),
]


@st.composite
def manifest_dicts(draw: st.DrawFn) -> dict[str, Any]:
    """A valid manifest with a few fields replaced by arbitrary values (or deleted)."""
    data = valid_manifest_dict()
    for path in draw(st.lists(st.sampled_from(_PATHS), max_size=3)):
        node: Any = data
        for key in path[:-1]:
            if isinstance(node, dict):
                node = node.get(key)
            elif isinstance(node, list) and isinstance(key, int) and key < len(node):
                node = node[key]
            else:
                node = None
        if not isinstance(node, dict | list):
            continue
        key = path[-1]
        if isinstance(node, list) and (not isinstance(key, int) or key >= len(node)):
            continue
        if draw(st.booleans()) and isinstance(node, dict):
            node.pop(key, None)
        else:
            node[key] = draw(json_values)
    return data


@st.composite
def yaml_documents(draw: st.DrawFn) -> str:
    """YAML text: dumps of arbitrary values and manifests, or arbitrary text."""
    choice = draw(st.integers(0, 2))
    if choice == 0:
        return draw(st.text(max_size=200))
    if choice == 1:
        return yaml.safe_dump(draw(json_values))
    return yaml.safe_dump(draw(manifest_dicts()))


@st.composite
def plugin_graphs(draw: st.DrawFn) -> dict[str, dict[str, list[str]]]:
    """Plugins with random requires / load_after / load_before edges among themselves."""
    ids = draw(st.lists(plugin_ids, min_size=1, max_size=8, unique=True))
    graph: dict[str, dict[str, list[str]]] = {}
    for pid in ids:
        others = [o for o in ids if o != pid]
        pick = st.lists(st.sampled_from(others), max_size=2, unique=True) if others else st.just([])
        graph[pid] = {
            "requires": draw(pick),
            "load_after": draw(pick) + draw(st.lists(plugin_ids, max_size=1)),
            "load_before": draw(pick),
        }
    return graph


_PERMISSIONS = ["fs.read", "fs.write", "network", "shell", "install", "secrets:TOKEN"]
_command_names = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
_SETTING_VALUES = {
    "string": st.text(max_size=5),
    "integer": st.integers(),
    "number": st.floats(allow_nan=False, allow_infinity=False),
    "boolean": st.booleans(),
}


@st.composite
def valid_manifests(draw: st.DrawFn) -> dict[str, Any]:
    """Manifests that are valid by construction, with every optional field exercised."""
    permissions = draw(st.lists(st.sampled_from(_PERMISSIONS), unique=True))
    names = draw(st.lists(_command_names, max_size=4, unique=True))
    commands = [
        {
            "name": name,
            "description": draw(st.text(min_size=1, max_size=10)),
            "aliases": [f"{name}_alias"] if draw(st.booleans()) else [],
            "permissions": draw(st.lists(st.sampled_from(permissions), unique=True))
            if permissions
            else [],
            "parameters": {
                "type": "object",
                "properties": {
                    p: {"type": "string"} for p in draw(st.lists(_command_names, max_size=3))
                },
            },
        }
        for name in names
    ]
    settings = {}
    for name in draw(st.lists(_command_names, max_size=3, unique=True)):
        kind = draw(st.sampled_from(sorted(_SETTING_VALUES)))
        settings[name] = {
            "type": kind,
            "default": draw(_SETTING_VALUES[kind]),
            "secret": draw(st.booleans()),
        }
    pid = draw(plugin_ids)
    others = st.lists(plugin_ids.filter(lambda o: o != pid), max_size=2, unique=True)
    return {
        "manifest_version": 1,
        "id": pid,
        "name": draw(st.text(min_size=1, max_size=10)),
        "version": draw(st.from_regex(r"[0-9]{1,2}(\.[0-9]{1,2}){0,2}", fullmatch=True)),
        "description": draw(st.text(max_size=20)),
        "enabled_by_default": draw(st.booleans()),
        "requires_core": draw(st.sampled_from(["", ">=0.1", ">=0.1,<1", "~=0.1"])),
        "permissions": permissions,
        "capabilities": {"commands": commands},
        "requires": draw(others),
        "load_after": draw(others),
        "load_before": draw(others),
        "requirements": draw(
            st.lists(st.sampled_from(["httpx>=0.27", "attrs", "pyyaml<7"]), unique=True)
        ),
        "config": {"settings": settings},
        "codeowners": draw(st.lists(st.text(min_size=1, max_size=5), max_size=2)),
    }
