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
PERMISSION = re.compile(PERMISSION_PATTERN)
#: For messages: "use one of ...".
PERMISSION_NAMES = ", ".join(PERMISSIONS) + " or secrets:NAME"
