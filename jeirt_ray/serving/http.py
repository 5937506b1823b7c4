"""The HTTP layer around the routes: one error shape (`ErrorBody`) for every failure, request
body limits, gzip for large answers, and the access guard (access/guard.py). No routing or registry logic."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.gzip import GZipMiddleware
from starlette.exceptions import HTTPException as StarletteHTTPException

from .access.guard import Guard, secure_openapi
from .errors import error
from .schemas import MAX_BODY_BYTES, MAX_ONBOARD_BODY_BYTES, ErrorBody

log = logging.getLogger("jeirt.serve")
TOKEN_ENV = "JEIRT_API_TOKEN"
GZIP_FROM = 64 * 1024  # answers larger than this are gzipped for clients that accept it
ERRORS = {code: {"model": ErrorBody, "description": text} for code, text in {
    400: "the body cannot be read (not UTF-8 JSON)", 404: "a name in the request is not in the space",
    409: "the request needs something the service has not configured, a parameter that its policy calls for, "
         "or gives one setting twice, differently", 413: "request body too large",
    422: "invalid request", 500: "the service's own fault"}.items()}


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
        from starlette._utils import get_route_path
        limit = self.limits.get(get_route_path(scope), self.default)  # under a route prefix too
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


def server_timing(timing: dict[str, float]) -> str:
    """Where a request's time went (seconds), as the standard Server-Timing header says it."""
    return ", ".join(f"{k};dur={v * 1000:.2f}" for k, v in timing.items())


def make_api() -> FastAPI:
    """The FastAPI app with the error handlers and middleware; the routes are the Router's."""
    api = FastAPI(title="jeirt-ray", description=(
        "Route queries to the LLM most likely to answer them; onboard LLMs. Every error answer is an "
        f"`ErrorBody`. Request bodies over {MAX_BODY_BYTES} bytes ({MAX_ONBOARD_BODY_BYTES} for /v1/onboard and /v1/onboard/plan) "
        "are refused with 413."))
    api.add_exception_handler(RequestValidationError, _invalid)
    api.add_exception_handler(StarletteHTTPException, _http_error)
    api.add_exception_handler(Exception, _fault)
    api.add_middleware(BodyLimit, limits={"/v1/onboard": MAX_ONBOARD_BODY_BYTES, "/v1/onboard/plan": MAX_ONBOARD_BODY_BYTES}, default=MAX_BODY_BYTES)
    # the explorer's plotly.js (4.6 MB) and map (1.5 MB on mmlu_pro) shrink 3-4x; small answers stay as they are
    api.add_middleware(GZipMiddleware, minimum_size=GZIP_FROM, compresslevel=5)
    api.add_middleware(Guard)  # added last, so it runs first: keys are checked before a body is read
    secure_openapi(api, "required")  # a Router replica sets its own mode
    return api
