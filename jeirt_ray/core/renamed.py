"""Old names that users already depend on, kept working with a deprecation line.

One word, one thing (docs/guide/vocabulary.md): "budget" is the routing policy's USD per 1,000
queries (`budget_per_1k`) and nothing else; a cap on one call's USD is `max_cost`; onboarding's
number of answers is `max_answers` and its USD cap `max_usd`; the Router's flat per-call prices
are `usd_per_call`. Each old spelling still works where it was taken and says, once per process,
what it is called now.
"""

from __future__ import annotations

import logging
import warnings

log = logging.getLogger("jeirt")

_said: set[tuple[str, str, str]] = set()


def deprecated(old: str, new: str, where: str) -> None:
    """Say once per process that `old` is now `new` in `where` (a DeprecationWarning, which
    Python shows to callers, and a log line, which services and the CLI show)."""
    if (old, new, where) in _said:
        return
    _said.add((old, new, where))
    message = f"{where}: `{old}` is now `{new}`; the old name still works, for now"
    warnings.warn(message, DeprecationWarning, stacklevel=3)
    log.warning("%s", message)


def take(new_value, old_value, old: str, new: str, where: str, default=None):
    """The value of a renamed setting given as `new_value` or (deprecated) `old_value`: a
    ValueError when both are given and differ."""
    if old_value is None:
        return default if new_value is None else new_value
    deprecated(old, new, where)
    if new_value is not None and new_value != old_value:
        raise ValueError(f"{where}: give `{new}` alone (`{old}` is its old name), not both")
    return old_value


def renamed_fields(data, names: dict[str, str], where: str):
    """A request body (before validation) with old field names moved to their new ones."""
    if not isinstance(data, dict):
        return data
    data = dict(data)
    for old, new in names.items():
        if old in data:
            value = data.pop(old)
            if new in data and data[new] != value:
                raise ValueError(f"give `{new}` alone (`{old}` is its old name), not both")
            deprecated(old, new, where)
            data[new] = value
    return data
