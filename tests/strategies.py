"""Hypothesis strategies shared by the test suite.

Hook calling: ``scenarios()`` draws random plugin sets for the parity property test of the
awaitable hook caller (``tests/test_hookcall.py``) -- plain data that the test turns into
hook implementations, once async-capable and once as their plain-sync equivalents.

Workspace paths: a ``PathSpec`` is a path in the abstract (an anchor and segments);
``render`` turns it into a string for one concrete ``Layout``: a workspace holding symbolic
links that point out of it, next to an ``outside`` directory holding a secret the sandbox
must never touch (``tests/test_workspace.py``).

Manifests: arbitrary YAML documents, valid manifests with fields replaced, manifests valid
by construction, and random plugin dependency graphs (``tests/test_manifest.py``,
``tests/test_ordering.py``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs
import yaml
from hypothesis import strategies as st

# --- hook calling ------------------------------------------------------------------------

#: The hooks of the parity spec: ``collect(a, b, c=10)`` and firstresult ``first(a, b, c=10)``.
PARITY_HOOKS = ("collect", "first")

#: What a non-wrapper implementation does.
IMPL_OUTCOMES = ("none", "value", "raise")

#: What a wrapper does: pass the outcome on, replace the result, swallow an exception (with
#: a value or ``None``), re-raise it, raise a new one for it, raise after a result, or raise
#: before its first yield.
WRAPPER_MODES = (
    "pass",
    "replace",
    "swallow",
    "swallow_none",
    "reraise",
    "new",
    "raise_after",
    "setup_raise",
)


@attrs.frozen
class ImplPlan:
    """One hook implementation of one plugin, as data.

    ``flavor``: non-wrappers ``sync``/``async``/``blocking``; wrappers ``sync`` (generator),
    ``async`` (async generator) or ``old`` (old-style ``hookwrapper=True``).
    ``params``: its parameter list, e.g. ``("b", "a", "c=5", "zz=7")``.
    ``explicit_yield``: an async wrapper yields the value it keeps instead of finishing.
    ``checkpoint``: an async implementation awaits a checkpoint first.
    """

    wrapper: bool
    flavor: str
    position: str
    outcome: str
    params: tuple[str, ...]
    explicit_yield: bool
    checkpoint: bool


@attrs.frozen
class PluginPlan:
    """A plugin: at most one implementation per parity hook."""

    impls: tuple[tuple[str, ImplPlan], ...]


@attrs.frozen
class CallPlan:
    """One call: which hook, and which arguments it leaves out or adds."""

    hook: str
    omit_b: bool
    pass_c: bool
    extra: bool


@attrs.frozen
class Scenario:
    """Plugins, their registration order, calls, and a plugin unregistered before a re-run."""

    plugins: tuple[PluginPlan, ...]
    order: tuple[int, ...]
    calls: tuple[CallPlan, ...]
    unregister: int | None


@st.composite
def impl_params(draw: st.DrawFn) -> tuple[str, ...]:
    """A parameter list over the spec ``(a, b, c=10)``: a subset in any order, opt-ins too."""
    positional = draw(st.lists(st.sampled_from(("a", "b", "c")), unique=True, max_size=3))
    params = list(positional)
    if "c" not in positional and draw(st.booleans()):
        params.append("c=5")
    if draw(st.integers(0, 3)) == 0:
        params.append("zz=7")  # not in the spec: received only when the call passes it
    return tuple(params)


@st.composite
def impl_plans(draw: st.DrawFn) -> ImplPlan:
    """One implementation; blocking ones are rarer because each costs a thread hop."""
    wrapper = draw(st.integers(0, 2)) == 0
    if wrapper:
        flavor = draw(st.sampled_from(("sync", "async", "async", "old")))
        outcome = draw(st.sampled_from(WRAPPER_MODES))
    else:
        flavor = draw(st.sampled_from(("sync", "sync", "async", "async", "blocking")))
        outcome = draw(st.sampled_from(IMPL_OUTCOMES))
    return ImplPlan(
        wrapper=wrapper,
        flavor=flavor,
        position=draw(st.sampled_from(("normal", "normal", "tryfirst", "trylast"))),
        outcome=outcome,
        params=draw(impl_params()),
        explicit_yield=draw(st.booleans()),
        checkpoint=draw(st.booleans()),
    )


@st.composite
def plugin_plans(draw: st.DrawFn) -> PluginPlan:
    hooks = draw(st.lists(st.sampled_from(PARITY_HOOKS), min_size=1, max_size=2, unique=True))
    return PluginPlan(impls=tuple((hook, draw(impl_plans())) for hook in hooks))


call_plans = st.builds(
    CallPlan,
    hook=st.sampled_from(PARITY_HOOKS),
    omit_b=st.integers(0, 5).map(lambda n: n == 0),
    pass_c=st.booleans(),
    extra=st.booleans(),
)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    """1-8 plugins registered in a random order, 1-3 calls, maybe one unregistered."""
    plugins = draw(st.lists(plugin_plans(), min_size=1, max_size=8))
    order = draw(st.permutations(range(len(plugins))))
    calls = draw(st.lists(call_plans, min_size=1, max_size=3))
    unregister = draw(st.none() | st.integers(0, len(plugins) - 1))
    return Scenario(
        plugins=tuple(plugins), order=tuple(order), calls=tuple(calls), unregister=unregister
    )


# --- workspace paths (tests/test_workspace.py) -----------------------------------------

SECRET = "TOP-SECRET-5b1e0c7a: outside the workspace"

#: Names that mean something in the layout: links out, back in, loops, real files.
INTERESTING = (
    "..",
    ".",
    "",
    "out",
    "out_abs",
    "secret_link",
    "dangling",
    "dangling_dir",
    "loop",
    "up",
    "root_link",
    "inner",
    "sub",
    "back",
    "notes.txt",
    "ws",
    "outside",
    "secret.txt",
    "new.txt",
    "a\x00b",
)

#: Ordinary names, so that many generated paths are valid and the operations really run.
PLAIN = (".", "a", "b", "notes.txt", "sub", "inner", "new.txt", "d\u00e9j\u00e0 vu.md", "\u6587")

ANCHORS = ("/", "<root>", "<outside>", "<tmp>")


@attrs.frozen
class Layout:
    """A temporary tree: ``root`` (the workspace) and ``outside``, both under ``tmp``."""

    tmp: Path
    root: Path
    outside: Path


def build_layout(tmp: Path) -> Layout:
    """Create the workspace, the outside directory with its secret, and the links."""
    tmp = Path(os.path.realpath(tmp))
    root, outside = tmp / "ws", tmp / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text(SECRET, encoding="utf-8")
    (root / "sub" / "notes.txt").write_text("inside\n", encoding="utf-8")
    links = {
        "out": "../outside",
        "out_abs": str(outside),
        "secret_link": str(outside / "secret.txt"),
        "dangling": str(outside / "new.txt"),
        "dangling_dir": str(outside / "newdir" / "x"),
        "loop": "loop",
        "up": "..",
        "root_link": "/",
        "inner": "sub",
        "sub/back": "../../outside",
    }
    for name, target in links.items():
        os.symlink(target, root / name)
    return Layout(tmp=tmp, root=root, outside=outside)


@attrs.frozen
class PathSpec:
    """A path before it meets a layout: ``anchor`` is "", "/" or a layout directory."""

    anchor: str
    segments: tuple[str, ...]
    trailing_slash: bool = False

    def render(self, layout: Layout) -> str:
        body = "/".join(self.segments) + ("/" if self.trailing_slash else "")
        anchors = {
            "": "",
            "/": "/",
            "<root>": f"{layout.root}/",
            "<outside>": f"{layout.outside}/",
            "<tmp>": f"{layout.tmp}/",
        }
        return anchors[self.anchor] + body


def segments() -> st.SearchStrategy[str]:
    """One path segment: an ordinary or meaningful name, arbitrary text, or a long one."""
    plain = st.sampled_from(PLAIN)
    return st.one_of(
        plain,
        plain,
        plain,
        st.sampled_from(INTERESTING),
        st.sampled_from(INTERESTING),
        st.text(min_size=1, max_size=12),
        st.text(alphabet="ab\u00e9\u6587", min_size=60, max_size=130),
    )


def path_specs() -> st.SearchStrategy[PathSpec]:
    """Paths of up to four segments under any anchor."""
    return st.builds(
        PathSpec,
        anchor=st.one_of(st.just(""), st.just(""), st.sampled_from(ANCHORS)),
        segments=st.lists(segments(), min_size=1, max_size=4).map(tuple),
        trailing_slash=st.sampled_from((False, False, False, True)),
    )


# --- manifests and plugin graphs (tests/test_manifest.py, tests/test_ordering.py) ------

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
#: Names of ``autogpt NAME`` commands a manifest may declare under ``cli.commands``.
cli_command_names = st.from_regex(r"[a-z][a-z0-9_-]{0,63}", fullmatch=True)
#: What a manifest may not give as such a name: other text (upper case, a leading digit or
#: dash, spaces, a trailing line break, too long) and values that are not text at all.
invalid_cli_command_names = st.one_of(
    st.text(max_size=70).filter(lambda t: re.fullmatch(r"[a-z][a-z0-9_-]{0,63}", t) is None),
    cli_command_names.map(lambda n: n + "\n"),
    st.from_regex(r"[a-z][a-z0-9_-]{64,70}", fullmatch=True),
    st.none(),
    st.integers(),
    st.lists(st.text(max_size=3), max_size=2),
)


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


_PERMISSIONS = [
    "fs.read",
    "fs.write",
    "fs.overwrite",
    "network",
    "network.local",
    "shell",
    "install",
    "secrets:TOKEN",
]
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
        default = draw(_SETTING_VALUES[kind])
        settings[name] = {"type": kind, "default": default, "secret": draw(st.booleans())}
        # Bounds and choices the default obeys (a bound may equal it).
        if kind in ("integer", "number"):
            if draw(st.booleans()):
                settings[name]["minimum"] = default - draw(st.integers(0, 100))
            if draw(st.booleans()):
                settings[name]["maximum"] = default + draw(st.integers(0, 100))
        if kind != "boolean" and draw(st.booleans()):
            low = settings[name].get("minimum", float("-inf"))
            high = settings[name].get("maximum", float("inf"))
            others = [
                v
                for v in draw(st.lists(_SETTING_VALUES[kind], max_size=3))
                if kind == "string" or low <= v <= high
            ]
            settings[name]["enum"] = list(dict.fromkeys([*others, default]))
    pid = draw(plugin_ids)
    others = st.lists(plugin_ids.filter(lambda o: o != pid), max_size=2, unique=True)
    return {
        "manifest_version": 1,
        "id": pid,
        "name": draw(st.text(min_size=1, max_size=10)),
        "version": draw(st.from_regex(r"[0-9]{1,2}(\.[0-9]{1,2}){0,2}", fullmatch=True)),
        "description": draw(st.text(max_size=20)),
        "enabled_by_default": draw(
            st.one_of(
                st.booleans(),
                st.lists(st.sampled_from(["sqlite", "postgresql"]), min_size=1, unique=True),
            )
        ),
        "shares_store": draw(st.booleans()),
        "setup": draw(st.sampled_from([{}, {"terms": "Be nice."}, {"terms": "https://x.test/t"}])),
        "requires_core": draw(st.sampled_from(["", ">=0.1", ">=0.1,<1", "~=0.1"])),
        "permissions": permissions,
        "capabilities": {"commands": commands},
        "cli": {
            "commands": [
                {"name": name, "help": draw(st.text(min_size=1, max_size=10))}
                for name in draw(st.lists(cli_command_names, max_size=3, unique=True))
            ]
        },
        "requires": draw(others),
        "load_after": draw(others),
        "load_before": draw(others),
        "requirements": draw(
            st.lists(st.sampled_from(["httpx>=0.27", "attrs", "pyyaml<7"]), unique=True)
        ),
        "config": {"settings": settings},
        "codeowners": draw(st.lists(st.text(min_size=1, max_size=5), max_size=2)),
    }


# --- text from outside: consent prompts, terminal output --------------------------------

# Characters an attacker would use to hide or rewrite what a terminal shows.
_HOSTILE_CHARS = st.sampled_from(
    [
        "\x1b[2K",
        "\x1b[1A",
        "\r",
        "\x08",
        "\x00",
        "\x7f",
        "\x9b",
        "\u202e",
        "\u2066",
        "\u200b",
        "\u2028",
        "\ufe0f",
        "\U000e0100",
        "\u3164",
        "\u2800",
        "\n",
        "\t",
        " " * 50,
        "; touch HIDDEN",
        "é",
        "\\x1b",
    ]
)
hostile_text = st.lists(st.one_of(_HOSTILE_CHARS, st.text(max_size=10)), max_size=8).map("".join)


@st.composite
def hostile_arguments(draw: st.DrawFn) -> dict[str, str]:
    """Command arguments full of control characters, escapes and padding."""
    names = draw(st.lists(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), max_size=3, unique=True))
    return {name: draw(hostile_text) for name in names}


# --- network addresses -------------------------------------------------------------------


def ip_addresses() -> st.SearchStrategy[Any]:
    """IPv4 and IPv6 addresses (special-use ranges often), and IPv6 addresses carrying an
    IPv4 one: IPv4-mapped, NAT64, IPv4-compatible and 6to4 (``tests/test_plugin_web.py``)."""
    import ipaddress  # here, not at the top: this section was appended to the module

    v4 = st.ip_addresses(v=4)
    # (prefix, shift): the IPv4 address sits in the last 32 bits, or in bits 80-111 for 6to4.
    carriers = [(0xFFFF << 32, 0), (0x64FF9B << 96, 0), (0, 0), (0x2002 << 112, 80)]
    carrying = st.builds(
        lambda carrier, v4_address: ipaddress.IPv6Address(
            carrier[0] | int(v4_address) << carrier[1]
        ),
        st.sampled_from(carriers),
        v4,
    )
    return st.one_of(v4, st.ip_addresses(v=6), carrying)


# --- hard links into the workspace (tests/test_workspace.py) ---------------------------

#: Names in the workspace that are hard links to the outside secret.
HARD_LINKS = ("hard_link", "sub/hard_link")


def add_hard_links(layout: Layout) -> None:
    """Hard-link the outside secret into the workspace, as a user or a process could."""
    for name in HARD_LINKS:
        os.link(layout.outside / "secret.txt", layout.root / name)


def hard_link_path_specs() -> st.SearchStrategy[PathSpec]:
    """Paths ending at a hard link, spelled through '.', '..', inner links or the root."""
    return st.builds(
        PathSpec,
        anchor=st.sampled_from(("", "", "<root>")),
        segments=st.lists(st.sampled_from((".", "..", "sub", "inner")), max_size=3).map(
            lambda prefix: (*prefix, "hard_link")
        ),
        trailing_slash=st.just(False),
    )


# --- session ids and their prefixes (tests/test_storage.py) ----------------------------

# Few letters, so that prefixes often match several ids, one, or none.
_ID_LETTERS = st.sampled_from("ab1é")

#: Sets of session ids, some of which are prefixes of others.
session_id_sets = st.sets(st.text(_ID_LETTERS, min_size=1, max_size=4), min_size=1, max_size=8)

#: What a user may type for a session id: possibly empty, possibly no id's start.
session_id_prefixes = st.text(_ID_LETTERS, max_size=4)


# --- hostile manifests and parameter schemas (tests/test_manifest.py, test_commands.py) --

_YAML_SCALARS = st.sampled_from(("lol", "1", "x y", '"q"', "null", "2.5", "true"))


@st.composite
def aliased_yaml(draw: st.DrawFn) -> str:
    """Flow-style YAML whose nodes carry anchors and aliases: repeated ones ("billion
    laughs"), ones that point at an enclosing node (recursive), and unknown ones."""
    anchors: list[str] = []

    def node(depth: int) -> str:
        if draw(st.integers(0, 3)) == 0:
            names = [*anchors, "nowhere"]
            return "*" + draw(st.sampled_from(names))
        anchor = ""
        if draw(st.integers(0, 2)) == 0:
            anchors.append(f"a{len(anchors)}")
            anchor = f"&{anchors[-1]} "
        kind = draw(st.sampled_from(("scalar", "list", "map"))) if depth < 4 else "scalar"
        if kind == "scalar":
            return anchor + draw(_YAML_SCALARS)
        # Added before the children: they may alias the node that contains them.
        items = [node(depth + 1) for _ in range(draw(st.integers(0, 4)))]
        if kind == "list":
            return anchor + "[" + ", ".join(items) + "]"
        return anchor + "{" + ", ".join(f"k{i}: {item}" for i, item in enumerate(items)) + "}"

    text = node(0)
    if "&" not in text and "*" not in text:
        text = f"&top [{text}, *top]"
    where = draw(st.sampled_from(("alone", "in_manifest", "merge")))
    if where == "alone":
        return text
    manifest = yaml.safe_dump(valid_manifest_dict())
    if where == "merge":
        return manifest + f"base: &base {{x: {text}}}\nother: {{<<: *base}}\n"
    return manifest + f"extra: {text}\n"


@st.composite
def deeply_nested_yaml(draw: st.DrawFn) -> str:
    """Lists and mappings nested 33 to 400 levels deep, in flow or block style."""
    depth = draw(st.integers(33, 400))
    style = draw(st.sampled_from(("flow_list", "flow_map", "block")))
    if style == "flow_list":
        return "[" * depth + "1" + "]" * depth
    if style == "flow_map":
        return "{a: " * depth + "1" + "}" * depth
    return "".join(" " * i + "k:\n" for i in range(depth - 1)) + " " * (depth - 1) + "k: 1\n"


hostile_yaml = st.one_of(aliased_yaml(), deeply_nested_yaml())

_PATTERNS = st.one_of(
    st.sampled_from(
        ("^a+$", "^(a+)+$", "(", "[", "a{4294967296}", "\\d", "^[a-z]*$", "(?P<x>a)(?P=x)")
    ),
    st.text(alphabet="a()[]+*?|^$\\{}1,", max_size=8),
)
_REFS = st.sampled_from(
    (
        "#",
        "#/$defs/a",
        "#/$defs/missing",
        "#/properties",
        "#/required",
        "#/$defs/a/type",
        "#anchor",
        "#bad/anchor",
        "other.json",
        "other.json#/$defs/a",
        "https://example.com/s.json",
        "https://json-schema.org/draft/2020-12/schema",
        "http://[::1",
    )
)
_leaf_schemas = st.one_of(
    st.booleans(),
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(("string", "integer", "object", "array", "strnig", 5)),
            "pattern": _PATTERNS,
            "$ref": _REFS,
            "minLength": st.integers(-1, 3),
            "$anchor": st.sampled_from(("anchor", "1bad")),
            "enum": st.lists(st.sampled_from(("a", 1, None)), max_size=2),
        },
    ),
)


