"""``autogpt plugins ...``: list, info, enable, disable, check, install, uninstall, upgrade,
new, codeowners, import-classic."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from .._config import Config, load_config, set_plugin_state
from .._errors import ConfigError

if TYPE_CHECKING:
    from ..plugins._install import Lifecycle
    from ..plugins._loader import PluginRecord, PluginSet

# The loader (and with it trio and pluggy) is imported by the commands that need it, so
# that building the argument parser -- all that ``autogpt --version`` does -- stays cheap.
# These mirror _loader's constants (tests/test_cli_plugins.py checks they agree).
BROKEN = "broken"
LOADED = "loaded"


def _say(*parts: object, file: Any = None) -> None:
    """``print``, made safe: manifests, import errors and plugin text are written by
    plugins, which could otherwise move the cursor, erase lines or hide their own words
    (their permissions, say) from the person reading."""
    from hookspecs import printable

    print(printable(" ".join(map(str, parts))), file=file)


def add_plugins_parser(sub: Any) -> None:
    plugins = sub.add_parser("plugins", help="list, inspect, enable and check plugins")
    psub = plugins.add_subparsers(dest="plugins_command", metavar="ACTION", required=True)

    p = psub.add_parser("list", help="installed plugins and their status")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--all", action="store_true", help="include the built-in plugins")
    p.set_defaults(handler=cmd_list)

    p = psub.add_parser("info", help="one plugin's manifest, hooks, commands and requirements")
    p.add_argument("plugin_id")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_info)

    p = psub.add_parser("enable", help="enable plugins (persisted in the config file)")
    p.add_argument("plugin_ids", nargs="+", metavar="ID")
    p.add_argument("--yes", "-y", action="store_true", help="also enable required plugins")
    p.add_argument(
        "--accept-terms",
        action="store_true",
        help="accept the plugins' terms (setup.terms) without being asked: you have read them",
    )
    p.set_defaults(handler=cmd_enable)

    p = psub.add_parser("disable", help="disable plugins (persisted in the config file)")
    p.add_argument("plugin_ids", nargs="+", metavar="ID")
    p.set_defaults(handler=cmd_disable)

    p = psub.add_parser("check", help="validate manifests, requirements, order and config")
    p.set_defaults(handler=cmd_check)

    p = psub.add_parser(
        "install", help="pip install autogpt-plugin-NAME, show its manifest, ask to enable it"
    )
    p.add_argument(
        "names",
        nargs="+",
        metavar="NAME",
        help="a plugin name ('hello', 'hello>=1.0': autogpt-plugin-hello), or a path or wheel",
    )
    p.add_argument("--dry-run", action="store_true", help="print the pip command, run nothing")
    p.add_argument("--yes", "-y", action="store_true", help="enable it without asking")
    p.set_defaults(handler=cmd_install)

    p = psub.add_parser("search", help="look plugins up in the plugin index (plugins.index)")
    p.add_argument("query", nargs="*", metavar="WORD", help="words to look for (none: all)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=cmd_search)

    p = psub.add_parser("uninstall", help="pip uninstall a plugin's distribution")
    p.add_argument("plugin_id", metavar="ID")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.add_argument(
        "--keep-config",
        action="store_true",
        help="keep its enable/disable entries and settings in the config file",
    )
    p.set_defaults(handler=cmd_uninstall)

    p = psub.add_parser("upgrade", help="upgrade a plugin and show what its manifest changed")
    p.add_argument("plugin_id", metavar="ID")
    p.add_argument(
        "--yes", "-y", action="store_true", help="keep it enabled even if it wants more permissions"
    )
    p.set_defaults(handler=cmd_upgrade)

    p = psub.add_parser("new", help="create a new plugin distribution from a template")
    p.add_argument("plugin_id")
    p.add_argument("--directory", "-d", default=".", help="where to create it (default: .)")
    p.set_defaults(handler=cmd_new)

    p = psub.add_parser("codeowners", help="who owns each plugin; --output writes CODEOWNERS")
    form = p.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="machine-readable output")
    form.add_argument(
        "--output", "-o", metavar="FILE", help="write a CODEOWNERS file ('-': standard output)"
    )
    p.add_argument(
        "--root",
        metavar="DIR",
        help="with --output: the repository root the paths are relative to (default: .)",
    )
    p.set_defaults(handler=cmd_codeowners)

    p = psub.add_parser(
        "import-classic",
        help="use an Auto-GPT 0.4 plugins_config.yaml: enable classic, allow its plugins",
    )
    p.add_argument(
        "plugins_config", metavar="PLUGINS_CONFIG_YAML", help="Auto-GPT's plugins_config.yaml"
    )
    p.add_argument(
        "--plugins-dir",
        metavar="DIR",
        help="where the plugins' zip files are (default: the plugins directory next to the file)",
    )
    p.set_defaults(handler=_import_classic)


def _import_classic(args: argparse.Namespace) -> int:
    from ._cli_import_classic import cmd_import_classic

    return cmd_import_classic(args)


def _config(args: argparse.Namespace, *, must_exist: bool = True) -> Config:
    return load_config(args.config, must_exist=must_exist)


def _load(args: argparse.Namespace, config: Config) -> PluginSet:
    from ..hooks._tracing import trace_factory
    from ..plugins._loader import load

    return load(config, pm_factory=trace_factory(args.trace_hooks))


def _row(record: PluginRecord) -> dict[str, Any]:
    manifest = record.manifest
    return {
        "id": record.id,
        "name": manifest.name if manifest else record.id,
        "version": manifest.version if manifest else None,
        "distribution": record.source.distribution if record.source else None,
        "dist_version": record.source.dist_version if record.source else None,
        "builtin": record.builtin,
        "enabled": record.enabled,
        "status": record.status,
        "reason": record.reason,
    }


def cmd_list(args: argparse.Namespace) -> int:
    config = _config(args)
    plugins = _load(args, config)
    # A broken built-in is always shown: it is a problem to fix, not noise.
    records = [
        r for r in plugins.records.values() if args.all or not r.builtin or r.status == BROKEN
    ]
    records.sort(key=lambda r: r.id)
    if args.json:
        _say(json.dumps([_row(r) for r in records], indent=2))
        return 0
    if not records:
        builtins = sum(1 for r in plugins.records.values() if r.builtin)
        _say(
            "No third-party plugins installed. "
            f"'autogpt plugins list --all' shows the {builtins} built-in ones."
        )
        return 0
    width = max(len(r.id) for r in records)
    for r in records:
        row = _row(r)
        origin = "built-in" if r.builtin else f"{row['distribution']} {row['dist_version']}"
        line = f"{r.id:<{width}}  {row['version'] or '?':<8}  {r.status:<8}  {origin}"
        if r.status == BROKEN or r.reason:
            line += f"\n{'':<{width}}  ! {r.reason}"
        _say(line)
    return 0


def _find(plugins_or_records: list[PluginRecord], plugin_id: str) -> PluginRecord:
    for record in plugins_or_records:
        if record.id == plugin_id:
            return record
    import difflib

    close = difflib.get_close_matches(plugin_id, [r.id for r in plugins_or_records], n=3)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise ConfigError(
        f"no installed plugin has the id {plugin_id!r}.{hint} "
        "'autogpt plugins list --all' shows them all"
    )


def cmd_info(args: argparse.Namespace) -> int:
    from importlib.metadata import PackageNotFoundError, version

    from hookspecs import printable

    from ..plugins._loader import scan

    config = _config(args)
    records = scan(config)
    record = _find(records, args.plugin_id)
    hooks: list[str] | None = None
    bridged: list[Any] = []
    if record.enabled and record.status != BROKEN:
        plugins = _load(args, config)
        record = plugins.records[record.id]
        if record.status == LOADED:
            hooks = sorted(
                caller.name for caller in plugins.pm.get_hookcallers(record.plugin) or []
            )
            # A bridge's commands exist only once it is loaded: from its configuration.
            bridged = [c for c in plugins.commands if c.bridged and c.plugin_id == record.id]
    info = _row(record)
    manifest = record.manifest
    if manifest is not None:
        requirements = []
        for text in manifest.requirements:
            from packaging.requirements import Requirement

            name = Requirement(text).name
            try:
                installed: str | None = version(name)
            except PackageNotFoundError:
                installed = None
            requirements.append({"requirement": text, "installed": installed})
        info.update(
            description=manifest.description,
            homepage=manifest.homepage,
            manifest=manifest.source,
            requires_core=manifest.requires_core,
            permissions=list(manifest.permissions),
            requires=list(manifest.requires),
            load_after=list(manifest.load_after),
            load_before=list(manifest.load_before),
            codeowners=list(manifest.codeowners),
            commands=[
                {
                    "name": c.name,
                    "aliases": list(c.aliases),
                    "description": c.description,
                    "permissions": list(c.permissions),
                    "parameters": _parameters(c.parameters),
                    "parameters_schema": c.parameters,
                }
                for c in manifest.commands
            ],
            settings=[
                {
                    "name": s.name,
                    "type": s.type,
                    "env": s.env,
                    "secret": s.secret,
                    "default": None if s.secret else s.default,
                    "minimum": s.minimum,
                    "maximum": s.maximum,
                    "enum": None if s.enum is None else list(s.enum),
                    "description": s.description,
                }
                for s in manifest.settings
            ],
            requirements=requirements,
        )
        if manifest.bridged is not None:
            info.update(
                bridged={
                    "prefixes_from": manifest.bridged.prefixes_from,
                    "permissions": list(manifest.bridged.permissions),
                    "commands": [
                        {
                            "name": c.name,
                            "tool": c.tool_name,
                            "description": c.decl.description,
                            "permissions": list(c.decl.permissions),
                            "parameters": _parameters(c.decl.parameters),
                            "parameters_schema": c.decl.parameters,
                        }
                        for c in sorted(bridged, key=lambda c: c.name)
                    ],
                    "unmapped": [{"what": w, "reason": r} for w, r in record.unmapped],
                }
            )
    info["hooks"] = hooks
    if args.json:
        _say(json.dumps(info, indent=2, default=str))
        return 0
    _say(f"{info['id']} {info.get('version') or ''} — {info['name']}")
    for key in ("description", "distribution", "status", "reason", "manifest", "homepage"):
        if info.get(key):
            _say(f"  {key}: {info[key]}")
    if manifest is not None:
        _say(f"  permissions: {', '.join(manifest.permissions) or 'none'}")
        for key in ("requires", "load_after", "load_before", "codeowners"):
            if info[key]:
                _say(f"  {key}: {', '.join(info[key])}")
        if hooks is None:
            why = "disabled" if not record.enabled else "not loaded"
            _say(f"  hooks: (not imported: the plugin is {why})")
        else:
            _say(f"  hooks: {', '.join(hooks) or 'none'}")
        for c in info["commands"]:
            alias = f" (aliases: {', '.join(c['aliases'])})" if c["aliases"] else ""
            perms = f" [needs {', '.join(c['permissions'])}]" if c["permissions"] else ""
            _say(f"  command {c['name']}{alias}{perms}: {c['description']}")
            for param in c["parameters"]:
                _say("    " + printable(_parameter_line(param), newlines=False))
        if "bridged" in info:
            b = info["bridged"]
            _say(
                f"  bridged: commands from plugins.settings.{record.id}.{b['prefixes_from']}, "
                f"needing at most {', '.join(b['permissions']) or 'nothing'} and bridge:{record.id}"
            )
            if hooks is None:
                _say("    (bridged commands are listed once the plugin is enabled and loads)")
            for c in b["commands"]:
                perms = f" [needs {', '.join(c['permissions'])}]"
                line = (
                    f"  bridged command {c['name']} (tool {c['tool']}){perms}: {c['description']}"
                )
                _say(printable(line, newlines=False))
                for param in c["parameters"]:
                    _say("    " + printable(_parameter_line(param), newlines=False))
            for u in b["unmapped"]:
                _say(printable(f"  not mapped: {u['what']}: {u['reason']}", newlines=False))
        for s in info["settings"]:
            env = f" (env ${s['env']})" if s["env"] else ""
            secret = " [secret]" if s["secret"] else ""
            rule = _setting_rule(s)
            _say(
                printable(
                    f"  setting {s['name']}: {s['type']}{rule}{env}{secret} {s['description']}",
                    newlines=False,
                )
            )
        for r in info["requirements"]:
            state = f"installed {r['installed']}" if r["installed"] else "MISSING"
            _say(f"  requirement {r['requirement']}: {state}")
    return 0


def _parameters(schema: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A command's parameters from its JSON Schema: name, type, required, description and
    default (``None`` when the schema gives none), in the schema's order."""
    required = schema.get("required") or []
    rows = []
    for name, prop in (schema.get("properties") or {}).items():
        prop = prop if isinstance(prop, Mapping) else {}
        rows.append(
            {
                "name": name,
                "type": _schema_type(prop),
                "required": name in required,
                "description": str(prop.get("description", "")),
                "default": prop.get("default"),
            }
        )
    return rows


