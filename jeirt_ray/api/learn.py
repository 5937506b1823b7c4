"""`jeirt learn`: a challenger space learned from the feedback on logged decisions, registered,
and promoted to `@champion` only when held-out logged traffic shows it better.

    jeirt learn --space models:/NAME@champion --since 7d [--register NAME] [--workers N]

The grades of the last `since_days` up to the newest row when it starts (the feedback store: each
with the LLM graded and the query's encoder vector), read in chunks, are split by decision id: 80%
learned, 20% held out (a share of the decisions, fixed by their ids, sized so that about
`max_held` are compared; every grade is learned). The challenger is the champion with each LLM's vector moved by the
learned grades (the replicas' online update, feedback/applied.py, in arrival order: the same
vectors a replica would hold). Each LLM's vector learns from its own grades only, so the LLMs are
shared out (`workers`: Ray actors, one CPU each; feedback/shards.py) with the same result. On the
held-out grades, each space predicts the graded LLM's P(correct): the challenger is promoted when its
log-loss is lower with a paired 95% bootstrap interval (whole decisions resampled) above 0 and
its routing value (IPS on the held-out decisions) is not shown lower; otherwise it gets
`@challenger`. A pinned version (`models:/NAME/3`) is refused unless promotion is off, and
`@champion` moves only if it still points at the version compared (compare-and-set).
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

from ..core.intervals import mean_ci
from ..feedback import shards
from ..feedback.store import FeedbackStore, check_sources
from ..learning import LOOP_DEFAULTS, OnlineState, evaluate_policy, one_hot
from ..learning.offpolicy import decision_values
from ..tracking.registry import SpaceRegistry

MIN_GRADES = 50  # fewer learned or held-out grades than this say nothing either way
MAX_HELD = 200_000  # about this many held-out grades compared (a share of decisions, by id; all are learned)
DEFAULT_SOURCES = ("user", "judge", "key")


def learn(space_uri: str, since_days: float = 7.0, register: str | None = None, feedback_url: str | None = None,
          holdout: float = 0.2, registry: SpaceRegistry | None = None, max_held: int = MAX_HELD,
          workers: int = 1, sources=DEFAULT_SOURCES, promote: bool = True) -> dict:
    """Learn, evaluate, register and (when shown better, and `promote`) promote; the report.
    `workers` above 1: the LLMs shared out over that many Ray actors (feedback/shards.py), with the
    same result. `sources`: the grades trusted (user, judge, key)."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be a whole number from 1, not {workers!r}")
    sources = check_sources(sources)
    registry = registry or SpaceRegistry()
    if promote and "@" not in space_uri:
        raise ValueError(f"{space_uri} is a pinned version: learning from it and promoting over whatever @champion "
                         f"is now could take newer LLMs out of serving; give models:/NAME@champion, or turn "
                         f"promotion off (--no-promote)")
    champion = registry.resolve(space_uri)
    name = register or champion.name
    # compare-and-set: @champion moves to the challenger only while it is still what was compared
    expected = int(champion.version) if name == champion.name else registry.alias_version(name, "champion")
    space = registry.load(space_uri)
    start = int(space.metadata.get("feedback_seq", 0))  # what this version learned already
    # --since bounds only a version that learned nothing yet: rows after its feedback_seq are all
    # read, however old, or they would never be learned
    cutoff = time.time() - since_days * 86400 if start == 0 else 0.0
    store = FeedbackStore(feedback_url, create=False)  # a reader never creates a database
    last, n_rows = store.window(start, cutoff, sources)  # rows arriving from now on are left for the replicas
    # the decisions held out for the comparison: a share fixed by their ids, sized for about max_held grades
    held_share = holdout * min(1.0, max_held / max(1.0, n_rows * holdout))
    groups = shards.share_llms(store.per_llm(start, last, cutoff, sources), space.model_names, workers)
    learners = shards.start(space, groups, url=feedback_url, after=start, upto=last, min_time=cutoff,
                            held_share=held_share, sources=sources)
    try:
        parts = shards.call(learners, "learn")
        n_learn, n_held = sum(p["learned"] for p in parts), sum(p["held_out"] for p in parts)
        if min(n_learn, n_held) < MIN_GRADES:
            window = f"in the last {since_days:g} day{'' if since_days == 1 else 's'}" if start == 0 else \
                f"after feedback row {start} (what {space_uri} learned already)"
            raise ValueError(f"{n_learn + n_held} usable grades from {', '.join(sources)} {window} "
                             f"({n_rows - n_learn - n_held} of another encoder or LLM): {n_learn} to learn, {n_held} "
                             f"held out; at least {MIN_GRADES} of each are needed: collect more feedback, widen "
                             f"--since or trust more --sources")
        state = OnlineState(space, **LOOP_DEFAULTS)
        shards.merge(state, parts)
        challenger = state.learned_space()
        held = {k: np.concatenate([p["held"][k] for p in parts]) for k in shards.DTYPES}
        order = np.argsort(held["seq"], kind="stable")
        order = order[held["w"][order] > 0]  # a grade of weight 0 counts for nothing here either
        if len(order) < MIN_GRADES:
            raise ValueError(f"{len(order)} of the {n_held} held-out grades come from keys whose weight is above 0; "
                             f"at least {MIN_GRADES} are needed: collect more feedback or trust more --sources")
        x, llm, y, propensity, weight, ids = (held[k][order] for k in ("x", "llm", "y", "p", "w", "id"))
        # judged (below), the held-out grades are learned too: replicas serving this version start
        # after `feedback_seq`, so a grade it does not learn now is never learned
        finals = shards.call(learners, "learn_held")
    finally:
        shards.stop(learners)
    p_champion, p_challenger = space.predict_proba(x), challenger.predict_proba(x)
    rows = np.arange(len(y))
    gain = _log_loss(p_champion[rows, llm], y) - _log_loss(p_challenger[rows, llm], y)
    mean_gain = float(np.average(gain, weights=weight))  # each grade counts as its key's weight
    interval = mean_ci(gain, ids, weights=weight)
    terms, value = {}, {}
    for k, p in (("champion", p_champion), ("challenger", p_challenger)):
        e = evaluate_policy(llm, propensity, y, one_hot(p.argmax(1), p.shape[1]))
        value[k] = {"ips": e["ips"], "ips_ci95": e["ips_ci95"], "same_choice_as_logged": e["mean_weight"]}
        terms[k] = decision_values(llm, propensity, y, one_hot(p.argmax(1), p.shape[1]))[0]["ips"]
    value_gain = terms["challenger"] - terms["champion"]
    value_interval = mean_ci(value_gain, ids, weights=weight)
    # promoted when the held-out log-loss is shown lower and the routing value is not shown lower
    better = bool(interval[0] > 0) and not value_interval[1] < 0
    shards.merge(state, finals)
    registered = state.learned_space()
    registered.metadata["feedback_seq"] = int(last)
    evidence = {"champion": f"{champion.name}/{champion.version}", "grades_learned": n_learn, "grades_held_out": n_held,
                "grades_compared": len(y), "held_out_learned_after": sum(f["learned"] for f in finals),
                "log_loss_gain": mean_gain,
                "log_loss_gain_ci95": [float(v) for v in interval],
                "greedy_value_ips": value, "value_gain_ips": float(np.average(value_gain, weights=weight)),
                "value_gain_ips_ci95": [float(v) for v in value_interval], "since_days": since_days,
                "sources": list(sources), "feedback_seq": int(last), "workers": len(learners)}
    registered.metadata["learned_from_feedback"] = evidence
    version = registry.register(registered, name, metrics={"feedback_log_loss_gain": mean_gain})
    alias = "champion" if better and promote else "challenger"
    registry.promote(name, version, alias, expected=expected if alias == "champion" else None)
    registry.client.set_model_version_tag(name, str(version), "feedback_evidence", json.dumps(evidence)[:4000])
    return {"registered": f"models:/{name}/{version}", "alias": alias, "promoted": alias == "champion",
            "better": better, **evidence}


def _log_loss(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return -(y * np.log(p) + (1 - y) * np.log(1 - p))
