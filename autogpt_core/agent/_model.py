"""A session's model: its provider, how long a request may take, and the core's
``llm_request`` implementation that asks it.

Every model request goes through the ``llm_request`` hook. The core's own ``trylast``
implementation (``ProviderBridge``) sends it to the session's provider and masks the answer
(through the session's emitter) before the plugins wrapping the hook see it, so that a
recorder, a cache or a log keeps no secret the model repeated.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from hookspecs import (
    LLMProvider,
    LLMRequest,
    LLMResponse,
    PluginSettings,
    SessionView,
    hookimpl,
)

from .._errors import HookError, LLMError

#: The plugin name the core's own hook implementations are registered under.
CORE_PLUGIN_NAME = "autogpt-core"
# How long one model request may take, for a provider whose plugin has no ``timeout`` and
# ``max_retries`` settings: the openai client's defaults (llm_openai's settings say the same).
_MODEL_TIMEOUT = 60.0
_MODEL_RETRIES = 2
# The openai client's longest pause between two tries, when the server sends no Retry-After.
_RETRY_PAUSE = 8.0


def provider_seconds(settings: PluginSettings | None) -> float:
    """How long a provider may take over one request, its retries included.

    From its plugin's ``timeout`` and ``max_retries`` settings, as the openai client uses
    them (each try up to ``timeout``, pauses between tries), or the client's defaults for a
    provider whose plugin has no such settings.
    """
    values: Mapping[str, Any] = settings.values if settings is not None else {}
    timeout, retries = values.get("timeout"), values.get("max_retries")
    seconds = float(timeout) if isinstance(timeout, int | float) else _MODEL_TIMEOUT
    tries = int(retries) + 1 if isinstance(retries, int | float) else _MODEL_RETRIES + 1
    return seconds * tries + _RETRY_PAUSE * (tries - 1)


@attrs.frozen
class SessionModel:
    """A session's provider, who registered it, and how its answers are masked."""

    provider: LLMProvider
    #: The provider's name (``openai``, ``replay``) and the plugin that registered it.
    name: str
    plugin_id: str
    mask: Callable[[LLMResponse], LLMResponse]

    async def complete(self, request: LLMRequest) -> LLMResponse:
        """The provider's answer, masked.

        A provider's ``LLMError`` goes on as it is (it ends the session with its message).
        Any other exception, or an answer that is not an ``LLMResponse``, is a
        ``HookError`` naming the provider's plugin: the core only carried the request.
        """
        try:
            response = await self.provider.complete(request)
        except (LLMError, HookError):
            raise
        except Exception as exc:
            raise self._failed(f"raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(response, LLMResponse):
            raise self._failed(
                f"returned {type(response).__name__}, not an LLMResponse; fix the provider "
                "to return one"
            )
        return self.mask(response)

    def _failed(self, what: str) -> HookError:
        return HookError(
            plugin=self.plugin_id,
            hook="llm_request",
            message=f"plugin {self.plugin_id!r}: its LLM provider {self.name!r} {what}",
        )


class ProviderBridge:
    """The core's own ``llm_request`` implementation: the session's provider answers.

    ``models`` maps the id of each running session to its model; the runtime keeps it.
    """

    def __init__(self, models: Mapping[str, SessionModel]) -> None:
        self._models = models

    @hookimpl(trylast=True)
    async def llm_request(self, session: SessionView, request: LLMRequest) -> LLMResponse:
        return await self._models[session.id].complete(request)
