"""Router accuracy on held-out questions: JE-IRT policies against the reference routers.

    python benchmarks/routing_quality.py [--data DIR] --out results/routing.json [--costs costs.json]

Split by question (80/10/10, --split-seed). JE-IRT and matrix factorisation (each searched on
validation and ensembled as `jeirt train` does; --fixed: the fixed configuration) and KNN are
trained on the training questions; every policy's settings are chosen on the
validation questions (the default as `jeirt train` does; `router_id_only`: on in-distribution
validation alone, without held-out benchmarks and coverage gates); figures are on the test
questions, with 95% bootstrap intervals over questions. Best-on-average and per-benchmark best are chosen on training labels; only
per-benchmark best reads a query's benchmark label. Candidates per question: the LLMs with a
label for it (see jeirt_ray/routing/evaluate.py). With --costs (JSON {model: price}), the
accuracy-vs-average-cost curve of the default policy traded against cost is added.
"""

from __future__ import annotations

import json

import numpy as np

from _common import dataset_path, parser, write_json
from jeirt_ray.core import paths
from jeirt_ray.data import load_data
from jeirt_ray.distributed import init_ray
from jeirt_ray.encoders import make_encoder
from jeirt_ray.distributed.tune import run_search
from jeirt_ray.experiments.methods import predictors
from jeirt_ray.experiments.prepare import prepare
from jeirt_ray.routing.frontier import cost_curve
from jeirt_ray.routing.outcomes import (available_argmax, baseline_routers, bootstrap_ci,
                                        routed_labels)
from jeirt_ray.routing.policies import Policy, SignalBuilder, candidate_policies, policy_accuracy, select_policy
from jeirt_ray.experiments.routing_choice import tune_routing
from jeirt_ray.experiments.selection import SearchSettings


def main():
    ap = parser(__doc__)
    ap.add_argument("--members", type=int, default=None, help="ensemble size (default 5)")
    ap.add_argument("--fixed", action="store_true", help="the fixed configuration instead of the search")
    ap.add_argument("--costs", help="JSON file {model: cost per call}")
    args = ap.parse_args()

    data = load_data(dataset_path(args.data, "mmlu_pro"))
    prep = prepare(data, make_encoder(args.encoder), seed=args.split_seed, cache_root=paths.cache_dir())
    train = prep.pairs("train")
    tq, tm, ty = train.q.numpy(), train.m.numpy(), train.y.numpy()
    L = data.label_matrix()
    parts = {}
    for name, which in (("val", 1), ("test", 2)):
        rows = prep.split.questions(which)
        rows = rows[(~np.isnan(L[rows])).any(1)]
        parts[name] = (rows, L[rows])

    kw = {"members": args.members} if args.members else {}
    if not args.fixed:
        init_ray(log_to_driver=False)
        kw |= {"search": SearchSettings(**kw), "search_storage": paths.home() / "search",
              "search_fn": run_search}
    probs, space = {}, None
    for name, predict, seconds, info in predictors(prep, ("jeirt", "mf", "knn"), progress=False, **kw):
        probs[name] = {part: predict(rows) for part, (rows, _) in parts.items()}
        space = info.get("space", space)
        print(f"trained {name} in {seconds:.0f}s", flush=True)

    # the policy is chosen and stored exactly as `jeirt train` does for serving; the signals come
    # from the arrays stored with the space, as in the Serve router
    space, chosen, val_table = tune_routing(space, prep)
    builder = SignalBuilder.from_arrays(space.routing, space.metadata["routing_policy"]["benchmarks"])
    signals = {part: builder.build(probs["jeirt"][part], prep.X[rows]) for part, (rows, _) in parts.items()}
    candidates = [Policy(**row["policy"]) for row in val_table]  # tune_routing's, gated ones too

    test_rows, test_labels = parts["test"]
    available = ~np.isnan(test_labels)
    per_q = baseline_routers(test_labels, tm, ty, data.benchmarks[tq], data.benchmarks[test_rows])
    for name in ("jeirt", "mf", "knn"):
        per_q[f"{name}_argmax"] = routed_labels(available_argmax(probs[name]["test"], available), test_labels)
    per_q["router"] = routed_labels(chosen.choose(signals["test"], available), test_labels)
    # the selection on in-distribution validation alone (no held-out benchmarks, no gates)
    id_only, _ = select_policy(signals["val"], parts["val"][1],
                               candidate_policies(builder.ks, builder.topic_coef is not None))
    per_q["router_id_only"] = routed_labels(id_only.choose(signals["test"], available), test_labels)

    # every policy tried, with its validation and test figures; and the best of each family
    policies = [{**row, "test_accuracy": policy_accuracy(p, signals["test"], test_labels)}
                for p, row in zip(candidates, val_table)]
    families = {}
    for row in policies:
        fam = row["policy"]["name"]
        if fam not in families or row["val_accuracy"] > families[fam]["val_accuracy"]:
            families[fam] = row

    result = {
        "data": data.name, "split_seed": args.split_seed, "n_val_questions": len(parts["val"][0]),
        "n_test_questions": len(test_rows), "encoder": prep.encoder_id,
        "default_policy": space.metadata["routing_policy"], "id_only_policy": id_only.model_dump(),
        "router_accuracy": float(per_q["router"].mean()),
        "router_ci95": bootstrap_ci(per_q["router"]),
        **{k: float(v.mean()) for k, v in per_q.items() if k != "router"},
        "ci95": {k: bootstrap_ci(v) for k, v in per_q.items()},
        "paired_diff_vs_per_benchmark_best_ci95": bootstrap_ci(per_q["router"] - per_q["per_benchmark_best"]),
        "paired_diff_vs_best_average_ci95": bootstrap_ci(per_q["router"] - per_q["best_average"]),
        "paired_diff_vs_id_only_ci95": bootstrap_ci(per_q["router"] - per_q["router_id_only"]),
        "best_policy_per_family": families,
        "policies": policies,
    }
    if args.costs:
        costs = json.loads(open(args.costs).read())
        missing = [m for m in data.models if m not in costs]
        if missing:
            raise SystemExit(f"{args.costs}: no cost for {missing[:5]}")
        c = np.array([costs[m] for m in data.models], dtype=float)
        curve = cost_curve(chosen.scores(signals["test"]), c, test_labels)
        result["cost_curve"] = curve
    write_json(args.out, result)


if __name__ == "__main__":
    main()
