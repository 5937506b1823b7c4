"""/v1/chat/completions once its request is read and its controls merged: route the
conversation, call the upstreams in the policy's order (relay/gateway.py), answer whole or streamed,
and charge the calling key what the answer cost (its usage x prices; a stream's usage is asked of
its upstream, an answer's taken from its `usage`, else counted here and marked estimated; the
charge and the record survive a client that leaves, before the answer or after it).
Its decision is logged once the answer is complete (loop/recording.py)."""

import asyncio
import time

from fastapi.responses import JSONResponse, Response, StreamingResponse

from .relay.gateway import (AllFailed, ChatControl, Conversations, Gateway, answer_cost, answer_tokens, ask_for_usage,
                      decision_only, estimated_usage, key_charge, reachable_candidates, relay, routing_headers,
                      routing_of)
from .errors import error
from .http import server_timing
from .schemas import ChatRequest


class ChatFlow:
    """One Router replica's chat: `live` (the served space and settings), `gateway` (the pooled
    upstream client), `metrics`, `access` (charges keys), `route`, the replica's own
    encode-and-route coroutine (texts, options, timing, route=, key=) -> (a RouteResponse dict,
    its decision log rows), and `recorder` (recording.Recorder, which logs them)."""

    def __init__(self, live, gateway: Gateway, metrics, access, route, recorder):
        self.live, self.gateway, self.metrics, self.access, self.route = live, gateway, metrics, access, route
        self.recorder = recorder

    async def answer(self, body: ChatRequest, ctl: ChatControl, conversations: Conversations, key,
                     timing: dict) -> Response:
        started = time.perf_counter()
        config = self.live.config
        core = self.live.current()
        reachable, candidates = reachable_candidates(core, config, ctl)
        # a conversation key is the caller's own: another key's "u1" is another conversation
        conversation = f"{getattr(key, 'id', '-')}/{ctl.conversation}" if ctl.conversation else None
        sticky = conversations.get(conversation) if conversation and ctl.sticky else None
        # a conversation with a key is routed by its first user message (the same LLM every turn, on
        # any replica); without one, each turn by its last
        text = body.first_user_text if ctl.conversation and ctl.sticky else body.last_user_text
        routed, rows = await self.route([text], {"candidates": candidates, "policy": ctl.policy, "top_k": 5,
                                           "ranked_scores": True, "also": [sticky] if sticky else [],
                                           "max_cost": ctl.max_cost, "min_p": ctl.min_p, "target_p": ctl.target_p,
                                           "target_share": ctl.target_share, "budget_per_1k": ctl.budget_per_1k,
                                           "ranking": max(16, 4 * config.gateway.max_tries)}, timing, route="chat",
                                         key=key)
        decision = routed["results"][0]
        routing, p_of = routing_of(decision, routed["space"], sticky, routed["id"])
        ranking = routing["ranking"]
        recorder = self.recorder()  # the one of this moment: settings may change while it streams

        def record(status: int, answered_by=None, tried=(), usage=None, cost=None, answer=None) -> None:
            usage = usage if isinstance(usage, dict) else {}
            # a conversation's earlier LLM is sent whatever the policy drew: logged with probability 1
            pinned = {"propensity": 1.0} if sticky is not None and routing["chosen"] == sticky else {}
            recorder.write(rows, chosen=routing["chosen"], status=status, answered_by=answered_by, **pinned,
                           tried=[t["model"] for t in tried], cost_usd=cost, answer=answer,
                           prompt_tokens=_count(usage.get("prompt_tokens")),
                           completion_tokens=_count(usage.get("completion_tokens")),
                           latency_s=time.perf_counter() - started)

        if reachable is None:  # no upstreams configured: the decision only
            record(200)
            return JSONResponse(decision_only(routing), headers=routing_headers(routing, ranking[0], []))
        tries = [(llm, config.upstream(llm)) for llm in ranking]
        payload, wants_usage = body.upstream_payload(), True
        if body.stream:  # every stream is asked for its usage, so that budgets see what it cost
            payload, wants_usage = ask_for_usage(payload)

        async def finish() -> Response:
            nonlocal routing
            try:
                answer = await self.gateway.complete(payload, tries, config.gateway, stream=bool(body.stream))
            except AllFailed as e:
                record(502, tried=e.tried)
                return error(502, str(e)[:1000], headers=routing_headers(routing, None, e.tried))
            if conversation:
                conversations.put(conversation, answer.llm)
            routing |= {"answered_by": answer.llm, "tried": answer.tried}
            out_headers = routing_headers(routing, answer.llm, answer.tried, p_of.get(answer.llm))
            timing["upstream"] = answer.first_byte_s  # to its first byte, or its whole answer when not streamed
            out_headers["Server-Timing"] = server_timing(timing)

            async def spend(usage, text=None) -> float | None:
                """Count an answer's cost (its usage x prices, else its USD per call) for the metric and its
                key, and log its decision."""
                cost = answer_cost(core, answer.llm, usage)
                if cost is not None:
                    self.metrics.spent(answer.llm, cost)
                record(answer.status, answer.llm, answer.tried, usage, cost, text)
                await self.access.record(key, answer_tokens(usage), key_charge(core, decision, routing, cost, usage))
                return cost

            async def streamed(meter) -> None:
                """A stream's spend: the usage its upstream reported, else counted here (estimated)."""
                usage = meter.usage
                if usage is None:
                    usage = await asyncio.to_thread(estimated_usage, body.prompt_text, meter.answer_text())
                    self.metrics.usage_estimated(answer.llm)
                await spend(usage, meter.answer_text())

            if answer.rest is not None:  # the stream's usage comes at its end
                return StreamingResponse(relay(answer, config.gateway.stream_max_s, streamed,
                                               strip_usage=not wants_usage),
                                         media_type=answer.media_type, headers=out_headers)
            if answer.body is None:  # a 4xx passed through: nothing to charge, the decision to log
                record(answer.status, answer.llm, answer.tried)
            cost = None
            if answer.body is not None:
                usage = answer.body.get("usage")
                if not _reports_tokens(usage):  # an upstream that says nothing of its tokens: counted here
                    usage = await asyncio.to_thread(estimated_usage, body.prompt_text, _content(answer.body) or "")
                    self.metrics.usage_estimated(answer.llm)
                cost = await spend(usage, _content(answer.body))
            if cost is not None:
                out_headers["x-jeirt-cost"] = f"{cost:.8g}"
                routing["cost"] = cost
            if answer.body is None:  # a 4xx passed through as the upstream sent it
                return Response(answer.content, status_code=answer.status, media_type=answer.media_type,
                                headers=out_headers)
            routing["upstream_id"] = answer.body.get("id")
            return JSONResponse({**answer.body, "id": routing["id"], "routing": routing}, headers=out_headers)

        # The upstream's answer is charged and logged even where the client leaves before it comes:
        # the work runs in a task of its own, which a cancelled request does not cancel; a stream
        # left before its first chunk is then read to its end, so that it is charged as any stream.
        task = asyncio.ensure_future(finish())
        _UNFINISHED.add(task)
        task.add_done_callback(_UNFINISHED.discard)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(_drain_if_streamed)
            raise


_UNFINISHED: set[asyncio.Task] = set()  # answers still being read for requests whose client left


def _drain_if_streamed(task: asyncio.Task) -> None:
    """A stream nobody will read (its client left before the first chunk): read it to its end in
    the background, so its relay charges and logs it."""
    if task.cancelled() or task.exception() is not None or not isinstance(task.result(), StreamingResponse):
        return

    async def drain(iterator) -> None:
        async for _ in iterator:
            pass
    follow = asyncio.ensure_future(drain(task.result().body_iterator))
    _UNFINISHED.add(follow)
    follow.add_done_callback(_UNFINISHED.discard)


def _reports_tokens(usage) -> bool:
    return isinstance(usage, dict) and any(_count(usage.get(k)) is not None
                                           for k in ("prompt_tokens", "completion_tokens"))


def _count(value) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e12 else None


def _content(body: dict) -> str | None:
    try:
        content = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None
    return content if isinstance(content, str) else None
