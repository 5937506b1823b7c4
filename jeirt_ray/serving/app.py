"""The Serve application: the Router deployment (the FastAPI ingress: every HTTP handler) and
`build_app`, which binds it to the replicas behind it (replicas.py).

    Router    the HTTP API: /v1/route, /v1/chat/completions (its flow: chat.py), /v1/feedback
              (the decision log and feedback: loop/recording.py), /v1/onboard, /v1/models, /health and
              the web explorer, over a LiveSpace (live.py: models:/<model>@<alias>, watched)
    Encoder   the frozen text encoder (replicas.py)
    Onboarder an OnboardingService (onboarding.py) one request at a time (replicas.py)

The router is the ingress rather than a separate deployment behind one: its work per query is
a few milliseconds, and on the reference machine every extra handle hop cost about 6 ms, a
fifth of a query's latency (docs, "Serving"). `build_app(args)` is the import path of the
Serve configs in deployments/ (the only place that sets replicas, autoscaling, resources and
user_config); args and user_config are typed (settings.py). Errors, limits: http.py; API keys:
access/. Serve serializes the deployment classes where they are defined, so what
their methods call lives in other modules or above them in this one.
"""

# no `from __future__ import annotations`: Serve's class-based FastAPI views need the request
# body types as real objects, not strings
import asyncio
import functools
import gzip
import logging
import time
from pathlib import Path
from typing import Literal

import numpy as np
from fastapi import Header, HTTPException, Query, Request, Response
from fastapi.responses import FileResponse, HTMLResponse
from ray import serve

from ..core.secrets import redact
from ..encoders import make_encoder
from ..routing.decisions import PolicyName
from ..routing.router import RequestError
from .access.guard import ACCESS_SECONDS, ANY_KEY, KEY_SCOPE, PUBLIC, Access, route_scopes, scoped, secure_openapi
from .access.keys import ADMIN_TOKEN_KEY, KeyStore
from .chat import ChatFlow
from .deployment.deploy import check_open_host, serve_listens_on
from .http import ERRORS, GZIP_FROM, TOKEN_ENV, make_api, server_timing
from .live import LiveSpace, RegistryUnreachable
from .loop.learned import ReplicaLearning
from .loop.recording import Recorder
from .loop.shadow import ShadowRouting
from .metrics import make_metrics
from .offload import Offload
from .onboarding import OnboarderBusy
from .relay.gateway import ChatControl, Conversations, Gateway
from .replicas import Encoder, Onboarder, ThreadedEncoder
from .schemas import (BLANK, CHAT_RESPONSES, ChatRequest, ErrorBody, FeedbackRequest, FeedbackResponse, HealthResponse, KeyResponse, LLMsResponse, MapResponse,
                      ModelsResponse, OnboardRequest, OnboardResponse, PlanRequest, PlanResponse, RouteRequest,
                      RouteResponse, SimilarResponse)
from .settings import SPACE_ENCODER, AppArgs, DecisionsConfig, RouterConfig
from ..zoo.catalog import DEFAULT_PAGE, MAX_PAGE, NoCandidates, model_cards
from ..zoo.similar import similar

STATIC = Path(__file__).parent / "explorer" / "static"
log = logging.getLogger("jeirt.serve")


@functools.cache
def static_files() -> dict[str, Path]:
    """The explorer's files, served at /static/<name>: its own, and plotly.js as the Python
    package `plotly` ships it (no request leaves the machine)."""
    import importlib.resources
    files = {p.name: p for p in STATIC.iterdir() if p.suffix in (".js", ".css")}
    plotly = importlib.resources.files("plotly") / "package_data" / "plotly.min.js"
    files["plotly.min.js"] = Path(str(plotly))
    return files


@functools.cache
def gzipped(path: Path) -> bytes:
    """A static file compressed once: compressing plotly.js (4.6 MB) per request cost a replica
    about 0.2 s of CPU each time."""
    return gzip.compress(path.read_bytes(), compresslevel=9)


api = make_api()


