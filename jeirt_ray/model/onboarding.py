"""Onboarding a new LLM: fit its one vector with every question frozen.

With the question directions u = E_Q / ||E_Q|| and norms fixed, P(correct) = sigmoid(u . theta -
||E_Q||) is a logistic regression in theta with a fixed offset: convex, solved here exactly by
Newton's method. The prior is Gaussian around the known LLMs (their mean vector and covariance,
`population_prior`), which keeps a fit from a handful of answers sensible and still lets a new
LLM stronger than every known one move out along the direction in which the known ones differ. The Laplace
posterior (the inverse Hessian at the optimum) says how uncertain each question's predicted
logit is, so the questions with the largest expected information are the ones to evaluate next.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .metrics import binary_metrics
from .space import CoreSpace


@dataclass
class RowFit:
    theta: np.ndarray  # (d,)
    cov: np.ndarray  # (d, d) Laplace posterior covariance
    iterations: int


def fit_row(u: np.ndarray, norm: np.ndarray, y: np.ndarray, prior_mean: np.ndarray, prior_cov: float | np.ndarray,
            max_iter: int = 50, tol: float = 1e-8) -> RowFit:
    """MAP vector of one LLM from its answers y in [0, 1] (soft labels work) to questions (u, norm),
    under a Gaussian prior (`prior_cov`: a (d, d) covariance, or one variance for every coordinate)."""
    u = np.asarray(u, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    norm = np.asarray(norm, dtype=np.float64)
    d = u.shape[1]
    prec = np.linalg.inv(prior_cov) if np.ndim(prior_cov) == 2 else np.eye(d) / float(prior_cov)
    theta = np.asarray(prior_mean, dtype=np.float64).copy()
    for it in range(1, max_iter + 1):
        p = 1.0 / (1.0 + np.exp(-(u @ theta - norm)))
        grad = u.T @ (p - y) + prec @ (theta - prior_mean)
        hess = (u * (p * (1 - p))[:, None]).T @ u + prec
        step = np.linalg.solve(hess, grad)
        theta -= step
        if float(np.abs(step).max()) < tol:
            break
    p = 1.0 / (1.0 + np.exp(-(u @ theta - norm)))
    hess = (u * (p * (1 - p))[:, None]).T @ u + prec
    return RowFit(theta, np.linalg.inv(hess), it)


def population_prior(table: np.ndarray) -> tuple[np.ndarray, float | np.ndarray]:
    """The known LLMs' mean vector and covariance: their sample covariance plus their average
    per-coordinate variance on the diagonal. The sample covariance lets a new LLM move as far as
    the known ones differ (most of all along the direction of overall strength, where a prior of
    one variance per coordinate would pull a stronger-than-known LLM back toward the mean); the
    diagonal keeps every other direction open and the matrix invertible."""
    table = np.asarray(table, dtype=np.float64)
    if len(table) < 2:
        return table.mean(0), 1.0
    centred = table - table.mean(0)
    cov = centred.T @ centred / (len(table) - 1)
    return table.mean(0), cov + np.eye(table.shape[1]) * float(np.trace(cov) / table.shape[1])


def directions(space: CoreSpace, x: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per member, the unit directions u (n, d) and norms (n,) of the questions with embeddings x."""
    out = []
    for i in range(len(space.members)):
        e = space.question_vectors(x, member=i).astype(np.float64)
        norm = np.linalg.norm(e, axis=1).clip(1e-6)
        out.append((e / norm[:, None], norm))
    return out


def known_proba(space: CoreSpace, dirs: list[tuple[np.ndarray, np.ndarray]], models: list[int]) -> np.ndarray:
    """(questions, len(models)) P(correct) of the space's LLMs `models` (indices), averaged over
    members, from the questions' `directions`: predict_proba without a second pass through the
    adapter."""
    return np.mean([1 / (1 + np.exp(-(u @ space.model_vectors(i)[models].T - n[:, None])))
                    for i, (u, n) in enumerate(dirs)], axis=0)


def isotropic_prior(table: np.ndarray) -> tuple[np.ndarray, float]:
    """The known LLMs' mean vector and their average per-coordinate variance (the earlier prior,
    kept as the baseline of benchmarks/onboarding.py --prior isotropic)."""
    table = np.asarray(table, dtype=np.float64)
    return table.mean(0), float(table.var(0).mean()) if len(table) > 1 else 1.0


