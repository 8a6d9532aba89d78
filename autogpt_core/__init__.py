"""autogpt-core: the engine that loads plugins, calls hooks and runs agents.

The exceptions are imported eagerly; everything else on first use (PEP 562), so that
``autogpt --version`` and ``import autogpt_core`` stay cheap.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

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
from ._errors import SessionInUse as SessionInUse
from ._errors import SessionNotFound as SessionNotFound
from ._errors import StorageError as StorageError
from ._errors import UnknownCommandError as UnknownCommandError
from ._errors import WorkspaceError as WorkspaceError
from ._version import __version__ as __version__

if _typing.TYPE_CHECKING:
    from ._config import Config as Config
    from ._config import Limits as Limits
    from ._config import load_config as load_config
    from ._files import write_atomically as write_atomically
    from .agent._options import RunOptions as RunOptions
    from .agent._runtime import Runtime as Runtime
    from .agent._workspace import Workspace as Workspace
    from .hooks._hookcall import AsyncHookCaller as AsyncHookCaller
    from .hooks._hookcall import AsyncHooks as AsyncHooks
    from .hooks._hookcall import HookManager as HookManager
    from .plugins._commands import CommandRegistry as CommandRegistry
    from .plugins._commands import RegisteredCommand as RegisteredCommand
    from .plugins._loader import PluginRecord as PluginRecord
    from .plugins._loader import PluginSet as PluginSet
    from .plugins._loader import load as load_plugins
    from .plugins._loader import scan as scan_plugins
    from .plugins._manifest import CommandDecl as CommandDecl
    from .plugins._manifest import Manifest as Manifest
    from .plugins._manifest import SettingDecl as SettingDecl
    from .plugins._manifest import load_manifest as load_manifest
    from .plugins._manifest import parse_manifest as parse_manifest
    from .store._async import AsyncStore as AsyncStore
    from .store._interface import SessionStore as SessionStore
    from .store._open import open_store as open_store
    from .store._records import ArtifactRecord as ArtifactRecord
    from .store._records import CycleRecord as CycleRecord
    from .store._records import Page as Page
    from .store._records import SessionRecord as SessionRecord
    from .store._records import SessionStatus as SessionStatus
    from .store._records import StoredEvent as StoredEvent
    from .store._sqlite import Store as Store

_LAZY: dict[str, tuple[str, str]] = {
    "CommandRegistry": ("plugins._commands", "CommandRegistry"),
    "RegisteredCommand": ("plugins._commands", "RegisteredCommand"),
    "Config": ("_config", "Config"),
    "Limits": ("_config", "Limits"),
    "load_config": ("_config", "load_config"),
    "AsyncHookCaller": ("hooks._hookcall", "AsyncHookCaller"),
    "write_atomically": ("_files", "write_atomically"),
    "AsyncHooks": ("hooks._hookcall", "AsyncHooks"),
    "HookManager": ("hooks._hookcall", "HookManager"),
    "PluginRecord": ("plugins._loader", "PluginRecord"),
    "PluginSet": ("plugins._loader", "PluginSet"),
    "load_plugins": ("plugins._loader", "load"),
    "scan_plugins": ("plugins._loader", "scan"),
    "CommandDecl": ("plugins._manifest", "CommandDecl"),
    "Manifest": ("plugins._manifest", "Manifest"),
    "SettingDecl": ("plugins._manifest", "SettingDecl"),
    "load_manifest": ("plugins._manifest", "load_manifest"),
    "parse_manifest": ("plugins._manifest", "parse_manifest"),
    "Redactor": ("agent._redact", "Redactor"),
    "is_secret_name": ("agent._redact", "is_secret_name"),
    "Runtime": ("agent._runtime", "Runtime"),
    "RunOptions": ("agent._options", "RunOptions"),
    "ArtifactRecord": ("store._records", "ArtifactRecord"),
    "AsyncStore": ("store._async", "AsyncStore"),
    "CycleRecord": ("store._records", "CycleRecord"),
    "Page": ("store._records", "Page"),
    "SessionRecord": ("store._records", "SessionRecord"),
    "SessionStatus": ("store._records", "SessionStatus"),
    "SessionStore": ("store._interface", "SessionStore"),
    "Store": ("store._sqlite", "Store"),
    "open_store": ("store._open", "open_store"),
    "StoredEvent": ("store._records", "StoredEvent"),
    "Workspace": ("agent._workspace", "Workspace"),
}


def __getattr__(name: str) -> _typing.Any:
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(_importlib.import_module(f".{module}", __name__), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "ArtifactRecord",
    "AsyncHookCaller",
    "AsyncHooks",
    "AsyncStore",
    "AutoGPTError",
    "CommandArgumentsError",
    "CommandDecl",
    "CommandError",
    "CommandRegistry",
    "Config",
    "ConfigError",
    "ConflictError",
    "CycleRecord",
    "HookError",
    "HookManager",
    "HookTimeout",
    "LLMError",
    "Limits",
    "Manifest",
    "ManifestError",
    "ManifestIssue",
    "MissingAPIKeyError",
    "OrderingError",
    "Page",
    "PermissionDenied",
    "PluginError",
    "PluginLoadError",
    "PluginRecord",
    "PluginSet",
    "Redactor",
    "RegisteredCommand",
    "RegistrationError",
    "ReplayMismatchError",
    "RunOptions",
    "Runtime",
    "SessionInUse",
    "SessionNotFound",
    "SessionRecord",
    "SessionStatus",
    "SessionStore",
    "SettingDecl",
    "StorageError",
    "Store",
    "StoredEvent",
    "UnknownCommandError",
    "Workspace",
    "WorkspaceError",
    "__version__",
    "is_secret_name",
    "load_config",
    "load_manifest",
    "load_plugins",
    "open_store",
    "parse_manifest",
    "scan_plugins",
    "write_atomically",
]
