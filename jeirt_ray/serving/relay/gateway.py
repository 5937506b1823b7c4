"""The OpenAI-compatible gateway behind /v1/chat/completions, as plain parts (no Serve):

- `ChatControl`: what a request asks for (policy, max cost, allowed LLMs, minimum P(correct), a
  conversation key, stickiness), from the body (OpenAI's `extra_body`) or `x-jeirt-*` headers;
- `Conversations`: which LLM a conversation was given (per replica, LRU with a time to live);
- `Gateway`: calls the upstreams in the routing policy's order through one pooled HTTP client
  (aiohttp's: a bare relay on it adds about 1 ms less to the first byte than on httpx, in
  benchmarks/gateway_overhead.py's relay floors), falling back to the next LLM on a connection
  error, a timeout or a 5xx before the first byte, passing a 4xx through (the client's own
  fault), and streaming server-sent events as they come.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import urllib.request
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import AsyncIterator

from ...routing.router import Conflict, RequestError
from .openai_http import AnswerTooLarge, bearer, chat_url, read_capped, retryable
from ..settings import GatewayConfig, Upstream

log = logging.getLogger("jeirt.serve")
CONTROL_HEADERS = {"x-jeirt-policy": "policy", "x-jeirt-max-cost": "max_cost", "x-jeirt-candidates": "candidates",
                   "x-jeirt-min-p": "min_p", "x-jeirt-conversation": "conversation", "x-jeirt-sticky": "sticky",
                   "x-jeirt-target-p": "target_p", "x-jeirt-target-share": "target_share",
                   "x-jeirt-budget-per-1k": "budget_per_1k", "x-jeirt-max-params-b": "max_params_b"}


@dataclass
class ChatControl:
    policy: str | None = None
    max_cost: float | None = None
    candidates: list[str] | str | dict | None = None  # names or globs, one glob, or {names, max_params_b}
    min_p: float | None = None
    conversation: str | None = None
    sticky: bool = False
    target_p: float | None = None
    target_share: float | None = None
    budget_per_1k: float | None = None
    max_params_b: float | None = None

    @classmethod
    def from_request(cls, body: dict, headers: dict, header_names: list[str] = ()) -> "ChatControl":
        """Merge the body's control fields with the `x-jeirt-*` headers' (`headers`: their values,
        parsed and validated, by field name). The same field given both ways with different
        values is a Conflict (409); an unknown `x-jeirt-*` header (`header_names`: every header's
        name) a RequestError (422)."""
        unknown = sorted(h for h in header_names if h.startswith("x-jeirt-") and h not in CONTROL_HEADERS)
        if unknown:
            raise RequestError(f"unknown header(s) {unknown}; the gateway reads {', '.join(CONTROL_HEADERS)}")
        values = {"conversation": body.get("user")} if body.get("user") else {}
        for name in ("policy", "max_cost", "candidates", "min_p", "sticky", "target_p", "target_share",
                     "budget_per_1k", "max_params_b"):
            if body.get(name) is not None:
                values[name] = body[name]
        for name, value in headers.items():
            if name in values and values[name] != value:
                where = "the body's `user`" if name == "conversation" else f"the body's `{name}`"
                header = next(h for h, n in CONTROL_HEADERS.items() if n == name)
                raise Conflict(f"{name} is given twice, differently: {where} is {values[name]!r}, the header "
                                   f"{header} is {value!r}")
            values[name] = value
        # OpenAI's `user` names an end user, who has many conversations: it pins the LLM only with
        # sticky true; a conversation key of its own (x-jeirt-conversation) pins unless sticky false
        values.setdefault("sticky", "conversation" in headers)
        return cls(**values)


class Conversations:
    """conversation key -> the LLM that answered it, at most `size` keys for `ttl_s` seconds."""

    def __init__(self, size: int, ttl_s: float):
        self.size, self.ttl_s = size, ttl_s
        self.seen: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def get(self, key: str) -> str | None:
        hit = self.seen.get(key)
        if hit is None or time.monotonic() - hit[1] > self.ttl_s:
            self.seen.pop(key, None)
            return None
        self.seen.move_to_end(key)
        return hit[0]

    def put(self, key: str, llm: str) -> None:
        self.seen[key] = (llm, time.monotonic())
        self.seen.move_to_end(key)
        while len(self.seen) > self.size:
            self.seen.popitem(last=False)


class Retryable(Exception):
    """An upstream failure that the next LLM may not have: no connection, a timeout, a 5xx before
    the first byte, an answer that is not a chat completion."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass
