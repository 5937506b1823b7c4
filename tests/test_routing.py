import dataclasses

import numpy as np
import pytest

from jeirt_ray.encoders import HashingEncoder
from jeirt_ray.experiments.methods import train_space
from jeirt_ray.experiments.prepare import prepare
from jeirt_ray.model.train import TrainConfig
from jeirt_ray.routing.frontier import cost_curve
from jeirt_ray.routing.outcomes import (available_argmax, baseline_routers, bootstrap_ci, routed_labels,
                                        train_rates)
from jeirt_ray.routing.policies import Policy, RoutingSignals, SignalBuilder, candidate_policies, policy_accuracy, select_policy

NAN = np.nan


def test_baseline_routers_by_hand():
    # training: model 0 is best overall, model 1 is best on benchmark "b"
    train_m = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    train_y = np.array([1, 1, 1, 0, 0, 0, 1, 1], dtype=float)
    train_b = np.array(["a", "a", "b", "b", "a", "a", "b", "b"])
    labels = np.array([[1, 0], [0, 1], [NAN, 1], [0, NAN]])  # test questions, NaN = unobserved
    test_b = np.array(["a", "b", "b", "a"])
    r = baseline_routers(labels, train_m, train_y, train_b, test_b)
    assert r["oracle"].tolist() == [1, 1, 1, 0]
    # best average = model 0 (0.75 vs 0.5); where it has no label, the next best available
    assert r["best_average"].tolist() == [1, 0, 1, 0]
    # per benchmark: a -> model 0 (1.0 vs 0.0), b -> model 1 (1.0 vs 0.5)
    assert r["per_benchmark_best"].tolist() == [1, 1, 1, 0]


def test_router_never_picks_unlabelled():
    labels = np.array([[NAN, 0.0, 1.0]])
    assert available_argmax(np.array([[9.0, 1.0, 0.0]]), ~np.isnan(labels)).tolist() == [1]
    with pytest.raises(ValueError, match="no label"):
        routed_labels(np.array([0]), labels)


def test_bootstrap_ci():
    v = np.random.default_rng(0).random(500)
    lo, hi = bootstrap_ci(v)
    assert lo < v.mean() < hi and hi - lo < 0.1


def test_train_rates_groups():
    rates = train_rates(2, np.array([0, 0, 1]), np.array([1.0, 0.0, 1.0]), np.array([0, 1, 1]), 2)
    assert rates[0, 0] == 1 and rates[1, 0] == 0 and rates[1, 1] == 1 and np.isnan(rates[0, 1])


def test_margin_policy_falls_back_to_best_average():
    s = RoutingSignals(p=np.array([[0.50, 0.55], [0.2, 0.9]]), prior=np.array([0.7, 0.6]))
    avail = np.ones((2, 2), bool)
    assert Policy().choose(s, avail).tolist() == [1, 1]
    assert Policy(name="margin", margin=0.1).choose(s, avail).tolist() == [0, 1]


def test_coverage_gate_leaves_p_alone_off_the_map():
    """Below its gate a query is scored by p alone; above it, the mix."""
    s = RoutingSignals(p=np.array([[0.6, 0.5], [0.6, 0.5]]), local={10: np.array([[0.2, 0.9], [0.2, 0.9]])},
                       coverage=np.array([0.9, 0.1]))
    mixed = Policy(name="local", a_local=0.5, k=10)
    gated = mixed.model_copy(update={"gate": 0.5})
    np.testing.assert_allclose(mixed.scores(s), [[0.4, 0.7], [0.4, 0.7]])
    np.testing.assert_allclose(gated.scores(s), [[0.4, 0.7], [0.6, 0.5]])
    assert gated.choose(s, np.ones((2, 2), bool)).tolist() == [1, 0]


def test_selection_with_held_out_benchmarks_keeps_in_distribution_accuracy():
    """With held-out signals, the best held out among the candidates within the tolerance of
    the best in distribution: not a better held-out candidate that loses in distribution."""
    labels = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    ident = RoutingSignals(p=labels.copy(), local={10: labels.copy()}, coverage=np.ones(4))
    # held out: p is wrong everywhere, local right; coverage low
    held = RoutingSignals(p=1 - labels, local={10: labels.copy()}, coverage=np.zeros(4))
    argmax, local = Policy(), Policy(name="local", a_local=1.0, k=10)
    gated = local.model_copy(update={"gate": 0.5})
    best, table = select_policy(ident, labels, [argmax, gated, local], held_out=[(held, labels)])
    assert best == local and [r["held_out_accuracy"] for r in table] == [0.0, 0.0, 1.0]
    # a held-out winner 0.5 below in distribution is out of bounds
    worse = RoutingSignals(p=labels.copy(), local={10: np.roll(labels, 1, axis=0)}, coverage=np.ones(4))
    held_bad_p = RoutingSignals(p=1 - labels, local={10: labels.copy()}, coverage=np.ones(4))
    best, _ = select_policy(worse, labels, [argmax, local], held_out=[(held_bad_p, labels)])
    assert best == argmax


