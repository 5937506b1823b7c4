"""What the gateway itself adds: time to the first streamed byte through /v1/chat/completions,
at 1 and 8 concurrent clients, against calling the same upstream directly in the same run.

The gateway runs as deployments/local.yaml with `auth: required`: every request carries an API
key with limits (rpm and USD per day), checked and counted in the key store (SQLite), and the
instant encoder (hashing), so what is measured is the proxy, access control, routing and the
relay, not a transformer. The upstream (tests/upstream.py) streams with no delay. A third
configuration is Ray Serve's proxy hop alone: an empty Serve deployment on the same proxy that
answers the same stream at once; its difference to direct is the floor under any Serve ingress.
Each gateway answer's Server-Timing header says where its time went (access, encode, route,
upstream first byte): their medians are reported.

    python benchmarks/gateway_overhead.py --out results/gateway_overhead.json [--data DIR] [--requests 300]
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time

import numpy as np

from _common import dataset_path, parser, write_json
from _serving import ROOT, registered_space, service, test_texts

sys.path.insert(0, str(ROOT))
from tests.upstream import Upstreams  # noqa: E402 (the test upstream, launched as a process)


async def first_bytes(url: str, texts: list[str], clients: int, requests: int, headers: dict | None = None,
                      timings: list | None = None) -> dict:
    """`requests` streamed chat completions from `clients` concurrent clients (after 20 to warm
    up); the time to the first body byte of each, p50/p99 in ms."""
    import httpx
    seconds: list[float] = []
    failed = [0]

    async def one(client, i, keep):
        body = {"model": "auto", "stream": True, "messages": [{"role": "user", "content": texts[i % len(texts)]}]}
        start = time.perf_counter()
        async with client.stream("POST", f"{url}/chat/completions", json=body, headers=headers) as r:
            if r.status_code != 200:
                failed[0] += keep
                await r.aread()
                return
            chunks = r.aiter_raw()
            await anext(chunks)
            if keep:
                seconds.append(time.perf_counter() - start)
                if timings is not None and "server-timing" in r.headers:
                    timings.append(r.headers["server-timing"])
            async for _ in chunks:  # the rest of the stream, as a client reads it
                pass

    async def worker(client, k):
        for j in range(k, 20 + requests, clients):
            await one(client, j, keep=j >= 20)

    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=clients)) as client:
        await worker(client, 0) if clients == 1 else await asyncio.gather(*(worker(client, k) for k in range(clients)))
    ms = np.asarray(seconds) * 1000
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)), "n": len(seconds),
            "failed": failed[0]}


def timing_medians(headers: list[str]) -> dict:
    parts: dict[str, list[float]] = {}
    for h in headers:
        for name, dur in re.findall(r"(\w+);dur=([\d.]+)", h):
            parts.setdefault(name, []).append(float(dur))
    return {f"{k}_ms": float(np.median(v)) for k, v in parts.items()}


def empty_deployment():
    """A Serve deployment that answers the chat stream at once: Serve's proxy hop and nothing else."""
    from fastapi import FastAPI
    from fastapi.responses import StreamingResponse
    from ray import serve
    app = FastAPI()
    chunk = 'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\ndata: [DONE]\n\n'

    @serve.deployment(name="Empty", max_ongoing_requests=256, ray_actor_options={"num_cpus": 0.5})
    @serve.ingress(app)
    class Empty:
        @app.post("/chat/completions")
        async def chat(self):
            return StreamingResponse(iter([chunk]), media_type="text/event-stream")
    return Empty.bind()


def main():
    ap = parser(__doc__)
    ap.add_argument("--requests", type=int, default=300, help="measured requests per configuration and client count")
    args = ap.parse_args()
    args.encoder = "hashing"  # the instant encoder: the gateway's own cost, not a transformer's
    data_dir = dataset_path(args.data, "mmlu_pro")
    data, prep, texts = test_texts(data_dir, args.encoder, args.split_seed)
    ups = Upstreams()
    rows = {}
    try:
        upstream = ups.start("up0")
        with registered_space(prep) as home:
            import os

            from jeirt_ray.serving.keys import KeyStore
            os.environ["JEIRT_KEYS_URL"] = f"sqlite:///{home}/keys.db"
            _, key = KeyStore().create("bench", "chat", rpm=10**6, usd_per_day=10**6)
            headers = {"authorization": f"Bearer {key}"}
            names = [str(n) for n in data.models]

            def edit(raw):
                app = raw["applications"][0]
                app["args"]["auth"] = "required"
                router = next(d for d in app["deployments"] if d["name"] == "Router")
                router["user_config"]["upstreams"] = {n: upstream for n in names}
                router["max_ongoing_requests"] = 256

            with service(home, args.encoder, threads=1, edit=edit) as url:
                from ray import serve
                serve.run(empty_deployment(), name="empty", route_prefix="/empty")
                for clients in (1, 8):
                    timings: list[str] = []
                    direct = asyncio.run(first_bytes(upstream, texts, clients, args.requests))
                    hop = asyncio.run(first_bytes(f"{url}/empty", texts, clients, args.requests))
                    gateway = asyncio.run(first_bytes(f"{url}/v1", texts, clients, args.requests, headers, timings))
                    rows[str(clients)] = {
                        "direct": direct, "serve_proxy_hop_only": hop, "gateway": gateway,
                        "gateway_added_p50_ms": gateway["p50_ms"] - direct["p50_ms"],
                        "gateway_over_direct_p50": gateway["p50_ms"] / direct["p50_ms"],
                        "proxy_hop_added_p50_ms": hop["p50_ms"] - direct["p50_ms"],
                        "gateway_server_timing_medians": timing_medians(timings)}
                    print(json.dumps({clients: rows[str(clients)]}, indent=1))
    finally:
        ups.stop()
    write_json(args.out, {"data": str(data_dir), "llms": len(names), "encoder": args.encoder, "auth": "required",
                          "key_store": "sqlite", "requests": args.requests, "clients": rows,
                          "targets": {"added_p50_ms_at_1_client": 5.0, "gateway_over_direct_p50_at_8_clients": 2.0}})


if __name__ == "__main__":
    main()