def _schema_type(schema: Mapping[str, Any]) -> str:
    """A JSON Schema's type in words: ``string``, ``array of string``, ``integer or null``."""
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " or ".join(map(str, kind))
    if kind == "array" and isinstance(schema.get("items"), Mapping):
        return f"array of {_schema_type(schema['items'])}"
    if isinstance(kind, str):
        return kind
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            return " or ".join(
                _schema_type(o) if isinstance(o, Mapping) else "any" for o in options
            )
    return "any"


def _parameter_line(param: Mapping[str, Any]) -> str:
    """``path (string, required): The file.`` -- one parameter of ``plugins info``."""
    facts = [param["type"], "required" if param["required"] else "optional"]
    if param["default"] is not None:
        facts.append(f"default {json.dumps(param['default'])}")
    description = f": {param['description']}" if param["description"] else ""
    return f"{param['name']} ({', '.join(facts)}){description}"


def cmd_enable(args: argparse.Namespace) -> int:
    from ..plugins._loader import scan

    config = _config(args, must_exist=False)
    records = {r.id: r for r in scan(config)}
    wanted: list[str] = []
    for plugin_id in args.plugin_ids:
        _find(list(records.values()), plugin_id)
        wanted.append(plugin_id)
    # Hard dependencies that are not enabled would leave the plugin broken: name them.
    needed: list[str] = []
    stack = list(wanted)
    while stack:
        record = records[stack.pop()]
        for dep in record.manifest.requires if record.manifest else ():
            if dep not in records:
                raise ConfigError(
                    f"plugin {record.id!r} requires {dep!r}, which is not installed: "
                    f"autogpt plugins install {dep}"
                )
            if not records[dep].enabled and dep not in wanted and dep not in needed:
                needed.append(dep)
                stack.append(dep)
    if needed:
        names = ", ".join(needed)
        if not args.yes:
            if not sys.stdin.isatty():
                _say(
                    f"autogpt: error: {', '.join(wanted)} requires {names}, which "
                    f"{'is' if len(needed) == 1 else 'are'} disabled; rerun with --yes to enable "
                    "them too",
                    file=sys.stderr,
                )
                return 1
            answer = input(f"{', '.join(wanted)} requires {names}. Enable {names} too? [y/N] ")
            if answer.strip().lower() not in {"y", "yes"}:
                _say("Nothing changed.")
                return 1
        wanted.extend(needed)
    answers = _set_up(args, config, [records[p] for p in wanted])
    if answers is None:
        return 1
    _enable_with(config, wanted, answers)
    _say(f"Enabled {', '.join(wanted)} in {config.path}")
    after = {r.id: r for r in scan(_config(args, must_exist=False))}
    for plugin_id in wanted:
        if after[plugin_id].status == BROKEN:
            _say(f"Warning: {plugin_id} will not load: {after[plugin_id].reason}", file=sys.stderr)
    return 0


