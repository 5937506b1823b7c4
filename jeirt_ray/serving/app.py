"""Ray Serve deployments: the encoder, the router (which is also the FastAPI ingress) and
the onboarder.

    Encoder   the frozen text encoder; @serve.batch merges concurrent queries into one forward
    Router    the HTTP API (FastAPI): /v1/route, /v1/chat/completions, /v1/onboard, /v1/models,
              /health. Holds the space at models:/<model>@<alias> (live settings in user_config)
              and scores every LLM with one matrix product per ensemble member
    Onboarder fits a new LLM's vector, registers it as a new version, optionally moves the alias

The router is the ingress rather than a separate deployment behind one: its work per query is
a few milliseconds, and on the reference machine every extra handle hop cost about 6 ms, a
fifth of a query's latency (README, "Serving"). `build_app(args)` is the import path of the
Serve configs in deployments/ (the only place that sets replicas, autoscaling, resources and
user_config). The routing logic is a plain class (router.RouterCore), tested without Ray.
"""

# no `from __future__ import annotations`: Serve's class-based FastAPI views need the request
# body types as real objects, not strings
import asyncio
import logging
import os
import threading
import time

import numpy as np
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from ray import serve

from ..encoders import make_encoder
from .router import RequestError, RouterCore, RouterSettings, SpaceSource
from .schemas import ChatRequest, OnboardRequest, RouteRequest, RouteResponse

log = logging.getLogger("jeirt.serve")
TOKEN_ENV = "JEIRT_API_TOKEN"


@serve.deployment(name="Encoder")
class Encoder:
    def __init__(self, encoder: str, threads: int | None = None):
        if threads:  # Ray pins torch to the replica's num_cpus; a replica may use more threads
            import torch
            torch.set_num_threads(threads)
        self.encoder = make_encoder(encoder)
        self.encoder.encode(["warm-up"])  # load the weights before the first request

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.0)  # no waiting alone; batches form under load
    async def encode(self, texts: list[str]) -> list[np.ndarray]:
        return list(self.encoder.encode(texts))

    async def encode_many(self, texts: list[str]) -> np.ndarray:
        """A request's own batch (e.g. onboarding by text) in one call."""
        return self.encoder.encode(texts)


@serve.deployment(name="Onboarder")
class Onboarder:
    """Onboarding builds on the LATEST registered version (not the alias), one request at a time,
    so concurrent onboardings each land in a version that keeps the others' models."""

    def __init__(self, model: str, encoder_id: str, tracking_uri: str | None = None):
        from ..registry import Registry
        self.registry = Registry(tracking_uri)
        self.model, self.encoder_id = model, encoder_id
        self.alias = "champion"
        self.lock = asyncio.Lock()

    def reconfigure(self, user_config: dict) -> None:
        self.alias = user_config.get("alias", self.alias)

    async def onboard(self, request: dict, text_vectors: np.ndarray | None) -> dict:
        from ..model.onboarding import onboard
        req = OnboardRequest(**request)
        async with self.lock:
            latest = max(self.registry.versions(self.model), key=lambda v: v["version"])["version"]
            space = self.registry.load(f"models:/{self.model}/{latest}")
            if space.question_embeddings is None:
                raise RequestError(f"version {latest} of {self.model} stores no question embeddings; onboard "
                                   f"by 'text' or retrain it with this version of jeirt")
            pos = {q: i for i, q in enumerate(space.question_ids)}
            ids = [r.question_id for r in req.responses if r.question_id is not None]
            unknown = [q for q in ids if q not in pos]
            if unknown:
                raise RequestError(f"{len(unknown)} unknown question_id(s), e.g. {unknown[:5]}")
            rows, t = [], 0
            for r in req.responses:
                if r.question_id is not None:
                    rows.append(space.question_embeddings[pos[r.question_id]])
                else:
                    rows.append(text_vectors[t])
                    t += 1
            answered = set(ids)
            unanswered = [q for q in space.question_ids if q not in answered]
            cand_rows = np.array([pos[q] for q in unanswered], dtype=int)
            result = await asyncio.to_thread(
                onboard, space, req.model, np.stack(rows), np.array([r.label for r in req.responses]),
                holdout=req.holdout, candidates=space.question_embeddings[cand_rows], candidate_ids=unanswered,
                suggest=req.suggest)
            metrics = {f"onboard.{k}": v for k, v in result.report.get("heldout", {}).items()}
            version = self.registry.register(result.space, self.model, metrics)
            if req.promote:
                self.registry.promote(self.model, version, self.alias)
        return {**result.report, "version": version, "based_on_version": latest,
                "promoted_to": self.alias if req.promote else None}


api = FastAPI(title="jeirt-ray", description="Route queries to the LLM most likely to answer them; onboard LLMs.")


@api.exception_handler(RequestValidationError)
async def _invalid(request: Request, exc: RequestValidationError):
    # the standard 422, but with a one-line summary first
    errors = exc.errors()
    first = errors[0] if errors else {}
    where = ".".join(str(p) for p in first.get("loc", ()))
    return JSONResponse(status_code=422, content={"error": f"{where}: {first.get('msg', 'invalid request')}",
                                                  "detail": jsonable(errors)})


def jsonable(errors):
    return [{k: (str(v) if k == "ctx" else v) for k, v in e.items() if k != "input"} for e in errors]


