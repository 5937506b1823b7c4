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
import functools
import hmac
import logging
import math
import os
import threading
import time
from pathlib import Path

import numpy as np
from fastapi import Depends, FastAPI, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from ray import serve
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..encoders import make_encoder
from .router import Conflict, NotFound, RegistryUnreachable, RequestError, RouterCore, RouterSettings, SpaceSource
from .schemas import (BLANK, MAX_BODY_BYTES, MAX_ONBOARD_BODY_BYTES, ChatRequest, ChatResponse, ErrorBody, HealthResponse,
                      LLMsResponse, MapResponse, ModelsResponse, OnboardRequest, OnboardResponse, RouteRequest,
                      RouteResponse)

log = logging.getLogger("jeirt.serve")
TOKEN_ENV = "JEIRT_API_TOKEN"
STATIC = Path(__file__).with_name("static")


@functools.cache
def static_files() -> dict[str, Path]:
    """The explorer's files, served at /static/<name>: its own, and plotly.js as the Python
    package `plotly` ships it (no request leaves the machine)."""
    import importlib.resources
    files = {p.name: p for p in STATIC.iterdir() if p.suffix in (".js", ".css")}
    plotly = importlib.resources.files("plotly") / "package_data" / "plotly.min.js"
    files["plotly.min.js"] = Path(str(plotly))
    return files


class ThreadedEncoder:
    """An encoder whose forward runs in a worker thread (the event loop keeps taking requests,
    and the next batch gathers while this one computes) with `threads` torch threads. Torch's
    thread count is per calling thread under OpenMP, and Ray sets OMP_NUM_THREADS to the
    replica's num_cpus, so it is set in the thread that runs the forward."""

    def __init__(self, spec: str, threads: int | None, tracking_uri: str | None = None):
        if spec.startswith("models:/"):  # the encoder saved with a registered (fine-tuned) space
            from ..registry import Registry
            spec = str(Registry(tracking_uri).download_encoder(spec))
        self.encoder, self.threads = make_encoder(spec), threads
        self.forward(["warm-up"])  # load the weights before the first request

    def forward(self, texts: list[str]) -> np.ndarray:
        if self.threads:
            import torch
            if torch.get_num_threads() != self.threads:
                torch.set_num_threads(self.threads)
        return self.encoder.encode(texts)

    async def encode(self, texts: list[str]) -> np.ndarray:
        return await asyncio.to_thread(self.forward, texts)


@serve.deployment(name="Encoder")
class Encoder:
    def __init__(self, encoder: str, threads: int | None = None, tracking_uri: str | None = None):
        self.encoder = ThreadedEncoder(encoder, threads, tracking_uri)

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.0)  # no waiting alone; batches form under load
    async def encode(self, texts: list[str]) -> list[np.ndarray]:
        return list(await self.encoder.encode(texts))

    async def encode_many(self, texts: list[str]) -> np.ndarray:
        """A request's own batch (e.g. onboarding by text) in one call."""
        return await self.encoder.encode(texts)


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
                raise Conflict(f"version {latest} of {self.model} stores no question embeddings; onboard "
                                   f"by 'text' or retrain it with this version of jeirt")
            pos = {q: i for i, q in enumerate(space.question_ids)}
            ids = [r.question_id for r in req.responses if r.question_id is not None]
            unknown = [q for q in ids if q not in pos]
            if unknown:
                raise NotFound(f"{len(unknown)} unknown question_id(s), e.g. {unknown[:5]}: GET the space's "
                               f"question ids from the registry, or onboard by 'text'")
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
        report = {**result.report, "version": version, "based_on_version": latest,
                  "promoted_to": self.alias if req.promote else None}
        if "heldout" in report:  # an AUC on one class is NaN, which JSON cannot carry
            report["heldout"] = {k: None if isinstance(v, float) and math.isnan(v) else v
                                 for k, v in report["heldout"].items()}
        return report


api = FastAPI(title="jeirt-ray", description=(
    "Route queries to the LLM most likely to answer them; onboard LLMs. Every error answer is an "
    f"`ErrorBody`. Request bodies over {MAX_BODY_BYTES} bytes ({MAX_ONBOARD_BODY_BYTES} for /v1/onboard) "
    "are refused with 413."))
ERRORS = {code: {"model": ErrorBody, "description": text} for code, text in {
    400: "the body cannot be read (not UTF-8 JSON)", 404: "a name in the request is not in the space", 409: "the request needs something the service has not "
    "configured", 413: "request body too large", 422: "invalid request", 500: "the service's own fault"}.items()}


def error(status: int, message: str, detail: list | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content=ErrorBody(error=message, detail=detail).model_dump(),
                        headers=headers)


