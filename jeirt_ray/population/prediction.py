"""Predicting the known LLMs' answers to held-out questions: JE-IRT against matrix
factorisation, kNN and a 2PL IRT model, each trained on the same training questions, with AUC
intervals that resample whole questions (an LLM's answers to one question are not independent
draws)."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import roc_auc_score

from ..experiments.methods import predictors
from ..experiments.prepare import Prepared
from ..model.metrics import binary_metrics

# the population study's names for the methods of experiments/methods.py: `irt` is the 2PL whose
# item parameters come from the question's embedding (a classical 2PL has none for a held-out question)
METHODS = {"jeirt": "jeirt", "mf": "mf", "knn": "knn", "irt": "irt2pl"}


def predict_methods(prep: Prepared, rows: dict[str, np.ndarray], members: int = 1, seed: int = 0,
                    progress: bool = False) -> tuple[dict, dict, dict]:
    """Train each method on prep's training questions. Returns ({method: {part: probabilities of
    every LLM on those question rows}} for each `rows` part (e.g. val, test), {method: train
    seconds}, {"space": JE-IRT's CoreSpace})."""
    probs, seconds, out = {}, {}, {}
    for ours, theirs in METHODS.items():
        for _, predict, took, info in predictors(prep, [theirs], members=members, train_seed=seed, progress=progress):
            probs[ours] = {part: predict(r) for part, r in rows.items()}
            seconds[ours] = took
            if "space" in info:
                out["space"] = info["space"]
    return probs, seconds, out


def prediction_metrics(prep: Prepared, test_probs: dict[str, np.ndarray], test_rows: np.ndarray,
                       n_boot: int = 200, seed: int = 0) -> dict:
    """{method: {auc, accuracy, log_loss, auc_ci95}} on prep's test pairs, and for JE-IRT its AUC
    minus each other method's with a 95% interval (questions resampled, the same draws for all)."""
    test = prep.pairs("test")
    q, m, y = test.q.numpy(), test.m.numpy(), test.y.numpy()
    pos = np.full(prep.data.n_questions, -1)
    pos[test_rows] = np.arange(len(test_rows))
    pairs = {k: p[pos[q], m] for k, p in test_probs.items()}
    hard = y >= 0.5
    rng = np.random.default_rng(seed)
    qs, q_of = np.unique(q, return_inverse=True)
    weights = [np.bincount(rng.integers(0, len(qs), len(qs)), minlength=len(qs))[q_of] for _ in range(n_boot)]
    boot = {k: np.array([roc_auc_score(hard, p, sample_weight=w) for w in weights]) for k, p in pairs.items()}
    out = {}
    for k, p in pairs.items():
        metrics = binary_metrics(p, y)
        out[k] = {"auc": metrics["auc"], "accuracy": metrics["test_accuracy"], "log_loss": metrics["log_loss"],
                  "auc_ci95": _interval(boot[k])}
    for k in pairs:
        if k != "jeirt" and "jeirt" in pairs:
            out["jeirt"][f"minus_{k}_auc"] = out["jeirt"]["auc"] - out[k]["auc"]
            out["jeirt"][f"minus_{k}_auc_ci95"] = _interval(boot["jeirt"] - boot[k])
    return out


def _interval(values: np.ndarray) -> list[float]:
    return [float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))]
