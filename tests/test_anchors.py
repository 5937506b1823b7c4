"""Anchor questions (model/anchors.py): chosen on a population's answers, the accuracy learned
from a new LLM's answers to them; the default strategy for estimating wherever a space keeps
hundreds of known LLMs' answers, and only there."""

from types import SimpleNamespace

import numpy as np
import pytest

from jeirt_ray.model.adaptive import strategy_for
from jeirt_ray.model.anchors import Anchors, anchors_of, pursue
from jeirt_ray.model.space import NOT_ANSWERED


def population(n_llms: int, n_questions: int, seed: int) -> np.ndarray:
    """Answers (LLMs x questions, percent) of a three-factor logistic model: a strong general
    ability, two specialities that half the questions load on."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=(n_llms, 3)) * [1.5, 0.8, 0.8]
    a = rng.gamma(2.0, 0.6, size=(n_questions, 3))
    a[:, 1:] *= rng.random((n_questions, 2)) < 0.5
    b = rng.normal(0.0, 1.5, n_questions)
    p = 1 / (1 + np.exp(-(theta @ a.T - b)))
    return (rng.random(p.shape) < p).astype(np.uint8) * 100


def test_pursuit_picks_what_explains_the_target_and_never_a_copy_of_a_pick():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 6))
    X[:, 4] = X[:, 1]  # a copy: nothing left to explain once one of the two is in
    target = 2 * X[:, 1] + X[:, 3] + 0.01 * rng.normal(size=300)
    picked = pursue(X, target, 6).tolist()
    assert picked[0] in (1, 4) and picked[1] == 3 and not {1, 4} <= set(picked)


def test_pursuit_of_several_figures_explains_each_of_them_and_of_one_is_the_plain_pursuit():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 8))
    small, large = X[:, 2] + 0.01 * rng.normal(size=300), 100 * (X[:, 5] + X[:, 6])  # unit spread each
    assert set(pursue(X, np.c_[small, large], 3).tolist()) == {2, 5, 6}
    assert pursue(X, large, 2).tolist() == pursue(X, large[:, None], 2).tolist() and 2 not in pursue(X, large, 2)


def test_anchors_estimate_a_new_llms_accuracy_closer_than_as_many_random_answers_within_their_interval():
    answers = population(1300, 400, 0)
    known, new = answers[:1000], answers[1000:]
    anchors = Anchors(known, NOT_ANSWERED)
    truth = new.mean(1) / 100
    rng = np.random.default_rng(1)
    for n in (20, 50):
        rows = anchors.order[:n]
        point, low, high = np.array([anchors.estimate(rows, a[rows] / 100, {"overall": np.arange(400)})["overall"]
                                     for a in new]).T
        drawn = np.array([a[rng.choice(400, n, replace=False)].mean() / 100 for a in new])
        assert np.abs(point - truth).mean() < 0.6 * np.abs(drawn - truth).mean(), n
        assert 0.82 <= np.mean((low <= truth) & (truth <= high)) <= 0.98, n
        # random questions in the place of the anchors tell less
        other = rng.choice(400, n, replace=False)
        at_random = np.array([anchors.estimate(other, a[other] / 100, {"overall": np.arange(400)})["overall"][0]
                              for a in new])
        assert np.abs(point - truth).mean() < np.abs(at_random - truth).mean(), n


def test_anchors_learn_only_from_known_llms_that_answered_them_and_skip_questions_nobody_answered():
    answers = population(1000, 300, 1)
    answers[:, 250:] = NOT_ANSWERED  # questions the space did not train on: no answers kept
    answers[:100, :50] = NOT_ANSWERED  # LLMs that skipped a block
    anchors = Anchors(answers, NOT_ANSWERED)
    assert not np.isin(anchors.order[:200], np.arange(250, 300)).any()
    assert sorted(anchors.order.tolist()) == list(range(300))  # every question in the order once
    new = population(50, 300, 2)
    rows = anchors.order[:30]
    got = [anchors.estimate(rows, a[rows] / 100, {"overall": np.arange(300), "first": np.arange(100)}) for a in new]
    assert all(set(g) == {"overall", "first"} and 0 <= g["overall"][1] <= g["overall"][0] <= g["overall"][2] <= 1
               for g in got)
    assert anchors.estimate(rows[:5], new[0, rows[:5]] / 100, {"overall": np.arange(300)}) == {}  # too few answers


def test_the_default_strategy_is_anchored_only_where_a_space_keeps_hundreds_of_llms_answers():
    many = SimpleNamespace(answers=population(600, 120, 3))
    few = SimpleNamespace(answers=population(120, 120, 3))
    sparse = SimpleNamespace(answers=np.where(np.random.default_rng(0).random((600, 120)) < 0.3, NOT_ANSWERED,
                                              population(600, 120, 3)).astype(np.uint8))
    none = SimpleNamespace(answers=None)
    assert strategy_for(many, None, "both") == strategy_for(many, None, "estimate") == "anchored"
    assert strategy_for(many, None, "route") == "adaptive" and strategy_for(many, "random", "both") == "random"
    for space in (few, sparse, none):
        assert anchors_of(space) is None and strategy_for(space, None, "both") == "random"
        with pytest.raises(ValueError, match="the anchored strategy needs a space that keeps the answers of hundreds"):
            strategy_for(space, "anchored", "both")
    assert anchors_of(many) is anchors_of(many)  # chosen once per loaded space


def test_a_trained_space_of_many_llms_plans_its_anchors_and_estimates_from_them():
    import jeirt_ray as jr
    from jeirt_ray.data.synthetic import generate
    data = generate(n_models=420, n_questions=240, observed=1.0, seed=0)
    space = jr.train(data, encoder="hashing", search=False, members=1, held_out_benchmarks=0, progress=False)
    anchors = anchors_of(space)
    assert anchors is not None
    first = space.plan("someone-new", {}, 15)
    order = [space.question_ids[r] for r in anchors.order[:15]]
    assert [q["question_id"] for q in first["questions"]] == order
    truth = {q: 1.0 if i % 3 else 0.0 for i, q in enumerate(space.question_ids)}
    asked = {q: truth[q] for q in order}
    later = space.plan("someone-new", asked, 5)
    overall = later["predicted"]["overall"]
    assert overall["anchor_answers"] == 15 and overall["random_answers"] == 0
    assert overall["low"] <= overall["accuracy"] <= overall["high"]
    assert [q["question_id"] for q in later["questions"]] == [space.question_ids[r] for r in anchors.order[15:20]]
    assert space.plan("someone-new", asked, 5, strategy="random")["predicted"]["overall"]["anchor_answers"] == 0
