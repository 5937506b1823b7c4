"""A new LLM's accuracy from N of its answers, five ways, at N = 25, 50, 100 and 200.

The truth is the LLM's accuracy over every question it has a label for (the benchmarks it was
run on). Each way gives an estimate and a 90% interval:

- `default`: the space's plan (model/adaptive.py) with its default strategy: with thousands of
  known LLMs' answers in the space, its anchor questions in order and the accuracy learned from
  the answers to them (model/anchors.py); with too few, what `vector` does;
- `vector` (beside the five): the plan's random strategy: questions in a seeded random order, the
  estimate the space's prediction corrected by those answers (model/estimate.py), the interval
  holding the vector's uncertainty and the space's own error (the default before anchors);
- `adaptive`: the space's plan asking the questions that tell most about the LLM's vector, the
  same estimate (adaptive answers carry no correction);
- `random`: the mean of the N answers, drawn at random from its questions (Wilson's interval,
  with the finite population corrected for);
- `knn`: the same N random questions; the 50 known LLMs that answered them most alike stand
  in for it on the questions it did not answer (the interval: their 5th to 95th percentile);
- `irt`: the same N random questions; its ability under a 2PL model fitted on the known LLMs
  (catsim's maximum-likelihood estimator and standard error), the unanswered questions
  predicted from it (the interval: the ability's 90% interval carried through);
- `sharpened` (beside the five): `vector` on the space whose items were refitted to the known
  LLMs' answers (items.py).

Every way counts the answered questions as answered. The `default` plan at 100 answers also
(and `vector`'s, `sharpened`'s) gives the per-benchmark accuracies that `leaderboard.py` maps to
the leaderboard's scores.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import norm

from ..model.adaptive import plan
from ..model.space import CoreSpace

CHECKPOINTS = (25, 50, 100, 200)
STRATEGIES = ("default", "random", "adaptive", "knn", "irt")
LEVEL = 0.9
NEIGHBOURS = 50
BATCH = 25  # questions an adaptive plan asks between two fits of the vector


class ItemBank2PL:
    """The known LLMs' 2PL item parameters (analysis/irt.py fit_2pl) as a catsim item bank."""

    def __init__(self, a: np.ndarray, b: np.ndarray):
        from catsim.item_bank import ItemBank
        b = np.clip(np.nan_to_num(b, nan=0.0), -8, 8)  # a near-zero slope leaves b meaningless
        self.bank = ItemBank(np.c_[a, b], validate=False)

    def estimate(self, rows: np.ndarray, correct: np.ndarray) -> tuple[float, float]:
        """(ability, its standard error) from answers to question `rows`."""
        from catsim import irt
        from catsim.estimation import NumericalSearchEstimator
        theta = NumericalSearchEstimator().estimate(item_bank=self.bank, administered_items=[int(r) for r in rows],
                                                    response_vector=[bool(c) for c in correct], est_theta=0.0)
        theta = float(np.clip(theta, -6, 6))
        return theta, float(irt.see(theta, self.bank.items[rows]))

    def proba(self, theta: float, rows: np.ndarray) -> np.ndarray:
        from catsim import irt
        return irt.icc_hpc(theta, self.bank.items[rows])


def wilson(k: float, n: int, population: int, level: float = LEVEL) -> tuple[float, float]:
    """Wilson's interval for a share from n of `population` items drawn without replacement."""
    z = norm.ppf(0.5 + level / 2)
    n_eff = n * (population - 1) / max(population - n, 1e-9) if n < population else 1e12
    p = k / n
    centre = (p + z * z / (2 * n_eff)) / (1 + z * z / n_eff)
    half = z * np.sqrt(p * (1 - p) / n_eff + z * z / (4 * n_eff ** 2)) / (1 + z * z / n_eff)
    return float(centre - half), float(centre + half)


def _planned(space: CoreSpace, name: str, ids: np.ndarray, row_labels: np.ndarray, benchmarks: list[str],
             strategy: str | None, checkpoints, seed: int, per_benchmark_at: int | None) -> tuple[dict, dict]:
    """Run the space's plan to the largest checkpoint: {N: (estimate, low, high)}, and the
    per-benchmark accuracies at `per_benchmark_at` answers. A plan asks BATCH questions at a
    time and re-plans; an order fixed in advance (the default's anchors, a random order) is asked
    as the order's prefix, at once."""
    label_of = dict(zip(ids.tolist(), row_labels.tolist()))
    allowed = set(label_of)

    def planned(answered: dict, k: int):
        return plan(space, name, answered, k, strategy=strategy, benchmarks=benchmarks, allowed=allowed, seed=seed,
                    order_seed=seed)
    answered: dict[str, float] = {}
    out, per_bench = {}, {}
    ahead = planned({}, max(checkpoints)).questions if strategy in (None, "random") else None
    p = planned(answered, BATCH) if ahead is None else None  # a plan always answers for `answered` as it is
    for n in checkpoints:
        if ahead is not None:
            answered = {q["question_id"]: label_of[q["question_id"]] for q in ahead[:n]}
            p = planned(answered, 0)
        while len(answered) < n and p.questions:
            answered.update({q["question_id"]: label_of[q["question_id"]] for q in p.questions[:n - len(answered)]})
            p = planned(answered, BATCH)
        o = p.predicted["overall"]
        out[n] = (o["accuracy"], o["low"], o["high"])
        if n == per_benchmark_at:
            per_bench = {b: v["accuracy"] for b, v in p.predicted.items() if b != "overall"}
    return out, per_bench


