"""A Router replica that learns from the feedback on its decisions (user_config.learning): a
FeedbackLearner (feedback/applied.py) over the served version, polled in a daemon thread off the
request path; every policy then reads the learned P(correct). A new version starts from its own
vectors and replays the feedback store (in that thread; the version routes as trained meanwhile)."""

from __future__ import annotations

import logging
import threading

from ..core.secrets import redact
from ..feedback.applied import FeedbackLearner
from ..feedback.store import FeedbackStore

log = logging.getLogger("jeirt.learning")


class ReplicaLearning:
    def __init__(self, live, encoder_id: str):
        self.live, self.encoder_id = live, encoder_id
        self.learner: FeedbackLearner | None = None
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
        """Route `core` with the learned state when it serves the version learned over."""
        learner = self.learner
        core.learned = learner.predict_proba if (self.config.enabled and learner is not None
                                                 and core.label == self.label) else None

    def step(self) -> None:
        """Read the new feedback (a new version, or learning switched on: replay it all)."""
        core = self.live.current()
        if not self.config.enabled:
            self.learner, self.label = None, None
            core.learned = None
            return
        cfg, url = self.config, self.live.config.decisions.feedback_url
        if self._store is None or self._store[0] != url:
            self._store = (url, FeedbackStore(url))
            self.learner = None
        settings = (cfg.prior_var, cfg.residual_var, cfg.evidence)
        if self.learner is None or self.label != core.label or self._settings != settings:
            self.learner = FeedbackLearner(core.space, self._store[1], self.encoder_id, *settings)
            self.label, self._settings = core.label, settings
        self.learner.poll()
        self.attach(self.live.current())

    def stats(self) -> dict:
        learner = self.learner
        return {"enabled": self.config.enabled, "error": self.error,
                **(learner.stats() if learner is not None else {"seq": 0, "applied": 0, "skipped": 0})}

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
