"""Node loss in every Ray stage, on a multi-node cluster on this machine (tests/multinode.py, Ray's
`ray.cluster_utils.Cluster`): a fresh cluster per test, the CLI joining through RAY_ADDRESS.
Each test prints its figures (`pytest -m cluster -s` shows them; docs/results/cluster.md)."""

import json
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from .conftest import Load, free_port, local_serve_config, missing, registry_env
from .multinode import nodes, output_of

import httpx
import ray
pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """A synthetic dataset folder (the long format a user's data comes in)."""
    from jeirt_ray.data.synthetic import generate
    return generate(n_models=16, n_questions=900, seed=0).save(tmp_path_factory.mktemp("data") / "synthetic")


@pytest.fixture
def home(tmp_path):
    with registry_env(tmp_path):
        yield tmp_path


def _wait(predicate, timeout: float, what: str, every: float = 0.2):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if value := predicate():
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _finish(proc, timeout: float) -> str:
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = output_of(proc)
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{out[-3000:]}"
    return out


def _actors_on(node_id: str, class_prefix: str) -> list:
    from ray.util.state import list_actors
    return [a for a in list_actors(address=ray.get_runtime_context().gcs_address, filters=[("state", "=", "ALIVE")],
                                   limit=1000)
            if a.class_name.startswith(class_prefix) and a.node_id == node_id]


def _members(space_dir: Path) -> list[dict]:
    return json.loads((space_dir / "space.json").read_text())["metadata"]["members"]


def test_train_resumes_from_its_checkpoint_when_a_node_is_lost(dataset, home):
    """`jeirt train --workers 2` over two nodes; after the first registered checkpoint the node
    holding one worker is removed and a fresh one added: the group restarts from the checkpoint
    and ends within 0.01 of an undisturbed run's best validation loss (the same fixed
    configuration in this process: tests/test_distributed_train.py shows 2 DDP workers end where
    one process ends)."""
    import jeirt_ray as jr
    from jeirt_ray.data import load_data
    undisturbed = jr.train(load_data(dataset), encoder="hashing", search=False, members=1, held_out_benchmarks=0)
    whole = undisturbed.metadata["members"][0]
    runs = home / "ray_results"
    runs.mkdir(parents=True, exist_ok=True)
    with nodes(head_cpus=1, workers=1) as c:
        start = time.perf_counter()
        proc = c.jeirt("train", "--data", dataset, "--encoder", "hashing", "--workers", 2, "--members", 1,
                       "--held-out-benchmarks", 0, "--out", home / "hit")

        def checkpointed():  # the controller registered a checkpoint (its snapshot names one)
            snaps = [d / "checkpoint_manager_snapshot.json" for d in runs.iterdir()]
            return snaps and snaps[0].exists() and "checkpoint_" in snaps[0].read_text()
        _wait(lambda: proc.poll() is not None or checkpointed(), 240, "the first checkpoint")
        assert proc.poll() is None, f"training ended before its first checkpoint:\n{output_of(proc)[-2000:]}"
        ray.init(address=c.address, log_to_driver=False)
        lost = c.workers[0]
        assert _actors_on(lost.node_id, "RayTrainWorker"), "no training worker on the worker node"
        c.remove(lost)
        removed = time.perf_counter()
        c.add()
        _finish(proc, 300)
        end = time.perf_counter()
    hit = _members(home / "hit")[0]
    print(f"\n[train] undisturbed (one process) best val {whole['best_val_loss']:.4f}; node lost "
          f"{removed - start:.1f} s after the start, run ended {end - removed:.1f} s later ({end - start:.1f} s in "
          f"all), resumed from epoch {hit['resumed_from_epoch']}, best val {hit['best_val_loss']:.4f}")
    assert hit["resumed_from_epoch"] >= 0  # the last report came from the group restarted from a checkpoint
    assert abs(hit["best_val_loss"] - whole["best_val_loss"]) <= 0.01


