"""Little data: JE-IRT against MF, KNN and the per-LLM majority on a share of the training questions.

    python benchmarks/learning_curve.py [--data DIR] --out results/learning_curve.json
        [--fractions 2 5 10 25 50 100] [--seeds 0 1 2] [--fixed | --trials N] [--plot docs/img/learning_curve.png]

For each split seed (by question, 80/10/10) the training questions are shuffled once and the
first 2%, 5%, ... of them kept (nested: a smaller share is inside a larger one); validation and
test questions stay as they are. At each point JE-IRT and matrix factorisation get the
per-dataset configuration search of `jeirt evaluate` (Ray Tune, the same budget, validation only;
--fixed: 5 seeds of the fixed configuration instead), KNN its k on validation, the majority each
LLM's training rate. Reported per point: mean and sd over seeds of test accuracy and log-loss,
and paired differences (JE-IRT minus MF and KNN in accuracy, JE-IRT minus the majority in
log-loss) with 95% intervals, bootstrap over test questions within each seed.
"""

from __future__ import annotations

import numpy as np

from _common import dataset_path, paired_interval, parser, write_json
from jeirt_ray.core import paths
from jeirt_ray.data import load_data
from jeirt_ray.data.splits import Split, split_by_question
from jeirt_ray.distributed import init_ray
from jeirt_ray.encoders import make_encoder
from jeirt_ray.distributed.tune import run_search
from jeirt_ray.experiments.methods import predictors
from jeirt_ray.experiments.prepare import Prepared, pair_probs, prepare
from jeirt_ray.model.metrics import binary_metrics
from jeirt_ray.experiments.selection import SearchSettings

METHODS = ("jeirt", "mf", "knn", "majority")


def with_share(prep: Prepared, fraction: float, order: np.ndarray) -> Prepared:
    """`prep` keeping the first `fraction` of the shuffled training questions `order`."""
    part = prep.split.question_part.copy()
    part[order[max(1, int(round(fraction * len(order)))):]] = 3  # in no part
    return Prepared(prep.data, Split("training_share", prep.split.seed, part, info={"fraction": fraction}),
                    prep.X, prep.encoder_id)


def pair_log_loss(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-7, 1 - 1e-7)
    return -(y * np.log(p) + (1 - y) * np.log(1 - p))


def run_point(prep: Prepared, seed: int, search: SearchSettings | None) -> dict:
    test, rows = prep.pairs("test"), prep.rows("test")
    y = test.y.numpy()
    kw = {"search": search, "search_storage": paths.home() / "search",
              "search_fn": run_search} if search else {}
    out = {"q": test.q.numpy(), "y": y, "methods": {}}
    for name, predict, seconds, _ in predictors(prep, METHODS, train_seed=seed, progress=False, **kw):
        p = pair_probs(predict(rows), rows, test)
        out["methods"][name] = {**binary_metrics(p, y), "train_seconds": seconds, "p": p}
    return out


def summarise(runs: list[dict]) -> dict:
    out = {"methods": {}, "paired": {}}
    for m in METHODS:
        row = {}
        for key in ("test_accuracy", "log_loss", "auc", "train_seconds"):
            vals = np.array([r["methods"][m][key] for r in runs])
            row |= {key: float(vals.mean()), f"{key}_sd": float(vals.std(ddof=1)) if len(vals) > 1 else 0.0}
        out["methods"][m] = row
    right = {m: [(r["methods"][m]["p"] >= 0.5) == (r["y"] >= 0.5) for r in runs] for m in METHODS}
    for other in ("mf", "knn"):
        diff, ci = paired_interval([(r["q"], a, b) for r, a, b in zip(runs, right["jeirt"], right[other])])
        out["paired"][f"jeirt_minus_{other}_accuracy"] = {"difference": diff, "ci95": ci}
    diff, ci = paired_interval([(r["q"], pair_log_loss(r["methods"]["jeirt"]["p"], r["y"]),
                                 pair_log_loss(r["methods"]["majority"]["p"], r["y"])) for r in runs])
    out["paired"]["jeirt_minus_majority_log_loss"] = {"difference": diff, "ci95": ci}
    return out


def plot(points: dict, name: str, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shares = sorted(points, key=float)
    x = [float(s) for s in shares]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, key, label in ((axes[0], "test_accuracy", "test accuracy"), (axes[1], "log_loss", "test log-loss")):
        for m in METHODS:
            mid = [points[s]["methods"][m][key] for s in shares]
            sd = [points[s]["methods"][m][f"{key}_sd"] for s in shares]
            ax.errorbar(x, mid, yerr=sd, marker="o", capsize=3, label=m)
        ax.set_xscale("log")
        ax.set_xticks(x, [f"{v:g}%" for v in x])
        ax.set_xlabel("share of the training questions")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"{name}: learning curves (mean and sd over split seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    ap = parser(__doc__)
    ap.add_argument("--fractions", type=float, nargs="+", default=[2, 5, 10, 25, 50, 100],
                    help="percent of the training questions")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--fixed", action="store_true", help="the fixed configurations instead of the search")
    ap.add_argument("--trials", type=int, help="configurations searched per method (default: scaled with the data)")
    ap.add_argument("--plot", help="PNG file for the curves")
    args = ap.parse_args()
    data = load_data(dataset_path(args.data, "mmlu_pro"))
    encoder = make_encoder(args.encoder)
    search = None if args.fixed else SearchSettings(trials=args.trials)
    if search:
        init_ray(log_to_driver=False)
    runs = {f: [] for f in args.fractions}
    n_train = {}
    for seed in args.seeds:
        base = prepare(data, encoder, split=split_by_question(data, seed), cache_root=paths.cache_dir(), progress=False)
        order = np.random.default_rng(seed).permutation(base.split.questions(0))
        for f in args.fractions:
            prep = with_share(base, f / 100, order)
            n_train[f] = len(prep.split.questions(0))
            runs[f].append(run_point(prep, seed, search.model_copy(update={"seed": seed}) if search else None))
            got = runs[f][-1]["methods"]
            print(f"{data.name} {f:g}% ({n_train[f]} questions) seed {seed}: " +
                  ", ".join(f"{m} {got[m]['test_accuracy']:.4f}/{got[m]['log_loss']:.4f}" for m in METHODS), flush=True)
    points = {f"{f:g}": {"training_questions": n_train[f], **summarise(runs[f])} for f in args.fractions}
    if args.plot:
        plot(points, data.name, args.plot)
    write_json(args.out, {"data": data.name, "seeds": args.seeds, "search": not args.fixed, "trials": args.trials,
                          "encoder": args.encoder, "points": points})


if __name__ == "__main__":
    main()
