"""The new LLM's accuracy from its answers and the space's predictions together.

The space predicts P(correct) for every question of a benchmark; the mean is its estimate of
the new LLM's accuracy there, off by the vector's uncertainty and the space's own error (which
no number of answers removes). The answers themselves measure that error: on questions drawn at
random, the mean of (answer - prediction) estimates by how much the predicted accuracy is off,
without bias whatever the space gets wrong (the difference estimator of survey sampling, the
idea of tinyBenchmarks' gp-IRT). Two details keep it honest:

- Only answers to questions *drawn at random* carry the correction: adaptive questions are
  chosen where the space is least sure, so their residuals say nothing unbiased about the rest.
  A strategy's random draws are the longest answered prefix of a seeded order of the questions
  (`sample_order`; `random_draws`): any prefix of a random order is a simple random sample, so
  their inclusion probabilities are equal and known, and no state beyond the answers is needed.
- A `weighted` order draws the questions with probabilities of its own, known in advance
  (`draw_probabilities`: in part in proportion to how uncertain a known LLM's answer is, so that
  the draws land where residuals vary most, in part uniform, which bounds every weight): i.i.d.
  draws with replacement, so any prefix is an i.i.d. sample with those probabilities, and each
  residual is weighted by one over its probability (the Hansen-Hurwitz / Hajek estimator).
- Each residual is taken from a fit that did not see that answer (cross-fitting in `FOLDS`
  folds): a vector fitted to an answer predicts it too well, which would shrink the correction.

The correction's own noise (the residuals' variance over their number) is weighed against the
model's (the vector's draws and the space's error) by inverse variance: with few random answers
the space's prediction stands, with many the measured correction takes over (`combine`).
Answered questions of the population count as observed (their labels replace the predictions).
"""

from __future__ import annotations

import numpy as np

from .onboarding import fit_row

FOLDS = 10
MIN_RANDOM = 8  # random answers (in a group) below which no correction is made
WEIGHTED_SHARE = 0.5  # of a weighted draw's probability, the share that follows the answers' spread; the rest is uniform
WEIGHTED_DRAWS = 4  # a weighted order's length, in items: long enough to reach most of them


def draw_probabilities(p_known: np.ndarray, share: float = WEIGHTED_SHARE) -> np.ndarray:
    """Each item's probability in a weighted draw, from the known LLMs' P(correct) on it
    (`p_known`: items x LLMs): `share` of it in proportion to sqrt(p (1 - p)), p the known LLMs'
    mean (the spread of a known LLM's answer, which a residual's noise grows with: the optimal
    design of the difference estimator), the rest uniform, so no weight exceeds 1 / (1 - share)
    times the uniform's."""
    p = np.clip(np.asarray(p_known, dtype=np.float64).mean(axis=1), 0.0, 1.0)
    uniform = np.full(len(p), 1.0 / len(p))
    spread = np.sqrt(p * (1 - p))
    return (1 - share) * uniform + share * (spread / spread.sum() if spread.sum() > 0 else uniform)


def sample_order(groups: np.ndarray, seed: int, stratified: bool = False,
                 probabilities: np.ndarray | None = None) -> np.ndarray:
    """A seeded order of the items (indices). `stratified`: each group (label) spread evenly
    along the order, in proportion to its size, so every prefix is a proportional stratified
    sample. `probabilities`: i.i.d. draws with these probabilities (items repeat; WEIGHTED_DRAWS
    times the items' number), so every prefix is an i.i.d. sample of them."""
    rng = np.random.default_rng(seed)
    if probabilities is not None:
        return rng.choice(len(groups), size=WEIGHTED_DRAWS * len(groups), p=probabilities)
    if not stratified:
        return rng.permutation(len(groups))
    groups = np.asarray(groups)
    key = np.empty(len(groups))
    for g in dict.fromkeys(groups.tolist()):
        rows = np.flatnonzero(groups == g)
        # item j of a group of n sits at (j + u) / n of the way: proportional at every prefix
        key[rows] = (rng.permutation(len(rows)) + rng.random()) / len(rows)
    return np.lexsort((rng.random(len(groups)), key))


def random_draws(order: np.ndarray, answered: np.ndarray, skip: np.ndarray | None = None) -> np.ndarray:
    """The random draws among the answered items: the answered items of the longest prefix of
    `order` with no unanswered item, passing over those in `skip` (items that cannot be asked,
    such as questions no answer key grades) (`answered`, `skip`: boolean masks over the items)."""
    blocking = ~answered if skip is None else ~answered & ~skip
    missing = np.flatnonzero(blocking[order])
    prefix = order[: missing[0] if len(missing) else len(order)]
    return prefix[answered[prefix]]