def _set_up(args: argparse.Namespace, config: Config, records: list[Any]) -> Any:
    """Ask for what the plugins need before they are enabled (``_setup.py``); ``None``
    when something is declined or cannot be asked (no terminal): nothing is changed."""
    import getpass

    from ..plugins._setup import Answers, ask_for, needs

    wanted = [(r.manifest, needs(r.manifest, config)) for r in records if r.manifest]
    wanted = [(m, n) for m, n in wanted if n]
    if not wanted:
        return Answers()
    if args.accept_terms:
        accepted = {m.id: m.terms_digest for m, n in wanted if n.terms}
        wanted = [(m, attrs.evolve(n, terms="")) for m, n in wanted]
        wanted = [(m, n) for m, n in wanted if n]
        if not wanted:
            return Answers(accepted=accepted)
    else:
        accepted = {}
    if not sys.stdin.isatty():
        for _, need in wanted:
            _say(f"autogpt: error: not enabled: {need.words()}", file=sys.stderr)
        return None
    answers = ask_for(wanted, ask=input, ask_secret=getpass.getpass, say=_say)
    if answers is None:
        return None
    return attrs.evolve(answers, accepted={**accepted, **answers.accepted})


def _enable_with(config: Config, plugin_ids: list[str], answers: Any) -> None:
    """Enable ``plugin_ids`` in the config file, with the terms accepted and the settings
    given (one write), after keeping the secrets given in the secrets file."""
    from .._config import change_plugin_state, parse_config, read_raw, write_raw
    from .._secrets import secrets_path, store_secret
    from ..plugins._setup import apply_answers

    for name, value in answers.secrets.items():
        store_secret(secrets_path(config.data_dir), name, value)
    raw = read_raw(config.path)
    parse_config(raw, path=config.path)  # refuse to rewrite a file that is already invalid
    change_plugin_state(raw, plugin_ids, enabled=True)
    apply_answers(raw, answers)
    write_raw(config.path, raw)


