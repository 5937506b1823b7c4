"""A Router replica's shadow (user_config.shadow): on a share of the requests, the challenger
(`models:/<model>@<shadow.alias>`) routes the same queries with the same options, after the
answer is on its way and never acted on; its decisions go to a log of their own beside the
decision log (`<decisions path>-shadow`, feedback/log.shadow_root), same id and query_index, so
that `jeirt shadow` (feedback/shadow.py) compares the two on the graded traffic. The shadow space
is looked up every refresh_s in a daemon thread; no alias yet (nothing to compare) is reported
in /health, not an error."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import threading

from ...core.secrets import redact
from ...feedback.log import DecisionLog, shadow_root
from ...routing.router import RequestError
from ..live import LiveSpace, RegistryUnreachable, SpaceSource


MAX_PENDING = 64  # shadow routes in flight per replica; more sampled requests are skipped and counted


class ShadowRouting:
    def __init__(self, live: LiveSpace, encoder_id: str, tracking_uri: str | None):
        self.live = live
        self.source = SpaceSource(tracking_uri, encoder_id)
        self.core = None  # the challenger's SpaceRouter, once its alias resolves
        self.alias: str | None = None
        self.error: str | None = None
        self.log: DecisionLog | None = None
        self.counts = {"routed": 0, "failed": 0, "skipped": 0}
        self._tasks: set = set()
        self._lock = threading.Lock()
        self.stopped = threading.Event()
        threading.Thread(target=self._loop, daemon=True, name="shadow-watcher").start()

    @property
    def config(self):
        return self.live.config.shadow

    def offer(self, recorder, decision_id: str, route: str, key, x, texts: list[str], options: dict) -> None:
        """Route a sampled request with the challenger too, in the background."""
        core = self.core
        if self.config.share <= 0 or core is None or recorder.log is None or random.random() >= self.config.share:
            return
        if len(self._tasks) >= MAX_PENDING:  # a challenger slower than the traffic: bounded, not queued
            self.counts["skipped"] += 1
            return
        task = asyncio.get_running_loop().create_task(
            self._route(recorder, core, decision_id, route, key, x, texts, options))
        self._tasks.add(task)  # held until done: the loop keeps only weak references
        task.add_done_callback(self._tasks.discard)

    async def _route(self, recorder, core, decision_id, route, key, x, texts, options) -> None:
        try:
            results = await asyncio.to_thread(core.route, x, texts=texts, **options)
            rows = recorder.rows(decision_id, route, key, core, self.source.version, results, x, texts)
            self._writer(recorder).append(rows)
        except Exception as e:  # e.g. a policy that needs prices the challenger lacks: counted, never raised
            self.counts["failed"] += 1
            if not isinstance(e, RequestError):
                self.error = redact(f"{type(e).__name__}: {e}".splitlines()[0])[:300]
            return
        self.counts["routed"] += 1

    def _writer(self, recorder) -> DecisionLog:
        settings = dataclasses.replace(recorder.log.settings, root=shadow_root(recorder.log.settings.root))
        if self.log is None or self.log.settings != settings:
            old, self.log = self.log, DecisionLog(settings)
            if old is not None:
                old.close()
        return self.log

    def step(self) -> None:
        """Follow the shadow alias (a new version loads; the alias gone: no shadow)."""
        cfg = self.config
        if cfg.share <= 0:
            self.core, self.alias, self.error = None, None, None
            return
        if self.alias != cfg.alias:
            self.core, self.alias, self.source.version = None, cfg.alias, None
        try:
            changed = self.source.changed(self.live.model, cfg.alias)
        except LookupError as e:  # no such alias (yet): no shadow; the registry down: the one loaded goes on
            if not isinstance(e, RegistryUnreachable):
                self.core, self.source.version = None, None
            self.error = redact(str(e).splitlines()[0])[:300]
            return
        if changed is not None:
            self.core = self.live.router_for(*changed)
        self.error = None

    def stats(self) -> dict:
        core = self.core
        return {"share": self.config.share, "alias": self.config.alias, "space": None if core is None else core.label,
                "error": self.error, **self.counts}

    def close(self) -> None:
        self.stopped.set()
        if self.log is not None:
            self.log.close()

    def refresh(self) -> None:
        """One look at the shadow alias (from the watcher thread, and from reconfigure)."""
        try:
            with self._lock:
                self.step()
        except Exception as e:  # a version that will not load: keep the last one, say why
            self.error = redact(f"{type(e).__name__}: {e}".splitlines()[0])[:300]

    def _loop(self) -> None:
        while not self.stopped.wait(self.live.config.refresh_s):
            self.refresh()
