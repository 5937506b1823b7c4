"""Adaptive onboarding: which questions to ask a new LLM next, and when to stop asking.

What the answers so far say about the new LLM's vector is, per member of the space, the Laplace
posterior of `onboarding.fit_row` under the known LLMs' prior (with no answers: the prior itself).
A question's worth is how much its answer is expected to shrink the posterior variance of what
is to be known: for a candidate with direction u, weight w = p(1 - p) and posterior covariance S,
observing it turns S into S - w S u u' S / (1 + w u'Su), so the variance of a linear function g'
of the vector drops by w (g'Su)^2 / (1 + w u'Su), and of a set of them (the rows of a matrix
with second moment M) by w u'SMSu / (1 + w u'Su): the whole candidate pool is scored in one pass.
By default g is the gradient of the predicted accuracy (the mean P(correct) over a reference set:
the space's questions of the chosen benchmarks), so the questions asked are those that pin the
new LLM's accuracy down fastest; `target="questions"` spreads the effort over every reference
question's P(correct) instead (M their weighted second moment). On mmlu_pro's validation split
(10 held-out LLMs, split seeds 0-2) the accuracy target was closer to joint training from 50
answers (0.22 against 0.34 points of routing accuracy) with a smaller error on the accuracy
(3.4 against 3.8 points), hence the default. A batch of k is chosen greedily with S updated after
each pick (rank one), so a batch does not ask the same thing k times.

Intervals and stopping: the new LLM's predicted accuracy gets an interval from posterior draws of
its vector, widened by the space's own error on an LLM's accuracy where the space records it
(`space_error`, measured on validation questions when it is trained), which no number of answers
removes; ask until the vector's part of the interval is narrower than a target.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .anchors import MIN_KNOWN, anchors_of
from .onboarding import RowFit, directions, fit_row, known_proba, member_priors
from .onboarding_defaults import DEFAULT_PURPOSE, DEFAULT_TARGET_WIDTH, check_strategy, random_share
from .space import CoreSpace

DEFAULT_LEVEL = 0.9
ERROR_DRAWS = 20  # draws of the space's error per draw of the vector
# an interval's spread is at least this share of the level's standard error that the answers
# allow without a prior (accuracy_intervals; chosen on validation, docs/results/benchmarks.md)
LEVEL_FLOOR = 1.0
TARGETS = ("questions", "accuracy")
# what one plan computes with, so that a space of any size plans in about a second: questions
# scored as candidates (a random subset of those that may be asked), and the reference questions
# whose variance they reduce and whose draws give the interval (a sample, stratified by benchmark;
# the predicted accuracy itself is the mean over all of them)
MAX_CANDIDATES = 2000
REFERENCE_SAMPLE = 3000


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def belief(space: CoreSpace, name: str, x: np.ndarray | None, labels: np.ndarray | None,
           prior: str = "population", exclude: list[str] | tuple = (), scale: float = 1.0) -> list[RowFit]:
    """Per member, the posterior of LLM `name`'s vector from its labels on questions with encoder
    embeddings `x` (none: the prior). The prior is built from the other LLMs of the space, less
    those in `exclude` (e.g. LLMs held out of its training, whose vectors were never fitted), its
    covariance times `scale` (onboarding.member_priors)."""
    labels = np.zeros(0) if labels is None else np.asarray(labels, dtype=np.float64)
    dirs = directions(space, x) if len(labels) else None
    fits = []
    for i, (mean, cov) in enumerate(member_priors(space, name, prior, exclude, scale)):
        u, norm = dirs[i] if dirs else (np.zeros((0, len(mean))), np.zeros(0))
        fits.append(fit_row(u, norm, labels, mean, cov))
    return fits


def select(candidates: list[tuple[np.ndarray, np.ndarray]], reference: list[tuple[np.ndarray, np.ndarray]],
           fits: list[RowFit], k: int, costs: np.ndarray | None = None,
           max_usd: float | None = None, target: str = "accuracy") -> tuple[list[int], list[float]]:
    """Greedily the `k` candidates (per member: directions and norms) whose answers most reduce
    the posterior variance of P(correct) over the `reference` questions (module docstring), and
    each one's expected reduction (summed over members, per reference question). With `costs`
    (one per candidate), the reduction per unit of cost is maximised instead, and with `max_usd`
    only what still fits in it is taken (fewer than k when it runs out). `target`: "accuracy"
    (the variance of the reference questions' mean P(correct), the predicted accuracy: M = g g'
    with g the mean of p(1 - p) r; the default, chosen on validation) or "questions" (the
    variance of each one's P(correct), summed)."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}: one of {TARGETS}")
    n = len(candidates[0][0])
    state = []
    for (u, norm), (r, rnorm), f in zip(candidates, reference, fits):
        cov = f.cov.copy()
        pr = _sigmoid(r @ f.theta - rnorm)
        if target == "questions":
            m = (r * ((pr * (1 - pr)) ** 2)[:, None]).T @ r / max(len(r), 1)
        else:
            g = (r * (pr * (1 - pr))[:, None]).mean(0)
            m = np.outer(g, g)
        a = u @ cov  # (n, d): S u for every candidate
        pc = _sigmoid(u @ f.theta - norm)
        w = pc * (1 - pc)
        s = (a * u).sum(1)  # u'Su
        t = ((a @ m) * a).sum(1)  # u'SMSu
        state.append([u, m, a, w, s, t])
    taken: list[int] = []
    gains: list[float] = []
    free = np.ones(n, dtype=bool)
    left = np.inf if max_usd is None else float(max_usd)
    for _ in range(min(k, n)):
        gain = sum(w * t / (1 + w * s) for _, _, _, w, s, t in state)
        score = gain / np.maximum(costs, 1e-12) if costs is not None else gain.copy()
        ok = free & ((costs <= left) if costs is not None else True)
        if not ok.any():
            break
        score[~ok] = -np.inf
        i = int(np.argmax(score))
        taken.append(i)
        gains.append(float(gain[i]))
        free[i] = False
        if costs is not None:
            left -= float(costs[i])
        for st in state:  # the posterior after answer i, whatever it is (Laplace, p held)
            u, m, a, w, s, t = st
            v = a[i].copy()  # S u_i
            c = w[i] / (1 + w[i] * s[i])
            uv = a @ u[i]  # u' S u_i for every candidate
            amv = a @ (m @ v)
            st[5] = t - 2 * c * uv * amv + c * c * uv * uv * float(v @ m @ v)
            st[4] = s - c * uv * uv
            st[2] = a - c * np.outer(uv, v)
    return taken, gains


def stratified_sample(groups: np.ndarray, size: int, rng: np.random.Generator, least: int = 50) -> np.ndarray:
    """Sorted indices of about `size` of the items (all of them if there are no more), each
    group (label) represented in proportion, and by at least `least` items (or all it has)."""
    if len(groups) <= size:
        return np.arange(len(groups))
    out = []
    for g in dict.fromkeys(groups.tolist()):
        rows = np.flatnonzero(groups == g)
        take = min(len(rows), max(least, int(round(size * len(rows) / len(groups)))))
        out.append(rng.choice(rows, size=take, replace=False))
    return np.sort(np.concatenate(out))


def accuracy_draws(reference: list[tuple[np.ndarray, np.ndarray]], fits: list[RowFit], groups: np.ndarray | None = None,
                   draws: int = 100, seed: int = 0, sample: np.ndarray | None = None,
                   observed: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[dict, dict, dict, dict]:
    """(point, samples, unanswered, level_sd): the predicted accuracy (mean P(correct), averaged over
    members) over the reference questions, overall and per group label, at the posterior mode,
    and its values under `draws` posterior draws of the vector (the members' draws averaged).
    With `sample` (indices of the reference), the draws move the mode's accuracy by what they do
    on the sample. `observed` (indices of the reference, labels): questions already answered
    count as their labels, in the point and in every draw. `unanswered`: the standard deviation
    of the accuracy on these questions that the unanswered ones' own coin flips add (each
    answered right with its P): the accuracy estimated is that of these questions, not of an
    endless supply like them. `level_sd`: the least standard error of the accuracy that the
    answers allow without a prior (analysis/onboarding_curve.py information_bound): how far it
    moves with the LLM's overall level (the unanswered questions' mean p(1 - p)) over the square
    root of the answers' Fisher information on that level (their sum of p(1 - p)); none without
    answers."""
    rng = np.random.default_rng(seed)
    n = len(reference[0][0])
    sample = np.arange(n) if sample is None else sample
    p_mode, p_draw = 0.0, 0.0
    for (r, rnorm), f in zip(reference, fits):
        p_mode = p_mode + _sigmoid(r @ f.theta - rnorm)
        chol = np.linalg.cholesky(f.cov + 1e-12 * np.eye(len(f.cov)))
        thetas = f.theta[:, None] + chol @ rng.standard_normal((len(f.theta), draws))
        p_draw = p_draw + _sigmoid(r[sample] @ thetas - rnorm[sample][:, None])
    p_mode, p_draw = p_mode / len(fits), p_draw / len(fits)
    shift = p_draw - p_mode[sample][:, None]  # (sample, draws)
    flips = p_mode * (1 - p_mode)
    fisher = 0.0
    if observed is not None and len(observed[0]):
        fisher = float(flips[observed[0]].sum())
        p_mode[observed[0]] = observed[1]
        flips[observed[0]] = 0.0
        shift[np.isin(sample, observed[0])] = 0.0
    point = {"overall": float(p_mode.mean())}
    samples = {"overall": point["overall"] + shift.mean(0)}
    unanswered = {"overall": float(np.sqrt(flips.sum()) / n)}
    level_sd = {"overall": float(flips.mean() / np.sqrt(fisher)) if fisher > 0 else 0.0}
    if groups is not None:
        for g in dict.fromkeys(groups.tolist()):
            point[g] = float(p_mode[groups == g].mean())
            samples[g] = point[g] + shift[groups[sample] == g].mean(0)
            unanswered[g] = float(np.sqrt(flips[groups == g].sum()) / (groups == g).sum())
            level_sd[g] = float(flips[groups == g].mean() / np.sqrt(fisher)) if fisher > 0 else 0.0
    return point, samples, unanswered, level_sd


def space_error(space: CoreSpace, x: np.ndarray, q: np.ndarray, m: np.ndarray, y: np.ndarray,
                groups: np.ndarray | None = None, least: int = 20) -> dict:
    """The space's own error on an LLM's accuracy: for each of its LLMs with at least `least`
    answers to questions it was not trained on (`x`: their embeddings; answers as pairs of a row
    of x `q`, an LLM index `m` and a label `y`), its predicted accuracy there (the mean P(correct))
    minus its accuracy. The standard deviation of that error, less the binomial noise of the
    answers themselves (so it is the error on the accuracy over many questions), overall and per
    group (`groups`: a label per row of x): {"overall": sd, "groups": {g: sd}, "llms", "answers"}."""
    q, m, y = np.asarray(q), np.asarray(m), np.asarray(y, dtype=np.float64)
    rows = np.unique(q)
    p = space.predict_proba(x[rows])[np.searchsorted(rows, q), m]

    def sd(mask) -> float | None:
        errors, noise = [], []
        for j in np.unique(m[mask]):
            sel = mask & (m == j)
            if sel.sum() >= least:
                errors.append(p[sel].mean() - y[sel].mean())
                noise.append((p[sel] * (1 - p[sel])).mean() / sel.sum())
        return float(np.sqrt(max(0.0, np.mean(np.square(errors)) - np.mean(noise)))) if errors else None

    every = np.ones(len(q), dtype=bool)
    out = {"overall": sd(every), "groups": {}, "llms": int(sum((m == j).sum() >= least for j in np.unique(m))),
           "answers": int(len(q))}
    if groups is not None:
        g_of = np.asarray(groups)[q]
        out["groups"] = {str(g): v for g in dict.fromkeys(g_of.tolist()) if (v := sd(g_of == g)) is not None}
    return out


def _error_sd(error: dict | None, group: str) -> float:
    if not error or error.get("overall") is None:
        return 0.0
    return error["overall"] if group == "overall" else error.get("groups", {}).get(group, error["overall"])


def accuracy_intervals(reference, fits, groups=None, level: float = DEFAULT_LEVEL, draws: int = 100,
                       seed: int = 0, sample: np.ndarray | None = None, error: dict | None = None,
                       observed: tuple[np.ndarray, np.ndarray] | None = None,
                       corrections: dict | None = None, level_floor: float = LEVEL_FLOOR) -> dict[str, dict]:
    """{"overall" | group: {"accuracy", "low", "high", "questions", "vector_width",
    "model_accuracy", "correction_weight"}}: the estimated accuracy and its central `level`
    interval. The model's part: the posterior of the vector (accuracy_draws; `observed` answers
    count as their labels) and, with `error` (space_error), the space's own error as independent
    normal noise; with `corrections` (model/estimate.py: the random answers' mean residual and
    its variance, per group), the estimate is moved by the correction as far as its variance
    allows (`combine`); its spread is then widened, where narrower, to `level_floor` times the
    least that the answers allow without a prior (accuracy_draws' `level_sd`: a prior built from
    the known LLMs claims too much about a new one unlike them); last, the unanswered questions'
    own coin flips (accuracy_draws), as the accuracy is that of these reference questions.
    `model_accuracy`: the space's prediction alone; `vector_width`: the width of the interval of
    the vector's draws alone, the part that more answers narrow."""
    from .estimate import combine
    point, samples, unanswered, level_sd = accuracy_draws(reference, fits, groups, draws, seed, sample, observed)
    rng = np.random.default_rng(seed + 1)
    q = [(1 - level) / 2, 1 - (1 - level) / 2]
    sizes = {"overall": len(reference[0][0])}
    seen = np.zeros(sizes["overall"], dtype=bool)
    if observed is not None:
        seen[observed[0]] = True
    unobserved = {"overall": 1 - seen.mean()}
    if groups is not None:
        for g in point:
            if g != "overall":
                sizes[g] = int((groups == g).sum())
                unobserved[g] = 1 - seen[groups == g].mean()
    out = {}
    for g, vector in samples.items():
        full = (vector[:, None] + rng.normal(0.0, _error_sd(error, g), (len(vector), ERROR_DRAWS))).ravel()
        estimate, full, weight = combine(point[g], full, (corrections or {}).get(g), unobserved[g], seed)
        spread, least = float(full.std()), level_floor * level_sd[g]
        if least > spread:
            full = estimate + (full - estimate) * (least / spread) if spread > 0 else \
                estimate + rng.normal(0.0, least, len(full))
        full = full + rng.normal(0.0, unanswered[g], len(full))
        low, high = np.clip(np.quantile(full, q), 0.0, 1.0)
        v_low, v_high = np.quantile(vector, q)
        out[g] = {"accuracy": float(np.clip(estimate, 0.0, 1.0)), "low": float(low), "high": float(high),
                  "questions": sizes[g], "vector_width": float(v_high - v_low), "model_accuracy": point[g],
                  "correction_weight": float(weight)}
    return out


def strategy_for(space: CoreSpace, strategy: str | None, purpose: str) -> str:
    """The strategy a plan of this space uses: `strategy` if given, else the one `purpose` picks,
    which is `anchored` instead of `random` where the space keeps enough known LLMs' answers to
    choose anchors (model/anchors.py)."""
    chosen = check_strategy(strategy, purpose)
    if strategy is None and chosen == "random" and anchors_of(space) is not None:
        return "anchored"
    if chosen == "anchored" and anchors_of(space) is None:
        raise ValueError("the anchored strategy needs a space that keeps the answers of hundreds of known LLMs "
                         f"(at least {MIN_KNOWN} that answered nearly every question): choose another "
                         "--strategy, or train the space on such data")
    return chosen


@dataclass
class Plan:
    """What to ask next and what is known so far (see `plan`)."""

    questions: list[dict]  # {"question_id", "benchmark", "gain", "cost_usd"} in the order to ask
    predicted: dict[str, dict]  # "overall" and each benchmark: accuracy, low, high, questions, vector_width
    interval_width: float  # of the overall predicted accuracy
    stop: bool  # the vector's part of the overall interval is narrower than the target
    answered: int

    def to_dict(self) -> dict:
        return {"questions": self.questions, "predicted": self.predicted, "interval_width": self.interval_width,
                "stop": self.stop, "answered": self.answered}


def plan(space: CoreSpace, name: str, answered: dict[str, float], k: int, *, strategy: str | None = None,
         purpose: str = DEFAULT_PURPOSE, benchmarks: list[str] | None = None, costs: dict[str, float] | None = None,
         max_usd: float | None = None, target_width: float = DEFAULT_TARGET_WIDTH, level: float = DEFAULT_LEVEL,
         seed: int = 0, prior: str = "population", allowed: set[str] | None = None, target: str = "accuracy",
         order_seed: int = 0) -> Plan:
    """The next `k` questions of the space (ids of its stored questions) to ask LLM `name`, given
    its graded answers so far (`answered`: question id -> label in [0, 1]), and its estimated
    accuracy per benchmark with intervals (model/estimate.py: the space's predictions, the
    answered questions as answered, corrected by the answers to questions drawn at random).
    `strategy` (onboarding_defaults.random_share): the share of each batch taken in a random
    order seeded by `order_seed` (fixed for one onboarding; `stratified`: spread over the
    benchmarks; `weighted`: drawn more often where the space's other LLMs are unsure), the rest `select`ed adaptively; none: the one `purpose` ("route", "estimate" or
    "both") picks. `benchmarks`: ask and predict only within these; `allowed`: ask only these
    question ids (e.g. those an answer key can grade); `costs` (question id -> USD of asking it)
    with `max_usd`: spend at most that on the questions planned. The intervals include the
    space's own error where its metadata records it (`accuracy_error`, space_error). `stop` says
    the vector's part of the overall interval is narrower than `target_width`: more answers would
    not narrow it much. `target`: what the adaptive questions aim to pin down (`select`)."""
    from .estimate import corrections, crossfit_residuals, draw_probabilities, next_in_order, random_draws, sample_order
    strategy = strategy_for(space, strategy, purpose)
    if space.question_embeddings is None or not space.question_ids:
        raise ValueError("this space stores no question embeddings: retrain it with this version of jeirt")
    ids = np.asarray(space.question_ids)
    bench = np.asarray(space.question_benchmarks if len(space.question_benchmarks) == len(ids) else [""] * len(ids))
    pos = {q: i for i, q in enumerate(ids.tolist())}
    unknown = [q for q in answered if q not in pos]
    if unknown:
        raise KeyError(f"{len(unknown)} answered question id(s) are not questions of this space, e.g. {unknown[:3]}")
    scope = np.ones(len(ids), dtype=bool)
    if benchmarks:
        missing = sorted(set(benchmarks) - set(bench.tolist()))
        if missing:
            raise KeyError(f"unknown benchmark(s) {missing}: the space has {sorted(set(bench.tolist()))}")
        scope = np.isin(bench, benchmarks)
    done = np.array([pos[q] for q in answered], dtype=int)
    labels = np.array(list(answered.values()), dtype=np.float64)
    x = space.question_embeddings
    fits = belief(space, name, x[done] if len(done) else None, labels, prior=prior)
    rng = np.random.default_rng(seed)
    ref_rows = np.flatnonzero(scope)
    reference = directions(space, x[ref_rows])
    sample = stratified_sample(bench[ref_rows], REFERENCE_SAMPLE, rng)
    # the random draws among the answers (the answered prefix of the seeded order over the scope)
    # and their cross-fitted residuals: the estimate's correction
    is_done = np.zeros(len(ids), dtype=bool)
    is_done[done] = True
    askable = scope & (np.isin(ids, list(allowed)) if allowed is not None else True)
    probs = None
    if strategy == "weighted":  # the known LLMs' answers on the scope say where to draw
        others = [j for j, m in enumerate(space.model_names) if m != name]
        probs = draw_probabilities(known_proba(space, reference, others))
    anchors = anchors_of(space) if strategy == "anchored" else None
    if anchors is not None:
        order = anchors.within(ref_rows)
    else:
        order = ref_rows[sample_order(bench[ref_rows], order_seed, stratified=strategy == "stratified",
                                      probabilities=probs)]
    draws = random_draws(order, is_done, skip=~(askable | is_done))  # anchored: the answered anchors
    answer_of = {int(r): i for i, r in enumerate(done.tolist())}
    at = np.array([answer_of[int(r)] for r in draws], dtype=int)
    fixes = {}
    if len(draws) and anchors is None:
        resid, p_draws = crossfit_residuals(directions(space, x[done]), labels, member_priors(space, name, prior),
                                            at, seed=seed)
        weights = None if probs is None else 1 / probs[np.searchsorted(ref_rows, draws)]
        fixes = corrections(resid, p_draws, bench[draws], bench[ref_rows], weights)
    in_scope = scope[done]
    observed = (np.searchsorted(ref_rows, done[in_scope]), labels[in_scope])
    grouped = bench[ref_rows] if benchmarks or len(set(bench)) > 1 else None
    predicted = accuracy_intervals(reference, fits, grouped, level=level, seed=seed, sample=sample,
                                   error=space.metadata.get("accuracy_error"), observed=observed, corrections=fixes)
    for g, v in predicted.items():
        v["random_answers"] = 0 if anchors is not None else \
            int(len(draws) if g == "overall" else (bench[draws] == g).sum())
        v["anchor_answers"] = 0
    if anchors is not None:  # the accuracy learned from the answered anchors, over the questions it may be asked
        domain = ref_rows[(askable | is_done)[ref_rows]]
        groups = {"overall": domain} | ({g: domain[bench[domain] == g] for g in predicted if g != "overall"}
                                        if grouped is not None else {})
        for g, (accuracy, low, high) in anchors.estimate(draws, labels[at], groups, level).items():
            predicted[g].update(accuracy=accuracy, low=low, high=high, anchor_answers=int(len(draws)))
    width = predicted["overall"]["high"] - predicted["overall"]["low"]
    free = askable & ~is_done
    cand_rows = np.flatnonzero(free)
    cost_of = None
    if costs is not None:
        cost_of = np.array([float(costs.get(q, np.nan)) for q in ids[cand_rows]])
        if np.isnan(cost_of).any():
            raise KeyError(f"no cost for {int(np.isnan(cost_of).sum())} candidate question(s), e.g. "
                           f"{ids[cand_rows][np.isnan(cost_of)][:3].tolist()}")
    row_cost = dict(zip(cand_rows.tolist(), cost_of.tolist())) if cost_of is not None else {}
    # the random share: the next askable questions of the order, while they fit in max_usd
    picked_rows, gains, spent = [], [], 0.0
    share = random_share(strategy, len(done))
    for r in next_in_order(order, free, min(k, int(round(k * share)))):
        c = row_cost.get(int(r), 0.0)
        if max_usd is not None and spent + c > max_usd:
            break
        picked_rows.append(int(r))
        gains.append(float("nan"))
        spent += c
    rest = k - len(picked_rows)
    if share < 1 and rest > 0:
        keep = ~np.isin(cand_rows, picked_rows)
        cand, cand_cost = cand_rows[keep], (cost_of[keep] if cost_of is not None else None)
        if len(cand) > MAX_CANDIDATES:
            sub = np.sort(rng.choice(len(cand), size=MAX_CANDIDATES, replace=False))
            cand, cand_cost = cand[sub], (cand_cost[sub] if cand_cost is not None else None)
        if len(cand):
            at_ref = np.searchsorted(ref_rows, cand)  # the candidates are reference questions: no second forward
            chosen, more = select([(r[at_ref], n[at_ref]) for r, n in reference],
                                  [(r[sample], n[sample]) for r, n in reference], fits, rest, cand_cost,
                                  None if max_usd is None else max_usd - spent, target=target)
            picked_rows += cand[chosen].tolist()
            gains += more
    questions = [{"question_id": str(ids[r]), "benchmark": str(bench[r]), "gain": None if np.isnan(g) else g,
                  "cost_usd": row_cost.get(r) if cost_of is not None else None}
                 for r, g in zip(picked_rows, gains)]
    return Plan(questions, predicted, float(width), bool(predicted["overall"]["vector_width"] <= target_width),
                int(len(done)))
