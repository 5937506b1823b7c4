"""What routing saves: the cost-accuracy frontier of JE-IRT's cost policies against the routers
users compare with, on one dataset, split and price table (`benchmarks/cost_frontier.py` and the
report's `cost` study run it).

Methods, each deciding on expected costs and charged what the answers cost:
- `jeirt`, `mf`, `knn`: each method's P(correct) (recalibrated where validation says it helps:
  routing.calibration.choose_recalibration) under both cost policies (utility p - lambda x cost, lambda swept;
  the cheapest LLM within a share of the best p);
- `cluster`: the training-free cluster router (k-means on the frozen question embeddings, k
  chosen on validation; each LLM's training accuracy per cluster, shrunk to its overall rate)
  under the same policies;
- `threshold_2llm`: RouteLLM's threshold router between the best LLM on training data (strong)
  and a cheaper one (weak, chosen on validation), on MF's predicted advantage;
- `random_mix`: every LLM alone and random mixing of two (the hull of the single LLMs);
- `oracle`: the labels themselves under the utility policy (the cheapest right LLM).

The best single LLM is the most accurate on training questions among those that answered at least
95% as many of them as the best-covered LLM (on sparse data an LLM run on one benchmark alone is
no single-LLM alternative). Costs: input tokens counted
offline (routing.prices.TokenCounter) x input price + answer tokens x output price; the answer
tokens are the recorded ones where the data has them (decisions use the mean per LLM and nearest
benchmark over training answers), else routing.prices.DEFAULT_OUTPUT_TOKENS.
"""

from __future__ import annotations

import numpy as np
from sklearn.cluster import KMeans

from ..routing.calibration import choose_recalibration, ece
from ..routing.centroids import Centroids, unit
from ..routing.frontier import (Points, Singles, arena_score, bootstrap, figures, hull_value, lambdas, upper_hull,
                                policy_points, threshold_points)
from ..routing.outcomes import train_rates
from ..routing.prices import LLMPrices, OutputLengths, cost_matrix, token_counter
from .methods import predictors
from .prepare import Prepared

METHODS = ("jeirt", "mf", "knn", "cluster", "threshold_2llm", "random_mix", "oracle")
CLUSTER_KS = (4, 8, 16, 32, 64)
SHRINK = 5.0  # pseudo-answers at an LLM's overall rate in each cluster's rate
FULL_COVERAGE = 0.95  # of the best-covered LLM's share of training questions, to stand as a single LLM


class Costs:
    """Per question and LLM: the expected cost a router decides on, and what the answer cost."""

    def __init__(self, prep: Prepared, prices: LLMPrices, answer_tokens: np.ndarray | None):
        data = prep.data
        self.prices = prices
        self.input_tokens = token_counter().count(data.texts)
        train_rows = prep.split.questions(0)
        benches, bench_of = np.unique(np.asarray(data.benchmarks), return_inverse=True)
        # a query's benchmark as a router can tell it: the nearest training centroid
        centroids = Centroids.fit(prep.X[train_rows], benches[bench_of[train_rows]])
        self.nearest = np.searchsorted(benches, centroids.nearest(prep.X))
        if answer_tokens is not None:
            self.lengths = OutputLengths.from_matrix(answer_tokens, train_rows, np.asarray(data.benchmarks),
                                                     "recorded answers of training questions")
        else:
            self.lengths = OutputLengths.constant(data.n_models)
        self.expected_tokens = self.lengths.expected(self.nearest, data.n_questions)
        self.paid_tokens = self.expected_tokens if answer_tokens is None else \
            np.where(np.isnan(answer_tokens), self.expected_tokens, answer_tokens)

    def decide(self, rows: np.ndarray, prices: LLMPrices | None = None) -> np.ndarray:
        return cost_matrix(prices or self.prices, self.input_tokens[rows], self.expected_tokens[rows])

    def paid(self, rows: np.ndarray, prices: LLMPrices | None = None) -> np.ndarray:
        return cost_matrix(prices or self.prices, self.input_tokens[rows], self.paid_tokens[rows])


def cluster_rates(prep: Prepared, k: int, seed: int) -> np.ndarray:
    """(Q, M) each LLM's training accuracy in each question's k-means cluster (shrunk)."""
    train = prep.pairs("train")
    tq, tm, ty = train.q.numpy(), train.m.numpy(), train.y.numpy()
    x = unit(prep.X)
    rows = np.unique(tq)
    km = KMeans(n_clusters=min(k, len(rows)), n_init=3, random_state=seed).fit(x[rows])
    cluster = km.predict(x)
    overall = np.nan_to_num(train_rates(prep.data.n_models, tm, ty)[0], nan=0.5)
    sums, counts = np.zeros((km.n_clusters, prep.data.n_models)), np.zeros((km.n_clusters, prep.data.n_models))
    np.add.at(sums, (cluster[tq], tm), ty)
    np.add.at(counts, (cluster[tq], tm), 1)
    rates = (sums + SHRINK * overall[None, :]) / (counts + SHRINK)
    return rates[cluster]


