"""Serving: the routing core and policies, request validation and onboarding without a cluster;
Serve's local testing mode; and one real `serve` deployment on 127.0.0.1 driven over HTTP."""

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from jeirt_ray.encoders import HashingEncoder
from jeirt_ray.experiments.methods import train_space
from jeirt_ray.experiments.prepare import prepare
from jeirt_ray.model.onboarding import fit_row, onboard
from jeirt_ray.model.train import TrainConfig
from jeirt_ray.routing.router import RequestError, SpaceRouter
from jeirt_ray.serving.schemas import OnboardRequest, RouteRequest

ROOT = Path(__file__).resolve().parents[1]
CFG = TrainConfig(kind="jeirt", dim=16, lr=3e-3, max_epochs=60, patience=8)


@pytest.fixture(scope="module")
def prep(synthetic):
    return prepare(synthetic, HashingEncoder(384), progress=False)


@pytest.fixture(scope="module")
def space(prep):
    return train_space(prep, CFG, members=2, progress=False)


def test_tuned_policy_routes_as_evaluated(space, prep):
    """The default policy applies what tune_routing chose on validation, with the same signals,
    and respects a candidate list; without a stored policy it is the argmax."""
    from jeirt_ray.routing.policies import SignalBuilder
    from jeirt_ray.experiments.routing_choice import tune_routing
    tuned, policy, _ = tune_routing(space, prep)
    core = SpaceRouter(tuned)
    x = prep.X[prep.split.questions(2)[:40]]
    builder = SignalBuilder.from_arrays(tuned.routing, tuned.metadata["routing_policy"]["benchmarks"])
    expected = policy.choose(builder.build(tuned.predict_proba(x), x), np.ones((len(x), len(tuned.model_names)), bool))
    res = core.route(x)
    assert [r["chosen"] for r in res] == [tuned.model_names[i] for i in expected]
    assert all(r["policy"] == "tuned" for r in res)
    two = tuned.model_names[:2]
    assert {r["chosen"] for r in core.route(x, candidates=two)} <= set(two)


def test_most_likely_is_the_argmax_and_top_k(space, prep):
    core = SpaceRouter(space)
    x = prep.X[:7]
    res = core.route(x, top_k=3)
    probs = space.predict_proba(x)
    for r, p in zip(res, probs):
        assert r["chosen"] == space.model_names[int(p.argmax())]
        assert len(r["scores"]) == 3 and r["scores"][0]["model"] == r["chosen"]
        assert r["p_correct"] == pytest.approx(float(p.max()), abs=1e-6)


def test_cost_policies_and_budget(space, prep):
    names = space.model_names
    costs = {n: float(i + 1) for i, n in enumerate(names)}  # names[0] cheapest
    core = SpaceRouter(space, costs)
    x = prep.X[:5]
    probs = space.predict_proba(x)
    heavy = core.route(x, policy="cost_weighted", cost_weight=100.0)
    assert all(r["chosen"] == names[0] for r in heavy)  # price dominates
    margin = core.route(x, policy="cheapest_within_margin", margin=0.05)
    for r, p in zip(margin, probs):
        ok = [names[j] for j in np.flatnonzero(p >= p.max() - 0.05)]
        assert r["chosen"] == min(ok, key=costs.get) and r["expected_cost"] == costs[r["chosen"]]
    capped = core.route(x, max_cost=3.0)
    assert all(costs[r["chosen"]] <= 3.0 for r in capped)
    with pytest.raises(RequestError, match="no candidate LLM costs at most max_cost 0.5 USD per call"):
        core.route(x, max_cost=0.5)
    old = RouteRequest(query="q", budget=3.0)  # the old name of max_cost still works
    assert old.max_cost == 3.0 and old.options()["max_cost"] == 3.0


def test_route_errors_name_the_problem(space, prep):
    core = SpaceRouter(space)
    with pytest.raises(RequestError, match=r"unknown candidate LLM\(s\) \['gpt-9'\]"):
        core.route(prep.X[:1], candidates=["gpt-9"])
    with pytest.raises(RequestError, match="need prices; none are configured"):
        core.route(prep.X[:1], policy="cost_weighted")
    with pytest.raises(ValueError, match="no price for"):
        SpaceRouter(space, {space.model_names[0]: 1.0})


