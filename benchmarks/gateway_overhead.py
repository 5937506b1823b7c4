"""What the gateway itself adds: time to the first streamed byte through /v1/chat/completions,
at 1 and 8 concurrent clients, against calling the same upstream directly in the same run.

The gateway runs as deployments/local.yaml with `auth: required`: every request carries an API
key with limits (rpm and USD per day), checked and counted in the key store (SQLite), and the
instant encoder (hashing), so what is measured is the proxy, access control, routing and the
relay, not a transformer. The upstream (tests/upstream.py) streams with no delay. A third
configuration is Ray Serve's proxy hop alone: an empty Serve deployment on the same proxy that
answers the same stream at once; its difference to direct is the floor under any Serve ingress.
The relay floors (`relay_floors_added_p50_ms`, one client): bare relays of the upstream's
stream on the same ingress, with no key, encoder or route: FastAPI with httpx, FastAPI with
aiohttp, and a plain ASGI handler with aiohttp; what each adds is the least a gateway on that
stack can add.
Each gateway answer's Server-Timing header says where its time went (access, encode, route,
upstream first byte): their medians are reported.

The decision log (`decision_log`): the same gateway with user_config.decisions.enabled true and
false, switched in place (Serve's reconfigure, no restart) in alternating blocks at 1 and 32
clients, so that drift falls on both alike; p50 and p99 of each, the p50 the log adds, and
whether it kept up: every logged request's row written, none dropped.

Exploration (`exploration`): learning on, with user_config.learning.explore 0.5 and 0 in
alternating blocks at 1 client; the p50 it adds, and the median of the route step it adds.

    python benchmarks/gateway_overhead.py --out results/gateway_overhead.json [--data DIR] [--requests 300]
        [--ingress proxy|haproxy] [--only-hop]

`--ingress haproxy` measures the same behind HAProxy (Ray's direct ingress, `jeirt serve --ingress
haproxy`), where the empty deployment's hop is HAProxy's and Serve's replica wrapper's; `--only-hop`
stops after the first section (direct, the empty deployment and the gateway, at 1 and 8 clients).
"""

# no `from __future__ import annotations`: Serve's class-based FastAPI views (the relays) need
# their handlers' types as real objects, not strings
import asyncio
import json
import re
import sys
import time

import numpy as np

from _common import dataset_path, parser, write_json
from _serving import ROOT, keyed_gateway, registered_space, service, test_texts
from jeirt_ray.serving.deployment.ingress import INGRESSES

sys.path.insert(0, str(ROOT))
from tests.upstream import Upstreams  # noqa: E402 (the test upstream, launched as a process)


async def first_bytes(url: str, texts: list[str], clients: int, requests: int, headers: dict | None = None,
                      timings: list | None = None, keep_all: bool = False, warmup: int = 20) -> dict:
    """`requests` streamed chat completions from `clients` concurrent clients (after `warmup` to
    warm up); the time to the first body byte of each, p50/p99 in ms, and the measured requests
    per second (`keep_all`: and every time, s)."""
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
        for j in range(k, warmup + requests, clients):
            if j == warmup:
                began.append(time.perf_counter())
            await one(client, j, keep=j >= warmup)

    began: list[float] = []  # when the first measured request started
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=clients)) as client:
        await worker(client, 0) if clients == 1 else await asyncio.gather(*(worker(client, k) for k in range(clients)))
    if not seconds:
        raise SystemExit(f"every request to {url}/chat/completions failed ({failed[0]} of {requests})")
    ms = np.asarray(seconds) * 1000
    out = {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)), "n": len(seconds),
           "failed": failed[0], "rps": len(seconds) / (time.perf_counter() - began[0])}
    return {**out, "seconds": seconds} if keep_all else out


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


