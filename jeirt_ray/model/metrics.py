"""Pairwise prediction metrics. Soft labels count as correct when >= 0.5 for accuracy and AUC;
the log-loss uses them as they are (binary cross-entropy with soft targets)."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import roc_auc_score


def binary_metrics(p: np.ndarray, y: np.ndarray) -> dict[str, float]:
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-7, 1 - 1e-7)
    y = np.asarray(y, dtype=np.float64)
    hard = y >= 0.5
    auc = float(roc_auc_score(hard, p)) if 0 < hard.sum() < len(hard) else float("nan")
    return {"test_accuracy": float(((p >= 0.5) == hard).mean()), "auc": auc,
            "log_loss": float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())}
