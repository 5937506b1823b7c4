"""Pairwise prediction metrics. Soft labels count as correct when >= 0.5 for accuracy and AUC;
the log-loss uses them as they are (binary cross-entropy with soft targets)."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import roc_auc_score


def auc(scores: np.ndarray, y: np.ndarray) -> float:
    """ROC AUC of scores against labels >= 0.5 (nan when only one class is present)."""
    hard = np.asarray(y) >= 0.5
    return float(roc_auc_score(hard, scores)) if 0 < hard.sum() < len(hard) else float("nan")


def binary_metrics(p: np.ndarray, y: np.ndarray) -> dict[str, float]:
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-7, 1 - 1e-7)
    y = np.asarray(y, dtype=np.float64)
    hard = y >= 0.5
    return {"test_accuracy": float(((p >= 0.5) == hard).mean()), "auc": auc(p, y),
            "log_loss": float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())}