def test_nearest_benchmark_of_training_questions(space, prep):
    core = SpaceRouter(space)
    rows = np.arange(0, len(prep.X), 37)
    res = core.route(prep.X[rows])
    hits = np.mean([r["nearest_benchmark"] == prep.data.benchmarks[i] for r, i in zip(res, rows)])
    assert hits > 0.5  # topics are what the synthetic benchmarks are made of


@pytest.mark.parametrize("body, message", [
    ({"query": ""}, "at least 1 character"),
    ({"query": " \t "}, "should match pattern"),
    ({"query": "x" * 9000}, "at most 8000 characters"),
    ({"queries": ["q"] * 65}, "at most 64 items"),
    ({"query": "a", "queries": ["b"]}, "exactly one of 'query'"),
    ({}, "exactly one of 'query'"),
    ({"query": "a", "top_k": 0}, "greater than or equal to 1"),
    ({"query": "a", "policy": "cheapest"}, "most_likely"),
    ({"query": "a", "promptt": 1}, "Extra inputs are not permitted"),
])
def test_route_request_validation(body, message):
    with pytest.raises(ValidationError, match=message):
        RouteRequest(**body)


@pytest.mark.parametrize("body", [
    {"query": "a"}, {"queries": ["a", "b"]}, {"query": "a", "queries": None}, {"query": " x "},
    {"query": "a", "queries": ["b"]}, {}, {"query": None, "queries": None}, {"query": " "}, {"queries": []},
])
def test_the_published_schema_accepts_exactly_what_the_service_accepts(body):
    """What a client generated from /openapi.json believes is what pydantic enforces."""
    import jsonschema
    from pydantic import TypeAdapter
    schema = TypeAdapter(RouteRequest).json_schema(ref_template="#/$defs/{model}")
    schema_ok = jsonschema.Draft202012Validator(schema).is_valid(body)
    try:
        RouteRequest(**body)
        service_ok = True
    except ValidationError:
        service_ok = False
    assert schema_ok == service_ok, body


def test_the_encoder_thread_runs_with_the_configured_torch_threads():
    """Ray sets OMP_NUM_THREADS to the replica's num_cpus, and torch's thread count is per calling
    thread: the forward, in a worker thread, must set it itself."""
    import asyncio

    import torch

    from jeirt_ray.serving.app import ThreadedEncoder
    seen = []
    enc = ThreadedEncoder("hashing", threads=2)
    real = enc.encoder.encode
    enc.encoder.encode = lambda texts: seen.append(torch.get_num_threads()) or real(texts)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = asyncio.run(enc.encode(["a question"]))
    finally:
        torch.set_num_threads(before)
    assert out.shape == (1, 384) and seen == [2]


@pytest.mark.parametrize("responses, message", [
    ([{"question_id": "q1", "label": 1.5}], "less than or equal to 1"),
    ([{"question_id": "q1", "label": float("nan")}], "label"),
    ([{"question_id": "q1", "text": "t", "label": 1}], "exactly one of 'question_id' or 'text'"),
    ([], "at least 1 item"),
])
def test_onboard_request_validation(responses, message):
    with pytest.raises(ValidationError, match=message):
        OnboardRequest(model="new", responses=responses)


def test_fit_row_recovers_a_vector():
    rng = np.random.default_rng(0)
    u = rng.normal(size=(4000, 8))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    norm = rng.uniform(0.5, 2.0, 4000)
    theta = rng.normal(size=8) * 2
    y = (rng.random(4000) < 1 / (1 + np.exp(-(u @ theta - norm)))).astype(float)
    fit = fit_row(u, norm, y, np.zeros(8), 100.0)
    assert np.corrcoef(fit.theta, theta)[0, 1] > 0.97
    assert np.all(np.linalg.eigvalsh(fit.cov) > 0)


