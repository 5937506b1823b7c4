"""What an operator scrapes: counters and histograms through Ray Serve's metrics API, exported
on Ray's Prometheus endpoint (each node's metrics export port) with Serve's deployment, replica
and application tags. Names as exported: ray_jeirt_<name>."""

from __future__ import annotations

LATENCY_S = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0]
BATCH = [1, 2, 4, 8, 16, 32, 64, 128]


class ServeMetrics:
    """Made inside a replica (ray.serve.metrics needs a running Ray)."""

    def __init__(self):
        from ray.serve.metrics import Counter, Histogram
        self.requests = Counter("jeirt_gateway_requests", "chat completions answered, by the LLM that answered",
                                tag_keys=("llm",))
        self.fallbacks = Counter("jeirt_gateway_fallbacks", "upstream failures that moved a request to the next "
                                 "LLM, by the LLM that failed and why", tag_keys=("llm", "kind"))
        self.upstream = Histogram("jeirt_upstream_first_byte_seconds", "time to an upstream's first byte (or its "
                                  "whole answer when not streamed)", boundaries=LATENCY_S, tag_keys=("llm",))
        self.routing = Histogram("jeirt_routing_seconds", "encoding and routing one request", boundaries=LATENCY_S,
                                 tag_keys=("route",))
        self.batches = Histogram("jeirt_encoder_batch_size", "queries per encoder forward", boundaries=BATCH)
        self.spend = Counter("jeirt_gateway_spend_usd", "USD spent on upstream answers (their usage tokens x the "
                             "price table), by the LLM that answered", tag_keys=("llm",))
        self.estimated = Counter("jeirt_gateway_usage_estimated", "streamed answers whose upstream reported no "
                                 "usage, so the gateway counted their tokens itself", tag_keys=("llm",))
        self.decisions = Counter("jeirt_decisions", "decision log rows by what became of them: logged (buffered), "
                                 "dropped (the buffer was full while writes failed)", tag_keys=("outcome",))
        self.explored_n = Counter("jeirt_explored", "queries that exploration routed to another LLM than their "
                                  "policy's own best (user_config.learning.explore), by route", tag_keys=("route",))
        self.feedback_in = Counter("jeirt_feedback", "POST /v1/feedback by source and outcome: recorded, unchanged "
                                   "(a repeat), conflict, unknown (no such decision)", tag_keys=("source", "outcome"))

    def answered(self, llm: str) -> None:
        self.requests.inc(tags={"llm": llm})

    def fell_back(self, llm: str, kind: str) -> None:
        self.fallbacks.inc(tags={"llm": llm, "kind": kind})

    def first_byte(self, llm: str, seconds: float) -> None:
        self.upstream.observe(seconds, tags={"llm": llm})

    def routed(self, route: str, seconds: float) -> None:
        self.routing.observe(seconds, tags={"route": route})

    def encoder_batch(self, size: int) -> None:
        self.batches.observe(size)

    def spent(self, llm: str, usd: float) -> None:
        self.spend.inc(usd, tags={"llm": llm})

    def usage_estimated(self, llm: str) -> None:
        self.estimated.inc(tags={"llm": llm})

    def decided(self, logged: int, dropped: int) -> None:
        if logged:
            self.decisions.inc(logged, tags={"outcome": "logged"})
        if dropped:
            self.decisions.inc(dropped, tags={"outcome": "dropped"})

    def feedback(self, source: str, outcome: str) -> None:
        self.feedback_in.inc(tags={"source": source, "outcome": outcome})

    def explored(self, route: str, n: int) -> None:
        self.explored_n.inc(n, tags={"route": route})


class NoMetrics:
    """The same interface, recording nothing (plain tests, Serve's local testing mode)."""

    def answered(self, llm: str) -> None: ...

    def fell_back(self, llm: str, kind: str) -> None: ...

    def first_byte(self, llm: str, seconds: float) -> None: ...

    def routed(self, route: str, seconds: float) -> None: ...

    def encoder_batch(self, size: int) -> None: ...

    def spent(self, llm: str, usd: float) -> None: ...

    def usage_estimated(self, llm: str) -> None: ...

    def decided(self, logged: int, dropped: int) -> None: ...

    def feedback(self, source: str, outcome: str) -> None: ...

    def explored(self, route: str, n: int) -> None: ...


def make_metrics():
    """ServeMetrics in a replica; NoMetrics where Ray's metrics cannot be made."""
    try:
        return ServeMetrics()
    except Exception:  # no Ray worker context (local testing mode)
        return NoMetrics()
