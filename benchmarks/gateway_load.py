"""The gateway under load and faults: 3 OpenAI-compatible upstreams on loopback (tests/upstream.py,
streaming word by word like OpenAI's API), every LLM of a space served by one of them, N
concurrent OpenAI SDK clients (half streaming) through /v1/chat/completions, and one upstream
killed midway (the busiest one). Baseline in the same run: the same clients calling an upstream
directly.

Reports failed/total, the fallbacks (from the x-jeirt-fallbacks headers and from Ray's metrics
endpoint), and time to the first streamed byte (p50/p99) direct vs through the gateway, whose
difference is the gateway's added latency (encode + route + one proxy hop on this machine).

    python benchmarks/gateway_load.py --out results/gateway_load.json [--data DIR] [--clients 32]
"""

from __future__ import annotations

import re
import sys
import threading
import time

import numpy as np

from _common import dataset_path, parser, write_json
from _serving import ROOT, free_port, registered_space, service, test_texts

sys.path.insert(0, str(ROOT))
from tests.upstream import Upstreams  # noqa: E402 (the test upstream, launched as processes)


def percentiles(xs: list[float]) -> dict:
    a = np.asarray(xs) * 1000
    return {"p50_ms": float(np.percentile(a, 50)), "p99_ms": float(np.percentile(a, 99)), "n": len(xs)} if xs else {}


def drive(base_url: str, texts: list[str], clients: int, per_client: int, extra_body: dict | None,
          on_half=None) -> dict:
    """`clients` threads, each with its own OpenAI client, `per_client` requests, every other one
    streamed. `on_half()` runs once half of all requests have finished."""
    import openai
    total = clients * per_client
    done, lock, half = [0], threading.Lock(), threading.Event()
    rows: list[dict] = []

    def one(k: int):
        c = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)
        for j in range(per_client):
            text = texts[(k * per_client + j) % len(texts)]
            row = {"stream": bool((k + j) % 2), "ok": False, "fallbacks": []}
            start = time.perf_counter()
            try:
                msg = [{"role": "user", "content": text}]
                if row["stream"]:
                    with c.chat.completions.with_streaming_response.create(
                            model="auto", messages=msg, stream=True, extra_body=extra_body) as r:
                        got = ""
                        for chunk in r.parse():
                            if chunk.choices and chunk.choices[0].delta.content:
                                if not got:
                                    row["first_byte_s"] = time.perf_counter() - start
                                got += chunk.choices[0].delta.content
                        row["fallbacks"] = [f for f in r.headers.get("x-jeirt-fallbacks", "").split(",") if f]
                        row["ok"] = got.endswith(text[-20:])
                else:
                    raw = c.chat.completions.with_raw_response.create(model="auto", messages=msg, extra_body=extra_body)
                    got = raw.parse().choices[0].message.content
                    row["fallbacks"] = [f for f in raw.headers.get("x-jeirt-fallbacks", "").split(",") if f]
                    row["ok"] = got.endswith(text[-20:])
            except Exception as e:  # a failed client request is what this measures
                row["error"] = f"{type(e).__name__}: {e}"[:300]
            row["seconds"] = time.perf_counter() - start
            with lock:
                rows.append(row)
                done[0] += 1
                if done[0] * 2 >= total and not half.is_set():
                    half.set()
                    if on_half:
                        on_half()
        c.close()

    threads = [threading.Thread(target=one, args=(k,)) for k in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    failed = [r for r in rows if not r["ok"]]
    return {"requests": len(rows), "failed": len(failed), "errors": [r.get("error") for r in failed][:5],
            "wall_s": wall, "throughput_rps": len(rows) / wall,
            "first_byte_streamed": percentiles([r["first_byte_s"] for r in rows if "first_byte_s" in r]),
            "whole_answer_not_streamed": percentiles([r["seconds"] for r in rows if not r["stream"] and r["ok"]]),
            "fallback_requests": sum(bool(r["fallbacks"]) for r in rows),
            "fallbacks": sum(len(r["fallbacks"]) for r in rows)}


def main():
    ap = parser(__doc__)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--per-client", type=int, default=20)
    ap.add_argument("--chunk-delay", type=float, default=0.005, help="seconds between an upstream's words")
    ap.add_argument("--kill", choices=("term", "kill"), default="kill",
                    help="stop the upstream with SIGTERM (it drains) or SIGKILL (its streams break off)")
    args = ap.parse_args()
    data_dir = dataset_path(args.data, "mmlu_pro")
    data, prep, texts = test_texts(data_dir, args.encoder, args.split_seed)
    ups = Upstreams()
    try:
        for name in ("up0", "up1", "up2"):
            ups.start(name, "--chunk-delay", str(args.chunk_delay))
        # baseline: the same clients straight at one upstream (no routing, no proxy)
        direct = drive(ups.urls["up0"], texts, args.clients, args.per_client, None)
        metrics_port = free_port()
        with registered_space(prep) as home:
            names = [str(n) for n in data.models]
            server_of = {n: f"up{i % 3}" for i, n in enumerate(names)}

            def edit(raw):
                app = raw["applications"][0]
                router = next(d for d in app["deployments"] if d["name"] == "Router")
                router["user_config"]["upstreams"] = {n: ups.urls[s] for n, s in server_of.items()}
                router["user_config"]["gateway"] = {"max_tries": 3, "cooldown_s": 30}
                router["max_ongoing_requests"] = 256

            with service(home, args.encoder, threads=2, edit=edit, _metrics_export_port=metrics_port) as url:
                killed = {}

                def kill():  # the upstream that has answered the most so far: the routed-to one
                    killed["name"] = max(("up0", "up1", "up2"), key=lambda n: ups.calls(n)["calls"])
                    ups.kill(killed["name"], graceful=args.kill == "term")
                gateway = drive(f"{url}/v1", texts, args.clients, args.per_client, None, on_half=kill)
                import httpx
                time.sleep(12)  # one metrics export interval or two
                scraped = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
                fallbacks = sum(float(v) for v in re.findall(r"^ray_jeirt_gateway_fallbacks_total\{[^}]*\} (\S+)$",
                                                              scraped, re.M))
                answered = sum(float(v) for v in re.findall(r"^ray_jeirt_gateway_requests_total\{[^}]*\} (\S+)$",
                                                             scraped, re.M))
    finally:
        ups.stop()
    added = {k: gateway["first_byte_streamed"][k] - direct["first_byte_streamed"][k] for k in ("p50_ms", "p99_ms")}
    write_json(args.out, {"data": str(data_dir), "llms": len(names), "clients": args.clients,
                          "per_client": args.per_client,
                          "killed_upstream": f"{killed['name']} (the busiest of the three) by SIG{args.kill.upper()} once "
                                             f"half the requests were done",
                          "direct": direct, "gateway": gateway, "added_first_byte_ms": added,
                          "metrics_scraped": {"ray_jeirt_gateway_fallbacks_total": fallbacks,
                                              "ray_jeirt_gateway_requests_total": answered}})


if __name__ == "__main__":
    main()
