"""autogpt-core: the engine that loads plugins, calls hooks and runs agents."""

from __future__ import annotations

from ._errors import AutoGPTError as AutoGPTError
from ._errors import CommandArgumentsError as CommandArgumentsError
from ._errors import CommandError as CommandError
from ._errors import ConfigError as ConfigError
from ._errors import ConflictError as ConflictError
from ._errors import HookError as HookError
from ._errors import HookTimeout as HookTimeout
from ._errors import LLMError as LLMError
from ._errors import ManifestError as ManifestError
from ._errors import ManifestIssue as ManifestIssue
from ._errors import MissingAPIKeyError as MissingAPIKeyError
from ._errors import OrderingError as OrderingError
from ._errors import PermissionDenied as PermissionDenied
from ._errors import PluginError as PluginError
from ._errors import PluginLoadError as PluginLoadError
from ._errors import RegistrationError as RegistrationError
from ._errors import ReplayMismatchError as ReplayMismatchError
from ._errors import SessionNotFound as SessionNotFound
from ._errors import StorageError as StorageError
from ._errors import UnknownCommandError as UnknownCommandError
from ._errors import WorkspaceError as WorkspaceError
from ._version import __version__ as __version__

__all__ = [
    "AutoGPTError",
    "CommandArgumentsError",
    "CommandError",
    "ConfigError",
    "ConflictError",
    "HookError",
    "HookTimeout",
    "LLMError",
    "ManifestError",
    "ManifestIssue",
    "MissingAPIKeyError",
    "OrderingError",
    "PermissionDenied",
    "PluginError",
    "PluginLoadError",
    "RegistrationError",
    "ReplayMismatchError",
    "SessionNotFound",
    "StorageError",
    "UnknownCommandError",
    "WorkspaceError",
    "__version__",
]
