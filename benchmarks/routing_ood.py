"""Routing off the map: each benchmark of a dataset held out of training in turn.

    python benchmarks/routing_ood.py [--data DIR] --out results/routing_ood.json [--members 3]
        [--benchmarks B ...] [--search]

For each held-out benchmark B: every question of B is a test question; the other questions are
split 80/10/10 (--split-seed). JE-IRT (the fixed configuration, --members seeds; --search: the
per-dataset search), matrix factorisation (the same) and KNN are trained on the training
questions, and the routing policy is chosen on the validation questions as `jeirt train` does
(`tune_routing`: leave-one-benchmark-out inside the training data, coverage gates). Routers,
on B's questions ("held_out") and on the other benchmarks' test questions ("in_distribution"):
the tuned router; the policy chosen on in-distribution validation alone without gates (what
`jeirt train` chose before, "router_id_only"); the argmax of JE-IRT, MF and KNN; best-on-average
(training labels). Means are over held-out benchmarks (each benchmark counts once); intervals
are 95% bootstrap intervals of that mean, questions resampled within each benchmark, and the
differences are paired (the same resampled questions for both routers).
"""

from __future__ import annotations

import numpy as np

from _common import dataset_path, parser, write_json
from jeirt_ray.core import paths
from jeirt_ray.data import load_data
from jeirt_ray.data.splits import Split, assign_parts
from jeirt_ray.distributed import init_ray
from jeirt_ray.encoders import make_encoder
from jeirt_ray.distributed.tune import run_search
from jeirt_ray.experiments.methods import predictors
from jeirt_ray.experiments.prepare import prepare
from jeirt_ray.routing.outcomes import available_argmax, baseline_routers, routed_labels
from jeirt_ray.routing.policies import SignalBuilder, candidate_policies, select_policy
from jeirt_ray.experiments.routing_choice import tune_routing
from jeirt_ray.experiments.selection import SearchSettings

ROUTERS = ("router", "router_id_only", "jeirt_argmax", "mf_argmax", "knn_argmax", "best_average")


def held_out_split(data, bench: str, seed: int) -> Split:
    """Every question of `bench` in test; the others 80/10/10 at random."""
    part = np.full(data.n_questions, 2, dtype=np.int8)
    others = np.flatnonzero(data.benchmarks != bench)
    part[others] = assign_parts(len(others), (0.8, 0.1, 0.1), np.random.default_rng(seed))
    return Split("held_out_benchmark", seed, part, info={"held_out_benchmark": bench})


def labelled(rows, L):
    rows = rows[(~np.isnan(L[rows])).any(1)]
    return rows, L[rows]


def fold(data, encoder, bench: str, args) -> dict[str, dict[str, np.ndarray]]:
    """Per-question routed labels of every router on the held-out and in-distribution parts."""
    prep = prepare(data, encoder, split=held_out_split(data, bench, args.split_seed), cache_root=paths.cache_dir(),
                   progress=False)
    L = data.label_matrix()
    test = prep.split.questions(2)
    parts = {"held_out": labelled(test[data.benchmarks[test] == bench], L),
             "in_distribution": labelled(test[data.benchmarks[test] != bench], L)}
    val_rows, val_labels = labelled(prep.split.questions(1), L)
    kw = {"members": args.members}
    if args.search:
        kw |= {"search": SearchSettings(members=args.members), "search_storage": paths.home() / "search",
              "search_fn": run_search}
    probs, space = {}, None
    for name, predict, _, info in predictors(prep, ("jeirt", "mf", "knn"), progress=False, **kw):
        probs[name] = {part: predict(rows) for part, (rows, _) in parts.items()}
        space = info.get("space", space)
    tuned, policy, _ = tune_routing(space, prep)
    builder = SignalBuilder.from_arrays(tuned.routing, tuned.metadata["routing_policy"]["benchmarks"])
    # the selection before held-out benchmarks and gates: in-distribution validation alone
    val_signals = builder.build(space.predict_proba(prep.X[val_rows]), prep.X[val_rows])
    id_only, _ = select_policy(val_signals, val_labels, candidate_policies(builder.ks, builder.topic_coef is not None))
    train = prep.pairs("train")
    out = {}
    for part, (rows, labels) in parts.items():
        available = ~np.isnan(labels)
        signals = builder.build(probs["jeirt"][part], prep.X[rows])
        got = {"router": routed_labels(policy.choose(signals, available), labels),
               "router_id_only": routed_labels(id_only.choose(signals, available), labels)}
        for name in ("jeirt", "mf", "knn"):
            got[f"{name}_argmax"] = routed_labels(available_argmax(probs[name][part], available), labels)
        got["best_average"] = baseline_routers(labels, train.m.numpy(), train.y.numpy(),
                                               data.benchmarks[train.q.numpy()], data.benchmarks[rows])["best_average"]
        out[part] = got
    out["policy"] = {"tuned": tuned.metadata["routing_policy"], "id_only": id_only.model_dump()}
    return out


