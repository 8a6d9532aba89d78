"""The ``openai`` LLM provider: OpenAI and any OpenAI-compatible endpoint.

The provider itself lives in ``_provider``; importing the ``openai`` SDK takes about half a
second, so it happens only when a provider is made, not when the plugin is loaded (every
``autogpt`` command loads the enabled plugins).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from hookspecs import JSON, PluginSettings, ProviderOptions, RegisterLLMProvider, hookimpl

if TYPE_CHECKING:
    from ._provider import OpenAIProvider

PROVIDER_NAME = "openai"

# What ``configure`` received. Module-level because the plugin is this module.
_settings: dict[str, JSON] = {}


@hookimpl
def configure(settings: PluginSettings) -> None:
    """Keep this plugin's validated settings for the providers made afterwards."""
    _settings.clear()
    _settings.update(settings.values)


@hookimpl
def register_llm_providers(register: RegisterLLMProvider) -> None:
    """Offer the ``openai`` provider."""
    register(PROVIDER_NAME, factory)


def factory(options: ProviderOptions) -> OpenAIProvider:
    """Make an ``OpenAIProvider`` from the options, the plugin's settings and the environment."""
    from ._provider import OpenAIProvider, resolve_config

    return OpenAIProvider(resolve_config(options, _settings))


def __getattr__(name: str) -> Any:
    # The rest of the public names (OpenAIProvider, resolve_config, ...) import openai.
    # import_module, not "from . import": that would look the name up here, recursively.
    if name.startswith("__"):
        raise AttributeError(name)
    provider = importlib.import_module(f"{__name__}._provider")
    try:
        return getattr(provider, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
