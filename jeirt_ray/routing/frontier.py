"""The cost-accuracy frontier of a router: its operating points, and what they are worth.

A router with a cost knob has many operating points (one per setting). Each point is a pick per
question; its cost is the mean USD of the picked LLM's answer, its accuracy the mean label. Any two
points can be mixed at random, so a router is worth the upper hull of its points
(`upper_hull`). Figures, for a reference LLM (the best single one):

- `aiq`: the area under the hull over the singles' cost range, divided by its width (RouterBench);
- `cost_share_at_best_accuracy`: the least cost on the hull that reaches the reference's accuracy,
  as a share of the reference's cost (None where the hull never reaches it);
- `accuracy_at_cost_share`: the hull's accuracy at 10%, 25% and 50% of the reference's cost
  (None where no point is that cheap);
- `arena`: RouterArena's score (beta 0.1) of one operating point, chosen on validation:
  S = (1 + b) A C / (b A + C), C = (log2 200 - log2 cost per 1k) / (log2 200 - log2 0.0044).

`Points` keeps each point's per-question cost and label, so that every figure gets a bootstrap
interval over questions (`bootstrap`).

The report's curves, on per-LLM costs: `cost_curve` (the utility rule over a sweep of weights),
`margin_curve`, `single_llm_points`; `upper_hull` and `aiq` (RouterBench: the area under the
non-decreasing concave hull of (average cost, accuracy) points, over the cost range; any two
points can be mixed by randomising between their settings, hence the hull); and CPT(x)
(RouteLLM, Ong et al. 2024): between the cheapest LLM and the best one (on training data), the
smallest share of calls to the best one, routed by predicted advantage, that reaches x of the
accuracy gap between the two (a router blind to the question needs x). Questions where either of
the two has no label are left out of CPT.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .costs import cheapest_within_margin, cost_weighted_choice, quality_target_choice
from .outcomes import available_argmax, routed_labels

SHARES = (0.1, 0.25, 0.5)
ARENA_BETA, ARENA_C_MAX, ARENA_C_MIN = 0.1, 200.0, 0.0044  # RouterArena's constants (USD per 1,000 queries)


@dataclass
class Points:
    """Operating points of one router on one set of questions: per question and point, the cost
    (USD) and label of the LLM it picks."""

    cost: np.ndarray  # (n, P)
    label: np.ndarray  # (n, P)
    settings: list  # what produced each point (a lambda, a target, a threshold)

    @classmethod
    def of_picks(cls, picks: np.ndarray, cost: np.ndarray, labels: np.ndarray, settings: list) -> "Points":
        """From (n, P) picks (column indices) and the (n, M) cost and label matrices."""
        rows = np.arange(len(picks))[:, None]
        return cls(cost[rows, picks], np.nan_to_num(labels[rows, picks]), list(settings))

    def extend(self, other: "Points") -> "Points":
        return Points(np.hstack([self.cost, other.cost]), np.hstack([self.label, other.label]),
                      self.settings + other.settings)

    def means(self, w: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(cost per 1k queries, accuracy) of every point; `w`: question weights (a bootstrap)."""
        if w is None:
            return self.cost.mean(0) * 1000, self.label.mean(0)
        return (w @ self.cost) / w.sum() * 1000, (w @ self.label) / w.sum()


def lambdas(cost: np.ndarray, n: int = 60) -> np.ndarray:
    """The price weights swept: 0, then from negligible to overwhelming against a p gap of 1."""
    scale = float(np.median(cost[cost > 0])) if (cost > 0).any() else 1.0
    return np.concatenate([[0.0], np.geomspace(1e-3, 1e4, n - 1) / scale])


def utility_picks(p: np.ndarray, cost: np.ndarray, available: np.ndarray, lams: np.ndarray) -> np.ndarray:
    """The `cost_weighted` rule (expected utility p - lambda x cost) at each lambda: (n, P)."""
    return np.stack([cost_weighted_choice(p, cost, lam, available) for lam in lams], axis=1)


