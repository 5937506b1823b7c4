"""The paper's studies on one dataset, each a function of a `Study` that returns its results (and
writes its PNGs); `report.run_report` runs them and `render` writes them as markdown and HTML.

Studies (STUDIES, in report order): routing (JE-IRT argmax against the reference routers and the
baselines' argmax, with the accuracy-vs-cost curve, AIQ and CPT), onboarding (accuracy vs the
share of a new LLM's data), the classical 2PL's failure, norm vs difficulty, the LLM-internal
taxonomy, difference-of-means probes, leave-one-benchmark-out, and the absence of a universal
ranking with the smoothness of predictions. Test questions are used only for the scores that
need held-out data; every fit is on training data.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable

import numpy as np
from scipy.special import expit

from ..experiments.prepare import Prepared
from ..model.space import CoreSpace
from ..routing.costs import default_costs
from ..routing.frontier import aiq, cost_curve, cpt, margin_curve, single_llm_points
from ..routing.outcomes import available_argmax, baseline_routers, bootstrap_ci, routed_labels, train_rates
from . import geometry, irt
from .lobo import leave_one_benchmark_out
from .onboarding_curve import onboarding_curve, plot_curve

ARITHMETIC = re.compile(r"\d\s*[-+*/x×÷^]\s*\d|\b(sum|product|plus|minus|times|divided|multiply|calculate)\b", re.I)


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


@dataclass
class Study:
    """What a study needs: the dataset with its split, the trained space, where to write."""

    prep: Prepared
    space: CoreSpace
    out: Path
    seed: int = 0
    costs: np.ndarray | None = None  # per LLM; None: default_costs from the names
    progress: bool = True
    prices: object = None  # routing.prices.LLMPrices: the `cost` study's prices (None: that study is skipped)
    answer_tokens: np.ndarray | None = None  # (Q, M) recorded answer tokens, where the data has them

    @cached_property
    def plt(self):
        return _plt()

    @cached_property
    def train(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        d = self.prep.data
        mask = self.prep.split.masks(d)[0]
        return d.q_idx[mask], d.m_idx[mask], d.labels[mask]

    @cached_property
    def E(self) -> np.ndarray:
        """Question vectors, averaged over the space's members."""
        return np.mean([self.space.question_vectors(self.prep.X, member=i) for i in range(len(self.space.members))],
                       axis=0)

    @cached_property
    def norms(self) -> np.ndarray:
        return np.linalg.norm(self.E, axis=1)

    @cached_property
    def directions(self) -> np.ndarray:
        return self.E / self.norms[:, None].clip(1e-9)

    @cached_property
    def probs(self) -> np.ndarray:
        return self.space.predict_proba(self.prep.X)

    def save(self, fig, name: str) -> None:
        fig.tight_layout()
        fig.savefig(self.out / name, dpi=110)
        self.plt.close(fig)

    def train_space(self, prep: Prepared, members: int = 1) -> CoreSpace:
        from ..experiments.methods import train_space
        return train_space(prep, self.space.config, members=members, seed=self.seed, progress=False)


def study_routing(s: Study) -> dict:
    prep, data = s.prep, s.prep.data
    tq, tm, ty = s.train
    rows = prep.rows("test")
    labels = data.label_matrix(rows)
    available = ~np.isnan(labels)
    per_q = baseline_routers(labels, tm, ty, data.benchmarks[tq], data.benchmarks[rows], seed=s.seed)
    per_q["jeirt_argmax"] = routed_labels(available_argmax(s.probs[rows], available), labels)
    from ..experiments.methods import predictors
    for name, predict, _, _ in predictors(prep, ("mf", "knn"), train_seed=s.seed, progress=False):
        per_q[f"{name}_argmax"] = routed_labels(available_argmax(predict(rows), available), labels)
    res = {"accuracy": {k: float(v.mean()) for k, v in per_q.items()},
           "ci95": {k: bootstrap_ci(v) for k, v in per_q.items()}, "test_questions": int(len(rows))}

    # the paper's cost axis: a per-call figure per LLM, its parameter count unless given (not USD:
    # the cost study prices calls in USD), next to every LLM used alone
    if s.costs is None:
        costs, source = default_costs(data.models)
        unit = "billions of parameters per call (read from the names)"
    else:
        costs, source = s.costs, {str(m): "given" for m in data.models}
        unit = "per call, in the unit of the --costs table"
    curve = cost_curve(s.probs[rows], costs, labels)
    singles = single_llm_points(costs, labels)
    span = (float(costs.min()), float(costs.max()))
    router_pts = [(p["avg_cost"], p["accuracy"]) for p in curve] + [(p["avg_cost"], p["accuracy"]) for p in singles]
    margins = margin_curve(s.probs[rows], costs, labels)  # the served cheapest_within_margin rule
    res["cost"] = {"unit": unit, "costs": {str(m): float(c) for m, c in zip(data.models, costs)}, "cost_source": source,
                   "curve": curve, "margin_curve": margins, "single_llms": singles,
                   "aiq_jeirt": aiq(router_pts, span) if span[1] > span[0] else None,
                   "aiq_single_llms": aiq([(p["avg_cost"], p["accuracy"]) for p in singles], span)
                   if span[1] > span[0] else None}
    # CPT: the cheapest LLM against the best on training data, on questions both answered
    overall = np.nan_to_num(train_rates(data.n_models, tm, ty)[0], nan=-1.0)
    strong = int(overall.argmax())
    cheap = [m for m in np.argsort(costs, kind="stable") if m != strong]
    if cheap:
        weak = int(cheap[0])
        both = available[:, strong] & available[:, weak]
        adv = s.probs[rows][both, strong] - s.probs[rows][both, weak]
        res["cost"]["cpt"] = {"strong": str(data.models[strong]), "weak": str(data.models[weak]),
                              **cpt(adv, labels[both, strong], labels[both, weak])}

    fig, ax = s.plt.subplots(figsize=(5.5, 4))
    ax.plot([p["avg_cost"] for p in curve], [p["accuracy"] for p in curve], "o-", ms=3, label="JE-IRT, score - λ·cost")
    ax.plot([p["avg_cost"] for p in margins], [p["accuracy"] for p in margins], "s--", ms=3,
            label="JE-IRT, cheapest within a margin of p")
    ax.scatter([p["avg_cost"] for p in singles], [p["accuracy"] for p in singles], c="gray", s=12, label="one LLM")
    ax.axhline(res["accuracy"]["per_benchmark_best"], color="C1", ls="--", lw=1, label="per-benchmark best")
    ax.set_xlabel(f"average cost per query ({unit})", fontsize=8)
    ax.set_ylabel("router accuracy (test)")
    ax.legend(fontsize=8)
    s.save(fig, "routing_cost.png")
    return res