class Answer:
    """What an upstream answered: JSON (`body`), a stream (`first` and `rest`), or a 4xx passed
    through (`status`, `content`)."""
    llm: str
    status: int = 200
    media_type: str = "application/json"
    body: dict | None = None
    content: bytes | None = None
    first: bytes | None = None
    rest: AsyncIterator[bytes] | None = None
    close: object = None
    first_byte_s: float = 0.0
    tried: list[dict] = field(default_factory=list)  # the LLMs that failed before this one


class AllFailed(Exception):
    def __init__(self, tried: list[dict]):
        self.tried = tried
        super().__init__("no upstream answered: " + "; ".join(f"{t['model']}: {t['error']}" for t in tried))


class Gateway:
    """One pooled HTTP client per process (an aiohttp session, opened on first use, in the serving
    event loop; `close` on shutdown)."""

    def __init__(self, metrics=None):
        from ..metrics import NoMetrics
        self.metrics = metrics or NoMetrics()
        self._client = None
        self.cooling: dict[str, float] = {}  # upstream URL -> until when it is tried last
        # HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and NO_PROXY, read once (80 us a request otherwise)
        self.env_proxies = urllib.request.getproxies_environment()
        self._proxy_of: dict[tuple, str | None] = {}

    @property
    def client(self):
        if self._client is None:
            import aiohttp
            # not trust_env: it would look for a ~/.netrc on every request (in a thread); proxies: proxy_for
            self._client = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=512),
                                                 timeout=aiohttp.ClientTimeout(total=None))
        return self._client

    def proxy_for(self, url) -> str | None:
        """The proxy the environment names for `url` (a yarl URL), as urllib, requests and httpx read
        it: the scheme's (else ALL_PROXY's) unless NO_PROXY covers the host."""
        origin = (url.scheme, url.host, url.port)
        if origin not in self._proxy_of:
            if len(self._proxy_of) >= 1024:  # origins come from the settings; bounded all the same
                self._proxy_of.clear()
            bypass = urllib.request.proxy_bypass_environment(url.host or "", self.env_proxies)
            self._proxy_of[origin] = None if bypass else (self.env_proxies.get(url.scheme)
                                                          or self.env_proxies.get("all"))
        return self._proxy_of[origin]

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    def close_soon(self) -> None:
        """`close` from synchronous code: on the running event loop (a replica's); without one the
        process is ending and takes the connections with it."""
        import asyncio
        if self._client is None:
            return
        try:
            asyncio.get_running_loop().create_task(self.close())
        except RuntimeError:
            pass

    def order(self, tries: list[tuple[str, Upstream]]) -> list[tuple[str, Upstream]]:
        """The policy's order, with the upstreams that failed in the last `cooldown_s` moved last."""
        now = time.monotonic()
        self.cooling = {u: t for u, t in self.cooling.items() if t > now}
        return sorted(tries, key=lambda t: t[1].url in self.cooling)  # stable: the policy's order otherwise

    async def complete(self, payload: dict, tries: list[tuple[str, Upstream]], config: GatewayConfig,
                       stream: bool) -> Answer:
        """Ask the LLMs' upstreams in order until one answers: at most `config.max_tries` asked,
        upstreams that failed lately last, and an upstream (URL) that failed in this request not
        asked again for another LLM it serves; each try within `try_deadline_s`, all of them
        within `request_deadline_s`."""
        import asyncio
        tried: list[dict] = []
        failed: set[str] = set()
        deadline = time.monotonic() + config.request_deadline_s
        for llm, upstream in self.order(tries):
            if len(tried) >= config.max_tries:
                break
            if upstream.url in failed:
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                tried.append({"model": llm, "error": f"not tried: the request's deadline "
                                                     f"({config.request_deadline_s:g} s) passed"})
                break
            try:
                async with asyncio.timeout(min(config.try_deadline_s, left)):
                    answer = await self._ask(llm, upstream, payload, config, stream)
            except (Retryable, TimeoutError) as e:
                if isinstance(e, TimeoutError):
                    e = Retryable("deadline", f"no whole answer within the deadline ({min(config.try_deadline_s, left):.3g} s)")
                log.warning("upstream of %s failed (%s): %s", llm, e.kind, e)
                self.metrics.fell_back(llm, e.kind)
                tried.append({"model": llm, "error": str(e)})
                failed.add(upstream.url)
                self.cooling[upstream.url] = time.monotonic() + config.cooldown_s
                continue
            answer.tried = tried
            self.metrics.answered(llm)
            return answer
        raise AllFailed(tried)

    async def _ask(self, llm: str, up: Upstream, payload: dict, config: GatewayConfig, stream: bool) -> Answer:
        """One try. What a failure says names neither the upstream's URL (it may carry
        credentials) nor its answer's body (it may echo them): the kind, the status, the error type."""
        import aiohttp
        from yarl import URL
        headers = {"accept": "text/event-stream" if stream else "application/json"}
        if up.api_key_env:
            key = os.environ.get(up.api_key_env)
            if not key:
                raise Retryable("no_api_key", f"environment variable {up.api_key_env} (its API key) is not set")
            headers |= bearer(key)
        url = URL(chat_url(up.url))
        if url.user is not None:  # credentials in the URL are sent (Basic) in place of a key, as httpx did
            headers.pop("authorization", None)
        connect = up.connect_timeout_s or config.connect_timeout_s
        read = up.read_timeout_s or config.read_timeout_s
        # connect: a pooled connection or a new one; sock_read: the longest silence while reading
        timeout = aiohttp.ClientTimeout(total=None, connect=connect, sock_read=read)
        start = time.perf_counter()
        try:  # the deadline of `complete` cancels this call; a TimeoutError here is aiohttp's own
            response = await self.client.post(url, json={**payload, "model": up.model or llm},
                                              headers=headers, timeout=timeout, proxy=self.proxy_for(url))
        except TimeoutError as e:
            raise Retryable("timeout", f"no answer within the timeout ({type(e).__name__})") from None
        except aiohttp.ClientError as e:
            raise Retryable("connect", f"cannot reach the upstream ({type(e).__name__})") from None
        media = response.headers.get("content-type", "application/json").split(";")[0].strip()
        try:
            if retryable(response.status):  # down, overloaded, rate-limited
                raise Retryable(f"http_{response.status}", f"answered {response.status}")
            if response.status >= 400:  # the client's own fault: the next LLM would refuse it too
                return Answer(llm, status=response.status, media_type=media,
                              content=await _read_capped(response.content.iter_any(), config.max_answer_bytes))
            if stream and media == "text/event-stream":
                rest = response.content.iter_any()
                first = await anext(rest, b"")  # the first byte, or the read timeout
                seconds = time.perf_counter() - start
                self.metrics.first_byte(llm, seconds)

                async def close(response=response) -> None:
                    response.release()  # back to the pool when read to its end, else closed
                answer = Answer(llm, media_type=media, first=first, rest=rest, close=close, first_byte_s=seconds)
                response = None  # the stream's reader closes it
                return answer
            content = await _read_capped(response.content.iter_any(), config.max_answer_bytes)
            self.metrics.first_byte(llm, time.perf_counter() - start)
        except TimeoutError as e:
            raise Retryable("timeout", f"no answer within the timeout ({type(e).__name__})") from None
        except aiohttp.ClientError as e:
            raise Retryable("connect", f"the connection broke ({type(e).__name__})") from None
        finally:
            if response is not None:
                response.release()
        try:
            body = json.loads(content)
            if not isinstance(body, dict) or not isinstance(body.get("choices"), list):
                raise ValueError("no choices")
        except ValueError as e:
            raise Retryable("bad_answer", f"did not answer a chat completion ({type(e).__name__})") from None
        return Answer(llm, body=body, first_byte_s=time.perf_counter() - start)


