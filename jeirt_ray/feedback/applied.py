"""Feedback applied to a served space: the feedback store's rows, in the order they arrived
(`seq`), update the LLMs' vectors by the learning layer's online step (learning/online.py), and
the router reads the learned P(correct).

Every replica reads the same rows in the same order, one outcome at a time from the same
starting state (the served version's vectors), so every replica holds the same state once it
has read the same rows: within one `poll_s` of a row's arrival. A replica that starts, or a
version that starts serving, replays every applicable row after the version's `feedback_seq`
(what `jeirt learn` learned into it; 0 otherwise): the feedback store is the saved state.
A row applies when its query was encoded by the served encoder and it grades an LLM of the space
(others are counted as skipped).
"""

from __future__ import annotations

import logging
import threading

import numpy as np

from ..learning.online import LOOP_DEFAULTS, OnlineState, Outcomes, member_logits, posterior_draws
from .store import FeedbackStore

log = logging.getLogger("jeirt.learning")


def outcomes_of(rows: list[dict], index: dict[str, int]) -> Outcomes:
    """Feedback rows (each with an embedding and a graded LLM of `index`) as outcomes, in order,
    each weighted as its key was when it graded."""
    return Outcomes(np.stack([r["embedding"] for r in rows]), [index[r["llm"]] for r in rows],
                    [r["score"] for r in rows], [r.get("weight", 1.0) for r in rows])


class FeedbackLearner:
    def __init__(self, space, store: FeedbackStore, encoder_id: str, prior_var: float = LOOP_DEFAULTS["prior_var"],
                 residual_var: float = LOOP_DEFAULTS["residual_var"], evidence: float = LOOP_DEFAULTS["evidence"]):
        self.state = OnlineState(space, prior_var, evidence, residual_var)
        self.store, self.encoder_id = store, encoder_id
        self.index = {n: i for i, n in enumerate(self.state.names)}
        self.seq = int(space.metadata.get("feedback_seq", 0))  # the last row read (a version `jeirt learn`
        # registered has learned the rows up to its feedback_seq)
        self.counts = {"applied": 0, "skipped": 0}
        self._theta = [t.copy() for t in self.state.theta]  # what predictions read: replaced whole, never mutated
        self._variances = self.state.variances()  # and exploration's draws
        self._lock = threading.Lock()  # one poll at a time
        self._last: tuple | None = None  # (x, its geometry) of the latest prediction

    def poll(self, limit: int = 10_000) -> int:
        """Apply the rows that arrived since the last poll; the number applied."""
        with self._lock:
            applied = 0
            while True:
                rows = self.store.since(self.seq, limit, settled=True)
                use = [r for r in rows if r["llm"] in self.index and r["embedding"] is not None
                       and r["encoder"] == self.encoder_id and len(r["embedding"]) == self.state.space.in_dim]
                self.counts["skipped"] += len(rows) - len(use)
                if use:  # one at a time, in the order they arrived
                    self.state.update_in_order(outcomes_of(use, self.index))
                    applied += len(use)
                if rows:
                    self.seq = rows[-1]["seq"]
                if len(rows) < limit:
                    break
            if applied:
                self.counts["applied"] += applied
                self._theta, self._variances = [t.copy() for t in self.state.theta], self.state.variances()
            return applied

    def predict_proba(self, x: np.ndarray) -> np.ndarray:
        """(n, LLMs) P(correct) under the learned means, averaged over the space's members."""
        geo = self.state.geometry(x)
        self._last = (x, geo)  # a route's exploration draws for the same queries next (draw_proba)
        return (1.0 / (1.0 + np.exp(-member_logits(geo, self._theta)))).mean(0)

    def draw_proba(self, x: np.ndarray, draws: int, rng: np.random.Generator | None = None) -> np.ndarray:
        """(draws, n, LLMs) P(correct) drawn from the learned posterior (exploration's)."""
        last = self._last
        geo = last[1] if last is not None and last[0] is x else None  # the adapter's pass is not repeated
        return posterior_draws(geo or self.state.geometry(x), self._theta, self._variances, draws,
                               rng or np.random.default_rng())

    def stats(self) -> dict:
        return {"seq": self.seq, **self.counts}
