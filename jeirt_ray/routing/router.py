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

import numpy as np

from .costs import cheapest_within_margin, cost_weighted_choice
from .decisions import DEFAULT_TOP_K, POLICIES, RouteDecision
from .outcomes import available_argmax
from .policies import Policy, SignalBuilder



class RequestError(ValueError):
    """A routing or onboarding request that cannot be served; `status` is its HTTP answer."""
    status = 422


class NotFound(RequestError):
    """The request names an LLM or question that the space does not have."""
    status = 404


class Conflict(RequestError):
    """The request needs something that is not configured (e.g. a cost table)."""
    status = 409


class SpaceRouter:
    """Routes encoder embeddings with a space (`model.space.Space`); `costs`: {LLM: price per
    call}, needed by the cost policies and `budget`."""

    def __init__(self, space, costs: dict[str, float] | None = None, default_policy: str = "tuned"):
        self.space, self.default_policy = space, default_policy
        self.names = [str(n) for n in space.model_names]
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

    def _rule(self, policy: str, p: np.ndarray, x: np.ndarray, cost_weight: float, margin: float):
        """(choose(available) -> one column per row, the policy's own score per LLM) of a policy."""
        if policy == "tuned" and self.tuned is not None:
            chosen_policy, builder = self.tuned
            signals = builder.build(p, x, chosen_policy)
            return (lambda available: chosen_policy.choose(signals, available)), chosen_policy.scores(signals)
        if policy in ("most_likely", "tuned"):  # tuned without a stored policy: the highest p
            return (lambda available: available_argmax(p, available)), p
        if policy == "cost_weighted":
            return (lambda available: cost_weighted_choice(p, self.costs, cost_weight, available)), \
                p - cost_weight * self.costs[None, :]
        return (lambda available: cheapest_within_margin(p, self.costs, margin, available)), p

    def route(self, x: np.ndarray, *, policy: str | None = None, candidates: list[str] | None = None,
              top_k: int | None = DEFAULT_TOP_K, cost_weight: float = 0.0, margin: float = 0.02,
              budget: float | None = None, min_p: float | None = None, ranking: int = 5) -> list[RouteDecision]:
        """One decision per row of `x` (encoder embeddings): `chosen`, `policy`, `p_correct`,
        `expected_cost`, `difficulty` (||E_Q||), `nearest_benchmark`, `ranking` (the policy's own
        order of the allowed LLMs: the pick, then the next best once the ones before are taken
        away, at most `ranking` of them: a gateway's fallbacks), and `scores` (every allowed LLM's
        p, the policy's own `score` and cost, by p, the first `top_k`). `min_p` allows only the
        LLMs whose p reaches it."""
        x = np.atleast_2d(np.asarray(x, dtype=np.float32))
        policy = policy or self.default_policy
        if policy not in POLICIES:
            raise RequestError(f"unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")
        if (policy in ("cost_weighted", "cheapest_within_margin") or budget is not None) and self.costs is None:
            raise Conflict(f"policy {policy!r} and budget need a cost table; none is configured (set "
                           f"the Router's user_config.costs)")
        cand = self.candidates(candidates, budget)
        p = self.space.predict_proba(x)
        allowed = np.zeros(p.shape, dtype=bool)
        allowed[:, cand] = True
        if min_p is not None:
            allowed &= p >= min_p
            empty = np.flatnonzero(~allowed.any(1))
            if len(empty):
                i = int(empty[0])
                raise Conflict(f"no candidate LLM reaches min_p {min_p} for query {i} (the best p is "
                               f"{p[i, cand].max():.3f}): lower min_p or allow more candidates")
        choose, score = self._rule(policy, p, x, cost_weight, margin)
        order, left = [], allowed.copy()
        for _ in range(max(1, min(ranking, len(cand)))):
            pick = choose(left)
            ok = left[np.arange(len(p)), pick]  # rows that had an LLM left
            order.append(np.where(ok, pick, -1))
            left[np.arange(len(p))[ok], pick[ok]] = False
        norms = np.linalg.norm(self.space.question_vectors(x), axis=1)
        nearest = None
        if self.centroids is not None:
            xn = x / np.linalg.norm(x, axis=1, keepdims=True).clip(1e-9)
            nearest = [str(self.benchmarks[i]) for i in (xn @ self.centroids.T).argmax(1)]
        def cost(j):
            return None if self.costs is None else float(self.costs[j])

        out = []
        for i in range(len(p)):
            pick = int(order[0][i])
            cols = np.flatnonzero(allowed[i])
            by_p = cols[np.argsort(-p[i, cols], kind="stable")][:top_k or None]
            out.append({"query_index": i, "chosen": self.names[pick], "policy": policy, "p_correct": float(p[i, pick]),
                        "expected_cost": cost(pick), "difficulty": float(norms[i]),
                        "nearest_benchmark": nearest and nearest[i],
                        "ranking": [self.names[int(o[i])] for o in order if o[i] >= 0],
                        "scores": [{"model": self.names[j], "p_correct": float(p[i, j]), "score": float(score[i, j]),
                                    "cost": cost(j)} for j in by_p]})
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
