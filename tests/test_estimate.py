"""The new LLM's accuracy from its answers and the space's predictions together
(model/estimate.py): random draws as a prefix of a seeded order, and the correction weighed
against the space's own error."""

import numpy as np
import pytest

from jeirt_ray.model.estimate import (combine, corrections, draw_probabilities, next_in_order, random_draws,
                                      sample_order)


def test_a_stratified_order_is_proportional_at_every_prefix():
    groups = np.array(["a"] * 50 + ["b"] * 30 + ["c"] * 20)
    order = sample_order(groups, seed=3, stratified=True)
    assert sorted(order.tolist()) == list(range(100))
    for n in (10, 20, 50):
        counts = {g: int((groups[order[:n]] == g).sum()) for g in "abc"}
        assert all(abs(counts[g] - n * share) <= 1 for g, share in zip("abc", (0.5, 0.3, 0.2))), (n, counts)
    assert not np.array_equal(sample_order(groups, seed=3), sample_order(groups, seed=4))


def test_the_random_draws_are_the_answered_prefix_of_the_order_passing_over_what_cannot_be_asked():
    order = np.array([4, 2, 7, 0, 5, 1, 3, 6])
    answered = np.zeros(8, dtype=bool)
    answered[[4, 2, 0, 6]] = True  # 6 answered out of order (an adaptive pick): not a draw yet
    assert random_draws(order, answered).tolist() == [4, 2]
    skip = np.zeros(8, dtype=bool)
    skip[7] = True  # 7 cannot be asked (no answer key grades it)
    assert random_draws(order, answered, skip).tolist() == [4, 2, 0]
    answered[[7, 5, 1, 3]] = True
    assert random_draws(order, answered).tolist() == order.tolist()


def test_the_correction_removes_the_spaces_error_and_its_intervals_hold_their_level():
    """A space whose predicted accuracy for each new LLM is off by an error of known spread (5
    points), and 60 answers to questions drawn at random: the combined estimate's error is
    smaller than either the space's alone or the random answers' alone, and its 90% interval
    holds the true accuracy 84-96% of the time (400 LLMs: the share is known to about 1.5 points)."""
    rng = np.random.default_rng(0)
    n_q, asked, sd_space = 3000, 60, 0.05
    errors = {"model": [], "random": [], "combined": []}
    covered = []
    for rep in range(400):
        logit = rng.normal(rng.normal(0.5, 1.0), 1.5, n_q)
        p_true = 1 / (1 + np.exp(-logit))
        slope = np.mean(p_true * (1 - p_true))  # d accuracy / d logit
        p_model = 1 / (1 + np.exp(-(logit + rng.normal(0, sd_space) / slope)))  # off by about sd_space
        y = (rng.random(n_q) < p_true).astype(float)
        truth = y.mean()
        model = p_model.mean()
        draws = rng.choice(n_q, asked, replace=False)
        fix = corrections(y[draws] - p_model[draws], p_model[draws], None, None)["overall"]
        # the space's own error, as measured on validation (space_error), in its samples
        samples = model + rng.normal(0, sd_space, 2000)
        est, dist, weight = combine(model, samples, fix, seed=rep)
        assert 0 < weight < 1
        errors["model"].append(abs(model - truth))
        errors["random"].append(abs(y[draws].mean() - truth))
        errors["combined"].append(abs(est - truth))
        low, high = np.quantile(dist, [0.05, 0.95])
        covered.append(low <= truth <= high)
    mae = {k: float(np.mean(v)) * 100 for k, v in errors.items()}
    assert mae["combined"] < 0.9 * min(mae["model"], mae["random"]), (mae, np.mean(covered))
    assert 0.84 <= np.mean(covered) <= 0.96, np.mean(covered)


def test_too_few_random_answers_make_no_correction_and_groups_get_their_own():
    rng = np.random.default_rng(1)
    resid = rng.normal(0.1, 0.4, 40)
    p = np.full(40, 0.6)
    groups = np.array(["a"] * 30 + ["b"] * 10)
    out = corrections(resid[:5], p[:5], None, None)
    assert out == {}
    out = corrections(resid, p, groups, np.array(["a"] * 300 + ["b"] * 700))
    assert set(out) == {"overall", "a", "b"}
    # post-stratified: b weighs 70% in the population although it has a quarter of the draws
    assert out["overall"][0] == pytest.approx(0.3 * resid[:30].mean() + 0.7 * resid[30:].mean(), rel=1e-12)
    est, samples, weight = combine(0.5, np.full(10, 0.5), None)
    assert (est, weight) == (0.5, 0.0) and (samples == 0.5).all()


