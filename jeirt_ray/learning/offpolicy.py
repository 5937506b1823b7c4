"""Off-policy evaluation: what another routing policy would have scored on logged traffic.

Each logged decision has its context, the LLM the logging policy chose, the probability with
which it chose it (the propensity) and the graded outcome. A target policy is given as the
probability with which it would choose each LLM on each logged query (n, LLMs); a deterministic
policy is one-hot. Estimates, with 95% bootstrap intervals over the logged queries:

- `ips`: inverse propensity scoring, mean of pi(a|x) / mu(a|x) x r (unbiased where mu > 0
  wherever pi > 0; high variance when they differ much);
- `snips`: the self-normalised form (divides by the mean weight: a little bias, less variance);
- `dr`: doubly robust, a reward model's prediction for the target's choices corrected by the
  importance-weighted residual of the logged one (unbiased if either the propensities or the
  reward model are right).
"""

from __future__ import annotations

import numpy as np


def evaluate_policy(chosen: np.ndarray, propensity: np.ndarray, reward: np.ndarray, target: np.ndarray,
             reward_model: np.ndarray | None = None, n_boot: int = 1000, seed: int = 0) -> dict:
    """The target policy's mean reward on the logged queries (`chosen`, `propensity`, `reward`:
    one per query; `target`: (n, LLMs) the target's choice probabilities; `reward_model`: (n, LLMs)
    predicted rewards, for the doubly robust estimate)."""
    parts, weight = decision_values(chosen, propensity, reward, target, reward_model)
    n = len(weight)
    rng = np.random.default_rng(seed)
    boot = rng.integers(0, n, size=(n_boot, n))
    out = {"n": n, "mean_weight": float(weight.mean()), "max_weight": float(weight.max())}
    for name, values in parts.items():
        out[name] = float(values.mean())
        out[f"{name}_ci95"] = _interval(values[boot].mean(1))
    reward = np.asarray(reward, dtype=np.float64)
    snips = (weight * reward)[boot].sum(1) / np.maximum(weight[boot].sum(1), 1e-12)
    out["snips"] = float((weight * reward).sum() / max(weight.sum(), 1e-12))
    out["snips_ci95"] = _interval(snips)
    return out


def decision_values(chosen: np.ndarray, propensity: np.ndarray, reward: np.ndarray, target: np.ndarray,
                    reward_model: np.ndarray | None = None) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """({"ips": ..., "dr": ... (with a reward model)}: each decision's term, whose mean is the
    estimate; the importance weights pi(a|x) / mu(a|x)), checked as evaluate_policy's arguments."""
    chosen = np.asarray(chosen, dtype=np.int64)
    propensity = np.asarray(propensity, dtype=np.float64)
    reward = np.asarray(reward, dtype=np.float64)
    target = np.asarray(target, dtype=np.float64)
    n = len(chosen)
    if not (len(propensity) == len(reward) == len(target) == n) or n == 0:
        raise ValueError(f"logged decisions: {n} choices, {len(propensity)} propensities, {len(reward)} rewards, "
                         f"{len(target)} target rows: one each per decision, at least one")
    if (propensity <= 0).any() or (propensity > 1).any() or not np.isfinite(propensity).all():
        raise ValueError("every propensity must be in (0, 1]: a decision logged with propensity 0 cannot be reweighted")
    rows = np.arange(n)
    weight = target[rows, chosen] / propensity
    parts = {"ips": weight * reward}
    if reward_model is not None:
        q = np.asarray(reward_model, dtype=np.float64)
        parts["dr"] = (target * q).sum(1) + weight * (reward - q[rows, chosen])
    return parts, weight


def one_hot(choices: np.ndarray, k: int) -> np.ndarray:
    """A deterministic policy's choice probabilities."""
    out = np.zeros((len(choices), k))
    out[np.arange(len(choices)), np.asarray(choices, dtype=np.int64)] = 1.0
    return out


def _interval(samples: np.ndarray) -> list[float]:
    return [float(np.percentile(samples, 2.5)), float(np.percentile(samples, 97.5))]
