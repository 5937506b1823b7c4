"""A Router replica that learns from the feedback on its decisions (user_config.learning): a
FeedbackLearner (feedback/applied.py) over the served version, polled in a daemon thread off the
request path; every policy then reads the learned P(correct), and with `explore` above 0
chooses on that share of the queries from a posterior draw (learning.explore.PolicyExploration). A new version starts from its own
vectors and replays the feedback store (in that thread; the version routes as trained meanwhile)."""

from __future__ import annotations

import logging
import threading

from ...core.secrets import redact
from ...feedback.applied import FeedbackLearner
from ...feedback.store import FeedbackStore
from ...learning import PolicyExploration

log = logging.getLogger("jeirt.learning")


class ReplicaLearning:
    def __init__(self, live, encoder_id: str):
        self.live, self.encoder_id = live, encoder_id
        self.learner: FeedbackLearner | None = None
        self.exploration: PolicyExploration | None = None  # counts what exploring spent since it was last set
        self.label: str | None = None  # the version the learner learned over
        self.error: str | None = None
        self.stopped = threading.Event()
        self._store: tuple[str | None, FeedbackStore] | None = None
        self._settings: tuple | None = None
        live.on_serve.append(self.attach)
        threading.Thread(target=self._loop, daemon=True, name="feedback-learner").start()

    @property
    def config(self):
        return self.live.config.learning

    def attach(self, core) -> None:
        """Route `core` with the learned state (and explore from it, where set) when it serves the
        version learned over."""
        learner = self.learner
        on = self.config.enabled and learner is not None and core.label == self.label
        core.learned = learner.predict_proba if on else None
        core.exploration = self.exploration if on else None

    def step(self) -> None:
        """Read the new feedback (a new version, or learning switched on: replay it all)."""
        core = self.live.current()
        if not self.config.enabled:
            self.learner, self.label, self.exploration = None, None, None
            core.learned, core.exploration = None, None
            return
        cfg, url = self.config, self.live.config.decisions.feedback_url
        if self._store is None or self._store[0] != url:
            self._store = (url, FeedbackStore(url))
            self.learner = None
        settings = (cfg.prior_var, cfg.residual_var, cfg.evidence)
        if self.learner is None or self.label != core.label or self._settings != settings:
            self.learner = FeedbackLearner(core.space, self._store[1], self.encoder_id, *settings)
            self.label, self._settings = core.label, settings
            self.exploration = None
        if cfg.explore == 0:
            self.exploration = None
        elif self.exploration is None or (self.exploration.share, self.exploration.usd_per_1k) != \
                (cfg.explore, cfg.explore_usd_per_1k):
            self.exploration = PolicyExploration(self.learner.draw_proba, cfg.explore, cfg.explore_usd_per_1k)
        self.learner.poll()
        self.attach(self.live.current())

    def stats(self) -> dict:
        learner, exploration = self.learner, self.exploration
        spend = dict(exploration.spend) if exploration is not None else {"queries": 0, "explored": 0,
                                                                          "exploration_usd": 0.0}
        return {"enabled": self.config.enabled, "error": self.error, "explore": self.config.explore,
                **(learner.stats() if learner is not None else {"seq": 0, "applied": 0, "skipped": 0}),
                "exploration": spend}

    def close(self) -> None:
        self.stopped.set()

    def _loop(self) -> None:
        while not self.stopped.wait(self.config.poll_s):
            try:
                self.step()
                self.error = None
            except Exception as e:  # the feedback database down: keep routing with what was learned
                if self.error is None:
                    log.warning("learning from feedback paused: %s", redact(f"{type(e).__name__}: {e}")[:300])
                self.error = redact(f"{type(e).__name__}: {e}".splitlines()[0])[:300]
