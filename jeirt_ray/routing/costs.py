"""Routing under a budget: per-LLM costs, the accuracy-vs-cost curve, AIQ and CPT.

- Costs: a table {model: cost per call} given by the user; otherwise the default below, the
  model's parameter count in billions read from its name ("Llama-2-70b" -> 70, "Mixtral-8x7B"
  -> 56), a proxy for serving price. Names without a size (API models such as "GPT-4o") get the
  largest size found, i.e. they are priced like the most expensive open model.
- AIQ (RouterBench, Hu et al. 2024): the area under the non-decreasing convex hull of a router's
  (average cost, accuracy) points, divided by the cost range. Any two points of the curve can be
  mixed by randomising between the two settings, hence the hull.
- CPT(x) (RouteLLM, Ong et al. 2024): a two-LLM router between the cheapest LLM and the best one
  (best on training data) that calls the best one when its predicted advantage passes a
  threshold; CPT(x) is the smallest share of calls to the best LLM that reaches x of the
  accuracy gap between the two. A router that ignores the question needs a share of x.
  Questions where either of the two LLMs has no label are left out of CPT.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np

from .outcomes import available_argmax, routed_labels

_SIZE = re.compile(r"(?:(\d+)\s*x\s*)?(\d+(?:\.\d+)?)\s*b(?![a-z])", re.I)


def size_in_billions(name: str) -> float | None:
    """The parameter count in a model's name: `Llama-2-70b` -> 70, `Mixtral-8x7B` -> 56; the last
    size in the name ("Qwen1.5-110B" -> 110: the "1.5" has no b after it)."""
    found = _SIZE.findall(str(name).replace("_", "-"))
    if not found:
        return None
    experts, billions = found[-1]
    return float(billions) * (int(experts) if experts else 1)


def default_costs(models: list[str] | np.ndarray) -> tuple[np.ndarray, dict[str, str]]:
    """(cost per call, how each cost was set) from the parameter counts in the names."""
    sizes = {str(m): size_in_billions(m) for m in models}
    sizes = {m: v for m, v in sizes.items() if v is not None}
    fallback = max(sizes.values()) if sizes else 1.0
    costs = np.array([sizes.get(str(m), fallback) for m in models])
    source = {str(m): (f"{sizes[str(m)]:g}B parameters (from the name)" if str(m) in sizes
                       else f"no size in the name: priced as the largest ({fallback:g})") for m in models}
    return costs, source


def read_cost_table(path: str | Path) -> dict[str, float]:
    """{model: cost per call} from a JSON object or a CSV with columns `model,cost`."""
    path = Path(path)
    if path.suffix == ".json":
        table = json.loads(path.read_text())
        if not isinstance(table, dict):
            raise ValueError(f"{path}: expected a JSON object {{model: cost}}, got {type(table).__name__}")
        return table
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if not {"model", "cost"} <= set(reader.fieldnames or []):
            raise ValueError(f"{path}: expected columns 'model,cost', got {reader.fieldnames}")
        table = {}
        for i, row in enumerate(reader, start=2):
            try:
                table[row["model"]] = float(row["cost"])
            except ValueError:
                raise ValueError(f"{path}, line {i}, column 'cost', value {row['cost']!r}: not a number") from None
        return table


def load_costs(table: dict[str, float], models: list[str] | np.ndarray, origin: str = "cost table") -> np.ndarray:
    """Costs aligned with `models`; every model needs a finite cost >= 0."""
    missing = [str(m) for m in models if str(m) not in table]
    if missing:
        raise ValueError(f"{origin}: no cost for {len(missing)} LLM(s), e.g. {missing[:3]}")
    try:
        costs = np.array([float(table[str(m)]) for m in models])
    except (TypeError, ValueError):
        bad = next(str(m) for m in models if not isinstance(table[str(m)], (int, float)))
        raise ValueError(f"{origin}: cost of {bad!r} is {table[bad]!r}, not a number") from None
    bad = [str(m) for m, c in zip(models, costs) if not np.isfinite(c) or c < 0]
    if bad:
        raise ValueError(f"{origin}: cost of {bad[0]!r} is {table[bad[0]]!r}; costs must be finite and >= 0")
    return costs


def cost_weighted_scores(p: np.ndarray, costs: np.ndarray, weight: float) -> np.ndarray:
    """p - weight * cost, kept finite: a weight x cost beyond the float range (a client may send
    any weight) counts as the most negative float, not -inf (which JSON cannot carry)."""
    with np.errstate(over="ignore", invalid="ignore"):
        scores = p - weight * (costs if costs.ndim == 2 else costs[None, :])
    return np.nan_to_num(scores, nan=-np.finfo(np.float64).max, neginf=-np.finfo(np.float64).max,
                         posinf=np.finfo(np.float64).max)


def cost_weighted_choice(p: np.ndarray, costs: np.ndarray, weight: float,
                         available: np.ndarray | None = None) -> np.ndarray:
    """The `cost_weighted` rule: per row, the LLM with the highest p - weight * cost (among the
    available ones); `costs` per LLM (M,) or per query and LLM (n, M)."""
    scores = cost_weighted_scores(p, costs, weight)
    return scores.argmax(1) if available is None else available_argmax(scores, available)


def cheapest_within_margin(p: np.ndarray, costs: np.ndarray, margin: float,
                           available: np.ndarray | None = None) -> np.ndarray:
    """The `cheapest_within_margin` rule: per row, the cheapest LLM whose p is within `margin` of
    the best available p (ties in cost: the higher p)."""
    p = p if available is None else np.where(available, p, -np.inf)
    ok = p >= p.max(1, keepdims=True) - margin
    # among the LLMs within the margin: the lowest cost, then the highest p
    per_query = costs if costs.ndim == 2 else np.broadcast_to(costs[None, :], p.shape)
    order = np.lexsort((-np.where(ok, p, -np.inf), np.where(ok, per_query, np.inf)), axis=1)
    return order[:, 0]


def cost_curve(scores: np.ndarray, costs: np.ndarray, labels: np.ndarray, n_points: int = 40) -> list[dict]:
    """(average cost, accuracy) when routing each question by the `cost_weighted` rule,
    argmax(score - lambda * cost), for lambda from 0 (ignore cost) up to a value where the
    cheapest available LLM wins everywhere."""
    available = ~np.isnan(labels)
    spread = float(np.nanmax(scores) - np.nanmin(scores))
    gap = float(costs.max() - costs.min()) or 1.0
    lambdas = np.concatenate([[0.0], np.geomspace(1e-4, 10.0, n_points - 1)]) * max(spread, 1e-12) / gap
    curve = []
    for lam in lambdas:
        pick = cost_weighted_choice(scores, costs, lam, available)
        curve.append({"lambda": float(lam), "avg_cost": float(costs[pick].mean()),
                      "accuracy": float(routed_labels(pick, labels).mean())})
    return curve


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
