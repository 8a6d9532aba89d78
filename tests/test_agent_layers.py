"""The engine's layers: no module imports one above it, not even under TYPE_CHECKING;
inside ``agent/`` each piece receives its collaborators instead of the runtime."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "autogpt_core"

#: Higher imports lower, never the other way round. Top-level modules (``_errors``,
#: ``_config``, ...) and ``store``/``plugins``/``hooks`` are below ``agent``; the HTTP
#: server above the agent; the CLI (and ``python -m autogpt_core``, which runs it) and the
#: plugin authors' test harness (``testing``, a front end as the CLI is) on top.
LAYER = {"cli": 4, "__main__": 4, "testing": 4, "server": 3, "agent": 2}

#: Upward imports that are known and not ours to move here, each with its reason. The
#: secret-name rule lives in agent/_redact.py, and the manifest check uses it.
KNOWN_UPWARD = {("plugins._manifest", "agent._redact")}

#: Inside ``agent/``: who may import whom (a module imports only those listed lower).
AGENT_ORDER = [
    ["_redact", "_options", "_workspace", "_plugin_control"],
    ["_emitter", "_model"],
    ["_caller"],
    ["_dispatcher"],
    ["_session"],
    ["_calls"],
    ["_runtime"],
]


def _imports(path: Path) -> set[str]:
    """The ``autogpt_core`` modules ``path`` imports, anywhere in it, as dotted names
    relative to the package (``agent._session``)."""
    package = path.relative_to(CORE).with_suffix("").parts[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[: len(package) - (node.level - 1)])
                module = [*base, *(node.module.split(".") if node.module else [])]
            elif node.module and node.module.startswith("autogpt_core"):
                module = node.module.split(".")[1:]
            else:
                continue
            names = [a.name for a in node.names]
            found.add(".".join(module))
            # ``from . import _x`` imports the module _x.
            found.update(".".join([*module, n]) for n in names if n.startswith("_"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("autogpt_core."):
                    found.add(alias.name.removeprefix("autogpt_core."))
    return {m for m in found if m}


def _layer(module: str) -> int:
    return LAYER.get(module.split(".")[0], 1)


MODULES = sorted(p for p in CORE.rglob("*.py") if "demo" not in p.parts)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(CORE)))
def test_no_module_imports_a_layer_above_it(path: Path) -> None:
    """The CLI on top, the agent above store/plugins/hooks: nothing imports upwards."""
    me = ".".join(path.relative_to(CORE).with_suffix("").parts)
    if me == "__init__":
        return  # the public surface re-exports every layer, lazily
    above = sorted(
        m for m in _imports(path) if _layer(m) > _layer(me) and (me, m) not in KNOWN_UPWARD
    )
    assert above == [], f"{me} imports {above}, a layer above it"


def test_agent_modules_import_only_those_below_them() -> None:
    """Inside agent/, the runtime wires everything and nobody imports it back; the session
    imports its collaborators' modules, never the runtime's."""
    rank = {name: i for i, group in enumerate(AGENT_ORDER) for name in group}
    for path in sorted((CORE / "agent").glob("_*.py")):
        me = path.stem
        if me == "__init__":
            continue
        assert me in rank, f"agent/{path.name} is missing from AGENT_ORDER"
        agent = {m.split(".")[1] for m in _imports(path) if m.startswith("agent.")}
        upward = sorted(m for m in agent if rank[m] >= rank[me] and m != me)
        assert upward == [], f"agent/{path.name} imports {upward}"


def test_only_the_emitter_masks() -> None:
    """One masking boundary: of the session's pieces only the emitter holds the redactor
    (the runtime makes it); the session and the dispatcher mask through the emitter."""
    users = sorted(
        path.stem for path in (CORE / "agent").glob("_*.py") if "agent._redact" in _imports(path)
    )
    assert users == ["_emitter", "_runtime"]
    for name in ("_session", "_calls", "_dispatcher", "_caller"):
        text = (CORE / "agent" / f"{name}.py").read_text(encoding="utf-8")
        for reach in ("redactor", "self.runtime", "Runtime"):
            assert reach not in text, (name, reach)


def test_the_core_names_no_plugin() -> None:
    """Below the CLI, no engine module names a built-in plugin or its provider names."""
    # The ids and names that are not also ordinary words ("workspace" is an event's key;
    # "openai" stays the documented default of llm.provider).
    plugins = ["jsonlog", "llm_openai", "llm_replay", "memory_sqlite", "replay"]
    for path in MODULES:
        if _layer(".".join(path.relative_to(CORE).with_suffix("").parts)) >= LAYER["cli"]:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        strings = {
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        }
        named = sorted(p for p in [*plugins, "record", "strict", "skip"] if p in strings)
        assert named == [], f"{path.relative_to(ROOT)} names {named}"
