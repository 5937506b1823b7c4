"""Router evaluation on held-out questions.

A router picks one LLM per question; its accuracy is the mean label of the picked LLMs (a
soft label counts as its value). Missing labels: the data is sparse, so each question's
candidates are the LLMs that have a label for it (the rule every router here, baselines
included, is held to); a question with no labelled LLM is dropped.
"""

from __future__ import annotations

import numpy as np


def available_argmax(scores: np.ndarray, available: np.ndarray) -> np.ndarray:
    """Index of the best-scoring available LLM per row."""
    return np.where(available, scores, -np.inf).argmax(1)


def routed_labels(choice: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The label each question's chosen LLM got (labels: (n, M) with NaN where unobserved)."""
    out = labels[np.arange(len(choice)), choice]
    if np.isnan(out).any():
        raise ValueError("a router chose an LLM with no label for the question")
    return out


def bootstrap_ci(values: np.ndarray, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> list[float]:
    """Percentile bootstrap interval of the mean over questions."""
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(values), size=(n_boot, len(values)))
    means = values[idx].mean(1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return [float(lo), float(hi)]


def train_rates(n_models: int, m: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None,
                n_groups: int = 1) -> np.ndarray:
    """(n_groups, n_models) mean training label per group (e.g. per benchmark), NaN if unseen."""
    g = np.zeros(len(m), dtype=np.int64) if groups is None else groups
    sums = np.zeros((n_groups, n_models))
    counts = np.zeros((n_groups, n_models))
    np.add.at(sums, (g, m), y)
    np.add.at(counts, (g, m), 1)
    with np.errstate(invalid="ignore"):
        return sums / counts


def baseline_routers(labels: np.ndarray, train_m: np.ndarray, train_y: np.ndarray, train_bench: np.ndarray,
                     test_bench: np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
    """Per-question routed labels of the reference routers. Best-on-average and per-benchmark best
    are chosen on training labels only; per-benchmark best is the one router that reads the
    benchmark label (a user's query has none)."""
    available = ~np.isnan(labels)
    n, M = labels.shape
    overall = np.nan_to_num(train_rates(M, train_m, train_y)[0], nan=-1.0)
    benches, bench_of_train = np.unique(np.concatenate([train_bench, test_bench]), return_inverse=True)
    per_bench = train_rates(M, train_m, train_y, bench_of_train[:len(train_bench)], len(benches))
    test_groups = bench_of_train[len(train_bench):]
    # an LLM never seen on a benchmark falls back to its overall rate
    bench_scores = np.where(np.isnan(per_bench), overall[None, :], per_bench)[test_groups]
    rng = np.random.default_rng(seed)
    random_choice = available_argmax(rng.random((n, M)), available)
    return {
        "oracle": np.nanmax(labels, axis=1),
        "best_average": routed_labels(available_argmax(np.tile(overall, (n, 1)), available), labels),
        "per_benchmark_best": routed_labels(available_argmax(bench_scores, available), labels),
        "random": routed_labels(random_choice, labels),
    }

