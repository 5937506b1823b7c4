"""A served space that learns from the outcomes of its own decisions (`Space.learner()`).

    learner = space.learner()                         # the settings chosen on validation
    d = learner.route(["Which enzyme ..."])[0]        # d["chosen"], d["propensity"], d["explored"]
    learner.learn(["Which enzyme ..."], [d["chosen"]], [1.0])   # a grade in [0, 1]
    learner.save("state/")                            # and Learner.load(space, "state/") after a restart

Routing explores on a share of the queries (Thompson sampling from the posterior of the LLMs'
vectors), records each decision's propensity for off-policy evaluation (`jr.evaluate_policy`),
and counts the spend on exploration; learning is a rank-one update per outcome (learning/online.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from ..learning.explore import DEFAULTS, Explorer, Pacer
from .texts import checked_texts
from ..learning.online import OnlineState, Outcomes
from ..routing.router import NotFound, RequestError


class Learner:
    def __init__(self, space, *, prior_var: float = DEFAULTS["prior_var"],
                 residual_var: float = DEFAULTS["residual_var"], evidence: float = DEFAULTS["evidence"],
                 rule: str = DEFAULTS["rule"], explore: float = DEFAULTS["explore"],
                 explore_usd_per_1k: float | None = None, cost_weight: float = 0.0,
                 budget_per_1k: float | None = None, seed: int = 0, state: OnlineState | None = None):
        """`space`: a jr.Space; `explore`: the share of queries an exploring rule decides
        (`rule`: thompson or ucb), `explore_usd_per_1k`: a cap on what exploring may add per 1,000
        queries; `cost_weight` (USD per unit of P(correct)) or `budget_per_1k` (a pacer that meets
        it on the traffic) trade accuracy against the space's prices."""
        for arg, value, ok, want in (  # the posterior's own settings are checked by OnlineState
                ("explore", explore, lambda v: 0 <= v <= 1, "a share from 0 to 1"),
                ("explore_usd_per_1k", explore_usd_per_1k, lambda v: v is None or v >= 0, "USD from 0, or None"),
                ("cost_weight", cost_weight, lambda v: v >= 0, "USD per unit of P(correct), from 0")):
            number = value is None or (isinstance(value, (int, float, np.number)) and not isinstance(value, bool)
                                       and np.isfinite(value))
            if not number or not ok(value):
                raise RequestError(f"Learner: {arg} must be {want}, not {value!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise RequestError(f"Learner: seed must be a whole number from 0, not {seed!r}")
        self.space = space
        self.state = state or OnlineState(space, prior_var, evidence, residual_var)
        pacer = None
        if budget_per_1k is not None:
            if not np.isfinite(budget_per_1k) or budget_per_1k <= 0:
                raise RequestError(f"budget_per_1k must be a positive number of USD, not {budget_per_1k!r}")
            pacer = Pacer(budget_per_1k, weight=space.router().budget_weight(budget_per_1k))
        self.explorer = Explorer(self.state, rule=rule, explore=explore, cost_weight=cost_weight,
                                 explore_usd_per_1k=explore_usd_per_1k, pacer=pacer, seed=seed)

    @property
    def spend(self) -> dict:
        """Queries routed, USD spent and the part of it that exploring added, queries explored."""
        return dict(self.explorer.spend)

    def route(self, texts: Sequence[str], candidates: Sequence[str] | None = None) -> list[dict]:
        """One decision per text: the LLM chosen, the probability with which it was chosen, whether
        exploring chose it, the greedy choice, and every LLM's P(correct) under the posterior."""
        texts = checked_texts(texts, "route")
        x = self.space.embed(texts)
        names = self.state.names
        allowed = None
        if candidates is not None:
            unknown = [c for c in candidates if c not in names]
            if unknown or not candidates:
                raise NotFound(f"candidates {unknown or '[]'} not in the space's LLMs") if unknown else \
                    RequestError("candidates is empty: name at least one LLM, or leave it out for all")
            allowed = np.tile(np.isin(names, list(candidates)), (len(texts), 1))
        costs = self._costs(x, texts)
        out = []
        for i, d in enumerate(self.explorer.decide(x, costs, allowed)):
            self.explorer.charge(d, None if costs is None else costs[i])
            out.append({"chosen": names[d.chosen], "propensity": d.propensity, "explored": d.explored,
                        "greedy": names[d.greedy], "p_correct": {n: float(p) for n, p in zip(names, d.p)}})
        return out

    def learn(self, texts: Sequence[str], llms: Sequence[str], grades: Sequence[float]) -> None:
        """Learn graded outcomes: the text each LLM answered, and its grade in [0, 1]."""
        texts = checked_texts(texts, "learn")
        index = {n: i for i, n in enumerate(self.state.names)}
        unknown = sorted({m for m in llms if m not in index})
        if unknown:
            raise NotFound(f"LLMs {unknown[:5]} are not in the space")
        self.state.update(Outcomes(self.space.embed(texts), [index[m] for m in llms], grades))

    def save(self, folder: str | Path) -> Path:
        Path(folder).mkdir(parents=True, exist_ok=True)
        return self.state.save(folder)

    @classmethod
    def load(cls, space, folder: str | Path, **settings) -> "Learner":
        """The learned state saved in `folder`, over `space`, with these routing settings."""
        return cls(space, state=OnlineState.load(space, folder), **settings)

    def _costs(self, x: np.ndarray, texts: list[str]) -> np.ndarray | None:
        router = self.space.router()
        if not router.priced:
            return None
        costs = router.cost_matrix(x, texts)
        extra = len(self.state.names) - costs.shape[1]  # LLMs added while learning: the dearest price
        return np.hstack([costs, np.tile(costs.max(1, keepdims=True), (1, extra))]) if extra > 0 else costs
