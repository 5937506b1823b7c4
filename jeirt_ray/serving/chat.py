"""/v1/chat/completions once its request is read and its controls merged: route the
conversation, call the upstreams in the policy's order (gateway.py), answer whole or streamed,
and charge the calling key what the answer cost (its usage x prices; a stream's usage is asked of
its upstream, else counted here and marked estimated; the record survives a client that leaves)."""

import asyncio

from fastapi.responses import JSONResponse, Response, StreamingResponse

from .gateway import (AllFailed, ChatControl, Conversations, Gateway, answer_cost, answer_tokens, ask_for_usage,
                      decision_only, estimated_usage, reachable_candidates, relay, routing_headers, routing_of)
from .http import error, server_timing
from .schemas import ChatRequest


class ChatFlow:
    """One Router replica's chat: `live` (the served space and settings), `gateway` (the pooled
    upstream client), `metrics`, `access` (charges keys), and `route`, the replica's own
    encode-and-route coroutine (texts, options, timing, route=) -> a RouteResponse dict."""

    def __init__(self, live, gateway: Gateway, metrics, access, route):
        self.live, self.gateway, self.metrics, self.access, self.route = live, gateway, metrics, access, route

    async def answer(self, body: ChatRequest, ctl: ChatControl, conversations: Conversations, key,
                     timing: dict) -> Response:
        config = self.live.config
        core = self.live.current()
        reachable, candidates = reachable_candidates(core.names, core.index, config, ctl.candidates)
        sticky = conversations.get(ctl.conversation) if ctl.conversation and ctl.sticky else None
        # a conversation with a key is routed by its first user message (the same LLM every turn, on
        # any replica); without one, each turn by its last
        text = body.first_user_text if ctl.conversation and ctl.sticky else body.last_user_text
        routed = await self.route([text], {"candidates": candidates, "policy": ctl.policy, "top_k": None,
                                           "max_cost": ctl.max_cost, "min_p": ctl.min_p, "target_p": ctl.target_p,
                                           "target_share": ctl.target_share, "budget_per_1k": ctl.budget_per_1k,
                                           "ranking": max(16, 4 * config.gateway.max_tries)}, timing, route="chat")
        routing, p_of = routing_of(routed["results"][0], routed["space"], sticky)
        ranking = routing["ranking"]
        if reachable is None:  # no upstreams configured: the decision only
            return JSONResponse(decision_only(routing), headers=routing_headers(routing, ranking[0], []))
        tries = [(llm, config.upstream(llm)) for llm in ranking]
        payload, wants_usage = body.upstream_payload(), True
        if body.stream:  # every stream is asked for its usage, so that budgets see what it cost
            payload, wants_usage = ask_for_usage(payload)
        try:
            answer = await self.gateway.complete(payload, tries, config.gateway, stream=bool(body.stream))
        except AllFailed as e:
            return error(502, str(e)[:1000], headers=routing_headers(routing, None, e.tried))
        if ctl.conversation:
            conversations.put(ctl.conversation, answer.llm)
        routing |= {"answered_by": answer.llm, "tried": answer.tried}
        out_headers = routing_headers(routing, answer.llm, answer.tried, p_of.get(answer.llm))
        timing["upstream"] = answer.first_byte_s  # to its first byte, or its whole answer when not streamed
        out_headers["Server-Timing"] = server_timing(timing)

        async def spend(usage) -> float | None:
            """Count an answer's cost (its usage x prices, else its USD per call) for the metric and its key."""
            cost = answer_cost(core, answer.llm, usage)
            if cost is not None:
                self.metrics.spent(answer.llm, cost)
            await self.access.record(key, answer_tokens(usage), cost or 0.0)
            return cost

        async def streamed(meter) -> None:
            """A stream's spend: the usage its upstream reported, else counted here (estimated)."""
            usage = meter.usage
            if usage is None:
                usage = await asyncio.to_thread(estimated_usage, body.prompt_text, meter.answer_text())
                self.metrics.usage_estimated(answer.llm)
            await spend(usage)

        if answer.rest is not None:  # the stream's usage comes at its end
            return StreamingResponse(relay(answer, config.gateway.stream_max_s, streamed, strip_usage=not wants_usage),
                                     media_type=answer.media_type, headers=out_headers)
        cost = await spend(answer.body.get("usage")) if answer.body is not None else None
        if cost is not None:
            out_headers["x-jeirt-cost"] = f"{cost:.8g}"
            routing["cost"] = cost
        if answer.body is None:  # a 4xx passed through as the upstream sent it
            return Response(answer.content, status_code=answer.status, media_type=answer.media_type,
                            headers=out_headers)
        return JSONResponse({**answer.body, "routing": routing}, headers=out_headers)