def target_picks(p: np.ndarray, cost: np.ndarray, available: np.ndarray, targets) -> np.ndarray:
    """The `quality_target` rule at each share `target` of the best available p: (n, P)."""
    return np.stack([quality_target_choice(p, cost, available, target_share=t) for t in targets], axis=1)


TARGETS = tuple(np.round(np.linspace(0.5, 1.0, 21), 3))


def policy_points(p: np.ndarray, cost: np.ndarray, paid: np.ndarray, labels: np.ndarray, lams: np.ndarray) -> Points:
    """A router's points under both cost policies, deciding on the expected `cost` and charged
    what the answers `paid`: utility (lambda swept) and quality target (relative to its best
    LLM's p). Candidates per question: the LLMs with a label."""
    available = ~np.isnan(labels)
    pts = Points.of_picks(utility_picks(p, cost, available, lams), paid, labels,
                          [{"policy": "utility", "lambda": float(x)} for x in lams])
    return pts.extend(Points.of_picks(target_picks(p, cost, available, TARGETS), paid, labels,
                                      [{"policy": "quality_target", "target": float(t)} for t in TARGETS]))


def threshold_points(advantage: np.ndarray, strong: int, weak: int, cost: np.ndarray, paid: np.ndarray,
                     labels: np.ndarray, n: int = 41) -> Points:
    """RouteLLM's two-LLM router: the strong LLM where its predicted advantage over the weak one
    passes a threshold (swept over the advantage's quantiles, from all-weak to all-strong).
    Where the LLM picked has no label, the other one answers; where neither has, the question's
    best-priced available LLM (sparse data only)."""
    available = ~np.isnan(labels)
    ts = np.concatenate([[np.inf], np.quantile(advantage, np.linspace(1, 0, n - 1)) - 1e-12])
    fallback = available_argmax(-cost, available)
    picks = []
    for t in ts:
        pick = np.where(advantage > t, strong, weak)
        other = np.where(pick == strong, weak, strong)
        pick = np.where(available[np.arange(len(pick)), pick], pick,
                        np.where(available[np.arange(len(pick)), other], other, fallback))
        picks.append(pick)
    return Points.of_picks(np.stack(picks, 1), paid, labels, [{"threshold": float(t)} for t in ts])


def hull_value(hull: list[tuple[float, float]], x: float) -> float | None:
    """The hull's accuracy at cost x (None below its cheapest point; its best beyond its last)."""
    if not hull or x < hull[0][0] - 1e-15:
        return None
    for (x0, y0), (x1, y1) in zip(hull, hull[1:]):
        if x <= x1:
            return float(y0 + (y1 - y0) * (x - x0) / (x1 - x0)) if x1 > x0 else float(y1)
    return float(hull[-1][1])


def cost_to_reach(hull: list[tuple[float, float]], target: float) -> float | None:
    """The least cost at which the hull reaches accuracy `target`."""
    if not hull or hull[-1][1] < target - 1e-12:
        return None
    if hull[0][1] >= target:
        return float(hull[0][0])
    for (x0, y0), (x1, y1) in zip(hull, hull[1:]):
        if y1 >= target:
            return float(x0 + (x1 - x0) * (target - y0) / (y1 - y0))
    return None


def arena_score(cost_per_1k: float, accuracy: float) -> float:
    """RouterArena's score (beta 0.1) of accuracy in [0, 1] at a cost per 1,000 queries (USD)."""
    c = min(max(cost_per_1k, ARENA_C_MIN), ARENA_C_MAX)
    norm = (np.log2(ARENA_C_MAX) - np.log2(c)) / (np.log2(ARENA_C_MAX) - np.log2(ARENA_C_MIN))
    return float((1 + ARENA_BETA) * accuracy * norm / (ARENA_BETA * accuracy + norm)) if accuracy + norm > 0 else 0.0