def cmd_disable(args: argparse.Namespace) -> int:
    from ..plugins._loader import scan

    config = _config(args, must_exist=False)
    records = {r.id: r for r in scan(config)}
    for plugin_id in args.plugin_ids:
        _find(list(records.values()), plugin_id)
    dependents = sorted(
        r.id
        for r in records.values()
        if r.enabled
        and r.manifest
        and set(r.manifest.requires) & set(args.plugin_ids)
        and r.id not in args.plugin_ids
    )
    set_plugin_state(config.path, list(args.plugin_ids), enabled=False)
    _say(f"Disabled {', '.join(args.plugin_ids)} in {config.path}")
    if dependents:
        _say(f"Note: {', '.join(dependents)} require(s) it and will not load until it is enabled.")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    try:
        config = _config(args)
    except ConfigError as exc:
        _say(f"config: {exc}")
        return 1
    plugins = _load(args, config)
    problems = []
    for record in sorted(plugins.records.values(), key=lambda r: r.id):
        if record.status == BROKEN:
            problems.append(f"{record.id}: {record.reason}")
    from ._cli_plugin_commands import cli_command_problems

    problems.extend(cli_command_problems(plugins.records.values()))
    env_only = plugins.records.keys()
    for plugin_id in sorted((config.enable | config.disable) - set(env_only)):
        problems.append(f"config: plugin {plugin_id!r} is named in {config.path} but not installed")
    for plugin_id in sorted(set(config.plugin_settings) - set(env_only)):
        problems.append(f"config: settings for {plugin_id!r}, which is not installed")
    loaded = len(plugins.loaded)
    # What a bridge could not map is not a broken plugin (its other commands work), but it
    # is never dropped silently: each is listed, with the reason.
    for record in sorted(plugins.records.values(), key=lambda r: r.id):
        for what, reason in record.unmapped:
            _say(f"! {record.id}: not mapped: {what}: {reason}")
    if problems:
        for problem in problems:
            _say(f"✗ {problem}")
        _say(f"{len(problems)} problem(s); {loaded} plugin(s) loaded")
        return 1
    _say(f"✓ {len(plugins.records)} plugin(s) checked, {loaded} loaded, no problems")
    return 0


