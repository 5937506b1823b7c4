"""The LLMs that answer alike: in a zoo of fine-tunes and merges most LLMs have twins. Two
measures, side by side: the cosine of their vectors (averaged over the space's members: what the
space believes of them) and their agreement on the questions both answered (what they did: the
share of those questions where their labels match, 1 - |a - b| for soft labels)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..model.space import NOT_ANSWERED, CoreSpace

MIN_SHARED = 20  # questions both LLMs answered before their agreement is reported
MEASURES = ("agreement", "cosine")


def vector_cosine(space: CoreSpace, row: int) -> np.ndarray:
    """(LLMs,) cosine of every LLM's vector with LLM `row`'s, averaged over members."""
    out = np.zeros(len(space.model_names))
    for i in range(len(space.members)):
        table = space.model_vectors(i).astype(np.float64)
        norms = np.linalg.norm(table, axis=1).clip(1e-12)
        out += table @ table[row] / (norms * norms[row])
    return out / len(space.members)


def agreement(answers: np.ndarray, row: int) -> tuple[np.ndarray, np.ndarray]:
    """((LLMs,) agreement with LLM `row` on the questions both answered, NaN under MIN_SHARED;
    (LLMs,) how many questions they share)."""
    mine = answers[row]
    asked = mine != NOT_ANSWERED
    cols = answers[:, asked]
    both = cols != NOT_ANSWERED
    shared = both.sum(1)
    diff = np.abs(cols.astype(np.int16) - mine[asked].astype(np.int16)) * both
    with np.errstate(invalid="ignore", divide="ignore"):
        agree = 1 - diff.sum(1) / (100.0 * shared)
    agree[shared < MIN_SHARED] = np.nan
    return agree, shared


def similar(space: CoreSpace, name: str, k: int = 10, by: str = "agreement") -> pd.DataFrame:
    """The `k` LLMs most like `name`, by `by` ("agreement", falling back to "cosine" where the
    space keeps no answers; or "cosine"): columns llm, agreement, shared, cosine, params_b."""
    if by not in MEASURES:
        raise ValueError(f"by must be one of {', '.join(MEASURES)}, got {by!r}")
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    index = {n: i for i, n in enumerate(space.model_names)}
    if name not in index:
        close = [n for n in space.model_names if name.lower() in n.lower()][:5]
        hint = f"; names containing it: {close}" if close else ""
        raise LookupError(f"no LLM {name!r} in this space of {len(index)} LLMs{hint}")
    row = index[name]
    cos = vector_cosine(space, row)
    if space.answers is not None:
        agree, shared = agreement(space.answers, row)
    else:
        agree, shared = np.full(len(cos), np.nan), np.zeros(len(cos), dtype=np.int64)
    info = space.metadata.get("llms") or {}
    table = pd.DataFrame({"llm": space.model_names, "agreement": agree, "shared": shared, "cosine": cos,
                          "params_b": [info.get(n, {}).get("params_b", np.nan) for n in space.model_names]})
    table = table.drop(index=row)
    key = "agreement" if by == "agreement" and table["agreement"].notna().any() else "cosine"
    return table.sort_values([key, "cosine"], ascending=False, na_position="last", kind="stable").head(k) \
        .reset_index(drop=True)
