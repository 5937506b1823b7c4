"""A Router replica's side of the feedback loop: each routed query's record in the decision log
(feedback/log.py) and the feedback on it (feedback/store.py), as user_config.decisions says.

A request gets one id (`x-jeirt-request-id`, the body's `id`); a batched /v1/route request's
queries are its rows 0..n-1 (`query_index`). /v1/route's rows are logged when it answers; a
chat's when its answer is complete (a stream: at its end), with who answered, its tokens, cost
and latency."""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ...feedback.grades import LOOKUP_COLUMNS, Forbidden, decision_age, grade_rows, late_wait_s
from ...feedback.log import DecisionLog, new_id
from ...feedback.store import Conflict, FeedbackStore
from ...routing.router import NotFound
from ..settings import DecisionsConfig


FEEDBACK_THREADS = 2


class Recorder:
    def __init__(self, config: DecisionsConfig, metrics, encoder_id: str):
        self.config, self.metrics, self.encoder_id = config, metrics, encoder_id
        self.log = DecisionLog(config.log_settings()) if config.enabled else None
        self._store: FeedbackStore | None = None  # opened at the first feedback
        # the log's and the store's blocking calls, bounded and apart from the replica's other threads
        self._threads = ThreadPoolExecutor(FEEDBACK_THREADS, thread_name_prefix="jeirt-feedback")

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        if self.log is not None:
            self.log.close()

    @staticmethod
    def new_id() -> str:
        return new_id()

    def rows(self, decision_id: str, route: str, key, core, version, results: list[dict], x: np.ndarray,
             texts: list[str]) -> list[dict]:
        """One row per query: every allowed LLM's p and expected cost, the choice and its
        propensity (1 unless the service explores) and the query as log_queries allows."""
        if self.log is None:
            return []
        return [{"id": decision_id, "query_index": i, "route": route, "key_id": getattr(key, "id", None),
                 "space": core.label, "registry_version": None if version is None else str(version),
                 "policy": r["policy"], "candidates": [s["model"] for s in r["scores"]],
                 "p_correct": [s["p_correct"] for s in r["scores"]],
                 "expected_cost": None if r["expected_cost"] is None else [s["cost"] for s in r["scores"]],
                 "chosen": r["chosen"], "propensity": r["propensity"], "encoder": self.encoder_id,
                 "embedding": np.asarray(x[i], np.float32), "query": texts[i]}
                for i, r in enumerate(results)]

    def write(self, rows: list[dict], **fields) -> None:
        """Log rows (fields: what the answer added, for every row)."""
        if self.log is None or not rows:
            return
        for r in rows:
            r.update(fields)
        logged, dropped = self.log.append(rows)
        self.metrics.decided(logged, dropped)

    async def grade(self, body, key) -> dict:
        """Record a FeedbackRequest (feedback/grades.py): NotFound (404) for a decision the log
        does not hold or that another key routed, Conflict (409) for another score from the same
        source, an LLM that did not answer (admin keys: one the decision did not weigh), or a
        decision whose answer failed; Forbidden (403) for a source the key may not claim. `key`
        None: the open mode (loopback only), trusted like an admin. A decision not written yet is
        waited for on the event loop (at most flush_s + 1 s); the store's calls run on the
        recorder's own threads, apart from the key checks and routes."""
        if self.log is None:
            raise NotFound("this service keeps no decision log (user_config.decisions.enabled is false), so it "
                           "takes no feedback")
        admin = key is None or key.allows("admin")
        source = body.source or ("user" if admin or key.may_claim("user") else key.sources[0])
        if not admin and not key.may_claim(source):
            self.metrics.feedback(source, "forbidden")
            raise Forbidden(f"this key's grades may come from {', '.join(key.sources)}, not {source!r}: an admin "
                            f"makes grader keys with `jeirt keys create --sources judge` (or key)")
        loop = asyncio.get_running_loop()
        try:
            age = decision_age(body.id, self.config.retention_days)
            rows = await loop.run_in_executor(self._threads, self.log.lookup, body.id, LOOKUP_COLUMNS)
            if not rows and (wait := late_wait_s(age, self.config.flush_s)):  # not written yet by its replica
                await asyncio.sleep(wait)
                rows = await loop.run_in_executor(self._threads, self.log.lookup, body.id, LOOKUP_COLUMNS)
            if self._store is None:
                self._store = await loop.run_in_executor(self._threads, FeedbackStore, self.config.feedback_url)
            out = await loop.run_in_executor(self._threads, functools.partial(
                grade_rows, self._store, rows, body.id, body.score, source, body.query_index, body.llm,
                getattr(key, "id", None), body.comment, owner=None if admin else key.id, any_llm=admin,
                weight=getattr(key, "grade_weight", 1.0)))
        except (NotFound, Conflict) as e:
            self.metrics.feedback(source, "unknown" if isinstance(e, NotFound) else "conflict")
            raise
        self.metrics.feedback(source, out["status"])
        return out
