"""The leaderboard's own full-benchmark scores (models.csv, percent) of a new LLM from its answers.

Two maps, both learned on the known LLMs:
- from the answers to the space's anchor questions straight to each score (`from_anchors`: a
  ridge regression and the residuals of the known LLMs that answered most alike,
  model/anchors.py; as metabench maps its items' answers to the scores);
- from the per-benchmark accuracies on the item bank to each score (`fit_map`: an additive
  spline model over the five accuracies, a generalised additive model), through which a new LLM's
  estimated accuracies go (`reconstruct`)."""

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


def from_anchors(anchors, rows: list[np.ndarray], answers: list[np.ndarray], known_scores: pd.DataFrame,
                 scores: pd.DataFrame, names=LEADERBOARD) -> dict:
    """{benchmark: {rmse (points), llms}} of the new LLMs' scores (`scores`, one row per new LLM)
    predicted from their `answers` to the anchor question `rows` (one array of each per new LLM),
    by `anchors.learn` on the known LLMs' scores (`known_scores`, in the order of the anchors'
    LLMs)."""
    out = {}
    for b in names:
        truth = scores[b].to_numpy(dtype=float)
        learned: dict[bytes, object] = {}
        pred = np.full(len(truth), np.nan)
        for i, (r, a) in enumerate(zip(rows, answers)):
            if not np.isfinite(truth[i]):
                continue
            key = np.asarray(r).tobytes()
            if key not in learned:
                learned[key] = anchors.learn(np.asarray(r), known_scores[b].to_numpy(dtype=float))
            if learned[key] is not None:
                pred[i] = learned[key].predict(np.asarray(a, dtype=np.float64))
        ok = np.isfinite(pred)
        if ok.any():
            out[b] = {"rmse": float(np.sqrt(np.mean((pred[ok] - truth[ok]) ** 2))), "llms": int(ok.sum())}
    return out
