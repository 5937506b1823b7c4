"""A comma-separated choice of names among a fixed set (a key's scopes, feedback sources)."""

from __future__ import annotations


def chosen(given, allowed: tuple[str, ...], what: str, none: str) -> tuple[str, ...]:
    """`given` (a comma-separated string or a list) as a tuple in `allowed`'s order; a ValueError
    naming the unknown ones (`what`: their kind, e.g. "scope"), or saying `none` when empty."""
    names = [s.strip() for s in (given.split(",") if isinstance(given, str) else given) if s.strip()]
    bad = [s for s in names if s not in allowed]
    if bad or not names:
        raise ValueError(f"unknown {what}(s) {bad}: choose among {', '.join(allowed)}" if bad else
                         f"{none}: {', '.join(allowed)}")
    return tuple(s for s in allowed if s in names)