def stratified_ci(groups: list[np.ndarray], n_boot: int = 2000, seed: int = 0) -> list[float]:
    """95% interval of the mean over groups of each group's mean, resampling within groups."""
    rng = np.random.default_rng(seed)
    means = np.mean([g[rng.integers(0, len(g), size=(n_boot, len(g)))].mean(1) for g in groups], axis=0)
    return [float(v) for v in np.quantile(means, [0.025, 0.975])]


def summary(folds: dict[str, dict], part: str) -> dict:
    per = {r: [folds[b][part][r] for b in folds] for r in ROUTERS}
    out = {r: float(np.mean([v.mean() for v in per[r]])) for r in ROUTERS}
    out["ci95"] = {r: stratified_ci(per[r]) for r in ROUTERS}
    out["router_minus"] = {r: out["router"] - out[r] for r in ROUTERS if r != "router"}
    out["router_minus_ci95"] = {r: stratified_ci([a - b for a, b in zip(per["router"], per[r])])
                                for r in ROUTERS if r != "router"}
    return out


def main():
    ap = parser(__doc__)
    ap.add_argument("--members", type=int, default=3, help="ensemble size of JE-IRT and MF (default 3)")
    ap.add_argument("--benchmarks", nargs="+", help="hold out only these (default: every benchmark)")
    ap.add_argument("--search", action="store_true", help="the per-dataset search instead of the fixed configuration")
    args = ap.parse_args()
    data = load_data(dataset_path(args.data, "mmlu_pro"))
    encoder = make_encoder(args.encoder)
    if args.search:
        init_ray(log_to_driver=False)
    benches = args.benchmarks or sorted(set(data.benchmarks))
    if len(benches) < 2 and not args.benchmarks:
        raise SystemExit(f"{data.name} has one benchmark: nothing to hold out")
    folds = {}
    for bench in benches:
        folds[bench] = fold(data, encoder, bench, args)
        f = folds[bench]
        print(f"{bench}: held out router {f['held_out']['router'].mean():.4f} (id-only "
              f"{f['held_out']['router_id_only'].mean():.4f}, jeirt argmax {f['held_out']['jeirt_argmax'].mean():.4f}, "
              f"mf {f['held_out']['mf_argmax'].mean():.4f}, best avg {f['held_out']['best_average'].mean():.4f}); "
              f"policy {f['policy']['tuned']['name']} gate {f['policy']['tuned']['gate']:.3f}", flush=True)
    result = {
        "data": data.name, "split_seed": args.split_seed, "members": args.members, "search": args.search,
        "encoder": args.encoder, "held_out_benchmarks": benches,
        "held_out": summary(folds, "held_out"), "in_distribution": summary(folds, "in_distribution"),
        "per_benchmark": {b: {"n_held_out_questions": len(f["held_out"]["router"]),
                              "held_out": {r: float(f["held_out"][r].mean()) for r in ROUTERS},
                              "in_distribution": {r: float(f["in_distribution"][r].mean()) for r in ROUTERS},
                              "policy": f["policy"]} for b, f in folds.items()},
    }
    write_json(args.out, result)


if __name__ == "__main__":
    main()