def _aiq_on(points: Points, singles: Singles) -> float:
    sc, sa = singles.means()
    ok = np.isfinite(sc)
    c, a = points.means()
    return figures(c, a, float(sc[ok].max()), float(sa[ok].max()), (float(sc[ok].min()), float(sc[ok].max())))["aiq"]


def cost_study(prep: Prepared, prices: LLMPrices, answer_tokens: np.ndarray | None = None, *, members: int = 5,
               seed: int = 0, n_boot: int = 500, open_weight: np.ndarray | None = None, progress: bool = False,
               **predictor_kw) -> dict:
    """The frontier figures of every method (see the module's docstring) on the test questions,
    with bootstrap intervals; calibration; and, with `open_weight` (a mask of LLMs), the
    sensitivity of the AIQ ranking to those LLMs' prices halved and doubled."""
    data = prep.data
    costs = Costs(prep, prices, answer_tokens)
    parts = {}
    for name, which in (("val", 1), ("test", 2)):
        rows = prep.split.questions(which)
        labels = data.label_matrix(rows)
        keep = (~np.isnan(labels)).any(1)
        parts[name] = (rows[keep], labels[keep])
    train = prep.pairs("train")
    acc_train = np.nan_to_num(train_rates(data.n_models, train.m.numpy(), train.y.numpy())[0], nan=-1)
    # single LLMs are compared only where they answered (nearly) every question: on sparse data an
    # LLM run on one easy benchmark alone would look cheap and accurate
    answered = np.bincount(train.m.numpy(), minlength=data.n_models) / max(1, len(np.unique(train.q.numpy())))
    full = answered >= FULL_COVERAGE * answered.max()
    if full.sum() < 2:
        full = np.ones(data.n_models, bool)

    probs, calibration = {}, {}
    for name, predict, seconds, _ in predictors(prep, ("jeirt", "mf", "knn"), members=members, train_seed=seed,
                                                progress=progress, **predictor_kw):
        p = {part: predict(rows) for part, (rows, _) in parts.items()}
        temps, report = choose_recalibration(p["val"], parts["val"][1], seed)
        kept = report["choice"] != "none"
        test_l = parts["test"][1]
        seen = ~np.isnan(test_l)
        p_cal = {k: temps.apply(v) if kept else v for k, v in p.items()}
        per_llm = [ece(p["test"][seen[:, m], m], test_l[seen[:, m], m]) for m in range(data.n_models)]
        per_llm_cal = [ece(p_cal["test"][seen[:, m], m], test_l[seen[:, m], m]) for m in range(data.n_models)]
        calibration[name] = {"ece": ece(p["test"][seen], test_l[seen]),
                             "ece_recalibrated": ece(p_cal["test"][seen], test_l[seen]),
                             "recalibration_kept": bool(kept), **report,
                             "ece_per_llm": dict(zip(data.models.tolist(), per_llm)),
                             "ece_per_llm_recalibrated": dict(zip(data.models.tolist(), per_llm_cal)),
                             "train_seconds": seconds}
        probs[name] = p_cal

    # the cluster router: k chosen by validation AIQ
    val_rows, val_l = parts["val"]
    val_singles = Singles(costs.paid(val_rows), np.where(full[None, :], val_l, np.nan))
    lam_val = lambdas(costs.decide(val_rows))
    best_k, best = None, -np.inf
    for k in CLUSTER_KS:
        rates = cluster_rates(prep, k, seed)
        a = _aiq_on(policy_points(rates[val_rows], costs.decide(val_rows), costs.paid(val_rows), val_l, lam_val),
                    val_singles)
        if a > best:
            best_k, best, best_rates = k, a, rates
    probs["cluster"] = {part: best_rates[rows] for part, (rows, _) in parts.items()}

    # the two-LLM threshold router: strong = best on training data, weak chosen by validation AIQ
    strong = int(np.argmax(np.where(full, acc_train, -1)))
    dearer = costs.decide(val_rows).mean(0)
    weak_options = [m for m in range(data.n_models) if dearer[m] < dearer[strong]] or \
        [m for m in range(data.n_models) if m != strong]

    def two_llm(part, weak, prices_=None):
        rows, labels = parts[part]
        adv = probs["mf"][part][:, strong] - probs["mf"][part][:, weak]
        return threshold_points(adv, strong, weak, costs.decide(rows, prices_), costs.paid(rows, prices_), labels)

    weak = max(weak_options, key=lambda w: _aiq_on(two_llm("val", w), val_singles))

    def all_points(part: str, prices_: LLMPrices | None = None) -> dict[str, Points]:
        rows, labels = parts[part]
        decide, paid = costs.decide(rows, prices_), costs.paid(rows, prices_)
        lams = lambdas(decide)
        out = {m: policy_points(probs[m][part], decide, paid, labels, lams) for m in ("jeirt", "mf", "knn", "cluster")}
        out["threshold_2llm"] = two_llm(part, weak, prices_)
        out["oracle"] = policy_points(np.nan_to_num(labels), paid, paid, labels, lams)
        return out

    test_rows, test_l = parts["test"]
    singles = Singles(costs.paid(test_rows), np.where(full[None, :], test_l, np.nan))
    sc, sa = singles.means()
    ok = np.isfinite(sc)
    cost_range = (float(sc[ok].min()), float(sc[ok].max()))
    ref = strong
    points = all_points("test")
    val_points = all_points("val")
    single_hull = upper_hull([(float(c), float(a)) for c, a in zip(sc[ok], sa[ok])])
    methods: dict[str, dict] = {}
    for name, pts in points.items():
        c, a = pts.means()
        f = figures(c, a, float(sc[ref]), float(sa[ref]), cost_range)
        vc, va = val_points[name].means()
        pick = int(np.argmax([arena_score(x, y) for x, y in zip(vc, va)]))
        methods[name] = {**{k: v for k, v in f.items() if k != "hull"}, "hull": f["hull"],
                         "arena": {"score": arena_score(float(c[pick]), float(a[pick])), "cost_per_1k": float(c[pick]),
                                   "accuracy": float(a[pick]), "setting": pts.settings[pick]}}
    rm = figures(np.array([p[0] for p in single_hull]), np.array([p[1] for p in single_hull]), float(sc[ref]),
                 float(sa[ref]), cost_range)
    vsc, vsa = val_singles.means()
    one = int(np.nanargmax([arena_score(x, y) if np.isfinite(x) else -1 for x, y in zip(vsc, vsa)]))
    methods["random_mix"] = {**rm, "arena": {"score": arena_score(float(sc[one]), float(sa[one])),
                                             "cost_per_1k": float(sc[one]), "accuracy": float(sa[one]),
                                             "setting": {"llm": str(data.models[one])}}}
    boot = bootstrap(points, singles, ref, n_boot=n_boot, seed=seed, pairs=(("jeirt", "cluster"), ("jeirt", "mf"),
                                                                           ("jeirt", "knn"), ("jeirt", "threshold_2llm")))
    for name in (*points, "random_mix"):
        methods[name].update(boot[name])
    jeirt_hull = methods["jeirt"]["hull"]
    above = [data.models[m] for m in np.flatnonzero(ok)
             if (hull_value(jeirt_hull, float(sc[m])) is None or float(sa[m]) > hull_value(jeirt_hull, float(sc[m])) + 1e-9)]
    out = {"data": data.name, "split_seed": seed, "test_questions": int(len(test_rows)),
           "prices": prices.summary(), "token_counter": token_counter().name, "answer_tokens": costs.lengths.source,
           "best_single": {"llm": str(data.models[ref]), "accuracy": float(sa[ref]), "cost_per_1k": float(sc[ref]),
                           "chosen_by": "training accuracy"},
           "singles": [{"llm": str(data.models[m]), "accuracy": float(sa[m]), "cost_per_1k": float(sc[m]),
                        "price_source": prices.sources[m]} for m in np.flatnonzero(ok)],
           "singles_above_jeirt_frontier": above, "cluster_k": best_k,
           "singles_note": f"{int(full.sum())} of {data.n_models} LLMs answered at least {FULL_COVERAGE:.0%} as many "
                           f"training questions as the best-covered one and stand as single LLMs (the reference, "
                           f"random mixing)",
           "threshold_2llm_pair": {"strong": str(data.models[strong]), "weak": str(data.models[weak])},
           "methods": methods, "calibration": calibration,
           "aiq_jeirt_minus_cluster": methods["jeirt"]["aiq"] - methods["cluster"]["aiq"],
           "aiq_jeirt_minus_cluster_ci95": boot["pairs"]["jeirt-cluster"],
           "aiq_differences_ci95": boot["pairs"]}
    if open_weight is not None and open_weight.any():
        out["sensitivity"] = {}
        for factor in (0.5, 2.0):
            scaled = prices.scaled(factor, open_weight)
            pts = all_points("test", scaled)
            s2 = Singles(costs.paid(test_rows, scaled), np.where(full[None, :], test_l, np.nan))
            c2, a2 = s2.means()
            ok2 = np.isfinite(c2)
            rng2 = (float(c2[ok2].min()), float(c2[ok2].max()))
            aiqs = {m: figures(*p.means(), float(c2[ref]), float(a2[ref]), rng2)["aiq"] for m, p in pts.items()}
            out["sensitivity"][f"open_weight_x{factor:g}"] = {"aiq": aiqs,
                                                              "ranking": sorted(aiqs, key=aiqs.get, reverse=True)}
        out["sensitivity"]["base_ranking"] = sorted((m for m in points), key=lambda m: methods[m]["aiq"], reverse=True)
    return out