def relay_deployments(upstream: str) -> dict:
    """{name: a Serve application that relays the chat stream to `upstream` and back}: the least a
    gateway on each stack adds (no key, encoder or route)."""
    import aiohttp
    import httpx
    from fastapi import FastAPI, Request
    from fastapi.responses import StreamingResponse
    from ray import serve
    from starlette.applications import Starlette
    from starlette.routing import Mount
    url = f"{upstream}/chat/completions"
    options = {"max_ongoing_requests": 256, "ray_actor_options": {"num_cpus": 0}}
    on_httpx, on_aiohttp = FastAPI(), FastAPI()

    @serve.deployment(name="FastAPIHttpx", **options)
    @serve.ingress(on_httpx)
    class FastAPIHttpx:
        @on_httpx.post("/chat/completions")
        async def chat(self, request: Request):
            if not hasattr(self, "client"):
                self.client = httpx.AsyncClient(timeout=None)
            r = await self.client.send(self.client.build_request("POST", url, json=await request.json()), stream=True)

            async def relay():
                try:
                    async for chunk in r.aiter_raw():
                        yield chunk
                finally:
                    await r.aclose()
            return StreamingResponse(relay(), media_type="text/event-stream")

    @serve.deployment(name="FastAPIAiohttp", **options)
    @serve.ingress(on_aiohttp)
    class FastAPIAiohttp:
        @on_aiohttp.post("/chat/completions")
        async def chat(self, request: Request):
            if not hasattr(self, "session"):
                self.session = aiohttp.ClientSession()
            r = await self.session.post(url, json=await request.json())

            async def relay():
                try:
                    async for chunk in r.content.iter_any():
                        yield chunk
                finally:
                    r.release()
            return StreamingResponse(relay(), media_type="text/event-stream")

    sessions = []

    async def asgi(scope, receive, send):
        message, body = {"more_body": True}, b""
        while message.get("more_body"):
            message = await receive()
            body += message.get("body", b"")
        if not sessions:
            sessions.append(aiohttp.ClientSession())
        async with sessions[0].post(url, data=body, headers={"content-type": "application/json"}) as r:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream")]})
            async for chunk in r.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    @serve.deployment(name="ASGIAiohttp", **options)
    @serve.ingress(Starlette(routes=[Mount("/", app=asgi)]))
    class ASGIAiohttp:
        pass
    return {"fastapi_httpx": FastAPIHttpx.bind(), "fastapi_aiohttp": FastAPIAiohttp.bind(),
            "asgi_aiohttp": ASGIAiohttp.bind()}


def set_router(home, url: str, section: str | None, **settings) -> None:
    """Change the Router's user_config[section] (None: its top level) in place (reconfigure, no restart)."""
    import yaml

    from jeirt_ray.serving.deployment.deploy import deploy, load_config
    path = home / "serve.yaml"
    raw = yaml.safe_load(path.read_text())
    router = next(d for d in raw["applications"][0]["deployments"] if d["name"] == "Router")
    (router["user_config"] if section is None else router["user_config"].setdefault(section, {})).update(settings)
    path.write_text(yaml.safe_dump(raw))
    deploy(load_config(path, model="bench", port=int(url.rsplit(":", 1)[1])))
    time.sleep(3)  # the reconfigure reaches the replica


def set_log(home, url: str, enabled: bool) -> None:
    """Switch the Router's decision log on or off in place."""
    set_router(home, url, "decisions", enabled=enabled)


