"""The HTTP layer around the routes: one error shape (`ErrorBody`) for every failure, request
body limits, gzip for large answers, and bearer-token checks. No routing or registry logic."""

from __future__ import annotations

import hmac
import logging

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException

from .schemas import MAX_BODY_BYTES, MAX_ONBOARD_BODY_BYTES, ErrorBody

log = logging.getLogger("jeirt.serve")
TOKEN_ENV = "JEIRT_API_TOKEN"
ERRORS = {code: {"model": ErrorBody, "description": text} for code, text in {
    400: "the body cannot be read (not UTF-8 JSON)", 404: "a name in the request is not in the space",
    409: "the request needs something the service has not configured", 413: "request body too large",
    422: "invalid request", 500: "the service's own fault"}.items()}


def error(status: int, message: str, detail: list | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content=ErrorBody(error=message, detail=detail).model_dump(),
                        headers=headers)


async def _invalid(request: Request, exc: RequestValidationError):
    errors = [{"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "invalid")), "type": str(e.get("type", "invalid"))}
              for e in exc.errors()]
    first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
    return error(422, f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}", errors)


async def _http_error(request: Request, exc: StarletteHTTPException):
    return error(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))


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


def make_api() -> FastAPI:
    """The FastAPI app with the error handlers and middleware; the routes are the Router's."""
    api = FastAPI(title="jeirt-ray", description=(
        "Route queries to the LLM most likely to answer them; onboard LLMs. Every error answer is an "
        f"`ErrorBody`. Request bodies over {MAX_BODY_BYTES} bytes ({MAX_ONBOARD_BODY_BYTES} for /v1/onboard) "
        "are refused with 413."))
    api.add_exception_handler(RequestValidationError, _invalid)
    api.add_exception_handler(StarletteHTTPException, _http_error)
    api.add_exception_handler(Exception, _fault)
    api.add_middleware(BodyLimit, limits={"/v1/onboard": MAX_ONBOARD_BODY_BYTES}, default=MAX_BODY_BYTES)
    # the explorer's plotly.js (4.6 MB) and map (1.5 MB on mmlu_pro) shrink 3-4x; small answers stay as they are
    api.add_middleware(GZipMiddleware, minimum_size=64 * 1024, compresslevel=5)
    return api


bearer = HTTPBearer(auto_error=False, description=f"the token in the service's {TOKEN_ENV}")


def authorize(token: bytes | None, credentials: HTTPAuthorizationCredentials | None, token_env: str,
              feature: str) -> None:
    """401 for a request without a bearer token, whatever the configuration (what the declared
    security scheme says); 403 when the feature is switched off (no token configured); 401 for a
    wrong token, compared in constant time, so the answer leaks no prefix."""
    if credentials is None:
        raise HTTPException(401, "missing bearer token (Authorization: Bearer <token>)",
                            headers={"WWW-Authenticate": "Bearer"})
    if token is None:
        raise HTTPException(403, f"{feature} is switched off: set {token_env} on the service to enable it")
    if not hmac.compare_digest(credentials.credentials.encode(), token):
        raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})
