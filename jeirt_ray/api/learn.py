"""`jeirt learn`: a challenger space learned from the feedback on logged decisions, registered,
and promoted to `@champion` only when held-out logged traffic shows it better.

    jeirt learn --space models:/NAME@champion --since-days 7 [--register NAME]

The grades of the last `since_days` (the feedback store: each with the LLM graded and the
query's encoder vector) are split by decision id: 80% learned, 20% held out. The challenger is
the champion with each LLM's vector moved by the learned grades (the replicas' online update,
feedback/applied.py, in arrival order: the same vectors a replica would hold). On the held-out
grades, each space predicts the graded LLM's P(correct): the challenger is promoted when its
log-loss is lower with a paired 95% bootstrap interval above 0; otherwise it gets `@challenger`.
The evidence is in the version's tags and metadata, and the version records the last feedback
row it learned (`feedback_seq`), so replicas serving it apply only what came after. The off-policy
value of each space's greedy choice on the held-out decisions (IPS with the logged propensities)
is reported beside it.
"""

from __future__ import annotations

import json
import time

import numpy as np

from ..experiments.online_sim import paired_ci
from ..feedback.applied import LOOP_DEFAULTS
from ..feedback.store import FeedbackStore
from ..learning import OnlineState, Outcomes, evaluate_policy, one_hot
from ..tracking.registry import SpaceRegistry

MIN_GRADES = 50  # fewer learned or held-out grades than this say nothing either way


def learn(space_uri: str, since_days: float = 7.0, register: str | None = None, feedback_url: str | None = None,
          holdout: float = 0.2, registry: SpaceRegistry | None = None) -> dict:
    """Learn, evaluate, register and (when shown better) promote; the report."""
    registry = registry or SpaceRegistry()
    champion = registry.resolve(space_uri)
    name = register or champion.name
    space = registry.load(space_uri)
    start = int(space.metadata.get("feedback_seq", 0))  # what this version learned already
    cutoff = time.time() - since_days * 86400
    rows = [r for r in _all(FeedbackStore(feedback_url), start) if r["time"] >= cutoff]
    index = {n: i for i, n in enumerate(space.model_names)}
    usable = [r for r in rows if r["llm"] in index and r["embedding"] is not None
              and r["encoder"] == space.encoder_id and len(r["embedding"]) == space.in_dim]
    held = np.array([int(r["id"][-8:], 16) < holdout * 2**32 for r in usable], dtype=bool)
    n_learn, n_held = int((~held).sum()), int(held.sum())
    if min(n_learn, n_held) < MIN_GRADES:
        after = f" after feedback row {start} (what {space_uri} learned already)" if start else ""
        raise ValueError(f"{len(usable)} usable grades since {since_days:g} days{after} ({len(rows) - len(usable)} of another "
                         f"encoder or LLM): {n_learn} to learn, {n_held} held out; at least {MIN_GRADES} of each are "
                         f"needed: collect more feedback or widen --since-days")
    x = np.stack([r["embedding"] for r in usable])
    llm = np.array([index[r["llm"]] for r in usable])
    y = np.array([r["score"] for r in usable])
    state = OnlineState(space, **LOOP_DEFAULTS)
    for i in np.flatnonzero(~held):  # one at a time in arrival order, as the replicas apply them
        state.update(Outcomes(x[i:i + 1], llm[i:i + 1], y[i:i + 1]))
    challenger = state.learned_space()
    challenger.metadata["feedback_seq"] = int(max(r["seq"] for r in rows))

    h = np.flatnonzero(held)
    p_champion, p_challenger = space.predict_proba(x[h]), challenger.predict_proba(x[h])
    gain = _log_loss(p_champion[np.arange(len(h)), llm[h]], y[h]) - _log_loss(p_challenger[np.arange(len(h)), llm[h]],
                                                                              y[h])
    interval = paired_ci(gain, np.zeros_like(gain))
    better = bool(interval[0] > 0)
    value = {}
    for k, p in (("champion", p_champion), ("challenger", p_challenger)):
        e = evaluate_policy(llm[h], np.ones(len(h)), y[h], one_hot(p.argmax(1), p.shape[1]))
        value[k] = {"ips": e["ips"], "ips_ci95": e["ips_ci95"], "same_choice_as_logged": e["mean_weight"]}
    evidence = {"champion": f"{champion.name}/{champion.version}", "grades_learned": n_learn, "grades_held_out": n_held,
                "log_loss_gain": float(gain.mean()), "log_loss_gain_ci95": [float(v) for v in interval],
                "greedy_value_ips": value, "since_days": since_days, "feedback_seq": challenger.metadata["feedback_seq"]}
    challenger.metadata["learned_from_feedback"] = evidence
    version = registry.register(challenger, name, metrics={"feedback_log_loss_gain": float(gain.mean())})
    alias = "champion" if better else "challenger"
    registry.promote(name, version, alias)
    registry.client.set_model_version_tag(name, str(version), "feedback_evidence", json.dumps(evidence)[:4000])
    return {"registered": f"models:/{name}/{version}", "alias": alias, "promoted": better, **evidence}


def _all(store: FeedbackStore, after: int) -> list[dict]:
    out, seq = [], after
    while rows := store.since(seq, 10_000):
        out += rows
        seq = rows[-1]["seq"]
    return out


def _log_loss(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return -(y * np.log(p) + (1 - y) * np.log(1 - p))
