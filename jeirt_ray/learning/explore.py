"""Exploration within a budget, from the posterior of the LLMs' vectors.

Each decision is the greedy choice (the posterior means' P(correct), less `cost_weight` x USD:
the `cost_weighted` policy; `cost_weight=0` is argmax) except on a share `explore` of the
queries, where an exploring rule chooses:

- `thompson`: each LLM's logit drawn from its posterior (a draw per member, the members' P
  averaged), then the same score: an LLM is tried in proportion to the chance that it is best;
- `ucb`: the logit's mean plus `ucb_z` posterior standard deviations (optimism).

The probability with which the decision chose its LLM (the propensity) is recorded, so that any
other policy can be evaluated later on the logged traffic (offpolicy.py): for Thompson sampling
it is the share of `draws` posterior draws in which that LLM wins. The spend on exploration
(what an explored choice cost beyond the greedy choice) is counted, and an `explore_usd_per_1k`
cap turns exploration off while it is spent. A `budget_per_1k` pacer moves the cost weight so
that the realised spend per 1,000 queries meets the budget (read from the charges, so it holds
on traffic unlike the calibration questions).

`PolicyExploration` is the served router's: Thompson sampling composed with whichever routing
policy a request names (routing/router.py), the policy applied to a posterior draw of P(correct)
on a share of the queries.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .online import OnlineState, _sigmoid

RULES = ("thompson", "ucb")
# the settings of a learning router (OnlineState's and Explorer's): what zeroeval's validation
# streams chose (benchmarks/online.py: a held-out validation category and the seen categories'
# validation questions); mmlu_pro's chose residual_var 0 (docs/results/learning.md)
DEFAULTS = {"prior_var": 0.003, "residual_var": 1.0, "evidence": 0.0, "rule": "thompson", "explore": 0.1}
SPAN = 4.0  # standard deviations within which an LLM is still a contender for a draw
COLD = 200  # outcomes before an LLM added while learning is explored only as the others are


@dataclass
class Decision:
    chosen: int
    propensity: float  # P(this policy chooses `chosen` | the query, the state)
    greedy: int  # the choice without exploration
    explored: bool  # whether the exploring rule made this choice
    p: np.ndarray  # the posterior means' P(correct) of every LLM


@dataclass
class Pacer:
    """The cost weight that keeps the spend at `budget_per_1k` USD per 1,000 queries: the weight
    it starts from (`weight`: e.g. the router's open-loop `budget_weight`) times exp(gain x the
    overspend so far, in units of `horizon` queries' budget). A spend above the budget raises the
    weight until the total comes back to it, whatever the mix of queries (an integral controller:
    the total, not only the recent rate, meets the budget). The gain was chosen on the validation
    streams of benchmarks/online.py (zeroeval, 3 seeds: 4 of 0.5, 1, 2, 4, each time)."""
    budget_per_1k: float
    weight: float = 1.0
    gain: float = 4.0
    horizon: int = 50
    spent: float = 0.0
    queries: int = 0
    start: float | None = None

    def charge(self, usd: float) -> None:
        if self.start is None:
            self.start = self.weight
        self.spent += usd
        self.queries += 1
        allowance = self.budget_per_1k / 1000
        over = (self.spent - allowance * self.queries) / (allowance * self.horizon)
        self.weight = float(np.clip(self.start * np.exp(self.gain * np.clip(over, -40, 40)), 1e-9, 1e12))


@dataclass
class Explorer:
    state: OnlineState
    rule: str = "thompson"
    explore: float = 1.0  # the share of queries an exploring rule decides
    cost_weight: float = 0.0  # USD per unit of P(correct) given up (cost_weighted); ignored with a pacer
    ucb_z: float = 1.0
    draws: int = 64
    contenders: int = 6  # the LLMs (best by the posterior means) that exploring may choose among
    explore_usd_per_1k: float | None = None
    pacer: Pacer | None = None
    seed: int = 0
    spend: dict = field(default_factory=lambda: {"queries": 0, "usd": 0.0, "exploration_usd": 0.0, "explored": 0})

    def __post_init__(self):
        if self.rule not in RULES:
            raise ValueError(f"unknown exploring rule {self.rule!r}: one of {', '.join(RULES)}")
        if not 0 <= self.explore <= 1:
            raise ValueError(f"explore must be a share from 0 to 1, not {self.explore!r}")
        if self.draws < 2 or self.contenders < 1:
            raise ValueError(f"draws must be at least 2 and contenders at least 1, not {self.draws} and "
                             f"{self.contenders}")
        self.rng = np.random.default_rng(self.seed)

    def weight(self) -> float:
        return self.pacer.weight if self.pacer is not None else self.cost_weight

    def may_explore(self) -> bool:
        if self.explore_usd_per_1k is None:
            return True
        allowed = self.explore_usd_per_1k * (self.spend["queries"] + 1) / 1000
        return self.spend["exploration_usd"] < allowed

    def decide(self, x: np.ndarray, costs: np.ndarray | None = None, allowed: np.ndarray | None = None,
               geo=None) -> list[Decision]:
        """One decision per query (rows of x): `costs` (n, LLMs) USD, `allowed` (n, LLMs) the LLMs
        each query may go to (default all)."""
        geo = geo or self.state.geometry(x)
        mean = self.state.logits(geo)  # (members, n, K)
        n, k = mean.shape[1], mean.shape[2]
        costs = np.zeros((n, k)) if costs is None else np.asarray(costs, dtype=np.float64)
        allowed = np.ones((n, k), bool) if allowed is None else np.asarray(allowed, bool)
        penalty = self.weight() * costs + np.where(allowed, 0.0, np.inf)
        p = _sigmoid(mean).mean(0)
        greedy = np.argmax(p - penalty, axis=1)
        var = self._variance(geo, mean, penalty) if self.explore > 0 else None
        out = []
        for i in range(n):
            explore_share = self.explore if self.may_explore() else 0.0
            if var is None:
                explore_pick, share = int(greedy[i]), np.eye(k)[greedy[i]]
            elif self.rule == "thompson":
                z = self.rng.standard_normal((self.draws,) + mean[:, i].shape)
                sampled = _sigmoid(mean[:, i] + np.sqrt(var[:, i]) * z).mean(1)  # (draws, K)
                wins = np.argmax(sampled - penalty[i], axis=1)
                explore_pick = int(wins[0])
                share = np.bincount(wins, minlength=k) / self.draws
            else:
                optimistic = _sigmoid(mean[:, i] + self.ucb_z * np.sqrt(var[:, i])).mean(0)
                explore_pick = int(np.argmax(optimistic - penalty[i]))
                share = np.eye(k)[explore_pick]
            explored = bool(self.rng.random() < explore_share)
            chosen = explore_pick if explored else int(greedy[i])
            propensity = (1 - explore_share) * (chosen == greedy[i]) + explore_share * share[chosen]
            out.append(Decision(chosen, float(max(propensity, 1.0 / self.draws)), int(greedy[i]),
                                explored and chosen != greedy[i], p[i]))
        return out

    def _variance(self, geo, mean: np.ndarray, penalty: np.ndarray) -> np.ndarray:
        """The logits' posterior variance for the contenders, the others' draws being their means
        (z' cov z costs d^2 per LLM): the `contenders` best by the posterior means' score, and every
        LLM added while learning that has had fewer than COLD outcomes (a new LLM is tried where
        its wide posterior says it may be best), less any that `SPAN` bounding standard deviations
        up cannot reach the best score `SPAN` down."""
        sd = np.sqrt(self.state.variance_bound(geo))
        upper = _sigmoid(mean + SPAN * sd).mean(0) - penalty
        lower = (_sigmoid(mean - SPAN * sd).mean(0) - penalty).max(1, keepdims=True)
        score = _sigmoid(mean).mean(0) - penalty
        top = np.argsort(-score, axis=1)[:, :self.contenders]
        chosen = np.zeros(score.shape, bool)
        chosen[np.arange(len(score))[:, None], top] = True
        chosen |= (self.state.new & (self.state.seen < COLD))[None, :]
        chosen &= upper >= lower
        return self.state.logit_variance(geo, only=np.flatnonzero(chosen.any(0)))

    def charge(self, decision: Decision, costs_row: np.ndarray | None) -> float:
        """Count what a decision spent (its LLM's USD); returns the exploration's share of it."""
        usd = 0.0 if costs_row is None else float(costs_row[decision.chosen])
        extra = 0.0
        if decision.explored and costs_row is not None:
            extra = max(0.0, usd - float(costs_row[decision.greedy]))
        self.spend["queries"] += 1
        self.spend["usd"] += usd
        self.spend["exploration_usd"] += extra
        self.spend["explored"] += int(decision.explored)
        if self.pacer is not None:
            self.pacer.charge(usd)
        return extra


class PolicyExploration:
    """Exploration for the served router, whatever the policy: on a share `share` of the queries
    the request's own policy chooses with P(correct) drawn from the posterior (`draw(x, draws)`
    -> (draws, n, LLMs)) in place of its mean. The propensity of a decision is (1 - share) x [it is
    the policy's own choice] + share x the share of `draws` draws in which the policy chooses it.
    What an explored choice's expected cost adds over the policy's own choice is counted; with
    `usd_per_1k` set, exploring pauses while that spend is above the cap per 1,000 queries (of
    this replica). Routes run in worker threads: the counts are kept under a lock."""

    def __init__(self, draw: Callable[[np.ndarray, int], np.ndarray], share: float, usd_per_1k: float | None = None,
                 draws: int = 32, seed: int | None = None):
        if not 0 <= share <= 1:
            raise ValueError(f"explore must be a share from 0 to 1, not {share!r}")
        self.draw, self.share, self.usd_per_1k, self.draws = draw, float(share), usd_per_1k, int(draws)
        self.spend = {"queries": 0, "explored": 0, "exploration_usd": 0.0}
        self._rng = np.random.default_rng(seed)
        self._lock = threading.Lock()

    def _share_now(self, n: int) -> float:
        with self._lock:
            capped = self.usd_per_1k is not None and \
                self.spend["exploration_usd"] >= self.usd_per_1k * (self.spend["queries"] + n) / 1000
        return 0.0 if capped else self.share

    def decide(self, choose, x: np.ndarray, allowed: np.ndarray, greedy: np.ndarray,
               cost: np.ndarray | None, counted: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(chosen, propensity, explored) per query: `choose(available, q, rows)` is the policy
        (routing.router.SpaceRouter._rule), `greedy` its choice on the posterior means. With
        `usd_per_1k`, the cap is checked query by query (a batch cannot overshoot it), and only
        `counted` queries (those the service itself pays an upstream for: chat) raise the
        allowance; every explored query's extra cost counts against it."""
        n, k = allowed.shape
        share = self._share_now(n)
        chosen, propensity, explored = greedy, np.ones(n), np.zeros(n, dtype=bool)
        if share > 0:
            q = self.draw(x, self.draws)  # (draws, n, LLMs)
            rows = np.tile(np.arange(n), self.draws)
            wins = np.asarray(choose(np.tile(allowed, (self.draws, 1)), q.reshape(-1, k), rows)).reshape(self.draws, n)
            with self._lock:
                coin = self._rng.random(n) < share
            chosen = np.where(coin, wins[0], greedy)
            propensity = (1 - share) * (chosen == greedy) + share * (wins == chosen).mean(0)
            explored = chosen != greedy
        extra = np.zeros(n)
        if cost is not None and explored.any():
            rows = np.flatnonzero(explored)
            extra[rows] = np.clip(cost[rows, chosen[rows]] - cost[rows, greedy[rows]], 0, None)
        with self._lock:
            if self.usd_per_1k is not None and share > 0:  # the cap, query by query
                queries = self.spend["queries"] + (np.arange(1, n + 1) if counted else 0)
                over = (self.spend["exploration_usd"] + np.cumsum(extra) > self.usd_per_1k * queries / 1000) & (extra > 0)
                if over.any():  # from the first query past it on: the policy's own choice, for sure
                    i = int(np.argmax(over))
                    chosen, propensity, explored = chosen.copy(), propensity.copy(), explored.copy()
                    chosen[i:], propensity[i:], explored[i:], extra[i:] = greedy[i:], 1.0, False, 0.0
            self.spend["queries"] += n if counted else 0
            self.spend["explored"] += int(explored.sum())
            self.spend["exploration_usd"] += float(extra.sum())
        return chosen, propensity, explored