def decision_log(home, url: str, texts: list[str], headers: dict, requests: int, blocks: int = 6) -> dict:
    """Alternating blocks with and without the log, at 1 and 32 clients."""
    import pyarrow.parquet as pq
    out, logged = {}, 0
    time.sleep(3)  # what the runs before logged is written
    before = pq.read_table(home / "decisions", columns=["route"]).num_rows
    for clients in (1, 32):
        seconds = {True: [], False: []}
        failed = {True: 0, False: 0}
        for b in range(2 * blocks):
            on = b % 2 == 0
            set_log(home, url, on)
            r = asyncio.run(first_bytes(url + "/v1", texts, clients, requests // blocks, headers, keep_all=True))
            seconds[on] += r["seconds"]
            failed[on] += r["failed"]
            logged += (20 + requests // blocks) if on else 0  # the warm-up requests are logged too
        ms = {on: np.asarray(v) * 1000 for on, v in seconds.items()}
        out[str(clients)] = {
            "with_log": {"p50_ms": float(np.percentile(ms[True], 50)), "p99_ms": float(np.percentile(ms[True], 99)),
                         "n": len(ms[True]), "failed": failed[True]},
            "without_log": {"p50_ms": float(np.percentile(ms[False], 50)),
                            "p99_ms": float(np.percentile(ms[False], 99)), "n": len(ms[False]),
                            "failed": failed[False]},
            "log_added_p50_ms": float(np.percentile(ms[True], 50) - np.percentile(ms[False], 50))}
        print(json.dumps({clients: out[str(clients)]}, indent=1))
    set_log(home, url, True)  # the last block's rows are flushed within flush_s
    time.sleep(3)
    written = pq.read_table(home / "decisions", columns=["route"]).num_rows - before
    return {"clients": out, "requests_logged": logged, "rows_written": written, "kept_up": written >= logged}


def exploration(home, url: str, texts: list[str], headers: dict, requests: int, share: float = 0.5,
                blocks: int = 6) -> dict:
    """Learning on in both, exploring on a share `share` of the queries or not, in alternating
    blocks at 1 client: p50 of the first byte and the median of the route step (Server-Timing's
    `route`: the policy, the posterior draws and the costing) of each."""
    seconds, route_ms, failed = {True: [], False: []}, {True: [], False: []}, {True: 0, False: 0}
    for b in range(2 * blocks):
        on = b % 2 == 0
        set_router(home, url, "learning", enabled=True, explore=share if on else 0.0)
        timings: list[str] = []
        r = asyncio.run(first_bytes(url + "/v1", texts, 1, requests // blocks, headers, timings, keep_all=True))
        seconds[on] += r["seconds"]
        failed[on] += r["failed"]
        route_ms[on].append(timing_medians(timings).get("route_ms", float("nan")))
    set_router(home, url, "learning", enabled=False, explore=0.0)
    p50 = {on: float(np.percentile(np.asarray(v) * 1000, 50)) for on, v in seconds.items()}
    step = {on: float(np.median(v)) for on, v in route_ms.items()}
    return {"share": share, "with_exploration": {"p50_ms": p50[True], "route_step_ms": step[True], "failed": failed[True],
                                                 "n": len(seconds[True])},
            "without_exploration": {"p50_ms": p50[False], "route_step_ms": step[False], "failed": failed[False],
                                    "n": len(seconds[False])},
            "exploration_added_p50_ms": p50[True] - p50[False],
            "exploration_added_route_step_ms": step[True] - step[False]}


def main():
    ap = parser(__doc__)
    ap.add_argument("--requests", type=int, default=300, help="measured requests per configuration and client count")
    ap.add_argument("--ingress", choices=INGRESSES, default="proxy", help="Serve's Python proxy, or HAProxy")
    ap.add_argument("--only-hop", action="store_true", help="leave out the decision log's and exploration's sections")
    args = ap.parse_args()
    args.encoder = "hashing"  # the instant encoder: the gateway's own cost, not a transformer's
    data_dir = dataset_path(args.data, "mmlu_pro")
    data, prep, texts = test_texts(data_dir, args.encoder, args.split_seed)
    ups = Upstreams()
    rows = {}
    try:
        upstream = ups.start("up0")
        with registered_space(prep) as home:
            headers, edit = keyed_gateway(home, data.models, upstream,
                                          decisions={"enabled": True, "path": str(home / "decisions"),
                                                     "feedback_url": f"sqlite:///{home}/feedback.db"})
            names = [str(n) for n in data.models]

            with service(home, args.encoder, threads=1, edit=edit, ingress=args.ingress) as url:
                from ray import serve
                serve.run(empty_deployment(), name="empty", route_prefix="/empty")
                for name, relay_app in relay_deployments(upstream).items():
                    serve.run(relay_app, name=name, route_prefix=f"/{name}")
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
                    if clients == 1:
                        rows["1"]["relay_floors_added_p50_ms"] = {name: asyncio.run(first_bytes(
                            f"{url}/{name}", texts, 1, args.requests))["p50_ms"] - direct["p50_ms"]
                            for name in ("fastapi_httpx", "fastapi_aiohttp", "asgi_aiohttp")}
                    print(json.dumps({clients: rows[str(clients)]}, indent=1))
                log_rows = explore_rows = None
                if not args.only_hop:
                    log_rows = decision_log(home, url, texts, headers, args.requests)
                    explore_rows = exploration(home, url, texts, headers, args.requests)
                    print(json.dumps({"exploration": explore_rows}, indent=1))
    finally:
        ups.stop()
    write_json(args.out, {"data": str(data_dir), "llms": len(names), "encoder": args.encoder, "auth": "required",
                          "key_store": "sqlite", "ingress": args.ingress, "requests": args.requests, "clients": rows,
                          "decision_log": log_rows,
                          "exploration": explore_rows,
                          "targets": {"added_p50_ms_at_1_client": 5.0, "gateway_over_direct_p50_at_8_clients": 2.0,
                                      "decision_log_added_p50_ms": 1.0, "exploration_added_p50_ms": 1.0}})


if __name__ == "__main__":
    main()
