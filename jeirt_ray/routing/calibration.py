"""Calibration of P(correct), which cost routing relies on (a policy that trades p against price
needs p to mean what it says).

- `ece`: expected calibration error, |mean p - mean label| per equal-width bin of p, weighted by
  the bin's share of the answers;
- `Temperatures`: a temperature per LLM (p -> sigmoid(logit(p) / T)), fitted on validation
  answers by log-loss; `fit_temperatures` keeps each only where it lowers that LLM's validation
  log-loss (else T = 1);
- `choose_recalibration`: none, one temperature for all LLMs, or one per LLM, whichever has the
  lowest log-loss on validation answers it was not fitted on (two halves of the validation
  questions, each scored with the fit on the other); the choice is then refitted on all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import expit, logit

EPS = 1e-6


def ece(p: np.ndarray, y: np.ndarray, bins: int = 15) -> float:
    """Expected calibration error of probabilities `p` against labels `y` (soft labels count as
    their value), over equal-width bins."""
    p, y = np.asarray(p, float).ravel(), np.asarray(y, float).ravel()
    if not len(p):
        return float("nan")
    which = np.minimum((p * bins).astype(int), bins - 1)
    total = 0.0
    for b in np.unique(which):
        m = which == b
        total += m.sum() * abs(p[m].mean() - y[m].mean())
    return float(total / len(p))


def log_loss(p: np.ndarray, y: np.ndarray) -> float:
    p = np.clip(p, EPS, 1 - EPS)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


@dataclass
class Temperatures:
    """Per-LLM temperatures (1: unchanged)."""

    t: np.ndarray  # (M,)

    def apply(self, p: np.ndarray) -> np.ndarray:
        """(n, M) probabilities -> recalibrated; LLMs beyond the fitted ones are unchanged."""
        t = np.ones(p.shape[1])
        t[:min(len(self.t), p.shape[1])] = self.t[:p.shape[1]]
        return expit(logit(np.clip(p, EPS, 1 - EPS)) / t[None, :])


def _best_temperature(z: np.ndarray, y: np.ndarray) -> float:
    return float(minimize_scalar(lambda T: log_loss(expit(z / T), y), bounds=(0.05, 20.0), method="bounded").x)


def global_temperature(p: np.ndarray, labels: np.ndarray) -> Temperatures:
    """One temperature for every LLM, fitted on all validation answers."""
    seen = ~np.isnan(labels)
    t = _best_temperature(logit(np.clip(p[seen], EPS, 1 - EPS)), labels[seen])
    return Temperatures(np.full(p.shape[1], t))


def choose_recalibration(p: np.ndarray, labels: np.ndarray, seed: int = 0) -> tuple[Temperatures, dict]:
    """None, a global temperature or per-LLM temperatures: the one with the lowest out-of-half
    validation log-loss, refitted on all validation answers; and a report of the three."""
    halves = np.random.default_rng(seed).random(len(p)) < 0.5
    fits = {"none": lambda pp, yy: Temperatures(np.ones(p.shape[1])), "global": global_temperature,
            "per_llm": lambda pp, yy: fit_temperatures(pp, yy)[0]}
    scores = {}
    for name, fit in fits.items():
        losses = []
        for half in (True, False):
            a, b = halves == half, halves != half
            seen = ~np.isnan(labels[b])
            losses.append(log_loss(fit(p[a], labels[a]).apply(p[b])[seen], labels[b][seen]) * seen.sum())
        scores[name] = float(sum(losses) / (~np.isnan(labels)).sum())
    choice = min(scores, key=scores.get)
    temps = fits[choice](p, labels)
    seen = ~np.isnan(labels)
    return temps, {"choice": choice, "out_of_half_log_loss": scores,
                   "val_log_loss_before": log_loss(p[seen], labels[seen]),
                   "val_log_loss_after": log_loss(temps.apply(p)[seen], labels[seen]),
                   "temperatures": temps.t.tolist()}


def fit_temperatures(p: np.ndarray, labels: np.ndarray, min_answers: int = 30) -> tuple[Temperatures, dict]:
    """Temperatures from validation `p` and `labels` ((n, M), labels NaN where unobserved), each
    kept only where it lowers that LLM's validation log-loss and the LLM has `min_answers`
    answers; and a report (validation log-loss before and after, LLMs changed)."""
    M = p.shape[1]
    t = np.ones(M)
    for m in range(M):
        seen = ~np.isnan(labels[:, m])
        if seen.sum() < min_answers:
            continue
        z, y = logit(np.clip(p[seen, m], EPS, 1 - EPS)), labels[seen, m]
        best = minimize_scalar(lambda T: log_loss(expit(z / T), y), bounds=(0.05, 20.0), method="bounded")
        if best.fun < log_loss(expit(z), y) - 1e-9:
            t[m] = float(best.x)
    temps = Temperatures(t)
    seen = ~np.isnan(labels)
    before = log_loss(p[seen], labels[seen])
    after = log_loss(temps.apply(p)[seen], labels[seen])
    return temps, {"val_log_loss_before": before, "val_log_loss_after": after,
                   "llms_recalibrated": int((t != 1).sum()), "temperatures": t.tolist()}
