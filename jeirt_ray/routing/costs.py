"""Per-LLM costs and the cost-aware routing rules (one implementation each, used by the router
and by the studies alike); the curves and figures they make are in routing/frontier.py.

- Costs: a table {model: cost per call} given by the user; otherwise the default below, the
  model's parameter count in billions read from its name ("Llama-2-70b" -> 70, "Mixtral-8x7B"
  -> 56), a proxy for serving price (the paper's cost axis, not USD). Names without a size (API
  models such as "GPT-4o") get the largest size found, i.e. they are priced like the most
  expensive open model.
- Rules: `cost_weighted_choice` (p - weight x cost), `cheapest_within_margin`,
  `quality_target_choice`.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np

from .outcomes import available_argmax

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


def quality_target_choice(p: np.ndarray, costs: np.ndarray, available: np.ndarray | None = None,
                          target_p: float | None = None, target_share: float | None = None) -> np.ndarray:
    """The `quality_target` rule: per row, the cheapest available LLM whose p reaches `target_p`,
    or `target_share` x the best available p (the best p itself where none reaches it)."""
    available = np.ones(p.shape, dtype=bool) if available is None else available
    best = np.where(available, p, -np.inf).max(1, keepdims=True)
    floor = np.full_like(best, target_p) if target_p is not None else target_share * best
    ok = available & (p >= np.minimum(floor, best))
    per_query = costs if costs.ndim == 2 else np.broadcast_to(costs[None, :], p.shape)
    return available_argmax(-np.where(ok, per_query, np.inf), ok)