async def _read_capped(chunks, cap: int) -> bytes:
    try:
        return await read_capped(chunks, cap)
    except AnswerTooLarge as e:
        raise Retryable("too_large", str(e)) from None


_EVENT_END = re.compile(rb"\r?\n\r?\n")
_PENDING: set = set()  # spend records still running after their stream ended (held so they finish)


def ask_for_usage(payload: dict) -> tuple[dict, bool]:
    """(the payload with OpenAI's `stream_options.include_usage` on, whether the client asked for
    it itself): every stream is asked for its usage, so that a key's budgets see what it cost; the
    usage-only event is then passed on only to clients that asked for it."""
    options = payload.get("stream_options")
    asked = isinstance(options, dict) and options.get("include_usage") is True
    return {**payload, "stream_options": {**(options if isinstance(options, dict) else {}),
                                          "include_usage": True}}, asked


class StreamMeter:
    """A chat stream's server-sent events, read as they pass: the last `usage` the upstream reports,
    the answer's text (for an estimate where it reports none; at most `text_cap` characters), and
    the usage-only event dropped where `strip_usage` (the client did not ask for it). Events are
    passed on as the upstream wrote them, whole."""

    def __init__(self, strip_usage: bool = False, text_cap: int = 1 << 20):
        self.strip, self.cap = strip_usage, text_cap
        self.buffer, self.usage, self.text, self.chars = b"", None, [], 0

    def feed(self, chunk: bytes) -> bytes:
        """The whole events `chunk` completes, less a stripped usage event."""
        self.buffer += chunk
        out, start = [], 0
        for end in _EVENT_END.finditer(self.buffer):
            event = self.buffer[start:end.end()]
            start = end.end()
            if self._keep(event):
                out.append(event)
        self.buffer = self.buffer[start:]
        return b"".join(out)

    def flush(self) -> bytes:
        """What is left when the stream ends (an event without its blank line)."""
        rest, self.buffer = self.buffer, b""
        return rest if rest and self._keep(rest) else b""

    def _keep(self, event: bytes) -> bool:
        keep = True
        for line in event.splitlines():
            if not line.startswith(b"data:"):
                continue
            try:
                data = json.loads(line[5:])
            except ValueError:  # [DONE], or not JSON: passed on as it is
                continue
            if not isinstance(data, dict):
                continue
            usage, choices = data.get("usage"), data.get("choices")
            if isinstance(usage, dict):
                self.usage = usage
                keep = keep and not (self.strip and not choices)
            for choice in choices if isinstance(choices, list) else ():
                content = (choice.get("delta") or {}).get("content") if isinstance(choice, dict) else None
                if isinstance(content, str) and self.chars < self.cap:
                    self.text.append(content)
                    self.chars += len(content)
        return keep

    def answer_text(self) -> str:
        return "".join(self.text)