def _schema_children(children: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    names = st.sampled_from(("a", "b", "$ref"))
    return st.fixed_dictionaries(
        {},
        optional={
            "type": st.just("object"),
            "properties": st.dictionaries(names, children, max_size=3),
            "patternProperties": st.dictionaries(_PATTERNS, children, max_size=2),
            "additionalProperties": children,
            "items": children,
            "anyOf": st.lists(children, min_size=1, max_size=2),
            "$defs": st.dictionaries(st.sampled_from(("a", "b")), children, max_size=2),
            "$id": st.sampled_from(("other.json", "https://example.com/root.json")),
            "$ref": _REFS,
        },
    )


_subschemas = st.recursive(_leaf_schemas, _schema_children, max_leaves=8)


@st.composite
def parameter_schemas(draw: st.DrawFn) -> dict[str, Any]:
    """A command's parameters: type object, with patterns, $refs (resolvable or not) and
    nested objects, valid JSON Schema or not."""
    schema = draw(_schema_children(_subschemas))
    if draw(st.integers(0, 5)):
        schema["type"] = "object"
    return schema


_argument_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 5) | st.text(alphabet="ab!", max_size=12),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(("a", "b")), children, max_size=3)
    ),
    max_leaves=6,
)
#: Arguments for a command of ``parameter_schemas()``.
argument_dicts = st.dictionaries(st.sampled_from(("a", "b", "$ref", "aa")), _argument_values)


