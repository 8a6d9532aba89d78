"""The ``replay`` LLM provider, and the recorder that makes what it plays.

``--llm replay:FILE`` answers every model request with the next response recorded in
``FILE`` (``docs/recordings.md`` describes the format and what strict mode compares);
``--record FILE`` wraps the real provider with ``recording_provider`` to make one.
"""

from __future__ import annotations

import os

from autogpt_core import ConfigError
from hookspecs import LLMProvider, ProviderOptions, RegisterLLMProvider, hookimpl

from ._recording import FORMAT_NAME as FORMAT_NAME
from ._recording import FORMAT_VERSION as FORMAT_VERSION
from ._recording import MAX_COST_USD as MAX_COST_USD
from ._recording import MAX_DEPTH as MAX_DEPTH
from ._recording import MAX_RECORDING_BYTES as MAX_RECORDING_BYTES
from ._recording import Exchange as Exchange
from ._recording import Recording as Recording
from ._recording import RecordingProvider as RecordingProvider
from ._recording import ReplayProvider as ReplayProvider
from ._recording import as_flag
from ._recording import load_recording as load_recording
from ._recording import request_difference as request_difference
from ._recording import request_summary as request_summary

PROVIDER_NAME = "replay"
#: The core wraps the session's real provider with this one for ``--record FILE``.
RECORD_PROVIDER_NAME = "record"


@hookimpl
def register_llm_providers(register: RegisterLLMProvider) -> None:
    """Offer the ``replay`` provider."""
    register(PROVIDER_NAME, factory)
    register(RECORD_PROVIDER_NAME, record_factory)


def factory(options: ProviderOptions) -> ReplayProvider:
    """A ``ReplayProvider`` for ``options.extra["path"]``; ``extra["strict"]`` defaults to true.

    Raises ``ConfigError`` when there is no path, or the file is missing or invalid.
    """
    path = options.extra.get("path")
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path.strip():
        raise ConfigError(
            "the replay provider needs a recording to play: use --llm replay:FILE, "
            "e.g. a file made with --record FILE"
        )
    skip = options.extra.get("skip", 0)
    return ReplayProvider.from_file(
        path,
        strict=as_flag(options.extra.get("strict"), True),
        skip=skip if isinstance(skip, int) else 0,
    )


def record_factory(options: ProviderOptions) -> RecordingProvider:
    """Wrap ``options.extra["inner"]`` (a provider) to record into ``options.extra["path"]``."""
    inner = options.extra.get("inner")
    path = options.extra.get("path")
    if not isinstance(inner, LLMProvider) or not isinstance(path, str | os.PathLike):
        raise ConfigError("the record provider needs a provider to wrap and a file: --record FILE")
    return RecordingProvider(inner, path)


def recording_provider(inner: LLMProvider, path: str | os.PathLike[str]) -> RecordingProvider:
    """Wrap ``inner`` so that every exchange is recorded into ``path`` (for ``--record``)."""
    return RecordingProvider(inner, path)


__all__ = [
    "Exchange",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MAX_COST_USD",
    "MAX_DEPTH",
    "MAX_RECORDING_BYTES",
    "PROVIDER_NAME",
    "RECORD_PROVIDER_NAME",
    "Recording",
    "RecordingProvider",
    "ReplayProvider",
    "factory",
    "load_recording",
    "record_factory",
    "recording_provider",
    "register_llm_providers",
    "request_difference",
    "request_summary",
]