def estimated_usage(prompt: str, answer: str) -> dict:
    """OpenAI's `usage` counted here (the bundled tokenizer) for an upstream that reported none,
    marked `estimated`."""
    from ...routing.prices import token_counter
    tokens_in, tokens_out = (int(n) for n in token_counter().count([prompt, answer]))
    return {"prompt_tokens": tokens_in, "completion_tokens": tokens_out, "total_tokens": tokens_in + tokens_out,
            "estimated": True}


async def relay(answer: Answer, max_s: float, on_end=None, strip_usage: bool = False) -> AsyncIterator[bytes]:
    """The upstream's stream as it arrives, event by event; if it breaks midway (no fallback is
    possible once bytes went out) or runs past `max_s`, one last server-sent event says so, as
    OpenAI's API reports errors. `on_end(meter)`: awaited once the stream is over however it
    ends, the client's disconnect included (it runs to its end even then), with the StreamMeter
    that read it (its `usage`: the last one the upstream reported, else None)."""
    import asyncio

    import aiohttp
    meter = StreamMeter(strip_usage)
    try:
        if answer.first:
            out = meter.feed(answer.first)
            if out:
                yield out
        async with asyncio.timeout(max_s):
            async for chunk in answer.rest:
                out = meter.feed(chunk)
                if out:
                    yield out
        out = meter.flush()
        if out:
            yield out
    except (aiohttp.ClientError, TimeoutError) as e:  # aiohttp's read timeout is both: a stall, not a cut
        cut = not isinstance(e, aiohttp.ClientError)
        log.warning("the stream of %s %s", answer.llm, f"ran past {max_s:g} s" if cut else f"broke: {type(e).__name__}")
        message = (f"the answer of {answer.llm} ran past the gateway's limit of {max_s:g} s" if cut
                   else f"the upstream of {answer.llm} broke off the stream ({type(e).__name__})")
        yield f"data: {json.dumps({'error': {'message': message, 'type': 'upstream_error'}})}\n\n".encode()
    finally:
        ended = asyncio.ensure_future(_ended(answer, on_end, meter))
        _PENDING.add(ended)
        ended.add_done_callback(_PENDING.discard)
        await asyncio.shield(ended)  # a disconnect cancels this wait, not the record


async def _ended(answer: Answer, on_end, meter: StreamMeter) -> None:
    try:
        await answer.close()
    except Exception as e:  # the connection is going anyway; the spend must still be counted
        log.warning("closing the stream of %s failed: %s", answer.llm, type(e).__name__)
    if on_end is not None:
        await on_end(meter)


# ---- a chat request's routing: the LLMs it may ask, their order, and what the answer says of it ----