def study_onboarding(s: Study) -> dict:
    data = s.prep.data
    rng = np.random.default_rng(s.seed)
    held = sorted(rng.choice(data.models, size=min(3, data.n_models - 2), replace=False).tolist())
    blind = s.train_space(dataclasses.replace(s.prep, split=dataclasses.replace(s.prep.split, heldout_models=held)))
    res = onboarding_curve(s.prep, s.space, blind, held, rng)
    plot_curve(res, s.out / "onboarding_curve.png", s.plt)
    return res


def study_irt_2pl(s: Study) -> dict:
    data = s.prep.data
    tq, tm, ty = s.train
    fit = irt.fit_2pl(tq, tm, ty, data.n_questions, data.n_models)
    answered = np.bincount(tq, minlength=data.n_questions) > 0
    res = irt.discrimination_summary(fit["a"], answered)
    res["order_flips_across_benchmarks"] = irt.order_flips_across_benchmarks(tq, tm, ty, data.benchmarks,
                                                                             data.n_models)
    order = np.argsort(fit["a"][answered])
    picks = np.flatnonzero(answered)[np.r_[order[:2], order[len(order) // 2], order[-1]]]
    iccs = [irt.empirical_icc(fit["theta"], tq, tm, ty, int(j)) for j in picks]
    res["example_iccs"] = iccs
    fig, axes = s.plt.subplots(1, len(iccs), figsize=(3.2 * len(iccs), 3), sharey=True)
    grid = np.linspace(fit["theta"].min(), fit["theta"].max(), 50)
    for ax, icc in zip(axes, iccs):
        j = icc["question"]
        ax.plot(grid, expit(fit["a"][j] * grid + fit["c"][j]), label="2PL fit")
        ax.plot(icc["ability"], icc["rate"], "o-" if icc["monotone"] else "s-r", label="empirical")
        ax.set_title(f"a={fit['a'][j]:.2f}{'' if icc['monotone'] else ' (non-monotone)'}", fontsize=9)
        ax.set_xlabel("ability")
    axes[0].set_ylabel("P(correct)")
    axes[0].legend(fontsize=7)
    s.save(fig, "irt_2pl_iccs.png")
    return res


def study_norm_difficulty(s: Study) -> dict:
    """On training questions (their accuracy is training data)."""
    data = s.prep.data
    tq, _, ty = s.train
    train_q = np.unique(tq)
    acc = geometry.question_accuracy(tq, ty, data.n_questions)
    norms = s.norms
    res = geometry.norm_vs_difficulty(norms[train_q], acc[train_q], data.benchmarks[train_q])
    fig, ax = s.plt.subplots(figsize=(5, 4))
    ax.scatter(norms[train_q], acc[train_q], s=3, alpha=0.3)
    ax.set_xlabel("||E_Q|| (predicted difficulty)")
    ax.set_ylabel("share of LLMs correct")
    ax.set_title(f"norm vs difficulty: Spearman {res['spearman']:.2f}")
    s.save(fig, "norm_difficulty.png")
    return res


def study_taxonomy(s: Study) -> dict:
    data = s.prep.data
    tax = geometry.taxonomy(s.directions, data.benchmarks, data.texts, seed=s.seed)
    table = np.array(tax["contingency"], dtype=float)
    size = (max(5.0, 1 + 0.45 * len(tax["categories"])), max(3.5, 2 + 0.35 * tax["k"]))  # room for the labels
    fig, ax = s.plt.subplots(figsize=size)
    ax.imshow(table / table.sum(1, keepdims=True).clip(1), cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(tax["categories"])), tax["categories"], rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(tax["k"]), [f"cluster {c}" for c in range(tax["k"])], fontsize=7)
    ax.set_title(f"clusters vs categories (ARI {tax['ari']:.2f}, NMI {tax['nmi']:.2f})", fontsize=9)
    s.save(fig, "taxonomy_contingency.png")
    return {k: v for k, v in tax.items() if k != "assignment"}


def study_probes(s: Study) -> dict:
    """Each benchmark vs the rest, and arithmetic vs the rest, in E_Q against the raw embeddings."""
    data, X, E = s.prep.data, s.prep.X, s.E
    part = s.prep.split.question_part
    fit_q, held_q = part == 0, part == 2
    probes = {}
    arithmetic = np.array([bool(ARITHMETIC.search(str(t))) for t in data.texts])
    targets = {f"benchmark={b}": data.benchmarks == b for b in sorted(set(data.benchmarks))}
    targets["arithmetic (keyword)"] = arithmetic
    for name, positive in targets.items():
        try:
            p_space = geometry.probe(E, positive, fit_q, held_q)
            p_raw = geometry.probe(X, positive, fit_q, held_q)
        except ValueError:
            continue
        entry = {"auc_space": p_space["auc"], "auc_raw_encoder": p_raw["auc"], "positives": int(positive.sum())}
        if name.startswith("arithmetic"):
            others = held_q & ~arithmetic
            top = np.flatnonzero(others)[np.argsort(-p_space["score"][others])[:5]]
            entry["top_non_arithmetic_questions"] = [str(data.texts[i])[:160] for i in top]
        probes[name] = entry
    return probes


def study_lobo(s: Study) -> dict:
    res = leave_one_benchmark_out(s.prep, s.space, s.train_space, progress=s.progress)
    rows = res["benchmarks"]
    fig, ax = s.plt.subplots(figsize=(5, 4))
    ax.scatter([r["alignment"]["max"] for r in rows], [100 * r["drop"] for r in rows])
    for r in rows:
        ax.annotate(r["benchmark"], (r["alignment"]["max"], 100 * r["drop"]), fontsize=6)
    ax.set_xlabel("alignment with the training benchmarks (max cosine)")
    ax.set_ylabel("accuracy drop when left out (points)")
    ax.set_title(f"Spearman {res['spearman_alignment_drop']:.2f}")
    s.save(fig, "lobo_alignment_drop.png")
    return res


def study_ranking(s: Study) -> dict:
    rows = s.prep.rows("test")
    return {"flips_any": geometry.ranking_flips(s.probs[rows]),
            "flips_by_0.05": geometry.ranking_flips(s.probs[rows], 0.05),
            "smoothness": geometry.smoothness(s.directions, s.probs, seed=s.seed)}


def study_cost(s: Study) -> dict:
    """The cost-accuracy frontier of JE-IRT's cost policies against the baseline routers
    (experiments.cost_study), with a plot; needs a price table."""
    if s.prices is None:
        return {"skipped": "no price table: pass --prices FILE (jeirt report) or prices= (jr.report)"}
    from ..experiments.cost_study import cost_study
    result = cost_study(s.prep, s.prices, s.answer_tokens, members=len(s.space.members), seed=s.seed, n_boot=200)
    plt = s.plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for single in result["singles"]:
        ax.scatter(single["cost_per_1k"], single["accuracy"], s=12, color="0.4", zorder=3)
    for name, color in (("jeirt", "C0"), ("mf", "C1"), ("knn", "C2"), ("cluster", "C3"), ("threshold_2llm", "C4"),
                        ("random_mix", "0.5"), ("oracle", "k")):
        hull = result["methods"][name]["hull"]
        ax.plot([h[0] for h in hull], [h[1] for h in hull], color=color, label=f"{name} (AIQ "
                f"{result['methods'][name]['aiq']:.3f})")
    ax.set_xscale("log")
    ax.set(xlabel="cost per 1,000 test queries (USD, log)", ylabel="test accuracy", title="Cost-accuracy frontiers")
    ax.legend(fontsize=7)
    s.save(fig, "cost_frontier.png")
    return result


STUDIES: dict[str, Callable[[Study], dict]] = {
    "routing": study_routing, "onboarding": study_onboarding, "irt_2pl": study_irt_2pl,
    "norm_difficulty": study_norm_difficulty, "taxonomy": study_taxonomy, "probes": study_probes,
    "lobo": study_lobo, "ranking": study_ranking, "cost": study_cost,
}
