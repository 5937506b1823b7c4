"""Routing in pools of LLMs drawn from a population (RouterEval's setting): for each held-out
question, the LLM of the pool that a router picks, against the pool's best single LLM and the
best per benchmark (both chosen on the training questions) and the oracle (a right answer if
any LLM of the pool has one). A router keeps the pool's best single LLM unless another's
predicted P beats it by a margin chosen on the validation questions."""

from __future__ import annotations

import numpy as np

from ..core.intervals import mean_ci
from .llms import accuracy


def pick(probs: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """Each question's chosen LLM of `pool` by highest predicted P (probs: questions x LLMs)."""
    return pool[np.argmax(probs[:, pool], axis=1)]


MARGINS = np.linspace(0.0, 0.3, 16)


def margin_pick(probs: np.ndarray, pool: np.ndarray, best: int, margin: float) -> np.ndarray:
    """Each question's LLM: the pool's best single LLM unless another's predicted P beats its own
    by more than `margin` (argmax alone over hundreds of LLMs picks whichever P is most
    overestimated: the winner's curse)."""
    chosen = pick(probs, pool)
    top = probs[np.arange(len(probs)), chosen]
    return np.where(probs[:, best] >= top - margin, best, chosen)


def pools_study(test_labels: np.ndarray, val_labels: np.ndarray, train_labels: np.ndarray, test_bench: np.ndarray,
                train_bench: np.ndarray, probs: dict[str, tuple[np.ndarray, np.ndarray]], eligible: np.ndarray,
                size: int, n_pools: int, seed: int = 0) -> dict:
    """Mean accuracy on the test questions over `n_pools` random pools of `size` LLMs among the
    `eligible` columns (LLMs with a label on every test and validation question): best_single,
    benchmark_best, oracle, and each router of `probs` ({name: (validation, test) P, questions x
    LLMs}) with the margin over the pool's best single chosen on the validation questions per pool
    (`<name>_argmax`: argmax P alone; `<name>_margin`: the margins chosen); and jeirt minus
    best_single with a 95% interval (questions resampled; each question's difference averaged
    over the pools)."""
    rng = np.random.default_rng(seed)
    acc_train = accuracy(train_labels)
    per_bench = {b: accuracy(train_labels[train_bench == b]) for b in np.unique(test_bench)}
    rows, val_rows = np.arange(len(test_labels)), np.arange(len(val_labels))
    sums: dict[str, float] = {}
    margins: dict[str, list[float]] = {k: [] for k in probs}
    diff = np.zeros(len(test_labels))
    for _ in range(n_pools):
        pool = rng.choice(eligible, size=size, replace=False)
        best = pool[np.nanargmax(acc_train[pool])]
        got = {"best_single": test_labels[:, best]}
        chosen = np.array([pool[np.nanargmax(np.nan_to_num(per_bench[b][pool], nan=-1))] for b in test_bench])
        got["benchmark_best"] = test_labels[rows, chosen]
        for k, (val_p, test_p) in probs.items():
            on_val = [val_labels[val_rows, margin_pick(val_p, pool, best, m)].mean() for m in MARGINS]
            m = float(MARGINS[np.flatnonzero(np.isclose(on_val, max(on_val)))[-1]])  # ties: the safer margin
            margins[k].append(m)
            got[k] = test_labels[rows, margin_pick(test_p, pool, best, m)]
            got[f"{k}_argmax"] = test_labels[rows, pick(test_p, pool)]
        got["oracle"] = test_labels[:, pool].max(1)
        for k, v in got.items():
            sums[k] = sums.get(k, 0.0) + float(v.mean())
        if "jeirt" in got:
            diff += got["jeirt"] - got["best_single"]
    out = {k: v / n_pools for k, v in sums.items()}
    out.update({f"{k}_margin": float(np.mean(v)) for k, v in margins.items()}, pools=n_pools)
    if "jeirt" in probs:
        out["jeirt_minus_best_single_ci95"] = mean_ci(diff / n_pools)
    return out


def cost_study(test_labels: np.ndarray, val_labels: np.ndarray, train_labels: np.ndarray, test_probs: np.ndarray,
               val_probs: np.ndarray, params: np.ndarray, eligible: np.ndarray, size: int, n_pools: int,
               seed: int = 0, shares=np.linspace(0.5, 1.0, 51)) -> dict:
    """Parameters per query at the best single LLM's accuracy: in each pool, each question goes
    to the smallest LLM whose P is at least `share` of the pool's best P; the share is chosen on
    the validation questions (the smallest one whose accuracy reaches the best single's there),
    then the test questions are routed with it. {params_share: mean parameters per query over
    the best single's size, accuracy, best_single_accuracy, share} averaged over the pools."""
    rng = np.random.default_rng(seed)
    acc_train = accuracy(train_labels)
    rows_t, rows_v = np.arange(len(test_labels)), np.arange(len(val_labels))
    out = {"params_share": [], "accuracy": [], "best_single_accuracy": [], "share": []}
    for _ in range(n_pools):
        pool = rng.choice(eligible, size=size, replace=False)
        pool = pool[np.isfinite(params[pool])]
        if not len(pool):
            continue
        best = pool[np.nanargmax(acc_train[pool])]
        target = float(np.nanmean(val_labels[:, best]))
        share = 1.0
        for s in shares:  # ascending: the first share that reaches the target is the cheapest
            if np.nanmean(val_labels[rows_v, _cheapest(val_probs, pool, params, s)]) >= target:
                share = float(s)
                break
        chosen = _cheapest(test_probs, pool, params, share)
        out["params_share"].append(float(params[chosen].mean() / params[best]))
        out["accuracy"].append(float(test_labels[rows_t, chosen].mean()))
        out["best_single_accuracy"].append(float(test_labels[:, best].mean()))
        out["share"].append(share)
    return {k: float(np.mean(v)) for k, v in out.items()} | {"pools": len(out["share"])}


def _cheapest(probs: np.ndarray, pool: np.ndarray, params: np.ndarray, share: float) -> np.ndarray:
    p = probs[:, pool]
    ok = p >= share * p.max(1, keepdims=True)
    cost = np.where(ok, params[pool][None, :], np.inf)
    return pool[np.argmin(cost, axis=1)]
