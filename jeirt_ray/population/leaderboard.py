"""The leaderboard's own full-benchmark scores (models.csv, percent) from a new LLM's estimated
accuracy on the item bank, per benchmark.

The map is learned on the known LLMs: their accuracy on each benchmark's items (all their
labels) against their leaderboard scores, an additive spline model over the five benchmarks'
accuracies per score (a generalised additive model, as metabench maps its abilities). A new LLM's
per-benchmark accuracies, estimated from its answers, go through the same map."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .llms import LEADERBOARD, accuracy


def bank_accuracy(labels: np.ndarray, benchmarks: np.ndarray, names=LEADERBOARD) -> np.ndarray:
    """(LLMs x benchmarks) mean label on each benchmark's questions (`labels`: questions x LLMs,
    NaN unanswered; NaN where an LLM answered none of a benchmark)."""
    out = np.full((labels.shape[1], len(names)), np.nan)
    for j, b in enumerate(names):
        out[:, j] = accuracy(labels[benchmarks == b])
    return out


def fit_map(accuracy: np.ndarray, scores: pd.DataFrame, names=LEADERBOARD) -> tuple[dict, dict]:
    """({benchmark: a fitted sklearn pipeline from the (n, 5) accuracies to that score}, {benchmark:
    its own RMSE in 5-fold cross-validation on the known LLMs' true accuracies, the floor that no
    estimate of the accuracies can go below}), learned on the rows with every accuracy and the score."""
    from sklearn.linear_model import RidgeCV
    from sklearn.model_selection import cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import SplineTransformer
    maps, floor = {}, {}
    for b in names:
        y = scores[b].to_numpy(dtype=float)
        ok = np.isfinite(accuracy).all(1) & np.isfinite(y)
        if ok.sum() < 20:
            continue
        maps[b] = make_pipeline(SplineTransformer(n_knots=5, degree=3), RidgeCV(alphas=np.logspace(-3, 3, 13)))
        floor[b] = float(np.sqrt(np.mean((cross_val_predict(maps[b], accuracy[ok], y[ok], cv=5) - y[ok]) ** 2)))
        maps[b].fit(accuracy[ok], y[ok])
    return maps, floor


def reconstruct(maps: dict, estimated: np.ndarray, scores: pd.DataFrame, names=LEADERBOARD,
                floor: dict | None = None) -> dict:
    """{benchmark: {rmse (points), llms, map_rmse_cv}} of the new LLMs' scores mapped from their
    `estimated` accuracies ((n, 5), NaN where a benchmark was not estimated) against `scores`
    (`floor`: fit_map's cross-validated RMSE of the map itself)."""
    out = {}
    for b in names:
        if b not in maps:
            continue
        y = scores[b].to_numpy(dtype=float)
        ok = np.isfinite(estimated).all(1) & np.isfinite(y)
        if not ok.any():
            continue
        pred = maps[b].predict(estimated[ok])
        out[b] = {"rmse": float(np.sqrt(np.mean((pred - y[ok]) ** 2))), "llms": int(ok.sum()),
                  "map_rmse_cv": (floor or {}).get(b)}
    return out