def test_search_finishes_every_trial_when_a_node_is_lost(dataset, home):
    """The per-dataset search (`jeirt train`, Ray Tune) with a node removed while a trial runs
    there: the trial runs again, and the search ends with every planned trial and none failed."""
    trials = 6
    with nodes(head_cpus=1, workers=1) as c:
        start = time.perf_counter()
        proc = c.jeirt("train", "--data", dataset, "--encoder", "hashing", "--trials", trials, "--members", 2,
                       "--held-out-benchmarks", 0, "--out", home / "space")
        ray.init(address=c.address, log_to_driver=False)
        lost = c.workers[0]
        _wait(lambda: proc.poll() is not None or _actors_on(lost.node_id, "ImplicitFunc"), 240,
              "a trial on the worker node")
        assert proc.poll() is None, f"the search ended before a trial ran on the worker:\n{output_of(proc)[-2000:]}"
        lost_at = time.perf_counter() - start
        c.remove(lost)
        c.add()
        out = _finish(proc, 400)
        total_s = time.perf_counter() - start
    search = json.loads((home / "space" / "space.json").read_text())["metadata"]["search"]
    print(f"\n[tune] {trials} trials, node lost at {lost_at:.1f} s: {search['trials']} trials, {search['failed']} "
          f"failed, {search['completed']} ran to the end; {total_s:.1f} s in all")
    assert search["trials"] == trials and search["failed"] == 0, out[-2000:]
    assert len(_members(home / "space")) == 2


def test_encode_completes_once_per_question_when_a_node_is_lost(tmp_path, tiny_encoder, home):
    """`jeirt encode --replicas 3` with the node running an encoder replica removed mid-encode: the
    encode completes, every question is cached exactly once, every shard reads back."""
    import pandas as pd

    from jeirt_ray.encoders import EmbeddingCache, make_encoder, text_hash
    n = 4000
    data = tmp_path / "texts"
    data.mkdir()
    words = "the a of to and in is what which how many answer question model number value code math".split()
    rng = np.random.default_rng(0)
    texts = [f"{i} " + " ".join(rng.choice(words, 40)) for i in range(n)]
    pd.DataFrame({"question_id": [f"q{i}" for i in range(n)], "benchmark": "b", "text": texts}).to_csv(
        data / "questions.csv", index=False)
    pd.DataFrame({"model": ["m1", "m2"] * n, "question_id": [f"q{i // 2}" for i in range(2 * n)],
                  "label": [1.0, 0.0] * n}).to_csv(data / "responses.csv", index=False)
    cache = EmbeddingCache(home / "cache", make_encoder(str(tiny_encoder)).encoder_id).directory
    with nodes(head_cpus=1, workers=1, worker_cpus=1) as c:
        start = time.perf_counter()
        proc = c.jeirt("encode", "--data", data, "--encoder", tiny_encoder, "--replicas", 3, "--batch-size", 16)
        ray.init(address=c.address, log_to_driver=False)
        lost = c.workers[0]
        _wait(lambda: proc.poll() is not None or (_actors_on(lost.node_id, "MapWorker") and any(cache.glob("*.parquet"))),
              240, "an encoder replica on the worker node and the first shard")
        assert proc.poll() is None, f"encoding ended before the node could be removed:\n{output_of(proc)[-2000:]}"
        done_before = len(list(cache.glob("*.parquet")))
        c.remove(lost)
        c.add()
        _finish(proc, 400)
        total_s = time.perf_counter() - start
    shards = sorted(cache.glob("*.parquet"))
    hashes = [h for s in shards for h in EmbeddingCache._read(s, None)[0]]  # raises on a corrupt shard
    print(f"\n[data] {n} questions, node lost after {done_before} shards: {len(hashes)} rows in {len(shards)} "
          f"shards, {len(set(hashes))} distinct; {total_s:.1f} s in all")
    assert not list(cache.glob("*.corrupt")) and not list(cache.glob(".*.tmp"))
    assert len(hashes) == len(set(hashes)) == n
    encoder = make_encoder(str(tiny_encoder))
    cached = EmbeddingCache(cache.parent, encoder.encoder_id).get([text_hash(t) for t in texts[:50]])
    assert np.allclose(cached, encoder.encode(texts[:50]), atol=1e-4)