# a default user_config, so that Serve always calls reconfigure (which loads the space) while the
# replica starts: a registry or alias that cannot be loaded fails the deployment loudly
@serve.deployment(name="Router", user_config={"alias": "champion"})
@serve.ingress(api)
class Router:
    def __init__(self, encoder, onboarder, model: str, encoder_id: str, tracking_uri: str | None = None,
                 token_env: str = TOKEN_ENV):
        self.encoder, self.onboarder = encoder, onboarder
        self.source = SpaceSource(tracking_uri, encoder_id)
        self.settings = RouterSettings(model=model)
        self.core: RouterCore | None = None
        self.version: str | None = None
        self.token = os.environ.get(token_env) or None
        self.token_env = token_env
        self.lock = threading.Lock()

    # ---- the space and live settings -----------------------------------------------------------
    def reconfigure(self, user_config: dict) -> None:
        """Apply changed live settings (alias, costs, default policy, upstreams) without a redeploy.
        A setting that cannot be applied leaves the current state serving and is reported."""
        old = self.settings
        self.settings = RouterSettings(model=old.model, **user_config)
        try:
            self._swap(force=True)
        except Exception:
            if self.core is None:
                raise  # nothing to keep serving: fail loudly at start-up
            self.settings = old
            log.exception("new router settings rejected; still serving %s version %s", old.uri, self.version)

    def _swap(self, force: bool = False) -> None:
        # under a lock: Serve's local testing mode runs reconfigure concurrently with the first
        # request, and two loads must not interleave
        with self.lock:
            changed = self.source.changed(self.settings, force=force)
            if changed is None and not force:
                return
            version, space = changed if changed else (self.version, self.core.space)
            self.core = RouterCore(space, f"{self.settings.model}/{version}", self.settings.costs,
                                   self.settings.default_policy)
            self.version = version

    def _refresh(self) -> None:
        try:
            self._swap()
        except Exception:
            log.exception("could not load the new version of %s; still serving version %s",
                          self.settings.uri, self.version)

    async def _route(self, body: RouteRequest) -> dict:
        x = np.stack(await asyncio.gather(*(self.encoder.encode.remote(t) for t in body.texts)))
        self._refresh()
        try:
            results = self.core.route(x, body)
        except RequestError as e:
            raise HTTPException(422, str(e))
        return RouteResponse(space=self.core.label, results=results).model_dump()

    # ---- HTTP ------------------------------------------------------------------------------------
    @api.post("/v1/route")
    async def route(self, body: RouteRequest) -> dict:
        return await self._route(body)

    @api.post("/v1/chat/completions")
    async def chat(self, body: ChatRequest) -> dict:
        routed = await self._route(RouteRequest(query=body.last_user_text))
        decision = routed["results"][0]
        upstream = (self.settings.upstreams or {}).get(decision["chosen"])
        routing = {"chosen": decision["chosen"], "p_correct": decision["p_correct"], "space": routed["space"],
                   "scores": decision["scores"][:5]}
        if upstream:
            import httpx
            payload = {**body.model_dump(exclude_none=True), "model": decision["chosen"]}
            async with httpx.AsyncClient(timeout=120) as client:
                r = await client.post(f"{upstream.rstrip('/')}/chat/completions", json=payload)
            if r.status_code >= 400:
                raise HTTPException(502, f"upstream {upstream} answered {r.status_code}: {r.text[:300]}")
            return {**r.json(), "routing": routing}
        return {"id": f"route-{time.time_ns()}", "object": "chat.completion", "created": int(time.time()),
                "model": decision["chosen"], "routing": routing,
                "choices": [{"index": 0, "finish_reason": "stop", "message": {
                    "role": "assistant",
                    "content": f"Routed to {decision['chosen']} (p_correct {decision['p_correct']:.3f}); no "
                               f"upstream is configured for it, so this is the routing decision only."}}]}

    @api.post("/v1/onboard")
    async def onboard(self, body: OnboardRequest, request: Request) -> dict:
        if self.token is None:
            raise HTTPException(503, f"onboarding is disabled: set {self.token_env} on the service to enable it")
        if request.headers.get("authorization", "") != f"Bearer {self.token}":
            raise HTTPException(401, "missing or wrong bearer token")
        texts = [r.text for r in body.responses if r.text is not None]
        vectors = await self.encoder.encode_many.remote(texts) if texts else None
        try:
            return await self.onboarder.onboard.remote(body.model_dump(), vectors)
        except Exception as e:
            cause = getattr(e, "cause", e)
            if isinstance(cause, (RequestError, ValueError)):
                raise HTTPException(422, str(cause))
            raise

    @api.get("/v1/models")
    async def models(self) -> dict:
        self._refresh()
        return {"object": "list", "space": self.core.label, "alias": self.settings.alias,
                "data": [{"id": n, "object": "model", "owned_by": "jeirt", "registry_version": self.version,
                          "cost": None if self.core.costs is None else float(self.core.costs[i])}
                         for i, n in enumerate(self.core.names)]}

    @api.get("/health")
    async def health(self) -> dict:
        self._refresh()
        return {"status": "ok", "space": self.core.label, "llms": len(self.core.names)}


def build_app(args: dict):
    """Serve's application builder. args: model (registered name), encoder (spec),
    encoder_threads (optional torch threads per encoder replica), tracking_uri (optional;
    default MLFLOW_TRACKING_URI or the project's SQLite database)."""
    if "model" not in args:
        raise ValueError("the Serve config's args must name the registered 'model'")
    encoder = args.get("encoder", "all-MiniLM-L6-v2")
    encoder_id = make_encoder(encoder).encoder_id  # cheap: the weights load lazily
    uri = args.get("tracking_uri")
    return Router.bind(Encoder.bind(encoder, args.get("encoder_threads")),
                       Onboarder.bind(args["model"], encoder_id, uri), args["model"], encoder_id, uri)