def _lifecycle(args: argparse.Namespace) -> Lifecycle:
    from pathlib import Path

    from ..plugins._install import Console, Lifecycle, detect_environment

    return Lifecycle(
        config_file=args.config,
        environment=detect_environment(Path(sys.prefix), sys.executable),
        console=Console(say=_say, warn=lambda text: _say(text, file=sys.stderr)),
        parameter_lines=lambda schema: [_parameter_line(p) for p in _parameters(schema)],
        yes=getattr(args, "yes", False),
    )


def cmd_install(args: argparse.Namespace) -> int:
    return _lifecycle(args).install(args.names, dry_run=args.dry_run)


def cmd_uninstall(args: argparse.Namespace) -> int:
    return _lifecycle(args).uninstall(args.plugin_id, keep_config=args.keep_config)


def cmd_upgrade(args: argparse.Namespace) -> int:
    return _lifecycle(args).upgrade(args.plugin_id)


def cmd_search(args: argparse.Namespace) -> int:
    from ..plugins._index import read_index
    from ..plugins._loader import scan

    config = _config(args, must_exist=False)
    if not config.plugin_index:
        raise ConfigError(
            "no plugin index is configured: set plugins.index in the config to a JSON file or "
            "an http(s) URL listing plugins (see docs/plugins.md, 'The plugin index')"
        )
    index = read_index(config.plugin_index)
    for problem in index.problems:
        _say(f"autogpt: warning: left out of the index: {problem}", file=sys.stderr)
    installed = {r.id: r.status for r in scan(config)}
    found = index.search(" ".join(args.query))
    rows: list[dict[str, Any]] = [
        {
            "id": e.manifest.id,
            "version": e.manifest.version,
            "description": e.manifest.description,
            "requirement": e.requirement,
            "installed": e.manifest.id in installed,
            "commands": [c.name for c in e.manifest.commands],
            "permissions": list(e.manifest.permissions),
        }
        for e in found
    ]
    if args.json:
        _say(json.dumps(rows, indent=2))
        return 0
    if not rows:
        _say(f"No plugin of {index.location} matches {' '.join(args.query)!r}.")
        return 0
    for row in rows:
        state = "installed" if row["installed"] else f"autogpt plugins install {row['requirement']}"
        _say(f"{row['id']} {row['version']}  {' '.join(str(row['description']).split())}")
        _say(f"    commands: {', '.join(row['commands']) or 'none'}; {state}")
    return 0


