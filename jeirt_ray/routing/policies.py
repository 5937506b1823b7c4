"""Routing policies: turn a space's predictions into one LLM per query.

Every policy scores each candidate LLM for each query and picks the best available one; the
router never reads a query's benchmark label. Policies and their settings are chosen on
validation questions only (`select_policy`).

Signals a policy may combine, all computed from training data and the query text alone:
- `p`: the JE-IRT ensemble's P(correct) per LLM (question-specific, but noisy);
- `local`: the KNN baseline's estimate, each LLM's mean training label over the k nearest
  training questions (frozen embedding cosine), shrunk toward its overall rate;
- `topic`: each LLM's training rate per benchmark, averaged under a classifier's predicted
  benchmark probabilities for the query (a soft, label-free "per-benchmark best");
- `prior`: each LLM's overall training rate (the best-on-average router's score).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product

import numpy as np
from pydantic import BaseModel
from sklearn.linear_model import LogisticRegression

from ..model.baselines import KNN
from .evaluate import available_argmax, routed_labels, train_rates


@dataclass
class RoutingSignals:
    p: np.ndarray  # (n, M)
    local: dict[int, np.ndarray] = field(default_factory=dict)  # k -> (n, M)
    topic: np.ndarray | None = None  # (n, M)
    prior: np.ndarray | None = None  # (M,)


class Policy(BaseModel):
    """score = (1 - a_local - a_topic) * p + a_local * local_k + a_topic * topic; then the
    best-on-average LLM is kept unless another's score beats it by more than `margin`."""

    name: str = "argmax"
    a_local: float = 0.0
    k: int = 100
    a_topic: float = 0.0
    margin: float = 0.0

    def scores(self, s: RoutingSignals) -> np.ndarray:
        out = (1.0 - self.a_local - self.a_topic) * s.p
        if self.a_local:
            out = out + self.a_local * s.local[self.k]
        if self.a_topic:
            out = out + self.a_topic * s.topic
        return out

    def choose(self, s: RoutingSignals, available: np.ndarray) -> np.ndarray:
        sc = self.scores(s)
        choice = available_argmax(sc, available)
        if self.margin > 0 and s.prior is not None:
            fallback = available_argmax(np.tile(s.prior, (len(sc), 1)), available)
            rows = np.arange(len(sc))
            keep = sc[rows, choice] - sc[rows, fallback] <= self.margin
            choice = np.where(keep, fallback, choice)
        return choice


class SignalBuilder:
    """Fits, on training questions only, what the policies need beyond the space's p."""

    def __init__(self, X: np.ndarray, train_q: np.ndarray, train_m: np.ndarray, train_y: np.ndarray,
                 benchmarks: np.ndarray, n_models: int, ks=(25, 50, 100, 200, 400)):
        self.ks = ks
        self.knn = KNN().fit(X, n_models, train_q, train_m, train_y)
        self.prior = np.nan_to_num(train_rates(n_models, train_m, train_y)[0], nan=0.0)
        self.benches, bidx = np.unique(benchmarks, return_inverse=True)
        self.bench_rates = np.nan_to_num(train_rates(n_models, train_m, train_y, bidx[train_q], len(self.benches)),
                                         nan=0.0)
        self.topic_clf = None
        if len(self.benches) > 1:
            rows = self.knn.train_rows
            self.topic_clf = LogisticRegression(C=10.0, max_iter=2000).fit(X[rows], bidx[rows])

    def build(self, p: np.ndarray, rows: np.ndarray, X: np.ndarray) -> RoutingSignals:
        kmax = min(max(self.ks), len(self.knn.train_rows) - 1)
        nbrs = self.knn.neighbours(rows, kmax)
        local = {k: self.knn.predict_all(rows, min(k, kmax), nbrs) for k in self.ks}
        topic = None
        if self.topic_clf is not None:
            topic = self.topic_clf.predict_proba(X[rows]) @ self.bench_rates
        return RoutingSignals(p=p, local=local, topic=topic, prior=self.prior)


def candidate_policies(ks=(25, 50, 100, 200, 400), has_topic: bool = True) -> list[Policy]:
    """The grid tried on validation, named by family."""
    out = [Policy(name="argmax")]
    out += [Policy(name="margin", margin=t) for t in (0.01, 0.02, 0.05, 0.1)]
    out += [Policy(name="local", a_local=a, k=k) for a, k in product((0.25, 0.5, 0.75, 1.0), ks)]
    if has_topic:
        out += [Policy(name="topic", a_topic=a) for a in (0.25, 0.5, 0.75, 1.0)]
        out += [Policy(name="local+topic", a_local=a, a_topic=b, k=k)
                for a, b, k in product((0.25, 0.5), (0.25, 0.5), ks) if a + b <= 1.0]
    return out


def policy_accuracy(policy: Policy, signals: RoutingSignals, labels: np.ndarray) -> float:
    return float(routed_labels(policy.choose(signals, ~np.isnan(labels)), labels).mean())


def select_policy(signals: RoutingSignals, labels: np.ndarray, candidates: list[Policy]) -> tuple[Policy, list[dict]]:
    """The candidate with the best validation router accuracy (ties: the earlier, simpler one)."""
    table = [{"policy": p.model_dump(), "val_accuracy": policy_accuracy(p, signals, labels)} for p in candidates]
    best = max(range(len(table)), key=lambda i: (table[i]["val_accuracy"], -i))
    return candidates[best], table
