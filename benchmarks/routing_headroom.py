"""How much a router could gain on a benchmark it never saw, choosing one LLM for all of it.

    python benchmarks/routing_headroom.py [--data DIR] --out results/routing_headroom.json [--split-seed S]

The splits of `routing_ood.py` (each benchmark held out in turn, the others 80/10/10). For each
held-out benchmark: best-on-average (the LLM with the best rate on the training questions, what
a router falls back to) and, in hindsight, the best single LLM on the held-out benchmark's own
questions. The second reads the held-out labels: it is a ceiling for any router that picks one
LLM per benchmark, not a method. A per-question oracle (any LLM right) is given for scale.
"""

from __future__ import annotations

import numpy as np

from _common import dataset_path, parser, write_json
from jeirt_ray.data import load_data
from routing_ood import held_out_split, labelled


def main():
    ap = parser(__doc__)
    args = ap.parse_args()
    data = load_data(dataset_path(args.data, "mmlu_pro"))
    if len(set(data.benchmarks)) < 2:
        raise SystemExit(f"{data.name} has one benchmark: nothing to hold out")
    L = data.label_matrix()
    rows = {}
    for bench in sorted(set(data.benchmarks)):
        split = held_out_split(data, bench, args.split_seed)
        with np.errstate(invalid="ignore"):
            train_rate = np.nanmean(L[split.questions(0)], 0)
        test = split.questions(2)
        _, labels = labelled(test[data.benchmarks[test] == bench], L)
        with np.errstate(invalid="ignore"):
            rate = np.nanmean(labels, 0)
        fallback, best = int(np.nanargmax(train_rate)), int(np.nanargmax(rate))
        rows[bench] = {"questions": len(labels), "best_average_llm": data.models[fallback],
                       "best_average": float(rate[fallback]), "best_llm_in_hindsight": data.models[best],
                       "best_in_hindsight": float(rate[best]), "per_question_oracle": float(np.nanmax(labels, 1).mean())}
        print(f"{bench}: best-on-average {data.models[fallback]} {100 * rate[fallback]:.2f}, best in hindsight "
              f"{data.models[best]} {100 * rate[best]:.2f}")
    mean = {k: float(np.mean([r[k] for r in rows.values()]))
            for k in ("best_average", "best_in_hindsight", "per_question_oracle")}
    same = sum(r["best_average_llm"] == r["best_llm_in_hindsight"] for r in rows.values())
    print(f"mean over {len(rows)} held-out benchmarks: best-on-average {100 * mean['best_average']:.2f}, best in "
          f"hindsight {100 * mean['best_in_hindsight']:.2f} (the same LLM in {same})")
    write_json(args.out, {"data": data.name, "split_seed": args.split_seed, "mean": mean, "same_llm": same,
                          "per_benchmark": rows})


if __name__ == "__main__":
    main()
