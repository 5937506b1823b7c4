"""Who may call what: every request's API key checked, and its limits applied, before its body is
read (an ASGI middleware), from one table of routes and scopes that also writes the OpenAPI
schema's security, so the schema says exactly what the service enforces.

- `required` mode: every route but /health, the docs and the explorer's page needs a key (or the
  admin bootstrap token, JEIRT_API_TOKEN) with the route's scope: 401 without a valid one, 403
  without the scope, 429 with Retry-After over a limit, 503 with Retry-After when the key store
  cannot be read.
- `open` mode (deployments/local.yaml, loopback only): route, chat and explore need no key; a
  jeirt key (jrk_...) that is given is still checked and its limits still apply (anything else,
  such as an SDK's placeholder, counts as no key); onboarding still needs a key.

Verified keys are remembered per replica for `cache_ttl_s` (a revoked key stops working within
that time) in a bounded LRU; limits are counted in the key store on every request (keys.py).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections import OrderedDict

from .http import error
from .keys import ADMIN_TOKEN_KEY, PREFIX, Admission, Key, KeyStore, digest

log = logging.getLogger("jeirt.serve")
SCOPE_OF = {"/v1/route": "route", "/v1/models": "route", "/v1/chat/completions": "chat", "/v1/onboard": "onboard",
            "/v1/onboard/plan": "onboard",
            "/v1/explore/map": "explore", "/v1/explore/llms": "explore", "/v1/keys/me": "any"}
OPEN_SCOPES = {"route", "chat", "explore"}  # need no key in open mode
KEY_SCOPE = "jeirt.key"  # where a request's verified key waits for its handler (the ASGI scope)
ACCESS_SECONDS = "jeirt.access_s"  # and how long checking it took (for Server-Timing)
ADMISSION = "jeirt.admission"  # and its count against the key's limits (a task)
OVERLAPPED = {"/v1/route", "/v1/chat/completions"}
SCHEME = "bearer"


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

    def scope_of(self, path: str) -> str | None:
        """The scope a path needs; None for public paths (and paths the app does not have)."""
        return SCOPE_OF.get(path)

    def needs_key(self, scope: str | None) -> bool:
        return scope is not None and not (self.mode == "open" and scope in OPEN_SCOPES)

    async def check(self, path: str, authorization: str | None) -> tuple[Key | None, Admission | None]:
        """(the caller's key, its admission) or Denied: `authorize`, then `admit`."""
        key = await self.authorize(path, authorization)
        return key, await self.admit(key, path)

    async def authorize(self, path: str, authorization: str | None) -> Key | None:
        """The caller's key (None: anonymous, where the mode allows), or Denied (401, 403)."""
        scope = self.scope_of(path)
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
        if scope not in (None, "any") and not key.allows(scope):
            raise Denied(403, f"this key ({key.id}) lacks the {scope!r} scope; its scopes: {', '.join(key.scopes)}")
        return key

    def counted(self, key: Key | None, path: str) -> bool:
        """Whether this request is counted against the key's limits (public paths, /v1/keys/me
        and the admin token are not)."""
        return (key is not None and key is not ADMIN_TOKEN_KEY and self.store is not None
                and self.scope_of(path) not in (None, "any"))

    async def admit(self, key: Key | None, path: str) -> Admission | None:
        """Count the request against its key, or Denied (429) over a limit."""
        if not self.counted(key, path):
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
        for path, ops in schema.get("paths", {}).items():
            scope = self.scope_of(path)
            for op in ops.values():
                if scope is None:
                    continue
                needed = self.needs_key(scope)
                op["security"] = [{SCHEME: []}] if needed else [{}, {SCHEME: []}]
                answers = {401: "missing, malformed, unknown or revoked API key",
                           429: "over one of the key's limits (Retry-After says when to retry)",
                           503: "the key store cannot be read (Retry-After)"}
                if scope != "any":
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
    """The ASGI middleware: the key checked (Access.authorize) before anything else runs, the
    body not yet read; the key handed to the handler in the ASGI scope; the request counted
    against the key's limits, and their headers added to the answer. On the routes that do work
    first (OVERLAPPED: route, chat), counting runs while the handler parses, encodes and routes,
    and the handler waits for it (`admitted`) before it calls an upstream or answers; elsewhere
    before the body is read. The Access lives in the app's state (set by the Router replica);
    without one every request passes (the app is not serving yet)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        access: Access | None = getattr(scope["app"].state, "access", None) if "app" in scope else None
        if access is None:
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        authorization = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), None)
        path = scope["path"]
        try:
            key = await access.authorize(path, None if authorization is None else authorization.decode("latin-1"))
            admission = None
            if access.counted(key, path):
                admission = asyncio.ensure_future(access.admit(key, path))
                admission.add_done_callback(_retrieved)
                if path not in OVERLAPPED:
                    await admission
        except Denied as e:
            return await error(e.status, str(e), headers=e.headers)(scope, receive, send)
        scope[KEY_SCOPE], scope[ADMISSION], scope[ACCESS_SECONDS] = key, admission, time.perf_counter() - start
        if admission is None:
            return await self.app(scope, receive, send)

        async def send_with_limits(message):
            if message["type"] == "http.response.start" and admission.done() and not admission.cancelled() \
                    and admission.exception() is None:  # a refused request's 429 carries its own
                message = {**message, "headers": list(message.get("headers", []))
                           + [(k.encode(), v.encode()) for k, v in limit_headers(key, admission.result().usage).items()]}
            await send(message)
        await self.app(scope, receive, send_with_limits)


def _retrieved(task: asyncio.Future) -> None:
    """Mark a counting task's failure as seen (the handler may never await it: a 422 first)."""
    if not task.cancelled():
        task.exception()


async def admitted(scope: dict) -> None:
    """Wait for the request's count (started by the Guard); HTTP 429 (or 503) if it was refused."""
    from fastapi import HTTPException
    admission = scope.get(ADMISSION)
    if admission is None:
        return
    try:
        await admission
    except Denied as e:
        raise HTTPException(e.status, str(e), headers=e.headers) from None