def test_onboarding_a_held_out_llm(prep):
    """Train without one LLM, onboard it from its training responses: its predictions on test
    questions are about as good as the jointly trained space's, and the fit is fast."""
    import dataclasses

    from jeirt_ray.model.metrics import binary_metrics
    data, target = prep.data, 3
    name = str(data.models[target])
    joint = train_space(prep, CFG, members=1, progress=False)
    blind = dataclasses.replace(prep, split=dataclasses.replace(prep.split, heldout_models=[name]))
    base = train_space(blind, CFG, members=1, progress=False)
    part = prep.split.question_part[data.q_idx]
    mine_train = (part == 0) & (data.m_idx == target)
    mine_test = (part == 2) & (data.m_idx == target)
    res = onboard(base, name, prep.X[data.q_idx[mine_train]], data.labels[mine_train], suggest=5,
                  candidates=prep.X[:50], candidate_ids=[str(i) for i in range(50)])
    assert res.report["fit_seconds"] < 1.0 and len(res.report["next_questions"]) == 5
    assert res.space.model_names == base.model_names  # a known name is updated in place
    x_test = prep.X[data.q_idx[mine_test]]
    onb = binary_metrics(res.space.predict_proba(x_test)[:, target], data.labels[mine_test])
    jnt = binary_metrics(joint.predict_proba(x_test)[:, target], data.labels[mine_test])
    untrained = binary_metrics(base.predict_proba(x_test)[:, target], data.labels[mine_test])
    assert onb["test_accuracy"] > jnt["test_accuracy"] - 0.05
    assert onb["log_loss"] < untrained["log_loss"]  # the fit, not the untrained row, does the work
    added = res.space.with_model("brand-new", [np.zeros(CFG.dim)])
    assert added.model_names[-1] == "brand-new" and added.predict_proba(x_test[:2]).shape[1] == data.n_models + 1


def test_a_replica_that_no_node_can_take_is_explained_in_one_line():
    """The issue's case: 1-CPU nodes, one holding a Router (at most one per node), the other
    0.75 CPU free because a smaller deployment took the rest."""
    from jeirt_ray.serving.deployment.deploy import load_config
    from jeirt_ray.serving.deployment.placement import Node, needs_of, per_node_limit, stuck
    head = Node("10.0.0.1", {"CPU": 0.0}, {"CPU": 1.0}, replicas=1)
    worker = Node("10.0.0.2", {"CPU": 0.75}, {"CPU": 1.0})
    line = stuck("Router", {"CPU": 1.0}, 1, [head, worker])
    assert line == ("Router cannot be placed: a replica needs CPU 1, at most 1 per node; free per node: 10.0.0.1 CPU 0 "
                    "(holds 1); 10.0.0.2 CPU 0.75: free those resources, add a node, or lower its ray_actor_options")
    assert stuck("Router", {"CPU": 0.5}, 1, [head, worker]) is None  # fits the worker
    assert stuck("Router", {"CPU": 1.0}, None, [head, Node("10.0.0.2", {"CPU": 1.0}, {"CPU": 1.0})]) is None
    assert "no node has that much in all" in stuck("Encoder", {"CPU": 2.0, "GPU": 1.0}, None, [worker])
    production = {d.name: d for d in load_config(Path(__file__).parents[1] / "deployments/production.yaml")
                  .applications[0].deployments}
    assert needs_of(production["Encoder"]) == {"CPU": 2.0, "GPU": 1.0} and per_node_limit(production["Router"]) == 1
    assert per_node_limit(production["Onboarder"]) is None and needs_of(production["Router"]) == {"CPU": 1.0}


def test_the_onboarder_reserves_no_cpu_so_it_cannot_strand_a_router():
    """A Router wants a whole CPU on a node of its own; a deployment that reserves any part of a
    small node's CPU can leave it nowhere to go (the issue: 0.25 CPU on a 1-CPU worker)."""
    from jeirt_ray.serving.deployment.deploy import load_config
    from jeirt_ray.serving.deployment.placement import needs_of
    for name in ("local.yaml", "production.yaml"):
        config = load_config(Path(__file__).parents[1] / "deployments" / name)
        onboarder = next(d for d in config.applications[0].deployments if d.name == "Onboarder")
        assert "CPU" not in needs_of(onboarder), name
