"""`jeirt learn`: a challenger space learned from the feedback on logged decisions, registered,
and promoted to `@champion` only when held-out logged traffic shows it better.

    jeirt learn --space models:/NAME@champion --since 7d [--register NAME]

The grades of the last `since_days` (the feedback store: each with the LLM graded and the
query's encoder vector), read in chunks, are split by decision id: 80% learned, 20% held out
(the first `max_held` of them kept for the comparison, so memory does not grow with the log). The challenger is
the champion with each LLM's vector moved by the learned grades (the replicas' online update,
feedback/applied.py, in arrival order: the same vectors a replica would hold). On the held-out
grades, each space predicts the graded LLM's P(correct): the challenger is promoted when its
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
from ..feedback.log import in_share
from ..feedback.store import FeedbackStore
from ..learning import OnlineState, Outcomes, evaluate_policy, one_hot
from ..tracking.registry import SpaceRegistry

MIN_GRADES = 50  # fewer learned or held-out grades than this say nothing either way
MAX_HELD = 200_000  # held-out grades kept for the comparison (the first ones; the rest are counted)


def learn(space_uri: str, since_days: float = 7.0, register: str | None = None, feedback_url: str | None = None,
          holdout: float = 0.2, registry: SpaceRegistry | None = None, max_held: int = MAX_HELD) -> dict:
    """Learn, evaluate, register and (when shown better) promote; the report."""
    registry = registry or SpaceRegistry()
    champion = registry.resolve(space_uri)
    name = register or champion.name
    space = registry.load(space_uri)
    start = int(space.metadata.get("feedback_seq", 0))  # what this version learned already
    cutoff = time.time() - since_days * 86400
    index = {n: i for i, n in enumerate(space.model_names)}
    state = OnlineState(space, **LOOP_DEFAULTS)
    held_x, held_llm, held_y, held_p = [], [], [], []
    n_rows = n_learn = n_held = 0
    last = start
    for chunk in _chunks(FeedbackStore(feedback_url), start):  # streamed: memory holds the held-out sample only
        last = chunk[-1]["seq"]
        for r in chunk:
            if r["time"] < cutoff:
                continue
            n_rows += 1
            if r["llm"] not in index or r["embedding"] is None or r["encoder"] != space.encoder_id \
                    or len(r["embedding"]) != space.in_dim:
                continue
            if in_share(r["id"], holdout):  # held out, by decision id
                n_held += 1
                if len(held_y) < max_held:
                    held_x.append(r["embedding"])
                    held_llm.append(index[r["llm"]])
                    held_y.append(r["score"])
                    held_p.append(r.get("propensity") or 1.0)  # none logged: a deterministic choice
            else:  # one at a time in arrival order, as the replicas apply them
                n_learn += 1
                state.update(Outcomes(r["embedding"][None], [index[r["llm"]]], [r["score"]]))
    if min(n_learn, n_held) < MIN_GRADES:
        after = f" after feedback row {start} (what {space_uri} learned already)" if start else ""
        raise ValueError(f"{n_learn + n_held} usable grades in the last {since_days:g} day{'' if since_days == 1 else 's'}{after} ({n_rows - n_learn - n_held} "
                         f"of another encoder or LLM): {n_learn} to learn, {n_held} held out; at least {MIN_GRADES} of "
                         f"each are needed: collect more feedback or widen --since")
    challenger = state.learned_space()
    x, llm, y = np.stack(held_x), np.array(held_llm), np.array(held_y)

    p_champion, p_challenger = space.predict_proba(x), challenger.predict_proba(x)
    rows = np.arange(len(y))
    gain = _log_loss(p_champion[rows, llm], y) - _log_loss(p_challenger[rows, llm], y)
    interval = paired_ci(gain, np.zeros_like(gain))
    better = bool(interval[0] > 0)
    value = {}
    for k, p in (("champion", p_champion), ("challenger", p_challenger)):
        e = evaluate_policy(llm, np.array(held_p), y, one_hot(p.argmax(1), p.shape[1]))
        value[k] = {"ips": e["ips"], "ips_ci95": e["ips_ci95"], "same_choice_as_logged": e["mean_weight"]}
    # judged, the held-out grades are learned too (one at a time, in arrival order): replicas serving
    # this version start after `feedback_seq`, so a grade it does not learn now is never learned
    for i in range(len(y)):
        state.update(Outcomes(x[i][None], [llm[i]], [y[i]]))
    registered = state.learned_space()
    registered.metadata["feedback_seq"] = int(last)
    evidence = {"champion": f"{champion.name}/{champion.version}", "grades_learned": n_learn, "grades_held_out": n_held,
                "grades_compared": len(y), "held_out_learned_after": len(y),
                "log_loss_gain": float(gain.mean()), "log_loss_gain_ci95": [float(v) for v in interval],
                "greedy_value_ips": value, "since_days": since_days, "feedback_seq": int(last)}
    registered.metadata["learned_from_feedback"] = evidence
    version = registry.register(registered, name, metrics={"feedback_log_loss_gain": float(gain.mean())})
    alias = "champion" if better else "challenger"
    registry.promote(name, version, alias)
    registry.client.set_model_version_tag(name, str(version), "feedback_evidence", json.dumps(evidence)[:4000])
    return {"registered": f"models:/{name}/{version}", "alias": alias, "promoted": better, **evidence}


def _chunks(store: FeedbackStore, after: int, size: int = 10_000):
    seq = after
    while rows := store.since(seq, size):
        yield rows
        seq = rows[-1]["seq"]


def _log_loss(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return -(y * np.log(p) + (1 - y) * np.log(1 - p))
