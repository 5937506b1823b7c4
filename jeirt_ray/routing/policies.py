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
- `prior`: each LLM's overall training rate (the best-on-average router's score);
- `coverage`: how close the query is to the training questions (mean cosine similarity of its
  `COVERAGE_K` nearest), which gates `local` and `topic`: off the training data's map (an
  unseen benchmark) they point at the wrong benchmark's best LLM, so there p decides alone.

Choosing the policy for a space (which trains members without each benchmark) is the
experiments layer's (`experiments.routing_choice.tune_routing`); this module holds no training.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product

import numpy as np
from pydantic import BaseModel
from sklearn.linear_model import LogisticRegression

from ..model.baselines import KNN
from .outcomes import available_argmax, bootstrap_ci, routed_labels, train_rates

COVERAGE_K = 10  # neighbours whose mean similarity is a query's coverage
# of in-distribution validation coverage: the gates tried; the first is a floor, as validation
# cannot speak for a query less covered than 95% of its questions
GATE_QUANTILES = (0.05, 0.1, 0.25, 0.5)
ID_TOLERANCE = 0.003  # in-distribution validation accuracy given up for accuracy held out
MIN_HELD_OUT_QUESTIONS = 10  # validation questions a held-out benchmark needs to count
MAX_HELD_OUT_BENCHMARKS = 6  # held out in turn (those with the most validation questions): one training each


@dataclass
class RoutingSignals:
    p: np.ndarray  # (n, M)
    local: dict[int, np.ndarray] = field(default_factory=dict)  # k -> (n, M)
    topic: np.ndarray | None = None  # (n, M)
    prior: np.ndarray | None = None  # (M,)
    coverage: np.ndarray | None = None  # (n,)

    def take(self, rows: np.ndarray) -> "RoutingSignals":
        """The signals of some queries only."""
        return RoutingSignals(self.p[rows], {k: v[rows] for k, v in self.local.items()},
                              None if self.topic is None else self.topic[rows], self.prior,
                              None if self.coverage is None else self.coverage[rows])


