"""Routing one query or many: a space's predictions turned into one LLM per query, the same
way offline (`jr.Space.route`, the studies) and in the Serve router.

Policies:
- `tuned`: the policy chosen on validation questions and stored with the space
  (policies.tune_routing); the highest p where the space has none;
- `most_likely`: the highest predicted P(correct);
- `cost_weighted`: the highest p - cost_weight * cost (costs.cost_weighted_choice);
- `cheapest_within_margin`: the cheapest LLM whose p is within `margin` of the best
  (costs.cheapest_within_margin).
`candidates` restricts the LLMs; `budget` drops those costing more per call.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from .costs import cheapest_within_margin, cost_weighted_choice
from .policies import Policy, SignalBuilder

PolicyName = Literal["tuned", "most_likely", "cost_weighted", "cheapest_within_margin"]
POLICIES = ("tuned", "most_likely", "cost_weighted", "cheapest_within_margin")


class RequestError(ValueError):
    """A routing or onboarding request that cannot be served; `status` is its HTTP answer."""
    status = 422


class NotFound(RequestError):
    """The request names an LLM or question that the space does not have."""
    status = 404


class Conflict(RequestError):
    """The request needs something that is not configured (e.g. a cost table)."""
    status = 409


class Router:
    """Routes encoder embeddings with a space (`model.space.Space`); `costs`: {LLM: price per
    call}, needed by the cost policies and `budget`."""

    def __init__(self, space, costs: dict[str, float] | None = None, default_policy: str = "tuned"):
        self.space, self.default_policy = space, default_policy
        self.names = list(space.model_names)
        self.index = {n: i for i, n in enumerate(self.names)}
        self.costs = None
        if costs:
            missing = [n for n in self.names if n not in costs]
            if missing:
                raise ValueError(f"the cost table has no price for {missing[:5]}{'...' if len(missing) > 5 else ''}")
            self.costs = np.array([float(costs[n]) for n in self.names])
        self.benchmarks, self.centroids = _centroids(space)
        self.tuned = None  # (Policy, SignalBuilder) chosen on validation, when the space has one
        chosen = space.metadata.get("routing_policy")
        if chosen and space.routing:
            fields = {k: chosen[k] for k in Policy.model_fields if k in chosen}
            self.tuned = (Policy(**fields), SignalBuilder.from_arrays(space.routing, chosen["benchmarks"]))

    def candidates(self, names: list[str] | None, budget: float | None) -> np.ndarray:
        """Column indices of the LLMs a request allows."""
        cand = np.arange(len(self.names))
        if names:
            unknown = [c for c in names if c not in self.index]
            if unknown:
                raise NotFound(f"unknown candidate LLM(s) {unknown}; this space serves {len(self.names)} "
                               f"LLMs (GET /v1/models)")
            cand = np.array([self.index[c] for c in dict.fromkeys(names)])
        if budget is not None:
            cand = cand[self.costs[cand] <= budget]
            if not len(cand):
                raise Conflict(f"no candidate LLM costs at most the budget {budget}")
        return cand

    def route(self, x: np.ndarray, *, policy: str | None = None, candidates: list[str] | None = None,
              top_k: int | None = None, cost_weight: float = 0.0, margin: float = 0.02,
              budget: float | None = None) -> list[dict]:
        """One decision per row of `x` (encoder embeddings): `chosen`, `policy`, `p_correct`,
        `expected_cost`, `difficulty` (||E_Q||), `nearest_benchmark`, and `scores` (every allowed
        LLM's p and cost, best first; the first `top_k`)."""
        x = np.atleast_2d(np.asarray(x, dtype=np.float32))
        policy = policy or self.default_policy
        if policy not in POLICIES:
            raise RequestError(f"unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")
        if (policy in ("cost_weighted", "cheapest_within_margin") or budget is not None) and self.costs is None:
            raise Conflict(f"policy {policy!r} and budget need a cost table; none is configured (set "
                           f"the Router's user_config.costs)")
        cand = self.candidates(candidates, budget)
        p_all = self.space.predict_proba(x)
        probs = p_all[:, cand]  # (n, C)
        costs = self.costs[cand] if self.costs is not None else None
        if policy == "tuned" and self.tuned is not None:
            chosen_policy, builder = self.tuned
            available = np.zeros(p_all.shape, dtype=bool)
            available[:, cand] = True
            position = np.full(p_all.shape[1], -1)
            position[cand] = np.arange(len(cand))
            picks = position[chosen_policy.choose(builder.build(p_all, x, chosen_policy), available)]
        elif policy in ("most_likely", "tuned"):  # tuned without a stored policy: the highest p
            picks = probs.argmax(1)
        elif policy == "cost_weighted":
            picks = cost_weighted_choice(probs, costs, cost_weight)
        else:
            picks = cheapest_within_margin(probs, costs, margin)
        norms = np.linalg.norm(self.space.question_vectors(x), axis=1)
        nearest = None
        if self.centroids is not None:
            xn = x / np.linalg.norm(x, axis=1, keepdims=True).clip(1e-9)
            nearest = [self.benchmarks[i] for i in (xn @ self.centroids.T).argmax(1)]
        out = []
        for i, p in enumerate(probs):
            pick = int(picks[i])
            order = np.argsort(-p)[:top_k] if top_k else np.argsort(-p)
            out.append({"query_index": i, "chosen": self.names[cand[pick]], "policy": policy,
                        "p_correct": float(p[pick]), "expected_cost": None if costs is None else float(costs[pick]),
                        "difficulty": float(norms[i]), "nearest_benchmark": nearest and nearest[i],
                        "scores": [{"model": self.names[cand[j]], "p_correct": float(p[j]),
                                    "cost": None if costs is None else float(costs[j])} for j in order]})
        return out


def _centroids(space):
    """Unit mean direction of each benchmark's questions in the frozen encoder space."""
    if space.question_embeddings is None or not space.question_benchmarks:
        return [], None
    x = space.question_embeddings / np.linalg.norm(space.question_embeddings, axis=1, keepdims=True).clip(1e-9)
    bench = np.asarray(space.question_benchmarks)
    names = sorted(set(bench))
    c = np.stack([x[bench == b].mean(0) for b in names])
    return names, c / np.linalg.norm(c, axis=1, keepdims=True).clip(1e-9)
