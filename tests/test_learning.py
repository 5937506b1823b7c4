"""Routing that learns from its own traffic (jeirt_ray.learning): the posterior update, exploration
with propensities and a spend cap, the budget pacer, off-policy evaluation, and the simulation of
benchmarks/online.py on planted data."""

from __future__ import annotations

import numpy as np
import pytest

from jeirt_ray.encoders import HashingEncoder
from jeirt_ray.experiments import online_sim as sim
from jeirt_ray.experiments.methods import train_space
from jeirt_ray.experiments.prepare import prepare
from jeirt_ray.experiments.regions import RegionLearner
from jeirt_ray.learning import Explorer, OnlineState, Outcomes, Pacer, evaluate_policy, one_hot
from jeirt_ray.model.train import TrainConfig


@pytest.fixture(scope="module")
def world(synthetic):
    """A space trained without one benchmark (and one more kept for validation)."""
    held, val_cat = sim.choose_categories(synthetic, 1, seed=0)
    prep = prepare(synthetic, HashingEncoder(384), split=sim.held_out_split(synthetic, held + [val_cat], 0),
                   progress=False)
    space = train_space(prep, TrainConfig(kind="jeirt", dim=16, lr=3e-3, max_epochs=60), members=1, progress=False)
    return {"prep": prep, "space": space, "held": held, "val_cat": val_cat}


def test_outcomes_are_checked():
    with pytest.raises(ValueError, match="outcome 1: grade 2.0 is not a number from 0 to 1"):
        Outcomes(np.zeros((2, 4)), [0, 1], [1.0, 2.0])
    with pytest.raises(ValueError, match="one row per outcome"):
        Outcomes(np.zeros((2, 4)), [0], [1.0, 0.0])


def test_outcomes_learned_in_order_at_once_are_learned_one_by_one(world):
    """update_in_order (the adapter run once for a batch) ends where an update per outcome ends."""
    space, x = world["space"], world["prep"].X[:40]
    rng = np.random.default_rng(0)
    llm, y = rng.integers(len(space.model_names), size=40), rng.random(40)
    one_by_one, at_once = OnlineState(space, prior_var=0.1), OnlineState(space, prior_var=0.1)
    for i in range(40):
        one_by_one.update(Outcomes(x[i:i + 1], llm[i:i + 1], y[i:i + 1]))
    at_once.update_in_order(Outcomes(x, llm, y))
    for a, b in zip(at_once.theta + at_once.cov, one_by_one.theta + one_by_one.cov):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)  # the adapter in float32, batched or not
    assert (at_once.seen == one_by_one.seen).all() and at_once.seen.sum() == 40
    batched = OnlineState(space, prior_var=0.1)
    batched.update(Outcomes(x, llm, y))  # one Laplace step per LLM: not the same
    assert np.abs(batched.theta[0] - one_by_one.theta[0]).max() > 1e-5  # 100x the tolerance above