def test_the_information_bound_is_what_a_known_item_model_reaches_from_random_answers():
    """A Rasch LLM on questions whose difficulties are known exactly, its level unknown: the
    accuracy read off its level fitted (no prior) to n random answers errs by what
    information_bound says (within 15%, 400 LLMs; the bound is the maximum-likelihood fit's
    asymptotic error, which only a prior can go below)."""
    from jeirt_ray.analysis.onboarding_curve import information_bound
    rng = np.random.default_rng(2)
    n_q, n = 4000, 50
    b = rng.normal(0, 1.5, n_q)
    errors, bounds = [], []
    for rep in range(400):
        theta = rng.normal(0.5, 1.0)
        p = 1 / (1 + np.exp(-(theta - b)))
        y = (rng.random(n_q) < p).astype(float)
        asked = rng.choice(n_q, n, replace=False)
        t = 0.0
        for _ in range(30):  # the level's maximum-likelihood fit, by Newton's method
            q = 1 / (1 + np.exp(-(t - b[asked])))
            t = float(np.clip(t + (y[asked] - q).sum() / max((q * (1 - q)).sum(), 1e-6), -8, 8))
        errors.append(abs((1 / (1 + np.exp(-(t - b)))).mean() - p.mean()))
        bounds.append(information_bound(float((p * (1 - p)).mean()), n))
    assert 0.85 <= np.mean(errors) / np.mean(bounds) <= 1.15, (np.mean(errors), np.mean(bounds))


def test_an_interval_is_never_narrower_than_what_its_answers_allow_without_a_prior():
    """A posterior that claims to know the vector (a prior far too sure of itself): after 30
    answers the 90% interval is still as wide as the level's standard error from those answers
    (information_bound's), and the answers narrow it: 120 answers give about half the width."""
    from jeirt_ray.model.adaptive import accuracy_intervals
    from jeirt_ray.model.onboarding import RowFit
    rng = np.random.default_rng(3)
    d, n_q = 4, 2000
    u = rng.normal(size=(n_q, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    norm = rng.uniform(0.5, 2.0, n_q)
    fit = RowFit(np.full(d, 0.8), np.eye(d) * 1e-8, 1)
    p = 1 / (1 + np.exp(-(u @ fit.theta - norm)))
    widths = {}
    for n in (30, 120):
        asked = rng.choice(n_q, n, replace=False)
        out = accuracy_intervals([(u, norm)], [fit], observed=(asked, (rng.random(n) < p[asked]).astype(float)),
                                 draws=200, level_floor=1.0)["overall"]
        pq = p * (1 - p)
        rest = np.ones(n_q, dtype=bool)
        rest[asked] = False
        level_sd = pq[rest].sum() / n_q / np.sqrt(pq[asked].sum())
        widths[n] = out["high"] - out["low"]
        assert widths[n] >= 0.95 * 2 * 1.645 * level_sd, (n, widths[n], level_sd)
    assert 0.4 < widths[120] / widths[30] < 0.6, widths


def test_a_weighted_order_corrects_without_bias_and_with_less_noise_where_answers_are_foregone():
    """Questions most LLMs answer right (80%) beside hard ones, and a new LLM the space puts a
    level too low: 60 draws weighted by the known LLMs' answer spread (draw_probabilities) and
    weighted back (Hajek) correct the space's error without bias and with a smaller error than
    60 uniform draws (300 LLMs)."""
    rng = np.random.default_rng(2)
    n_q, asked = 3000, 60
    known_logit = np.where(rng.random(n_q) < 0.8, rng.normal(5.0, 0.5, n_q), rng.normal(0.0, 1.0, n_q))
    probs = draw_probabilities(1 / (1 + np.exp(-known_logit[:, None] + np.array([[-0.5, 0.0, 0.5]]))))
    assert probs.sum() == pytest.approx(1.0) and probs.min() >= 0.5 / n_q - 1e-12  # the uniform half bounds every weight
    groups = np.zeros(n_q, dtype=int)
    signed = {"uniform": [], "weighted": []}
    for rep in range(300):
        level = rng.normal(0.5, 0.5)
        p_true = 1 / (1 + np.exp(-(known_logit + level + rng.normal(0, 0.5, n_q))))
        p_model = 1 / (1 + np.exp(-known_logit))
        y = (rng.random(n_q) < p_true).astype(float)
        truth = (y - p_model).mean()
        uniform = rng.choice(n_q, asked, replace=False)
        signed["uniform"].append(corrections(y[uniform] - p_model[uniform], p_model[uniform], None, None)["overall"][0] - truth)
        draws = sample_order(groups, seed=rep, probabilities=probs)[:asked]
        fix = corrections(y[draws] - p_model[draws], p_model[draws], None, None, weights=1 / probs[draws])["overall"]
        signed["weighted"].append(fix[0] - truth)
    err = {k: np.array(v) for k, v in signed.items()}
    se = err["weighted"].std() / np.sqrt(len(err["weighted"]))
    assert abs(err["weighted"].mean()) < 3 * se  # no bias beyond noise
    assert np.abs(err["weighted"]).mean() < 0.9 * np.abs(err["uniform"]).mean(), \
        {k: float(np.abs(v).mean()) for k, v in err.items()}
    # a weighted order repeats items; the next ones to ask are each taken once
    order = np.array([3, 1, 3, 0, 1, 2])
    free = np.array([True, True, True, False])
    assert next_in_order(order, free, 3).tolist() == [1, 0, 2]
