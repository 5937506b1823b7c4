"""`jeirt shadow`: the challenger that routed a share of the traffic in shadow (serving/loop/shadow.py)
compared with the served space on the decisions that were graded.

Each graded decision that the shadow also routed gives the served space's reward (the grade of
the LLM that answered) and, off-policy, the challenger's: the graded LLM is the logged action
with its logged propensity (1 where the service did not explore), the challenger's choice the
target. Estimates with 95% bootstrap intervals over decisions: `ips` (unbiased only where the
logging policy could have chosen what the challenger chose: a service that explores), `snips`,
and `dr`, doubly robust with the served space's own logged P(correct) as the reward model (a
disagreement on a decision the service did not explore is valued by that model: conservative
towards the served space). `challenger_minus_served_dr` is the paired difference per decision.
`promote` moves the served alias to the challenger's version when that interval lies above 0.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict

import numpy as np

from ..core.intervals import mean_ci
from ..learning.offpolicy import decision_values, evaluate_policy
from ..tracking.registry import SpaceRegistry
from .graders import read_log
from .log import shadow_root
from .store import FeedbackStore, check_sources

COLUMNS = ["id", "query_index", "space", "candidates", "p_correct", "chosen", "propensity"]


def compare_shadow(root: str | None = None, feedback_url: str | None = None, since_days: float = 7.0,
                   sources=None) -> dict:
    """The comparison on the last `since_days` (a decision's grades from `sources` averaged: a
    comma-separated string or a list of user, judge, key; none: every source): a dict of counts,
    estimates and `better` (the paired interval above 0)."""
    sources = None if sources is None else check_sources(sources)
    try:
        shadow = _by_key(read_log(shadow_root(root), since_days, ["id", "query_index", "space", "chosen"]).to_pylist())
    except FileNotFoundError as e:
        raise FileNotFoundError(f"{e}: no shadow decisions to compare; set the Router's user_config.shadow "
                                f"(alias, share) and let graded traffic through") from None
    grades = _grades(FeedbackStore(feedback_url, create=False), time.time() - since_days * 86400, sources, set(shadow))
    graded_ids = sorted({k[0] for k in grades})
    served = _by_key(r for r in read_log(root, since_days, COLUMNS, ids=graded_ids).to_pylist()
                     if (r["id"], r["query_index"] or 0) in grades)
    chosen, propensity, reward, target, model = [], [], [], [], []
    agree = unsupported = 0
    spaces = {"served": set(), "challenger": set()}
    for key, (score, llm, prop) in grades.items():
        row, other = served.get(key), shadow.get(key)
        if row is None or other is None or llm not in row["candidates"]:  # counted: graded_not_compared
            continue
        cands = list(row["candidates"])
        spaces["served"].add(row["space"])
        spaces["challenger"].add(other["space"])
        pick = np.zeros(len(cands))
        if other["chosen"] in cands:
            pick[cands.index(other["chosen"])] = 1.0
        else:  # an LLM the served space did not weigh: no logged evidence about it
            unsupported += 1
        agree += other["chosen"] == row["chosen"]
        chosen.append(cands.index(llm))
        propensity.append(1.0 if prop is None else prop)  # none: not explored, or a grade of another LLM
        reward.append(score)
        target.append(pick)
        model.append(np.asarray(row["p_correct"], dtype=np.float64))
    n = len(reward)
    if n == 0:
        raise ValueError(f"no graded decision of the last {since_days:g} days was also routed in shadow "
                         f"({len(shadow)} shadow decisions, {len(grades)} of them graded): grade more traffic")
    target, model, reward = _padded(target), _padded(model), np.asarray(reward)
    challenger = evaluate_policy(chosen, propensity, reward, target, reward_model=model)
    parts, _ = decision_values(chosen, propensity, reward, target, model)
    lo, hi = mean_ci(parts["dr"] - reward)  # one row per decision
    return {"compared": n, "graded_not_compared": len(grades) - n, "agreement": agree / n, "unsupported": unsupported,
            "explored": int(np.sum(np.asarray(propensity) < 1)),
            "served_space": sorted(spaces["served"]), "challenger_space": sorted(spaces["challenger"]),
            "served": {"mean": float(reward.mean()), "ci95": mean_ci(reward)},
            "challenger": {k: challenger[k] for k in ("ips", "ips_ci95", "snips", "snips_ci95", "dr", "dr_ci95")},
            "challenger_minus_served_dr": float((parts["dr"] - reward).mean()),
            "challenger_minus_served_dr_ci95": [float(lo), float(hi)], "better": bool(lo > 0),
            "since_days": since_days, "sources": None if sources is None else list(sources)}


def promote(out: dict, alias: str = "champion", registry: SpaceRegistry | None = None) -> dict:
    """Move `alias` to the challenger's version when `out` (compare_shadow's) shows it better, with
    the evidence in the version's tag `shadow_evidence`. Refused, naming why, when the comparison
    mixed versions (an alias moved inside the window) or `alias` no longer points at the version
    that was served (the evidence is about another champion). {promoted, from, to, alias}."""
    for side in ("served", "challenger"):
        if len(out[f"{side}_space"]) != 1:
            raise ValueError(f"the compared decisions name {len(out[f'{side}_space'])} {side} versions "
                             f"({', '.join(out[f'{side}_space'])}): compare one pair, with a --since that starts "
                             f"after the last promotion, or move the alias yourself with `jeirt registry promote`")
    (served,), (challenger,) = out["served_space"], out["challenger_space"]
    name, version = challenger.rsplit("/", 1)
    if served.rsplit("/", 1)[0] != name:
        raise ValueError(f"served {served} and challenger {challenger} are versions of different spaces")
    report = {"promoted": False, "alias": alias, "from": f"models:/{served}", "to": f"models:/{challenger}"}
    if not out["better"]:
        return report
    registry = registry or SpaceRegistry()
    current = registry.resolve(f"models:/{name}@{alias}")
    if f"{name}/{current.version}" != served:
        raise ValueError(f"models:/{name}@{alias} is version {current.version}, not the served {served} that the "
                         f"challenger was compared with: compare again on the traffic since it moved")
    registry.promote(name, int(version), alias, expected=int(current.version))  # compare-and-set
    evidence = {k: out[k] for k in ("compared", "agreement", "explored", "challenger_minus_served_dr",
                                    "challenger_minus_served_dr_ci95", "since_days", "sources")}
    registry.client.set_model_version_tag(name, version, "shadow_evidence",
                                          json.dumps({"served": served, **evidence})[:4000])
    return {**report, "promoted": True}


def _padded(rows: list[np.ndarray]) -> np.ndarray:
    """Rows of different lengths (decisions weigh different numbers of candidates), zero-padded."""
    width = max(len(r) for r in rows)
    return np.stack([np.pad(r, (0, width - len(r))) for r in rows])


def _by_key(rows) -> dict:
    return {(r["id"], r["query_index"] or 0): r for r in rows}


def _grades(store: FeedbackStore, cutoff: float, sources: tuple[str, ...] | None, keys: set) -> dict:
    """{(id, query_index): (mean score, the LLM graded, its propensity)} of the decisions in `keys`."""
    scores, what = defaultdict(list), {}
    seq = 0
    while rows := store.since(seq, 10_000):
        seq = rows[-1]["seq"]
        for r in rows:
            key = (r["id"], r["query_index"])
            if r["time"] < cutoff or key not in keys or (sources is not None and r["source"] not in sources):
                continue
            scores[key].append(r["score"])
            what[key] = (r["llm"], r["propensity"])
    return {k: (float(np.mean(v)), *what[k]) for k, v in scores.items()}