def onboard_one(space: CoreSpace, name: str, labels: np.ndarray, question_ids: np.ndarray, benchmarks: np.ndarray,
                known: np.ndarray, bank: ItemBank2PL, checkpoints=CHECKPOINTS, seed: int = 0,
                per_benchmark_at: int = 100, strategies=STRATEGIES, sharpened: CoreSpace | None = None) -> dict:
    """One new LLM (`labels`: its label per question of the space, NaN where it has none;
    `known`: questions x known LLMs, NaN where unanswered): {"truth", strategy: {N: (estimate,
    low, high)}, "per_benchmark": the default's accuracies at `per_benchmark_at` answers}; with
    `sharpened` (items.sharpen's space), also the default strategy on it ("sharpened", and its
    "per_benchmark_sharpened")."""
    rows = np.flatnonzero(~np.isnan(labels))
    y = labels[rows]
    truth = float(y.mean())
    M = len(rows)
    order = np.random.default_rng(seed).permutation(len(rows))  # the random questions, as a prefix
    out: dict = {"truth": truth, "questions": M}
    benches = sorted(set(benchmarks[rows].tolist()))
    if "default" in strategies:
        out["default"], out["per_benchmark"] = _planned(space, name, question_ids[rows], y, benches, None, checkpoints,
                                                        seed, per_benchmark_at)
    if "vector" in strategies:
        out["vector"], out["per_benchmark_vector"] = _planned(space, name, question_ids[rows], y, benches, "random",
                                                              checkpoints, seed, per_benchmark_at)
    if sharpened is not None:
        out["sharpened"], out["per_benchmark_sharpened"] = _planned(sharpened, name, question_ids[rows], y, benches,
                                                                    "random", checkpoints, seed, per_benchmark_at)
    if "adaptive" in strategies:
        out["adaptive"], _ = _planned(space, name, question_ids[rows], y, benches, "adaptive", checkpoints, seed, None)
    for key in ("random", "knn", "irt"):
        if key in strategies:
            out[key] = {}
    for n in checkpoints:
        at = order[:n]
        a_rows, a_y, rest = rows[at], y[at], rows[np.setdiff1d(np.arange(M), at)]
        seen = a_y.sum()
        if "random" in strategies:
            out["random"][n] = (float(a_y.mean()), *wilson(seen, n, M))
        if "knn" in strategies:
            out["knn"][n] = _knn(known, a_rows, a_y, rest, seen, M)
        if "irt" in strategies:
            theta, se = bank.estimate(a_rows, a_y >= 0.5)
            z = norm.ppf(0.5 + LEVEL / 2)
            at_theta = [(seen + bank.proba(t, rest).sum()) / M for t in (theta, theta - z * se, theta + z * se)]
            out["irt"][n] = (float(at_theta[0]), float(min(at_theta)), float(max(at_theta)))
    return out


def _knn(known: np.ndarray, a_rows: np.ndarray, a_y: np.ndarray, rest: np.ndarray, seen: float, M: int) -> tuple:
    """The NEIGHBOURS known LLMs that answered `a_rows` most alike (of those that answered at
    least 80% of them) stand in on the `rest` of its questions."""
    answers = known[a_rows]  # answered questions x known LLMs
    answered = ~np.isnan(answers)
    shared = answered.sum(0)
    agree = (answered & ((answers >= 0.5) == (a_y[:, None] >= 0.5))).sum(0)
    score = np.where(shared >= 0.8 * len(a_rows), agree / np.maximum(shared, 1), -1.0)
    nearest = np.argsort(-score, kind="stable")[:NEIGHBOURS]
    if not len(rest):
        return float(seen / M), float(seen / M), float(seen / M)
    theirs = known[np.ix_(rest, nearest)]  # the rest of its questions x the neighbours
    fill = float(np.nanmean(theirs)) if np.isfinite(theirs).any() else 0.5
    theirs = np.where(np.isnan(theirs), fill, theirs)  # a neighbour that lacks a question: the neighbours' mean
    estimate = (seen + theirs.mean(1).sum()) / M
    lo, hi = np.percentile(theirs.mean(0), [100 * (1 - LEVEL) / 2, 100 * (1 + LEVEL) / 2])
    return float(estimate), float((seen + len(rest) * lo) / M), float((seen + len(rest) * hi) / M)


def summarise(runs: list[dict], checkpoints=CHECKPOINTS, strategies=STRATEGIES) -> dict:
    """{"N": {strategy: {accuracy_mae (points), interval_coverage, llms}}} over the new LLMs."""
    out = {}
    for n in checkpoints:
        out[str(n)] = {}
        for s in strategies:
            rows = [(r["truth"], *r[s][n]) for r in runs if n in r.get(s, {}) and r["questions"] >= n]
            if not rows:
                continue
            t, est, lo, hi = np.array(rows).T
            out[str(n)][s] = {"accuracy_mae": float(np.mean(np.abs(est - t)) * 100),
                              "interval_coverage": float(np.mean((lo <= t) & (t <= hi))), "llms": len(rows)}
    return out
