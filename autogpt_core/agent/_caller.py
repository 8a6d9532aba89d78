"""The hook caller of one session: its view, its deadlines, failures reported.

Every per-session hook call carries the session's current view (``emitter.view``) and a
deadline. ``call`` isolates: an implementation that raises or overruns is reported as an
``error`` event naming it and counts as having returned ``None``. ``call_unisolated`` is
for ``plan`` and ``llm_request``, whose failures fail the cycle instead.
"""

from __future__ import annotations

import math
from typing import Any

from .._errors import HookError
from ..hooks._hookcall import AsyncHooks, ResultTypes
from ._emitter import Emitter


class HookCaller:
    """Calls hooks for one session; reports isolated failures through its emitter.

    ``hook_timeout`` is each implementation's deadline (``None``: none);
    ``person_seconds`` the deadline of hooks a person answers (``confirm``,
    ``user_input``): ``math.inf`` when ``limits.confirm_timeout`` is null.
    """

    def __init__(
        self,
        *,
        hooks: AsyncHooks,
        emitter: Emitter,
        hook_timeout: float | None,
        person_seconds: float = math.inf,
    ) -> None:
        self._hooks = hooks
        self._emitter = emitter
        self.hook_timeout = hook_timeout
        self.person_seconds = person_seconds

    def rebind(self, hooks: AsyncHooks) -> None:
        """Call ``hooks`` from now on: the runtime loaded plugins anew (between cycles)."""
        self._hooks = hooks

    def implemented(self, name: str) -> bool:
        """Whether any plugin implements hook ``name`` now."""
        return bool(getattr(self._hooks, name).get_hookimpls())

    async def call(self, name: str, *, seconds: float | None = None, **kwargs: Any) -> Any:
        """Call hook ``name`` with the session's view, isolating failing implementations."""
        result, _ = await self.call_checked(name, seconds=seconds, **kwargs)
        return result

    async def call_checked(
        self, name: str, *, seconds: float | None = None, **kwargs: Any
    ) -> tuple[Any, list[HookError]]:
        """``call``, also returning the errors that were reported (for fail-closed checks)."""
        errors: list[HookError] = []
        result = await getattr(self._hooks, name).call(
            {"session": self._emitter.view, **kwargs},
            timeout=self.hook_timeout if seconds is None else seconds,
            isolate=errors.append,
        )
        for error in errors:
            await self._emitter.report(error)
        return result, errors

    async def ask_person(self, name: str, **kwargs: Any) -> Any:
        """Call a hook a person answers (``confirm``, ``user_input``): at their own pace,
        with ``person_seconds`` as its deadline. The output shows what led to the
        question first (``Emitter.deliver``)."""
        await self._emitter.deliver()
        return await self.call(name, seconds=self.person_seconds, **kwargs)

    async def call_unisolated(
        self, name: str, *, seconds: float, returns: ResultTypes, **kwargs: Any
    ) -> Any:
        """Call hook ``name`` without isolation: a failure raises ``HookError``."""
        return await getattr(self._hooks, name).call(
            {"session": self._emitter.view, **kwargs}, timeout=seconds, returns=returns
        )
