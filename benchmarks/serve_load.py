"""Serving load and latency against the encoder's own speed, in one run, over loopback.

    python benchmarks/serve_load.py [--data DIR] --out results/serve_load.json

Deploys deployments/local.yaml (a space trained here for a few epochs and registered in a
temporary MLflow database; the real encoder) and sends the test questions of the dataset to
POST /v1/route at concurrency 1, 8 and 32. Baselines measured in the same run, in this process,
while the service is idle: the encoder's single-query forward time (p50) and its offline
batched throughput (batches of 32). Targets: at concurrency 1, p50 <= 1.5 x encoder p50 + 5 ms;
at concurrency 32, throughput >= 60% of the offline batched throughput; no failed request.
"""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from _common import dataset_path, parser, write_json

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def load(url: str, texts: list[str], concurrency: int, n: int) -> dict:
    import httpx
    latencies, failures = [], 0
    queue = iter(range(n))

    async def worker(client):
        nonlocal failures
        for i in queue:
            start = time.perf_counter()
            r = await client.post(f"{url}/v1/route", json={"query": texts[i % len(texts)], "top_k": 3})
            latencies.append(time.perf_counter() - start)
            failures += r.status_code != 200

    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        start = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        wall = time.perf_counter() - start
    lat = np.array(latencies) * 1000
    return {"concurrency": concurrency, "requests": n, "failed": int(failures), "p50_ms": float(np.percentile(lat, 50)),
            "p99_ms": float(np.percentile(lat, 99)), "throughput_rps": n / wall}


def main():
    ap = parser(__doc__)
    ap.add_argument("--requests", type=int, default=256, help="requests per concurrency level (64 at 1)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads of the encoder replica")
    args = ap.parse_args()

    from jeirt_ray.data import load_data
    from jeirt_ray.encoders import make_encoder
    from jeirt_ray.evaluation import train_space
    from jeirt_ray.selection import fixed_config
    from jeirt_ray.experiment import prepare
    from jeirt_ray import paths

    data = load_data(dataset_path(args.data, "mmlu_pro"))
    prep = prepare(data, make_encoder(args.encoder), seed=args.split_seed, cache_root=paths.cache_dir())
    texts = [str(data.texts[i]) for i in prep.rows("test")][:512]
    with tempfile.TemporaryDirectory() as home:
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{home}/mlflow.db"
        from jeirt_ray.registry import Registry
        # latency does not depend on how well the space is trained: a few epochs of the default recipe
        space = train_space(prep, fixed_config("jeirt").model_copy(update={"max_epochs": 3}), members=5,
                            progress=False)
        reg = Registry()
        reg.promote("bench", reg.register(space, "bench"), "champion")

        # baselines, in this process, before the service exists
        import torch
        torch.set_num_threads(args.threads)
        enc = make_encoder(args.encoder)
        enc.encode(texts[:8])
        single = []
        for t in texts[:64]:
            start = time.perf_counter()
            enc.encode([t])
            single.append(time.perf_counter() - start)
        start = time.perf_counter()
        enc.encode(texts, batch_size=32)
        batched_rps = len(texts) / (time.perf_counter() - start)
        baseline = {"encoder_single_p50_ms": float(np.median(single) * 1000), "encoder_batched_rps": batched_rps,
                    "threads": args.threads}
        print(baseline, flush=True)
        del enc

        import ray
        from ray import serve

        from jeirt_ray.serving.deploy import deploy, load_config
        raw = yaml.safe_load((ROOT / "deployments" / "local.yaml").read_text())
        raw["applications"][0]["args"].update(encoder=args.encoder, encoder_threads=args.threads)
        cfg_path = Path(home) / "serve.yaml"
        cfg_path.write_text(yaml.safe_dump(raw))
        ray.init(address="local", num_cpus=os.cpu_count(), log_to_driver=False)
        url = deploy(load_config(cfg_path, model="bench", port=free_port()))
        asyncio.run(load(url, texts, 4, 16))  # warm-up
        levels = [asyncio.run(load(url, texts, c, 64 if c == 1 else args.requests)) for c in (1, 8, 32)]
        for row in levels:
            print(row, flush=True)
        serve.shutdown()
        ray.shutdown()
    c1, c32 = levels[0], levels[-1]
    targets = {"c1_p50_limit_ms": 1.5 * baseline["encoder_single_p50_ms"] + 5,
               "c32_throughput_floor_rps": 0.6 * baseline["encoder_batched_rps"]}
    write_json(args.out, {
        "data": data.name, "encoder": args.encoder, "queries": len(texts), "baseline": baseline, "levels": levels,
        "targets": targets, "c1_p50_within_target": c1["p50_ms"] <= targets["c1_p50_limit_ms"],
        "c32_throughput_ratio": c32["throughput_rps"] / baseline["encoder_batched_rps"],
        "c32_within_target": c32["throughput_rps"] >= targets["c32_throughput_floor_rps"],
        "failed_requests": sum(r["failed"] for r in levels)})


if __name__ == "__main__":
    main()