def _register_space(name: str) -> None:
    from jeirt_ray.data.synthetic import generate
    from jeirt_ray.encoders import HashingEncoder
    from jeirt_ray.experiments.methods import train_space
    from jeirt_ray.experiments.prepare import prepare
    from jeirt_ray.model.train import TrainConfig
    from jeirt_ray.tracking.registry import SpaceRegistry
    prep = prepare(generate(n_models=12, n_questions=300, seed=1), HashingEncoder(384), progress=False)
    space = train_space(prep, TrainConfig(kind="jeirt", dim=16, max_epochs=5), members=1, progress=False)
    reg = SpaceRegistry()
    reg.promote(name, reg.register(space, name), "champion")


def _spread_routers(replicas: int):
    """local.yaml's resources as they are (a Router takes a whole CPU, the Onboarder none), the
    Routers at most one per node: on 1-CPU nodes, a deployment that took any CPU would strand one."""
    def edit(app):
        for d in app["deployments"]:
            if d["name"] == "Router":
                d.update(num_replicas=replicas, max_replicas_per_node=1)
    return edit


def _routers() -> list:
    from ray.util.state import list_actors
    return [a for a in list_actors(address=ray.get_runtime_context().gcs_address, filters=[("state", "=", "ALIVE")],
                                   limit=1000)
            if a.class_name == "ServeReplica:jeirt:Router"]


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def redis_address(tmp_path):
    """A Redis server on loopback for the GCS's tables (Debian's redis-server), stopped after."""
    if shutil.which("redis-server") is None:
        missing("redis-server not found: GCS fault tolerance needs an external Redis "
                    "(apt-get install redis-server; .ci/run installs it)")
    port = free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                               "--appendonly", "no", "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    try:
        _wait(lambda: server.poll() is not None or _listening(port), 20, "redis-server")
        assert server.poll() is None, "redis-server exited at start"
        yield f"127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_serve_answers_through_a_gcs_restart_and_the_loss_of_a_node(home, redis_address):
    """`jeirt serve`, 2 Router replicas at most one per node, under 4 clients, on a cluster whose
    GCS keeps its tables in an external Redis (KubeRay's gcsFaultToleranceOptions).
    1. The GCS is killed and started again 10 s later: the service answers /v1/route throughout,
       and afterwards the same Serve app and replicas are there and the cluster schedules work.
    2. The worker node is removed (failures at most the requests in flight there), a fresh node
       joins and the second replica starts on it; /health stays ok."""
    _register_space("cluster-serve")
    config = local_serve_config(home / "serve.yaml", _spread_routers(2), model="cluster-serve", encoder="hashing")
    url = f"http://127.0.0.1:{yaml.safe_load(config.read_text())['http_options']['port']}"
    with nodes(head_cpus=1, workers=1, env={"RAY_REDIS_ADDRESS": redis_address}) as c:
        proc = c.jeirt("serve", config)
        try:
            _wait(lambda: proc.poll() is not None or _healthy(url), 240, "the service")
            assert proc.poll() is None, output_of(proc)[-2000:]
            ray.init(address=c.address, log_to_driver=False)
            from ray import serve
            _wait(lambda: len({a.node_id for a in _routers()}) == 2, 120, "a Router replica on each node")
            routers = {a.actor_id for a in _routers()}
            with Load(url) as gcs_load:
                time.sleep(3)
                before = gcs_load.ok
                c.head.kill_gcs_server()
                time.sleep(10)
                during = gcs_load.ok - before
                c.head.start_gcs_server()
                restarted = time.time()
                _wait(lambda: serve.status().applications["jeirt"].status == "RUNNING", 60, "the app RUNNING")
                back_s = time.time() - restarted
                time.sleep(3)
            assert {a.actor_id for a in _routers()} == routers  # the same replicas, not new ones
            assert ray.get(ray.remote(lambda: 42).options(num_cpus=0).remote(), timeout=60) == 42  # CPUs: Routers
            answer = httpx.post(f"{url}/v1/route", json={"query": "what is 2 + 2?"}, timeout=30).json()
            assert answer["space"] == "cluster-serve/1" and _healthy(url)
            total = gcs_load.ok + len(gcs_load.failed)
            print(f"\n[gcs] GCS down 10 s under 4 clients: {total} requests, {len(gcs_load.failed)} failed "
                  f"{gcs_load.failed}; {during} answered while it was down; app RUNNING {back_s:.1f} s after the "
                  f"restart, the same {len(routers)} Router replicas")
            assert during > 0 and not gcs_load.failed

            with Load(url) as load:
                time.sleep(3)
                before = load.ok
                c.remove(c.workers[0])
                removed = time.time()
                time.sleep(5)
                c.add()
                joined = time.time()
                _wait(lambda: len({a.node_id for a in _routers()}) == 2, 120, "the second replica on the fresh node")
                recovered_s = time.time() - joined
                time.sleep(3)
            assert _healthy(url)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    total = load.ok + len(load.failed)
    print(f"[serve] 4 clients, {total} requests, {len(load.failed)} failed {load.failed}; "
          f"{before} answered before the loss; second replica back {recovered_s:.1f} s after the fresh node "
          f"joined ({joined - removed:.0f} s after the loss)")
    assert load.ok > before > 0
    assert len(load.failed) <= 4, load.failed