def figures(costs: np.ndarray, accs: np.ndarray, ref_cost: float, ref_acc: float,
            cost_range: tuple[float, float]) -> dict:
    """AIQ, the cost share to reach the reference's accuracy, the accuracy at shares of its cost."""
    hull = upper_hull(list(zip(costs.tolist(), accs.tolist())))
    reach = cost_to_reach(hull, ref_acc)
    return {"aiq": aiq(hull, cost_range),
            "cost_share_at_best_accuracy": None if reach is None else reach / ref_cost,
            "accuracy_at_cost_share": {str(s): hull_value(hull, s * ref_cost) for s in SHARES},
            "hull": hull}


@dataclass
class Singles:
    """Every LLM alone on the test questions: (n, M) costs and labels (NaN: not answered)."""

    cost: np.ndarray
    labels: np.ndarray

    def means(self, w: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        seen = ~np.isnan(self.labels)
        w = np.ones(len(self.cost)) if w is None else w
        n_seen = w @ seen
        with np.errstate(invalid="ignore", divide="ignore"):
            return (w @ np.where(seen, self.cost, 0)) / n_seen * 1000, (w @ np.nan_to_num(self.labels)) / n_seen


def bootstrap(methods: dict[str, Points], singles: Singles, ref: int, n_boot: int = 500, seed: int = 0,
              pairs: tuple[tuple[str, str], ...] = ()) -> dict:
    """95% intervals over test questions of each method's figures (the reference LLM `ref` and the
    cost range recomputed in each resample), and of the AIQ differences of `pairs`."""
    rng = np.random.default_rng(seed)
    n = len(singles.cost)
    names = [*methods, "random_mix"]  # random mixing of single LLMs: the hull of their points
    draws: dict[str, dict[str, list]] = {m: {"aiq": [], "share": [], **{str(s): [] for s in SHARES}} for m in names}
    diffs: dict[tuple[str, str], list] = {p: [] for p in pairs}
    for _ in range(n_boot):
        w = rng.multinomial(n, np.full(n, 1 / n)).astype(float)
        sc, sa = singles.means(w)
        ok = np.isfinite(sc) & np.isfinite(sa)
        rng_cost = (float(sc[ok].min()), float(sc[ok].max()))
        got = {}
        for name in names:
            c, a = methods[name].means(w) if name in methods else (sc[ok], sa[ok])
            f = figures(c, a, float(sc[ref]), float(sa[ref]), rng_cost)
            got[name] = f["aiq"]
            d = draws[name]
            d["aiq"].append(f["aiq"])
            d["share"].append(np.inf if f["cost_share_at_best_accuracy"] is None else f["cost_share_at_best_accuracy"])
            for s in SHARES:
                v = f["accuracy_at_cost_share"][str(s)]
                d[str(s)].append(np.nan if v is None else v)
        for a, b in pairs:
            diffs[(a, b)].append(got[a] - got[b])

    def ci(values) -> list | None:
        """95% interval; an end that is never reached (inf) is None."""
        v = np.asarray(values, float)
        if np.isnan(v).mean() > 0.025:  # undefined in more than the tail: no interval
            return None
        lo, hi = np.nanquantile(np.where(np.isinf(v), 1e300, v), [0.025, 0.975], method="lower")
        return [None if lo >= 1e299 else float(lo), None if hi >= 1e299 else float(hi)]

    out = {m: {"aiq_ci95": ci(d["aiq"]), "cost_share_at_best_accuracy_ci95": ci(d["share"]),
               "accuracy_at_cost_share_ci95": {str(s): ci(d[str(s)]) for s in SHARES}} for m, d in draws.items()}
    out["pairs"] = {f"{a}-{b}": ci(v) for (a, b), v in diffs.items()}
    return out


def cost_curve(scores: np.ndarray, costs: np.ndarray, labels: np.ndarray, n_points: int = 40) -> list[dict]:
    """(average cost, accuracy) when routing each question by the `cost_weighted` rule,
    argmax(score - lambda * cost), for lambda from 0 (ignore cost) up to a value where the
    cheapest available LLM wins everywhere."""
    available = ~np.isnan(labels)
    spread = float(np.nanmax(scores) - np.nanmin(scores))
    gap = float(costs.max() - costs.min()) or 1.0
    lams = np.concatenate([[0.0], np.geomspace(1e-4, 10.0, n_points - 1)]) * max(spread, 1e-12) / gap
    picks = utility_picks(scores, costs, available, lams)
    return [{"lambda": float(lam), "avg_cost": float(costs[pick].mean()),
             "accuracy": float(routed_labels(pick, labels).mean())} for lam, pick in zip(lams, picks.T)]


def margin_curve(scores: np.ndarray, costs: np.ndarray, labels: np.ndarray,
                 margins=(0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)) -> list[dict]:
    """(average cost, accuracy) of the `cheapest_within_margin` rule at each margin."""
    available = ~np.isnan(labels)
    out = []
    for margin in margins:
        pick = cheapest_within_margin(scores, costs, margin, available)
        out.append({"margin": float(margin), "avg_cost": float(costs[pick].mean()),
                    "accuracy": float(routed_labels(pick, labels).mean())})
    return out


def single_llm_points(costs: np.ndarray, labels: np.ndarray) -> list[dict]:
    """Each LLM used alone: its accuracy on the questions it has a label for, at its cost."""
    return [{"llm": int(m), "avg_cost": float(costs[m]), "accuracy": float(np.nanmean(labels[:, m]))}
            for m in range(labels.shape[1]) if (~np.isnan(labels[:, m])).any()]


def upper_hull(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The non-decreasing concave upper hull of (cost, accuracy) points, from the cheapest point."""
    pts = sorted(set(points))
    hull: list[tuple[float, float]] = []
    for p in pts:
        if hull and p[1] <= hull[-1][1]:
            continue  # costs more and is no better: never on a non-decreasing frontier
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1) >= 0:
                hull.pop()  # hull[-1] lies on or below the chord from hull[-2] to p
            else:
                break
        hull.append(p)
    return hull


def aiq(points: list[tuple[float, float]], cost_range: tuple[float, float]) -> float:
    """Area under the hull over [c_min, c_max] divided by its width; beyond the hull's last point
    the accuracy stays at its best (spending more is never forced)."""
    lo, hi = cost_range
    if hi <= lo:
        raise ValueError(f"empty cost range {cost_range}")
    hull = upper_hull(points)
    xs = np.array([p[0] for p in hull] + [hi])
    ys = np.array([p[1] for p in hull] + [hull[-1][1]])
    # piecewise linear, so the trapezoids are exact; below the cheapest point nothing is
    # reachable (accuracy 0 from lo to xs[0])
    return float(((ys[1:] + ys[:-1]) / 2 * np.diff(xs)).sum() / (hi - lo))


def cpt(advantage: np.ndarray, strong: np.ndarray, weak: np.ndarray, levels=(0.5, 0.8)) -> dict:
    """Share of calls to the strong LLM needed to reach each level of the weak-to-strong gap when
    the questions with the largest predicted `advantage` go to the strong LLM. `strong`/`weak`:
    the two LLMs' labels on the same questions."""
    order = np.argsort(-advantage, kind="stable")
    n = len(order)
    # accuracy when the first i questions (by advantage) go to the strong LLM, i = 0..n
    gain = np.concatenate([[0.0], np.cumsum(strong[order] - weak[order])])
    acc = (weak.sum() + gain) / n
    lo, hi = float(weak.mean()), float(strong.mean())
    out = {"weak_accuracy": lo, "strong_accuracy": hi, "questions": int(n)}
    for x in levels:
        if hi <= lo:
            out[f"cpt_{int(x * 100)}"] = None  # no gap to close
            continue
        reached = np.flatnonzero(acc >= lo + x * (hi - lo) - 1e-9)  # tolerance: float sums
        out[f"cpt_{int(x * 100)}"] = float(reached[0] / n)
    return out
