"""The pluggy markers for project ``autogpt``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, overload

import pluggy

PROJECT_NAME = "autogpt"

#: Attribute set on a hook implementation that must run in a worker thread.
BLOCKING_ATTR = "autogpt_blocking"

_F = TypeVar("_F", bound=Callable[..., Any])

hookspec = pluggy.HookspecMarker(PROJECT_NAME)


class HookimplMarker:
    """pluggy's implementation marker plus ``blocking=True``.

    ``@hookimpl(blocking=True)`` marks a plain function that may block (disk, sockets,
    CPU): the awaitable hook caller runs it in a worker thread so it cannot stall other
    sessions. Plain ``pm.hook.NAME(...)`` calls still run it inline, as pluggy does.
    """

    def __init__(self, project_name: str) -> None:
        self.project_name = project_name
        self._pluggy = pluggy.HookimplMarker(project_name)

    @overload
    def __call__(
        self,
        function: _F,
        hookwrapper: bool = ...,
        optionalhook: bool = ...,
        tryfirst: bool = ...,
        trylast: bool = ...,
        specname: str | None = ...,
        wrapper: bool = ...,
        blocking: bool = ...,
    ) -> _F: ...

    @overload
    def __call__(
        self,
        function: None = ...,
        hookwrapper: bool = ...,
        optionalhook: bool = ...,
        tryfirst: bool = ...,
        trylast: bool = ...,
        specname: str | None = ...,
        wrapper: bool = ...,
        blocking: bool = ...,
    ) -> Callable[[_F], _F]: ...

    def __call__(
        self,
        function: _F | None = None,
        hookwrapper: bool = False,
        optionalhook: bool = False,
        tryfirst: bool = False,
        trylast: bool = False,
        specname: str | None = None,
        wrapper: bool = False,
        blocking: bool = False,
    ) -> _F | Callable[[_F], _F]:
        def mark(func: _F) -> _F:
            marked = self._pluggy(
                func,
                hookwrapper=hookwrapper,
                optionalhook=optionalhook,
                tryfirst=tryfirst,
                trylast=trylast,
                specname=specname,
                wrapper=wrapper,
            )
            if blocking:
                setattr(marked, BLOCKING_ATTR, True)
            return marked

        if function is None:
            return mark
        return mark(function)


hookimpl = HookimplMarker(PROJECT_NAME)
