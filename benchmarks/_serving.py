"""The service that the serving benchmarks drive: a space trained on the dataset for a few epochs
(latency does not depend on how well it is trained), registered in a temporary MLflow database,
deployed from deployments/local.yaml on a local Ray cluster."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from jeirt_ray.serving.deployment.ingress import free_port, ingress_environ

ROOT = Path(__file__).resolve().parents[1]


def test_texts(data_dir: Path, encoder: str, split_seed: int, n: int = 512):
    """(dataset, prepared split, up to n test question texts)."""
    from jeirt_ray.core import paths
    from jeirt_ray.data import load_data
    from jeirt_ray.encoders import make_encoder
    from jeirt_ray.experiments.prepare import prepare
    data = load_data(data_dir)
    prep = prepare(data, make_encoder(encoder), seed=split_seed, cache_root=paths.cache_dir())
    return data, prep, [str(data.texts[i]) for i in prep.rows("test")][:n]


@contextlib.contextmanager
def registered_space(prep):
    """A temporary MLflow registry holding models:/bench@champion."""
    from jeirt_ray.experiments.methods import train_space
    from jeirt_ray.experiments.selection import fixed_config
    with tempfile.TemporaryDirectory() as home:
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{home}/mlflow.db"
        from jeirt_ray.tracking.registry import SpaceRegistry
        space = train_space(prep, fixed_config("jeirt").model_copy(update={"max_epochs": 3}), members=5,
                            progress=False)
        reg = SpaceRegistry()
        reg.promote("bench", reg.register(space, "bench"), "champion")
        yield Path(home)


@contextlib.contextmanager
def service(home: Path, encoder: str, threads: int, edit=None, ingress: str = "proxy", model: str = "bench", **init):
    """deployments/local.yaml serving models:/`model`@champion (edited by `edit(raw)` if given) on a
    fresh local Ray cluster behind `ingress` (jeirt_ray/serving/deployment/ingress.py; more ray.init arguments
    in `init`); yields the base URL."""
    import ray
    from ray import serve

    from jeirt_ray.serving.deployment.deploy import deploy, load_config
    raw = yaml.safe_load((ROOT / "deployments" / "local.yaml").read_text())
    raw["applications"][0]["args"].update(encoder=encoder, encoder_threads=threads)
    if edit:
        edit(raw)
    cfg_path = home / "serve.yaml"
    cfg_path.write_text(yaml.safe_dump(raw))
    with ingress_environ(ingress):  # inherited by the Ray that starts here
        ray.init(address="local", num_cpus=os.cpu_count(), log_to_driver=False, **init)
        try:
            yield deploy(load_config(cfg_path, model=model, port=free_port()))
        finally:
            serve.shutdown()
            ray.shutdown()


def placed(placement: str):
    """A Serve-config edit of local.yaml (the encoder inside the Router replica): "router" keeps
    it, "deployment" gives the encoder a deployment of its own, as in production.yaml."""
    def edit(raw):
        app = raw["applications"][0]
        app["args"]["encoder_placement"] = placement
        if placement == "deployment":
            app["deployments"].append({"name": "Encoder", "num_replicas": 1, "max_ongoing_requests": 64,
                                       "ray_actor_options": {"num_cpus": 1}})
            next(d for d in app["deployments"] if d["name"] == "Router")["ray_actor_options"]["num_cpus"] = 0.5
    return edit


async def drive(url: str, texts: list[str], concurrency: int, n: int | None = None,
                seconds: float | None = None) -> list[tuple[float, float, bool]]:
    """POST /v1/route from `concurrency` clients, `n` requests in all or for `seconds`; returns
    (start time, latency s, ok) per request."""
    import httpx
    records: list[tuple[float, float, bool]] = []
    counter = iter(range(n if n is not None else 10**12))
    deadline = time.perf_counter() + seconds if seconds else float("inf")

    async def worker(client):
        for i in counter:
            if time.perf_counter() > deadline:
                return
            start = time.perf_counter()
            try:
                r = await client.post(f"{url}/v1/route", json={"query": texts[i % len(texts)], "top_k": 3})
                ok = r.status_code == 200
            except httpx.HTTPError:
                ok = False
            records.append((start, time.perf_counter() - start, ok))

    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=concurrency)) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return records


def summary(records, concurrency: int) -> dict:
    lat = np.array([r[1] for r in records]) * 1000
    wall = max(r[0] + r[1] for r in records) - min(r[0] for r in records)
    return {"concurrency": concurrency, "requests": len(records), "failed": int(sum(not r[2] for r in records)),
            "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
            "throughput_rps": len(records) / wall}


def keyed_gateway(home: Path, models, upstream: str, **router_config):
    """(headers, edit): an API key with rate and spend limits in a SQLite key store under
    `home`, and a Serve-config edit for `service` that requires keys, sends every LLM of
    `models` to `upstream` and takes 256 requests at once per Router (`router_config`: more
    user_config settings of the Router)."""
    from jeirt_ray.serving.access.keys import KeyStore
    os.environ["JEIRT_KEYS_URL"] = f"sqlite:///{home}/keys.db"
    _, key = KeyStore().create("bench", "chat", rpm=10**6, usd_per_day=10**6)

    def edit(raw):
        app = raw["applications"][0]
        app["args"]["auth"] = "required"
        router = next(d for d in app["deployments"] if d["name"] == "Router")
        router["user_config"]["upstreams"] = {str(n): upstream for n in models}
        router["user_config"].update(router_config)
        router["max_ongoing_requests"] = 256
    return {"authorization": f"Bearer {key}"}, edit


def encoder_alone(name: str, threads: int, single: list[str], batch: list[str], **encode) -> tuple[float, float]:
    """(p50 ms of one query's forward over `single`, queries per second encoding `batch` at
    once): the encoder `name` in this process with `threads` torch threads, warmed up first
    (`encode`: more arguments of its encode, e.g. batch_size)."""
    import torch

    from jeirt_ray.encoders import make_encoder
    torch.set_num_threads(threads)
    enc = make_encoder(name)
    enc.encode(single[:8])
    seconds = []
    for t in single:
        start = time.perf_counter()
        enc.encode([t])
        seconds.append(time.perf_counter() - start)
    start = time.perf_counter()
    enc.encode(batch, **encode)
    return float(np.median(seconds) * 1000), len(batch) / (time.perf_counter() - start)
