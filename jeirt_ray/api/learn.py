"""`jeirt learn`: a challenger space learned from the feedback on logged decisions, registered,
and promoted to `@champion` only when held-out logged traffic shows it better.

    jeirt learn --space models:/NAME@champion --since 7d [--register NAME] [--workers N]

The grades of the last `since_days` up to the newest row when it starts (the feedback store: each
with the LLM graded and the query's encoder vector), read in chunks, are split by decision id: 80%
learned, 20% held out (the first `max_held` of them kept for the comparison, per shard, so memory
does not grow with the log). The challenger is the champion with each LLM's vector moved by the
learned grades (the replicas' online update, feedback/applied.py, in arrival order: the same
vectors a replica would hold). Each LLM's vector learns from its own grades only, so the LLMs are
shared out (`workers`: Ray actors, one CPU each; feedback/shards.py) with the same result. On the
held-out grades, each space predicts the graded LLM's P(correct): the challenger is promoted when its
log-loss is lower with a paired 95% bootstrap interval above 0; otherwise it gets `@challenger`.
Once judged, it learns the held-out grades it kept as well, and that is the version registered
(`held_out_learned_after`), since replicas serving it apply only the feedback rows after the last
one it read (`feedback_seq`): a grade it did not learn would never be learned. The evidence is in
the version's tags and metadata. The off-policy
value of each space's greedy choice on the held-out decisions (IPS with the logged propensities:
1 where none was logged, or the grade is of another LLM than the one chosen) is reported beside it.
"""

from __future__ import annotations

import json
import time

import numpy as np

from ..experiments.online_sim import paired_ci
from ..feedback.applied import LOOP_DEFAULTS
from ..feedback import shards
from ..feedback.store import FeedbackStore
from ..learning import OnlineState, evaluate_policy, one_hot
from ..tracking.registry import SpaceRegistry

MIN_GRADES = 50  # fewer learned or held-out grades than this say nothing either way
MAX_HELD = 200_000  # held-out grades kept for the comparison (the first ones; the rest are counted)


def learn(space_uri: str, since_days: float = 7.0, register: str | None = None, feedback_url: str | None = None,
          holdout: float = 0.2, registry: SpaceRegistry | None = None, max_held: int = MAX_HELD,
          workers: int = 1) -> dict:
    """Learn, evaluate, register and (when shown better) promote; the report. `workers` above 1:
    the LLMs shared out over that many Ray actors (feedback/shards.py), with the same result."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a whole number from 1, not {workers!r}")
    registry = registry or SpaceRegistry()
    champion = registry.resolve(space_uri)
    name = register or champion.name
    space = registry.load(space_uri)
    start = int(space.metadata.get("feedback_seq", 0))  # what this version learned already
    cutoff = time.time() - since_days * 86400
    store = FeedbackStore(feedback_url)
    last, n_rows = store.window(start, cutoff)  # rows arriving from now on are left for the replicas
    groups = shards.share_llms(store.per_llm(start, last, cutoff), space.model_names, workers)
    learners = shards.start(space, groups, url=feedback_url, after=start, upto=last, min_time=cutoff,
                            holdout=holdout, max_held=max_held)
    try:
        parts = shards.call(learners, "learn")
        n_learn, n_held = sum(p["learned"] for p in parts), sum(p["held_out"] for p in parts)
        if min(n_learn, n_held) < MIN_GRADES:
            after = f" after feedback row {start} (what {space_uri} learned already)" if start else ""
            raise ValueError(f"{n_learn + n_held} usable grades in the last {since_days:g} day{'' if since_days == 1 else 's'}{after} ({n_rows - n_learn - n_held} "
                             f"of another encoder or LLM): {n_learn} to learn, {n_held} held out; at least {MIN_GRADES} of "
                             f"each are needed: collect more feedback or widen --since")
        state = OnlineState(space, **LOOP_DEFAULTS)
        shards.merge(state, parts)
        challenger = state.learned_space()
        held = {k: np.concatenate([p["held"][k] for p in parts]) for k in ("seq", "x", "llm", "y", "p")}
        first = np.argsort(held["seq"], kind="stable")[:max_held]  # the first held-out grades, whichever shard
        x, llm, y, propensity = held["x"][first], held["llm"][first], held["y"][first], held["p"][first]
        # judged (below), the held-out grades are learned too: replicas serving this version start
        # after `feedback_seq`, so a grade it does not learn now is never learned
        finals = shards.call(learners, "learn_held")
    finally:
        shards.stop(learners)
    p_champion, p_challenger = space.predict_proba(x), challenger.predict_proba(x)
    rows = np.arange(len(y))
    gain = _log_loss(p_champion[rows, llm], y) - _log_loss(p_challenger[rows, llm], y)
    interval = paired_ci(gain, np.zeros_like(gain))
    better = bool(interval[0] > 0)
    value = {}
    for k, p in (("champion", p_champion), ("challenger", p_challenger)):
        e = evaluate_policy(llm, propensity, y, one_hot(p.argmax(1), p.shape[1]))
        value[k] = {"ips": e["ips"], "ips_ci95": e["ips_ci95"], "same_choice_as_logged": e["mean_weight"]}
    shards.merge(state, finals)
    registered = state.learned_space()
    registered.metadata["feedback_seq"] = int(last)
    evidence = {"champion": f"{champion.name}/{champion.version}", "grades_learned": n_learn, "grades_held_out": n_held,
                "grades_compared": len(y), "held_out_learned_after": sum(f["learned"] for f in finals),
                "log_loss_gain": float(gain.mean()), "log_loss_gain_ci95": [float(v) for v in interval],
                "greedy_value_ips": value, "since_days": since_days, "feedback_seq": int(last),
                "workers": len(learners)}
    registered.metadata["learned_from_feedback"] = evidence
    version = registry.register(registered, name, metrics={"feedback_log_loss_gain": float(gain.mean())})
    alias = "champion" if better else "challenger"
    registry.promote(name, version, alias)
    registry.client.set_model_version_tag(name, str(version), "feedback_evidence", json.dumps(evidence)[:4000])
    return {"registered": f"models:/{name}/{version}", "alias": alias, "promoted": better, **evidence}


def _log_loss(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return -(y * np.log(p) + (1 - y) * np.log(1 - p))
