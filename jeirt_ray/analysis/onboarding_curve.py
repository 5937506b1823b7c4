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
from ..model.metrics import binary_metrics
from ..model.onboarding import onboard
from ..model.space import CoreSpace

FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.25, 1.0)


def adaptive_selection(space: CoreSpace, name: str, X: np.ndarray, q_of: np.ndarray, labels: np.ndarray,
                       pool: np.ndarray, size: int, rng: np.random.Generator, rounds: int = 4,
                       prior: str = "population") -> np.ndarray:
    """Response indices chosen adaptively from `pool`: a random 1% (at least 5), then `rounds`
    batches of the not yet chosen questions with the highest expected information."""
    chosen = list(rng.choice(pool, size=min(size, max(5, len(pool) // 100)), replace=False))
    for r in range(rounds):
        need = size - len(chosen)
        if need <= 0:
            break
        rest = np.setdiff1d(pool, chosen)
        res = onboard(space, name, X[q_of[chosen]], labels[chosen], holdout=0,
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
                                                  holdout=0, prior=prior).space)
            if adaptive and size < len(pool):
                chosen = adaptive_selection(blind, name, prep.X, data.q_idx, data.labels, pool, size, rng, prior=prior)
                row["adaptive"][key] = accuracy(onboard(blind, name, prep.X[data.q_idx[chosen]],
                                                        data.labels[chosen], holdout=0, prior=prior).space)
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
