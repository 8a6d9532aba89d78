"""The exceptions autogpt-core raises. Every message names the thing, the problem and the fix.

::

    AutoGPTError
    ├── ConfigError                  a config file or option is invalid
    ├── ManifestError                a plugin manifest is invalid (all problems, with locations)
    ├── PluginError                  a plugin cannot be used
    │   ├── PluginLoadError          import failed, requirement missing, core too old, ...
    │   ├── RegistrationError        registered something its manifest does not declare
    │   ├── ConflictError            two plugins claim the same id or command name
    │   └── OrderingError            a `requires` cycle, or a missing hard dependency
    ├── HookError                    a hook implementation raised (names plugin and hook)
    │   └── HookTimeout              a hook call overran its deadline
    ├── CommandError                 a command could not run
    │   ├── UnknownCommandError      no plugin registered that command
    │   ├── CommandArgumentsError    arguments do not match the command's schema
    │   └── PermissionDenied         needs a permission that was neither granted nor confirmed
    ├── WorkspaceError               a path escapes the session's workspace
    ├── LLMError                     a model request failed
    │   ├── MissingAPIKeyError       no key for a provider that needs one
    │   └── ReplayMismatchError      a live request differs from the recording (strict mode)
    └── StorageError                 the session store cannot be read or written
        ├── SessionNotFound          no session with that id (or an ambiguous id prefix)
        └── SessionInUse             another runtime holds the session's lease
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs


class AutoGPTError(Exception):
    """Base class of every error autogpt-core raises on purpose."""


class ConfigError(AutoGPTError):
    """A config file or option is invalid."""


@attrs.frozen
class ManifestIssue:
    """One problem in a manifest: where (``file`` and dotted ``field``), what, and the fix."""

    file: str
    field: str
    problem: str
    fix: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.field}" if self.field else self.file
        return f"{where}: {self.problem} (fix: {self.fix})"


class ManifestError(AutoGPTError):
    """A manifest is invalid. ``issues`` lists every problem found, not just the first."""

    def __init__(self, issues: Sequence[ManifestIssue]) -> None:
        self.issues = tuple(issues)
        super().__init__("\n".join(str(issue) for issue in self.issues))


class PluginError(AutoGPTError):
    """A plugin cannot be used. ``plugin_id`` names it."""

    def __init__(self, plugin_id: str, message: str) -> None:
        self.plugin_id = plugin_id
        super().__init__(message)


class PluginLoadError(PluginError):
    """The plugin could not be loaded: import error, missing requirement, core too old, ..."""


class RegistrationError(PluginError):
    """The plugin registered something its manifest does not declare."""


class ConflictError(PluginError):
    """Two plugins claim the same id or command name (aliases included)."""


class OrderingError(PluginError):
    """A cycle in ``requires``/``load_after``/``load_before``, or a missing hard dependency."""


class HookError(AutoGPTError):
    """A hook implementation raised. ``plugin`` and ``hook`` name it; ``__cause__`` is the error."""

    def __init__(self, plugin: str, hook: str, message: str) -> None:
        self.plugin = plugin
        self.hook = hook
        super().__init__(message)


class HookTimeout(HookError):
    """A hook call overran its deadline; ``plugin`` is the implementation that was running."""


class CommandError(AutoGPTError):
    """A command could not run."""


class UnknownCommandError(CommandError):
    """No enabled plugin registered that command."""


class CommandArgumentsError(CommandError):
    """The arguments do not match the command's JSON-Schema parameters."""


class PermissionDenied(CommandError):
    """The command needs a permission that was neither granted nor confirmed."""


class WorkspaceError(AutoGPTError):
    """A path is outside the session's workspace, or otherwise unusable."""


class LLMError(AutoGPTError):
    """A model request failed."""


class MissingAPIKeyError(LLMError):
    """A provider needs an API key and none was given."""


class ReplayMismatchError(LLMError):
    """In strict replay, the live request differs from the recorded one."""


class StorageError(AutoGPTError):
    """The session store cannot be read or written."""


class SessionNotFound(StorageError):
    """No stored session has that id, or an id prefix matches more than one."""


class SessionInUse(StorageError):
    """Another runtime (in this process or another) holds the session's lease, or took it
    over from this one."""
