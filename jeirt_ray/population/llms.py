"""The LLMs of a population: their own table (`models.csv`: size, the leaderboard's scores), the
slice a quick run takes, the split into known and new LLMs, and near-duplicates (twins)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..data import DataError, ResponseData

LEADERBOARD = ("arc", "gsm8k", "mmlu", "truthfulqa", "winogrande")  # models.csv's scores, in percent


def select_models(data: ResponseData, names) -> ResponseData:
    """`data` with only the LLMs `names` (in that order) and their responses."""
    names = np.asarray(names, dtype=str)
    pos = pd.Index(data.models).get_indexer(names)
    if (pos < 0).any():
        raise KeyError(f"LLM {names[pos < 0][0]!r} is not in {data.name}")
    new_index = np.full(data.n_models, -1, dtype=np.int64)
    new_index[pos] = np.arange(len(names))
    keep = new_index[data.m_idx] >= 0
    return ResponseData(data.question_ids, data.benchmarks, data.texts, names, data.q_idx[keep],
                        new_index[data.m_idx[keep]], data.labels[keep], name=data.name, synthetic=data.synthetic)


def combine(known: ResponseData, new: ResponseData, where: str) -> ResponseData:
    """One dataset of `known`'s questions with both folders' LLMs (`new`'s LLMs after), for a
    study whose new LLMs come from another folder (`where`, named in errors): the same question
    ids, and no LLM in both."""
    missing = sorted(set(new.question_ids) - set(known.question_ids))
    if missing:
        raise DataError(f"{where}: question {missing[0]!r} (and {len(missing) - 1} more) is not a question of the "
                        f"known LLMs' data; new LLMs must answer the same questions")
    both = sorted(set(new.models) & set(known.models))
    if both:
        raise DataError(f"{where}: LLM {both[0]!r} is also in the known LLMs' data ({len(both)} such); new LLMs "
                        f"must be new")
    q_map = pd.Index(known.question_ids).get_indexer(new.question_ids)
    return ResponseData(known.question_ids, known.benchmarks, known.texts, np.r_[known.models, new.models],
                        np.r_[known.q_idx, q_map[new.q_idx]], np.r_[known.m_idx, new.m_idx + known.n_models],
                        np.r_[known.labels, new.labels].astype(np.float32), name=known.name)


def split_llms(models, share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(known, new): `share` of the LLMs drawn as new by `seed`, the rest known."""
    models = np.asarray(models, dtype=str)
    rng = np.random.default_rng(seed)
    new = np.zeros(len(models), dtype=bool)
    new[rng.choice(len(models), size=int(round(share * len(models))), replace=False)] = True
    return models[~new], models[new]


def accuracy(labels: np.ndarray) -> np.ndarray:
    """Each LLM's mean label over the questions it answered (`labels`: questions x LLMs, NaN
    unanswered; NaN where it answered none)."""
    seen = (~np.isnan(labels)).sum(0)
    return np.where(seen > 0, np.nansum(labels, 0) / np.maximum(seen, 1), np.nan)


def twins(labels: np.ndarray, agreement: float = 0.97, min_shared: int = 50) -> np.ndarray:
    """One representative per group of near-duplicates: `labels` (questions x LLMs, NaN where
    unanswered); an LLM whose answers agree with a kept one's on at least `agreement` of the
    questions both answered (`min_shared` or more) is that one's twin. Greedy over the LLMs in
    order; returns the kept columns."""
    seen = ~np.isnan(labels)
    right = np.where(seen, labels >= 0.5, False).astype(np.float32)
    wrong = np.where(seen, labels < 0.5, False).astype(np.float32)
    shared = seen.T.astype(np.float32) @ seen.astype(np.float32)
    agree = right.T @ right + wrong.T @ wrong
    with np.errstate(invalid="ignore", divide="ignore"):
        alike = (agree / shared >= agreement) & (shared >= min_shared)
    kept: list[int] = []
    dropped = np.zeros(labels.shape[1], dtype=bool)
    for m in range(labels.shape[1]):
        if dropped[m]:
            continue
        kept.append(m)
        dropped |= alike[m]
    return np.array(kept, dtype=int)
