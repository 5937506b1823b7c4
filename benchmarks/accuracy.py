"""Test accuracy, AUC and log-loss of every method on one split, over several training seeds.

    python benchmarks/accuracy.py [--data DIR] --out results/accuracy.json [--seeds 0 1 2]

The split (by question, 80/10/10) is fixed by --split-seed; --seeds re-seed the training of
every learned method. JE-IRT is the project's default recipe (an ensemble over seeds, see
README); matrix factorisation has its dimension and KNN its k chosen on validation.
"""

from __future__ import annotations


import numpy as np

from _common import dataset_path, parser, write_json
from jeirt_ray import paths
from jeirt_ray.data import load_data
from jeirt_ray.encoders import make_encoder
from jeirt_ray.evaluation import METHODS, evaluate
from jeirt_ray.experiment import prepare


def main():
    ap = parser(__doc__)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--methods", default=",".join(METHODS))
    args = ap.parse_args()

    data = load_data(dataset_path(args.data, "mmlu_pro"))
    prep = prepare(data, make_encoder(args.encoder), seed=args.split_seed, cache_root=paths.cache_dir())
    methods = args.methods.split(",")
    runs = {}
    for seed in args.seeds:
        runs[seed] = evaluate(prep, methods, train_seed=seed, progress=False)
        print(f"seed {seed}: " + ", ".join(f"{m} {r['test_accuracy']:.4f}" for m, r in runs[seed].items()), flush=True)
    summary = {}
    for m in methods:
        summary[m] = {}
        for key in ("test_accuracy", "auc", "log_loss", "train_seconds"):
            vals = np.array([runs[s][m][key] for s in args.seeds])
            summary[m][key] = float(vals.mean())
            summary[m][f"{key}_sd"] = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
            summary[m][f"{key}_per_seed"] = vals.tolist()
    acc = {m: summary[m]["test_accuracy"] for m in methods}
    margins = {}
    if "jeirt" in acc:
        margins = {f"jeirt_minus_{m}": acc["jeirt"] - acc[m] for m in methods if m != "jeirt"}
    write_json(args.out, {"data": data.name, "split": "by_question 80/10/10", "split_seed": args.split_seed,
                          "seeds": args.seeds, "encoder": prep.encoder_id, "summary": summary,
                          "margins_mean_accuracy": margins, "runs": {str(k): v for k, v in runs.items()}})


if __name__ == "__main__":
    main()
