"""Onboarding curve: a held-out LLM fitted into a space from a fraction of its data.

Two spaces of the same recipe on one split by question: `joint`, trained on every LLM, and
`blind`, trained without the held-out LLMs. Each held-out LLM is fitted into the blind space
(its one vector, everything else frozen) from a fraction f of its training-question responses,
chosen at random or adaptively (a random 1%, then the unanswered questions of highest expected
information under the current fit's Laplace posterior, in 4 rounds), and scored on its
test-question responses: the same pairs on which the joint space is scored.
"""

from __future__ import annotations

import numpy as np

from ..experiments.prepare import Prepared
from ..model.adaptive import LEVEL_FLOOR
from ..model.estimate import WEIGHTED_SHARE
from ..model.metrics import binary_metrics
from ..model.onboarding import onboard
from ..model.onboarding_defaults import MIXED_ADAPTIVE_FIRST, STRATEGIES, STRATEGY_SHARE, random_share
from ..model.space import CoreSpace

FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.25, 1.0)


def adaptive_selection(space: CoreSpace, name: str, X: np.ndarray, q_of: np.ndarray, labels: np.ndarray,
                       pool: np.ndarray, size: int, rng: np.random.Generator, rounds: int = 4,
                       prior: str = "population", exclude: list[str] | tuple = ()) -> np.ndarray:
    """Response indices chosen adaptively from `pool`: a random 1% (at least 5), then `rounds`
    batches of the not yet chosen questions with the highest expected information."""
    chosen = list(rng.choice(pool, size=min(size, max(5, len(pool) // 100)), replace=False))
    for r in range(rounds):
        need = size - len(chosen)
        if need <= 0:
            break
        rest = np.setdiff1d(pool, chosen)
        res = onboard(space, name, X[q_of[chosen]], labels[chosen], holdout=0, exclude=exclude,
                      candidates=X[q_of[rest]], candidate_ids=[str(i) for i in rest],
                      suggest=int(np.ceil(need / (rounds - r))), prior=prior)
        chosen += [int(q["question_id"]) for q in res.report["next_questions"]]
    return np.array(chosen[:size])


def onboarding_curve(prep: Prepared, joint: CoreSpace, blind: CoreSpace, heldout: list[str], rng: np.random.Generator,
                     fractions=FRACTIONS, adaptive: bool = True, responses: tuple[int, ...] | None = None,
                     prior: str = "population") -> dict:
    """Per held-out LLM and budget: test accuracy after onboarding (random and adaptive
    selection) and the joint space's accuracy on the same pairs; plus the means over LLMs. The
    budgets are `fractions` of each LLM's training responses, or with `responses` these counts
    (at most all of them), keyed by the count. `prior`: onboarding's (model/onboarding.py)."""
    data = prep.data
    part = prep.split.question_part[data.q_idx]
    rows = []
    for name in heldout:
        m = int(np.flatnonzero(data.models == name)[0])
        pool = np.flatnonzero((part == 0) & (data.m_idx == m))
        te = (part == 2) & (data.m_idx == m)
        if len(pool) == 0 or not te.any():
            continue
        x_test, y_test = prep.X[data.q_idx[te]], data.labels[te]

        def accuracy(space: CoreSpace) -> float:
            return binary_metrics(space.predict_proba(x_test)[:, m], y_test)["test_accuracy"]

        row = {"model": name, "train_responses": int(len(pool)), "test_responses": int(te.sum()),
               "joint_accuracy": accuracy(joint), "random": {}, "adaptive": {}}
        budgets = [(f"{f:g}", max(1, int(round(f * len(pool))))) for f in fractions] if responses is None \
            else [(str(n), min(n, len(pool))) for n in responses]
        for key, size in budgets:
            pick = rng.choice(pool, size=size, replace=False)
            row["random"][key] = accuracy(onboard(blind, name, prep.X[data.q_idx[pick]], data.labels[pick],
                                                  holdout=0, prior=prior, exclude=heldout).space)
            if adaptive and size < len(pool):
                chosen = adaptive_selection(blind, name, prep.X, data.q_idx, data.labels, pool, size, rng, prior=prior,
                                             exclude=heldout)
                row["adaptive"][key] = accuracy(onboard(blind, name, prep.X[data.q_idx[chosen]],
                                                        data.labels[chosen], holdout=0, prior=prior,
                                                        exclude=heldout).space)
        rows.append(row)
    if not rows:
        raise ValueError("no held-out LLM has both training and test responses")
    mean = {"joint_accuracy": float(np.mean([r["joint_accuracy"] for r in rows]))}
    for how in ("random", "adaptive"):
        keys = dict.fromkeys(k for r in rows for k in r[how])  # a budget beyond an LLM's responses has no adaptive row
        mean[how] = {k: float(np.mean([r[how][k] for r in rows if k in r[how]])) for k in keys}
    return {"heldout_models": [r["model"] for r in rows],
            **({"fractions": list(fractions)} if responses is None else {"responses": list(responses)}),
            "per_model": rows, "mean": mean}


def plot_curve(result: dict, path, plt) -> None:
    mean = result["mean"]
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for how, style in (("random", "o-"), ("adaptive", "s--")):
        if mean[how]:
            xs = [float(k) * 100 for k in mean[how]]
            ax.plot(xs, list(mean[how].values()), style, label=f"onboarded, {how} questions")
    ax.axhline(mean["joint_accuracy"], color="k", lw=1, ls=":", label="joint training")
    ax.set_xscale("log")
    ax.set_xlabel("share of the LLM's training questions used (%)")
    ax.set_ylabel("test accuracy (held-out LLMs)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


ADAPTIVE_BATCH = 5  # questions asked between two refits of the new LLM's vector
RANDOM_REPEATS = 3  # random orders averaged for the fully random strategies


def response_curve(prep: Prepared, joint: CoreSpace, blind: CoreSpace, heldout: list[str], responses: tuple[int, ...],
                   question_cost: np.ndarray | None = None, seed: int = 0, prior: str = "population",
                   evaluate: str = "test", target: str = "accuracy",
                   strategies: tuple[str, ...] = STRATEGIES,
                   adaptive_first: int = MIXED_ADAPTIVE_FIRST,
                   estimate_prior_scale: float = 1.0, level_floor: float = LEVEL_FLOOR,
                   weighted_share: float = WEIGHTED_SHARE) -> list[dict]:
    """Per held-out LLM (absent from `blind`, present in `joint`), strategy and response count
    N: the LLM fitted into `blind` from N of its training-split answers, asked in batches of
    ADAPTIVE_BATCH (the vector refitted between batches, from no answer), a share of each batch
    (model/onboarding_defaults.py `random_share`) drawn in a seeded random order (`stratified`:
    by benchmark; model/estimate.py) and the rest adaptively (model/adaptive.py); fully random strategies average RANDOM_REPEATS
    orders. Against joint training, on its test-split questions:

    - `routing_accuracy`: routing the test questions by argmax P(correct) among the blind space's
      trained LLMs plus this one, and `joint_routing_accuracy`, the joint space routing among the same LLMs;
    - `prediction_accuracy` (and `joint_prediction_accuracy`): how well its P(correct) predicts its
      own test answers;
    - `accuracy_error`: |its estimated accuracy - its accuracy| (points) on the benchmark as
      `jeirt onboard` estimates it: every question of the space it answered (the test split's
      left out when `evaluate="val"`), the N answered ones counting as answered
      (model/estimate.py: the space's mean P corrected by the random answers' cross-fitted
      residuals; `estimated_accuracy`); per benchmark in `benchmark_errors`;
      `model_accuracy_error`: the same for the space's mean P alone; `correction_weight`,
      `random_answers`; `interval_covers`: whether the 90% interval as `jeirt onboard` reports it
      (model/adaptive.py: the vector's posterior, the blind space's own error, the correction's
      noise, the unanswered questions' coin flips) holds the accuracy; `vector_covers`: the same
      for the vector's part alone; `benchmark_covers`: the share of its benchmarks whose interval
      holds its accuracy there; `interval_width`: the interval's width (points);
      `test_accuracy_error` and `test_interval_covers`: the same for its accuracy on the test
      split alone (questions the space never trained on, none of them asked);
    - `cost_usd`: what its N questions cost (`question_cost[q, m]`: USD of asking question q to
      LLM m);
    - per LLM, `answer_variance`: the mean p(1 - p) of its answers over that benchmark, p from its
      vector fitted to every training answer (for `information_bound`).

    `estimate_prior_scale` (tried on validation, not kept: docs/results/benchmarks.md) fits the
    accuracy estimate's vector under the prior widened that many times (1: the plain prior, as
    `jeirt onboard` fits it); routing and the adaptive questions keep the plain prior.
    `level_floor`: the intervals' floor (model/adaptive.py accuracy_intervals). `weighted_share`:
    the `weighted` strategy's (model/estimate.py draw_probabilities).

    The adaptive reference set is every training-split question: the test split is not read for
    any choice. `evaluate="val"` scores on the validation split instead (for choosing a setting,
    such as the selection's `target`, model/adaptive.py)."""
    from ..model.adaptive import (MAX_CANDIDATES, REFERENCE_SAMPLE, accuracy_intervals, belief, select,
                                  stratified_sample)
    from ..model.estimate import corrections, crossfit_residuals, draw_probabilities, next_in_order, random_draws, sample_order
    from ..model.onboarding import directions, known_proba, member_priors
    from ..routing.outcomes import available_argmax

    data = prep.data
    part_q = prep.split.question_part
    part = part_q[data.q_idx]
    rng = np.random.default_rng(seed)
    ref_rows = np.flatnonzero(part_q == 0)  # as model.adaptive.plan: a sample stratified by benchmark
    ref_rows = ref_rows[stratified_sample(data.benchmarks[ref_rows], REFERENCE_SAMPLE, rng)]
    reference = directions(blind, prep.X[ref_rows])
    test_q = np.flatnonzero(part_q == {"val": 1, "test": 2}[evaluate])
    full = np.full((data.n_questions, data.n_models), np.nan)
    full[data.q_idx, data.m_idx] = data.labels
    known = [n for n in blind.model_names if n not in heldout]  # the held-out LLMs' vectors were never fitted
    blind_cols = [int(np.flatnonzero(data.models == n)[0]) for n in known]
    p_blind = blind.predict_proba(prep.X[test_q])[:, [blind.model_names.index(n) for n in known]]
    p_joint_all = joint.predict_proba(prep.X[test_q])
    joint_col = {n: i for i, n in enumerate(joint.model_names)}
    all_dirs = directions(blind, prep.X)
    test_dirs = [(u[test_q], n[test_q]) for u, n in all_dirs]
    top = max(responses)
    error = blind.metadata.get("accuracy_error") or {}  # measured without the held-out LLMs
    space_sd, space_sds = error.get("overall") or 0.0, error.get("groups", {})
    rows = []
    for name in heldout:
        m = int(np.flatnonzero(data.models == name)[0])
        pool = np.flatnonzero((part == 0) & (data.m_idx == m))  # response rows
        seen = ~np.isnan(full[test_q, m])
        if len(pool) == 0 or not seen.any():
            continue
        cols = blind_cols + [m]
        labels = full[test_q][:, cols]
        avail = ~np.isnan(labels)
        p_joint = p_joint_all[:, [joint_col[n] for n in known] + [joint_col[name]]]
        routed = labels[np.arange(len(test_q)), available_argmax(p_joint, avail)]
        truth = full[test_q[seen], m]
        test_bench = data.benchmarks[test_q[seen]]
        # the benchmark whose accuracy onboarding estimates: every question of the space this LLM
        # answered (model.adaptive.plan predicts over all the space's questions), its answers to
        # those asked counting as observed
        population = np.flatnonzero(~np.isnan(full[:, m]) & ((part_q != 2) if evaluate == "val" else True))
        pop_truth, pop_bench = full[population, m], data.benchmarks[population]
        pop_dirs = [(u[population], n[population]) for u, n in all_dirs]
        pop_sample = stratified_sample(pop_bench, REFERENCE_SAMPLE, np.random.default_rng(seed))
        pool_at = np.searchsorted(population, data.q_idx[pool])  # each pool answer's place in it
        row = {"model": name, "train_responses": int(len(pool)), "questions": int(len(population)),
               "accuracy": float(pop_truth.mean()), "test_questions": int(seen.sum()),
               "test_accuracy": float(truth.mean()),
               "joint_routing_accuracy": float(np.nanmean(routed)),
               "joint_prediction_accuracy": float(((p_joint_all[seen, joint_col[name]] > 0.5) == (truth > 0.5)).mean()),
               "joint_test_accuracy_error": abs(float(p_joint_all[seen, joint_col[name]].mean() - truth.mean())) * 100,
               **{how: {} for how in strategies}}

        pool_dirs = [(u[data.q_idx[pool]], n[data.q_idx[pool]]) for u, n in all_dirs]
        # its answers' variance, from the vector fitted to every training answer (information_bound)
        full_fits = belief(blind, name, prep.X[data.q_idx[pool]], data.labels[pool], prior, exclude=heldout)
        p_full = np.mean([1 / (1 + np.exp(-(u @ f.theta - n))) for (u, n), f in zip(pop_dirs, full_fits)], axis=0)
        row["answer_variance"] = float((p_full * (1 - p_full)).mean())
        priors = member_priors(blind, name, prior, exclude=heldout, scale=estimate_prior_scale)

        def score(fits, asked_at: np.ndarray, order: np.ndarray, probs: np.ndarray | None) -> dict:
            """The figures after answers `asked_at` (positions in pool), the random draws among
            them being the answered prefix of `order` (model/estimate.py), drawn with `probs`
            (None: uniformly)."""
            p_new = np.mean([1 / (1 + np.exp(-(u @ f.theta - n))) for (u, n), f in zip(test_dirs, fits)], axis=0)
            labels_asked = data.labels[pool[asked_at]].astype(np.float64)
            if estimate_prior_scale != 1:  # the estimate's own fit, as model.adaptive.plan makes it
                fits = belief(blind, name, prep.X[data.q_idx[pool[asked_at]]], labels_asked, prior, exclude=heldout,
                              scale=estimate_prior_scale)
            answered = np.zeros(len(pool), dtype=bool)
            answered[asked_at] = True
            draws = random_draws(order, answered)
            where = {int(p): i for i, p in enumerate(asked_at)}
            at = np.array([where[int(p)] for p in draws], dtype=int)
            resid, p_draws = crossfit_residuals([(u[asked_at], n[asked_at]) for u, n in pool_dirs], labels_asked,
                                                priors, at, seed=seed)
            draw_bench = data.benchmarks[data.q_idx[pool[draws]]]
            weights = None if probs is None else 1 / probs[draws]
            fixes = corrections(resid, p_draws, draw_bench, pop_bench, weights)
            error = {"overall": space_sd, "groups": space_sds}
            observed = (pool_at[asked_at], labels_asked)
            est = accuracy_intervals(pop_dirs, fits, pop_bench, seed=seed, sample=pop_sample, error=error,
                                     observed=observed, corrections=fixes, level_floor=level_floor)
            vector = accuracy_intervals(pop_dirs, fits, seed=seed, sample=pop_sample, observed=observed,
                                        level_floor=0.0)["overall"]
            # the test split's accuracy alone: questions the space never trained on, none of them asked
            test = accuracy_intervals([(u[seen], n[seen]) for u, n in test_dirs], fits, seed=seed,
                                      error={"overall": space_sd},
                                      corrections=corrections(resid, p_draws, draw_bench, test_bench, weights))["overall"]
            overall = est["overall"]
            truth_of = {b: float(pop_truth[pop_bench == b].mean()) for b in est if b != "overall"}
            choice = available_argmax(np.column_stack([p_blind, p_new]), avail)
            return {"routing_accuracy": float(np.nanmean(labels[np.arange(len(test_q)), choice])),
                    "prediction_accuracy": float(((p_new[seen] > 0.5) == (truth > 0.5)).mean()),
                    "estimated_accuracy": overall["accuracy"],
                    "accuracy_error": abs(overall["accuracy"] - pop_truth.mean()) * 100,
                    "model_accuracy_error": abs(overall["model_accuracy"] - pop_truth.mean()) * 100,
                    "correction_weight": overall["correction_weight"], "random_answers": int(len(draws)),
                    "interval_covers": float(overall["low"] <= pop_truth.mean() <= overall["high"]),
                    "vector_covers": float(vector["low"] <= pop_truth.mean() <= vector["high"]),
                    "benchmark_covers": float(np.mean([est[b]["low"] <= t <= est[b]["high"] for b, t in truth_of.items()])),
                    "interval_width": (overall["high"] - overall["low"]) * 100,
                    "benchmark_errors": {b: abs(est[b]["accuracy"] - t) * 100 for b, t in truth_of.items()},
                    "test_accuracy_error": abs(test["accuracy"] - truth.mean()) * 100,
                    "test_interval_covers": float(test["low"] <= truth.mean() <= test["high"])}

        def cost(rows_asked) -> float | None:
            return None if question_cost is None else float(question_cost[data.q_idx[rows_asked], m].sum())

        pool_bench = data.benchmarks[data.q_idx[pool]]
        # as model.adaptive.plan: the known LLMs' answers on the pool say where a weighted order draws
        pool_probs = draw_probabilities(known_proba(blind, pool_dirs, [blind.model_names.index(n) for n in known]),
                                        weighted_share) if "weighted" in strategies else None
        for how in strategies:
            repeats = RANDOM_REPEATS if STRATEGY_SHARE[how] == 1 else 1
            runs: dict[str, list[dict]] = {}
            for r in range(repeats):
                probs = pool_probs if how == "weighted" else None
                order = sample_order(pool_bench, seed * 1000 + r, stratified=how == "stratified", probabilities=probs)
                pick_rng = np.random.default_rng((seed, m, r))  # the same candidates for every strategy
                asked: list[int] = []  # positions in pool
                free = np.ones(len(pool), dtype=bool)
                fits = belief(blind, name, None, None, prior, exclude=heldout)
                while len(asked) < min(top, len(pool)):
                    k = min(ADAPTIVE_BATCH, top - len(asked))
                    share = random_share(how, len(asked), adaptive_first)
                    picked = next_in_order(order, free, int(round(k * share))).tolist()  # the random share
                    free[picked] = False
                    if len(picked) < k:
                        cand = np.flatnonzero(free)
                        if len(cand) > MAX_CANDIDATES:  # as model.adaptive.plan
                            cand = np.sort(pick_rng.choice(cand, size=MAX_CANDIDATES, replace=False))
                        chosen, _ = select([(u[cand], n[cand]) for u, n in pool_dirs], reference, fits,
                                           k - len(picked), target=target)
                        picked += cand[chosen].tolist()
                        free[cand[chosen]] = False
                    asked += picked
                    if random_share(how, len(asked), adaptive_first) < 1 or len(asked) in responses:  # random ones need no refit
                        rows_asked = pool[asked]
                        fits = belief(blind, name, prep.X[data.q_idx[rows_asked]], data.labels[rows_asked], prior,
                                      exclude=heldout)
                    if len(asked) in responses:
                        runs.setdefault(str(len(asked)), []).append(
                            {**score(fits, np.array(asked), order, probs), "cost_usd": cost(pool[asked])})
            row[how] = {n_resp: _mean_runs(v) for n_resp, v in runs.items()}
        rows.append(row)
    return rows


def information_bound(answer_variance: float, n: int, best_questions: bool = False) -> float:
    """The mean absolute error with which n answers tell an LLM's accuracy when the only unknown
    is its overall level (each question's P(correct) relative to the others known exactly;
    `answer_variance`: the mean p(1 - p) of its answers over the benchmark). The accuracy moves
    with the level by mean p(1 - p) and n answers carry a Fisher information of the sum of their
    p(1 - p) (Cramer-Rao, a one-parameter Rasch model), so its standard error is sqrt(mean p(1 -
    p) / n) for questions drawn at random (also the difference estimator's with the true P), and
    mean p(1 - p) / sqrt(n / 4) for the best questions possible (every one asked where P = 1/2);
    times sqrt(2 / pi) for a normal error's mean absolute value. Only what is known before the
    answers (a prior) can go below it."""
    se = answer_variance / np.sqrt(n / 4) if best_questions else np.sqrt(answer_variance / n)
    return float(np.sqrt(2 / np.pi) * se)


def _mean_runs(runs: list[dict]) -> dict:
    out = {}
    for k, v in runs[0].items():
        if isinstance(v, dict):
            out[k] = {b: float(np.mean([r[k][b] for r in runs])) for b in v}
        else:
            out[k] = None if v is None else float(np.mean([r[k] for r in runs]))
    return out


def summarise_curve(units: list[dict], responses: tuple[int, ...], seed: int = 0) -> dict:
    """The curve over held-out LLM x split seed units (rows of response_curve, each with a
    `split_seed`): per N and strategy, `gap_to_joint` (points of routing accuracy below joint
    training, mean over units), `worst_gap` (the worst held-out LLM, its mean over split seeds),
    `worst_unit_gap`, `prediction_gap` (points of prediction accuracy below joint), `accuracy_mae`
    and `benchmark_mae` (points), `interval_coverage` (share of units whose 90% interval holds the
    accuracy; `vector_interval_coverage`: of the vector's interval alone;
    `benchmark_interval_coverage`: of the per-benchmark intervals) and `interval_width`
    (points), `cost_usd` (mean per LLM); `test_accuracy_mae` and `test_interval_coverage`, the
    same on the test split alone, and `joint_test_accuracy_mae`, the joint space's own error on
    those accuracies (the same at every N);
    `model_accuracy_mae` (the space's mean P alone, uncorrected), `correction_weight`,
    `information_bound_mae` and `best_questions_bound_mae` (what N random answers, or N answers
    to the best questions possible, can tell without a prior: information_bound; the same for
    every strategy); and per N
    and strategy S the paired differences S - random in gap and accuracy error
    (`S_minus_random_gap`, `S_minus_random_accuracy_error`; negative: S is better) with 95%
    bootstrap intervals over units."""
    from ..routing.outcomes import bootstrap_ci
    strategies = [h for h in STRATEGIES if any(h in u for u in units)]
    curve = {}
    for n in responses:
        key, entry = str(n), {}
        for how in strategies:
            have = [u for u in units if key in u.get(how, {})]
            if not have:
                continue
            gap = np.array([(u["joint_routing_accuracy"] - u[how][key]["routing_accuracy"]) * 100 for u in have])
            per_llm: dict[str, list[float]] = {}
            for u, g in zip(have, gap):
                per_llm.setdefault(u["model"], []).append(float(g))
            costs = [u[how][key]["cost_usd"] for u in have if u[how][key]["cost_usd"] is not None]
            entry[how] = {
                "gap_to_joint": float(gap.mean()), "worst_gap": max(float(np.mean(v)) for v in per_llm.values()),
                "worst_unit_gap": float(gap.max()),
                "prediction_gap": float(np.mean([(u["joint_prediction_accuracy"] - u[how][key]["prediction_accuracy"])
                                                 * 100 for u in have])),
                "accuracy_mae": float(np.mean([u[how][key]["accuracy_error"] for u in have])),
                "model_accuracy_mae": float(np.mean([u[how][key]["model_accuracy_error"] for u in have])),
                "correction_weight": float(np.mean([u[how][key]["correction_weight"] for u in have])),
                "benchmark_mae": float(np.mean([e for u in have for e in u[how][key]["benchmark_errors"].values()])),
                "interval_coverage": float(np.mean([u[how][key]["interval_covers"] for u in have])),
                "vector_interval_coverage": float(np.mean([u[how][key]["vector_covers"] for u in have])),
                "benchmark_interval_coverage": float(np.mean([u[how][key]["benchmark_covers"] for u in have])),
                "interval_width": float(np.mean([u[how][key]["interval_width"] for u in have])),
                "test_accuracy_mae": float(np.mean([u[how][key]["test_accuracy_error"] for u in have])),
                "test_interval_coverage": float(np.mean([u[how][key]["test_interval_covers"] for u in have])),
                "cost_usd": float(np.mean(costs)) if costs else None, "units": len(have),
                "joint_test_accuracy_mae": float(np.mean([u["joint_test_accuracy_error"] for u in have])),
                **{key_: float(np.mean([information_bound(u["answer_variance"], n, best) * 100 for u in have]))
                   for key_, best in (("information_bound_mae", False), ("best_questions_bound_mae", True))}}
        for how in strategies:
            paired = [u for u in units if how != "random" and key in u.get(how, {}) and key in u.get("random", {})]
            if not paired:
                continue
            for metric, of in (("gap", lambda r: -r["routing_accuracy"] * 100), ("accuracy_error", lambda r: r["accuracy_error"])):
                d = np.array([of(u[how][key]) - of(u["random"][key]) for u in paired])
                entry[f"{how}_minus_random_{metric}"] = {"mean": float(d.mean()),
                                                         "ci95": bootstrap_ci(d, n_boot=4000, seed=seed)}
        curve[key] = entry
    return curve


PURPOSE_METRICS = {"route": ("gap_to_joint",), "estimate": ("accuracy_mae",), "both": ("gap_to_joint", "accuracy_mae")}
PAIRED = {"gap_to_joint": "gap", "accuracy_mae": "accuracy_error"}


def choose_strategies(runs: dict[str, tuple[list[str], dict]]) -> dict:
    """Onboarding's strategy per purpose from validation curves (`runs`: dataset -> (its
    strategies, summarise_curve's curve)). Per purpose, the metrics it cares about (PURPOSE_METRICS:
    route, the routing gap; estimate, the accuracy error; both, the two). A strategy is eligible
    when on every dataset and N its paired 95% interval against random on each of those metrics
    does not lie above 0 (random always is); the pick is the eligible one with the lowest mean over
    datasets and N of the metrics' sum (points). {purpose: {metrics, pick, strategies: {strategy:
    {score, eligible, worse_than_random}}}}."""
    first = next(iter(runs.values()))[0]
    names = [h for h in first if all(h in s for s, _ in runs.values())]
    out = {}
    for purpose, metrics in PURPOSE_METRICS.items():
        table = {}
        for how in names:
            scores, worse = [], []
            for name, (_, curve) in runs.items():
                for n, c in curve.items():
                    if how not in c:
                        continue
                    scores.append(sum(c[how][m] for m in metrics))
                    for m in metrics:
                        ci = c.get(f"{how}_minus_random_{PAIRED[m]}", {}).get("ci95")
                        if ci is not None and ci[0] > 0:
                            worse.append(f"{name} N={n} {m} [{ci[0]:+.2f}, {ci[1]:+.2f}]")
            table[how] = {"score": sum(scores) / len(scores), "eligible": not worse, "worse_than_random": worse}
        eligible = {h: t for h, t in table.items() if t["eligible"]}
        out[purpose] = {"metrics": list(metrics), "pick": min(eligible, key=lambda h: eligible[h]["score"]),
                        "strategies": table}
    return out


def plot_response_curve(curve: dict, path, plt, title: str = "") -> None:
    """Two panels over N: points below joint training (routing accuracy) and the accuracy MAE."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    ns = [int(k) for k in curve]
    for how, style in (("adaptive", "s-"), ("mixed", "^-"), ("random", "o--"), ("stratified", "v--"),
                       ("weighted", "d--")):
        if not any(how in c for c in curve.values()):
            continue
        for ax, metric in zip(axes, ("gap_to_joint", "accuracy_mae")):
            ys = [curve[str(n)].get(how, {}).get(metric, np.nan) for n in ns]
            ax.plot(ns, ys, style, label=f"{how} questions")
    axes[0].axhline(0, color="k", lw=1, ls=":")
    axes[0].set_ylabel("routing accuracy below joint training (points)")
    axes[1].set_ylabel("|estimated - true accuracy| (points)")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("responses of the new LLM (N)")
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
