"""Node loss in every Ray stage, on a multi-node cluster on this machine (tests/multinode.py, Ray's
`ray.cluster_utils.Cluster`): a fresh cluster per test, the CLI joining through RAY_ADDRESS.
Each test prints its figures (`pytest -m cluster -s` shows them; docs/results/cluster.md)."""

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from .conftest import local_serve_config, registry_env
from .multinode import nodes, output_of

ray = pytest.importorskip("ray")
httpx = pytest.importorskip("httpx")
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
    return [a for a in list_actors(filters=[("state", "=", "ALIVE")], limit=1000)
            if a.class_name.startswith(class_prefix) and a.node_id == node_id]


def _members(space_dir: Path) -> list[dict]:
    return json.loads((space_dir / "space.json").read_text())["metadata"]["members"]


def test_train_resumes_from_its_checkpoint_when_a_node_is_lost(dataset, home):
    """`jeirt train --workers 2` over two nodes; after the first registered checkpoint the node
    holding one worker is removed and a fresh one added: the group restarts from the checkpoint
    and ends within 0.01 of an undisturbed run's best validation loss."""
    args = ("train", "--data", dataset, "--encoder", "hashing", "--workers", 2, "--members", 1)
    runs = home / "ray_results"
    with nodes(head_cpus=1, workers=1) as c:
        start = time.perf_counter()
        _finish(c.jeirt(*args, "--out", home / "whole"), 300)
        whole_s = time.perf_counter() - start
        before = set(runs.iterdir())

        start = time.perf_counter()
        proc = c.jeirt(*args, "--out", home / "hit")

        def checkpointed():  # the controller registered a checkpoint (its snapshot names one)
            snaps = [d / "checkpoint_manager_snapshot.json" for d in runs.iterdir() if d not in before]
            return snaps and snaps[0].exists() and "checkpoint_" in snaps[0].read_text()
        _wait(lambda: proc.poll() is not None or checkpointed(), 240, "the first checkpoint")
        assert proc.poll() is None, f"training ended before its first checkpoint:\n{output_of(proc)[-2000:]}"
        ray.init(address=c.address, log_to_driver=False)
        lost = c.workers[0]
        assert _actors_on(lost.node_id, "RayTrainWorker"), "no training worker on the worker node"
        c.remove(lost)
        c.add()
        _finish(proc, 300)
        hit_s = time.perf_counter() - start
    whole, hit = _members(home / "whole")[0], _members(home / "hit")[0]
    print(f"\n[train] undisturbed {whole_s:.1f} s, best val {whole['best_val_loss']:.4f}; node lost: {hit_s:.1f} s, "
          f"resumed from epoch {hit['resumed_from_epoch']}, best val {hit['best_val_loss']:.4f}; "
          f"time lost {hit_s - whole_s:.1f} s")
    assert whole["resumed_from_epoch"] == -1
    assert hit["resumed_from_epoch"] >= 0  # the last report came from the group restarted from a checkpoint
    assert abs(hit["best_val_loss"] - whole["best_val_loss"]) <= 0.01


def test_search_finishes_every_trial_when_a_node_is_lost(dataset, home):
    """The per-dataset search (`jeirt train`, Ray Tune) with a node removed while a trial runs
    there: the trial runs again, and the search ends with every planned trial and none failed."""
    trials = 6
    with nodes(head_cpus=1, workers=1) as c:
        start = time.perf_counter()
        proc = c.jeirt("train", "--data", dataset, "--encoder", "hashing", "--trials", trials, "--members", 2,
                       "--out", home / "space")
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
    """`jeirt encode --ray 3` with the node running an encoder replica removed mid-encode: the
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
        proc = c.jeirt("encode", "--data", data, "--encoder", tiny_encoder, "--ray", 3, "--batch-size", 16)
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
    from jeirt_ray.evaluation import train_space
    from jeirt_ray.experiment import prepare
    from jeirt_ray.model.train import TrainConfig
    from jeirt_ray.registry import Registry
    prep = prepare(generate(n_models=12, n_questions=300, seed=1), HashingEncoder(384), progress=False)
    space = train_space(prep, TrainConfig(kind="jeirt", dim=16, max_epochs=5), members=1, progress=False)
    reg = Registry()
    reg.promote(name, reg.register(space, name), "champion")


def _spread_routers(replicas: int):
    def edit(app):
        for d in app["deployments"]:
            if d["name"] == "Router":
                d.update(num_replicas=replicas, max_replicas_per_node=1)
                d["ray_actor_options"]["num_cpus"] = 0.5
            else:
                d["ray_actor_options"]["num_cpus"] = 0.25
    return edit


class Load:
    """`clients` threads posting /v1/route until stopped; counts answers and failures by time."""

    def __init__(self, url: str, clients: int = 4):
        self.url, self.stop, self.lock = url, threading.Event(), threading.Lock()
        self.ok, self.failed = 0, []
        self.threads = [threading.Thread(target=self._client, daemon=True) for _ in range(clients)]

    def _client(self):
        with httpx.Client(timeout=30) as client:
            while not self.stop.is_set():
                try:
                    r = client.post(f"{self.url}/v1/route", json={"query": "what is the sum of 2 and 3?"})
                    good, why = r.status_code == 200, r.status_code
                except httpx.HTTPError as e:
                    good, why = False, type(e).__name__
                with self.lock:
                    if good:
                        self.ok += 1
                    else:
                        self.failed.append((time.time(), why))

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)


def _routers() -> list:
    from ray.util.state import list_actors
    return [a for a in list_actors(filters=[("state", "=", "ALIVE")], limit=1000)
            if a.class_name == "ServeReplica:jeirt:Router"]


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_serve_keeps_answering_when_a_node_is_lost(home):
    """`jeirt serve` with 2 Router replicas, at most one per node, under 4 clients: the worker
    node is removed (failures at most the requests in flight there), a fresh node joins and the
    second replica starts on it; /health stays ok."""
    _register_space("cluster-serve")
    config = local_serve_config(home / "serve.yaml", _spread_routers(2), model="cluster-serve", encoder="hashing")
    url = f"http://127.0.0.1:{__import__('yaml').safe_load(config.read_text())['http_options']['port']}"
    with nodes(head_cpus=1, workers=1) as c:
        proc = c.jeirt("serve", config)
        try:
            _wait(lambda: proc.poll() is not None or _healthy(url), 240, "the service")
            assert proc.poll() is None, output_of(proc)[-2000:]
            ray.init(address=c.address, log_to_driver=False)
            _wait(lambda: len({a.node_id for a in _routers()}) == 2, 120, "a Router replica on each node")
            with Load(url) as load:
                time.sleep(3)
                before = load.ok
                lost = c.workers[0]
                c.remove(lost)
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
    print(f"\n[serve] 4 clients, {total} requests, {len(load.failed)} failed {load.failed}; "
          f"{before} answered before the loss; second replica back {recovered_s:.1f} s after the fresh node "
          f"joined ({joined - removed:.0f} s after the loss)")
    assert load.ok > before > 0
    assert len(load.failed) <= 4, load.failed
