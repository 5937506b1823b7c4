"""Routing in pools of LLMs drawn from a population (RouterEval's setting): for each held-out
question, the LLM of the pool that a router picks, against the pool's best single LLM and the
best per benchmark (both chosen on the training questions) and the oracle (a right answer if
any LLM of the pool has one). A router keeps a default LLM unless another's predicted P beats
it by a margin chosen on the validation questions; the default is the pool's best on the
training questions of the question's nearest benchmark (its embedding's nearest benchmark
centroid, as the served router tells a query's benchmark: routing/centroids.py), or, for
`<router>_single`, the pool's best single LLM. The served `tuned` policy blends the same two
signals: the benchmark a query most likely belongs to, and how far its P stands out."""

from __future__ import annotations

import numpy as np

from ..core.intervals import mean_ci
from .llms import accuracy


def pick(probs: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """Each question's chosen LLM of `pool` by highest predicted P (probs: questions x LLMs)."""
    return pool[np.argmax(probs[:, pool], axis=1)]


MARGINS = np.linspace(0.0, 0.3, 16)


def margin_pick(probs: np.ndarray, pool: np.ndarray, default: int | np.ndarray, margin: float) -> np.ndarray:
    """Each question's LLM: its `default` (one LLM, or one per question) unless another's
    predicted P beats the default's by more than `margin` (argmax alone over hundreds of LLMs
    picks whichever P is most overestimated: the winner's curse)."""
    chosen = pick(probs, pool)
    rows = np.arange(len(probs))
    top = probs[rows, chosen]
    default = np.broadcast_to(default, rows.shape)
    return np.where(probs[rows, default] >= top - margin, default, chosen)


def _chosen_margin(val_labels: np.ndarray, val_p: np.ndarray, pool: np.ndarray, default) -> float:
    """The margin with the best validation accuracy (ties: the larger, safer one)."""
    rows = np.arange(len(val_labels))
    on_val = [val_labels[rows, margin_pick(val_p, pool, default, m)].mean() for m in MARGINS]
    return float(MARGINS[np.flatnonzero(np.isclose(on_val, max(on_val)))[-1]])


def pools_study(test_labels: np.ndarray, val_labels: np.ndarray, train_labels: np.ndarray, test_bench: np.ndarray,
                train_bench: np.ndarray, probs: dict[str, tuple[np.ndarray, np.ndarray]], eligible: np.ndarray,
                size: int, n_pools: int, seed: int = 0, nearest: tuple[np.ndarray, np.ndarray] | None = None) -> dict:
    """Mean accuracy on the test questions over `n_pools` random pools of `size` LLMs among the
    `eligible` columns (LLMs with a label on every test and validation question): best_single,
    benchmark_best (by the questions' own benchmark), oracle, and each router of `probs` ({name:
    (validation, test) P, questions x LLMs}) with the margin over its default chosen on the
    validation questions per pool: the default is the pool's best on the nearest benchmark's
    training questions (`nearest`: the validation and test questions' nearest benchmarks; None:
    their own) and, for `<name>_single`, the pool's best single LLM (`<name>_argmax`: argmax P
    alone; `<name>_margin`: the margins chosen). `nearest_best`: the nearest benchmark's best
    alone. And jeirt minus best_single with a 95% interval (questions resampled; each question's
    difference averaged over the pools)."""
    rng = np.random.default_rng(seed)
    acc_train = accuracy(train_labels)
    val_near, test_near = nearest if nearest is not None else (None, test_bench)
    names = np.unique(np.r_[np.asarray(test_bench), np.asarray(test_near),
                            [] if val_near is None else np.asarray(val_near)])
    per_bench = {b: accuracy(train_labels[train_bench == b]) for b in names}
    rows = np.arange(len(test_labels))
    sums: dict[str, float] = {}
    margins: dict[str, list[float]] = {k: [] for k in probs}
    diff = np.zeros(len(test_labels))

    def bench_best(pool, benches):
        best_of = {b: pool[np.nanargmax(np.nan_to_num(per_bench[b][pool], nan=-1))] for b in set(benches)}
        return np.array([best_of[b] for b in benches])

    for _ in range(n_pools):
        pool = rng.choice(eligible, size=size, replace=False)
        best = pool[np.nanargmax(acc_train[pool])]
        got = {"best_single": test_labels[:, best]}
        got["benchmark_best"] = test_labels[rows, bench_best(pool, test_bench)]
        test_default = bench_best(pool, test_near)
        val_default = bench_best(pool, val_near) if val_near is not None else best
        got["nearest_best"] = test_labels[rows, test_default]
        for k, (val_p, test_p) in probs.items():
            m = _chosen_margin(val_labels, val_p, pool, val_default)
            margins[k].append(m)
            got[k] = test_labels[rows, margin_pick(test_p, pool, test_default, m)]
            got[f"{k}_single"] = test_labels[rows, margin_pick(test_p, pool, best,
                                                                _chosen_margin(val_labels, val_p, pool, best))]
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
