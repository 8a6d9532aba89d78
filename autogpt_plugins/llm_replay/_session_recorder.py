"""Recording sessions: what this plugin's ``llm_request`` wrapper keeps while ``record`` is set.

The ``record`` setting names the file (``--record FILE`` sets it for one run; it may be in
the config too). Each session that asks the model gets a ``Recorder`` on its first request;
every exchange it makes is recorded, whichever provider (or caching plugin) answered it;
the session's end writes an empty recording for a session that asked nothing.

``{session_id}`` in the setting is replaced by the session's id, so that a runtime running
several sessions (the HTTP server) records each into its own file. Two sessions running at
once may not record into one file: the second is refused with an ``LLMError`` saying so.
"""

from __future__ import annotations

from pathlib import Path

import trio

from autogpt_core import LLMError
from hookspecs import LLMRequest, LLMResponse, PluginSettings

from ._recording import Recorder

PLUGIN_ID = "llm_replay"


class SessionRecorders:
    """The recordings of the running sessions, by session id.

    ``settings`` are the plugin's own (from ``configure``); the ``record`` setting is read
    when a session first asks the model.
    """

    def __init__(self) -> None:
        self.settings = PluginSettings(plugin_id=PLUGIN_ID)
        self._recorders: dict[str, Recorder] = {}
        # Sessions refused a file another session records into: their end writes nothing.
        self._refused: set[str] = set()
        # Sessions are checked and added one at a time: two first requests may interleave.
        self._lock = trio.Lock()

    def path_for(self, session_id: str) -> Path | None:
        """Where ``session_id`` is recorded, or ``None`` when ``record`` is empty.

        A relative path is taken from the plugin's data directory (``--record`` gives an
        absolute one).
        """
        setting = self.settings.values.get("record") or ""
        if not isinstance(setting, str) or not setting.strip():
            return None
        path = Path(setting.replace("{session_id}", session_id)).expanduser()
        data_dir = self.settings.data_dir
        return data_dir / path if data_dir is not None and not path.is_absolute() else path

    async def record(self, session_id: str, request: LLMRequest, response: LLMResponse) -> None:
        """Record one exchange of ``session_id``, if recording is on."""
        recorder = self._recorders.get(session_id)
        if recorder is None:
            path = self.path_for(session_id)
            if path is None:
                return
            async with self._lock:
                recorder = self._recorders.get(session_id) or self._start(session_id, path)
        await recorder.add(request, response, source=f"the model answering session {session_id}")

    def _start(self, session_id: str, path: Path) -> Recorder:
        for other, recorder in self._recorders.items():
            if recorder.path == path:
                self._refused.add(session_id)
                raise LLMError(
                    f"session {session_id} cannot be recorded into {path}: session {other} is "
                    "being recorded into it; put {session_id} in the file name "
                    "(plugins.settings.llm_replay.record) so that each session has its own"
                )
        recorder = self._recorders[session_id] = Recorder(path)
        return recorder

    async def finish(self, session_id: str) -> None:
        """The session ended: make sure its recording exists (empty if it asked nothing)."""
        recorder = self._recorders.pop(session_id, None)
        if session_id in self._refused:
            self._refused.discard(session_id)
            return
        if recorder is None:
            path = self.path_for(session_id)
            if path is None or any(r.path == path for r in self._recorders.values()):
                return
            recorder = Recorder(path)
        await recorder.finish()

    async def finish_all(self) -> None:
        """The runtime stops: make sure every recording still open exists."""
        for session_id in list(self._recorders):
            await self.finish(session_id)