@pytest.fixture(scope="module")
def routed():
    """Synthetic data whose LLMs have planted topic specialities, so a question-aware router
    must beat the best-on-average LLM."""
    from jeirt_ray.data.synthetic import generate
    data = generate(n_models=16, n_questions=3000, seed=1)
    prep = prepare(data, HashingEncoder(256), seed=0, progress=False)
    cfg = TrainConfig(kind="jeirt", dim=8, lr=3e-3, input_dropout=0.3, max_epochs=200, patience=15)
    space = train_space(prep, cfg, members=1, progress=False)
    return prep, space


def test_router_beats_best_average_on_planted_specialities(routed):
    prep, space = routed
    data = prep.data
    train = prep.pairs("train")
    tq, tm, ty = train.q.numpy(), train.m.numpy(), train.y.numpy()
    L = data.label_matrix()
    rows = prep.split.questions(2)
    labels = L[rows]
    base = baseline_routers(labels, tm, ty, data.benchmarks[tq], data.benchmarks[rows])
    # expected correctness under the true geometry, not the noisy labels
    p_true = data.extra["p_true"][rows]
    avail = ~np.isnan(labels)
    chosen = available_argmax(space.predict_proba(prep.X[rows]), avail)
    best_avg_model = available_argmax(np.tile(np.nanmean(L[prep.split.questions(0)], 0), (len(rows), 1)), avail)
    router_true = p_true[np.arange(len(rows)), chosen].mean()
    best_avg_true = p_true[np.arange(len(rows)), best_avg_model].mean()
    assert router_true > best_avg_true + 0.03
    assert routed_labels(chosen, labels).mean() > base["best_average"].mean()

    builder = SignalBuilder.fit(prep.X, tq, tm, ty, data.benchmarks, data.n_models, ks=(10, 50))
    val_rows = prep.split.questions(1)
    sig = builder.build(space.predict_proba(prep.X[val_rows]), prep.X[val_rows])
    cands = candidate_policies(ks=(10, 50))
    best, table = select_policy(sig, L[val_rows], cands)
    assert len(table) == len(cands)
    assert policy_accuracy(best, sig, L[val_rows]) == max(r["val_accuracy"] for r in table)


def test_cost_curve_trades_accuracy_for_cost():
    # model 0: expensive and always right; model 1: cheap and right half the time
    labels = np.array([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 0.0]])
    scores = np.tile([0.9, 0.5], (4, 1))
    curve = cost_curve(scores, np.array([10.0, 1.0]), labels)
    assert curve[0] == {"lambda": 0.0, "avg_cost": 10.0, "accuracy": 1.0}  # cost ignored
    assert curve[-1]["avg_cost"] == 1.0 and curve[-1]["accuracy"] == 0.5  # cheapest everywhere
    costs = [p["avg_cost"] for p in curve]
    assert costs == sorted(costs, reverse=True)


def test_tuned_policy_travels_with_the_space(routed, tmp_path):
    """tune_routing stores the policy and its signal arrays in the space; after a save/load the
    signals of new queries equal those of a builder fitted on the dataset, and the local signal
    is the KNN baseline's estimate."""
    from jeirt_ray.model.baselines import KNN
    from jeirt_ray.model.space import CoreSpace
    from jeirt_ray.experiments.routing_choice import tune_routing
    prep, space = routed
    untouched = dict(space.metadata)
    space, policy, table = tune_routing(space, prep)
    assert space.metadata["routing_policy"]["name"] == policy.name and len(table) > 10
    assert routed[1].metadata == untouched and not routed[1].routing  # the given space is unchanged
    loaded = CoreSpace.load(space.save(tmp_path / "s"))
    builder = SignalBuilder.from_arrays(loaded.routing, loaded.metadata["routing_policy"]["benchmarks"])
    rows = prep.split.questions(2)[:50]
    p = space.predict_proba(prep.X[rows])
    tq, tm, ty = (t.numpy() for t in (prep.pairs("train").q, prep.pairs("train").m, prep.pairs("train").y))
    fitted = SignalBuilder.fit(prep.X, tq, tm, ty, prep.data.benchmarks, prep.data.n_models).build(p, prep.X[rows])
    loaded_signals = builder.build(p, prep.X[rows])
    knn = KNN().fit(prep.X, prep.data.n_models, tq, tm, ty)
    nbrs = knn.neighbours(rows, max(builder.ks))  # the same list (the templated texts have ties)
    for k in builder.ks:
        np.testing.assert_allclose(loaded_signals.local[k], fitted.local[k], atol=1e-6)
        np.testing.assert_allclose(loaded_signals.local[k], knn.predict_all(rows, k, nbrs), atol=1e-6)
    np.testing.assert_allclose(loaded_signals.topic, fitted.topic, atol=1e-6)
    # chosen with benchmarks held out in turn; the serving path computes a gated policy's coverage
    assert space.metadata["routing_policy"]["held_out_benchmarks"] >= 2
    gated = Policy(name="topic", a_topic=0.5, gate=float(np.median(loaded_signals.coverage)))
    np.testing.assert_allclose(gated.scores(builder.build(p, prep.X[rows], gated)), gated.scores(loaded_signals))
    assert 0 < (loaded_signals.coverage >= gated.gate).mean() < 1
    # an LLM onboarded after tuning (one more column) is scored by its p alone
    wider = builder.build(np.hstack([p, np.full((len(rows), 1), 0.99)]), prep.X[rows])
    assert wider.local[builder.ks[0]].shape == (len(rows), prep.data.n_models + 1)
    assert np.all(wider.local[builder.ks[0]][:, -1] == 0.99) and wider.prior[-1] == 0.0


