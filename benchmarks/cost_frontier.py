"""What routing saves, in money: the cost-accuracy frontier of JE-IRT's cost policies against
MF, KNN, a training-free cluster router, RouteLLM's two-LLM threshold router, random mixing of
single LLMs and the oracle (jeirt_ray/experiments/cost_study.py says how each is built).

    python benchmarks/cost_frontier.py --data DIR --prices FILE --out F.json [--seed S] [--plot F.png]

`--seed` is the split seed (80/10/10 by question). The price table lists USD per million input
and output tokens (CSV `model,input_usd_per_mtok,output_usd_per_mtok[,basis]`, or YAML/JSON); LLMs
it does not list are priced by tokencost's public table, else by the parameter-count proxy,
said in one line. Answer lengths come from the data folder's `outputs_meta.*` where present.
JSON: `best_single`, per method under `methods` its `aiq`, `aiq_ci95`,
`cost_share_at_best_accuracy`, `accuracy_at_cost_share` ("0.1", "0.25", "0.5"), `arena`; and
`aiq_jeirt_minus_cluster_ci95`, `calibration`, `sensitivity` (open-weight prices halved and doubled).
"""

from __future__ import annotations

import numpy as np

from _common import SHARED, dataset_path, parser, write_json
from jeirt_ray.data import load_data
from jeirt_ray.encoders import make_encoder
from jeirt_ray.experiments.cost_study import cost_study
from jeirt_ray.experiments.prepare import prepare
from jeirt_ray.core import paths
from jeirt_ray.routing.prices import PriceTable, normalise_name, read_answer_tokens, resolve_prices

STYLE = {"jeirt": ("JE-IRT", "C0", "-"), "mf": ("MF", "C1", "--"), "knn": ("KNN", "C2", "--"),
         "cluster": ("cluster router", "C3", "-."), "threshold_2llm": ("two-LLM threshold", "C4", ":"),
         "random_mix": ("random mixing of LLMs", "0.5", "-"), "oracle": ("oracle", "k", ":")}


def plot(result: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for s in result["singles"]:
        ax.scatter(s["cost_per_1k"], s["accuracy"], s=14, color="0.35", zorder=3)
    best = result["best_single"]
    ax.scatter(best["cost_per_1k"], best["accuracy"], s=50, marker="*", color="C3", zorder=4,
               label=f"best single LLM ({best['llm']})")
    for name, (label, color, ls) in STYLE.items():
        hull = result["methods"][name]["hull"]
        ax.plot([h[0] for h in hull], [h[1] for h in hull], ls, color=color, label=f"{label} (AIQ "
                f"{result['methods'][name]['aiq']:.3f})", lw=1.6 if name == "jeirt" else 1.1)
    ax.set_xscale("log")
    ax.set_xlabel("average cost per 1,000 test queries (USD, log scale)")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"{result['data']}, split seed {result['split_seed']}: cost-accuracy frontiers")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def main():
    ap = parser(__doc__)
    ap.add_argument("--prices", default=str(SHARED / "prices.csv"), help="price table (CSV, YAML or JSON)")
    ap.add_argument("--seed", type=int, default=None, help="the split seed (same as --split-seed)")
    ap.add_argument("--members", type=int, default=5, help="ensemble members of JE-IRT and MF")
    ap.add_argument("--search", action="store_true", help="search JE-IRT's and MF's configurations on validation "
                                                          "(Ray Tune, the same budget each), as `jeirt train` does; "
                                                          "default: the fixed configuration")
    ap.add_argument("--trials", type=int, default=None, help="with --search: trials per method")
    ap.add_argument("--n-boot", type=int, default=500)
    ap.add_argument("--plot", help="PNG of the frontiers")
    args = ap.parse_args()
    seed = args.split_seed if args.seed is None else args.seed
    folder = dataset_path(args.data, "mmlu_pro")
    data = load_data(folder)
    table = PriceTable.read(args.prices)
    prices = resolve_prices(data.models, table)
    print(prices.summary(), flush=True)
    open_weight = np.array([table.basis.get(normalise_name(m), "").startswith("hosted") or src == "size proxy"
                            for m, src in zip(data.models, prices.sources)])
    answers = read_answer_tokens(folder, data.models, data.question_ids)
    prep = prepare(data, make_encoder(args.encoder), seed=seed, cache_root=paths.cache_dir())
    search = {}
    if args.search:
        from jeirt_ray.distributed import init_ray
        from jeirt_ray.distributed.tune import run_search
        from jeirt_ray.experiments.selection import SearchSettings
        init_ray(log_to_driver=False)
        search = {"search": SearchSettings(members=args.members, trials=args.trials), "search_fn": run_search,
                  "search_storage": paths.home() / "search"}
    result = cost_study(prep, prices, None if answers is None else answers[0], members=args.members, seed=seed,
                        n_boot=args.n_boot, open_weight=open_weight, **search)
    result |= {"price_table": args.prices, "encoder": prep.encoder_id, "members": args.members,
               "configuration": "searched" if args.search else "fixed",
               "answer_tokens": answers[1] if answers else result["answer_tokens"]}
    if args.plot:
        plot(result, args.plot)
    m = result["methods"]
    print(f"{data.name} seed {seed}: best single {result['best_single']['llm']} "
          f"{result['best_single']['accuracy']:.4f} at ${result['best_single']['cost_per_1k']:.3f}/1k; AIQ "
          + ", ".join(f"{k} {v['aiq']:.4f}" for k, v in m.items())
          + f"; JE-IRT - cluster {result['aiq_jeirt_minus_cluster']:+.4f} {result['aiq_jeirt_minus_cluster_ci95']}",
          flush=True)
    write_json(args.out, result, quiet=True)


if __name__ == "__main__":
    main()