class Policy(BaseModel):
    """score = (1 - a_local - a_topic) * p + a_local * local_k + a_topic * topic, where the
    query's coverage reaches `gate` (elsewhere p alone); then the best-on-average LLM is kept
    unless another's score beats it by more than `margin`."""

    name: str = "argmax"
    a_local: float = 0.0
    k: int = 100
    a_topic: float = 0.0
    margin: float = 0.0
    gate: float = 0.0

    def scores(self, s: RoutingSignals) -> np.ndarray:
        mix = np.zeros_like(s.p)
        if self.a_local:
            mix += self.a_local * (s.local[self.k] - s.p)
        if self.a_topic:
            mix += self.a_topic * (s.topic - s.p)
        if self.gate > 0:
            mix *= (s.coverage >= self.gate)[:, None]
        return s.p + mix

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
    """Fits, on training questions only, what the policies need beyond the space's p. Its state
    is arrays only (`to_arrays`/`from_arrays`), stored with the space, so that the Serve router
    computes exactly the signals that evaluation chose the policy on."""

    def __init__(self, knn: KNN, ks, prior: np.ndarray, benches: np.ndarray, bench_rates: np.ndarray,
                 topic_coef: np.ndarray | None = None, topic_intercept: np.ndarray | None = None):
        self.knn, self.ks, self.prior = knn, tuple(int(k) for k in ks), prior
        self.benches, self.bench_rates = benches, bench_rates
        self.topic_coef, self.topic_intercept = topic_coef, topic_intercept

    @classmethod
    def fit(cls, X: np.ndarray, train_q: np.ndarray, train_m: np.ndarray, train_y: np.ndarray,
            benchmarks: np.ndarray, n_models: int, ks=(25, 50, 100, 200, 400)) -> "SignalBuilder":
        knn = KNN().fit(X, n_models, train_q, train_m, train_y)
        prior = np.nan_to_num(train_rates(n_models, train_m, train_y)[0], nan=0.0)
        # The topic signal knows only benchmarks with training questions: one present only among
        # validation or test questions (a user's own split, a routing-only benchmark) has no rates
        # to average and no examples for the classifier.
        rows = knn.train_rows
        benches, bidx_rows = np.unique(np.asarray(benchmarks)[rows], return_inverse=True)
        bidx = np.full(len(benchmarks), -1, dtype=np.int64)
        bidx[rows] = bidx_rows
        bench_rates = np.nan_to_num(train_rates(n_models, train_m, train_y, bidx[train_q], len(benches)), nan=0.0)
        coef = intercept = None
        if len(benches) > 1:
            clf = LogisticRegression(C=10.0, max_iter=2000).fit(X[rows], bidx_rows)
            coef, intercept = clf.coef_, clf.intercept_
        return cls(knn, ks, prior, benches, bench_rates, coef, intercept)

    def topic_probs(self, x: np.ndarray) -> np.ndarray:
        """The benchmark classifier's probabilities (sklearn's multinomial / binary logistic)."""
        z = x @ self.topic_coef.T + self.topic_intercept
        if z.shape[1] == 1:  # two benchmarks: one logit for the second
            p1 = 1.0 / (1.0 + np.exp(-z[:, 0]))
            return np.stack([1 - p1, p1], axis=1)
        z = z - z.max(1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(1, keepdims=True)

    def build(self, p: np.ndarray, x: np.ndarray, policy: Policy | None = None) -> RoutingSignals:
        """Signals for queries (validation, test or live questions, never training ones) with
        frozen embeddings `x` and the space's probabilities `p`; with `policy`, only the ones it
        reads (the serving path: no neighbour search for a policy without `local`). LLMs added
        after fitting (onboarded, beyond the columns seen in training) get their p as local and
        topic signal and a prior of 0."""
        ks = self.ks if policy is None else ((policy.k,) if policy.a_local else ())
        want_coverage = policy is None or policy.gate > 0
        local, coverage = {}, None
        if ks or want_coverage:
            kmax = min(max(ks + (COVERAGE_K,) * want_coverage), len(self.knn.base))
            nbrs = self.knn.neighbours_of(x, kmax)
            local = {k: self.knn.rates(nbrs[:, :min(k, kmax)]) for k in ks}
            if want_coverage:
                coverage = self.knn.similarities(x, nbrs[:, :COVERAGE_K]).mean(1)
        want_topic = policy is None or policy.a_topic > 0
        topic = None
        if want_topic and self.topic_coef is not None:
            topic = self.topic_probs(x) @ self.bench_rates
        elif want_topic and len(self.benches) == 1:  # one benchmark left (held out of two): its rates
            topic = np.tile(self.bench_rates[0], (len(x), 1))
        prior = self.prior
        extra = p.shape[1] - len(prior)
        if extra > 0:
            local = {k: np.hstack([v, p[:, -extra:]]) for k, v in local.items()}
            topic = None if topic is None else np.hstack([topic, p[:, -extra:]])
            prior = np.concatenate([prior, np.zeros(extra)])
        return RoutingSignals(p=p, local=local, topic=topic, prior=prior, coverage=coverage)

    def to_arrays(self) -> dict[str, np.ndarray]:
        out = {f"knn.{k}": v for k, v in self.knn.to_arrays().items()}
        out |= {"ks": np.array(self.ks), "prior": self.prior, "bench_rates": self.bench_rates}
        if self.topic_coef is not None:
            out |= {"topic_coef": self.topic_coef, "topic_intercept": self.topic_intercept}
        return out

    @classmethod
    def from_arrays(cls, a: dict[str, np.ndarray], benches: list[str]) -> "SignalBuilder":
        knn = KNN.from_arrays({k[4:]: v for k, v in a.items() if k.startswith("knn.")})
        return cls(knn, a["ks"].tolist(), a["prior"], np.asarray(benches), a["bench_rates"],
                   a.get("topic_coef"), a.get("topic_intercept"))


def candidate_policies(ks=(25, 50, 100, 200, 400), has_topic: bool = True, gates=()) -> list[Policy]:
    """The grid tried on validation, named by family; the mixing policies with each coverage
    gate of `gates` (none: ungated)."""
    mixing = [Policy(name="local", a_local=a, k=k) for a, k in product((0.25, 0.5, 0.75, 1.0), ks)]
    if has_topic:
        mixing += [Policy(name="topic", a_topic=a) for a in (0.25, 0.5, 0.75, 1.0)]
        mixing += [Policy(name="local+topic", a_local=a, a_topic=b, k=k)
                   for a, b, k in product((0.25, 0.5), (0.25, 0.5), ks) if a + b <= 1.0]
    if len(gates):
        mixing = [p.model_copy(update={"gate": float(g)}) for g in gates for p in mixing]
    return [Policy(name="argmax"), *[Policy(name="margin", margin=t) for t in (0.01, 0.02, 0.05, 0.1)], *mixing]


def policy_outcomes(policy: Policy, signals: RoutingSignals, labels: np.ndarray) -> np.ndarray:
    """The label of the LLM the policy picks, per query."""
    return routed_labels(policy.choose(signals, ~np.isnan(labels)), labels)


def policy_accuracy(policy: Policy, signals: RoutingSignals, labels: np.ndarray) -> float:
    return float(policy_outcomes(policy, signals, labels).mean())


def select_policy(signals: RoutingSignals, labels: np.ndarray, candidates: list[Policy],
                  held_out: list[tuple[RoutingSignals, np.ndarray]] = (),
                  tolerance: float = ID_TOLERANCE) -> tuple[Policy, list[dict]]:
    """The candidate with the best validation router accuracy (ties: the earlier, simpler one).
    With `held_out` (signals and labels of each benchmark's validation questions, the signals
    fitted without that benchmark), the best mean accuracy over those among the candidates
    within `tolerance` of the best validation accuracy."""
    table = [{"policy": p.model_dump(), "val_accuracy": policy_accuracy(p, signals, labels)} for p in candidates]
    if held_out:
        for p, row in zip(candidates, table):
            row["held_out_accuracy"] = float(np.mean([policy_accuracy(p, s, y) for s, y in held_out]))
    top = max(r["val_accuracy"] for r in table)
    key = (lambda i: (table[i]["held_out_accuracy"], table[i]["val_accuracy"], -i)) if held_out else \
        (lambda i: (table[i]["val_accuracy"], -i))
    best = max((i for i in range(len(table)) if table[i]["val_accuracy"] >= top - tolerance), key=key)
    return candidates[best], table


def choose_policy(signals: RoutingSignals, labels: np.ndarray, candidates: list[Policy],
                  held_out: list[tuple[RoutingSignals, np.ndarray]] = (), tolerance: float = ID_TOLERANCE,
                  seed: int = 0) -> tuple[Policy, list[dict], dict]:
    """`select_policy`'s pick, kept only where its gain over the argmax (`candidates[0]`) is
    clear of noise; else the argmax. (policy, validation table, evidence)

    The gain is measured as the selection would meet new queries: the validation questions
    (and each held-out benchmark's) are split in two halves; the policy selected on one half is
    scored against the argmax on the other, and the other way round. The mixing policy is kept
    only if the 95% bootstrap interval of that out-of-half gain lies above 0 in distribution and,
    where benchmarks were held out, no loss lies inside it on them (its lower end at or above 0:
    a gated policy that falls back to the argmax off the map gains exactly 0 there)."""
    argmax = candidates[0]
    if argmax.name != "argmax":
        raise ValueError("choose_policy: the first candidate must be the argmax")
    chosen, table = select_policy(signals, labels, candidates, held_out, tolerance)
    evidence: dict = {"candidate": chosen.model_dump(), "rule": "kept only if its out-of-half gain over argmax "
                      "has a 95% interval above 0 in distribution and at or above 0 on held-out benchmarks"}
    if chosen == argmax:
        return argmax, table, {**evidence, "kept": True, "why": "argmax is the best on validation"}
    rng = np.random.default_rng(seed)
    halves = rng.random(len(labels)) < 0.5
    ho_halves = [rng.random(len(y)) < 0.5 for _, y in held_out]
    gains, ho_gains = [], []
    for half in (True, False):
        fit_ho = [(s.take(h == half), y[h == half]) for (s, y), h in zip(held_out, ho_halves)]
        fit_ho = [(s, y) for s, y in fit_ho if len(y)]
        pick, _ = select_policy(signals.take(halves == half), labels[halves == half], candidates, fit_ho, tolerance)
        other = halves != half
        gains.append(policy_outcomes(pick, signals.take(other), labels[other])
                     - policy_outcomes(argmax, signals.take(other), labels[other]))
        for (s, y), h in zip(held_out, ho_halves):
            if (h != half).any():
                ho_gains.append(policy_outcomes(pick, s.take(h != half), y[h != half])
                                - policy_outcomes(argmax, s.take(h != half), y[h != half]))
    gain = np.concatenate(gains)
    evidence |= {"val_questions": int(len(gain)), "val_gain": float(gain.mean()), "val_gain_ci95": bootstrap_ci(gain)}
    keep = evidence["val_gain_ci95"][0] > 0
    if held_out:
        ho = np.concatenate(ho_gains) if ho_gains else np.zeros(0)
        evidence |= {"held_out_questions": int(len(ho)), "held_out_gain": float(ho.mean()) if len(ho) else None,
                     "held_out_gain_ci95": bootstrap_ci(ho) if len(ho) else None}
        keep = keep and len(ho) > 0 and evidence["held_out_gain_ci95"][0] >= 0
    evidence["kept"] = bool(keep)
    evidence["why"] = "its gain is clear of noise" if keep else "its gain over argmax is not clear of noise: argmax"
    return (chosen if keep else argmax), table, evidence
