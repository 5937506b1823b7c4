"""The Serve application: Serve's local testing mode (no cluster), then one real deployment of
deployments/local.yaml on 127.0.0.1 driven over HTTP (one Ray cluster for this module)."""

import concurrent.futures
import contextlib
import dataclasses
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from jeirt_ray.encoders import HashingEncoder
from jeirt_ray.experiments.methods import train_space
from jeirt_ray.experiments.prepare import prepare
from jeirt_ray.model.train import TrainConfig

from .conftest import free_port, local_ray, registry_env, wait_for

import httpx
import ray
ROOT = Path(__file__).resolve().parents[1]
NAME = "serve-test"
SERVED = {}  # the module service's Serve config
TOKEN = "test-token"
ADMIN = {"authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def registry(tmp_path_factory, synthetic):
    """A registered space (hashing encoder) as models:/serve-test@champion, and the environment
    that the Serve replicas inherit (set before the module's Ray cluster starts)."""
    from jeirt_ray.tracking.registry import SpaceRegistry
    with registry_env(tmp_path_factory.mktemp("serve"), TOKEN):
        prep = prepare(synthetic, HashingEncoder(384), progress=False)
        space = train_space(prep, TrainConfig(kind="jeirt", dim=16, lr=3e-3, max_epochs=40), members=1,
                            progress=False)
        reg = SpaceRegistry()
        version = reg.register(space, NAME)
        reg.promote(NAME, version, "champion")
        reg.promote(NAME, version, "challenger")  # what the service routes in shadow (user_config.shadow)
        yield reg, space, prep


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
    version = reg.resolve(f"models:/{NAME}@champion").version  # other tests of the module may move it
    served = reg.load(f"models:/{NAME}/{version}")
    res = handle.route.remote(RouteRequest(query=str(prep.data.texts[0]), top_k=2)).result()
    assert res["space"] == f"{NAME}/{version}" and len(res["results"][0]["scores"]) == 2
    expected = served.model_names[int(served.predict_proba(prep.X[:1])[0].argmax())]
    assert res["results"][0]["chosen"] == expected
    health = handle.health.remote().result()
    assert {k: health[k] for k in ("status", "space", "llms")} == {"status": "ok", "space": f"{NAME}/{version}",
                                                                  "llms": len(served.model_names)}
    assert health["registry"]["reachable"]


def test_an_exploration_cap_without_prices_is_refused(registry):
    """explore_usd_per_1k bounds what exploring adds to the expected cost: a space without prices
    cannot count it, so a replica refuses the setting when it starts (saying what to set), and a
    live update that asks for it leaves the replica serving with its settings as they were."""
    from jeirt_ray.serving.live import LiveSpace
    from jeirt_ray.serving.settings import RouterConfig
    reg, space, _ = registry
    unpriced = dataclasses.replace(space, metadata={k: v for k, v in space.metadata.items() if k != "prices"})
    reg.promote("serve-unpriced", reg.register(unpriced, "serve-unpriced"), "champion")
    capped = RouterConfig(learning={"enabled": True, "explore": 0.2, "explore_usd_per_1k": 1.0})
    starting = LiveSpace("serve-unpriced", "hashing-384", reg.tracking_uri)
    with pytest.raises(ValueError, match="explore_usd_per_1k bounds what exploring spends.*usd_per_call"):
        starting.configure(capped)
    live = LiveSpace("serve-unpriced", "hashing-384", reg.tracking_uri)
    live.configure(RouterConfig())
    live.configure(capped)
    assert live.config.learning.explore_usd_per_1k is None and live.version is not None
    live.configure(capped.model_copy(update={"usd_per_call": {m: 0.01 for m in space.model_names}}))
    assert live.config.learning.explore_usd_per_1k == 1.0 and live.current().priced


@pytest.fixture(scope="module")
def service(registry, tmp_path_factory):
    from jeirt_ray.serving.deployment.deploy import deploy, load_config
    raw = yaml.safe_load((ROOT / "deployments" / "local.yaml").read_text())
    app = raw["applications"][0]
    app["args"]["encoder"] = "hashing"
    # production's shape (an Encoder deployment of its own); test_cluster.py's autoscaling test runs local.yaml's
    app["args"]["encoder_placement"] = "deployment"
    app["deployments"].append({"name": "Encoder", "max_ongoing_requests": 64, "ray_actor_options": {}})
    for d in app["deployments"]:  # two routers and two encoders, so that one can be killed under load
        d["ray_actor_options"]["num_cpus"] = 0.25
        if d["name"] in ("Router", "Encoder"):
            d["num_replicas"] = 2
    router = next(d for d in app["deployments"] if d["name"] == "Router")
    router["user_config"]["refresh_s"] = 1
    logs = tmp_path_factory.mktemp("decisions")
    SERVED["decisions"], SERVED["feedback_url"] = logs / "log", f"sqlite:///{logs / 'feedback.db'}"
    router["user_config"]["decisions"] = {"path": str(SERVED["decisions"]), "feedback_url": SERVED["feedback_url"],
                                          "flush_s": 0.5}
    router["user_config"]["learning"] = {"enabled": True, "poll_s": 0.5, "explore": 0.5}
    router["user_config"]["shadow"] = {"alias": "challenger", "share": 1.0}
    path = tmp_path_factory.mktemp("cfg") / "local.yaml"
    path.write_text(yaml.safe_dump(raw))
    with local_ray():
        config = load_config(path, model=NAME, port=free_port())
        SERVED["config"] = config
        yield deploy(config)


def _models(url):
    return httpx.get(f"{url}/v1/models", timeout=30).json()


def test_http_route_models_health_and_chat(service, registry):
    _, space, prep = registry
    assert httpx.get(f"{service}/health", timeout=30).json()["status"] == "ok"
    models = _models(service)
    # onboarding tests of this module may have run first (random order) and added LLMs and versions
    served = [m["id"] for m in models["data"]]
    assert served[:len(space.model_names)] == space.model_names
    assert int(models["data"][0]["registry_version"]) >= 1
    r = httpx.post(f"{service}/v1/route", json={"queries": [str(t) for t in prep.data.texts[:3]], "top_k": 3},
                   timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    assert len(body["results"]) == 3 and all(d["chosen"] in served for d in body["results"])
    assert all(d["nearest_benchmark"] in set(prep.data.benchmarks) for d in body["results"])
    chat = httpx.post(f"{service}/v1/chat/completions", timeout=30, json={
        "model": "auto", "messages": [{"role": "system", "content": "be brief"},
                                      {"role": "user", "content": str(prep.data.texts[1])}]})
    assert chat.status_code == 200, chat.text
    assert chat.json()["model"] in served
    assert chat.json()["routing"]["chosen"] == chat.json()["model"]


def test_models_page_by_page_candidates_by_glob_and_the_llms_that_answer_alike(service, registry):
    """A zoo's doors: GET /v1/models a page at a time (limit, after; a name filter), candidates as a
    glob in route and chat (header too), a filter that leaves no LLM a 400 naming it, a size bound
    on a space without sizes a 400 saying so, and GET /v1/similar."""
    everything = httpx.get(f"{service}/v1/models", params={"limit": 1000}, timeout=30).json()
    names = [m["id"] for m in everything["data"]]
    assert everything["total"] == len(names) >= 16 and not everything["has_more"]
    paged, after = [], None
    while True:
        page = httpx.get(f"{service}/v1/models", params={"limit": 5, **({"after": after} if after else {})},
                         timeout=30).json()
        paged += [m["id"] for m in page["data"]]
        after = page["last_id"]
        if not page["has_more"]:
            break
    assert paged == names
    found = httpx.get(f"{service}/v1/models", params={"contains": "LLM-0"}, timeout=30).json()["data"]
    assert [m["id"] for m in found] == [n for n in names if "llm-0" in n] and found[0]["params_b"] is None
    assert httpx.get(f"{service}/v1/models", params={"after": "nobody"}, timeout=30).status_code == 404
    assert httpx.get(f"{service}/v1/models", params={"limit": 0}, timeout=30).status_code == 422
    query = str(registry[2].data.texts[0])
    r = httpx.post(f"{service}/v1/route", json={"query": query, "candidates": "*LLM-0[12]", "top_k": None},
                   timeout=30)
    assert r.status_code == 200, r.text
    assert {s["model"] for s in r.json()["results"][0]["scores"]} == {"synthetic-llm-01", "synthetic-llm-02"}
    none = httpx.post(f"{service}/v1/route", json={"query": query, "candidates": ["gpt-*"]}, timeout=30)
    assert none.status_code == 400 and "no LLM of the space's" in none.json()["error"] and "gpt-*" in none.json()["error"]
    sized = httpx.post(f"{service}/v1/route", json={"query": query, "candidates": {"max_params_b": 8}}, timeout=30)
    assert sized.status_code == 400 and "knows no LLM's size" in sized.json()["error"]
    chat = httpx.post(f"{service}/v1/chat/completions", headers={"x-jeirt-candidates": "*llm-03,*llm-04"}, timeout=30,
                      json={"messages": [{"role": "user", "content": query}]})
    assert chat.status_code == 200 and chat.json()["model"] in ("synthetic-llm-03", "synthetic-llm-04"), chat.text
    near = httpx.get(f"{service}/v1/similar", params={"llm": "synthetic-llm-01", "k": 3}, timeout=30)
    assert near.status_code == 200, near.text
    rows = near.json()["similar"]
    assert len(rows) == 3 and "synthetic-llm-01" not in [x["llm"] for x in rows]
    assert rows[0]["agreement"] >= rows[-1]["agreement"] and rows[0]["shared"] > 20
    assert httpx.get(f"{service}/v1/similar", params={"llm": "nobody"}, timeout=30).status_code == 404


def test_decisions_are_logged_and_graded_once_per_source(service, registry):
    """Each query of a routed batch is a row of the decision log (its encoder vector, never its
    text); feedback on it, from whichever replica, is recorded once per source, with what learning
    needs; unknown, future, expired-looking and conflicting feedback is a 4xx."""
    import pyarrow.parquet as pq

    from jeirt_ray.feedback import FeedbackStore, new_id
    _, _, prep = registry
    texts = [str(t) for t in prep.data.texts[5:7]]
    r = httpx.post(f"{service}/v1/route", json={"queries": texts, "top_k": 1}, headers=ADMIN, timeout=30)
    assert r.status_code == 200, r.text
    decision_id, chosen = r.json()["id"], r.json()["results"][1]["chosen"]
    assert r.headers["x-jeirt-request-id"] == decision_id and len(r.json()["results"][1]["scores"]) == 1

    def feedback(**body):
        return httpx.post(f"{service}/v1/feedback", json={"id": decision_id, "query_index": 1, **body}, headers=ADMIN,
                          timeout=30)
    # at once, on either replica (the other waits for the log's write: flush_s 0.5)
    first, repeat = feedback(score=1.0), feedback(score=1.0)
    assert first.status_code == 200 and first.json()["status"] == "recorded", first.text
    assert repeat.status_code == 200 and repeat.json() == {"id": decision_id, "query_index": 1, "source": "user",
                                                           "llm": chosen, "status": "unchanged"}
    assert feedback(score=0.0).status_code == 409
    assert feedback(score=0.0, source="judge").json()["status"] == "recorded"
    assert feedback(score=1.0, source="key", llm="no-such-llm").status_code == 409
    assert feedback(score=1.0, query_index=2).status_code == 404
    for other, status in ((new_id(), 404), ("f" * 28, 404), (new_id(time.time() - 40 * 86400), 404), ("x1", 422)):
        assert httpx.post(f"{service}/v1/feedback", json={"id": other, "score": 1}, headers=ADMIN,
                          timeout=30).status_code == status, other

    table = pq.read_table(SERVED["decisions"]).to_pandas()
    rows = table[table["id"] == decision_id].sort_values("query_index")
    assert list(rows["query_index"]) == [0, 1] and list(rows["route"]) == ["route", "route"]
    assert rows["query"].isna().all() and all(len(e) == 384 for e in rows["embedding"])
    assert rows.iloc[1]["chosen"] == chosen and len(rows.iloc[1]["candidates"]) == len(rows.iloc[1]["p_correct"]) > 1
    # the service explores (learning.explore 0.5): each choice logged with the probability it had
    np.testing.assert_allclose(rows["propensity"], [d["propensity"] for d in r.json()["results"]], rtol=1e-6)
    assert ((rows["propensity"] > 0) & (rows["propensity"] <= 1)).all()
    graded = [g for g in FeedbackStore(SERVED["feedback_url"]).since() if g["id"] == decision_id]
    assert sorted((g["source"], g["score"]) for g in graded) == [("judge", 0.0), ("user", 1.0)]
    assert all(g["llm"] == chosen and len(g["embedding"]) == 384 for g in graded)
    # both replicas learn the two grades (health is answered by either; learning.poll_s 0.5)
    assert wait_for(lambda: all(httpx.get(f"{service}/health", headers=ADMIN, timeout=30).json()["learning"]["applied"]
                                >= 2 for _ in range(8)), timeout=15)
    def explored_somewhere():  # a replica counts the queries it explored on once its learner attached
        for _ in range(4):
            last.append(httpx.post(f"{service}/v1/route", json={"queries": texts}, headers=ADMIN, timeout=30).json()["id"])
        states.extend(httpx.get(f"{service}/health", headers=ADMIN, timeout=30).json() for _ in range(8))
        return max(s["learning"]["exploration"]["explored"] for s in states) >= 1  # /v1/route raises no allowance
    states, last = [], []
    assert wait_for(explored_somewhere, timeout=30), [s["learning"] for s in states[-8:]]
    assert all(s["learning"]["explore"] == 0.5 for s in states)
    # the challenger (looked up every refresh_s) routes the same queries in shadow (share 1), logged
    # beside with the same id
    assert wait_for(lambda: len(_shadow_rows(last[-1])) == 2, timeout=15), str(httpx.get(f"{service}/health", headers=ADMIN, timeout=30).json()["shadow"])
    shadowed = _shadow_rows(last[-1])
    assert sorted(r["query_index"] for r in shadowed) == [0, 1]
    assert all(r["space"].startswith(f"{NAME}/") and r["query"] is None for r in shadowed)
    shadow = httpx.get(f"{service}/health", headers=ADMIN, timeout=30).json()["shadow"]
    assert shadow["alias"] == "challenger" and shadow["space"].startswith(f"{NAME}/") and "error" not in shadow
    written = table.drop(columns=["embedding", "p_correct", "expected_cost"]).astype(str).to_string()  # Parquet is compressed
    written += str(FeedbackStore(SERVED["feedback_url"]).since())
    assert TOKEN not in written and texts[1][:40] not in written


def test_feedback_stamped_in_the_future_cannot_stall_a_replica(service, registry):
    """Ids stamped 55 s ahead are refused at once (they used to sleep ~56 s in the replica's worker
    threads, which key checks and routes share); ids 3 s ahead (clock skew) wait at most flush_s + 1 s,
    on the event loop. Twenty of them in flight, a chat still answers within a second."""
    from jeirt_ray.feedback import new_id
    _, _, prep = registry
    ahead = [new_id(time.time() + 55) for _ in range(10)] + [new_id(time.time() + 3) for _ in range(10)]

    def send(decision_id):
        return httpx.post(f"{service}/v1/feedback", json={"id": decision_id, "score": 1}, headers=ADMIN,
                          timeout=120).status_code
    with concurrent.futures.ThreadPoolExecutor(len(ahead)) as pool:
        sent = [pool.submit(send, i) for i in ahead]
        time.sleep(0.5)  # in the replicas by now
        start = time.perf_counter()
        chat = httpx.post(f"{service}/v1/chat/completions", timeout=30, json={
            "model": "auto", "messages": [{"role": "user", "content": str(prep.data.texts[2])}]})
        took = time.perf_counter() - start
        codes = [f.result() for f in sent]
    assert chat.status_code == 200 and took < 1.0, (chat.status_code, took)
    assert codes == [404] * len(ahead)


def _shadow_rows(decision_id: str) -> list[dict]:
    import pyarrow.parquet as pq

    from jeirt_ray.feedback.log import shadow_root
    path = Path(shadow_root(str(SERVED["decisions"])))
    if not path.exists():
        return []
    rows = pq.read_table(path, columns=["id", "query_index", "space", "query"]).to_pylist()
    return [r for r in rows if r["id"] == decision_id]


def test_jeirt_route_offers_every_setting_of_the_route(service, registry):
    """`jeirt route` sends each routing setting the HTTP route takes: candidates and min_p narrow
    the choice; a cost policy on a service without prices is the service's 409, exit 2."""
    from typer.testing import CliRunner

    from jeirt_ray.cli.main import app
    _, space, prep = registry
    allowed = space.model_names[2:4]
    runner = CliRunner()
    question = str(prep.data.texts[0])
    args = ["route", question, "--url", service, "--policy", "most_likely", "--top-k", "2", "--min-p", "0"]
    r = runner.invoke(app, args + [x for name in allowed for x in ("--candidate", name)])
    assert r.exit_code == 0, r.output
    chosen = r.output.split()[0]
    assert chosen in allowed and "policy most_likely" in r.output
    r = runner.invoke(app, ["route", question, "--url", service, "--policy", "budget", "--budget-per-1k", "1"])
    assert r.exit_code == 2 and "409" in r.output and "need prices" in r.output
    r = runner.invoke(app, ["route", question, "--url", service, "--policy", "cheapest"])
    assert r.exit_code == 2 and "quality_target" in r.output


@pytest.mark.parametrize("path, body, headers, status, message", [
    ("/v1/route", {"query": ""}, {}, 422, "query"),
    ("/v1/route", {"query": " \t\n"}, {}, 422, "pattern"),
    ("/v1/route", {"queries": ["q"] * 65}, {}, 422, "at most 64"),
    ("/v1/route", {"query": "q", "top_k": True}, {}, 422, "top_k"),  # the schema's integer, not a boolean
    ("/v1/route", {"query": "q", "margin": "0.1"}, {}, 422, "margin"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "stream": "yes"}, {}, 422, "stream"),
    ("/v1/route", {"query": "q", "candidates": ["gpt-9"]}, {}, 404, "unknown candidate"),
    ("/v1/route", {"query": "q", "policy": "cost_weighted"}, {}, 409, "need prices"),
    ("/v1/chat/completions", {"messages": [{"role": "system", "content": "x"}]}, {}, 422, "no user message"),
    ("/v1/onboard", {"model": "m", "responses": [{"question_id": "q", "label": 1}]}, {}, 401, "API key"),
    ("/v1/onboard", {"model": "m", "responses": [{"question_id": "q", "label": 1}]},
     {"authorization": f"Bearer {TOKEN}x"}, 401, "unknown or revoked API key"),
    ("/v1/route", {"query": "q"}, {"authorization": "Bearer jrk_00000000_forged-forged-forged"}, 401, "unknown"),
])
def test_http_bad_requests_get_4xx_with_one_error_shape(service, path, body, headers, status, message):
    r = httpx.post(f"{service}{path}", json=body, headers=headers, timeout=30)
    assert r.status_code == status, r.text
    assert set(r.json()) == {"error", "detail"} and message in r.json()["error"]
    assert httpx.get(f"{service}/health", timeout=30).json()["status"] == "ok"  # still serving


@pytest.mark.parametrize("path, content, status", [
    ("/v1/route", b"{not json", 422), ("/v1/route", b"{\"query\": \"\xc3\x28\"}", 400),
    # half a UTF-16 pair escaped alone is valid JSON but no text: the schema refuses it, in a
    # field or in the name of a key passed on upstream
    ("/v1/route", b'{"query": "a \\ud800"}', 422),
    ("/v1/chat/completions", b'{"messages": [{"\\ud800": null, "role": "user", "content": "0"}]}', 422),
    # or in the value of a field passed on untouched (accepted before; the fuzzer met a 500 where it
    # was encoded on its way on)
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "0", "0": ["\\udfff"]}]}', 422),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "0"}], "seed": {"a": "\\ud800"}}', 422)])
def test_http_unreadable_bodies_are_4xx(service, path, content, status):
    r = httpx.post(f"{service}{path}", content=content, headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == status and "error" in r.json(), r.text


def test_http_body_cap_answers_413_before_reading(service):
    from jeirt_ray.serving.schemas import MAX_BODY_BYTES
    big = b'{"query": "' + b"a" * MAX_BODY_BYTES + b'"}'
    r = httpx.post(f"{service}/v1/route", content=big, headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 413 and "bytes" in r.json()["error"]

    def chunks():  # no Content-Length: the cap counts the streamed chunks
        yield b'{"query": "'
        for _ in range(MAX_BODY_BYTES // 2**16 + 1):
            yield b"a" * 2**16
        yield b'"}'
    r = httpx.post(f"{service}/v1/route", content=chunks(), headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 413
    assert httpx.post(f"{service}/v1/route", json={"query": "q"}, timeout=30).status_code == 200


def test_onboarding_without_a_key_is_401_before_its_body_is_read(service):
    """A 40 MB onboarding body without credentials: 401 at once (not a 422 after parsing it)."""
    def chunks():
        yield b'{"model": "m", "responses": ['
        for _ in range(40 * 16):
            yield b'{"question_id": "q", "label": 1},' * 1800
        yield b'{"question_id": "q", "label": 1}]}'
    start = time.perf_counter()
    r = httpx.post(f"{service}/v1/onboard", content=chunks(), headers={"content-type": "application/json"},
                   timeout=60)
    assert r.status_code == 401 and "API key" in r.json()["error"] and r.headers["www-authenticate"] == "Bearer"
    assert time.perf_counter() - start < 5


def test_onboard_plan_over_http(service, registry):
    """POST /v1/onboard/plan: needs the onboard scope; plans new questions of the served space."""
    reg, space, prep = registry
    ids = [str(q) for q in prep.data.question_ids[:3]]
    body = {"model": "newcomer", "answered": [{"question_id": q, "label": 1} for q in ids], "k": 5}
    assert httpx.post(f"{service}/v1/onboard/plan", json=body, timeout=60).status_code == 401
    r = httpx.post(f"{service}/v1/onboard/plan", json=body, headers=ADMIN, timeout=60)
    assert r.status_code == 200, r.text
    out = r.json()
    planned = [q["question_id"] for q in out["questions"]]
    assert len(set(planned)) == 5 and not set(planned) & set(ids) and out["answered"] == 3
    assert 0 <= out["predicted"]["overall"]["low"] <= out["predicted"]["overall"]["high"] <= 1
    bad = httpx.post(f"{service}/v1/onboard/plan", headers=ADMIN, timeout=60,
                     json={**body, "answered": [{"question_id": "nope", "label": 1}]})
    assert bad.status_code == 404 and "not questions of this space" in bad.json()["error"]
    twice = httpx.post(f"{service}/v1/onboard/plan", headers=ADMIN, timeout=60,
                       json={**body, "answered": body["answered"] + body["answered"][:1]})
    assert twice.status_code == 409 and "given twice" in twice.json()["error"]
    assert {"vector_width", "model_accuracy", "correction_weight", "random_answers"} <= set(out["predicted"]["overall"])
    from jeirt_ray.model.onboarding_defaults import PURPOSE_STRATEGY, random_share
    for purpose, strategy in PURPOSE_STRATEGY.items():  # the purpose picks the strategy: its share drawn at random
        r = httpx.post(f"{service}/v1/onboard/plan", headers=ADMIN, timeout=60, json={**body, "purpose": purpose})
        assert sum(q["gain"] is None for q in r.json()["questions"]) == round(5 * random_share(strategy, 3)), purpose
    wrong = httpx.post(f"{service}/v1/onboard/plan", headers=ADMIN, timeout=60, json={**body, "purpose": "fun"})
    assert wrong.status_code == 422 and "purpose" in wrong.text


def test_onboard_promote_is_picked_up_live_and_a_bad_version_is_not(service, registry):
    reg, space, prep = registry
    auth = {"authorization": f"Bearer {TOKEN}"}
    data = prep.data
    mine = data.m_idx == 0
    responses = [{"question_id": str(data.question_ids[q]), "label": float(y)}
                 for q, y in zip(data.q_idx[mine][:300], data.labels[mine][:300])]
    bad = httpx.post(f"{service}/v1/onboard", headers=auth, timeout=60,
                     json={"model": "x", "responses": [{"question_id": "nope", "label": 1.0}]})
    assert bad.status_code == 404 and "unknown question_id" in bad.json()["error"]
    latest = max(v["version"] for v in reg.versions(NAME))
    r = httpx.post(f"{service}/v1/onboard", headers=auth, timeout=60,
                   json={"model": "newcomer", "responses": responses, "promote": True, "suggest": 3})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["version"] > latest and out["promoted_to"] == "champion" and len(out["next_questions"]) == 3
    assert out["heldout"]["test_accuracy"] > 0.5
    good = str(out["version"])
    # the router re-resolves the alias (refresh_s: 1 in this test) without a restart
    # every Router replica (two here) has it: a few answers in a row
    assert wait_for(lambda: all(_models(service)["data"][0]["registry_version"] == good for _ in range(4)),
                     timeout=90)  # each replica downloads the new version from the registry
    assert "newcomer" in [m["id"] for m in _models(service)["data"]]
    routed = httpx.post(f"{service}/v1/route", json={"query": "q", "candidates": ["newcomer"]}, timeout=30)
    assert routed.status_code == 200 and routed.json()["results"][0]["chosen"] == "newcomer"

    # a version trained on another encoder cannot serve this encoder: the router keeps the good one
    with broken_champion(reg, good, service):
        time.sleep(3)
        assert _models(service)["data"][0]["registry_version"] == good
        assert httpx.post(f"{service}/v1/route", json={"query": "q"}, timeout=30).status_code == 200
        health = httpx.get(f"{service}/health", timeout=30, headers=ADMIN).json()
        assert health["status"] == "degraded" and "hashing-999" in health["registry"]["error"]
        assert httpx.get(f"{service}/health", timeout=30).json() == {"status": "degraded"}  # no details without a key


@contextlib.contextmanager
def broken_champion(reg, good: str, service: str):
    """@champion on a version trained on another encoder (hashing-999) for the duration, then back
    on version `good` and every replica healthy again, so that no other test meets a broken alias."""
    from jeirt_ray.model.space import CoreSpace
    broken = dataclasses.replace(CoreSpace.load(reg.download(f"models:/{NAME}/{good}")), encoder_id="hashing-999")
    reg.promote(NAME, reg.register(broken, NAME), "champion")
    try:
        yield
    finally:
        reg.promote(NAME, int(good), "champion")
        assert wait_for(lambda: all(httpx.get(f"{service}/health", timeout=30).json()["status"] == "ok"
                                     for _ in range(6)), timeout=90)


def test_concurrent_onboardings_keep_each_others_models(service, registry):
    """Each builds on what @champion serves and promotes only over that version (compare-and-set),
    so the champion ends with both LLMs and every earlier one; onboarding an LLM the space has
    already is a 409 unless `replace` says so."""
    reg, _, prep = registry
    data = prep.data
    auth = {"authorization": f"Bearer {TOKEN}"}

    def onboard(name, m, **extra):
        mine = data.m_idx == m
        responses = [{"question_id": str(data.question_ids[q]), "label": float(y)}
                     for q, y in zip(data.q_idx[mine][:200], data.labels[mine][:200])]
        for _ in range(3):  # a 409 from the compare-and-set says: run again on what the alias serves now
            r = httpx.post(f"{service}/v1/onboard", headers=auth, timeout=120,
                           json={"model": name, "responses": responses, "promote": True, **extra})
            if r.status_code != 409 or "moved" not in r.text:
                return r
        return r

    before = reg.load(f"models:/{NAME}@champion").model_names
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(onboard, ["twin-a", "twin-b"], [1, 2]))
    assert all(r.status_code == 200 for r in results), [r.text for r in results]
    names = reg.load(f"models:/{NAME}@champion").model_names
    assert {"twin-a", "twin-b", *before} <= set(names)  # each kept the other's and every earlier LLM
    assert np.isfinite(results[0].json()["fit_seconds"])
    again = onboard("twin-a", 3)
    assert again.status_code == 409 and "replace" in again.json()["error"], again.text
    assert onboard("twin-a", 3, replace=True).status_code == 200


def _under_load(service, during, concurrency=4, after_s=2.0, answered=None):
    """Send /v1/route from `concurrency` threads while `during()` runs and `after_s` beyond; returns
    (requests, failed) and whatever `during` returned; `answered` (a list) gets (time, decision id)
    of each answer."""
    import threading
    stop, counts, lock = threading.Event(), [0, 0], threading.Lock()

    def client():
        with httpx.Client(timeout=30) as c:
            while not stop.is_set():
                try:
                    r = c.post(f"{service}/v1/route", json={"query": "what is 2 + 2?"})
                    ok = r.status_code == 200
                except httpx.HTTPError:
                    ok = False
                with lock:
                    counts[0] += 1
                    counts[1] += not ok
                    if ok and answered is not None:
                        answered.append((time.time(), r.json()["id"]))
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    result = during()
    time.sleep(after_s)
    stop.set()
    for t in threads:
        t.join()
    return counts, result


@pytest.mark.parametrize("deployment", ["Router", "Encoder"])
def test_killing_a_replica_under_load_fails_at_most_the_requests_in_flight(service, registry, deployment):
    import pyarrow.parquet as pq
    from ray import serve
    from ray.util.state import list_actors

    def alive():
        return {a.name for a in list_actors(address=ray.get_runtime_context().gcs_address, filters=[("state", "=", "ALIVE")])
                if a.class_name == f"ServeReplica:jeirt:{deployment}"}

    killed_at = []

    def kill_and_wait():
        before = alive()
        victim = sorted(before)[0]
        start = time.monotonic()
        killed_at.append(time.time())
        ray.kill(ray.get_actor(victim, namespace="serve"), no_restart=True)
        # recovered: a new replica (not one of those before) runs beside the survivor
        def recovered():
            now = alive()
            states = serve.status().applications["jeirt"].deployments[deployment].replica_states
            return len(now - before) == 1 and victim not in now and states.get("RUNNING", 0) == 2
        assert wait_for(recovered, timeout=120), (before, alive(), serve.status().applications["jeirt"])
        return time.monotonic() - start

    # the alias points at a version trained on another encoder: a new replica starts from the
    # newest version that can serve
    reg = registry[0]
    good = _models(service)["data"][0]["registry_version"]
    concurrency = 4
    answered = []
    with broken_champion(reg, good, service):
        (requests, failed), recovery_s = _under_load(service, kill_and_wait, concurrency, answered=answered)
    print(f"kill one {deployment} replica: {requests} requests, {failed} failed, back to 2 replicas in "
          f"{recovery_s:.1f} s")
    assert requests > 20 and failed <= concurrency
    # the decision log: a killed Router loses at most the rows it had not flushed, those answered in
    # its last flush_s (0.5) and a write's time before the kill lands (ray.kill is asynchronous: the
    # victim may answer for a moment after it is sent); a killed Encoder loses none
    time.sleep(2.0)  # the survivors' last flush
    logged = set(pq.read_table(SERVED["decisions"], columns=["id"]).column("id").to_pylist())
    lost = [t - killed_at[0] for t, d in answered if d not in logged]
    window = [t for t, _ in answered if -1.0 <= t - killed_at[0] <= 0.5]
    print(f"decision log: {len(lost)} of {len(answered)} answered decisions lost ({len(window)} answered from 1 s "
          f"before the kill to 0.5 s after; lost at {[round(t, 3) for t in lost]} s from it)")
    assert len(answered) > 20 and all(-1.0 <= t <= 0.5 for t in lost) and len(lost) < len(window)
    if deployment == "Encoder":
        assert not lost


def test_registry_outage_keeps_serving_reports_it_and_recovers(service, registry):
    """The SQLite registry locked by another writer: routing goes on with the loaded version,
    /health says so, and a version promoted after the lock is released is picked up."""
    import sqlite3
    reg, space, _ = registry
    db = os.environ["MLFLOW_TRACKING_URI"][len("sqlite:///"):]
    lock = sqlite3.connect(db, timeout=30)
    lock.execute("BEGIN EXCLUSIVE")
    try:
        def degraded():
            h = [httpx.get(f"{service}/health", timeout=30, headers=ADMIN).json() for _ in range(4)]  # both replicas
            return all(not x["registry"]["reachable"] and x["status"] == "degraded" for x in h)
        assert wait_for(degraded, timeout=60)
        start = time.perf_counter()
        r = httpx.post(f"{service}/v1/route", json={"query": "still there?"}, timeout=30)
        assert r.status_code == 200 and time.perf_counter() - start < 2
    finally:
        lock.rollback()
        lock.close()
    version = reg.register(space, NAME)
    reg.promote(NAME, version, "champion")
    assert wait_for(lambda: all(_models(service)["data"][0]["registry_version"] == str(version) for _ in range(4)),
                     timeout=60)
    assert all(httpx.get(f"{service}/health", timeout=30).json()["status"] == "ok" for _ in range(4))


@pytest.mark.parametrize("auth", ["token", "no token"])
def test_schema_driven_fuzzer_finds_nothing(service, auth):
    """Schemathesis, all of its checks, against the live service's own /openapi.json: every
    response (errors included) matches the declared schema, schema-valid requests are accepted,
    invalid ones refused with 4xx, no 5xx. With the token it onboards (registering versions): the
    tests that look at versions compare with what the registry holds when they run. Without it
    every onboarding is refused, the routes are the token run's: fewer examples."""
    import subprocess
    import sys
    cmd = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(ROOT / "tests" / "schemathesis.toml"),
           "run", f"{service}/openapi.json", "--checks", "all",
           "--max-examples", "50" if auth == "token" else "25", "--seed", "1", "--no-color"]
    if auth == "token":
        cmd += ["-H", f"Authorization: Bearer {TOKEN}"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    summary = [line for line in out.stdout.splitlines() if "generated" in line]
    print(auth, summary)
    assert out.returncode == 0, out.stdout[-6000:]
    assert summary and " passed" in summary[-1]


def test_onboarding_builds_on_the_served_version_never_one_of_another_encoder(registry):
    """A newer version trained on another encoder is passed over (its encoder would spread to the
    onboarded version, which no router of this service could serve)."""
    import asyncio

    from jeirt_ray.serving.onboarding import OnboardingService
    from jeirt_ray.serving.schemas import OnboardRequest
    reg, space, prep = registry
    broken = reg.register(dataclasses.replace(space, encoder_id="hashing-999"), NAME)
    service = OnboardingService(NAME, "hashing-384", reg.tracking_uri)
    request = OnboardRequest(model="side-llm", responses=[{"question_id": str(q), "label": float(i % 2)}
                                                          for i, q in enumerate(prep.data.question_ids[:20])])
    out = asyncio.run(service.onboard(request, None))
    assert out["based_on_version"] < broken < out["version"]
    assert reg.load(f"models:/{NAME}/{out['version']}").encoder_id == "hashing-384"


def test_a_replica_no_node_can_take_is_named_with_its_needs_and_the_nodes_free(service):
    """A second application beside the module's service, its Router asking for 64 CPUs of a
    2-CPU cluster: the deploy says so in one line once Serve reports the replica waiting (after
    30 s), and ends with it at its timeout; the service itself is left as it was."""
    from ray import serve

    from jeirt_ray.serving.deployment.deploy import deploy
    config = SERVED["config"]
    big = config.applications[0].model_copy(deep=True)
    big.name, big.route_prefix = "unplaceable", "/unplaceable"
    for d in big.deployments:
        d.ray_actor_options.num_cpus = 64 if d.name == "Router" else 0
    both = config.model_copy(update={"applications": [*config.applications, big]})
    said = []
    try:
        with pytest.raises(TimeoutError) as e:
            deploy(both, timeout_s=45, announce=said.append)
    finally:
        serve.delete("unplaceable")
    line = str(e.value)
    assert re.search(r"Router cannot be placed: a replica needs CPU 64; free per node: \S+ CPU [\d.]+", line), line
    assert "no node has that much in all" in line and "Onboarder" not in line
    assert len(said) == 1 and said[0] in line
    assert httpx.get(f"{service}/health", timeout=30).json()["status"] == "ok"
