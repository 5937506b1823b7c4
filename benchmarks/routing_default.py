"""Does the default routing policy ever lose to the space's own argmax? (issue: a tuned `local`
policy scored 1 point below argmax on a published router's benchmark.)

    python benchmarks/routing_default.py [--data DIR ...] [--seeds 0 1 2] --out results/routing_default.json

For each dataset and split seed, two splits: `by_question` (80/10/10) and `unseen_tasks` (as that
benchmark: a third of the benchmarks, at least one, absent from training and validation; the
rest 63/7/30, i.e. the policy chosen on 10% of the training questions). A space is trained
through the public API (`jr.train`, the fixed configuration, `--members`, the default held-out
benchmarks) and routes the test questions with its default policy (`tuned`) and with
`most_likely` (argmax); figures are task-averaged test accuracy, in distribution and on the
unseen tasks, and the paired difference with a 95% bootstrap interval over questions.
"""

from __future__ import annotations

import numpy as np

import jeirt_ray as jr
from _common import SHARED, parser, write_json
from jeirt_ray.data.splits import Split, assign_parts
from jeirt_ray.routing.outcomes import bootstrap_ci, routed_labels
from jeirt_ray.routing.policies import Policy, SignalBuilder


def unseen_tasks_split(data, seed: int) -> Split:
    rng = np.random.default_rng(seed)
    benches = np.array(sorted(set(data.benchmarks.tolist())))
    unseen = rng.choice(benches, size=max(1, len(benches) // 3), replace=False) if len(benches) > 1 else []
    part = assign_parts(data.n_questions, (0.63, 0.07, 0.30), rng)
    part[np.isin(data.benchmarks, unseen)] = 2
    return Split("given", seed, part, info={"unseen_benchmarks": sorted(map(str, unseen))})


def task_averaged(values: np.ndarray, bench: np.ndarray) -> float:
    return float(np.mean([values[bench == b].mean() for b in np.unique(bench)]))


def run(path, seed: int, split_kind: str, args) -> dict:
    data = jr.load_data(path)
    split = unseen_tasks_split(data, seed) if split_kind == "unseen_tasks" else None
    prep = jr.prepare(data, encoder=args.encoder, seed=seed, split=split, progress=False)
    space = jr.train(data, encoder=args.encoder, search=False, members=args.members, split=prep.split, seed=seed,
                     progress=False)
    rows = prep.split.questions(2)
    labels = data.label_matrix(rows)
    keep = (~np.isnan(labels)).any(1)
    rows, labels = rows[keep], labels[keep]
    available = ~np.isnan(labels)
    router = space.router()
    p, x = space.predict_proba(prep.X[rows]), prep.X[rows]
    picks = {}
    for policy in ("tuned", "most_likely"):
        # the router's own rule, among the LLMs with a label for each question (the data is sparse)
        choose, _ = router._rule(policy, p, x, cost_weight=0.0, margin=0.0)
        picks[policy] = routed_labels(choose(available), labels)
    # what the selection without the evidence rule (before this check) would have served
    chosen = space.metadata["routing_policy"]
    candidate = Policy(**chosen["evidence"]["candidate"])
    builder = SignalBuilder.from_arrays(space.routing, chosen["benchmarks"])
    picks["unchecked"] = routed_labels(candidate.choose(builder.build(p, x, candidate), available), labels)
    bench = np.asarray(data.benchmarks)[rows]
    unseen = np.isin(bench, prep.split.info.get("unseen_benchmarks", []))
    out = {"data": data.name, "split": split_kind, "seed": seed, "test_questions": int(len(rows)),
           "policy": space.metadata["routing_policy"]}
    for part, mask in (("in_distribution", ~unseen), ("unseen_tasks", unseen)):
        if not mask.any():
            continue
        t, a, u = picks["tuned"][mask], picks["most_likely"][mask], picks["unchecked"][mask]
        out[part] = {"questions": int(mask.sum()), "tuned": task_averaged(t, bench[mask]),
                     "argmax": task_averaged(a, bench[mask]), "unchecked": task_averaged(u, bench[mask]),
                     "tuned_minus_argmax": float((t - a).mean()), "tuned_minus_argmax_ci95": bootstrap_ci(t - a),
                     "unchecked_minus_argmax": float((u - a).mean()),
                     "unchecked_minus_argmax_ci95": bootstrap_ci(u - a)}
    print(f"{data.name} {split_kind} seed {seed}: policy {out['policy']['name']} (kept "
          f"{out['policy']['evidence']['kept']}); " + "; ".join(
              f"{p} tuned {out[p]['tuned']:.4f} argmax {out[p]['argmax']:.4f} unchecked {out[p]['unchecked']:.4f}"
              for p in ("in_distribution",
                                                                                            "unseen_tasks")
              if p in out), flush=True)
    return out


def main():
    ap = parser(__doc__, data=False)
    ap.add_argument("--data", nargs="+", default=[str(SHARED / d) for d in ("zeroeval", "mmlu_pro", "theoremqa")])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--splits", nargs="+", default=["by_question", "unseen_tasks"])
    ap.add_argument("--members", type=int, default=3)
    args = ap.parse_args()
    runs = [run(path, seed, kind, args) for path in args.data for kind in args.splits for seed in args.seeds]
    worst = min((r[p]["tuned_minus_argmax_ci95"][1], r["data"], r["split"], r["seed"], p) for r in runs
                for p in ("in_distribution", "unseen_tasks") if p in r)
    write_json(args.out, {"runs": runs, "members": args.members, "encoder": args.encoder,
                          "lowest_upper_bound": worst})


if __name__ == "__main__":
    main()
