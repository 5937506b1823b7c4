"""Onboarding a held-out LLM from a fraction of its training questions, against joint training.

    python benchmarks/onboarding.py [--data DIR] --out results/onboarding.json [--heldout 3]

One question split (by question, 80/10/10, --split-seed). Two spaces of the same recipe: `joint`
trained on every LLM, `blind` trained without the held-out LLMs. Each held-out LLM is then
fitted into the blind space (its one vector, everything else frozen) from a fraction f of its
training-question responses, chosen at random or adaptively (start from a random 1%, then add
the questions of highest expected information under the current fit's Laplace posterior, in 4
rounds), and scored on its test-question responses, the same pairs on which the joint space is
scored. Also times the fit from 1,000 responses. Target: at f = 10%,
accuracy within 1 point of joint training (mean over the held-out LLMs).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from _common import dataset_path, parser, write_json
from jeirt_ray import paths
from jeirt_ray.data import load_data
from jeirt_ray.encoders import make_encoder
from jeirt_ray.evaluation import JEIRT_RECIPES, train_space
from jeirt_ray.experiment import prepare
from jeirt_ray.model.metrics import binary_metrics
from jeirt_ray.model.onboarding import onboard

FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.25, 1.0)


def adaptive(space, name, X, data, pool, size, rng, rounds: int = 4):
    """Response indices chosen adaptively from `pool`: a random 1% (at least 5), then `rounds`
    batches of the unanswered questions with the highest expected information."""
    chosen = list(rng.choice(pool, size=min(size, max(5, len(pool) // 100)), replace=False))
    for r in range(rounds):
        need = size - len(chosen)
        if need <= 0:
            break
        rest = np.setdiff1d(pool, chosen)
        res = onboard(space, name, X[data.q_idx[chosen]], data.labels[chosen], holdout=0,
                      candidates=X[data.q_idx[rest]], candidate_ids=[str(i) for i in rest],
                      suggest=int(np.ceil(need / (rounds - r))))
        chosen += [int(q["question_id"]) for q in res.report["next_questions"]]
    return np.array(chosen[:size])


def main():
    ap = parser(__doc__)
    ap.add_argument("--heldout", type=int, default=3)
    ap.add_argument("--members", type=int, default=1, help="ensemble size of both spaces")
    ap.add_argument("--recipe", default="regularised", choices=sorted(JEIRT_RECIPES))
    args = ap.parse_args()

    data = load_data(dataset_path(args.data, "mmlu_pro"))
    prep = prepare(data, make_encoder(args.encoder), seed=args.split_seed, cache_root=paths.cache_dir())
    rng = np.random.default_rng(args.split_seed)
    held = sorted(rng.choice(data.models, size=args.heldout, replace=False).tolist())
    config = JEIRT_RECIPES[args.recipe]
    start = time.perf_counter()
    joint = train_space(prep, config, members=args.members, progress=False)
    blind_prep = dataclasses.replace(prep, split=dataclasses.replace(prep.split, heldout_models=held))
    blind = train_space(blind_prep, config, members=args.members, progress=False)
    train_seconds = time.perf_counter() - start
    part = prep.split.question_part[data.q_idx]
    rows = []
    for name in held:
        m = int(np.flatnonzero(data.models == name)[0])
        tr = np.flatnonzero((part == 0) & (data.m_idx == m))
        te = (part == 2) & (data.m_idx == m)
        x_test, y_test = prep.X[data.q_idx[te]], data.labels[te]
        row = {"model": name, "train_responses": int(len(tr)), "test_responses": int(te.sum()),
               "joint_accuracy": binary_metrics(joint.predict_proba(x_test)[:, m], y_test)["test_accuracy"]}
        for f in FRACTIONS:
            pick = rng.choice(tr, size=max(1, int(round(f * len(tr)))), replace=False)
            res = onboard(blind, name, prep.X[data.q_idx[pick]], data.labels[pick], holdout=0)
            row[f"accuracy_at_{f:g}"] = binary_metrics(res.space.predict_proba(x_test)[:, m], y_test)["test_accuracy"]
            if f < 1:
                chosen = adaptive(blind, name, prep.X, data, tr, max(1, int(round(f * len(tr)))), rng)
                res = onboard(blind, name, prep.X[data.q_idx[chosen]], data.labels[chosen], holdout=0)
                row[f"adaptive_accuracy_at_{f:g}"] = binary_metrics(res.space.predict_proba(x_test)[:, m],
                                                                    y_test)["test_accuracy"]
        rows.append(row)
        print(row, flush=True)
    # the fit alone, from 1,000 responses of the first held-out LLM
    m0 = int(np.flatnonzero(data.models == held[0])[0])
    pool = np.flatnonzero((part == 0) & (data.m_idx == m0))
    pick = rng.choice(pool, size=min(1000, len(pool)), replace=False)
    fits = [onboard(blind, held[0], prep.X[data.q_idx[pick]], data.labels[pick], holdout=0).report["fit_seconds"]
            for _ in range(5)]
    mean = {k: float(np.mean([r[k] for r in rows])) for k in rows[0] if k.startswith(("accuracy", "adaptive", "joint"))}
    gap = (mean["joint_accuracy"] - mean["accuracy_at_0.1"]) * 100
    write_json(args.out, {
        "data": data.name, "heldout_models": held, "recipe": args.recipe, "members": args.members,
        "space_train_seconds": train_seconds, "per_model": rows, "mean": mean,
        "gap_points_at_10pct": gap, "within_1_point_at_10pct": gap <= 1.0,
        "fit_1000_responses_ms": {"median": float(np.median(fits) * 1000), "all": [f * 1000 for f in fits],
                                  "responses": int(len(pick)), "members": args.members,
                                  "dim": config.dim}})


if __name__ == "__main__":
    main()