@api.exception_handler(RequestValidationError)
async def _invalid(request: Request, exc: RequestValidationError):
    errors = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "invalid")), "type": str(e.get("type", "invalid"))}
              for e in exc.errors()]
    first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
    return error(422, f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}", errors)


@api.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, exc: StarletteHTTPException):
    return error(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))


@api.exception_handler(Exception)
async def _fault(request: Request, exc: Exception):
    log.exception("%s %s failed", request.method, request.url.path)
    return error(500, f"internal error ({type(exc).__name__}); the service log has the details")


class BodyLimit:
    """Refuses request bodies over the route's byte cap with 413 before they are parsed: by
    Content-Length when it is given, else by counting the chunks as they arrive (the body is
    then handed on whole; FastAPI reads it whole anyway)."""

    def __init__(self, app, limits: dict[str, int], default: int):
        self.app, self.limits, self.default = app, limits, default

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.limits.get(scope["path"], self.default)
        too_large = error(413, f"request body over {limit} bytes; send less per request")
        length = dict(scope.get("headers", ())).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            return await too_large(scope, receive, send)
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > limit:
                return await too_large(scope, receive, send)
        replayed = False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}
        await self.app(scope, replay, send)


api.add_middleware(BodyLimit, limits={"/v1/onboard": MAX_ONBOARD_BODY_BYTES}, default=MAX_BODY_BYTES)
# the explorer's plotly.js (4.6 MB) and map (1.5 MB on mmlu_pro) shrink 3-4x; small answers stay as they are
api.add_middleware(GZipMiddleware, minimum_size=64 * 1024, compresslevel=5)
bearer = HTTPBearer(auto_error=False, description=f"the token in the service's {TOKEN_ENV}")