def cmd_codeowners(args: argparse.Namespace) -> int:
    from ..plugins._loader import scan

    config = _config(args)
    records = scan(config)
    if args.output is None:
        if args.root is not None:
            raise ConfigError("--root says where --output's paths start: give --output FILE too")
        owners = {r.id: list(r.manifest.codeowners) if r.manifest else [] for r in records}
        if args.json:
            _say(json.dumps(owners, indent=2))
            return 0
        for plugin_id, people in owners.items():
            _say(f"{plugin_id}: {' '.join(people) or '(none)'}")
        return 0
    from pathlib import Path

    from .._files import write_atomically
    from ..plugins._codeowners import build_codeowners, plugin_owners

    root = Path(args.root or ".")
    if not root.is_dir():
        raise ConfigError(f"--root {root}: not a directory; give the repository's root")
    found, notes = plugin_owners(records)
    result = build_codeowners(found, root)
    for note in [*notes, *result.notes]:
        _say(f"note: {note}", file=sys.stderr)
    if args.output == "-":
        sys.stdout.write(result.text)
        return 0
    write_atomically(Path(args.output), result.text)
    _say(f"Wrote {result.rules} rule(s) to {args.output} (paths relative to {root})")
    return 0


def cmd_new(args: argparse.Namespace) -> int:
    from ..plugins._discovery import iter_sources
    from ..plugins._scaffold import create_plugin

    def normal(plugin_id: str) -> str:
        # my-tool and my_tool make the same distribution and package names.
        return plugin_id.replace("-", "_")

    taken = {normal(source.id): source for source in iter_sources()}
    clash = taken.get(normal(args.plugin_id))
    if clash is not None:
        raise ConfigError(
            f"the plugin id {args.plugin_id!r} clashes with {clash.id!r} of "
            f"{clash.distribution}: choose another id"
        )

    path = create_plugin(args.plugin_id, args.directory)
    # The steps of docs/plugins.md, with this plugin's path (relative when it was given so:
    # "./" so that pip reads it as a path, never as the name of a distribution).
    shown = str(path) if path.is_absolute() else f"./{path}"
    _say(f"Created {path}/ (plugin {args.plugin_id!r}). Next:")
    _say(f"  pip install -e {shlex.quote(f'{shown}[test]')}   # the plugin and its test tools")
    _say(f"  pytest {shlex.quote(shown)}   # its tests, in a real runtime")
    _say("  autogpt plugins list   # it is listed, loaded")
    demo = shlex.quote(f"replay:{shown}/demo.replay.json")
    _say(f'  autogpt run "Try the {args.plugin_id} plugin" --llm {demo}')
    return 0


def _setting_rule(setting: Mapping[str, Any]) -> str:
    """A setting's bounds, choices and (unless secret) default, as ``plugins info`` shows
    them: `` from 1 to 600, default 20``."""
    parts = []
    low, high = setting.get("minimum"), setting.get("maximum")
    if low is not None and high is not None:
        parts.append(f"from {low} to {high}")
    elif low is not None:
        parts.append(f"at least {low}")
    elif high is not None:
        parts.append(f"at most {high}")
    if setting.get("enum") is not None:
        parts.append("one of " + ", ".join(json.dumps(c) for c in setting["enum"]))
    if setting.get("default") is not None and not setting.get("secret"):
        parts.append(f"default {json.dumps(setting['default'])}")
    return f" ({'; '.join(parts)})" if parts else ""
