"""Checks every built-in plugin's test runs: hooks, manifest and commands agree."""

from __future__ import annotations

import inspect
import json
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pluggy
import yaml

import hookspecs


def check_plugin(module: types.ModuleType) -> dict[str, Any]:
    """Validate ``module``'s hook impls, manifest and registered commands; return the manifest."""
    pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    pm.add_hookspecs(hookspecs.specs)
    pm.register(module)
    manifest: dict[str, Any] = yaml.safe_load(
        (Path(str(module.__file__)).parent / "autogpt-plugin.yaml").read_text()
    )
    schema = json.loads((Path(hookspecs.__file__).parent / "manifest.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(manifest)
    assert manifest["id"] == module.__name__.rpartition(".")[2]
    registered: dict[str, Callable[..., object]] = {}
    module.register_commands(register=registered.__setitem__)
    declared = {command["name"]: command for command in manifest["capabilities"]["commands"]}
    assert set(registered) == set(declared)
    for name, function in registered.items():
        parameters = declared[name]["parameters"]
        jsonschema.Draft202012Validator.check_schema(parameters)
        assert set(inspect.signature(function).parameters) - {"ctx"} == set(
            parameters["properties"]
        )
    return manifest
