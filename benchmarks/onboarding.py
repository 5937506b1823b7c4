"""Onboarding a held-out LLM from some of its training questions, against joint training.

    python benchmarks/onboarding.py [--data DIR] --out results/onboarding.json [--heldout 3]
        [--pick random|strongest] [--responses 25 50 100 200]

One question split (by question, 80/10/10, --split-seed). Two spaces of the same recipe: `joint`
trained on every LLM, `blind` trained without the held-out LLMs. The held-out LLMs are drawn at
random, or with --pick strongest the most accurate on the training questions (new LLMs better
than every known one are where onboarding is reported to fail). Each is then fitted into the
blind space (its one vector, everything else frozen) from a fraction f of its training-question
responses (or, with --responses, that many), chosen at random or adaptively (start from a
random 1%, then add the questions of highest expected information under the current fit's
Laplace posterior, in 4 rounds), under --prior (the known LLMs' covariance, or the earlier one
variance per coordinate as the baseline), and scored on its test-question responses, the same pairs on
which the joint space is scored. Also times the fit from 1,000 responses. Targets: at f = 10%
accuracy within 1 point of joint training (mean over the held-out LLMs); with --responses, within
1 point from 100 responses.
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from _common import dataset_path, parser, write_json
from jeirt_ray.core import paths
from jeirt_ray.analysis.onboarding_curve import onboarding_curve
from jeirt_ray.data import load_data
from jeirt_ray.encoders import make_encoder
from jeirt_ray.experiments.methods import train_space
from jeirt_ray.experiments.selection import fixed_config
from jeirt_ray.experiments.prepare import prepare
from jeirt_ray.model.onboarding import onboard


def main():
    ap = parser(__doc__)
    ap.add_argument("--heldout", type=int, default=3)
    ap.add_argument("--members", type=int, default=1, help="ensemble size of both spaces")
    ap.add_argument("--pick", choices=["random", "strongest"], default="random",
                    help="held-out LLMs: at random, or the most accurate on the training questions")
    ap.add_argument("--responses", type=int, nargs="+", help="budgets as response counts instead of fractions")
    ap.add_argument("--prior", choices=["population", "isotropic"], default="population",
                    help="onboarding's prior: the known LLMs' covariance, or one variance per coordinate (before)")
    args = ap.parse_args()

    data = load_data(dataset_path(args.data, "mmlu_pro"))
    prep = prepare(data, make_encoder(args.encoder), seed=args.split_seed, cache_root=paths.cache_dir())
    rng = np.random.default_rng(args.split_seed)
    if args.pick == "strongest":  # chosen on training questions only: the test split stays unread
        train = prep.split.question_part[data.q_idx] == 0
        rates = np.bincount(data.m_idx[train], data.labels[train], data.n_models) / \
            np.maximum(np.bincount(data.m_idx[train], minlength=data.n_models), 1)
        held = sorted(data.models[np.argsort(-rates)[:args.heldout]].tolist())
    else:
        held = sorted(rng.choice(data.models, size=args.heldout, replace=False).tolist())
    config = fixed_config("jeirt")
    start = time.perf_counter()
    joint = train_space(prep, config, members=args.members, progress=False)
    blind_prep = dataclasses.replace(prep, split=dataclasses.replace(prep.split, heldout_models=held))
    blind = train_space(blind_prep, config, members=args.members, progress=False)
    train_seconds = time.perf_counter() - start
    curve = onboarding_curve(prep, joint, blind, held, rng, responses=tuple(args.responses) if args.responses else None,
                             prior=args.prior)
    for row in curve["per_model"]:
        print(row, flush=True)
    # the fit alone, from 1,000 responses of the first held-out LLM
    m0 = int(np.flatnonzero(data.models == held[0])[0])
    part = prep.split.question_part[data.q_idx]
    pool = np.flatnonzero((part == 0) & (data.m_idx == m0))
    pick = rng.choice(pool, size=min(1000, len(pool)), replace=False)
    fits = [onboard(blind, held[0], prep.X[data.q_idx[pick]], data.labels[pick], holdout=0,
                    prior=args.prior).report["fit_seconds"]
            for _ in range(5)]
    mean = curve["mean"]
    gaps = {how: {k: (mean["joint_accuracy"] - v) * 100 for k, v in mean[how].items()} for how in ("random", "adaptive")}
    if args.responses:
        at = "100"
        target = {"gap_points_from_100": {how: gaps[how].get(at) for how in gaps},
                  "within_1_point_from_100": {how: at in gaps[how] and gaps[how][at] <= 1.0 for how in gaps}}
    else:
        target = {"gap_points_at_10pct": gaps["random"]["0.1"], "within_1_point_at_10pct": gaps["random"]["0.1"] <= 1.0}
    write_json(args.out, {
        "data": data.name, "pick": args.pick, "prior": args.prior, "config": config.model_dump(), "members": args.members,
        "space_train_seconds": train_seconds, **curve, "gap_points": gaps, **target,
        "fit_1000_responses_ms": {"median": float(np.median(fits) * 1000), "all": [f * 1000 for f in fits],
                                  "responses": int(len(pick)), "members": args.members,
                                  "dim": config.dim}})


if __name__ == "__main__":
    main()
