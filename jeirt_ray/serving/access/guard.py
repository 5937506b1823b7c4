"""Who may call what: every request's API key checked, and its limits applied, before its body is
read and before any work is done for it (an ASGI middleware). Each route declares its scope
where it is defined (`scoped("route")`: the OpenAPI operation's `x-jeirt-scope`); the guard
finds a request's route as Starlette does (so under a route prefix too) and denies what it does
not know: a path that no route has is 404 before the app sees it, a route without a declared
scope stops the service from starting, and websockets are refused. The same declarations write
the OpenAPI schema's security, so the schema says exactly what the service enforces.

- `required` mode: every route but /health, the docs and the explorer's page needs a key (or the
  admin bootstrap token, JEIRT_API_TOKEN) with the route's scope: 401 without a valid one, 403
  without the scope, 429 with Retry-After over a limit, 503 with Retry-After when the key store
  cannot be read.
- `open` mode (deployments/local.yaml, loopback only): route, chat, feedback and explore need no key; a
  jeirt key (jrk_...) that is given is still checked and its limits still apply (anything else,
  such as an SDK's placeholder, counts as no key); onboarding still needs a key.

Verified keys are remembered per replica for `cache_ttl_s` (a revoked key stops working within
that time) in a bounded LRU; limits are counted in the key store on every request (keys.py).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
import time
from collections import OrderedDict
from dataclasses import dataclass

from ..errors import error
from .keys import ADMIN_TOKEN_KEY, PREFIX, Admission, Key, KeyStore, digest

log = logging.getLogger("jeirt.serve")
SCOPE_FIELD = "x-jeirt-scope"  # where a route declares its scope (FastAPI's openapi_extra)
PUBLIC, ANY_KEY = "public", "any"  # no key needed; any valid key (e.g. /v1/keys/me)
OPEN_SCOPES = {"route", "chat", "feedback", "explore"}  # need no key in open mode
KEY_SCOPE = "jeirt.key"  # where a request's verified key waits for its handler (the ASGI scope)
ACCESS_SECONDS = "jeirt.access_s"  # and how long checking it took (for Server-Timing)
SCHEME = "bearer"


def scoped(scope: str) -> dict:
    """A route's declaration of the scope it needs: `@api.post(path, **scoped("route"))`."""
    return {"openapi_extra": {SCOPE_FIELD: scope}}


class Unscoped(RuntimeError):
    """A route that declares no scope: the service refuses to start rather than guess."""


@dataclass(frozen=True)
class ScopedRoute:
    path: str  # the full path template (included routers' prefixes added)
    pattern: re.Pattern
    methods: frozenset[str] | None
    scope: str


def route_scopes(app) -> list[ScopedRoute]:
    """Every route of `app` (included routers opened, their prefixes added), in routing order,
    with the scope it declares (`scoped`); FastAPI's own schema and docs pages are public.
    Unscoped for a route without one, a mount among them (fail closed: nothing is guessed)."""
    from starlette.routing import compile_path
    builtin = {getattr(app, a, None) for a in ("openapi_url", "docs_url", "redoc_url",
                                                 "swagger_ui_oauth2_redirect_url")} - {None}

    def leaves(routes, prefix: str):
        for route in routes:
            inner = getattr(route, "original_router", None)  # FastAPI's include_router (Serve's ingress uses it)
            if inner is not None:
                yield from leaves(inner.routes, prefix + (getattr(getattr(route, "include_context", None), "prefix",
                                                                  "") or ""))
            else:
                yield prefix, route

    table = []
    for prefix, route in leaves(app.router.routes, ""):
        path = prefix + getattr(route, "path", "")
        scope = (getattr(route, "openapi_extra", None) or {}).get(SCOPE_FIELD)
        if scope is None and path in builtin and not hasattr(route, "routes"):
            scope = PUBLIC
        if scope is None or hasattr(route, "routes"):
            raise Unscoped(f"route {path or route!r} declares no scope: add **scoped('<scope>') to its decorator "
                           f"(access/guard.py)")
        methods = getattr(route, "methods", None)
        table.append(ScopedRoute(path, compile_path(path)[0], frozenset(methods) if methods else None, scope))
    return table


def scope_of_request(table: list[ScopedRoute], request: dict) -> str | None:
    """The scope of the route that will answer this ASGI request, its path read as Starlette's
    router reads it (less the root path a route prefix sets); a route that lacks the method still
    names its scope (the app answers 405). None where no route has the path."""
    from starlette._utils import get_route_path
    path, method = get_route_path(request), request.get("method")
    partial = None
    for route in table:
        if route.pattern.match(path):
            if route.methods is None or method in route.methods:
                return route.scope
            partial = partial or route.scope
    return partial


