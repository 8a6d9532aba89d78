"""Keeping secrets out of events, logs and responses."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

MASK = "***"
# Shorter "secrets" (a one-letter default, "yes") would mask ordinary words everywhere.
_MIN_SECRET_LENGTH = 6


class Redactor:
    """Replaces every known secret value in strings, recursively through JSON values."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        new = {s for s in secrets if isinstance(s, str) and len(s) >= _MIN_SECRET_LENGTH}
        if new - self._secrets:
            self._secrets |= new
            ordered = sorted(self._secrets, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(s) for s in ordered))

    def text(self, value: str) -> str:
        if self._pattern is None:
            return value
        return self._pattern.sub(MASK, value)

    def __call__(self, value: Any) -> Any:
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self._pattern.sub(MASK, value)
        if isinstance(value, dict):
            return {self(k): self(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self(v) for v in value]
        return value