@pytest.mark.parametrize("unseen", [1, 4])
def test_tune_routing_with_benchmarks_absent_from_training(routed, unseen):
    """A user's own split may leave benchmarks with no training question (present only among
    validation/test questions): the topic signal covers the benchmarks it was trained on, and
    choosing and serving the policy work (this crashed with a core-dimension mismatch)."""
    from jeirt_ray.experiments.prepare import Prepared
    from jeirt_ray.experiments.routing_choice import tune_routing
    prep, space = routed
    held = np.flatnonzero(prep.split.question_part > 0)[:200]
    benchmarks = prep.data.benchmarks.astype(object).copy()
    benchmarks[held] = [f"routing-only-{i % unseen}" for i in range(len(held))]
    data = dataclasses.replace(prep.data, benchmarks=benchmarks.astype(str))
    moved = Prepared(data, prep.split, prep.X, prep.encoder_id)
    space, policy, table = tune_routing(space, moved)
    trained_on = sorted(set(data.benchmarks[prep.split.questions(0)]))
    assert space.metadata["routing_policy"]["benchmarks"] == trained_on
    builder = SignalBuilder.from_arrays(space.routing, trained_on)
    rows = held[:20]
    signals = builder.build(space.predict_proba(prep.X[rows]), prep.X[rows])
    assert signals.topic.shape == (len(rows), data.n_models) and np.isfinite(signals.topic).all()
    assert policy.choose(signals, np.ones((len(rows), data.n_models), bool)).shape == (len(rows),)


def _signals(n: int, informative: bool, seed: int = 0):
    """Two LLMs, each right on half the questions; p cannot tell which, the `local` signal can
    (informative) or is noise."""
    rng = np.random.default_rng(seed + 7)  # not choose_policy's own halves' seed
    first = rng.random(n) < 0.5
    labels = np.stack([first, ~first], axis=1).astype(float)
    p = np.tile([0.55, 0.5], (n, 1))
    local = labels * 0.8 + 0.1 if informative else rng.random((n, 2))
    return RoutingSignals(p=p, local={25: local}, prior=np.array([0.5, 0.5]), coverage=np.ones(n)), labels


def test_a_mixing_policy_is_kept_only_when_its_gain_is_clear():
    from jeirt_ray.routing.policies import choose_policy
    candidates = candidate_policies(ks=(25,), has_topic=False)
    signals, labels = _signals(400, informative=True)
    policy, _, evidence = choose_policy(signals, labels, candidates)
    assert policy.name == "local" and evidence["kept"] and evidence["val_gain_ci95"][0] > 0
    noise, labels = _signals(400, informative=False)
    policy, _, evidence = choose_policy(noise, labels, candidates)
    assert policy.name == "argmax" and not evidence["kept"] and evidence["val_gain_ci95"][0] <= 0
    # clear in distribution but a loss on a held-out benchmark: argmax
    bad, bad_labels = _signals(200, informative=True, seed=1)
    bad.local[25] = 1 - bad.local[25]  # the neighbours point the wrong way off the map
    policy, _, evidence = choose_policy(signals, _signals(400, informative=True)[1], candidates,
                                        held_out=[(bad, bad_labels)])
    assert policy.name == "argmax" and evidence["held_out_gain_ci95"][0] < 0


def test_a_huge_cost_weight_keeps_scores_finite():
    """Found by the fuzzer: cost_weight 1.6e308 x a cost overflowed to -inf, which JSON carries as
    null where the schema promises a number."""
    from jeirt_ray.routing.costs import cost_weighted_choice, cost_weighted_scores
    p = np.array([[0.6, 0.5, 0.4]])
    costs = np.array([257.0, 0.0, 3.0])
    scores = cost_weighted_scores(p, costs, 1.584274126704583e308)
    assert np.isfinite(scores).all() and scores[0, 1] == 0.5
    assert cost_weighted_choice(p, costs, 1.584274126704583e308).tolist() == [1]  # the free one
