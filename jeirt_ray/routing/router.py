"""Routing one query or many: a space's predictions turned into one LLM per query, the same
way offline (`jr.Space.route`, the studies) and in the Serve router.

Policies:
- `tuned`: the policy chosen on validation questions and stored with the space
  (experiments.routing_choice.tune_routing); the highest p where the space has none;
- `most_likely`: the highest predicted P(correct);
- `cost_weighted`: expected utility, the highest p - cost_weight x cost;
- `cheapest_within_margin`: the cheapest LLM whose p is within `margin` of the best;
- `quality_target`: the cheapest LLM whose p reaches `target_p`, or `target_share` x the best p
  (the best p where none does);
- `budget`: expected utility with the cost weight chosen so that the expected spend per 1,000
  queries like the space's own questions meets `budget_per_1k` (USD).
Costs: USD per (query, LLM) from prices (routing.prices: input tokens x input price + expected
answer tokens x output price), or a flat USD per call per LLM (`usd_per_call`). `candidates`
restricts the LLMs; `max_cost` drops those costing more USD per call; `min_p` those whose p falls
short.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import replace
from functools import cached_property

import numpy as np

from ..model.stacked import StackedJEIRT
from ..zoo.catalog import BadFilter, CandidateFilter, Catalog, NoCandidates, UnknownLLMs
from .centroids import Centroids
from .costs import cheapest_within_margin, cost_weighted_choice, cost_weighted_scores, quality_target_choice
from .decisions import DEFAULT_TOP_K, POLICIES, RouteDecision
from .outcomes import available_argmax
from .policies import Policy, SignalBuilder
from .prices import LLMPrices, cost_matrix, lengths_of, question_input_tokens, token_counter

COST_POLICIES = ("cost_weighted", "cheapest_within_margin", "quality_target", "budget")
BUDGET_QUERIES = 2000  # the space's own questions that a budget's cost weight is calibrated on
BUDGET_CACHE = 256  # budgets whose cost weight a router remembers


class RequestError(ValueError):
    """A routing or onboarding request that cannot be served; `status` is its HTTP answer."""
    status = 422


class NotFound(RequestError):
    """The request names an LLM or question that the space does not have."""
    status = 404


class BadRequest(RequestError):
    """A filter of the request's that leaves nothing to choose from (e.g. no LLM matches its
    candidates)."""
    status = 400


class Conflict(RequestError):
    """The request needs something that is not configured (e.g. a cost table), or a parameter
    that its choices call for (a policy's target), or gives one thing twice, differently."""
    status = 409


class SpaceRouter:
    """Routes encoder embeddings with a space (`model.space.CoreSpace`). Costs, needed by the cost
    policies and `max_cost`: `prices` (per LLM, USD per million tokens; default: the prices stored
    with the space, if any) or `usd_per_call` ({LLM: USD per call, whatever the query})."""

    def __init__(self, space, usd_per_call: dict[str, float] | None = None, default_policy: str = "tuned",
                 prices: LLMPrices | None = None, label: str = ""):
        self.label = label  # what the answers name as the space (the Serve router: `<model>/<version>`)
        self.space, self.default_policy = space, default_policy
        self.names = [str(n) for n in space.model_names]
        self.index = {n: i for i, n in enumerate(self.names)}
        self.catalog = Catalog(self.names, space.metadata.get("llms"))
        self.usd_per_call = None
        if usd_per_call:
            missing = [n for n in self.names if n not in usd_per_call]
            if missing:
                raise ValueError(f"usd_per_call has no price for {missing[:5]}{'...' if len(missing) > 5 else ''}")
            self.usd_per_call = np.array([float(usd_per_call[n]) for n in self.names])
        stored = space.metadata.get("prices")
        self.prices = prices if prices is not None else (LLMPrices.from_dict(stored) if stored and not usd_per_call else None)
        if self.prices is not None:
            self.prices = _aligned(self.prices, self.names)
        self.lengths = lengths_of(space)
        self.centroids = None  # the benchmarks' centroids, where the space stores its questions
        if space.question_embeddings is not None and len(space.question_benchmarks):
            self.centroids = Centroids.fit(space.question_embeddings, space.question_benchmarks)
        self.tuned = None  # (Policy, SignalBuilder) chosen on validation, when the space has one
        chosen = space.metadata.get("routing_policy")
        if chosen and space.routing:
            fields = {k: chosen[k] for k in Policy.model_fields if k in chosen}
            self.tuned = (Policy(**fields), SignalBuilder.from_arrays(space.routing, chosen["benchmarks"]))
        self.stacked = StackedJEIRT.of(space)  # the space's forward in NumPy, where it has one
        self.learned = None  # x -> P(correct) learned from feedback (serving/loop/learned.py), else the space's
        # on a share of queries, the policy applied to a posterior draw (learning.explore.PolicyExploration)
        self.exploration = None
        self._budget_weights: OrderedDict[float, float] = OrderedDict()  # an LRU of BUDGET_CACHE
        self._budget_lock = threading.Lock()  # routes run in worker threads

    def predicted(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(P(correct) per query and LLM: learned from feedback where it is, else the space's;
        each query's difficulty ||E_Q||)."""
        learned = self.learned  # read once: the replica may swap it meanwhile
        p = None
        if self.stacked is not None:
            p, norms = self.stacked(x)
        else:
            norms = np.linalg.norm(self.space.question_vectors(x), axis=1)
        if learned is not None:
            return learned(x), norms
        return (self.space.predict_proba(x) if p is None else p), norms

    @property
    def priced(self) -> bool:
        return self.prices is not None or self.usd_per_call is not None

    def cost_matrix(self, x: np.ndarray, texts: list[str] | None = None,
                    nearest: list[str] | None = None) -> np.ndarray | None:
        """USD per query (rows of `x`) and LLM, or None without prices or usd_per_call. Input tokens are
        counted in `texts` (without them: the median of the space's own questions); `nearest`:
        each query's nearest benchmark, where the caller has it already."""
        if self.prices is None:
            return None if self.usd_per_call is None else np.tile(self.usd_per_call, (len(x), 1))
        tokens = token_counter().count(texts) if texts is not None else np.full(len(x), self._median_tokens)
        bench = None
        if self.centroids is not None and self.lengths.benchmarks:
            where = {b: i for i, b in enumerate(self.lengths.benchmarks)}
            bench = np.array([where.get(b, -1) for b in (nearest or self.nearest(x))])
        return cost_matrix(self.prices, tokens, self.lengths.expected(bench, len(x), len(self.names)))

    @cached_property
    def question_tokens(self) -> np.ndarray:
        """Input tokens of the space's questions (counted once), for pricing onboarding's plans."""
        return question_input_tokens(self.space)

    @cached_property
    def _median_tokens(self) -> float:
        texts = getattr(self.space, "question_texts", None) or []
        return float(np.median(token_counter().count(texts[:500]))) if texts else 100.0

    def nearest(self, x: np.ndarray) -> list[str]:
        return self.centroids.nearest(x)

    @cached_property
    def _budget_sample(self) -> tuple[np.ndarray, np.ndarray]:
        """(P(correct), USD) of a seeded sample of the space's own questions, once per router."""
        emb = self.space.question_embeddings
        if emb is None or not len(emb):
            raise Conflict("the budget policy needs the space's questions (saved with it) to calibrate on")
        rows = np.random.default_rng(0).permutation(len(emb))[:BUDGET_QUERIES]
        texts = getattr(self.space, "question_texts", None)
        x = np.asarray(emb[rows], dtype=np.float32)
        return self.space.predict_proba(x), self.cost_matrix(x, [texts[i] for i in rows] if texts else None)

    def budget_weight(self, budget_per_1k: float) -> float:
        """The least cost weight at which the expected spend per 1,000 of the space's own questions
        (a seeded sample) meets `budget_per_1k`; a budget below the cheapest LLM's spend gets the
        weight that always picks the cheapest. Budgets are read to 3 significant digits, and the
        last BUDGET_CACHE of them remembered: a client cannot grow the cache or make each request
        recalibrate by sending new floats."""
        budget_per_1k = float(f"{budget_per_1k:.3g}")
        with self._budget_lock:
            if budget_per_1k in self._budget_weights:
                self._budget_weights.move_to_end(budget_per_1k)
                return self._budget_weights[budget_per_1k]
        p, c = self._budget_sample
        everywhere = np.ones(p.shape, bool)

        def spend(w: float) -> float:
            return float(c[np.arange(len(c)), cost_weighted_choice(p, c, w, everywhere)].mean() * 1000)

        lo, hi = 0.0, 1.0 / max(float(np.median(c)), 1e-12)
        if spend(lo) <= budget_per_1k:
            weight = lo
        else:
            while spend(hi) > budget_per_1k and hi < 1e15:
                hi *= 10
            for _ in range(50):  # bisection on a log scale
                mid = np.sqrt(max(lo, hi * 1e-12) * hi)
                lo, hi = (lo, mid) if spend(mid) <= budget_per_1k else (mid, hi)
            weight = hi
        with self._budget_lock:
            self._budget_weights[budget_per_1k] = weight
            while len(self._budget_weights) > BUDGET_CACHE:
                self._budget_weights.popitem(last=False)
        return weight

    def allowed(self, candidates=None, max_params_b: float | None = None) -> np.ndarray | None:
        """Column indices of the LLMs that `candidates` (names or globs, one glob, or {names,
        max_params_b}) and `max_params_b` allow, in the space's order; None: every LLM. Unknown
        names: NotFound (404); a filter that leaves none: BadRequest (400), naming it."""
        try:
            return self.catalog.select(CandidateFilter.of(candidates, max_params_b))
        except BadFilter as e:
            raise RequestError(str(e)) from None
        except UnknownLLMs as e:
            raise NotFound(str(e)) from None
        except NoCandidates as e:
            raise BadRequest(str(e)) from None

    def candidates(self, candidates, max_params_b: float | None, max_cost: float | None, cost: np.ndarray | None
                   ) -> np.ndarray:
        """Column indices of the LLMs a request allows: `allowed`, then those costing at most `max_cost`."""
        chosen = self.allowed(candidates, max_params_b)
        cand = np.arange(len(self.names)) if chosen is None else chosen
        if max_cost is not None:
            cand = cand[cost[:, cand].max(0) <= max_cost]
            if not len(cand):
                raise Conflict(f"no candidate LLM costs at most max_cost {max_cost} USD per call")
        return cand

    def _rule(self, policy: str, p: np.ndarray, x: np.ndarray, cost_weight: float, margin: float,
              cost: np.ndarray | None = None, target_p: float | None = None, target_share: float | None = None,
              budget_per_1k: float | None = None):
        """(choose, the policy's own score per LLM) of a policy: choose(available) -> one column
        per row; choose(available, q, rows) applies the same policy to other P(correct) `q` whose
        rows are the queries `rows` (an exploration's posterior draws)."""
        if policy == "tuned" and self.tuned is not None:
            chosen_policy, builder = self.tuned
            signals = builder.build(p, x, chosen_policy)

            def tuned(available, q=None, rows=None):
                s = signals if q is None else replace(signals.take(rows), p=q)
                return chosen_policy.choose(s, available)
            return tuned, chosen_policy.scores(signals)
        # rule(P(correct), USD, available) of the other policies
        if policy in ("most_likely", "tuned"):  # tuned without a stored policy: the highest p
            rule, score = (lambda q, c, available: available_argmax(q, available)), p
        elif policy in ("cost_weighted", "budget"):
            w = cost_weight if policy == "cost_weighted" else self.budget_weight(budget_per_1k)
            rule, score = (lambda q, c, available: cost_weighted_choice(q, c, w, available)), \
                cost_weighted_scores(p, cost, w)
        elif policy == "quality_target":
            rule, score = (lambda q, c, available: quality_target_choice(q, c, available, target_p, target_share)), p
        else:
            rule, score = (lambda q, c, available: cheapest_within_margin(q, c, margin, available)), p

        def choose(available, q=None, rows=None):
            if q is None:
                return rule(p, cost, available)
            return rule(q, None if cost is None else cost[rows], available)
        return choose, score

    def route(self, x: np.ndarray, *, policy: str | None = None, candidates: list[str] | None = None,
              top_k: int | None = DEFAULT_TOP_K, cost_weight: float = 0.0, margin: float = 0.02,
              max_cost: float | None = None, min_p: float | None = None, ranking: int = 5,
              texts: list[str] | None = None, target_p: float | None = None, target_share: float | None = None,
              budget_per_1k: float | None = None, max_params_b: float | None = None,
              ranked_scores: bool = False, also: list[str] = (), explore_counted: bool = True
              ) -> list[RouteDecision]:
        """One decision per row of `x` (encoder embeddings; `texts`: the queries, whose tokens
        are priced): `chosen`, `policy`, `p_correct`, `propensity` and `explored` (1 and False
        unless `self.exploration` is set), `expected_cost` (USD), `difficulty`
        (||E_Q||), `nearest_benchmark`, `ranking` (the policy's own order of the allowed LLMs: the
        pick, then the next best once the ones before are taken away, at most `ranking` of them:
        a gateway's fallbacks), and `scores` (every allowed LLM's p, the policy's own `score` and
        expected cost, by p, the first `top_k`). `min_p` allows only the LLMs whose p reaches it;
        `max_cost` only those that cost at most that many USD per call. `candidates`: a list of
        names or globs ("*Mistral*", any case), one glob, or {"names": ..., "max_params_b": ...};
        `max_params_b`: only LLMs of known size up to that many billion parameters.
        `ranked_scores`: `scores` also holds the LLMs of `ranking`, and of `also` where allowed,
        after the first `top_k` (what a log or a gateway needs of a space of thousands).
        `explore_counted`: these queries raise exploration's spend allowance (false for routes whose
        answers the service does not pay for: POST /v1/route)."""
        x = np.atleast_2d(np.asarray(x, dtype=np.float32))
        policy = policy or self.default_policy
        _check_numbers(top_k=(top_k, 1, None, True), ranking=(ranking, 1, None, True),
                       cost_weight=(cost_weight, 0, None, False), margin=(margin, 0, None, False),
                       max_cost=(max_cost, 0, None, False), min_p=(min_p, 0, 1, False), target_p=(target_p, 0, 1, False),
                       target_share=(target_share, 0, 1, False), budget_per_1k=(budget_per_1k, 0, None, False))
        for name, value in (("target_share", target_share), ("budget_per_1k", budget_per_1k)):
            if value is not None and value == 0:
                raise RequestError(f"{name} must be above 0")
        if policy not in POLICIES:
            raise RequestError(f"unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")
        if (policy in COST_POLICIES or max_cost is not None) and not self.priced:
            raise Conflict(f"policy {policy!r}{' and max_cost' if max_cost is not None else ''} need prices; none are "
                           f"configured (train with prices=, or set the Router's user_config.prices or usd_per_call)")
        # a policy's missing or doubled parameter is a 409, as the schema cannot say which fields a
        # policy needs (they may also come as headers): every schema-valid request gets a 2xx/4xx it documents
        if policy == "quality_target" and (target_p is None) == (target_share is None):
            raise Conflict("policy 'quality_target' needs exactly one of target_p (an absolute P(correct)) or "
                           "target_share (a share of the best LLM's p)")
        if policy == "budget" and budget_per_1k is None:
            raise Conflict("policy 'budget' needs budget_per_1k (USD per 1,000 queries)")
        nearest = self.nearest(x) if self.centroids is not None else None
        cost = self.cost_matrix(x, texts, nearest)
        cand = self.candidates(candidates, max_params_b, max_cost, cost)
        p, norms = self.predicted(x)
        allowed = np.zeros(p.shape, dtype=bool)
        allowed[:, cand] = True
        if min_p is not None:
            allowed &= p >= min_p
            empty = np.flatnonzero(~allowed.any(1))
            if len(empty):
                i = int(empty[0])
                raise Conflict(f"no candidate LLM reaches min_p {min_p} for query {i} (the best p is "
                               f"{p[i, cand].max():.3f}): lower min_p or allow more candidates")
        choose, score = self._rule(policy, p, x, cost_weight, margin, cost, target_p, target_share, budget_per_1k)
        first = greedy = choose(allowed)
        propensity, explored = np.ones(len(p)), np.zeros(len(p), dtype=bool)
        exploration = self.exploration
        if exploration is not None:
            first, propensity, explored = exploration.decide(choose, x, allowed, first, cost, explore_counted)
        order, left = [], allowed.copy()
        for r in range(max(1, min(ranking, len(cand)))):
            pick = first if r == 0 else choose(left)
            ok = left[np.arange(len(p)), pick]  # rows that had an LLM left
            order.append(np.where(ok, pick, -1))
            left[np.arange(len(p))[ok], pick[ok]] = False

        def cost_of(i, j):
            return None if cost is None else float(cost[i, j])

        extra = [self.index[n] for n in also if n in self.index]
        out = []
        for i in range(len(p)):
            pick = int(order[0][i])
            cols = np.flatnonzero(allowed[i])
            by_p = _top(p[i], cols, top_k)
            if ranked_scores or extra:
                listed = set(by_p.tolist())
                more = [j for j in [int(o[i]) for o in order if o[i] >= 0] + [e for e in extra if allowed[i, e]]
                        if not (j in listed or listed.add(j))]
                by_p = np.r_[by_p, np.array(more, dtype=by_p.dtype)]
            out.append({"query_index": i, "chosen": self.names[pick], "policy": policy, "p_correct": float(p[i, pick]),
                        "propensity": float(propensity[i]), "explored": bool(explored[i]),
                        "policy_choice": self.names[int(greedy[i])],
                        "expected_cost": cost_of(i, pick), "difficulty": float(norms[i]),
                        "nearest_benchmark": nearest and nearest[i],
                        "ranking": [self.names[int(o[i])] for o in order if o[i] >= 0],
                        "scores": [{"model": self.names[j], "p_correct": float(p[i, j]), "score": float(score[i, j]),
                                    "cost": cost_of(i, j)} for j in by_p]})
        return out


def _top(p: np.ndarray, cols: np.ndarray, k: int | None) -> np.ndarray:
    """The columns `cols` of the `k` highest `p` (None: all), highest first (ties: lower column
    first); a partition first where k is a small part of thousands."""
    if k is not None and k < len(cols) // 4:
        cols = cols[np.sort(np.argpartition(-p[cols], k - 1)[:k])]
    return cols[np.argsort(-p[cols], kind="stable")][:k]


def _aligned(prices: LLMPrices, names: list[str]) -> LLMPrices:
    """Prices in the order of `names`; an LLM they do not list (onboarded later) is priced as the
    dearest one they do."""
    where = {m: i for i, m in enumerate(prices.models)}
    idx = [where.get(n, -1) for n in names]
    top_in, top_out = prices.input_usd_per_mtok.max(), prices.output_usd_per_mtok.max()
    return LLMPrices(list(names), np.array([prices.input_usd_per_mtok[i] if i >= 0 else top_in for i in idx]),
                     np.array([prices.output_usd_per_mtok[i] if i >= 0 else top_out for i in idx]),
                     [prices.sources[i] if i >= 0 else "dearest" for i in idx],
                     [prices.notes[i] if i >= 0 else "not in the prices: priced as the dearest" for i in idx])


def _check_numbers(**given) -> None:
    """RequestError (422) for a setting that is not a finite number within its range: each given
    as (value, lowest, highest or None, whole number?); None values are not set."""
    for name, (value, low, high, whole) in given.items():
        if value is None:
            continue
        integer = isinstance(value, (int, np.integer))  # of any size: a float() of it may overflow
        if isinstance(value, bool) or not (integer or isinstance(value, (float, np.floating))) \
                or (whole and not integer and not float(value).is_integer()):
            kind = "a whole number" if whole else "a number"
            raise RequestError(f"{name} must be {kind}, not {value!r}")
        if (not integer and not np.isfinite(value)) or value < low or (high is not None and value > high):
            span = f"from {low:g} to {high:g}" if high is not None else f"at least {low:g}"
            raise RequestError(f"{name} must be {span}, not {value!r}")
