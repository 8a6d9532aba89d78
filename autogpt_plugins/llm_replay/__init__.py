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
from ._recording import Exchange as Exchange
from ._recording import Recording as Recording
from ._recording import RecordingProvider as RecordingProvider
from ._recording import ReplayProvider as ReplayProvider
from ._recording import as_flag
from ._recording import load_recording as load_recording
from ._recording import request_difference as request_difference
from ._recording import request_summary as request_summary

PROVIDER_NAME = "replay"


@hookimpl
def register_llm_providers(register: RegisterLLMProvider) -> None:
    """Offer the ``replay`` provider."""
    register(PROVIDER_NAME, factory)


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
    return ReplayProvider.from_file(path, strict=as_flag(options.extra.get("strict"), True))


def recording_provider(inner: LLMProvider, path: str | os.PathLike[str]) -> RecordingProvider:
    """Wrap ``inner`` so that every exchange is recorded into ``path`` (for ``--record``)."""
    return RecordingProvider(inner, path)


__all__ = [
    "Exchange",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "PROVIDER_NAME",
    "Recording",
    "RecordingProvider",
    "ReplayProvider",
    "factory",
    "load_recording",
    "recording_provider",
    "register_llm_providers",
    "request_difference",
    "request_summary",
]
