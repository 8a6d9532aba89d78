"""The ``replay`` LLM provider, and the recorder that makes what it plays.

``--llm replay:FILE`` answers every model request with the next response recorded in
``FILE`` (``docs/recordings.md`` describes the format and what strict mode compares). The
provider is made from this plugin's own settings, which its factory receives
(``ProviderOptions.settings``): ``strict`` (default true; ``--no-strict`` sets it false).
A resumed session's provider skips the exchanges its completed cycles played
(``ProviderOptions.resume_after``).

``--record FILE`` sets this plugin's ``record`` setting; the ``llm_request`` wrapper below
then records every exchange of each session, whichever provider answered it. The core's own
``llm_request`` implementation masks the model's answer before any wrapper sees it, so a
recording keeps no secret the model repeated.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator

from autogpt_core import ConfigError
from hookspecs import (
    LLMProvider,
    LLMRequest,
    LLMResponse,
    PluginSettings,
    ProviderOptions,
    RegisterLLMProvider,
    RuntimeView,
    SessionOutcome,
    SessionView,
    hookimpl,
)

from ._recording import FORMAT_NAME as FORMAT_NAME
from ._recording import FORMAT_VERSION as FORMAT_VERSION
from ._recording import MAX_COST_USD as MAX_COST_USD
from ._recording import MAX_DEPTH as MAX_DEPTH
from ._recording import MAX_RECORDING_BYTES as MAX_RECORDING_BYTES
from ._recording import Exchange as Exchange
from ._recording import Recorder as Recorder
from ._recording import Recording as Recording
from ._recording import RecordingProvider as RecordingProvider
from ._recording import ReplayProvider as ReplayProvider
from ._recording import as_flag
from ._recording import load_recording as load_recording
from ._recording import request_difference as request_difference
from ._recording import request_summary as request_summary
from ._session_recorder import SessionRecorders as SessionRecorders

PROVIDER_NAME = "replay"

# The recordings of the running sessions, and the settings they are made from. The
# wrapper needs them between hook calls; a hook receives no settings of its own.
_recorders = SessionRecorders()


@hookimpl
def configure(settings: PluginSettings) -> None:
    """Take this plugin's settings (``record``: where sessions are recorded)."""
    _recorders.settings = settings


@hookimpl
def register_llm_providers(register: RegisterLLMProvider) -> None:
    """Offer the ``replay`` provider."""
    register(PROVIDER_NAME, factory)


def factory(options: ProviderOptions) -> ReplayProvider:
    """A ``ReplayProvider`` for ``options.extra["path"]`` (``--llm replay:PATH``).

    Strict unless the plugin's ``strict`` setting (``options.settings``) is false; skips
    ``options.resume_after`` exchanges. Raises ``ConfigError`` when there is no path, or
    the file is missing or invalid.
    """
    path = options.extra.get("path")
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path.strip():
        raise ConfigError(
            "the replay provider needs a recording to play: use --llm replay:FILE, "
            "e.g. a file made with --record FILE"
        )
    settings = options.settings.values if options.settings is not None else {}
    skip = options.resume_after
    return ReplayProvider.from_file(
        path,
        strict=as_flag(settings.get("strict"), True),
        skip=skip if isinstance(skip, int) and not isinstance(skip, bool) else 0,
    )


@hookimpl(wrapper=True)
async def llm_request(
    session: SessionView, request: LLMRequest
) -> AsyncGenerator[None, LLMResponse | None]:
    """Record the exchange, when the ``record`` setting is set. A request that failed is
    not recorded (its error goes on); the answer is passed on unchanged."""
    response = yield
    if isinstance(response, LLMResponse):
        await _recorders.record(session.id, request, response)


@hookimpl
async def session_end(session: SessionView, outcome: SessionOutcome) -> None:
    """Make sure the session's recording exists, empty if it asked nothing."""
    await _recorders.finish(session.id)


@hookimpl
async def autogpt_shutdown(runtime: RuntimeView) -> None:
    """Make sure every recording still open exists (a session taken over has no end)."""
    await _recorders.finish_all()


def recording_provider(inner: LLMProvider, path: str | os.PathLike[str]) -> RecordingProvider:
    """Wrap ``inner`` so that every exchange is recorded into ``path`` (scripts, tests)."""
    return RecordingProvider(inner, path)


__all__ = [
    "Exchange",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MAX_COST_USD",
    "MAX_DEPTH",
    "MAX_RECORDING_BYTES",
    "PROVIDER_NAME",
    "Recorder",
    "Recording",
    "RecordingProvider",
    "ReplayProvider",
    "SessionRecorders",
    "autogpt_shutdown",
    "configure",
    "factory",
    "llm_request",
    "load_recording",
    "recording_provider",
    "register_llm_providers",
    "request_difference",
    "request_summary",
    "session_end",
]