def next_in_order(order: np.ndarray, free: np.ndarray, k: int) -> np.ndarray:
    """The first `k` items of `order` still `free` (a boolean mask), each once (a weighted order
    repeats items)."""
    ahead = order[free[order]]
    _, first = np.unique(ahead, return_index=True)
    return ahead[np.sort(first)][:k]


def crossfit_residuals(dirs: list[tuple[np.ndarray, np.ndarray]], labels: np.ndarray, priors: list,
                       draws: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(residuals, predictions): per random draw (indices into the answers), its label minus its
    P(correct) from a vector fitted to every other answer but those of its fold, and that P
    (`dirs`: per member, the answered questions' directions and norms; `priors`: per member, the
    vector's prior; the members' P averaged)."""
    labels = np.asarray(labels, dtype=np.float64)
    p = np.zeros(len(draws))
    if not len(draws):
        return p, p
    fold = np.random.default_rng(seed).permutation(len(draws)) % min(FOLDS, len(draws))
    for f in np.unique(fold):
        held = draws[fold == f]
        keep = np.ones(len(labels), dtype=bool)
        keep[held] = False
        p[fold == f] = np.mean([1 / (1 + np.exp(-(u[held] @ fit_row(u[keep], n[keep], labels[keep], *prior).theta
                                                   - n[held])))
                                for (u, n), prior in zip(dirs, priors)], axis=0)
    return labels[draws] - p, p


def corrections(residuals: np.ndarray, predictions: np.ndarray, groups: np.ndarray | None,
                population_groups: np.ndarray | None, weights: np.ndarray | None = None) -> dict:
    """{"overall" | group: (mean residual, its variance)} from the random draws' residuals and
    the predictions they were taken from (`groups`: their group labels; `weights`: one over each
    draw's probability, for a weighted order: the Hajek mean). The variance of a residual is
    taken as at least what the predictions themselves imply (their p(1 - p)): a few draws of a
    strong LLM all answered right would otherwise claim no noise at all. Overall,
    post-stratified by the population's group shares when every group has at least 2 draws; a
    group (or overall) with fewer than MIN_RANDOM draws gets none."""
    out: dict[str, tuple[float, float]] = {}
    w = np.ones(len(residuals)) if weights is None else np.asarray(weights, dtype=np.float64)

    def weighted(sel: np.ndarray) -> tuple[float, float]:
        n, a = int(sel.sum()), w[sel] / w[sel].sum()
        r, p = residuals[sel], predictions[sel]
        mean = float(a @ r)
        return mean, max(float((a ** 2) @ (r - mean) ** 2) * n / (n - 1), float((a ** 2) @ (p * (1 - p))))

    def mean_var(sel: np.ndarray) -> tuple[float, float] | None:
        return weighted(sel) if sel.sum() >= MIN_RANDOM else None

    every = np.ones(len(residuals), dtype=bool)
    if groups is None or population_groups is None:
        if (mv := mean_var(every)) is not None:
            out["overall"] = mv
        return out
    for g in dict.fromkeys(population_groups.tolist()):
        if (mv := mean_var(groups == g)) is not None:
            out[g] = mv
    if len(residuals) >= MIN_RANDOM:
        labels, sizes = np.unique(population_groups, return_counts=True)
        if all((groups == g).sum() >= 2 for g in labels):
            share = sizes / sizes.sum()
            parts = np.array([weighted(groups == g) for g in labels])
            out["overall"] = (float(share @ parts[:, 0]), float((share ** 2) @ parts[:, 1]))
        else:
            out["overall"] = mean_var(every)
    return out


def combine(point: float, model_samples: np.ndarray, correction: tuple[float, float] | None,
            unobserved: float = 1.0, seed: int = 0) -> tuple[float, np.ndarray, float]:
    """(estimate, its samples, the correction's weight): the model's point estimate moved by
    the correction (mean residual, variance), weighted by inverse variance against the model's
    own spread (`model_samples`); only the `unobserved` share of the population is corrected."""
    if correction is None:
        return point, model_samples, 0.0
    c, v_c = correction[0] * unobserved, correction[1] * unobserved ** 2
    v_m = float(np.var(model_samples))
    weight = v_m / (v_m + v_c) if v_m + v_c > 0 else 0.0
    noise = np.random.default_rng(seed).normal(0.0, np.sqrt(v_c), len(model_samples))
    estimate = point + weight * c
    return estimate, estimate + (1 - weight) * (model_samples - point) + weight * noise, weight