def reachable_candidates(core, config, ctl: ChatControl) -> tuple[set[str] | None, list[str] | None]:
    """(the LLMs that have an upstream, None where no upstream is configured; the candidates to
    route among: those the request's filter allows (names, globs, a size bound: unknown names a
    404, none matching a 400) that can be asked). Conflict (409) when none of them has an upstream."""
    chosen = core.allowed(ctl.candidates, ctl.max_params_b)
    requested = None if chosen is None or len(chosen) == len(core.names) else [core.names[i] for i in chosen]
    reachable = {n for n in core.names if config.upstream(n)} if config.upstreams else None
    candidates = requested
    if reachable is not None:
        candidates = [c for c in (requested or core.names) if c in reachable]
        if not candidates:
            filtered = f"the candidate LLMs {requested[:10]}" if requested else "the space's LLMs"
            raise Conflict(f"none of {filtered} has an upstream (user_config.upstreams names "
                           f"{sorted(reachable)[:10]})")
    return reachable, candidates


def routing_of(decision: dict, space: str, sticky: str | None, decision_id: str) -> tuple[dict, dict[str, float]]:
    """(what a chat answer says of its routing, p_correct per scored LLM): the decision's id (the
    decision log's), the policy's ranking, with a conversation's earlier LLM first where it is
    still allowed."""
    ranking = decision["ranking"]
    p_of = {s["model"]: s["p_correct"] for s in decision["scores"]}
    if sticky in p_of:
        ranking = [sticky] + [r for r in ranking if r != sticky]
    cost_of = {s["model"]: s.get("cost") for s in decision["scores"]}
    routing = {"id": decision_id, "chosen": ranking[0], "p_correct": p_of[ranking[0]], "policy": decision["policy"], "space": space,
               "ranking": ranking, "sticky": sticky is not None, "scores": decision["scores"][:5],
               "expected_cost": cost_of.get(ranking[0])}
    return routing, p_of


def routing_headers(routing: dict, answered_by: str | None, tried: list[dict], p: float | None = None) -> dict:
    """Who answered and why, for clients that never see the body (streaming ones), and what the
    answer was expected to cost (USD, where prices are configured)."""
    headers = {"x-jeirt-request-id": routing["id"], "x-jeirt-policy": routing["policy"], "x-jeirt-space": routing["space"],
               "x-jeirt-fallbacks": ",".join(t["model"] for t in tried)}
    if routing.get("expected_cost") is not None:
        headers["x-jeirt-expected-cost"] = f"{routing['expected_cost']:.8g}"
    if answered_by is not None:
        headers |= {"x-jeirt-model": answered_by,
                    "x-jeirt-p-correct": f"{routing['p_correct'] if p is None else p:.4f}"}
    return headers


def decision_only(routing: dict) -> dict:
    """The chat answer where no upstream is configured: the routing decision alone."""
    return {"id": routing["id"], "object": "chat.completion", "created": int(time.time()),
            "model": routing["chosen"], "routing": routing,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant",
                "content": f"Routed to {routing['chosen']} (p_correct {routing['p_correct']:.3f}); no "
                           f"upstream is configured, so this is the routing decision only."}}]}


def answer_cost(core, llm: str, usage) -> float | None:
    """USD of an upstream's answer: its `usage` (prompt_tokens, completion_tokens) x the router's
    prices for `llm`; else the LLM's USD per call (user_config.usd_per_call); None without either."""
    if llm not in core.index:
        return None
    i = core.index[llm]
    prices = getattr(core, "prices", None)
    if prices is not None and isinstance(usage, dict):
        tokens_in, tokens_out = _tokens(usage, "prompt_tokens"), _tokens(usage, "completion_tokens")
        return (tokens_in * prices.input_usd_per_mtok[i] + tokens_out * prices.output_usd_per_mtok[i]) / 1e6
    per_call = getattr(core, "usd_per_call", None)
    return None if per_call is None else float(per_call[i])


def key_charge(core, decision: dict, routing: dict, cost: float | None, usage) -> float:
    """What the caller's key pays for an answer that cost `cost`: where exploration chose the LLM
    sent (not a conversation's pinned one), at most what the policy's own choice would have cost
    for the same tokens. Exploring's extra is the service's, bounded by explore_usd_per_1k."""
    if cost is None or not decision["explored"] or routing["chosen"] != decision["chosen"]:
        return cost or 0.0
    own = answer_cost(core, decision["policy_choice"], usage)
    return cost if own is None else min(cost, own)


def answer_tokens(usage) -> int:
    """The tokens an answer's `usage` counts (0 without one)."""
    if not isinstance(usage, dict):
        return 0
    total = _tokens(usage, "total_tokens")
    return int(total or _tokens(usage, "prompt_tokens") + _tokens(usage, "completion_tokens"))


def _tokens(usage: dict, name: str) -> float:
    try:
        value = float(usage.get(name) or 0)
    except (TypeError, ValueError):
        return 0.0
    return value if 0 <= value < 1e12 else 0.0  # NaN, negative or absurd counts are not counted
