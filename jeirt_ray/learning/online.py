"""Learning from outcomes: each LLM's vector with a Gaussian posterior, updated as answers are graded.

JE-IRT's P(correct) = sigmoid(u . theta - ||E_Q||) is, for a fixed question (direction u, norm
||E_Q||), a logistic regression in the LLM's vector theta. The trained vector is the prior mean
and `prior_var` (chosen on validation: how far traffic may move a vector) its isotropic
variance; each graded outcome then updates the mean and covariance by one step of online
Bayesian logistic regression (the Laplace / extended-Kalman update, a rank-one change of the
covariance: O(d^2) per outcome, no retraining and no adapter change). Outcomes may be soft (a
grade in [0, 1]). Every member of the space's ensemble keeps its own state; predictions average
the members, as the space's do.

The question directions come from the space (`directions`), so a new query text enters through
the encoder and the adapter as any routed query does. The state is saved next to the space
(`save`, `load`), so nothing learned is lost on a restart.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..model.onboarding import directions
from ..model.space import CoreSpace

STATE_FILE = "online.safetensors"
# the learning loop's defaults (graded traffic, no exploration), chosen on validation categories
# (benchmarks/feedback_loop.py, docs/results/learning.md); the exploring learner chose its own
# (learning.explore.DEFAULTS)
LOOP_DEFAULTS = {"prior_var": 0.03, "residual_var": 0.0, "evidence": 0.0}


@dataclass
class Outcomes:
    """A batch of graded outcomes: question embeddings from the encoder (`x`, n x D), the LLM that
    answered each (`llm`: column indices of the space), its grade in [0, 1] (`y`), and how much
    each counts (`weight`, default 1: a weight of 2 counts as the outcome seen twice in one
    batch, 0 as not seen)."""
    x: np.ndarray
    llm: np.ndarray
    y: np.ndarray
    weight: np.ndarray | None = None

    def __post_init__(self):
        self.x = np.asarray(self.x, dtype=np.float32)
        self.llm = np.asarray(self.llm, dtype=np.int64).reshape(-1)
        self.y = np.asarray(self.y, dtype=np.float64).reshape(-1)
        if self.x.ndim != 2 or not (len(self.x) == len(self.llm) == len(self.y)):
            raise ValueError(f"outcomes: x {self.x.shape}, llm {self.llm.shape} and y {self.y.shape} must have one "
                             "row per outcome")
        bad = ~np.isfinite(self.y) | (self.y < 0) | (self.y > 1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"outcome {i}: grade {float(self.y[i])!r} is not a number from 0 to 1")
        self.weight = np.ones(len(self.y)) if self.weight is None else \
            np.asarray(self.weight, dtype=np.float64).reshape(-1)
        bad = ~np.isfinite(self.weight) | (self.weight < 0)
        if len(self.weight) != len(self.y) or bad.any():
            raise ValueError(f"outcomes: weight must be one finite number >= 0 per outcome (got {self.weight.shape}, "
                             f"{int(bad.sum())} bad)")


class OnlineState:
    """Per member m and LLM k: the posterior mean theta[m][k] (d [+ D with a residual]) and its
    covariance cov[m][k]."""

    def __init__(self, space: CoreSpace, prior_var: float = LOOP_DEFAULTS["prior_var"],
                 evidence: float = LOOP_DEFAULTS["evidence"], residual_var: float = LOOP_DEFAULTS["residual_var"],
                 sample: int = 2000):
        """`prior_var`: how far outcomes may move a vector in any direction; `evidence`: the share
        of the training questions' information (p(1-p) u u' per LLM, from the space's stored
        questions) added to the prior's precision, so that a vector moves, and exploration looks,
        mostly where training saw little (off the map); `residual_var`: above 0, each LLM also
        learns a correction of its logit that is linear in the query's unit encoder embedding
        (the encoder's many dimensions keep what one category teaches from spilling onto others,
        where the space's d dimensions share it), zero at the start. Chosen on validation."""
        if space.kind != "jeirt":
            raise TypeError(f"online learning needs a JE-IRT space, not {space.kind!r}")
        if not np.isfinite(prior_var) or prior_var <= 0:
            raise ValueError(f"prior_var must be a positive number, not {prior_var!r}")
        if not np.isfinite(evidence) or evidence < 0:
            raise ValueError(f"evidence must be a number from 0, not {evidence!r}")
        if not np.isfinite(residual_var) or residual_var < 0:
            raise ValueError(f"residual_var must be a number from 0, not {residual_var!r}")
        self.space, self.prior_var, self.evidence = space, float(prior_var), float(evidence)
        self.residual_var = float(residual_var)
        self.d = space.model_vectors(0).shape[1]  # the space's own dimensions; the residual's follow
        extra = space.in_dim if residual_var > 0 else 0
        self.theta = [np.hstack([space.model_vectors(m).astype(np.float64), np.zeros((len(space.model_names), extra))])
                      for m in range(len(space.members))]
        variances = np.r_[np.full(self.d, prior_var), np.full(extra, residual_var)]
        self.cov = [np.tile(np.diag(variances), (len(t), 1, 1)) for t in self.theta]
        self.prior_diag = np.tile(variances, (len(space.model_names), 1))  # (LLMs, features): bounds each cov
        stored = space.question_embeddings
        if evidence > 0 and stored is not None and len(stored):
            rows = np.random.default_rng(0).permutation(len(stored))[:sample]
            scale = evidence * len(stored) / len(rows)
            for m, (z, n) in enumerate(self.geometry(stored[rows])):
                p = _sigmoid(z @ self.theta[m].T - n[:, None])  # (questions, LLMs)
                w = p * (1 - p) * scale
                self.cov[m] = np.linalg.inv(np.stack([np.diag(1 / variances) + (z * w[:, k:k + 1]).T @ z
                                                      for k in range(w.shape[1])]))
        self.seen = np.zeros(len(space.model_names), dtype=np.int64)  # outcomes learned per LLM
        self.new = np.zeros(len(space.model_names), dtype=bool)  # added while learning (add_llm, reset_llm)
        self._widen_onboarded()

    def _widen_onboarded(self) -> None:
        """An LLM onboarded from a few answers is known less well than a trained one: its prior is
        the onboarding fit's own variance per coordinate where that is wider than `prior_var`, and
        it counts as new (exploration tries it where it may be best, learning.explore.COLD)."""
        for name, info in (self.space.metadata.get("onboarded") or {}).items():
            var = info.get("vector_var") if isinstance(info, dict) else None
            if name not in self.names or var is None or len(var) != len(self.theta) \
                    or any(len(v) != self.d for v in var):
                continue  # onboarded before the variance was kept, or since retrained: as a trained LLM
            k = self.names.index(name)
            for m, v in enumerate(var):
                c = self.cov[m][k]
                c[:self.d, :self.d] += np.diag(np.clip(np.asarray(v, dtype=np.float64) - np.diag(c)[:self.d], 0, None))
            self.prior_diag[k] = np.max([np.diag(c[k]) for c in self.cov], axis=0)
            self.new[k] = True

    @property
    def names(self) -> list[str]:
        return self.space.model_names

    def geometry(self, x: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per member, the features (n, d [+ D]) and norms (n,) of the queries with encoder
        embeddings x: the directions u, followed with a residual by the unit encoder embeddings."""
        x = np.asarray(x, dtype=np.float32)
        geo = directions(self.space, x)
        if self.residual_var > 0:
            unit = x.astype(np.float64) / np.linalg.norm(x, axis=1, keepdims=True).clip(1e-9)
            geo = [(np.hstack([u, unit]), n) for u, n in geo]
        return geo

    def logits(self, geo) -> np.ndarray:
        """The posterior mean of every LLM's logit per member: (members, n, LLMs)."""
        return member_logits(geo, self.theta)

    def logit_variance(self, geo, only: np.ndarray | None = None) -> np.ndarray:
        """The posterior variance of every LLM's logit per member, z' cov z: (members, n, LLMs);
        with `only` (LLM columns), those LLMs' alone, 0 for the others."""
        cols = np.arange(len(self.names)) if only is None else np.asarray(only)
        out = np.zeros((len(geo), len(geo[0][0]), len(self.names)))
        for m, ((z, _), c) in enumerate(zip(geo, self.cov)):
            out[m][:, cols] = ((z @ c[cols]) * z).sum(-1).T
        return out

    def variance_bound(self, geo) -> np.ndarray:
        """An upper bound of each logit's variance, cheap: z' diag(prior) z, as outcomes (and the
        training evidence) only shrink a covariance below its prior: (members, n, LLMs)."""
        return np.stack([(z * z) @ self.prior_diag.T for z, _ in geo])

    def sample_proba(self, x: np.ndarray, draws: int, rng: np.random.Generator, geo=None) -> np.ndarray:
        """(draws, n, LLMs) P(correct) drawn from the posterior (posterior_draws; `geo`: x's
        geometry, if computed already)."""
        return posterior_draws(geo or self.geometry(x), self.theta, self.variances(), draws, rng)

    def variances(self) -> list[np.ndarray]:
        """Per member, the diagonal of each LLM's covariance: (LLMs, features)."""
        return [np.diagonal(c, axis1=1, axis2=2).copy() for c in self.cov]

    def predict_proba(self, x: np.ndarray, geo=None) -> np.ndarray:
        """(n, LLMs) P(correct) under the posterior means, averaged over members."""
        return _sigmoid(self.logits(geo or self.geometry(x))).mean(0)

    def update(self, outcomes: Outcomes, geo=None) -> None:
        """Learn a batch of outcomes: per LLM, one Laplace step for all of its outcomes in the batch
        (linearised at the current mean; the covariance by the Woodbury identity, so a batch costs a
        few matrix products per LLM, not one update per outcome)."""
        geo = geo or self.geometry(outcomes.x)
        self._check(outcomes)
        for k in np.unique(outcomes.llm):
            rows = (outcomes.llm == k) & (outcomes.weight > 0)
            for (z, n), theta, cov in zip(geo, self.theta, self.cov):
                _learn_batch(theta[k], cov[k], z[rows], n[rows], outcomes.y[rows], outcomes.weight[rows])
        np.add.at(self.seen, outcomes.llm, 1)

    def _check(self, outcomes: Outcomes) -> None:
        if len(outcomes.llm) and (outcomes.llm.min() < 0 or outcomes.llm.max() >= len(self.names)):
            raise ValueError(f"outcomes name LLM column {int(outcomes.llm.max())}; the space has {len(self.names)}")

    def update_in_order(self, outcomes: Outcomes) -> None:
        """Learn outcomes one at a time, in order: the state `update` reaches when called with each
        alone (as the replicas learn the feedback as it arrives), with the adapter run once for all."""
        self._check(outcomes)
        geo = self.geometry(outcomes.x)
        for i, k in enumerate(outcomes.llm):
            if outcomes.weight[i] == 0:
                continue
            for (z, n), theta, cov in zip(geo, self.theta, self.cov):
                _learn_batch(theta[k], cov[k], z[i:i + 1], n[i:i + 1], outcomes.y[i:i + 1], outcomes.weight[i:i + 1])
        np.add.at(self.seen, outcomes.llm, 1)

    def add_llm(self, name: str, vectors: list[np.ndarray] | None = None, var: float | None = None) -> int:
        """A new LLM (an onboarded vector per member, else the known LLMs' mean) with a prior of
        `var` (default: the known LLMs' spread per coordinate, at least prior_var): its column."""
        if name in self.names:
            raise ValueError(f"LLM {name!r} is already in the space")
        if vectors is None:
            vectors = [t[:, :self.d].mean(0) for t in self.theta]
        if var is None:
            var = max(self.prior_var, float(np.mean([t[:, :self.d].var(0).mean() for t in self.theta])))
        self.space = self.space.with_model(name, [np.asarray(v, dtype=np.float32) for v in vectors])
        extra = self.theta[0].shape[1] - self.d
        variances = np.diag(np.r_[np.full(self.d, var), np.full(extra, self.residual_var)])
        self.prior_diag = np.vstack([self.prior_diag, np.diag(variances)[None]])
        for m, v in enumerate(vectors):
            row = np.r_[np.asarray(v, dtype=np.float64), np.zeros(extra)]
            self.theta[m] = np.vstack([self.theta[m], row[None]])
            self.cov[m] = np.concatenate([self.cov[m], variances[None]])
        self.seen = np.append(self.seen, 0)
        self.new = np.append(self.new, True)
        return len(self.names) - 1

    def reset_llm(self, k: int, var: float | None = None) -> None:
        """Forget what LLM `k`'s vector knows: the known others' mean, with their spread as its
        prior (a cold start, as `add_llm` starts an LLM without labels)."""
        others = [i for i in range(len(self.names)) if i != k]
        d, extra = self.d, self.theta[0].shape[1] - self.d
        for m in range(len(self.theta)):
            known = self.theta[m][others, :d]
            v = var if var is not None else max(self.prior_var, float(known.var(0).mean()))
            self.theta[m][k] = np.r_[known.mean(0), np.zeros(extra)]
            self.cov[m][k] = np.diag(np.r_[np.full(d, v), np.full(extra, self.residual_var)])
            self.prior_diag[k] = np.diag(self.cov[m][k])
        self.seen[k], self.new[k] = 0, True

    def learned_space(self) -> CoreSpace:
        """The space with each LLM's vector set to its posterior mean (what a static router would
        serve; a residual is not part of a space's vectors and stays in this state)."""
        out = self.space
        for k, name in enumerate(self.names):
            out = out.with_model(name, [t[k, :self.d].astype(np.float32) for t in self.theta])
        return out

    # ---- on disk, next to the space -------------------------------------------------------------
    def save(self, folder: str | Path) -> Path:
        from safetensors.numpy import save_file
        path = Path(folder) / STATE_FILE
        arrays = {f"theta_{m}": t for m, t in enumerate(self.theta)} | {f"cov_{m}": c for m, c in enumerate(self.cov)}
        arrays["seen"], arrays["new"] = self.seen, self.new.astype(np.int8)
        save_file(arrays, str(path), metadata={"names": json.dumps(self.names), "prior_var": repr(self.prior_var),
                                               "evidence": repr(self.evidence),
                                               "residual_var": repr(self.residual_var)})
        return path

    @classmethod
    def load(cls, space: CoreSpace, folder: str | Path) -> "OnlineState":
        """The state saved in `folder` over `space` (LLMs it learned that the space lacks are added;
        a file of another shape is refused, naming the file)."""
        from safetensors import safe_open
        path = Path(folder) / STATE_FILE
        with safe_open(str(path), "numpy") as f:
            meta, arrays = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
        names = json.loads(meta["names"])
        state = cls(space, float(meta["prior_var"]), residual_var=float(meta.get("residual_var", 0.0)))  # the file's covariances
        for name in names[len(state.names):]:
            state.add_llm(name)
        if names != state.names or len(state.theta) != sum(k.startswith("theta_") for k in arrays):
            raise ValueError(f"{path}: learned over LLMs {names[:5]}... and {sum(k.startswith('theta_') for k in arrays)} "
                             f"members; this space has {state.names[:5]}... and {len(state.theta)}")
        for m in range(len(state.theta)):
            if arrays[f"theta_{m}"].shape != state.theta[m].shape:
                raise ValueError(f"{path}: vectors of shape {arrays[f'theta_{m}'].shape}; the space's are "
                                 f"{state.theta[m].shape}")
            state.theta[m], state.cov[m] = arrays[f"theta_{m}"].astype(np.float64), arrays[f"cov_{m}"].astype(np.float64)
        state.seen = arrays["seen"].astype(np.int64)
        state.new = arrays["new"].astype(bool) if "new" in arrays else np.zeros(len(state.names), bool)
        return state


def _learn_batch(theta: np.ndarray, cov: np.ndarray, z: np.ndarray, norm: np.ndarray, y: np.ndarray,
                 c: np.ndarray) -> None:
    """Outcomes of one LLM, in place: the Laplace update of their logistic likelihood (each raised
    to its weight c > 0) at the current mean. Covariance (S^-1 + Z' W Z)^-1 = S - S Z' (W^-1 + Z S
    Z')^-1 Z S with W = c p(1-p); then the mean by one Newton step from the prior, theta + cov_new
    Z' c (y - p)."""
    if not len(y):
        return
    p = 1.0 / (1.0 + np.exp(-(z @ theta - norm)))
    w = c * np.maximum(p * (1.0 - p), 1e-6)
    sz = cov @ z.T  # (d, b)
    inner = np.diag(1.0 / w) + z @ sz
    cov -= sz @ np.linalg.solve(inner, sz.T)
    theta += cov @ (z.T @ (c * (y - p)))


def member_logits(geo, theta: list[np.ndarray]) -> np.ndarray:
    """Every LLM's logit per member with vectors `theta`: (members, n, LLMs)."""
    return np.stack([u @ t.T - n[:, None] for (u, n), t in zip(geo, theta)])


def posterior_draws(geo, theta: list[np.ndarray], variances: list[np.ndarray], draws: int,
                    rng: np.random.Generator) -> np.ndarray:
    """(draws, n, LLMs) P(correct), fast enough for every routed query: each logit drawn from a
    normal with its posterior mean (theta) and the variance the covariance's diagonal gives (sum
    of z_j^2 C_jj: the correlations between coordinates left out, as reading each LLM's full d x d
    covariance per query costs milliseconds), averaged over members."""
    mean = member_logits(geo, theta)
    var = np.stack([(z * z) @ v.T for (z, _), v in zip(geo, variances)])
    return _sigmoid(mean + np.sqrt(var) * rng.standard_normal((draws,) + mean.shape)).mean(1)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))
