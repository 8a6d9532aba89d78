"""Masking secrets in nested values."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from autogpt_core.agent._redact import MASK, Redactor


def test_masks_in_nested_values_and_keys() -> None:
    """Every occurrence in strings, dict keys and values, lists and tuples is masked."""
    redact = Redactor(["sk-secret-1", "tok-abcdef"])
    value = {"a": ["x sk-secret-1 y", ("tok-abcdef",)], "sk-secret-1": 3, "n": 5}
    assert redact(value) == {"a": [f"x {MASK} y", [MASK]], MASK: 3, "n": 5}


def test_longest_secret_wins_and_short_ones_are_ignored() -> None:
    """Overlapping secrets mask whole; strings under six characters are not treated as secrets."""
    redact = Redactor(["secret-value", "secret-value-long", "abc"])
    assert redact.text("secret-value-long and abc") == f"{MASK} and abc"


def test_no_secrets_is_the_identity() -> None:
    """With nothing to mask the value is returned as it is."""
    value = {"k": ["v"]}
    assert Redactor()(value) is value


@given(st.text(min_size=6, max_size=30), st.text(max_size=40), st.text(max_size=40))
def test_a_secret_never_survives(secret: str, before: str, after: str) -> None:
    """Whatever surrounds it, the secret does not appear in the masked text."""
    masked = Redactor([secret]).text(before + secret + after)
    assert secret not in masked or secret in MASK
