"""online_regions of the simulation (online_sim.py): learning per region of the query space.

Tried for issue 42 and not taken into the library: on the issue's held-out categories it learned
less than learning.OnlineState does (docs/results/learning.md), so it stays a compared method.

An LLM's vector is shared by all questions, so what one off-map category teaches about an LLM
moves its predictions everywhere; learning/online.py keeps that movement small (`prior_var`),
and on mmlu_pro's held-out categories it then learns little. Here the query
space is cut into regions (k-means of unit encoder embeddings: the questions the space was
trained on and the queries routed so far), and each region r learns one shift delta_r of the
question side, shared by every LLM:

    logit_k(q) = the space's logit_k(q) + theta_k . delta_r

with theta_k the LLM's trained vector. An outcome of any LLM in r moves delta_r (a Bayesian
logistic regression whose features are the LLMs' vectors, updated by the Laplace step of
online.py), so every LLM's prediction in that region learns from every answer, and nothing
moves outside it. A region's prior precision holds the information of the training questions in
it (p(1-p) theta_k theta_k' at the space's predictions, times `evidence`): where the space was
trained, delta stays near 0; where it was not, traffic moves it. Decisions are Thompson draws
of all LLMs' logits jointly from delta's posterior, on a share `explore` of the queries (the
posterior mean's choice on the others); a decision's propensity is the share of `draws` draws
in which its LLM wins. Every `refit_every` outcomes the regions are drawn again with the
routed queries included (new topics get regions of their own) and the outcomes so far replayed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.onboarding import directions
from ..model.space import CoreSpace
from ..learning.online import _sigmoid

DEFAULTS = {"regions": 14, "prior_var": 0.1, "bias_var": 0.3, "evidence": 1.0, "explore": 1.0}


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True).clip(1e-9)


@dataclass
class RegionDecision:
    chosen: int
    propensity: float
    greedy: int  # the posterior mean's choice
    explored: bool


class RegionLearner:
    """Per region and member, delta's mean (d) and covariance (d x d) over the space's static logits."""

    def __init__(self, space: CoreSpace, known_x: np.ndarray, known_y: np.ndarray | None = None, regions: int = 14,
                 prior_var: float = 0.1, bias_var: float = 0.3, evidence: float = 1.0, explore: float = 1.0,
                 refit_every: int = 250, draws: int = 32, seed: int = 0):
        """`known_x`: the encoder embeddings of the questions the space was trained on (their
        regions carry their information); `known_y`: their answers (questions x LLMs, NaN where
        none): with them each region's shift starts fitted to them, else at 0; `regions`: k-means
        clusters; `prior_var`: how far traffic may shift a region (the variance it allows the
        logit of an LLM of average norm); `bias_var`: above 0, each LLM also learns its own offset
        of the logit per region (what the vectors' geometry cannot say: one LLM far better than
        its neighbours there). Chosen on validation (experiments/online_sim.py)."""
        if space.kind != "jeirt":
            raise TypeError(f"region learning needs a JE-IRT space, not {space.kind!r}")
        if regions < 1 or refit_every < 1 or draws < 2:
            raise ValueError(f"regions and refit_every must be at least 1 and draws at least 2, not {regions}, "
                             f"{refit_every} and {draws}")
        if not (np.isfinite(prior_var) and prior_var > 0 and np.isfinite(bias_var) and bias_var >= 0
                and np.isfinite(evidence) and evidence >= 0):
            raise ValueError(f"prior_var must be above 0, bias_var and evidence at least 0, not {prior_var!r}, "
                             f"{bias_var!r} and {evidence!r}")
        if not 0 <= explore <= 1:
            raise ValueError(f"explore must be a share from 0 to 1, not {explore!r}")
        known_x = np.asarray(known_x, dtype=np.float32)
        if known_x.ndim != 2 or len(known_x) < 2:
            raise ValueError(f"known_x: {known_x.shape}; region learning needs the embeddings of at least 2 known "
                             "questions, one row each")
        regions = min(int(regions), len(known_x) // 2)  # a small dataset: at least 2 known questions per region
        self.space, self.regions, self.prior_var, self.evidence = space, regions, float(prior_var), float(evidence)
        self.explore, self.refit_every, self.draws = float(explore), int(refit_every), int(draws)
        self.seed, self.rng = seed, np.random.default_rng(seed)
        k = len(space.model_names)
        trained = [space.model_vectors(m).astype(np.float64) for m in range(len(space.members))]
        # delta's prior variance per coordinate: prior_var on the logit of an LLM of mean squared
        # norm, whatever the space's scale
        self.coord_var = self.prior_var / float(np.mean([(t * t).sum(1).mean() for t in trained]))
        # the features of each LLM's logit: its vector, then (with bias_var) its own offset, scaled
        # so that the one isotropic prior gives the offset the variance bias_var
        offsets = np.eye(k) * np.sqrt(bias_var / self.coord_var) if bias_var > 0 else np.zeros((k, 0))
        self.vectors = [np.hstack([t, offsets]) for t in trained]  # (K, d [+ K])
        self.d = space.model_vectors(0).shape[1]
        self.known = _unit(known_x)
        self.known_base = self.static_logits(known_x)  # (members, n, K)
        if known_y is not None:
            known_y = np.asarray(known_y, dtype=np.float64)
            if known_y.shape != self.known_base.shape[1:]:
                raise ValueError(f"known_y: {known_y.shape}; one row per known question and one column per LLM "
                                 f"({self.known_base.shape[1:]}) expected")
        self.known_y = known_y
        self.log_x: list[np.ndarray] = []  # encoder embeddings of the routed queries that got an outcome
        self.log_k: list[int] = []
        self.log_y: list[float] = []
        self._fit_regions()

    def static_logits(self, x: np.ndarray) -> np.ndarray:
        """The space's logits per member: (members, n, K)."""
        return np.stack([u @ t[:, :self.d].T - n[:, None] for (u, n), t in zip(directions(self.space, x), self.vectors)])

    def _fit_regions(self) -> None:
        from sklearn.cluster import KMeans
        points = np.vstack([self.known] + ([_unit(np.stack(self.log_x))] if self.log_x else []))
        start = getattr(self, "centers", None)  # a refit starts from the regions it had
        km = KMeans(self.regions, n_init=3 if start is None else 1, init="k-means++" if start is None else start,
                    random_state=self.seed).fit(points)
        self._chol = {}
        self.centers = _unit(km.cluster_centers_)
        home = self.region(self.known, unit=True)
        self.mu, self.cov = [], []
        for f, base in zip(self.vectors, self.known_base):
            mu, cov = self._fit_known(f, base, home)
            self.mu.append(mu)
            self.cov.append(cov)
        if self.log_x:  # the outcomes so far, replayed into the new regions
            x = np.stack(self.log_x)
            self._learn(self.region(x), np.asarray(self.log_k), np.asarray(self.log_y), self.static_logits(x))

    def _fit_known(self, f: np.ndarray, base: np.ndarray, home: np.ndarray, steps: int = 5):
        """Each region's shift from the known questions in it, for one member: the posterior mode
        given their answers (Newton's method), or 0 without answers; the covariance is the inverse
        of the prior's precision plus their information (p(1-p) f f', times `evidence`)."""
        d = f.shape[1]
        mu = np.zeros((self.regions, d))
        answered = np.ones(base.shape) if self.known_y is None else (~np.isnan(self.known_y)).astype(float)
        y = None if self.known_y is None else np.nan_to_num(self.known_y)
        for _ in range(steps if y is not None else 1):
            p = _sigmoid(base + np.einsum("nd,kd->nk", mu[home], f))
            w, g = np.zeros((self.regions, f.shape[0])), np.zeros((self.regions, f.shape[0]))
            np.add.at(w, home, p * (1 - p) * answered)  # (regions, K): each LLM's information per region
            prec = np.eye(d)[None] / self.coord_var + self.evidence * np.matmul(f.T[None] * w[:, None, :], f)
            if y is None:
                break
            np.add.at(g, home, (y - p) * answered)
            grad = self.evidence * g @ f - mu / self.coord_var
            mu = mu + np.linalg.solve(prec, grad[..., None])[..., 0]
        return mu, np.linalg.inv(prec)

    def region(self, x: np.ndarray, unit: bool = False) -> np.ndarray:
        """The region of each query (nearest center by cosine)."""
        return np.argmax((x if unit else _unit(x)) @ self.centers.T, axis=1)

    def decide(self, x: np.ndarray, allowed: np.ndarray | None = None, costs: np.ndarray | None = None,
               cost_weight: float = 0.0, base: np.ndarray | None = None) -> RegionDecision:
        """One query (x: 1 x D): the LLM a Thompson draw (or, off the explored share, the
        posterior mean) chooses among `allowed`, P(correct) less `cost_weight` x `costs`;
        `base`: the space's logits of x (members x 1 x K), if computed already."""
        base = (self.static_logits(x) if base is None else base)[:, 0]  # (members, K)
        r = int(self.region(x)[0])
        k = base.shape[1]
        penalty = np.zeros(k) if costs is None else cost_weight * np.asarray(costs, dtype=np.float64)
        if allowed is not None:
            penalty = penalty + np.where(np.asarray(allowed, bool), 0.0, np.inf)
        mean = np.stack([b + f @ mu[r] for b, f, mu in zip(base, self.vectors, self.mu)])  # (members, K)
        greedy = int(np.argmax(_sigmoid(mean).mean(0) - penalty))
        if self.explore == 0:
            return RegionDecision(greedy, 1.0, greedy, False)
        z = self.rng.standard_normal((len(mean), self.draws, k))
        drawn = np.stack([mean[m][None] + z[m] @ self._logit_chol(m, r).T for m in range(len(mean))])
        wins = np.argmax(_sigmoid(drawn).mean(0) - penalty, axis=1)  # (draws,)
        explored = bool(self.rng.random() < self.explore)
        chosen = int(wins[0]) if explored else greedy
        propensity = (1 - self.explore) * (chosen == greedy) + self.explore * float(np.mean(wins == chosen))
        return RegionDecision(chosen, max(propensity, 1.0 / self.draws), greedy, explored and chosen != greedy)

    def _logit_chol(self, m: int, r: int) -> np.ndarray:
        """The Cholesky factor of the LLMs' logit covariance in region r (F C F': K x K, cheaper
        to factor than C), cached until the region learns."""
        key = (m, r)
        if key not in self._chol:
            f = self.vectors[m]
            s = f @ self.cov[m][r] @ f.T
            self._chol[key] = np.linalg.cholesky(s + 1e-9 * np.trace(s) / len(s) * np.eye(len(s)))
        return self._chol[key]

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """(n, K) P(correct) under the regions' posterior means, averaged over members."""
        base, r = self.static_logits(x), self.region(x)
        return np.mean([_sigmoid(b + np.einsum("nd,kd->nk", mu[r], f))
                        for b, f, mu in zip(base, self.vectors, self.mu)], axis=0)

    def update(self, x: np.ndarray, llm: np.ndarray, y: np.ndarray, base: np.ndarray | None = None) -> None:
        """Learn graded outcomes: queries x (n x D), the LLM column that answered each, its grade
        in [0, 1]; `base`: the space's logits of x (members x n x K), if computed already."""
        x, llm, y = np.asarray(x, dtype=np.float32), np.asarray(llm, dtype=np.int64), np.asarray(y, dtype=np.float64)
        self._learn(self.region(x), llm, y, self.static_logits(x) if base is None else base)
        before = len(self.log_k)
        self.log_x.extend(x)
        self.log_k.extend(llm.tolist())
        self.log_y.extend(y.tolist())
        if before // self.refit_every != len(self.log_k) // self.refit_every:
            self._fit_regions()

    def _learn(self, regions, llm, y, base) -> None:
        """One Laplace step per outcome, in order (a rank-one change of the region's covariance)."""
        for i in range(len(llm)):
            r, k = regions[i], llm[i]
            for m, f in enumerate(self.vectors):
                self._chol.pop((m, r), None)  # the region's logit covariance changes
                mu, cov, fk = self.mu[m][r], self.cov[m][r], f[k]
                p = _sigmoid(base[m, i, k] + fk @ mu)
                w = max(p * (1 - p), 1e-6)
                cf = cov @ fk
                cov -= np.outer(cf, cf) / (1 / w + fk @ cf)
                mu += cov @ fk * (y[i] - p)
