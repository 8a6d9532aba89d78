"""The permissions a manifest may declare and a config may grant: one list for both.

============== =====================================================================
fs.read        read files in the session's workspace
fs.write       create files in the workspace, and change the ones this session made
fs.overwrite   overwrite or delete a workspace file this session did not create
network        reach hosts on the network
network.local  reach loopback, link-local and private addresses (this machine, the LAN)
shell          run shell commands
install        install or enable plugins
secrets:NAME   read the secret environment variable NAME
============== =====================================================================

A config may also grant ``bridge:PLUGIN_ID``: run the bridged commands of that plugin
(those a bridge makes at run time from its configuration) without asking each time.
No manifest declares it; the core adds it to every bridged command.
"""

from __future__ import annotations

import re

PERMISSIONS = (
    "fs.read",
    "fs.write",
    "fs.overwrite",
    "network",
    "network.local",
    "shell",
    "install",
)
#: A regular expression (no anchors) for one permission.
PERMISSION_PATTERN = (
    "(?:" + "|".join(re.escape(p) for p in PERMISSIONS) + "|secrets:[A-Za-z_][A-Za-z0-9_]*)"
)
#: What a config may grant besides the permissions a manifest may declare.
BRIDGE_PATTERN = "bridge:[a-z][a-z0-9_-]{0,63}"
#: One permission a config may grant (``permissions.grant``): a manifest's, or ``bridge:ID``.
PERMISSION = re.compile(f"(?:{PERMISSION_PATTERN}|{BRIDGE_PATTERN})")
#: For messages: "use one of ...".
PERMISSION_NAMES = ", ".join(PERMISSIONS) + " or secrets:NAME"
#: For the config's messages: what may be granted.
GRANT_NAMES = ", ".join(PERMISSIONS) + ", secrets:NAME or bridge:PLUGIN_ID"


def bridge_permission(plugin_id: str) -> str:
    """The permission every bridged command of ``plugin_id`` needs: granted, its calls run
    without asking; otherwise each call is asked (and refused in continuous mode)."""
    return f"bridge:{plugin_id}"
