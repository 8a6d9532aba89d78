"""The agent asks for a plugin: find plugins, and enable or install one.

The work is the core's (``CommandContext.plugins``, given to plugins that declare the
``install`` permission): it asks the user every time, showing the manifest, refuses in
unattended runs, writes the config and loads the plugins anew between cycles. These
commands turn its answers into words for the model.
"""

from __future__ import annotations

from hookspecs import CommandContext, CommandResult, PluginControl, RegisterCommand, hookimpl


@hookimpl
def register_commands(register: RegisterCommand) -> None:
    register("find_plugins", find_plugins)
    register("enable_plugin", enable_plugin)
    register("install_plugin", install_plugin)


def _control(ctx: CommandContext) -> PluginControl:
    if ctx.plugins is None:
        raise PermissionError("this plugin is not allowed to manage plugins (no 'install')")
    return ctx.plugins


async def find_plugins(ctx: CommandContext, query: str = "") -> CommandResult:
    """List the plugins that could be enabled or installed."""
    try:
        found = await _control(ctx).find(query)
    except Exception as exc:  # noqa: BLE001 - reported to the model, which may go on
        return CommandResult.failure(f"cannot list plugins: {exc}")
    if not found:
        where = f" matching {query!r}" if query.strip() else ""
        return CommandResult.success(f"No plugin{where} can be enabled or installed.")
    lines = []
    for info in found:
        commands = ", ".join(str(c) for c in info.get("commands") or []) or "none"
        status = str(info.get("status"))
        if info.get("reason"):
            status += f": {info['reason']}"
        lines.append(
            f"- {info['id']} ({status}): {info.get('description') or info.get('name')} "
            f"Commands: {commands}."
        )
    hint = "enable_plugin enables a disabled one; install_plugin installs one not installed."
    return CommandResult.success("\n".join([*lines, hint]), data=found)


async def enable_plugin(ctx: CommandContext, plugin_id: str, reason: str) -> CommandResult:
    """Enable an installed plugin, if the user agrees."""
    try:
        return CommandResult.success(await _control(ctx).enable(plugin_id, reason))
    except Exception as exc:  # noqa: BLE001 - reported to the model, which may go on
        return CommandResult.failure(f"plugin {plugin_id!r} was not enabled: {exc}")


async def install_plugin(ctx: CommandContext, plugin_id: str, reason: str) -> CommandResult:
    """Install and enable a plugin of the index, if the user agrees."""
    try:
        return CommandResult.success(await _control(ctx).install(plugin_id, reason))
    except Exception as exc:  # noqa: BLE001 - reported to the model, which may go on
        return CommandResult.failure(f"plugin {plugin_id!r} was not installed: {exc}")