# a default user_config, so that Serve always calls reconfigure (which loads the space) while the
# replica starts: a registry or alias that cannot be loaded fails the deployment loudly
@serve.deployment(name="Router", user_config={"alias": "champion"})
@serve.ingress(api)
class Router:
    def __init__(self, encoder, onboarder, model: str, encoder_id: str, tracking_uri: str | None = None,
                 token_env: str = TOKEN_ENV, encoder_threads: int | None = None):
        """`encoder`: the Encoder deployment's handle, or an encoder spec to run in this replica
        (one process hop less per query; the Serve config's args.encoder_placement: router)."""
        self.onboarder = onboarder
        self.encoder = encoder if not isinstance(encoder, str) else None
        self.inline = ThreadedEncoder(encoder, encoder_threads, tracking_uri) if isinstance(encoder, str) else None
        self.source = SpaceSource(tracking_uri, encoder_id)
        self.settings = RouterSettings(model=model)
        self.core: RouterCore | None = None
        self.version: str | None = None
        token = os.environ.get(token_env)
        self.token = token.encode() if token else None
        self.token_env = token_env
        self.lock = threading.Lock()
        self.explored: dict = {}  # (space label, "map" | "llms") -> the explorer's JSON for that version
        self.registry_error: str | None = None  # why the alias's version is not the one serving, if so
        self.registry_reachable = True
        # the alias is re-resolved off the request path: a slow or locked registry never delays a query
        threading.Thread(target=self._watch_alias, daemon=True, name="alias-watcher").start()

    def _watch_alias(self) -> None:
        while True:
            time.sleep(self.settings.refresh_s)  # read each round: reconfigure may change it
            if self.core is not None:
                self._refresh()

    # ---- the space and live settings -----------------------------------------------------------
    def reconfigure(self, user_config: dict) -> None:
        """Apply changed live settings (alias, costs, default policy, upstreams) without a redeploy.
        A setting that cannot be applied leaves the current state serving and is reported."""
        old = self.settings
        self.settings = RouterSettings(model=old.model, **user_config)
        try:
            self._swap(force=True)
        except Exception as e:
            if self.core is None:
                self._fall_back(e)  # a replica starting (scale-up, restart) while the alias's version is bad
                return
            self.settings = old
            log.exception("new router settings rejected; still serving %s version %s", old.uri, self.version)

    def _fall_back(self, error: Exception) -> None:
        """Serve the newest registered version that loads and fits the encoder when the alias's
        own cannot (reported in /health, and the alias keeps being watched); fail loudly when
        none can or the registry cannot be read."""
        try:
            bad = self.source.resolve(self.settings)
        except LookupError:  # no alias, or no registry: nothing to fall back on
            raise error from None
        for row in self.source.registry.versions(self.settings.model):  # newest first
            version = str(row["version"])
            if version == bad:
                continue
            try:
                space = self.source.load(self.settings, version)
            except Exception:
                continue
            with self.lock:
                self._serve(version, space)
                self.source.version = version
            self.registry_error = f"{type(error).__name__}: {error}".splitlines()[0][:300]
            log.warning("%s (version %s) cannot serve (%s); serving version %s, the newest that can",
                        self.settings.uri, bad, self.registry_error, version)
            return
        raise error

    def _swap(self, force: bool = False) -> None:
        # under a lock: Serve's local testing mode runs reconfigure concurrently with the first
        # request, and two loads must not interleave
        with self.lock:
            changed = self.source.changed(self.settings)
            if changed is None and not force:
                return
            self._serve(*(changed or (self.version, self.core.space)))

    def _serve(self, version: str, space) -> None:
        """Route with `space` (registered `version`) and the current settings (under the lock)."""
        self.core = RouterCore(space, f"{self.settings.model}/{version}", self.settings.costs,
                               self.settings.default_policy)
        self.version = version

    def _refresh(self) -> None:
        try:
            self._swap()
            self.registry_error, self.registry_reachable = None, True
        except Exception as e:
            if self.registry_error is None:  # once per outage, not once per look-up
                log.exception("could not look up %s; still serving version %s", self.settings.uri, self.version)
            self.registry_error = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            self.registry_reachable = not isinstance(e, RegistryUnreachable)

    def _core(self) -> RouterCore:
        """The serving space. Loaded on demand only when a request arrives before Serve's first
        reconfigure (its local testing mode allows that); the lock waits for a load in progress."""
        if self.core is None:
            self._swap()
        return self.core

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.0)
    async def _encode_inline(self, texts: list[str]) -> list[np.ndarray]:
        return list(await self.inline.encode(texts))

    async def _encode(self, texts: list[str]) -> np.ndarray:
        if self.inline is not None:
            return np.stack(await asyncio.gather(*(self._encode_inline(t) for t in texts)))
        return np.stack(await asyncio.gather(*(self.encoder.encode.remote(t) for t in texts)))

    async def _route(self, body: RouteRequest, timing: dict | None = None) -> dict:
        start = time.perf_counter()
        x = await self._encode(body.texts)
        encoded = time.perf_counter()
        core = self._core()
        try:
            results = core.route(x, body)
        except RequestError as e:
            raise HTTPException(e.status, str(e))
        if timing is not None:
            timing.update(encode=encoded - start, route=time.perf_counter() - encoded)
        return RouteResponse(space=core.label, results=results).model_dump()

    # ---- HTTP ------------------------------------------------------------------------------------
    @api.post("/v1/route", response_model=RouteResponse, responses=ERRORS)
    async def route(self, body: RouteRequest, response: Response = None) -> dict:
        timing = {}
        out = await self._route(body, timing)
        if response is not None:  # None when called through a handle rather than HTTP
            # where the time went, for clients and load tests (the standard Server-Timing header)
            response.headers["Server-Timing"] = ", ".join(f"{k};dur={v * 1000:.2f}" for k, v in timing.items())
        return out

    @api.post("/v1/chat/completions", response_model=ChatResponse,
              responses={**ERRORS, 502: {"model": ErrorBody, "description": "the upstream LLM failed"}})
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
            try:
                return ChatResponse.model_validate({**r.json(), "routing": routing}).model_dump()
            except (ValueError, TypeError) as e:
                raise HTTPException(502, f"upstream {upstream} did not answer a chat completion: {e}"[:400])
        return {"id": f"route-{time.time_ns()}", "object": "chat.completion", "created": int(time.time()),
                "model": decision["chosen"], "routing": routing,
                "choices": [{"index": 0, "finish_reason": "stop", "message": {
                    "role": "assistant",
                    "content": f"Routed to {decision['chosen']} (p_correct {decision['p_correct']:.3f}); no "
                               f"upstream is configured for it, so this is the routing decision only."}}]}

    @api.post("/v1/onboard", response_model=OnboardResponse, responses={
        **ERRORS, 401: {"model": ErrorBody, "description": "missing or wrong bearer token"},
        403: {"model": ErrorBody, "description": f"onboarding is switched off (no {TOKEN_ENV} on the service)"}})
    async def onboard(self, body: OnboardRequest,
                      credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> dict:
        if self.token is None:
            raise HTTPException(403, f"onboarding is switched off: set {self.token_env} on the service to enable it")
        given = credentials.credentials.encode() if credentials else b""
        if not hmac.compare_digest(given, self.token):  # constant time: the answer leaks no prefix
            raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})
        texts = [r.text.strip(BLANK) for r in body.responses if r.text is not None]
        vectors = None
        if texts:
            vectors = (await self.inline.encode(texts) if self.inline is not None
                       else await self.encoder.encode_many.remote(texts))
        try:
            return await self.onboarder.onboard.remote(body.model_dump(), vectors)
        except Exception as e:
            cause = getattr(e, "cause", e)
            if isinstance(cause, RequestError):
                raise HTTPException(cause.status, str(cause))
            if isinstance(cause, ValueError):
                raise HTTPException(422, str(cause))
            raise

    @api.get("/v1/models", response_model=ModelsResponse, responses={500: ERRORS[500]})
    async def models(self) -> dict:
        core = self._core()
        return {"object": "list", "space": core.label, "alias": self.settings.alias,
                "data": [{"id": n, "object": "model", "owned_by": "jeirt", "registry_version": self.version,
                          "cost": None if core.costs is None else float(core.costs[i])}
                         for i, n in enumerate(core.names)]}

    # ---- the web explorer ----------------------------------------------------------------------
    def _explore(self, what: str) -> tuple[str, dict]:
        """The explorer's JSON for the serving version, computed once per version."""
        from .explorer import llm_table, space_map
        core = self._core()
        key = (core.label, what)
        if key not in self.explored:
            result = (space_map if what == "map" else llm_table)(core.space)
            self.explored = {k: v for k, v in self.explored.items() if k[0] == core.label}
            self.explored[key] = result
        return core.label, self.explored[key]

    async def _explored(self, what: str) -> tuple[str, dict]:
        try:
            return await asyncio.to_thread(self._explore, what)
        except (ValueError, TypeError) as e:  # no stored questions; not a JE-IRT space
            raise HTTPException(409, f"the served space cannot be explored: {e}")

    @api.get("/v1/explore/map", response_model=MapResponse, responses={409: ERRORS[409], 500: ERRORS[500]})
    async def explore_map(self) -> dict:
        """The map: question directions in 2-D (PCA), coloured by benchmark, with the LLM vectors."""
        label, data = await self._explored("map")
        return {"space": label, **data}

    @api.get("/v1/explore/llms", response_model=LLMsResponse, responses={409: ERRORS[409], 500: ERRORS[500]})
    async def explore_llms(self) -> dict:
        """Each LLM's predicted accuracy per benchmark, onboarded LLMs marked, and the registry's versions."""
        label, data = await self._explored("llms")
        try:
            rows = await asyncio.to_thread(self.source.registry.versions, self.settings.model)
            versions = [{"version": r["version"], "aliases": r["aliases"]} for r in rows]
        except Exception:  # the table does not need the registry; say so with null
            versions = None
        return {"space": label, **data, "versions": versions}

    @api.get("/", include_in_schema=False)
    async def page(self) -> HTMLResponse:
        return HTMLResponse((STATIC / "index.html").read_text(encoding="utf-8"))

    @api.get("/static/{name}", include_in_schema=False)
    async def static(self, name: str) -> FileResponse:
        path = static_files().get(name)
        if path is None:
            raise HTTPException(404, f"no static file {name!r}")
        media = "text/css" if name.endswith(".css") else "text/javascript"
        return FileResponse(path, media_type=media, headers={"Cache-Control": "max-age=3600"})

    @api.get("/health", response_model=HealthResponse, responses={500: ERRORS[500]})
    async def health(self) -> dict:
        since = time.monotonic() - self.source.checked if self.source.checked else None
        core = self._core()
        return {"status": "degraded" if self.registry_error else "ok", "space": core.label, "llms": len(core.names),
                "registry": {"reachable": self.registry_reachable, "error": self.registry_error,
                             "seconds_since_check": since}}