class Denied(Exception):
    def __init__(self, status: int, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.headers = status, headers or {}


def limit_headers(key: Key, usage: dict) -> dict[str, str]:
    """OpenAI's x-ratelimit-* names for the request and token rates, x-jeirt-key-* for spend;
    only for the limits the key has. `usage` as counted with this request."""
    h = {}
    if key.rpm is not None:
        h |= {"x-ratelimit-limit-requests": str(key.rpm),
              "x-ratelimit-remaining-requests": str(max(0, key.rpm - usage.get("requests_minute", 0)))}
    if key.tpm is not None:
        h |= {"x-ratelimit-limit-tokens": str(key.tpm),
              "x-ratelimit-remaining-tokens": str(max(0, key.tpm - usage.get("tokens_minute", 0)))}
    for limit, spent in (("usd_per_day", "usd_day"), ("usd_per_month", "usd_month")):
        cap = getattr(key, limit)
        if cap is not None:
            period = limit.split("_")[-1]
            h |= {f"x-jeirt-key-spent-usd-{period}": f"{usage.get(spent, 0.0):.6g}",
                  f"x-jeirt-key-remaining-usd-{period}": f"{max(0.0, cap - usage.get(spent, 0.0)):.6g}"}
    return h


class Access:
    def __init__(self, mode: str, store: KeyStore | None, token: str | None, cache_ttl_s: float = 5.0,
                 cache_max: int = 10_000):
        self.mode, self.store = mode, store
        self.token = token.encode() if token else None
        self.cache_ttl_s, self.cache_max = cache_ttl_s, cache_max
        self.known: OrderedDict[str, tuple[Key | None, float]] = OrderedDict()

    def needs_key(self, scope: str) -> bool:
        return scope != PUBLIC and not (self.mode == "open" and scope in OPEN_SCOPES)

    async def check(self, scope: str, authorization: str | None) -> tuple[Key | None, Admission | None]:
        """(the caller's key, its admission) or Denied: `authorize`, then `admit`, for a route
        that needs `scope`."""
        key = await self.authorize(scope, authorization)
        return key, await self.admit(key, scope)

    async def authorize(self, scope: str, authorization: str | None) -> Key | None:
        """The caller's key (None: anonymous, where the mode allows), or Denied (401, 403)."""
        secret = _bearer(authorization)
        if secret is None:
            if authorization is not None or self.needs_key(scope):
                raise Denied(401, "missing or malformed API key (Authorization: Bearer <key>; `jeirt keys create` "
                                  "makes one)", {"WWW-Authenticate": "Bearer"})
            return None
        key = await self.identify(secret)
        if key is None and self.mode == "open" and not secret.startswith(PREFIX) and not self.needs_key(scope):
            return None  # open mode: a client's placeholder (an SDK always sends some key) is no key
        if key is None:
            raise Denied(401, "unknown or revoked API key", {"WWW-Authenticate": "Bearer"})
        if scope not in (PUBLIC, ANY_KEY) and not key.allows(scope):
            raise Denied(403, f"this key ({key.id}) lacks the {scope!r} scope; its scopes: {', '.join(key.scopes)}")
        return key

    def counted(self, key: Key | None, scope: str) -> bool:
        """Whether this request is counted against the key's limits (public routes, /v1/keys/me
        and the admin token are not)."""
        return (key is not None and key is not ADMIN_TOKEN_KEY and self.store is not None
                and scope not in (PUBLIC, ANY_KEY))

    async def admit(self, key: Key | None, scope: str) -> Admission | None:
        """Count the request against its key, or Denied (429) over a limit."""
        if not self.counted(key, scope):
            return None
        admission = await self._in_store(self.store.admit, key)
        if not admission.allowed:
            what = {"rpm": "requests per minute", "tpm": "tokens per minute", "usd_per_day": "USD per day",
                    "usd_per_month": "USD per month"}[admission.limit]
            raise Denied(429, f"key {key.id} is over its limit of {getattr(key, admission.limit):g} {what}; retry "
                              f"in {admission.retry_after_s} s",
                         {"Retry-After": str(admission.retry_after_s), **limit_headers(key, admission.usage)})
        return admission

    async def identify(self, secret: str) -> Key | None:
        if self.token is not None and hmac.compare_digest(secret.encode(), self.token):
            return ADMIN_TOKEN_KEY
        if self.store is None:
            return None
        h = digest(secret)
        hit = self.known.get(h)
        if hit is not None and hit[1] > time.monotonic():
            self.known.move_to_end(h)
            return hit[0]
        key = await self._in_store(self.store.verify, secret)
        self.known[h] = (key, time.monotonic() + self.cache_ttl_s)
        self.known.move_to_end(h)
        while len(self.known) > self.cache_max:
            self.known.popitem(last=False)
        return key

    async def record(self, key: Key | None, tokens: int, usd: float) -> None:
        """Count an answer against its key; a store that cannot be written is logged, the answer kept."""
        if key is None or key is ADMIN_TOKEN_KEY or self.store is None or not (tokens or usd):
            return
        try:
            await asyncio.to_thread(self.store.record, key.id, tokens, usd)
        except Exception as e:
            log.warning("could not count %d tokens / %.6g USD against key %s: %s", tokens, usd, key.id,
                        type(e).__name__)

    async def _in_store(self, call, *args):
        try:
            return await asyncio.to_thread(call, *args)
        except Exception as e:
            log.warning("the key store cannot be read (%s)", type(e).__name__)
            raise Denied(503, "the key store cannot be read; retry shortly", {"Retry-After": "5"}) from None

    # ---- the schema ------------------------------------------------------------------------------
    def secure_openapi(self, schema: dict) -> dict:
        """`schema` with the bearer scheme, each operation's security (optional where open) and the
        answers that access control adds (401, 403, 429, 503)."""
        schema.setdefault("components", {}).setdefault("securitySchemes", {})[SCHEME] = {
            "type": "http", "scheme": "bearer",
            "description": "an API key (`jeirt keys create`), or the service's JEIRT_API_TOKEN (admin)"}
        ref = {"$ref": "#/components/schemas/ErrorBody"}
        for ops in schema.get("paths", {}).values():
            for op in ops.values():
                scope = op.get(SCOPE_FIELD)
                if scope in (None, PUBLIC):
                    continue
                needed = self.needs_key(scope)
                op["security"] = [{SCHEME: []}] if needed else [{}, {SCHEME: []}]
                answers = {401: "missing, malformed, unknown or revoked API key",
                           429: "over one of the key's limits (Retry-After says when to retry)",
                           503: "the key store cannot be read (Retry-After)"}
                if scope != ANY_KEY:
                    answers[403] = f"the key lacks the {scope!r} scope"
                for code, text in answers.items():
                    op.setdefault("responses", {}).setdefault(str(code), {
                        "description": text, "content": {"application/json": {"schema": ref}}})
        return schema


def secure_openapi(app, mode: str) -> None:
    """Make `app.openapi()` the app's schema with the security that `mode` enforces (built once)."""
    from fastapi import FastAPI
    access = Access(mode, None, None)

    def openapi() -> dict:
        if app.openapi_schema is None:
            app.openapi_schema = access.secure_openapi(FastAPI.openapi(app))
        return app.openapi_schema
    app.openapi_schema = None
    app.openapi = openapi


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    value = value.strip()
    return value if scheme.lower() == "bearer" and value else None


class Guard:
    """The ASGI middleware: the request's route found (as Starlette's router will find it, route
    prefix included), its key checked (Access.authorize) and counted against the key's limits
    (Access.admit) before its body is read or any work is done; the key handed to the handler in
    the ASGI scope, and the limits' headers added to the answer. A path no route has is 404, a
    websocket is refused. The Access lives in the app's state (set by the Router replica); without
    one only public routes answer (the app is not serving yet)."""

    def __init__(self, app):
        self.app = app
        self.table: list | None = None

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self.app(scope, receive, send)
        if scope["type"] != "http":  # websockets: no route of the service takes one
            return await send({"type": "websocket.close", "code": 1008})
        app = scope["app"]
        if self.table is None:
            self.table = route_scopes(app)
        start = time.perf_counter()
        needs = scope_of_request(self.table, scope)
        if needs is None:
            return await error(404, f"no route {scope['path'][:200]!r} (see /docs)")(scope, receive, send)
        access: Access | None = getattr(app.state, "access", None)
        if access is None:
            if needs == PUBLIC:
                return await self.app(scope, receive, send)
            return await error(503, "the service is starting; retry shortly", headers={"Retry-After": "5"})(
                scope, receive, send)
        authorization = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), None)
        try:
            key, admission = await access.check(needs, None if authorization is None else
                                                authorization.decode("latin-1"))
        except Denied as e:
            return await error(e.status, str(e), headers=e.headers)(scope, receive, send)
        scope[KEY_SCOPE], scope[ACCESS_SECONDS] = key, time.perf_counter() - start
        if admission is None:
            return await self.app(scope, receive, send)
        extra = [(k.encode(), v.encode()) for k, v in limit_headers(key, admission.usage).items()]

        async def send_with_limits(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": list(message.get("headers", [])) + extra}
            await send(message)
        await self.app(scope, receive, send_with_limits)
