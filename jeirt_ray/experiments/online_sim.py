"""The learning router simulated on real labels (benchmarks/online.py).

A space is trained on part of a dataset: some benchmarks (categories) held out entirely, the
others split into training, validation and a stream part. Then unseen queries arrive in random
order: the stream part of the seen categories and every question of the held-out ones. At each
step a method picks an LLM among those with a label for the question (on sparse data the others
count as unreachable), receives that LLM's label and is charged its price. Methods:

    static          the trained space's choice, never updated (argmax, or cost-weighted with prices)
    online          the posterior over the LLMs' vectors, updated with the chosen LLM's outcome,
                    exploring by the rule and share chosen on validation (learning.Explorer)
    online_full     the same, and on a share `full_share` of the queries every reachable LLM is
                    asked and learned from (full feedback, charged)
    online_regions  a shift of the question side per region of the query space, learned from every
                    chosen LLM's outcome, over the static space (regions.RegionLearner: Thompson
                    draws; the regions' start fitted to the training questions' answers)
    epsilon_greedy  the same learning, exploring uniformly at random on a share `epsilon`
    online_budget   `online` with a pacer that moves the cost weight to spend `budget_per_1k` USD per
                    1,000 queries (learning.Pacer, from the router's open-loop `budget_weight`; with
                    prices, when a budget is given)
    linucb          a LinUCB contextual bandit per LLM on the same question directions, cold
    category_thompson  a reference no router can be: it knows each query's category, and learns per
                    category and LLM a correction of the space's logit (Thompson sampling on every
                    query): what partial feedback can find within the stream when the categories
                    are given
    category_best   the best LLM of each category on the stream, in hindsight
    oracle          a correct LLM whenever one exists (the cheapest, with prices)

The configuration of the online methods (prior variance, exploring rule and share) is chosen on
a validation stream: one more held-out category and the validation questions of the seen ones,
never the test stream.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from ..data.splits import Split, assign_parts
from ..learning.explore import DEFAULTS, Explorer, Pacer
from ..learning.online import OnlineState, Outcomes
from ..model.onboarding import directions
from ..model.space import CoreSpace
from .prepare import Prepared
from .regions import DEFAULTS as REGION_DEFAULTS, RegionLearner

METHODS = ("static", "online", "online_full", "online_regions", "epsilon_greedy", "linucb", "category_thompson",
           "category_best", "oracle")
GRID = {"prior_var": (0.003, 0.03), "residual_var": (0.0, 1.0), "evidence": (0.0,), "rule": ("thompson", "ucb"),
        "explore": (0.1,)}
REGION_GRID = {"regions": (14, 28), "bias_var": (0.0, 0.3), "explore": (0.3, 1.0)}


@dataclasses.dataclass
class Stream:
    rows: np.ndarray  # question rows in arrival order
    unseen: np.ndarray  # (n,) whether the question's category was held out of training
    labels: np.ndarray  # (n, LLMs) NaN where no label
    costs: np.ndarray  # (n, LLMs) USD
    category: np.ndarray  # (n,) benchmark names


def held_out_split(data, held: list[str], seed: int, fractions=(0.6, 0.1, 0.3)) -> Split:
    """Questions of `held` benchmarks in part 2 (the stream); the others split by `fractions`."""
    part = np.full(data.n_questions, 2, dtype=np.int8)
    seen = np.flatnonzero(~np.isin(data.benchmarks, held))
    part[seen] = assign_parts(len(seen), fractions, np.random.default_rng(seed))
    return Split("online_held_out", seed, part, info={"held_out_benchmarks": list(held)})


def choose_categories(data, n_test: int, seed: int, given: list[str] | None = None) -> tuple[list[str], str | None]:
    """(held-out test categories, one held-out validation category), drawn by seed; with `given`,
    those test categories and a validation category drawn from the others. A dataset with too few
    benchmarks for that keeps at least one to train on: fewer test categories (none with one
    benchmark: the stream is then the seen categories' new questions alone) and no validation
    category with fewer than two left (validation then uses the seen categories' validation
    questions alone)."""
    benches = sorted(set(data.benchmarks))
    if given:
        unknown = sorted(set(given) - set(benches))
        if unknown:
            raise ValueError(f"{data.name} has no benchmark {unknown[0]!r}: it has {', '.join(benches)}")
        if len(set(given)) >= len(benches):
            raise ValueError(f"{data.name} has {len(benches)} benchmarks: holding out all of them leaves none to "
                             f"train on; name fewer")
        n_test = len(set(given))
    else:
        n_test = max(0, min(n_test, len(benches) - (2 if len(benches) >= 3 else 1)))
    order = np.random.default_rng(seed).permutation(benches)
    held = sorted(set(given)) if given else sorted(order[:n_test].tolist())
    rest = [str(b) for b in order if b not in held]
    return held, (rest[0] if len(rest) >= 2 else None)


def make_stream(prep: Prepared, rows: np.ndarray, held: list[str], cost_of, seed: int, limit: int | None) -> Stream:
    data = prep.data
    labels = data.label_matrix(rows)
    keep = (~np.isnan(labels)).any(1)
    rows, labels = rows[keep], labels[keep]
    order = np.random.default_rng(seed + 1).permutation(len(rows))[:limit]
    rows, labels = rows[order], labels[order]
    return Stream(rows, np.isin(data.benchmarks[rows], held), labels, cost_of(rows), data.benchmarks[rows])


# ---- the methods, one step at a time ------------------------------------------------------------

class Static:
    def __init__(self, state: OnlineState, weight: float):
        self.state, self.weight = state, weight

    def features(self, x: np.ndarray):
        return self.state.geometry(x)

    def step(self, i, geo, costs, allowed, labels):
        p = self.state.predict_proba(None, geo)[0]
        return int(np.argmax(np.where(allowed, p - self.weight * costs, -np.inf))), 0.0, 0.0


class Online:
    """Learning with `learning.Explorer`; `full_share`: queries on which every reachable LLM is learned."""

    def __init__(self, state: OnlineState, explorer: Explorer, full_share: float = 0.0, seed: int = 0,
                 epsilon: float | None = None):
        self.state, self.explorer, self.full_share = state, explorer, full_share
        self.epsilon, self.rng = epsilon, np.random.default_rng(seed + 7)

    def features(self, x: np.ndarray):
        return self.state.geometry(x)

    def step(self, i, geo, costs, allowed, labels):
        if self.epsilon is not None:  # epsilon-greedy: the posterior means, or any reachable LLM at random
            p = self.state.predict_proba(None, geo)[0]
            greedy = int(np.argmax(np.where(allowed, p - self.explorer.weight() * costs, -np.inf)))
            explored = self.rng.random() < self.epsilon
            chosen = int(self.rng.choice(np.flatnonzero(allowed))) if explored else greedy
            extra = max(0.0, costs[chosen] - costs[greedy]) if explored else 0.0
            learned = [chosen]
        else:
            d = self.explorer.decide(None, costs[None], allowed[None], geo=geo)[0]
            chosen, extra, learned = d.chosen, self.explorer.charge(d, costs), [d.chosen]
        asked = 0.0
        if self.full_share and self.rng.random() < self.full_share:
            learned = np.flatnonzero(allowed).tolist()
            asked = float(costs[allowed].sum() - costs[chosen])  # the other LLMs' answers, paid for learning
        rows = [(u.repeat(len(learned), 0), n.repeat(len(learned))) for u, n in geo]
        self.state.update(Outcomes(np.zeros((len(learned), 1)), np.array(learned), labels[learned]), geo=rows)
        return chosen, extra + asked, asked


class Regions:
    """Learning per region of the query space (regions.RegionLearner), over the static space."""

    def __init__(self, learner: RegionLearner, weight: float = 0.0):
        self.learner, self.weight = learner, weight

    def features(self, x: np.ndarray):
        return [(x, self.learner.static_logits(x).transpose(1, 0, 2))]  # the space's logits: (n, members, K)

    def step(self, i, geo, costs, allowed, labels):
        x, base = geo[0][0], geo[0][1].transpose(1, 0, 2)
        d = self.learner.decide(x, allowed, costs, self.weight, base=base)
        self.learner.update(x, [d.chosen], [labels[d.chosen]], base=base)
        return d.chosen, max(0.0, costs[d.chosen] - costs[d.greedy]) if d.explored else 0.0, 0.0


class CategoryThompson:
    """Per (category, LLM) a correction of the space's logit, normal with variance `prior_var` at
    the start, learned by the Laplace step from the chosen LLM's outcome; each query goes to the
    LLM that wins a posterior draw. `category`: each stream query's category, in stream order."""

    def __init__(self, state: OnlineState, category: np.ndarray, prior_var: float, seed: int = 0):
        self.state, self.category, self.prior_var = state, category, prior_var
        self.mean, self.precision = {}, {}
        self.rng = np.random.default_rng(seed + 11)

    def features(self, x: np.ndarray):
        return self.state.geometry(x)

    def step(self, i, geo, costs, allowed, labels):
        base = self.state.logits(geo).mean(0)[0]
        c = self.category[i]
        mean = self.mean.setdefault(c, np.zeros(len(base)))
        precision = self.precision.setdefault(c, np.full(len(base), 1 / self.prior_var))
        draw = mean + self.rng.standard_normal(len(base)) / np.sqrt(precision)
        chosen = int(np.argmax(np.where(allowed, base + draw, -np.inf)))
        greedy = int(np.argmax(np.where(allowed, base + mean, -np.inf)))
        p = 1 / (1 + np.exp(-(base[chosen] + mean[chosen])))
        precision[chosen] += max(p * (1 - p), 1e-6)
        mean[chosen] += (labels[chosen] - p) / precision[chosen]
        return chosen, max(0.0, costs[chosen] - costs[greedy]) if chosen != greedy else 0.0, 0.0


class LinUCB:
    """Disjoint LinUCB (Li et al. 2010): per LLM a ridge regression of the outcome on the
    question's direction (member 0) and a bias, the arm with the highest upper bound."""

    def __init__(self, space: CoreSpace, alpha: float = 1.0, ridge: float = 1.0, weight: float = 0.0):
        k, d = len(space.model_names), space.model_vectors(0).shape[1]
        self.space = space
        self.A_inv = np.tile(np.eye(d + 1) / ridge, (k, 1, 1))
        self.b = np.zeros((k, d + 1))
        self.alpha, self.weight = alpha, weight

    def features(self, x: np.ndarray):
        return directions(self.space, x)[:1]

    def step(self, i, geo, costs, allowed, labels):
        f = np.append(geo[0][0][0], 1.0)
        theta = np.einsum("kde,ke->kd", self.A_inv, self.b)
        bound = theta @ f + self.alpha * np.sqrt(np.einsum("d,kde,e->k", f, self.A_inv, f))
        chosen = int(np.argmax(np.where(allowed, bound - self.weight * costs, -np.inf)))
        a = self.A_inv[chosen]
        af = a @ f
        self.A_inv[chosen] = a - np.outer(af, af) / (1.0 + f @ af)
        self.b[chosen] += labels[chosen] * f
        return chosen, 0.0, 0.0


def run_method(method, stream: Stream, x: np.ndarray) -> dict:
    """Replay the stream through a method: per step its LLM, label and spend (the chosen LLM's
    price, plus the other LLMs asked for full feedback), and the exploration's part of that spend
    (beyond the greedy choice, and the LLMs asked only to learn)."""
    n = len(stream.rows)
    chosen, correct, cost, extra = (np.zeros(n, np.int64), np.zeros(n), np.zeros(n), np.zeros(n))
    start = time.perf_counter()
    geo = method.features(x)  # the queries' encoder embeddings enter once, as a serving replica's would
    for i in range(n):
        allowed = ~np.isnan(stream.labels[i])
        g = [(u[i:i + 1], nn[i:i + 1]) for u, nn in geo]
        c, x, asked = method.step(i, g, stream.costs[i], allowed, np.nan_to_num(stream.labels[i]))
        chosen[i], correct[i], cost[i], extra[i] = c, stream.labels[i, c], stream.costs[i, c] + asked, x
    return {"chosen": chosen, "correct": correct, "cost": cost, "extra": extra,
            "seconds_per_step": (time.perf_counter() - start) / max(n, 1)}


def hindsight(stream: Stream) -> dict[str, dict]:
    """category_best and oracle, from the stream's own labels."""
    import warnings
    warnings.simplefilter("ignore", RuntimeWarning)  # LLMs without a label in a category: NaN means
    n, k = stream.labels.shape
    out = {}
    best = np.zeros(n, np.int64)
    for c in set(stream.category):
        rows = stream.category == c
        acc = np.nanmean(np.where(np.isnan(stream.labels[rows]), np.nan, stream.labels[rows]), axis=0)
        best[rows] = int(np.nanargmax(acc))
    avail = ~np.isnan(stream.labels)
    # where the category's best has no label for a question, its best reachable one by the same ranking
    cat_choice = best.copy()
    for i in np.flatnonzero(~avail[np.arange(n), best]):
        rows = stream.category == stream.category[i]
        acc = np.nan_to_num(np.nanmean(stream.labels[rows], axis=0), nan=-1)
        cat_choice[i] = int(np.argmax(np.where(avail[i], acc, -np.inf)))
    # the oracle: the best label each question got, from its cheapest LLM (with 0/1 labels: the
    # cheapest correct one, else the cheapest; graded labels in [0, 1] make the best label count)
    top = np.where(avail, stream.labels, -np.inf).max(1, keepdims=True)
    oracle = np.where(avail & (stream.labels == top), stream.costs, np.inf).argmin(1)
    for name, ch in (("category_best", cat_choice), ("oracle", oracle)):
        out[name] = {"chosen": ch, "correct": stream.labels[np.arange(n), ch], "cost": stream.costs[np.arange(n), ch],
                     "extra": np.zeros(n), "seconds_per_step": 0.0}
    return out


def build(method: str, space: CoreSpace, config: dict, weight: float, seed: int, full_share: float,
          epsilon: float, budget_per_1k: float | None = None, start_weight: float = 1.0,
          pacer_gain: float = 4.0) -> object:
    state = OnlineState(space, config["prior_var"], config["evidence"], config["residual_var"])
    if method == "static":
        return Static(state, weight)
    if method == "linucb":
        return LinUCB(space, weight=weight)
    explorer = Explorer(state, rule=config["rule"], explore=config["explore"], cost_weight=weight, seed=seed)
    if method == "online":
        return Online(state, explorer, seed=seed)
    if method == "online_full":
        return Online(state, explorer, full_share=full_share, seed=seed)
    if method == "epsilon_greedy":
        return Online(state, explorer, seed=seed, epsilon=epsilon)
    if method == "online_budget":
        explorer.pacer = Pacer(budget_per_1k, weight=start_weight, gain=pacer_gain)
        return Online(state, explorer, seed=seed)
    raise ValueError(f"unknown method {method!r}")


def last_half(stream: Stream, run: dict, part: np.ndarray) -> np.ndarray:
    """The correctness of `part`'s queries that arrived in the second half of the stream."""
    late = np.arange(len(stream.rows)) >= len(stream.rows) // 2
    return run["correct"][late & part]


def choose_config(space: CoreSpace, stream: Stream, x: np.ndarray, weight: float, seed: int) -> tuple[dict, list[dict]]:
    """The online method's configuration (GRID, every combination) on the validation stream."""
    return choose_on(stream, x, GRID, lambda c: build("online", space, c, weight, seed, 0.0, 0.0), DEFAULTS)


def choose_on(stream: Stream, x: np.ndarray, grid: dict, make, defaults: dict) -> tuple[dict, list[dict]]:
    """The configuration (every combination of `grid`; `make(config)` builds the method) with the
    best mean of unseen and seen accuracy over the last half of the validation stream."""
    import itertools
    tried = []
    for values in itertools.product(*grid.values()):
        config = dict(zip(grid, values))
        run = run_method(make(config), stream, x)
        score = [_mean_or_none(last_half(stream, run, stream.unseen)),
                 _mean_or_none(last_half(stream, run, ~stream.unseen))]
        tried.append({**config, "unseen": score[0], "seen": score[1],
                      "score": float(np.mean([v for v in score if v is not None]))})  # a part may be empty
    # ties (to 1 query in 1,000: a validation category without headroom tells the settings apart
    # little) go to `defaults` (the library's), then to the first in the grid
    best = max(tried, key=lambda t: (round(t["score"], 3), all(t[k] == defaults.get(k) for k in grid)))
    return {k: best[k] for k in grid}, tried


def choose_region_config(space: CoreSpace, stream: Stream, x: np.ndarray, known_x: np.ndarray,
                         known_y: np.ndarray, weight: float, seed: int) -> tuple[dict, list[dict]]:
    """online_regions' configuration (REGION_GRID) on the validation stream."""
    return choose_on(stream, x, REGION_GRID, lambda c: build_regions(space, known_x, known_y, c, weight, seed),
                     REGION_DEFAULTS)


CATEGORY_PRIORS = (0.03, 0.1, 0.3)


def choose_category_prior(space: CoreSpace, stream: Stream, x: np.ndarray, seed: int) -> tuple[float, list[dict]]:
    """category_thompson's prior variance on the validation stream."""
    config, tried = choose_on(stream, x, {"prior_var": CATEGORY_PRIORS},
                              lambda c: build_category(space, stream, c["prior_var"], seed), {"prior_var": 0.1})
    return config["prior_var"], tried


def build_category(space: CoreSpace, stream: Stream, prior_var: float, seed: int) -> CategoryThompson:
    return CategoryThompson(OnlineState(space, 0.003), stream.category, prior_var, seed)


def build_regions(space: CoreSpace, known_x: np.ndarray, known_y: np.ndarray, config: dict, weight: float,
                  seed: int) -> Regions:
    settings = REGION_DEFAULTS | config
    return Regions(RegionLearner(space, known_x, known_y, settings["regions"], settings["prior_var"],
                                 settings["bias_var"], settings["evidence"], settings["explore"], seed=seed), weight)


PACER_GAINS = (0.5, 1.0, 2.0, 4.0)


def choose_pacer_gain(space: CoreSpace, stream: Stream, x: np.ndarray, config: dict, budget_per_1k: float,
                      start_weight: float, seed: int) -> tuple[float, list[dict]]:
    """The pacer's gain whose total spend on the validation stream comes nearest the budget."""
    tried = []
    for gain in PACER_GAINS:
        run = run_method(build("online_budget", space, config, 0.0, seed, 0.0, 0.0, budget_per_1k, start_weight,
                               gain), stream, x)
        tried.append({"gain": gain, "over_budget": float(run["cost"].mean() * 1000 / budget_per_1k - 1)})
    return min(tried, key=lambda t: abs(t["over_budget"]))["gain"], tried


def adoption(space: CoreSpace, stream: Stream, x: np.ndarray, config: dict, weight: float, seed: int) -> dict:
    """A cold-started LLM: the best LLM of one held-out category, its vector reset to the known
    LLMs' mean with their spread as its prior (no labels), then the online method on the stream.
    How many of its requests it takes before it holds half of that category's last 50 queries."""
    import warnings
    warnings.simplefilter("ignore", RuntimeWarning)  # LLMs without a label in a category: NaN means
    unseen = sorted(set(stream.category[stream.unseen]))
    if not unseen:
        return {"llm": None, "category": None, "adoption_steps": None}
    hind = hindsight(stream)["category_best"]["chosen"]
    gaps = {}
    for c in unseen:
        rows = stream.category == c
        acc = np.nan_to_num(np.nanmean(stream.labels[rows], axis=0), nan=-1)
        k = int(hind[rows][0])
        gaps[c] = (acc[k] - np.sort(acc)[-2], k)
    category, (_, k) = max(gaps.items(), key=lambda kv: kv[1][0])  # where the best LLM stands out most
    state = OnlineState(space, config["prior_var"], config["evidence"], config["residual_var"])
    state.reset_llm(k)
    explorer = Explorer(state, rule=config["rule"], explore=config["explore"], cost_weight=weight, seed=seed)
    run = run_method(Online(state, explorer, seed=seed), stream, x)
    in_cat = np.flatnonzero(stream.category == category)
    got = run["chosen"][in_cat] == k
    requests = np.cumsum(run["chosen"] == k)
    steps = None
    for j in range(len(in_cat)):
        window = got[max(0, j - 49):j + 1]
        if len(window) >= 50 and window.mean() >= 0.5:
            steps = int(requests[in_cat[j]])
            break
    return {"llm": state.names[k], "category": category, "adoption_steps": steps,
            "share_last_half": float(got[len(got) // 2:].mean()) if len(got) else None}


def paired_ci(a: np.ndarray, b: np.ndarray, n_boot: int = 2000, seed: int = 0) -> list[float]:
    """95% bootstrap interval of mean(a - b), pairs resampled."""
    diff = np.asarray(a, float) - np.asarray(b, float)
    if len(diff) == 0:
        return [float("nan"), float("nan")]
    rng = np.random.default_rng(seed)
    boots = diff[rng.integers(0, len(diff), size=(n_boot, len(diff)))].mean(1)
    return [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))]


def summarise(stream: Stream, runs: dict[str, dict], points: int = 20, window: int = 500) -> dict:
    n = len(stream.rows)
    steps = sorted({max(1, int(n * (j + 1) / points)) for j in range(points)})
    curve = {str(s): {m: {"accuracy_window": float(np.mean(r["correct"][max(0, s - window):s])),
                          "cost_per_1k_window": float(np.mean(r["cost"][max(0, s - window):s]) * 1000),
                          "unseen_accuracy_window": _mean_or_none(r["correct"][max(0, s - window):s][
                              stream.unseen[max(0, s - window):s]])}
                      for m, r in runs.items()} for s in steps}
    final = {}
    for m, r in runs.items():
        spend = float(r["cost"].sum())
        final[m] = {"unseen_accuracy_last_half": _mean_or_none(last_half(stream, r, stream.unseen)),
                    "seen_accuracy_last_half": _mean_or_none(last_half(stream, r, ~stream.unseen)),
                    "accuracy": float(r["correct"].mean()), "cost_per_1k": float(r["cost"].mean() * 1000),
                    "exploration_cost_share": float(r["extra"].sum() / spend) if spend > 0 else 0.0,
                    "ms_per_step": r["seconds_per_step"] * 1000}
    for part, mask in (("unseen", stream.unseen), ("seen", ~stream.unseen)):
        final[f"online_minus_static_{part}"] = float(np.mean(last_half(stream, runs["online"], mask))
                                                     - np.mean(last_half(stream, runs["static"], mask))) \
            if mask.any() else None
        final[f"online_minus_static_{part}_ci95"] = paired_ci(last_half(stream, runs["online"], mask),
                                                              last_half(stream, runs["static"], mask)) \
            if mask.any() else None
        if "online_regions" in runs:
            final[f"online_regions_minus_static_{part}_ci95"] = paired_ci(
                last_half(stream, runs["online_regions"], mask), last_half(stream, runs["static"], mask)) \
                if mask.any() else None
    return {"curve": curve, "final": final}


def _mean_or_none(v: np.ndarray) -> float | None:
    return float(np.mean(v)) if len(v) else None
