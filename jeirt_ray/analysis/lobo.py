"""Leave one benchmark out: how far does the space carry to a benchmark it never saw?

For each benchmark B, a space is trained without any of B's questions (the other benchmarks
split into train and validation). It is scored on B's test questions of the main split by
question, the same pairs on which the main space (which trained on B's other questions) is
scored: the drop is main accuracy minus left-out accuracy. B's alignment with the training
benchmarks is the largest cosine between the mean question direction of B and that of any
training benchmark, both computed in the left-out space. The paper's claim: the better a
benchmark is aligned with what the space was trained on, the smaller the drop.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
from scipy.stats import spearmanr
from tqdm.auto import tqdm

from ..data import split_leave_benchmark_out
from ..experiments.prepare import Prepared
from ..model.metrics import binary_metrics
from ..model.space import CoreSpace


def mean_directions(directions: np.ndarray, groups: np.ndarray) -> dict[str, np.ndarray]:
    """Unit mean direction of each group's questions."""
    out = {}
    for g in np.unique(groups):
        v = directions[groups == g].mean(0)
        out[str(g)] = v / max(float(np.linalg.norm(v)), 1e-12)
    return out


def alignment(directions: np.ndarray, groups: np.ndarray, left_out: str) -> dict:
    """Cosine of the left-out group's mean direction with each other group's; `max` is the
    alignment used for the correlation."""
    means = mean_directions(directions, groups)
    target = means.pop(left_out)
    cos = {g: float(v @ target) for g, v in means.items()}
    nearest = max(cos, key=cos.get)
    return {"max": cos[nearest], "nearest": nearest, "cosines": cos}


def leave_one_benchmark_out(prep: Prepared, main: CoreSpace, train_space_fn: Callable[[Prepared], CoreSpace],
                            benchmarks: list[str] | None = None, progress: bool = True) -> dict:
    """Per benchmark: accuracy of `main` and of a space trained without the benchmark on its test
    pairs, the drop, the alignment; and the Spearman correlation of alignment with drop.
    `train_space_fn(prep)` trains a space on prep's split (the main space's recipe)."""
    data = prep.data
    names = benchmarks or sorted(set(data.benchmarks.tolist()))
    if len(set(data.benchmarks.tolist())) < 3:
        raise ValueError("leave-one-benchmark-out needs at least 3 benchmarks (2 left to train on)")
    test_mask = prep.split.masks(data)[2]
    rows = []
    for bench in tqdm(names, desc="leave one benchmark out", disable=not progress):
        pairs = test_mask & (data.benchmarks[data.q_idx] == bench)
        if not pairs.any():
            continue
        split = split_leave_benchmark_out(data, bench, seed=prep.split.seed)
        split = dataclasses.replace(split, heldout_models=list(prep.split.heldout_models))
        without = train_space_fn(dataclasses.replace(prep, split=split))
        x, q, m, y = prep.X, data.q_idx[pairs], data.m_idx[pairs], data.labels[pairs]
        acc_main = binary_metrics(main.predict_proba(x[q])[np.arange(len(q)), m], y)["test_accuracy"]
        acc_out = binary_metrics(without.predict_proba(x[q])[np.arange(len(q)), m], y)["test_accuracy"]
        E = without.question_vectors(x)
        directions = E / np.linalg.norm(E, axis=1, keepdims=True).clip(1e-9)
        rows.append({"benchmark": bench, "test_pairs": int(pairs.sum()), "accuracy_main": acc_main,
                     "accuracy_left_out": acc_out, "drop": acc_main - acc_out,
                     "alignment": alignment(directions, data.benchmarks, bench)})
    align = np.array([r["alignment"]["max"] for r in rows])
    drop = np.array([r["drop"] for r in rows])
    rho = float(spearmanr(align, drop).statistic) if len(rows) >= 3 else float("nan")
    return {"benchmarks": rows, "spearman_alignment_drop": rho,
            "mean_drop": float(drop.mean()) if len(rows) else float("nan")}
