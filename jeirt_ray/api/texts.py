"""The checks on the texts a Space's methods take (shared by Space and its Learner)."""

from __future__ import annotations

from typing import Sequence


def checked_texts(texts: Sequence[str], method: str = "embed") -> list[str]:
    """`texts` as a list, each a non-blank string, or a TypeError/ValueError naming the method and text."""
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"Space.{method}: pass a list of texts, e.g. space.{method}([text])")
    out = list(texts)
    if not out:
        raise ValueError(f"Space.{method}: no texts given")
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise TypeError(f"Space.{method}: text {i} is {type(t).__name__} {str(t)[:40]!r}, not a string")
        if not t.strip():
            raise ValueError(f"Space.{method}: text {i} is empty or blank: nothing to route")
    return out
