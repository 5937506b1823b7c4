"""Autoscaling, exercised: deployments/local.yaml as shipped (the encoder inside the Router
replica) with a small autoscaling config (fractional CPUs, so that it fits on two cores), driven
over loopback until Serve adds Router replicas (each with its encoder), then left idle until it
removes them (one Ray cluster for this module)."""

import threading
import time

import numpy as np
import pytest

from jeirt_ray.encoders import HashingEncoder
from jeirt_ray.evaluation import train_space
from jeirt_ray.experiment import prepare
from jeirt_ray.model.train import TrainConfig

from .conftest import serving

ray = pytest.importorskip("ray")
httpx = pytest.importorskip("httpx")
NAME = "autoscale-test"
AUTOSCALING = {"min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 2, "upscale_delay_s": 1,
               "downscale_delay_s": 4, "look_back_period_s": 2, "metrics_interval_s": 0.5}


@pytest.fixture(scope="module")
def service(tmp_path_factory, synthetic):
    home = tmp_path_factory.mktemp("autoscale")

    def edit(app):
        router = next(d for d in app["deployments"] if d["name"] == "Router")
        router.pop("num_replicas", None)
        router["autoscaling_config"] = AUTOSCALING

    prep = prepare(synthetic, HashingEncoder(384), progress=False)
    space = train_space(prep, TrainConfig(kind="jeirt", dim=16, max_epochs=5), members=1, progress=False)
    with serving(space, NAME, home, edit=edit, cpus=0.1, encoder="hashing") as url:
        yield url


def _replicas() -> dict[str, int]:
    from ray import serve
    deployments = serve.status().applications["jeirt"].deployments
    return {name: deployments[name].replica_states.get("RUNNING", 0) for name in ("Router",)}


def _latency_ms(url: str, n: int = 30) -> float:
    with httpx.Client(timeout=30) as c:
        times = []
        for _ in range(n):
            start = time.perf_counter()
            assert c.post(f"{url}/v1/route", json={"query": "what is 2 + 2?"}).status_code == 200
            times.append(time.perf_counter() - start)
    return float(np.median(times) * 1000)


def test_load_adds_replicas_and_idleness_removes_them(service):
    assert _replicas() == {"Router": 1}
    before_ms = _latency_ms(service)
    stop, failed, sent = threading.Event(), [0], [0]

    def client():
        with httpx.Client(timeout=60) as c:
            while not stop.is_set():
                r = c.post(f"{service}/v1/route", json={"queries": [f"question {i}" for i in range(8)]})
                sent[0] += 1
                failed[0] += r.status_code != 200

    threads = [threading.Thread(target=client) for _ in range(16)]
    start = time.monotonic()
    for t in threads:
        t.start()
    up = {}
    try:
        while len(up) < 1 and time.monotonic() - start < 120:
            for name, n in _replicas().items():
                if n == 2 and name not in up:
                    up[name] = time.monotonic() - start
            time.sleep(0.25)
        under_load_ms = _latency_ms(service, 10)
    finally:
        stop.set()
        for t in threads:
            t.join()
    idle = time.monotonic()
    down = {}
    while len(down) < 1 and time.monotonic() - idle < 120:
        for name, n in _replicas().items():
            if n == 1 and name not in down:
                down[name] = time.monotonic() - idle
        time.sleep(0.25)
    after_ms = _latency_ms(service)
    up, down = ({k: round(v, 1) for k, v in d.items()} for d in (up, down))
    print(f"autoscaling: up in {up} s under 16 clients ({sent[0]} requests, {failed[0]} failed; p50 {under_load_ms:.1f} "
          f"ms while loaded), down in {down} s once idle; p50 of one client {before_ms:.1f} ms before, "
          f"{after_ms:.1f} ms after")
    assert set(up) == {"Router"}, f"not scaled up in 120 s: {_replicas()}"
    assert set(down) == {"Router"}, f"not scaled down in 120 s: {_replicas()}"
    assert failed[0] == 0