# --- config files (tests/test_config.py) ---------------------------------------------------
# Written from docs/configuration.md, not from the schema in autogpt_core/_config.py, so
# that the property tests compare two descriptions instead of the schema with itself.

import re  # noqa: E402 - here, not at the top: this section was appended to the module

_positive_ints = st.integers(1, 10**12)
_positive_numbers = _positive_ints | st.floats(min_value=0, exclude_min=True, allow_nan=False)
_not_positive = st.integers(max_value=0) | st.floats(max_value=0) | st.just(float("nan"))
_not_numbers = (
    st.booleans()
    | st.text(max_size=5)
    | st.lists(st.integers(), max_size=2)
    | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2)
)
_texts = st.text(max_size=20)
_not_texts = (
    st.booleans() | st.integers() | st.floats(allow_nan=False) | st.lists(_texts, max_size=2)
)
_grantable = st.sampled_from(_PERMISSIONS) | st.from_regex(
    r"secrets:[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True
)
_not_plugin_ids = st.one_of(
    _texts.filter(lambda s: not re.fullmatch(r"[a-z][a-z0-9_-]{0,63}", s)),
    st.integers(),
    st.none(),
    st.lists(plugin_ids, max_size=1),
)
_not_permissions = st.one_of(
    _texts.filter(
        lambda s: (
            s not in _PERMISSIONS
            and not re.fullmatch(r"secrets:[A-Za-z_]\w*", s, re.A)
            and not re.fullmatch(r"bridge:[a-z][a-z0-9_-]{0,63}", s)
        )
    ),
    st.integers(),
    st.none(),
)


