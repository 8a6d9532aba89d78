"""YAML for files every command reads (manifests, the config): no bombs, no tracebacks.

``StrictLoader`` is PyYAML's safe loader without anchors and aliases (a 600-byte "billion
laughs" document would otherwise expand for ever) and with a nesting limit; ``load``
parses one document with it, raising ``Refused`` (located, with the fix) or PyYAML's own
``YAMLError`` for a syntax error.
"""

from __future__ import annotations

from typing import Any

import yaml


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Refused(Exception):
    """A construct the manifest loader refuses, with where it starts and the fix."""

    def __init__(self, mark: Any, problem: str, fix: str) -> None:
        super().__init__(problem)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        self.problem = where + problem
        self.fix = fix


class StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` without anchors and aliases, and with a nesting limit.

    The composer refuses the first anchor or alias it meets, before anything has been
    expanded: manifests and config files have no use for them, and refusing them outright
    is simpler and safer than bounding what they expand to. Values that YAML resolves but
    Python cannot build (a date such as 2001-13-01, an integer of 5,000 digits) are errors
    too, not ``ValueError`` tracebacks.
    """

    def __init__(self, stream: str, *, max_depth: int) -> None:
        super().__init__(stream)
        self._depth = 0
        self._max_depth = max_depth

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event: yaml.Event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            name = getattr(event, "anchor", None)
            raise Refused(
                event.start_mark,
                f"uses the YAML anchor or alias {name!r}; '&name', '*name' and '<<' merge "
                "keys are not allowed here",
                "write the value out in full everywhere it is used",
            )
        nests = isinstance(event, yaml.CollectionStartEvent)
        if nests:
            self._depth += 1
            if self._depth > self._max_depth:
                raise Refused(
                    event.start_mark,
                    f"the YAML nests lists and mappings more than {self._max_depth} levels deep",
                    "flatten the document: it needs only a few levels",
                )
        try:
            return super().compose_node(parent, index)
        finally:
            if nests:
                self._depth -= 1

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as exc:
            raise Refused(
                node.start_mark,
                f"the value {_short(node.value)} cannot be read ({exc})",
                "quote it to make it a string, or correct it",
            ) from None


def load(text: str, *, max_depth: int) -> Any:
    """The one YAML document in ``text``, read with ``StrictLoader``."""
    loader = StrictLoader(text, max_depth=max_depth)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