AUTOSCALED_CPU_NODES = {"cpu": {"resources": {"CPU": 1}, "max_workers": 2}}


def _alive_nodes() -> list:
    return [n for n in ray.nodes() if n["Alive"]]


class NodeCount:
    """Samples the alive nodes every 0.2 s: the peak and when it first rose."""

    def __init__(self):
        self.stop, self.peak, self.first_added = threading.Event(), 1, None
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self):
        while not self.stop.is_set():
            n = len(_alive_nodes())
            self.peak = max(self.peak, n)
            if n > 1 and self.first_added is None:
                self.first_added = time.time()
            time.sleep(0.2)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=10)


def test_serve_load_makes_the_autoscaler_add_a_node_and_idle_removes_it(home):
    """Ray's autoscaler (fake multi-node provider): the head's 1 CPU holds one Router and the
    Onboarder; load from 4 clients makes Serve ask for a second Router, the autoscaler launches a
    worker node and the replica starts there; when the load stops the replica goes and the idle
    node is removed. No request fails. Then `jeirt serve` is sent SIGTERM while a slow chat
    answer streams: the answer finishes, and the process exits 0."""
    from .upstream import Upstreams
    ups = Upstreams()
    slow = ups.start("slow", "--chunk-delay", "0.3")  # a 10-word answer takes about 3 s
    def autoscaled(app):
        for d in app["deployments"]:
            if d["name"] == "Router":
                d.pop("num_replicas", None)
                d["autoscaling_config"] = {"min_replicas": 1, "max_replicas": 2, "target_ongoing_requests": 1,
                                           "upscale_delay_s": 1, "downscale_delay_s": 5,
                                           "metrics_interval_s": 0.5, "look_back_period_s": 2}
            d["ray_actor_options"]["num_cpus"] = 0.5
            if d["name"] == "Router":
                d["user_config"]["upstreams"] = {f"synthetic-llm-{i:02d}": slow for i in range(12)}
    _register_space("cluster-autoscale")
    config = local_serve_config(home / "serve.yaml", autoscaled, model="cluster-autoscale", encoder="hashing")
    url = f"http://127.0.0.1:{yaml.safe_load(config.read_text())['http_options']['port']}"
    with nodes(head_cpus=1, workers=0, autoscale=AUTOSCALED_CPU_NODES) as c:
        proc = c.jeirt("serve", config)
        try:
            _wait(lambda: proc.poll() is not None or _healthy(url), 240, "the service")
            assert proc.poll() is None, output_of(proc)[-2000:]
            ray.init(address=c.address, log_to_driver=False)
            head = ray.get_runtime_context().get_node_id()
            assert len(_alive_nodes()) == 1 and len(_routers()) == 1
            with Load(url) as load:
                start = time.time()
                _wait(lambda: len(_alive_nodes()) == 2, 120, "the autoscaler's node")
                node_s = time.time() - start
                _wait(lambda: len(_routers()) == 2, 120, "the second Router replica")
                replica_s = time.time() - start
                assert {a.node_id for a in _routers()} - {head}, "the second replica is not on the new node"
                time.sleep(3)
            stopped = time.time()
            _wait(lambda: len(_routers()) == 1, 120, "the Routers back to 1")
            down_s = time.time() - stopped
            _wait(lambda: len(_alive_nodes()) == 1, 120, "the idle node removed")
            removed_s = time.time() - stopped
            assert _healthy(url)
            streamed: dict = {}

            def chat():
                body = {"model": "auto", "stream": True, "messages": [{"role": "user", "content": "one two three"}]}
                with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as r:
                    streamed["text"] = "".join(r.iter_text())
            asking = threading.Thread(target=chat)
            asking.start()
            time.sleep(1)
            proc.terminate()
            asking.join(60)
            assert proc.wait(timeout=90) == 0, output_of(proc)[-2000:]
            assert streamed["text"].rstrip().endswith("data: [DONE]"), streamed
        finally:
            proc.terminate()
            proc.wait(timeout=60)
            ups.stop()
    total = load.ok + len(load.failed)
    print(f"\n[autoscale serve] load on: node up {node_s:.1f} s, second Router running {replica_s:.1f} s; load off: "
          f"back to 1 Router {down_s:.1f} s, idle node removed {removed_s:.1f} s "
          f"(idle timeout {60 * 0.1:.0f} s); {len(load.failed)} of {total} requests failed")
    assert not load.failed, load.failed