def _list_with_one(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> Any:
    """A list of ``good`` items with one ``bad`` item somewhere in it."""
    return st.tuples(st.lists(good, max_size=3), bad, st.integers(0, 3)).map(
        lambda t: [*t[0][: t[2]], t[1], *t[0][t[2] :]]
    )


_settings = st.dictionaries(st.text(max_size=8), json_values, max_size=3)

#: Every field of the config file: (dotted name, valid values, invalid values).
CONFIG_FIELDS: dict[str, tuple[st.SearchStrategy[Any], st.SearchStrategy[Any]]] = {
    "plugins.enable": (
        st.none() | st.lists(plugin_ids, max_size=4),
        st.booleans() | st.integers() | _texts | _list_with_one(plugin_ids, _not_plugin_ids),
    ),
    "plugins.disable": (
        st.none() | st.lists(plugin_ids, max_size=4),
        st.integers() | _list_with_one(plugin_ids, _not_plugin_ids),
    ),
    "plugins.settings": (
        st.none() | st.dictionaries(plugin_ids, _settings, max_size=3),
        st.one_of(
            st.lists(st.integers(), max_size=2),
            _texts,
            st.dictionaries(
                plugin_ids,
                st.none() | st.booleans() | st.integers() | _texts | st.lists(_texts, max_size=2),
                min_size=1,
                max_size=2,
            ),
            st.dictionaries(
                _texts.filter(lambda s: not re.fullmatch(r"[a-z][a-z0-9_-]{0,63}", s)),
                _settings,
                min_size=1,
                max_size=2,
            ),
        ),
    ),
    "permissions.grant": (
        st.lists(_grantable, max_size=4),
        st.none() | _texts | _list_with_one(_grantable, _not_permissions),
    ),
    "llm.provider": (st.none() | _texts, _not_texts),
    "llm.model": (st.none() | _texts, _not_texts),
    "llm.base_url": (st.none() | _texts, _not_texts),
    "limits.max_cycles": (
        st.none() | _positive_ints,
        _not_positive
        | _not_numbers
        | st.floats(min_value=0.1, max_value=1e6).filter(lambda f: not f.is_integer()),
    ),
    "limits.max_tokens": (st.none() | _positive_ints, _not_positive | _not_numbers),
    "limits.max_cost": (st.none() | _positive_numbers, _not_positive | _not_numbers),
    "limits.hook_timeout": (st.none() | _positive_numbers, _not_positive | _not_numbers),
    "limits.command_timeout": (st.none() | _positive_numbers, _not_positive | _not_numbers),
    "limits.confirm_timeout": (st.none() | _positive_numbers, _not_positive | _not_numbers),
    "limits.max_failures": (
        _positive_ints,
        st.none() | _not_positive | _not_numbers | st.just(2.0),
    ),
    "data_dir": (
        st.none() | st.from_regex(r"(~/)?[a-z./]{1,12}", fullmatch=True),
        _not_texts | st.just("~no-such-user-3f9a/agents"),
    ),
}


def _nest(fields: dict[str, Any]) -> dict[str, Any]:
    """``{"limits.max_cycles": 3}`` as the file has it: ``{"limits": {"max_cycles": 3}}``."""
    config: dict[str, Any] = {}
    for name, value in fields.items():
        section, _, key = name.rpartition(".")
        if section:
            config.setdefault(section, {})[key] = value
        else:
            config[key] = value
    return config


@st.composite
def valid_configs(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    """A valid config with any subset of its fields, and those fields by dotted name."""
    names = draw(st.lists(st.sampled_from(sorted(CONFIG_FIELDS)), unique=True))
    fields = {name: draw(CONFIG_FIELDS[name][0]) for name in names}
    return _nest(fields), fields


_unknown_keys = st.from_regex(r"[a-z_]{1,12}", fullmatch=True)


@st.composite
def invalid_configs(draw: st.DrawFn) -> tuple[dict[str, Any], list[str]]:
    """A config with 1-3 mistakes (wrong values, unknown fields or sections) on top of a
    valid one, and the name of the field or section each mistake is in."""
    config, fields = draw(valid_configs())
    wrong = draw(
        st.lists(st.sampled_from(sorted(CONFIG_FIELDS)), min_size=1, max_size=3, unique=True)
    )
    fields.update({name: draw(CONFIG_FIELDS[name][1]) for name in wrong})
    config = _nest(fields)
    named = list(wrong)
    for _ in range(draw(st.integers(0, 1))):
        section = draw(st.sampled_from(["plugins", "permissions", "llm", "limits", None]))
        key = draw(_unknown_keys)
        if section is None and key not in {"plugins", "permissions", "llm", "limits", "data_dir"}:
            config[key] = draw(json_values)
            named.append(key)
        elif section is not None and f"{section}.{key}" not in CONFIG_FIELDS:
            config.setdefault(section, {})[key] = draw(json_values)
            named.append(f"{section}.{key}")
    return config, named


# --- damaged store columns (tests/test_storage.py) ---------------------------------------

#: The JSON columns of the session store, as (table, column).
STORE_JSON_COLUMNS = (
    ("sessions", "config"),
    ("sessions", "budget"),
    ("cycles", "plan"),
    ("cycles", "command"),
    ("cycles", "result"),
    ("cycles", "usage"),
    ("cycles", "messages"),
    ("events", "data"),
    ("memory", "metadata"),
)


def _json_text(value: Any) -> str:
    # Imported here: this section is appended, and the module's imports are at its top.
    import json

    return json.dumps(value)


#: What a hand edit or a damaged disk may leave in a JSON column: text that is not JSON,
#: JSON cut short, JSON of the wrong shape, JSON nested thousands deep, the constants
#: Python writes but JSON lacks, an integer too long to convert, or not text at all.
damaged_json = st.one_of(
    st.text(max_size=40),
    json_values.map(_json_text),
    st.tuples(json_values.map(_json_text), st.integers(0, 40)).map(lambda cut: cut[0][: cut[1]]),
    st.integers(1, 20_000).map(lambda depth: "[" * depth + "]" * depth),
    st.integers(1, 20_000).map(lambda depth: '{"a":' * depth + "1" + "}" * depth),
    st.sampled_from(
        [
            "NaN",
            '{"cycles": Infinity}',
            "-Infinity",
            "1" * 5000,
            '{"tokens": 1e999}',
            '[{"role": 1}]',
        ]
    ),
    st.integers(-(2**63), 2**63 - 1),  # what SQLite can hold
    st.floats(),
    st.binary(max_size=20),
)


# --- slow inline hook implementations (tests/test_hookcall.py) -------------------------

#: The kinds of implementation the slow-call check meets: ``sync`` and ``maybe_async``
#: (a decorated function) run on the event loop; ``async`` and ``blocking`` do not.
TIMED_KINDS = ("sync", "maybe_async", "async", "blocking")

#: The implementations of one hook, in registration order: (kind, seconds it takes on the
#: test's clock). 0.05 is quick alone, but several in a row add up to a slow stretch.
timed_impls = st.lists(
    st.tuples(st.sampled_from(TIMED_KINDS), st.sampled_from((0.0, 0.05, 0.25))),
    min_size=1,
    max_size=6,
)


# --- damaged files ------------------------------------------------------------------------


def replace_in_json(data: object, path: list[int], replacement: object) -> object:
    """``data`` with the value found by walking ``path`` (indices into its children) replaced."""
    if not path or not isinstance(data, dict | list) or not data:
        return replacement
    if isinstance(data, dict):
        key = sorted(data)[path[0] % len(data)]
        return {**data, key: replace_in_json(data[key], path[1:], replacement)}
    i = path[0] % len(data)
    return [*data[:i], replace_in_json(data[i], path[1:], replacement), *data[i + 1 :]]


# --- OpenAPI documents (tests/test_plugin_openapi.py) --------------------------------------

#: Schemas a generated document's components hold: plain, recursive through a property,
#: referring to itself in place, of a type JSON Schema does not know, OpenAPI 3.0-only.
OPENAPI_COMPONENTS = {
    "Plain": {"type": "object", "properties": {"name": {"type": "string"}}},
    "Tree": {"type": "object", "properties": {"child": {"$ref": "#/components/schemas/Tree"}}},
    "Self": {"$ref": "#/components/schemas/Self"},
    "Strange": {"type": "strange"},
    "Nullable": {"type": "integer", "nullable": True, "minimum": 0, "exclusiveMinimum": True},
    "BadPattern": {"type": "string", "pattern": "(unclosed"},
}

_openapi_schemas = st.recursive(
    st.sampled_from(
        [
            {},
            True,
            {"type": "string"},
            {"type": "integer", "minimum": 1},
            {"type": ["string", "null"]},
            {"$ref": "#/components/schemas/Plain"},
            {"$ref": "#/components/schemas/Tree"},
            {"$ref": "#/components/schemas/Self"},
            {"$ref": "#/components/schemas/Strange"},
            {"$ref": "#/components/schemas/Nullable"},
            {"$ref": "#/components/schemas/BadPattern"},
            {"$ref": "#/components/schemas/Missing"},
            {"$ref": "other.yaml#/Pet"},
            {"$ref": "#/paths"},
            "not a schema",
        ]
    ),
    lambda inner: (
        st.builds(
            lambda p: {"type": "object", "properties": p},
            st.dictionaries(st.sampled_from(["a", "b", "$ref"]), inner, max_size=2),
        )
        | st.builds(lambda i: {"type": "array", "items": i}, inner)
        | st.builds(lambda xs: {"anyOf": xs}, st.lists(inner, max_size=2))
    ),
    max_leaves=6,
)

_openapi_parameters = st.fixed_dictionaries(
    {
        "name": st.sampled_from(
            ["id", "q", "page", "limit", "X-Trace", "body", "ctx", "Accept", ""]
        ),
        "in": st.sampled_from(["query", "query", "query", "header", "path", "cookie", "nowhere"]),
    },
    optional={
        "schema": _openapi_schemas,
        "required": st.booleans(),
        "description": st.text(max_size=5),
    },
)

_openapi_operations = st.fixed_dictionaries(
    {
        "responses": st.just({}),
        # Mostly usable names, a duplicate, and a few that cannot be one.
        "operationId": st.sampled_from(
            ["getThing", "listThings", "putThing", "a.b", "get thing", "x" * 80, "", 3, None]
        ),
    },
    optional={
        "summary": st.text(max_size=10),
        "parameters": st.lists(_openapi_parameters, max_size=2) | st.just("nope"),
        "requestBody": st.one_of(
            st.builds(
                lambda kind, schema, required: {
                    "content": {kind: {"schema": schema}},
                    "required": required,
                },
                st.sampled_from(
                    [
                        "application/json",
                        "application/vnd.x+json",
                        "multipart/form-data",
                        "text/plain",
                    ]
                ),
                _openapi_schemas,
                st.booleans(),
            ),
            st.just({"$ref": "#/components/requestBodies/Missing"}),
            st.just({"content": {}}),
        ),
        "security": st.sampled_from(
            [[], [{}], [{"token": []}], [{"oauth": []}], [{"cookie": []}], "x"]
        ),
        "callbacks": st.just({"later": {}}),
    },
)


@st.composite
def openapi_documents(draw: st.DrawFn) -> dict[str, Any]:
    """An OpenAPI 3 document of a few paths and operations, sound or not in every part."""
    paths: dict[str, Any] = {}
    for i in range(draw(st.integers(1, 4))):
        template = draw(st.sampled_from(["/things", "/things", "/things/{id}", "/a/{id}/{q}"]))
        methods = draw(st.lists(st.sampled_from(["get", "post", "put"]), unique=True, min_size=1))
        paths[f"/{i}{template}"] = {m: draw(_openapi_operations) for m in methods}
    return {
        "openapi": "3.0.3",
        "info": {"title": "generated", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": OPENAPI_COMPONENTS,
            "securitySchemes": {
                "token": {"type": "http", "scheme": "bearer"},
                "oauth": {"type": "oauth2"},
                "cookie": {"type": "apiKey", "in": "cookie", "name": "s"},
            },
        },
    }


# --- classic Auto-GPT plugins ---------------------------------------------------------------

#: The words of Auto-GPT 0.4 argument hints that name a type, and the JSON Schema type each
#: becomes (tests/test_plugin_classic.py); any other hint is a string.
CLASSIC_TYPE_WORDS = {
    "int": "integer",
    "integer": "integer",
    "float": "number",
    "number": "number",
    "bool": "boolean",
    "boolean": "boolean",
    "list": "array",
}
_OPTIONAL_FORMS = ("<{}> (optional)", "<optional: {}>", "<{}, optional>", "<{}> [Optional]")


def _free_hint(text: str) -> bool:
    """A hint that names no type and does not say optional."""
    bare = "".join(c for c in text if c not in "<>,;: \t\n\r\x0b\x0c").lower()
    return "optional" not in text.lower() and bare not in CLASSIC_TYPE_WORDS


@st.composite
def classic_hints(draw: st.DrawFn) -> tuple[object, str, bool]:
    """``(hint, the JSON Schema type it must become, whether the argument is required)``."""
    kind = draw(st.sampled_from(["typed", "free", "list value"]))
    if kind == "list value":
        return draw(st.lists(st.text(max_size=5), max_size=3)), "array", True
    optional = draw(st.booleans())
    if kind == "typed":
        word = draw(st.sampled_from(sorted(CLASSIC_TYPE_WORDS)))
        word = draw(st.sampled_from([word, word.upper(), word.title()]))
        form = draw(st.sampled_from(_OPTIONAL_FORMS)) if optional else "<{}>"
        return form.format(word), CLASSIC_TYPE_WORDS[word.lower()], not optional
    text = draw(st.text(max_size=20).filter(_free_hint))
    return (f"{text} (optional)" if optional else text), "string", not optional


#: Names a classic plugin may give its commands and their arguments: any text.
classic_names = st.text(st.characters(exclude_categories=("Cs",)), min_size=0, max_size=16)
