"""The Serve application: Serve's local testing mode (no cluster), then one real deployment of
deployments/local.yaml on 127.0.0.1 driven over HTTP (one Ray cluster for this module)."""

import concurrent.futures
import dataclasses
import os
import socket
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from jeirt_ray.encoders import HashingEncoder
from jeirt_ray.evaluation import train_space
from jeirt_ray.experiment import prepare
from jeirt_ray.model.train import TrainConfig

ray = pytest.importorskip("ray")
httpx = pytest.importorskip("httpx")
ROOT = Path(__file__).resolve().parents[1]
NAME = "serve-test"
TOKEN = "test-token"


@pytest.fixture(scope="module")
def registry(tmp_path_factory, synthetic):
    """A registered space (hashing encoder) as models:/serve-test@champion, and the environment
    that the Serve replicas inherit (set before the module's Ray cluster starts)."""
    from jeirt_ray.registry import Registry
    home = tmp_path_factory.mktemp("serve")
    saved = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI", "JEIRT_HOME", "JEIRT_API_TOKEN")}
    os.environ.update(MLFLOW_TRACKING_URI=f"sqlite:///{home / 'mlflow.db'}", JEIRT_HOME=str(home),
                      JEIRT_API_TOKEN=TOKEN)
    prep = prepare(synthetic, HashingEncoder(384), progress=False)
    space = train_space(prep, TrainConfig(kind="jeirt", dim=16, lr=3e-3, max_epochs=40), members=1, progress=False)
    reg = Registry()
    reg.promote(NAME, reg.register(space, NAME), "champion")
    yield reg, space, prep
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def test_local_testing_mode_routes_without_a_cluster(registry):
    """The Router (the HTTP ingress) and the Onboarder in Serve's local testing mode. The Encoder
    is swapped for an unbatched one: in Ray 2.60, @serve.batch asks for a replica context that
    local testing mode does not set (the real deployment below covers the batched encoder)."""
    from ray import serve

    from jeirt_ray.serving.app import Onboarder, Router
    from jeirt_ray.serving.schemas import RouteRequest
    reg, space, prep = registry

    @serve.deployment
    class PlainEncoder:
        def __init__(self):
            self.encoder = HashingEncoder(384)

        async def encode(self, text):
            return self.encoder.encode([text])[0]

    app = Router.bind(PlainEncoder.bind(), Onboarder.bind(NAME, "hashing-384"), NAME, "hashing-384")
    handle = serve.run(app, _local_testing_mode=True)
    res = handle.route.remote(RouteRequest(query=str(prep.data.texts[0]), top_k=2)).result()
    assert res["space"] == f"{NAME}/1" and len(res["results"][0]["scores"]) == 2
    expected = space.model_names[int(space.predict_proba(prep.X[:1])[0].argmax())]
    assert res["results"][0]["chosen"] == expected
    health = handle.health.remote().result()
    assert health == {"status": "ok", "space": f"{NAME}/1", "llms": len(space.model_names)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def service(registry, tmp_path_factory):
    from ray import serve

    from jeirt_ray.serving.deploy import deploy, load_config
    raw = yaml.safe_load((ROOT / "deployments" / "local.yaml").read_text())
    app = raw["applications"][0]
    app["args"]["encoder"] = "hashing"
    router = next(d for d in app["deployments"] if d["name"] == "Router")
    router["user_config"]["refresh_s"] = 1
    path = tmp_path_factory.mktemp("cfg") / "local.yaml"
    path.write_text(yaml.safe_dump(raw))
    ray.init(address="local", num_cpus=2, log_to_driver=False)
    url = deploy(load_config(path, model=NAME, port=_free_port()))
    yield url
    serve.shutdown()
    ray.shutdown()


def _models(url):
    return httpx.get(f"{url}/v1/models", timeout=30).json()


def _wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return False


def test_http_route_models_health_and_chat(service, registry):
    _, space, prep = registry
    assert httpx.get(f"{service}/health", timeout=30).json()["status"] == "ok"
    models = _models(service)
    assert [m["id"] for m in models["data"]] == space.model_names and models["data"][0]["registry_version"] == "1"
    r = httpx.post(f"{service}/v1/route", json={"queries": [str(t) for t in prep.data.texts[:3]], "top_k": 3},
                   timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["results"]) == 3 and all(d["chosen"] in space.model_names for d in body["results"])
    assert all(d["nearest_benchmark"] in set(prep.data.benchmarks) for d in body["results"])
    chat = httpx.post(f"{service}/v1/chat/completions", timeout=30, json={
        "model": "auto", "messages": [{"role": "system", "content": "be brief"},
                                      {"role": "user", "content": str(prep.data.texts[1])}]})
    assert chat.status_code == 200, chat.text
    assert chat.json()["model"] in space.model_names
    assert chat.json()["routing"]["chosen"] == chat.json()["model"]


@pytest.mark.parametrize("path, body, status, message", [
    ("/v1/route", {"query": ""}, 422, "query"),
    ("/v1/route", {"queries": ["q"] * 65}, 422, "at most 64"),
    ("/v1/route", {"query": "q", "candidates": ["gpt-9"]}, 422, "unknown candidate"),
    ("/v1/route", {"query": "q", "policy": "cost_weighted"}, 422, "cost table"),
    ("/v1/chat/completions", {"messages": [{"role": "system", "content": "x"}]}, 422, "no user message"),
    ("/v1/onboard", {"model": "m", "responses": [{"question_id": "q", "label": 1}]}, 401, "bearer token"),
])
def test_http_bad_requests_get_4xx_with_a_message(service, path, body, status, message):
    r = httpx.post(f"{service}{path}", json=body, timeout=30)
    assert r.status_code == status, r.text
    assert message in r.text
    assert httpx.get(f"{service}/health", timeout=30).status_code == 200  # still serving


def test_http_malformed_json_is_422(service):
    r = httpx.post(f"{service}/v1/route", content=b"{not json", headers={"content-type": "application/json"},
                   timeout=30)
    assert r.status_code == 422


def test_onboard_promote_is_picked_up_live_and_a_bad_version_is_not(service, registry):
    from jeirt_ray.model.space import Space
    reg, space, prep = registry
    auth = {"authorization": f"Bearer {TOKEN}"}
    data = prep.data
    mine = data.m_idx == 0
    responses = [{"question_id": str(data.question_ids[q]), "label": float(y)}
                 for q, y in zip(data.q_idx[mine][:300], data.labels[mine][:300])]
    bad = httpx.post(f"{service}/v1/onboard", headers=auth, timeout=60,
                     json={"model": "x", "responses": [{"question_id": "nope", "label": 1.0}]})
    assert bad.status_code == 422 and "unknown question_id" in bad.text
    r = httpx.post(f"{service}/v1/onboard", headers=auth, timeout=60,
                   json={"model": "newcomer", "responses": responses, "promote": True, "suggest": 3})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["version"] == 2 and out["promoted_to"] == "champion" and len(out["next_questions"]) == 3
    assert out["heldout"]["test_accuracy"] > 0.5
    # the router re-resolves the alias (refresh_s: 1 in this test) without a restart
    assert _wait_for(lambda: _models(service)["data"][0]["registry_version"] == "2")
    assert "newcomer" in [m["id"] for m in _models(service)["data"]]
    routed = httpx.post(f"{service}/v1/route", json={"query": "q", "candidates": ["newcomer"]}, timeout=30)
    assert routed.status_code == 200 and routed.json()["results"][0]["chosen"] == "newcomer"

    # a version trained on another encoder cannot serve this encoder: the router keeps version 2
    broken = dataclasses.replace(Space.load(reg.mlflow.artifacts.download_artifacts(
        artifact_uri=reg.client.get_model_version(NAME, "2").source)), encoder_id="hashing-999")
    reg.promote(NAME, reg.register(broken, NAME), "champion")
    time.sleep(3)
    assert _models(service)["data"][0]["registry_version"] == "2"
    assert httpx.post(f"{service}/v1/route", json={"query": "q"}, timeout=30).status_code == 200


def test_concurrent_onboardings_keep_each_others_models(service, registry):
    reg, _, prep = registry
    data = prep.data
    auth = {"authorization": f"Bearer {TOKEN}"}

    def onboard(name, m):
        mine = data.m_idx == m
        responses = [{"question_id": str(data.question_ids[q]), "label": float(y)}
                     for q, y in zip(data.q_idx[mine][:200], data.labels[mine][:200])]
        return httpx.post(f"{service}/v1/onboard", headers=auth, timeout=120,
                          json={"model": name, "responses": responses})

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(onboard, ["twin-a", "twin-b"], [1, 2]))
    assert all(r.status_code == 200 for r in results), [r.text for r in results]
    latest = max(v["version"] for v in reg.versions(NAME))
    names = reg.load(f"models:/{NAME}/{latest}").model_names
    assert {"twin-a", "twin-b", "newcomer"} <= set(names)
    assert np.isfinite(results[0].json()["fit_seconds"])