def test_search_wider_than_the_head_makes_the_autoscaler_add_nodes(dataset, home, tmp_path):
    """`jeirt tune` with 3 trials at once, each a Ray Train run whose worker takes 1 CPU, on a head
    of 1 CPU: the autoscaler launches worker nodes for the waiting trials (at most 2), every trial
    finishes, and the idle nodes are removed afterwards."""
    sweep = tmp_path / "wide.yaml"
    sweep.write_text(yaml.safe_dump({
        "name": "wide", "data": str(dataset), "encoder": "hashing", "workers": 1, "max_concurrent": 3,
        "base": {"kind": "jeirt", "max_epochs": 4, "patience": 100}, "search": {"dim": {"grid": [8, 16, 32]}},
        "scheduler": {"type": "fifo"}}))
    with nodes(head_cpus=1, workers=0, autoscale=AUTOSCALED_CPU_NODES) as c:
        ray.init(address=c.address, log_to_driver=False)
        with NodeCount() as count:
            start = time.time()
            _finish(c.jeirt("tune", sweep, "--out", tmp_path / "out"), 400)
            search_s = time.time() - start
            ended = time.time()
            _wait(lambda: len(_alive_nodes()) == 1, 120, "the idle nodes removed")
            removed_s = time.time() - ended
    summary = json.loads((tmp_path / "out" / "wide.json").read_text())
    done = sum(t["completed"] for t in summary["trials"])
    print(f"\n[autoscale tune] 3 trials at once on a 1-CPU head: first node added {count.first_added - start:.1f} s "
          f"after the start, peak {count.peak} nodes, {done} of 3 trials completed in {search_s:.1f} s; idle "
          f"nodes removed {removed_s:.1f} s after the search")
    assert count.peak == 3 and done == 3