def build_app(args: dict):
    """Serve's application builder. args: model (registered name), encoder (spec; or a registry
    URI such as models:/<model>@champion: the fine-tuned encoder saved with that space, pinned to
    the version the alias points at when the application is built),
    encoder_threads (optional torch threads per encoder), encoder_placement ("deployment", the
    default: an Encoder deployment of its own, scaled and placed apart, e.g. on GPUs; "router":
    the encoder runs inside each Router replica, one process hop less per query, for one
    machine), tracking_uri (optional; default MLFLOW_TRACKING_URI or the project's SQLite
    database)."""
    if "model" not in args:
        raise ValueError("the Serve config's args must name the registered 'model'")
    encoder = args.get("encoder", "all-MiniLM-L6-v2")
    placement = args.get("encoder_placement", "deployment")
    if placement not in ("deployment", "router"):
        raise ValueError(f"args.encoder_placement must be 'deployment' or 'router', not {placement!r}")
    uri, threads = args.get("tracking_uri"), args.get("encoder_threads")
    if encoder.startswith("models:/"):
        from ..registry import Registry
        encoder, encoder_id = Registry(uri).encoder_of(encoder)
    else:
        encoder_id = make_encoder(encoder).encoder_id  # cheap: the weights load lazily
    onboarder = Onboarder.bind(args["model"], encoder_id, uri)
    if placement == "router":
        return Router.bind(encoder, onboarder, args["model"], encoder_id, uri, encoder_threads=threads)
    return Router.bind(Encoder.bind(encoder, threads, uri), onboarder, args["model"], encoder_id, uri)
