"""Anchor questions alone at a population's size, over several seeds, in minutes.

    python benchmarks/anchors.py [--data DIR] --out F.json [--seeds 0 1 2] [--new-llms 200]
                                 [--pursue overall|benchmarks]

The population study (benchmarks/population.py) runs everything (its default onboarding is the
anchored strategy) in about 45 minutes for one seed; this runs the anchors' part of it without
training a space, so that the spread over seeds can be seen: per seed, 20% of the LLMs held out as
new (as the study splits them), anchors chosen on the others' answers (model/anchors.py), and for
`--new-llms` of the new LLMs with at least 200 labels, their accuracy over every question they
have a label for estimated from their answers to the first N anchors among those questions,
against the mean of N random answers of theirs. And, where models.csv has the leaderboard's
scores, each new LLM's score reconstructed from its first 100 anchors (population/leaderboard.py
from_anchors), for the new LLMs of the study's sample that ran all five benchmarks. `--pursue
benchmarks` chooses the anchors for the five benchmarks' accuracies at once instead of the overall
accuracy (the default, as served).

The JSON: seeds[seed].onboarding["25"|"50"|"100"|"200"][anchored|random]: {accuracy_mae (points),
interval_coverage, llms}; seeds[seed].leaderboard["100"][bench]: {rmse, llms}; spread: per N and
way, the mean, min and max of accuracy_mae over the seeds, and per benchmark of rmse.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import dataset_path, parser, write_json  # noqa: E402

CHECKPOINTS = (25, 50, 100, 200)


def one_seed(data, labels: np.ndarray, table, seed: int, new_llms: int, pursue: str = "overall") -> dict:
    import pandas as pd

    from jeirt_ray.model.anchors import Anchors
    from jeirt_ray.model.space import NOT_ANSWERED, answers_of
    from jeirt_ray.population.leaderboard import from_anchors
    from jeirt_ray.population.llms import LEADERBOARD, split_llms
    from jeirt_ray.population.onboarding import wilson
    known_names, new_names = split_llms(data.models, 0.2, seed)
    at = pd.Index(data.models)
    known, new = labels[:, at.get_indexer(known_names)], labels[:, at.get_indexer(new_names)]
    start = time.perf_counter()
    anchors = Anchors(answers_of(known), NOT_ANSWERED,
                      groups=np.asarray(data.benchmarks) if pursue == "benchmarks" else None)
    chose_s = time.perf_counter() - start
    enough = np.flatnonzero((~np.isnan(new)).sum(0) >= max(CHECKPOINTS))
    chosen = np.sort(np.random.default_rng(seed).choice(enough, size=min(new_llms, len(enough)), replace=False))
    rows: dict = {n: {"anchored": [], "random": []} for n in CHECKPOINTS}
    asked_100, answers_100, every = [], [], []
    for j in chosen:
        y = new[:, j]
        mine = np.flatnonzero(~np.isnan(y))
        truth = float(y[mine].mean())
        order = anchors.within(mine)
        for n in CHECKPOINTS:
            got = anchors.estimate(order[:n], y[order[:n]], {"overall": mine}).get("overall")
            if got is not None:
                rows[n]["anchored"].append((truth, *got))
            drawn = y[np.random.default_rng([seed, int(j)]).choice(mine, size=n, replace=False)]
            rows[n]["random"].append((truth, float(drawn.mean()), *wilson(drawn.sum(), n, len(mine))))
        if set(LEADERBOARD) <= set(data.benchmarks[mine]):
            asked_100.append(order[:100])
            answers_100.append(y[order[:100]])
            every.append(j)
    onboarding = {}
    for n, ways in rows.items():
        onboarding[str(n)] = {}
        for way, got in ways.items():
            t, est, lo, hi = np.array(got).T
            onboarding[str(n)][way] = {"accuracy_mae": float(np.mean(np.abs(est - t)) * 100),
                                       "interval_coverage": float(np.mean((lo <= t) & (t <= hi))), "llms": len(got)}
    out = {"known_llms": len(known_names), "new_llms_studied": len(chosen), "anchors_s": chose_s,
           "onboarding": onboarding}
    if table is not None and all(b in table.columns for b in LEADERBOARD):
        out["leaderboard"] = {"100": from_anchors(anchors, asked_100, answers_100, table.reindex(known_names),
                                                  table.reindex(np.asarray(new_names)[every]))}
    return out


def main(argv=None) -> dict:
    ap = parser(__doc__)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--new-llms", type=int, default=200, help="new LLMs studied per seed")
    ap.add_argument("--pursue", choices=["overall", "benchmarks"], default="overall",
                    help="choose the anchors for the overall accuracy (as served) or each benchmark's at once")
    args = ap.parse_args(argv)
    if args.new_llms < 1:
        ap.error("--new-llms must be at least 1")
    from jeirt_ray.data import load_data
    from jeirt_ray.data.llm_table import read_models
    folder = dataset_path(args.data, "openllm")
    data, table = load_data(folder), read_models(folder)
    labels = data.label_matrix()
    seeds = {}
    for seed in args.seeds:
        seeds[str(seed)] = one_seed(data, labels, table, seed, args.new_llms, args.pursue)
        print(f"seed {seed}: " + ", ".join(f"{n}: {v['anchored']['accuracy_mae']:.2f} vs random "
                                           f"{v['random']['accuracy_mae']:.2f}"
                                           for n, v in seeds[str(seed)]["onboarding"].items()), flush=True)
    spread: dict = {"onboarding": {}, "leaderboard": {}}
    for n in CHECKPOINTS:
        spread["onboarding"][str(n)] = {
            way: {k: float(f([s["onboarding"][str(n)][way]["accuracy_mae"] for s in seeds.values()]))
                  for k, f in (("mean", np.mean), ("min", np.min), ("max", np.max))}
            for way in ("anchored", "random")}
    for b in sorted({b for s in seeds.values() for b in s.get("leaderboard", {}).get("100", {})}):
        values = [s["leaderboard"]["100"][b]["rmse"] for s in seeds.values()
                  if b in s.get("leaderboard", {}).get("100", {})]
        spread["leaderboard"][b] = {"mean": float(np.mean(values)), "min": float(np.min(values)),
                                    "max": float(np.max(values))}
    out = {"data": {"llms": int(data.n_models), "questions": int(data.n_questions), "folder": str(folder)},
           "pursue": args.pursue,
           "seeds": seeds, "spread": spread}
    write_json(args.out, out)
    return out


if __name__ == "__main__":
    main()
