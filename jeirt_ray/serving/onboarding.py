"""Onboarding as a service, a plain class (the Onboarder deployment wraps it): fit a new LLM's
vector on the version that the served alias (`@champion`) points at, register the result as a
new version and, when asked, move the alias to it, but only if the alias has not moved meanwhile
(compare-and-set: an LLM onboarded by another request, or a promotion by `jeirt learn`, is never
taken out of serving). Where the alias is not set, or its version cannot serve here (another
encoder, or a broken upload), the newest version that can is the base. One request at a time per
replica; across replicas, the compare-and-set refuses the later promotion with a 409 to retry.
An LLM the space has already is refitted only with `replace: true`, as in the CLI and Python."""

from __future__ import annotations

import asyncio
import logging
import math

import numpy as np

from ..routing.router import Conflict, NotFound, RequestError
from .live import RegistryUnreachable
from .schemas import OnboardRequest

log = logging.getLogger("jeirt.serve")


LOCK_WAIT_S = 60.0  # how long an onboarding waits for the one before it (each registers a version in turn)


class OnboarderBusy(Exception):
    """The replica is still registering an earlier onboarding (HTTP 503 with Retry-After)."""


class OnboardingService:
    def __init__(self, model: str, encoder_id: str, tracking_uri: str | None = None, alias: str = "champion"):
        from ..tracking.registry import SpaceRegistry
        self.registry = SpaceRegistry(tracking_uri)
        self.model, self.encoder_id, self.alias = model, encoder_id, alias
        self.lock = asyncio.Lock()

    async def onboard(self, request: OnboardRequest, text_vectors: np.ndarray | None) -> dict:
        """`text_vectors`: the encoder embeddings of the responses given by `text`, in order. The
        work (registry calls included) runs in a worker thread, off the event loop. A registry
        that cannot be reached is RegistryUnreachable (HTTP 503); the version is created last,
        so a failure on the way leaves none behind."""
        from ..tracking.registry import unreachable
        try:
            async with asyncio.timeout(LOCK_WAIT_S):
                await self.lock.acquire()
        except TimeoutError:
            raise OnboarderBusy(f"another onboarding has held this replica for over {LOCK_WAIT_S:g} s; nothing "
                                "was registered: retry shortly") from None
        try:
            return await asyncio.to_thread(self._onboard, request, text_vectors)
        except Exception as e:
            if isinstance(e, RequestError) or not unreachable(e):
                raise
            raise RegistryUnreachable(f"the registry cannot be reached ({type(e).__name__}); nothing was "
                                      f"registered: retry shortly") from None
        finally:
            self.lock.release()

    def _newest_loadable(self, versions: list[dict]):
        """(space, version) of the newest of `versions` (newest first) that loads: one whose
        stored space is broken (an upload cut off midway) is passed over, as the router does."""
        from ..tracking.registry import unreachable
        for row in versions:
            try:
                return self.registry.load(f"models:/{self.model}/{row['version']}"), row["version"]
            except Exception as e:
                if unreachable(e):
                    raise
                log.warning("version %s of %s cannot be loaded (%s); onboarding builds on an older one",
                            row["version"], self.model, type(e).__name__)
        raise Conflict(f"no version of {self.model} that this service can serve loads from the registry")

    def _onboard(self, req: OnboardRequest, text_vectors: np.ndarray | None) -> dict:
        from ..model.onboarding import onboard
        from ..routing.prices import record_onboarded
        from ..tracking.registry import AliasMoved
        versions = self.registry.versions(self.model)  # newest first
        servable = [v for v in versions if v["tags"].get("encoder_id", self.encoder_id) == self.encoder_id]
        if not servable:
            raise Conflict(f"no version of {self.model} was trained on this service's encoder {self.encoder_id!r}")
        served = next((v for v in servable if self.alias in v["aliases"]), None)
        expected = next((v["version"] for v in versions if self.alias in v["aliases"]), None)
        space, latest = self._newest_loadable(([served] if served else []) + [v for v in servable if v is not served])
        if req.model in space.model_names and not req.replace:
            raise Conflict(f"version {latest} of {self.model} has an LLM named {req.model!r} already; send "
                           f"\"replace\": true to refit its vector from these answers, or choose another name")
        if space.question_embeddings is None:
            raise Conflict(f"version {latest} of {self.model} stores no question embeddings; onboard "
                           f"by 'text' or retrain it with this version of jeirt")
        pos = {q: i for i, q in enumerate(space.question_ids)}
        ids = [r.question_id for r in req.responses if r.question_id is not None]
        unknown = [q for q in ids if q not in pos]
        if unknown:
            raise NotFound(f"{len(unknown)} unknown question_id(s), e.g. {unknown[:5]}: GET the space's "
                           f"question ids from the registry, or onboard by 'text'")
        texts = iter(text_vectors if text_vectors is not None else ())
        rows = [space.question_embeddings[pos[r.question_id]] if r.question_id is not None else next(texts)
                for r in req.responses]
        answered = set(ids)
        unanswered = [q for q in space.question_ids if q not in answered]
        cand_rows = np.array([pos[q] for q in unanswered], dtype=int)
        result = onboard(
            space, req.model, np.stack(rows), np.array([r.label for r in req.responses]),
            holdout=req.holdout, candidates=space.question_embeddings[cand_rows], candidate_ids=unanswered,
            suggest=req.suggest)
        record_onboarded(result.space, req.model, req.price_usd_per_mtok)
        metrics = {f"onboard.{k}": v for k, v in result.report.get("heldout", {}).items()}
        version = self.registry.register(result.space, self.model, metrics)
        if req.promote:
            try:
                self.registry.promote(self.model, version, self.alias, expected=expected)
            except AliasMoved as e:
                raise Conflict(str(e)) from None
        report = {**result.report, "version": version, "based_on_version": latest,
                  "promoted_to": self.alias if req.promote else None}
        if "heldout" in report:  # an AUC on one class is NaN, which JSON cannot carry
            report["heldout"] = {k: None if isinstance(v, float) and math.isnan(v) else v
                                 for k, v in report["heldout"].items()}
        return report