PRIORS = {"population": population_prior, "isotropic": isotropic_prior}


def member_priors(space: CoreSpace, name: str, prior: str = "population", exclude: list[str] | tuple = (),
                  scale: float = 1.0) -> list:
    """Per member, the prior (mean, covariance) of LLM `name`'s vector, built by `PRIORS[prior]`
    from the space's other LLMs less those in `exclude` (LLMs held out of training: never fitted),
    its covariance times `scale` (wider than the known LLMs' spread: tried for the accuracy
    estimate, benchmarks/onboarding.py --estimate-prior-scale)."""
    if prior not in PRIORS:
        raise ValueError(f"unknown prior {prior!r}: one of {sorted(PRIORS)}")
    known = [i for i, m in enumerate(space.model_names) if m != name and m not in exclude] \
        or list(range(len(space.model_names)))
    out = [PRIORS[prior](space.model_vectors(i)[known]) for i in range(len(space.members))]
    return [(mean, cov * scale) for mean, cov in out]


@dataclass
class Onboarded:
    space: CoreSpace  # the space with the LLM added (or updated)
    report: dict  # held-back quality, fit time, suggestions


def onboard(space: CoreSpace, name: str, x: np.ndarray, labels: np.ndarray, *, holdout: float = 0.2,
            seed: int = 0, candidates: np.ndarray | None = None, candidate_ids: list[str] | None = None,
            suggest: int = 10, prior: str = "population", exclude: list[str] | tuple = ()) -> Onboarded:
    """Fit LLM `name` from its labels on questions with encoder embeddings `x`.

    A seeded `holdout` share of the responses is held back to measure the fit (then the final
    vector is refitted on all of them). `candidates` (embeddings of questions the LLM has not
    answered, ids in `candidate_ids`) are ranked by expected information, the top `suggest`
    returned. `prior`: "population" (`population_prior`) or "isotropic" (`isotropic_prior`), built
    from the space's other LLMs less those in `exclude` (LLMs held out of training: never fitted)."""
    import time

    labels = np.asarray(labels, dtype=np.float64)
    if len(labels) == 0:
        raise ValueError("no responses to fit")
    dirs = directions(space, x)
    priors = member_priors(space, name, prior, exclude)

    report: dict = {"model": name, "responses": int(len(labels)), "members": len(space.members)}
    rng = np.random.default_rng(seed)
    held = rng.random(len(labels)) < holdout if len(labels) >= 10 and holdout > 0 else np.zeros(len(labels), bool)
    if held.any() and (~held).any():
        probs = np.mean([1 / (1 + np.exp(-(u[held] @ fit_row(u[~held], n[~held], labels[~held], *pr).theta - n[held])))
                         for (u, n), pr in zip(dirs, priors)], axis=0)
        report["heldout"] = {"responses": int(held.sum()), **binary_metrics(probs, labels[held])}
    start = time.perf_counter()
    fits = [fit_row(u, n, labels, *pr) for (u, n), pr in zip(dirs, priors)]
    report["fit_seconds"] = time.perf_counter() - start
    report["newton_iterations"] = [f.iterations for f in fits]
    if candidates is not None and len(candidates):
        info = np.zeros(len(candidates))
        for (u, n), f in zip(directions(space, candidates), fits):
            p = 1 / (1 + np.exp(-(u @ f.theta - n)))
            # Fisher information of a new answer: p(1-p) times the posterior variance of its logit
            info += p * (1 - p) * ((u @ f.cov) * u).sum(1)  # u_i' cov u_i, via one matrix product
        top = np.argsort(-info)[:suggest]
        ids = candidate_ids if candidate_ids is not None else [str(i) for i in range(len(candidates))]
        report["next_questions"] = [{"question_id": ids[i], "information": float(info[i] / len(fits))} for i in top]
    new_space = space.with_model(name, [torch.as_tensor(f.theta, dtype=torch.float32).numpy() for f in fits])
    # the vector's Laplace variance per coordinate and member: how far graded traffic may still move
    # it, and where exploring it pays (learning/online.py OnlineState)
    new_space.metadata.setdefault("onboarded", {})[name] = {
        **{k: v for k, v in report.items() if k != "next_questions"},
        "vector_var": [[float(f"{v:.4g}") for v in np.diag(f.cov)] for f in fits]}
    return Onboarded(new_space, report)
