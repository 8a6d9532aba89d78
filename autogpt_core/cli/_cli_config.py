"""``autogpt config``: where things live, and the effective configuration."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .._config import DEFAULT_GRANTS, SECTIONS, load_config, resolve_config_path


def add_config_parser(sub: Any) -> None:
    config = sub.add_parser(
        "config", help="show the config file's location and the effective configuration"
    )
    config.add_argument("--json", action="store_true", help="machine-readable output")
    config.set_defaults(handler=cmd_config)


def cmd_config(args: argparse.Namespace) -> int:
    from ..store._open import shown_location

    path = resolve_config_path(args.config)
    config = load_config(args.config, must_exist=False)
    data_dir = config.data_dir
    info: dict[str, Any] = {
        "config_file": str(path),
        "config_file_exists": config.exists,
        "data_dir": str(data_dir),
        "sessions": shown_location(config.store_location),
        "workspaces": str(data_dir / "workspaces"),
        "plugin_data": str(data_dir / "plugins"),
        "enable": sorted(config.enable),
        "disable": sorted(config.disable),
        "grants": sorted(config.grants),
        "llm": {
            "provider": config.llm_provider,
            "model": config.llm_model,
            "base_url": config.llm_base_url,
        },
        "limits": {name: getattr(config.limits, name) for name in SECTIONS["limits"]},
        # Only which plugins have settings: values may be secrets.
        "plugin_settings": {k: sorted(v) for k, v in sorted(config.plugin_settings.items())},
    }
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    state = "" if config.exists else "  (does not exist: defaults apply)"
    print(f"config file:  {path}{state}")
    print(f"data dir:     {data_dir}")
    print(f"  sessions:   {info['sessions']}")
    print(f"  workspaces: {info['workspaces']}")
    print(f"  plugins:    {info['plugin_data']} (memory, logs)")
    print(f"enable:       {', '.join(info['enable']) or '-'}")
    print(f"disable:      {', '.join(info['disable']) or '-'}")
    default = " (default)" if config.grants == DEFAULT_GRANTS else ""
    print(f"grants:       {', '.join(info['grants']) or '-'}{default}")
    print(f"llm:          {json.dumps(info['llm'])}")
    print(f"limits:       {json.dumps(info['limits'])}")
    for plugin_id, names in info["plugin_settings"].items():
        print(f"settings:     {plugin_id}: {', '.join(names)}")
    print("\nThe file's format: docs/configuration.md")
    return 0