# a default user_config, so that Serve always calls reconfigure (which loads the space) while the
# replica starts: a registry or alias that cannot be loaded fails the deployment loudly
@serve.deployment(name="Router", user_config={"alias": "champion"})
@serve.ingress(api)
class Router:
    def __init__(self, encoder, onboarder, model: str, encoder_id: str, tracking_uri: str | None = None,
                 encoder_threads: int | None = None, auth: str = "required", keys_url: str | None = None):
        """`encoder`: the Encoder deployment's handle, or an encoder spec to run in this replica
        (one process hop less per query; the Serve config's args.encoder_placement: router).
        `auth`, `keys_url`: as settings.AppArgs."""
        import os

        from ..core.secrets import redact_logs
        from ..tracking.registry import bound_http_retries
        redact_logs("jeirt", "ray.serve", "mlflow")
        bound_http_retries()
        self.onboarder = onboarder
        self.encoder = encoder if not isinstance(encoder, str) else None
        self.inline = ThreadedEncoder(encoder, encoder_threads, tracking_uri) if isinstance(encoder, str) else None
        self.live = LiveSpace(model, encoder_id, tracking_uri)
        self.route_offload = Offload()  # where the route step runs: in a thread unless it is known cheap
        route_scopes(api)  # a route that declares no scope stops the replica here (access/guard.py)
        if auth == "open":  # checked where Serve really listens, however it was started
            host = serve_listens_on()
            if host is not None:
                check_open_host(host, "the Router")
        self.access = Access(auth, KeyStore(keys_url), os.environ.get(TOKEN_ENV))
        api.state.access = self.access  # read by the Guard middleware (access/guard.py), before any body is read
        secure_openapi(api, auth)
        self.explored: dict = {}  # (space label, "map" | "llms") -> the explorer's JSON for that version
        self.metrics = make_metrics()
        self.gateway = Gateway(self.metrics)  # one pooled HTTP client per replica
        self.recorder = Recorder(DecisionsConfig(), self.metrics, encoder_id)  # reconfigure: user_config.decisions
        self.chat_flow = ChatFlow(self.live, self.gateway, self.metrics, self.access, self._route,
                                  lambda: self.recorder)
        self.conversations: Conversations | None = None
        self.learning = ReplicaLearning(self.live, encoder_id)
        self.shadow = ShadowRouting(self.live, encoder_id, tracking_uri)
        self.live.watch()

    def __del__(self):
        """Serve calls this when the replica stops (Python again when it collects the object):
        close the upstream connections."""
        if getattr(self, "live", None) is not None:  # None: __init__ never ran
            self.live.close()
        if getattr(self, "learning", None) is not None:
            self.learning.close()
        if getattr(self, "shadow", None) is not None:
            self.shadow.close()
        if getattr(self, "gateway", None) is not None:
            self.gateway.close_soon()
        if getattr(self, "recorder", None) is not None:  # write what the decision log holds
            self.recorder.close()

    def reconfigure(self, user_config: dict) -> None:
        """Serve's live settings (typed: settings.RouterConfig; an unknown key fails the update)."""
        self.live.configure(RouterConfig(**user_config))
        self._encode_inline.set_batch_wait_timeout_s(self.live.config.encoder_batch_wait_s)
        gw = self.live.config.gateway
        if self.conversations is None or (self.conversations.size, self.conversations.ttl_s) != (gw.sticky_max,
                                                                                                 gw.sticky_ttl_s):
            self.conversations = Conversations(gw.sticky_max, gw.sticky_ttl_s)
        if self.recorder.config != self.live.config.decisions:
            old, self.recorder = self.recorder, Recorder(self.live.config.decisions, self.metrics, self.recorder.encoder_id)
            old.close()
        self.shadow.refresh()  # the shadow routes from the replica's first request, not one refresh_s later

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.0)
    async def _encode_inline(self, texts: list[str]) -> list[np.ndarray]:
        self.metrics.encoder_batch(len(texts))
        return list(await self.inline.encode(texts))

    async def _encode(self, texts: list[str]) -> np.ndarray:
        if self.inline is not None:
            if self.inline.offload.inline(len(texts)):  # an instant encoder: no batch queue, no thread
                self.metrics.encoder_batch(len(texts))
                return self.inline.offload.timed(self.inline.forward, texts, items=len(texts))
            return np.stack(await asyncio.gather(*(self._encode_inline(t) for t in texts)))
        return np.stack(await asyncio.gather(*(self.encoder.encode.remote(t) for t in texts)))

    async def _route(self, texts: list[str], options: dict, timing: dict | None = None, route: str = "route",
                     key=None) -> tuple[dict, list[dict]]:
        """(a RouteResponse dict, its rows for the decision log)."""
        start = time.perf_counter()
        x = await self._encode(texts)
        encoded = time.perf_counter()
        core, version = self.live.current(), self.live.version
        recorder = self.recorder
        top_k = options.get("top_k")
        # exploring's USD allowance grows with the queries whose answers this service pays for
        options = {**options, "explore_counted": route == "chat"}
        if recorder.log is not None:  # the log keeps the p of up to log_candidates LLMs; the answer lists top_k
            cap = recorder.config.log_candidates
            options = {**options, "top_k": None if cap is None or top_k is None else max(top_k, cap),
                       "ranked_scores": True}
        try:  # on the loop only while routes are known to be that cheap (offload.py)
            results = await self.route_offload.run(core.route, x, texts=texts, items=len(texts), **options)
        except RequestError as e:
            raise HTTPException(e.status, str(e))
        explored = sum(r["explored"] for r in results)
        if explored:
            self.metrics.explored(route, explored)
        decision_id = recorder.new_id()
        rows = recorder.rows(decision_id, route, key, core, version, results, x, texts)
        self.shadow.offer(recorder, decision_id, route, key, x, texts, options)
        if top_k is not None and route == "route":  # chat reads the ranked LLMs' p (gateway.routing_of)
            for r in results:
                r["scores"] = r["scores"][:top_k]
        done = time.perf_counter()
        self.metrics.routed(route, done - start)
        if timing is not None:
            timing.update(encode=encoded - start, route=done - encoded)
        return RouteResponse(id=decision_id, space=core.label, results=results).model_dump(), rows

    # ---- HTTP ------------------------------------------------------------------------------------
    @api.post("/v1/route", response_model=RouteResponse, responses=ERRORS, **scoped("route"))
    async def route(self, body: RouteRequest, request: Request = None, response: Response = None) -> dict:
        """Route each query: the LLM its policy chooses, and every LLM's P(correct) (and expected
        cost, where prices are set)."""
        start = time.perf_counter()
        timing = {"access": request.scope.get(ACCESS_SECONDS, 0.0)} if request is not None else {}
        key = request.scope.get(KEY_SCOPE) if request is not None else None
        out, rows = await self._route(body.texts, body.options(), timing, key=key)
        self.recorder.write(rows, status=200, latency_s=time.perf_counter() - start)
        if response is not None:  # None when called through a handle rather than HTTP
            # where the time went, for clients and load tests (the standard Server-Timing header)
            response.headers["Server-Timing"] = server_timing(timing)
            response.headers["x-jeirt-request-id"] = out["id"]
        return out

    @api.post("/v1/feedback", response_model=FeedbackResponse, responses={
        **ERRORS, 404: {"model": ErrorBody, "description": "no such decision in the log (unknown, older than its "
                                                             "retention, or not written yet)"},
        409: {"model": ErrorBody, "description": "this source graded this decision before with another score, the "
                                                 "LLM named did not answer it, or its answer failed"},
        429: {"model": ErrorBody, "description": "the key's grades per minute or per day are used up (Retry-After); "
                                                 "nothing was recorded"},
        503: {"model": ErrorBody, "description": "the feedback store or the decision log cannot be used now "
                                                 "(Retry-After); nothing was recorded"}}, **scoped("feedback"))
    async def feedback(self, body: FeedbackRequest, request: Request = None) -> dict:
        """Grade a routed answer (its `x-jeirt-request-id`): 1 good, 0 bad, or between; recorded
        once per decision and source (a repeat with the same score changes nothing). A key grades
        only the decisions routed under it, as the sources it was made for (admin keys: any)."""
        key = request.scope.get(KEY_SCOPE) if request is not None else None
        if key is not None and (key.grades_per_minute is not None or key.grades_per_day is not None):
            admitted = await asyncio.to_thread(self.access.store.admit_grade, key)
            if not admitted.allowed:
                cap = getattr(key, admitted.limit)
                raise HTTPException(429, f"this key's {admitted.limit} ({cap}) is used up: nothing was recorded; "
                                         f"retry in {admitted.retry_after_s} s",
                                    headers={"Retry-After": str(admitted.retry_after_s)})
        try:
            return await self.recorder.grade(body, key)
        except RequestError as e:
            raise HTTPException(e.status, str(e))
        except Exception as e:  # the store or the log's filesystem failing: the client may retry
            log.warning("feedback not recorded: %s", redact(f"{type(e).__name__}: {e}")[:300])
            raise HTTPException(503, "the feedback store cannot be used now; nothing was recorded: retry shortly",
                                headers={"Retry-After": "5"}) from None

    @api.post("/v1/chat/completions", response_model=None, responses=CHAT_RESPONSES, **scoped("chat"))
    # the headers are optional, but never null: their types say what a present header holds
    async def chat(self, body: ChatRequest, request: Request = None,
                   x_jeirt_policy: PolicyName = Header(None, description="as the body's `policy`"),
                   x_jeirt_max_cost: float = Header(None, ge=0, description="as the body's `max_cost`"),
                   x_jeirt_candidates: str = Header(None, pattern=r"[^ ,]", max_length=20_000,
                                                    description="comma-separated names or globs, as `candidates`"),
                   x_jeirt_min_p: float = Header(None, ge=0, le=1, description="as the body's `min_p`"),
                   x_jeirt_conversation: str = Header(None, min_length=1, max_length=256,
                                                      description="a conversation key, as `user`"),
                   x_jeirt_sticky: bool = Header(None, description="as the body's `sticky`"),
                   x_jeirt_target_p: float = Header(None, ge=0, le=1, description="as the body's `target_p`"),
                   x_jeirt_target_share: float = Header(None, gt=0, le=1, description="as the body's `target_share`"),
                   x_jeirt_budget_per_1k: float = Header(None, gt=0, description="as the body's `budget_per_1k`"),
                   x_jeirt_max_params_b: float = Header(None, ge=0, description="as the body's `max_params_b`")):
        """OpenAI's chat completions: route the conversation to an LLM and answer with its
        upstream (streamed with `stream: true`), falling back to the next LLM of the policy's
        order when an upstream fails before its first byte. Response headers say who answered
        and why; without upstreams the answer is the routing decision alone."""
        given = {"policy": x_jeirt_policy, "max_cost": x_jeirt_max_cost, "min_p": x_jeirt_min_p,
                 "candidates": [c.strip() for c in x_jeirt_candidates.split(",") if c.strip()]
                 if x_jeirt_candidates else None, "conversation": x_jeirt_conversation, "sticky": x_jeirt_sticky,
                 "target_p": x_jeirt_target_p, "target_share": x_jeirt_target_share,
                 "budget_per_1k": x_jeirt_budget_per_1k, "max_params_b": x_jeirt_max_params_b}
        names = [k.lower() for k in (request.headers.keys() if request is not None else ())]
        try:
            ctl = ChatControl.from_request(body.model_dump(), {k: v for k, v in given.items() if v is not None}, names)
        except RequestError as e:
            raise HTTPException(e.status, str(e))
        timing = {"access": request.scope.get(ACCESS_SECONDS, 0.0)} if request is not None else {}
        key = request.scope.get(KEY_SCOPE) if request is not None else None
        try:
            return await self.chat_flow.answer(body, ctl, self.conversations, key, timing)
        except RequestError as e:
            raise HTTPException(e.status, str(e))

    @api.post("/v1/onboard", response_model=OnboardResponse, responses={
        **ERRORS, 503: {"model": ErrorBody, "description": "the registry cannot be reached, or another onboarding "
                                                             "holds the replica (Retry-After); nothing was registered"}},
              **scoped("onboard"))
    async def onboard(self, body: OnboardRequest) -> dict:
        """Fit a new LLM's vector from its graded responses and register it (a key with the
        `onboard` scope)."""
        texts = [r.text.strip(BLANK) for r in body.responses if r.text is not None]
        vectors = None
        if texts:
            vectors = (await self.inline.encode(texts) if self.inline is not None
                       else await self.encoder.encode_many.remote(texts))
        try:
            return await self.onboarder.onboard.remote(body.model_dump(), vectors)
        except Exception as e:
            cause = getattr(e, "cause", e)
            if isinstance(cause, (RegistryUnreachable, OnboarderBusy)):
                raise HTTPException(503, str(cause), headers={"Retry-After": "10"})
            if isinstance(cause, RequestError):
                raise HTTPException(cause.status, str(cause))
            if isinstance(cause, ValueError):
                raise HTTPException(422, str(cause))
            raise

    @api.post("/v1/onboard/plan", response_model=PlanResponse, responses={
        **ERRORS, 404: {"model": ErrorBody, "description": "an answered question or a benchmark that the space "
                                                             "does not have"}}, **scoped("onboard"))
    async def onboard_plan(self, body: PlanRequest) -> dict:
        """The next questions of the served space to ask a new LLM, from its graded answers so far,
        and its predicted accuracy per benchmark with intervals (a key with the `onboard` scope)."""
        from ..model.adaptive import plan
        from ..routing.prices import question_costs_of
        core = self.live.current()
        if body.max_usd is not None and body.price_usd_per_mtok is None:
            raise HTTPException(409, "max_usd needs price_usd_per_mtok (the new LLM's prices) to cost questions")
        answered: dict[str, float] = {}
        for i, a in enumerate(body.answered):  # 409, as the schema cannot say that ids are unique
            if a.question_id in answered:
                raise HTTPException(409, f"answered[{i}]: question_id {a.question_id!r} is given twice")
            answered[a.question_id] = a.label

        def planned():  # in a thread: planning and a first count of the questions' tokens take a second
            costs = None if body.price_usd_per_mtok is None else \
                question_costs_of(core.space, tuple(body.price_usd_per_mtok), core.question_tokens)
            return plan(core.space, body.model, answered, body.k, strategy=body.strategy, purpose=body.purpose,
                        benchmarks=body.benchmarks,
                        target_width=body.target_width, costs=costs, max_usd=body.max_usd)
        try:
            result = await asyncio.to_thread(planned)
        except KeyError as e:
            raise HTTPException(404, str(e.args[0]))
        except (ValueError, TypeError) as e:  # no stored questions; not a JE-IRT space
            raise HTTPException(409, f"the served space cannot plan onboarding: {e}")
        return {"space": core.label, **result.to_dict()}

    @api.get("/v1/models", response_model=ModelsResponse, responses={400: ERRORS[400], 404: ERRORS[404],
                                                                       500: ERRORS[500]}, **scoped("route"))
    async def models(self, limit: int = Query(DEFAULT_PAGE, ge=1, le=MAX_PAGE, description="LLMs per page"),
                     after: str = Query(None, min_length=1, max_length=512, description="the last id of the page "
                                                                                         "before"),
                     contains: str = Query(None, min_length=1, max_length=512, description="only LLMs whose name "
                                                                                            "contains this, any case"),
                     max_params_b: float = Query(None, ge=0, description="only LLMs of known size up to this many "
                                                                         "billion parameters")) -> dict:
        """The served LLMs a page at a time, in the space's order, with their prices and sizes."""
        core = self.live.current()
        try:
            rows, more = core.catalog.page(limit, after, contains, max_params_b)
        except LookupError as e:
            raise HTTPException(404, str(e))
        except NoCandidates as e:
            raise HTTPException(400, str(e))
        data = model_cards(core, rows, self.live.version)
        return {"object": "list", "space": core.label, "alias": self.live.config.alias, "data": data,
                "has_more": more, "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None, "total": len(core.names)}

    @api.get("/v1/similar", response_model=SimilarResponse, responses={404: ERRORS[404], 422: ERRORS[422],
                                                                        500: ERRORS[500]}, **scoped("explore"))
    async def similar(self, llm: str = Query(..., min_length=1, max_length=512, description="an LLM of the space"),
                      k: int = Query(10, ge=1, le=100), by: Literal["agreement", "cosine"] = "agreement") -> dict:
        """The `k` LLMs that answer most like `llm`: their agreement on the questions both answered,
        and the cosine of their vectors (zoo/similar.py)."""
        core = self.live.current()
        try:
            table = await asyncio.to_thread(similar, core.space, llm, k, by)
        except LookupError as e:
            raise HTTPException(404, str(e))
        rows = [{k_: (None if isinstance(v, float) and not np.isfinite(v) else v) for k_, v in r.items()}
                for r in table.to_dict("records")]
        return {"space": core.label, "llm": llm, "by": by, "similar": rows}

    # ---- the web explorer ----------------------------------------------------------------------
    def _explore(self, what: str) -> tuple[str, dict]:
        """The explorer's JSON for the serving version, computed once per version."""
        from .explorer.views import llm_table, space_map
        core = self.live.current()
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

    @api.get("/v1/explore/map", response_model=MapResponse, responses={409: ERRORS[409], 500: ERRORS[500]},
             **scoped("explore"))
    async def explore_map(self) -> dict:
        """The map: question directions in 2-D (PCA), coloured by benchmark, with the LLM vectors."""
        label, data = await self._explored("map")
        return {"space": label, **data}

    @api.get("/v1/explore/llms", response_model=LLMsResponse, responses={409: ERRORS[409], 500: ERRORS[500]},
             **scoped("explore"))
    async def explore_llms(self) -> dict:
        """Each LLM's predicted accuracy per benchmark, onboarded LLMs marked, and the registry's versions."""
        label, data = await self._explored("llms")
        try:
            rows = await asyncio.to_thread(self.live.source.registry.versions, self.live.model)
            versions = [{"version": r["version"], "aliases": r["aliases"]} for r in rows]
        except Exception:  # the table does not need the registry; say so with null
            versions = None
        return {"space": label, **data, "versions": versions}

    @api.get("/", include_in_schema=False, **scoped(PUBLIC))
    async def page(self) -> HTMLResponse:
        return HTMLResponse((STATIC / "index.html").read_text(encoding="utf-8"))

    @api.get("/static/{name}", include_in_schema=False, **scoped(PUBLIC))
    async def static(self, name: str, request: Request) -> Response:
        path = static_files().get(name)
        if path is None:
            raise HTTPException(404, f"no static file {name!r}")
        media = "text/css" if name.endswith(".css") else "text/javascript"
        headers = {"Cache-Control": "max-age=3600", "Vary": "Accept-Encoding"}
        if "gzip" in request.headers.get("accept-encoding", "") and path.stat().st_size > GZIP_FROM:
            body = await asyncio.to_thread(gzipped, path)  # the gzip middleware leaves an encoded body alone
            return Response(body, media_type=media, headers=headers | {"Content-Encoding": "gzip"})
        return FileResponse(path, media_type=media, headers=headers)

    @api.get("/health", response_model=HealthResponse, response_model_exclude_none=True,
             responses={500: ERRORS[500]}, **scoped(PUBLIC))
    async def health(self, request: Request = None) -> dict:
        """ok or degraded (serving while the registry cannot be read, or while learning is on and its
        feedback cannot be read or applied); the details for admin keys."""
        health = {**self.live.health(), "learning": self.learning.stats(), "shadow": self.shadow.stats()}
        if health["learning"]["enabled"] and health["learning"]["error"]:
            health["status"] = "degraded"
        key = request.scope.get(KEY_SCOPE) if request is not None else None
        return health if request is None or (key is not None and key.allows("admin")) else {"status": health["status"]}

    @api.get("/v1/keys/me", response_model=KeyResponse, responses={500: ERRORS[500]}, **scoped(ANY_KEY))
    async def key_me(self, request: Request) -> dict:
        """The calling key: its scopes, limits, and what it has used this minute, day and month."""
        key = request.scope.get(KEY_SCOPE)
        usage = None
        if self.access.store is not None and key is not ADMIN_TOKEN_KEY:
            usage = await asyncio.to_thread(self.access.store.usage, key)
        remaining = None if usage is None else {
            "requests_minute": None if key.rpm is None else max(0, key.rpm - usage["requests_minute"]),
            "tokens_minute": None if key.tpm is None else max(0, key.tpm - usage["tokens_minute"]),
            "usd_day": None if key.usd_per_day is None else max(0.0, key.usd_per_day - usage["usd_day"]),
            "usd_month": None if key.usd_per_month is None else max(0.0, key.usd_per_month - usage["usd_month"])}
        return {**key.public(), "usage": usage, "remaining": remaining}




def build_app(args: dict):
    """Serve's application builder; `args` as settings.AppArgs (unknown keys are errors)."""
    cfg = AppArgs(**args)
    encoder, uri = cfg.encoder, cfg.tracking_uri
    if encoder == SPACE_ENCODER or encoder.startswith("models:/"):
        from ..tracking.registry import SpaceRegistry
        registry = SpaceRegistry(uri)
    if encoder == SPACE_ENCODER:  # `jeirt serve` names it before deploying; other deploys serve @champion
        encoder = registry.serving_encoder(f"models:/{cfg.model}@champion")
    if encoder.startswith("models:/"):  # the fine-tuned encoder saved with a registered space, pinned
        encoder, encoder_id = registry.encoder_of(encoder)  # to the version the alias points at now
    else:
        encoder_id = make_encoder(encoder).encoder_id  # cheap: the weights load lazily
    onboarder = Onboarder.bind(cfg.model, encoder_id, uri)
    access = {"auth": cfg.auth, "keys_url": cfg.keys_url}
    if cfg.encoder_placement == "router":
        return Router.bind(encoder, onboarder, cfg.model, encoder_id, uri, encoder_threads=cfg.encoder_threads, **access)
    return Router.bind(Encoder.bind(encoder, cfg.encoder_threads, uri), onboarder, cfg.model, encoder_id, uri, **access)