def test_a_weighted_outcome_counts_as_that_many_and_weight_0_as_none(world):
    space, x = world["space"], world["prep"].X[:6]
    llm, y = np.array([1, 1, 2, 2, 1, 2]), np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.5])
    weighted, repeated, fresh = (OnlineState(space, prior_var=0.1) for _ in range(3))
    weighted.update(Outcomes(x, llm, y, [2.0, 1.0, 0.0, 3.0, 1.0, 0.5]))
    # in one batch (one Laplace step at the same mean), weight 2 is the outcome twice, 0.5 half of its pull
    twice = [0, 0, 1, 3, 3, 3, 4]
    repeated.update(Outcomes(x[twice], llm[twice], y[twice]))
    for a, b in zip(weighted.theta[0][[1]], repeated.theta[0][[1]]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(weighted.cov[0][1], repeated.cov[0][1], rtol=1e-6, atol=1e-12)
    none = OnlineState(space, prior_var=0.1)
    none.update_in_order(Outcomes(x, llm, y, np.zeros(6)))
    for a, b in zip(none.theta + none.cov, fresh.theta + fresh.cov):
        np.testing.assert_array_equal(a, b)
    for bad in ([1.0] * 5, [1.0] * 5 + [-1.0], [1.0] * 5 + [np.nan]):
        with pytest.raises(ValueError, match="weight must be one finite number >= 0 per outcome"):
            Outcomes(x, llm, y, bad)


def test_an_outcome_moves_the_llms_prediction_its_way_and_narrows_its_posterior(world):
    space, x = world["space"], world["prep"].X[:1]
    state = OnlineState(space, prior_var=0.1)
    geo = state.geometry(x)
    before, var_before = state.predict_proba(x)[0], state.logit_variance(geo)[0, 0]
    state.update(Outcomes(np.repeat(x, 20, 0), [3] * 20, [1.0] * 20))
    after, var_after = state.predict_proba(x)[0], state.logit_variance(geo)[0, 0]
    # precision 1 / 0.1 plus 20 answers x p(1 - p) of about 0.25: the variance falls by about a third
    assert after[3] > before[3] + 0.05 and var_after[3] < 0.75 * var_before[3]
    others = np.arange(len(before)) != 3
    np.testing.assert_allclose(after[others], before[others])  # the other LLMs did not answer
    assert state.seen[3] == 20
    with pytest.raises(ValueError, match="LLM column 99"):
        state.update(Outcomes(x, [99], [1.0]))


def test_the_learned_state_is_saved_and_loaded_with_the_space(world, tmp_path):
    space, x = world["space"], world["prep"].X[:50]
    state = OnlineState(space, prior_var=0.05)
    state.update(Outcomes(x, np.arange(50) % len(state.names), np.arange(50) % 2))
    state.add_llm("newcomer")
    state.save(tmp_path)
    again = OnlineState.load(space, tmp_path)
    np.testing.assert_allclose(again.predict_proba(x), state.predict_proba(x))
    assert again.names[-1] == "newcomer" and again.seen.sum() == 50
    other = space.with_model("someone-else", [space.model_vectors(0)[0]])
    with pytest.raises(ValueError, match="online.safetensors: learned over LLMs"):
        OnlineState.load(other, tmp_path)


def test_propensities_are_the_probabilities_of_the_choices(world):
    state = OnlineState(world["space"], prior_var=0.3)
    x = world["prep"].X[:40]
    greedy = Explorer(state, explore=0.0).decide(x)
    assert all(d.propensity == 1.0 and d.chosen == d.greedy and not d.explored for d in greedy)
    # Thompson sampling on every query: the propensity is the share of posterior draws the choice won;
    # re-deciding one query many times, the empirical frequency of each LLM matches it
    ex = Explorer(state, rule="thompson", explore=1.0, draws=400, seed=1)
    q = x[:1]
    decisions = [ex.decide(q)[0] for _ in range(400)]
    freq = np.bincount([d.chosen for d in decisions], minlength=len(state.names)) / 400
    props = np.mean([[d.propensity if d.chosen == k else 0 for k in range(len(freq))] for d in decisions], 0)
    top = int(freq.argmax())
    assert abs(np.mean([d.propensity for d in decisions if d.chosen == top]) - freq[top]) < 0.1, (freq, props)


def test_exploration_spend_is_capped_and_reported(world):
    state = OnlineState(world["space"], prior_var=1.0)
    x = world["prep"].X[:300]
    k = len(state.names)
    costs = np.tile(np.linspace(0.001, 0.01, k), (len(x), 1))
    ex = Explorer(state, rule="thompson", explore=1.0, explore_usd_per_1k=0.5, seed=0)
    for i in range(len(x)):
        d = ex.decide(x[i:i + 1], costs[i:i + 1])[0]
        ex.charge(d, costs[i])
    assert ex.spend["explored"] > 0
    assert ex.spend["exploration_usd"] <= 0.5 * len(x) / 1000 + costs.max()  # within one query of the cap


@pytest.mark.parametrize("start", [1e-3, 3.0, 300.0])
def test_the_pacer_meets_a_budget_on_traffic_unlike_its_calibration(start):
    """Two LLMs, the dearer one better: the pacer's weight finds the mix that spends the budget
    (about 33 here), from a start 10,000 times too low (then the second half meets it) or 10 times
    off either way (then the whole stream does)."""
    rng = np.random.default_rng(0)
    pacer = Pacer(budget_per_1k=4.0, weight=start)
    spent = []
    for _ in range(6000):
        p = np.array([0.5, 0.8]) + rng.normal(0, 0.1, 2)
        cost = np.array([0.001, 0.01])
        choice = int(np.argmax(p - pacer.weight * cost))
        pacer.charge(cost[choice])
        spent.append(cost[choice])
    rate = np.mean(spent[3000:] if start < 1 else spent) * 1000
    assert abs(rate - 4.0) / 4.0 < 0.02, rate


def test_off_policy_estimates_hold_the_target_policys_true_value():
    """Logged by a random policy with known propensities; a deterministic target's value, known
    from the full labels, lies in the IPS and DR intervals."""
    rng = np.random.default_rng(0)
    n, k = 5000, 4
    truth = rng.uniform(0.2, 0.9, size=(n, k))
    labels = (rng.random((n, k)) < truth).astype(float)
    logging = rng.dirichlet(np.ones(k) * 2, size=n)
    chosen = np.array([rng.choice(k, p=row) for row in logging])
    propensity = logging[np.arange(n), chosen]
    target_choice = truth.argmax(1)
    target = one_hot(target_choice, k)
    true_value = labels[np.arange(n), target_choice].mean()
    est = evaluate_policy(chosen, propensity, labels[np.arange(n), chosen], target, reward_model=truth)
    for name in ("ips", "snips", "dr"):
        lo, hi = est[f"{name}_ci95"]
        assert lo <= true_value <= hi, (name, est, true_value)
    assert est["dr_ci95"][1] - est["dr_ci95"][0] < est["ips_ci95"][1] - est["ips_ci95"][0]  # less variance
    with pytest.raises(ValueError, match="propensity"):
        evaluate_policy(chosen, np.zeros(n), labels[np.arange(n), chosen], target)


def test_learning_from_the_stream_finds_the_llm_that_is_best_off_the_map(world, synthetic):
    """Planted: on the held-out category, the LLM that the trained space ranks third answers 90%
    right and every other 50%; the seen categories keep their real labels. The static router
    never finds it; learning from the chosen LLMs' outcomes does, without hurting the seen ones."""
    prep, space, held = world["prep"], world["space"], world["held"]
    rng = np.random.default_rng(0)
    k = synthetic.n_models
    unseen_rows = np.flatnonzero(synthetic.benchmarks == held[0])
    seen_rows = np.flatnonzero((prep.split.question_part == 2) & ~np.isin(synthetic.benchmarks, held + [world["val_cat"]]))
    everything = synthetic.label_matrix()
    seen_rows = seen_rows[(~np.isnan(everything[seen_rows])).any(1)]
    rows = rng.permutation(np.concatenate([rng.choice(unseen_rows, 600), rng.choice(seen_rows, 600)]))
    labels = everything[rows]
    unseen = np.isin(rows, unseen_rows)
    star = int(np.argsort(-space.predict_proba(prep.X[unseen_rows]).mean(0))[2])
    planted = (rng.random((unseen.sum(), k)) < 0.5).astype(float)
    planted[:, star] = rng.random(unseen.sum()) < 0.9
    labels[unseen] = planted
    stream = sim.Stream(rows, unseen, labels, np.zeros((len(rows), k)), synthetic.benchmarks[rows])
    config = {"prior_var": 0.003, "evidence": 0.0, "residual_var": 1.0, "rule": "thompson", "explore": 0.2}
    runs = {m: sim.run_method(sim.build(m, space, config, 0.0, 0, 0.05, 0.05), stream, prep.X[rows])
            for m in ("static", "online", "online_full", "epsilon_greedy", "linucb")}
    known = np.flatnonzero(prep.split.question_part == 0)
    regions = {"regions": 8, "bias_var": 0.3, "explore": 1.0}
    runs["online_regions"] = sim.run_method(sim.build_regions(space, prep.X[known], everything[known], regions, 0.0, 0),
                                            stream, prep.X[rows])
    runs["category_thompson"] = sim.run_method(sim.build_category(space, stream, 0.3, 0), stream, prep.X[rows])
    runs |= sim.hindsight(stream)
    out = sim.summarise(stream, runs)
    final = out["final"]
    assert set(sim.METHODS) <= set(final)
    assert final["static"]["unseen_accuracy_last_half"] < 0.6
    assert final["online"]["unseen_accuracy_last_half"] > 0.75, final["online"]
    assert final["online_minus_static_unseen_ci95"][0] > 0.1
    assert final["online_minus_static_seen_ci95"][1] > 0  # not worse on the seen categories beyond noise
    assert final["online_regions"]["unseen_accuracy_last_half"] > 0.7, final["online_regions"]
    assert final["online_regions_minus_static_unseen_ci95"][0] > 0.1
    assert final["online_regions_minus_static_seen_ci95"][1] > 0
    assert final["category_thompson"]["unseen_accuracy_last_half"] > 0.75, final["category_thompson"]
    assert final["oracle"]["unseen_accuracy_last_half"] >= final["category_best"]["unseen_accuracy_last_half"]
    step = max(out["curve"], key=int)
    assert {"accuracy_window", "cost_per_1k_window"} <= set(out["curve"][step]["online"])
    # the same LLM started cold (no labels): explored where its posterior says it may be best, it
    # takes half of the category's traffic within 200 of its requests
    cold = sim.adoption(space, stream, prep.X[rows], config, 0.0, 0)
    assert cold["llm"] == space.model_names[star] and cold["adoption_steps"] is not None, cold
    assert cold["adoption_steps"] <= 200, cold


def test_a_region_learns_every_llm_from_each_answer_there_and_nothing_elsewhere(world, synthetic):
    prep, space = world["prep"], world["space"]
    known = np.flatnonzero(prep.split.question_part == 0)
    labels = synthetic.label_matrix()
    with pytest.raises(ValueError, match="known_y: .* one row per known question and one column per LLM"):
        RegionLearner(space, prep.X[known], labels[known][:, :3])
    # the shift alone (no offsets per LLM), free of the known answers' information (evidence 0)
    learner = RegionLearner(space, prep.X[known], labels[known], regions=4, bias_var=0.0, evidence=0.0, explore=0.0,
                            refit_every=60)
    pinned = RegionLearner(space, prep.X[known], labels[known], regions=4, bias_var=0.0, evidence=1.0, explore=0.0)
    held = np.flatnonzero(synthetic.benchmarks == world["held"][0])
    here = held[learner.region(prep.X[held]) == learner.region(prep.X[held[:1]])[0]]
    elsewhere = known[learner.region(prep.X[known]) != learner.region(prep.X[held[:1]])[0]][:20]
    before_here, before_elsewhere = learner.predict_proba(prep.X[here]), learner.predict_proba(prep.X[elsewhere])
    top = int(np.argmax(before_here.mean(0)))
    learner.update(prep.X[here[:40]], np.full(40, top), np.zeros(40))  # the top LLM fails 40 times here
    after = learner.predict_proba(prep.X[here])
    # where the known answers hold the region, the same failures move its logits less
    def logit(p):
        return np.log(p / (1 - p))[:, top].mean()
    start = logit(pinned.predict_proba(prep.X[here]))
    pinned.update(prep.X[here[:40]], np.full(40, top), np.zeros(40))
    assert 0 < start - logit(pinned.predict_proba(prep.X[here])) < 0.9 * (logit(before_here) - logit(after))
    assert after[:, top].mean() < before_here[:, top].mean() - 0.1
    moved = np.abs(after - before_here).mean(0)
    assert (np.delete(moved, top) > 1e-3).sum() >= len(moved) // 2  # the shift is shared: others move too
    np.testing.assert_array_equal(learner.predict_proba(prep.X[elsewhere]), before_elsewhere)
    centers = learner.centers.copy()
    learner.update(prep.X[here[:30]], np.full(30, top), np.zeros(30))  # past refit_every: regions drawn again
    assert len(learner.log_k) == 70 and not np.allclose(learner.centers, centers)
    assert learner.predict_proba(prep.X[here])[:, top].mean() < before_here[:, top].mean() - 0.1  # kept
    # a decision: the posterior mean's choice off the explored share, else a draw with its share of draws
    greedy = learner.decide(prep.X[here[:1]])
    assert greedy.propensity == 1.0 and greedy.chosen == greedy.greedy == int(np.argmax(learner.predict_proba(prep.X[here[:1]])))
    learner.explore = 1.0
    picks = [learner.decide(prep.X[here[:1]]) for _ in range(200)]
    share = np.mean([d.chosen == picks[0].chosen for d in picks])
    assert abs(np.mean([d.propensity for d in picks if d.chosen == picks[0].chosen]) - share) < 0.15


def test_a_space_learner_routes_with_propensities_learns_and_keeps_what_it_learned(world, synthetic, tmp_path):
    import jeirt_ray as jr
    space = jr.Space.from_core(world["space"])
    learner = space.learner(explore=0.5, seed=3)
    texts = synthetic.texts[:30].tolist()
    decisions = learner.route(texts)
    assert all(0 < d["propensity"] <= 1 and d["chosen"] in space.model_names for d in decisions)
    assert learner.spend["queries"] == 30 and learner.spend["explored"] > 0
    learner.learn(texts, [d["chosen"] for d in decisions], [1.0] * 30)
    learner.save(tmp_path)
    again = jr.Learner.load(space, tmp_path, explore=0.0)
    assert [d["greedy"] for d in again.route(texts)] == [d["greedy"] for d in learner.route(texts)]
    assert again.route(texts[:1], candidates=[space.model_names[4]])[0]["chosen"] == space.model_names[4]
    with pytest.raises(ValueError, match="not in the space"):
        learner.learn(texts[:1], ["nobody"], [1.0])
    with pytest.raises(ValueError, match="text 1 is empty or blank"):
        learner.route(["fine", "  "])
    with pytest.raises(TypeError, match="text 0 is NoneType"):
        space.route([None])


@pytest.mark.parametrize("kwargs, message", [
    ({"top_k": 0}, "top_k must be at least 1"), ({"top_k": -2}, "top_k must be at least 1"),
    ({"top_k": 2.5}, "top_k must be a whole number"), ({"candidates": []}, "candidates is empty"),
    ({"policy": "quality_target", "target_p": 1.5}, "target_p must be from 0 to 1"),
    ({"policy": "most_likely", "min_p": float("nan")}, "min_p must be from 0 to 1"),
    ({"cost_weight": "high"}, "cost_weight must be a number, not 'high'"),
])
def test_space_route_refuses_settings_out_of_range(world, kwargs, message):
    """Python callers get the HTTP schema's checks (a 422's RequestError), not a slice or a traceback."""
    import jeirt_ray as jr
    space = jr.Space.from_core(world["space"])
    with pytest.raises(ValueError, match=message):
        space.route(["What is 2 + 2?"], **kwargs)


def test_a_top_k_beyond_any_machine_integer_lists_every_llm(world):
    """A schema-valid top_k of any size (the fuzzer sent 1.9e24; numpy cannot tell whether such an
    int is finite) lists every LLM, as null does; an infinite float is still refused."""
    import jeirt_ray as jr
    from jeirt_ray.routing.router import _check_numbers
    _check_numbers(top_k=(1887300528770838719102976, 1, None, True), ranking=(10 ** 400, 1, None, True))
    with pytest.raises(ValueError, match="top_k must be at least 1"):
        _check_numbers(top_k=(-10 ** 400, 1, None, True))
    with pytest.raises(ValueError, match="cost_weight must be at least 0"):
        _check_numbers(cost_weight=(float("inf"), 0, None, False))
    space = jr.Space.from_core(world["space"])
    assert space.route(["What is 2 + 2?"], top_k=1887300528770838719102976) == \
        space.route(["What is 2 + 2?"], top_k=None)


def test_replicas_learning_from_the_feedback_store_hold_one_state_and_a_restart_replays_it(world, tmp_path):
    """Two learners (two replicas) reading one feedback store apply the same rows in the same order:
    the same vectors; one made after every row was written (a restart) reaches them too. Grades
    move the graded LLM's P(correct) their way; grades of another encoder or LLM are skipped."""
    from jeirt_ray.feedback import FeedbackStore, Grade, new_id
    from jeirt_ray.feedback.applied import FeedbackLearner
    space, prep = world["space"], world["prep"]
    store = FeedbackStore(f"sqlite:///{tmp_path / 'fb.db'}")
    enc = space.encoder_id
    a, b = FeedbackLearner(space, store, enc), FeedbackLearner(space, store, enc)
    x = prep.X[prep.rows("test")[:40]]
    llm = space.model_names[2]
    before = a.predict_proba(x)[:, 2]
    np.testing.assert_allclose(before, space.predict_proba(x)[:, 2], atol=1e-5)  # nothing learned: as trained
    for i, e in enumerate(x[:20]):
        store.add(Grade(new_id(), 0.0, llm=llm, encoder=enc, embedding=e))
    assert a.poll() == 20
    for i, e in enumerate(x[20:]):
        store.add(Grade(new_id(), 0.0, llm=llm, encoder=enc, embedding=e))
    store.add(Grade(new_id(), 1.0, llm=llm, encoder="another-encoder", embedding=x[0]))
    store.add(Grade(new_id(), 1.0, llm="no-such-llm", encoder=enc, embedding=x[0]))
    assert a.poll() == 20 and b.poll() == 40
    restarted = FeedbackLearner(space, store, enc)
    assert restarted.poll() == 40 and restarted.stats() == {"seq": 42, "applied": 40, "skipped": 2}
    for other in (b, restarted):
        np.testing.assert_allclose(other.predict_proba(x), a.predict_proba(x), rtol=1e-9)
    after = a.predict_proba(x)
    assert (after[:, 2] < before).mean() > 0.9
    np.testing.assert_allclose(np.delete(after, 2, 1), np.delete(space.predict_proba(x), 2, 1), atol=1e-5)

    # a key's weight goes with its grades: weight 0 moves nothing, 0.25 about a quarter as much as 1
    moved = {}
    for w in (0.0, 0.25, 1.0):
        one = FeedbackStore(f"sqlite:///{tmp_path / f'w{w}.db'}")
        one.add(Grade(new_id(), 1.0, llm=llm, encoder=enc, embedding=x[0], weight=w))
        learner = FeedbackLearner(space, one, enc)
        assert learner.poll() == 1
        moved[w] = float(learner.predict_proba(x[:1])[0, 2] - before[0])
    assert abs(moved[0.0]) < 1e-6 and moved[1.0] > 1e-3 and 0.2 < moved[0.25] / moved[1.0] < 0.4, moved
    with pytest.raises(ValueError, match="weight must be a number from 0 to 100"):
        Grade(new_id(), 1.0, weight=float("inf"))


def test_jeirt_learn_promotes_only_what_held_out_grades_show_better(world, tmp_path):
    """The real labels of the held-out category, graded: the challenger predicts held-out grades
    better and becomes @champion; grades drawn from the champion's own predictions show nothing
    better, so that challenger only gets @challenger; too few grades are refused, naming the fix."""
    from typer.testing import CliRunner

    from jeirt_ray.api.learn import learn
    from jeirt_ray.cli.main import app
    from jeirt_ray.feedback import FeedbackStore, Grade, new_id
    from jeirt_ray.feedback.applied import FeedbackLearner
    from jeirt_ray.tracking.registry import SpaceRegistry

    from .conftest import registry_env
    space, prep = world["space"], world["prep"]
    data = prep.data
    rows = np.flatnonzero(np.isin(data.benchmarks, world["held"]))
    labels = data.label_matrix(rows)
    rng = np.random.default_rng(0)

    def ids():  # new_id's shape with seeded random bits: learn's held-out split (by id) is the same every run
        return new_id()[:12] + rng.bytes(8).hex()

    with registry_env(tmp_path):
        reg = SpaceRegistry()
        reg.promote("fb", reg.register(space, "fb"), "champion")
        url = f"sqlite:///{tmp_path / 'real.db'}"
        store = FeedbackStore(url)
        for i, q in enumerate(rows):  # every LLM's answer to each question, graded
            for k in np.flatnonzero(~np.isnan(labels[i])):
                store.add(Grade(ids(), float(labels[i, k]), "key", llm=space.model_names[k],
                                encoder=space.encoder_id, embedding=prep.X[q]))
        class Racing(SpaceRegistry):  # another promotion (of the first space again) lands meanwhile
            def register(self, learned, name, metrics=None):
                version = super().register(learned, name, metrics)
                self.promote(name, super().register(space, name), "champion")
                return version
        racing = Racing()
        with pytest.raises(LookupError, match="fb@champion moved from version 1 to 3 meanwhile; version 2 was "
                                              "registered but not promoted"):
            learn("models:/fb@champion", feedback_url=url, registry=racing)
        assert str(reg.resolve("models:/fb@champion").version) == "3"  # the other promotion stands
        with pytest.raises(ValueError, match="models:/fb/1 is a pinned version.*--no-promote"):
            learn("models:/fb/1", feedback_url=url)
        out = learn("models:/fb@champion", feedback_url=url)
        assert out["promoted"] and out["alias"] == "champion" and out["log_loss_gain_ci95"][0] > 0, out
        assert out["value_gain_ips_ci95"][1] >= 0 and out["sources"] == ["user", "judge", "key"]
        with pytest.raises(ValueError, match="0 usable grades from user"):  # every grade here is an answer key's
            learn("models:/fb/1", register="fb", feedback_url=url, sources="user", promote=False)
        assert str(reg.resolve("models:/fb@champion").version) == out["registered"].rsplit("/", 1)[1]
        promoted = reg.load("models:/fb@champion")
        assert promoted.metadata["feedback_seq"] == store.count()  # replicas serving it start after these
        assert FeedbackLearner(promoted, store, space.encoder_id).poll() == 0
        # so the version holds every grade, the held-out ones too (learned once judged): as near a
        # replica that learned them all from the champion as the order of learning allows
        assert out["held_out_learned_after"] == out["grades_held_out"] > 0
        replica = FeedbackLearner(space, store, space.encoder_id)
        assert replica.poll() == store.count()
        everything = replica.state.learned_space().model_vectors()
        moved = np.abs(everything - space.model_vectors()).max()
        assert np.abs(promoted.model_vectors() - everything).max() < 0.05 * moved, moved

        url = f"sqlite:///{tmp_path / 'calibrated.db'}"
        store = FeedbackStore(url)
        p = space.predict_proba(prep.X[rows])
        for i, q in enumerate(rows):
            for k in range(len(space.model_names)):
                store.add(Grade(ids(), float(rng.random() < p[i, k]), "user", llm=space.model_names[k],
                                encoder=space.encoder_id, embedding=prep.X[q]))
        out = learn("models:/fb/1", register="fb", feedback_url=url, promote=False)
        assert not out["better"] and not out["promoted"] and out["alias"] == "challenger"
        assert str(reg.resolve("models:/fb@champion").version) != out["registered"].rsplit("/", 1)[1]

        few = FeedbackStore(f"sqlite:///{tmp_path / 'few.db'}")
        few.add(Grade(new_id(), 1.0, llm=space.model_names[0], encoder=space.encoder_id, embedding=prep.X[0]))
        run = CliRunner().invoke(app, ["learn", "--space", "models:/fb/1", "--no-promote", "--since", "12h", "--db",
                                       f"sqlite:///{tmp_path / 'few.db'}"])
        assert run.exit_code == 2 and "1 usable grades" in run.output and "collect more feedback" in run.output
        for since, message in ((["--since", "7x"], "--since takes a duration such as 7d"),
                               (["--since", "0d"], "--since takes a duration"),
                               (["--since", "7d", "--since-days", "3"], "not both"),
                               (["--workers", "0"], "Invalid value for '--workers'")):
            run = CliRunner().invoke(app, ["learn", "--space", "models:/fb/1", *since])
            assert run.exit_code == 2 and message in run.output and "Traceback" not in run.output, run.output
    from jeirt_ray.cli.feedback import days_since
    assert [days_since(s, None, 7.0) for s in ("7d", "12h", "30m", "2w", "3", " 1.5 d")] == pytest.approx([7, 0.5, 30 / 1440, 14, 3, 1.5])
    assert days_since(None, None, 7.0) == 7.0 and days_since(None, 2.0, 7.0) == 2.0


def test_the_served_router_explores_with_any_policy_and_logs_each_choices_probability(world):
    """PolicyExploration on a SpaceRouter: on a share of the queries the request's own policy
    chooses from a posterior draw. Over many routes of one query, each LLM is chosen as often as
    its logged propensity says (so inverse-propensity weights are right); the choices respect the
    request's candidates and the cost policies; the spend cap holds; explore 0 routes as before."""
    from jeirt_ray.learning import PolicyExploration
    from jeirt_ray.routing.router import SpaceRouter
    space, prep = world["space"], world["prep"]
    state = OnlineState(space, prior_var=0.3)
    names = space.model_names
    router = SpaceRouter(space, usd_per_call={n: 0.001 * (i + 1) for i, n in enumerate(names)})
    x = np.repeat(prep.X[prep.rows("test")[:1]], 3000, axis=0)
    plain = router.route(x[:50], policy="most_likely")
    router.exploration = PolicyExploration(lambda q, d: state.sample_proba(q, d, np.random.default_rng(1)), 0.4,
                                           seed=0)
    for policy, extra in (("most_likely", {}), ("cost_weighted", {"cost_weight": 20.0})):
        out = router.route(x, policy=policy, **extra)
        chosen = np.array([names.index(d["chosen"]) for d in out])
        prop = np.array([d["propensity"] for d in out])
        explored = np.array([d["explored"] for d in out])
        assert 0.1 < explored.mean() < 0.4, policy  # some draws agree with the policy's own choice
        own = np.array([d["policy_choice"] for d in out])
        assert (explored == (own != np.array(names)[chosen])).all()  # policy_choice: the policy's, not the draw's
        for k in np.unique(chosen):
            assert abs((chosen == k).mean() - prop[chosen == k].mean()) < 0.05, (policy, names[k])
    # the caller's key pays an explored answer at most at the policy's own choice's price
    from jeirt_ray.serving.relay.gateway import answer_cost, key_charge
    dear = next(d for d in out if d["explored"] and router.usd_per_call[names.index(d["chosen"])]
                > router.usd_per_call[names.index(d["policy_choice"])])
    routing = {"chosen": dear["chosen"]}
    assert key_charge(router, dear, routing, answer_cost(router, dear["chosen"], None), None) == \
        answer_cost(router, dear["policy_choice"], None) < answer_cost(router, dear["chosen"], None)
    assert key_charge(router, dear, {"chosen": "a pinned LLM"}, 0.5, None) == 0.5  # a conversation's own LLM
    assert key_charge(router, {**dear, "explored": False}, routing, 0.5, None) == 0.5
    only = router.route(x[:300], policy="most_likely", candidates=names[:2])
    assert {d["chosen"] for d in only} <= set(names[:2]) and all(d["ranking"][0] == d["chosen"] for d in only)
    free = router.exploration.spend
    free_per_1k = 1000 * free["exploration_usd"] / free["queries"]
    capped = PolicyExploration(lambda q, d: state.sample_proba(q, d, np.random.default_rng(2)), 0.4,
                               usd_per_1k=free_per_1k / 4, seed=0)
    router.exploration = capped
    for i in range(1000):  # the cap is checked per request: one query each
        router.route(x[i:i + 1], policy="cost_weighted", cost_weight=20.0)
    assert free_per_1k > 0 and capped.spend["explored"] > 0
    per_1k, queries = 1000 * capped.spend["exploration_usd"] / capped.spend["queries"], capped.spend["queries"]
    assert per_1k <= free_per_1k / 4 + 1000 * 0.001 * len(names) / queries  # over by one query's at most
    # a batch cannot overshoot: the cap is checked query by query within it
    batched = PolicyExploration(lambda q, d: state.sample_proba(q, d, np.random.default_rng(4)), 0.4,
                                usd_per_1k=free_per_1k / 4, seed=0)
    router.exploration = batched
    for i in range(0, 960, 64):
        out = router.route(x[i:i + 64], policy="cost_weighted", cost_weight=20.0)
        assert batched.spend["exploration_usd"] <= free_per_1k / 4 * batched.spend["queries"] / 1000 + 1e-12
        assert len(out) == 64
    assert batched.spend["explored"] > 0
    # routes whose answers the service does not pay for (POST /v1/route) raise no allowance
    before = dict(batched.spend)
    router.route(x[:64], policy="cost_weighted", cost_weight=20.0, explore_counted=False)
    assert batched.spend["queries"] == before["queries"]
    assert batched.spend["exploration_usd"] <= free_per_1k / 4 * batched.spend["queries"] / 1000 + 1e-12
    router.exploration = PolicyExploration(lambda q, d: state.sample_proba(q, d, np.random.default_rng(3)), 0.0)
    assert router.route(x[:50], policy="most_likely") == plain
    with pytest.raises(ValueError, match="explore must be a share from 0 to 1"):
        PolicyExploration(lambda q, d: None, 1.5)


def test_an_llm_onboarded_from_few_answers_is_explored_more_than_a_trained_one(world, tmp_path):
    """The onboarding fit keeps its vector's variance; the learner starts that LLM from it (wider
    than a tight prior_var after 8 answers, narrower after 400) and counts it as new, so the served
    router's posterior draws choose it more often than the trained LLM whose vector it copies; a
    space onboarded before the variance was kept learns as before. (The population prior is about
    the known LLMs' spread: narrower than a loose prior_var, so the widening shows at a tight one.)"""
    from jeirt_ray.model.onboarding import onboard
    space, prep = world["space"], world["prep"]
    rows = prep.rows("train")
    labels = prep.data.label_matrix(rows)[:, 0]
    have = ~np.isnan(labels)
    few = onboard(space, "newcomer", prep.X[rows][have][:8], labels[have][:8]).space
    many = onboard(space, "newcomer", prep.X[rows][have][:400], labels[have][:400]).space
    k = few.model_names.index("newcomer")
    var = np.asarray(few.metadata["onboarded"]["newcomer"]["vector_var"])
    assert var.shape == (1, space.model_vectors(0).shape[1])
    prior_var = 0.003
    state = OnlineState(few, prior_var=prior_var)
    assert state.new[k] and not state.new[:k].any()
    assert np.allclose(np.diag(state.cov[0][k]), np.maximum(var[0], prior_var)) and var[0].mean() > 3 * prior_var
    assert np.allclose(np.diag(state.cov[0][0]), prior_var)
    assert np.diag(OnlineState(many, prior_var=prior_var).cov[0][k]).mean() < var[0].mean()  # more answers, narrower
    old = few.with_model("newcomer", [few.model_vectors(0)[k]])
    old.metadata["onboarded"] = {"newcomer": {"responses": 8}}
    assert not OnlineState(old, prior_var=prior_var).new[k]
    # the same vector as LLM 0: the draws choose the less known one more often
    twin = few.with_model("newcomer", [few.model_vectors(0)[0]])
    state = OnlineState(twin, prior_var=prior_var)
    x = prep.X[prep.rows("test")[:200]]
    q = state.sample_proba(x, 64, np.random.default_rng(0))
    wins = np.bincount(q.argmax(-1).ravel(), minlength=len(twin.model_names))
    assert wins[k] > 2 * wins[0], wins


def test_the_simulation_keeps_a_benchmark_to_train_on_and_its_oracle_takes_the_best_grade():
    """A dataset of one or two benchmarks (eq_bench, theoremqa) still runs: fewer held out, and no
    validation category where none can be spared; the oracle reads graded labels (eq_bench's
    scores in [0, 1]) as the best grade each question got, from its cheapest LLM."""
    from types import SimpleNamespace

    def data(*names):
        return SimpleNamespace(name="d", benchmarks=np.array(list(names)))
    assert sim.choose_categories(data("a", "a"), 3, 0) == ([], None)
    held, val = sim.choose_categories(data("a", "b"), 3, 0)
    assert len(held) == 1 and val is None
    held, val = sim.choose_categories(data("a", "b", "c"), 3, 0)
    assert len(held) == 1 and val not in held and val is not None
    held, val = sim.choose_categories(data("a", "b", "c", "d", "e"), 3, 0)
    assert len(held) == 3 and val not in held and val is not None
    with pytest.raises(ValueError, match="holding out all of them leaves none to train on"):
        sim.choose_categories(data("a", "b"), 1, 0, given=["a", "b"])
    stream = sim.Stream(rows=np.arange(3), unseen=np.zeros(3, bool), category=np.array(["a"] * 3),
                        labels=np.array([[0.6, 0.9, np.nan], [1.0, 0.0, 1.0], [0.0, 0.0, 0.0]]),
                        costs=np.array([[0.0, 1.0, 0.0], [3.0, 1.0, 2.0], [3.0, 1.0, 2.0]]))
    assert sim.hindsight(stream)["oracle"]["chosen"].tolist() == [1, 2, 1]


@pytest.mark.parametrize("kwargs, message", [
    ({"explore": 1.5}, "explore must be a share from 0 to 1, not 1.5"),
    ({"explore": float("nan")}, "explore must be a share"), ({"explore": "0.1"}, "explore must be a share"),
    ({"explore_usd_per_1k": -1}, "explore_usd_per_1k must be USD from 0"),
    ({"cost_weight": float("inf")}, "cost_weight must be USD per unit"), ({"seed": -1}, "seed must be a whole number"),
    ({"seed": 1.5}, "seed must be a whole number"),
])
def test_a_learner_refuses_bad_numbers_naming_the_argument(world, kwargs, message):
    import jeirt_ray as jr
    with pytest.raises(ValueError, match=f"Learner: {message}"):
        jr.Space.from_core(world["space"]).learner(**kwargs)
