"""Routing that learns from its own traffic, simulated on real labels.

    python benchmarks/online.py [--data DIR] [--prices FILE] --seed S --out F.json [--plot F.png]
        [--held-out 3 | --held-out-categories A B C] [--members 1] [--max-steps N] [--encoder NAME]

A space is trained with `--held-out` benchmarks (categories) left out entirely, and one more
left out for validation; the seen categories are split 60/10/30 (training, validation, stream).
The stream (the seen categories' 30% and every question of the held-out ones, in random order)
is replayed through each method of `jeirt_ray.experiments.online_sim` (static, online,
online_full, online_regions, epsilon_greedy, linucb, category_thompson, category_best, oracle): each step picks an LLM among those
with a label for the question, receives its label and is charged its price (without --prices
every LLM costs the same: nothing). The configurations of online, online_regions and category_thompson
are chosen on the validation stream (the validation category and the seen categories' validation
questions). Also measured in the same run: applying a batch of 100 outcomes, and one routed
query with and without exploration (and online_regions' update, decision and refit).

JSON: `curve["<step>"]["<method>"]` (accuracy_window, cost_per_1k_window), `final["<method>"]`
(unseen_accuracy_last_half, seen_accuracy_last_half, cost_per_1k, exploration_cost_share),
`final["online_minus_static_unseen_ci95"]`, `final["online_minus_static_seen_ci95"]` (paired over
questions; the same for online_regions), `adoption_steps` (the cold-started LLM), `narrowed_share` (queries whose candidates
were narrowed by missing labels), `chosen_config`, `timing`.
"""

from __future__ import annotations

import time

import numpy as np

from _common import dataset_path, parser, write_json
from jeirt_ray.core import paths
from jeirt_ray.data import load_data
from jeirt_ray.encoders import make_encoder
from jeirt_ray.experiments import online_sim as sim
from jeirt_ray.experiments.methods import train_space
from jeirt_ray.experiments.prepare import prepare
from jeirt_ray.experiments.selection import fixed_config
from jeirt_ray.learning import Explorer, OnlineState, Outcomes


def costs_of(space, prep, prices_path):
    """rows -> (n, LLMs) USD per query: the router's own per-query costs from a price table, else 0."""
    if not prices_path:
        return lambda rows: np.zeros((len(rows), prep.data.n_models))
    from jeirt_ray.routing.prices import PriceTable, resolve_prices
    from jeirt_ray.routing.router import SpaceRouter
    prices = resolve_prices(prep.data.models, PriceTable.read(prices_path))
    print(prices.summary(), flush=True)
    router = SpaceRouter(space, prices=prices)
    texts = prep.data.texts

    def cost_of(rows):
        return router.cost_matrix(prep.X[rows], [texts[i] for i in rows])
    cost_of.router = router  # for the budget's open-loop weight
    return cost_of


def timing(space, prep, rows) -> dict:
    """Milliseconds: a batch of 100 outcomes learned; one query routed with and without exploration."""
    state = OnlineState(space, 0.05)
    rng = np.random.default_rng(0)
    x = prep.X[np.resize(rows, 100)]  # a short stream's queries repeated
    batch = Outcomes(x, rng.integers(0, len(state.names), 100), rng.integers(0, 2, 100))
    state.update(batch)  # warm
    t = time.perf_counter()
    for _ in range(5):
        state.update(batch)
    update_ms = (time.perf_counter() - t) / 5 * 1000
    greedy, explore = Explorer(state, explore=0.0), Explorer(state, rule="thompson", explore=1.0)
    out = {"update_100_outcomes_ms": update_ms, "llms": len(state.names)}
    for name, ex in (("route_ms_without_exploration", greedy), ("route_ms_with_exploration", explore)):
        ex.decide(x[:1])
        t = time.perf_counter()
        for i in range(100):
            ex.decide(x[i:i + 1])
        out[name] = (time.perf_counter() - t) / 100 * 1000
    out["exploration_adds_ms"] = out["route_ms_with_exploration"] - out["route_ms_without_exploration"]
    return out


def region_timing(space, known_x, known_y, config, x) -> dict:
    """Milliseconds for online_regions: a batch of 100 outcomes learned (no refit inside it), one
    query decided, and drawing the regions again (every `refit_every` outcomes)."""
    learner = sim.build_regions(space, known_x, known_y, config, 0.0, 0).learner
    learner.refit_every = 10 ** 9
    x = x[np.resize(np.arange(len(x)), 100)]  # a short stream's queries repeated
    rng = np.random.default_rng(0)
    llm, y = rng.integers(0, len(space.model_names), 100), rng.integers(0, 2, 100)
    learner.update(x[:100], llm, y)  # warm
    t = time.perf_counter()
    learner.update(x[:100], llm, y)
    out = {"regions_update_100_outcomes_ms": (time.perf_counter() - t) * 1000}
    learner.decide(x[:1])
    t = time.perf_counter()
    for i in range(100):
        learner.decide(x[i:i + 1])
    out["regions_route_ms"] = (time.perf_counter() - t) / 100 * 1000
    t = time.perf_counter()
    learner._fit_regions()
    out["regions_refit_ms"] = (time.perf_counter() - t) * 1000
    return out


def share(values) -> str:
    """The mean of `values` to 4 places, or '-' where there is none."""
    values = [v for v in values if v is not None]
    return f"{np.mean(values):.4f}" if values else "-"


def plot(result: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    steps = [int(s) for s in result["curve"]]
    fig, ax = plt.subplots(figsize=(7, 4))
    for m in sim.METHODS:
        ys = [result["curve"][str(s)][m]["unseen_accuracy_window"] for s in steps]
        ax.plot(steps, [np.nan if y is None else 100 * y for y in ys], label=m,
                ls="--" if m in ("category_thompson", "category_best", "oracle") else "-")
    ax.set_xlabel("queries routed")
    ax.set_ylabel("accuracy on held-out categories, last 500 (%)")
    ax.set_title(f"{result['data']}, seed {result['seed']}: learning from traffic")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    ap = parser(__doc__)
    ap.add_argument("--prices", help="price table (CSV, as ../shared/data/prices.csv)")
    ap.add_argument("--seed", type=int, default=0, help="which categories are held out, the split, the order")
    ap.add_argument("--plot", help="PNG of the held-out categories' accuracy along the stream")
    ap.add_argument("--held-out", type=int, default=3, help="categories held out of training (test), drawn by seed")
    ap.add_argument("--held-out-categories", nargs="+", help="these categories held out (test) in place of a draw; "
                    "the validation category is still drawn by seed among the others")
    ap.add_argument("--members", type=int, default=1, help="JE-IRT ensemble size (default 1)")
    ap.add_argument("--max-steps", type=int, default=None, help="at most this many stream queries")
    ap.add_argument("--full-share", type=float, default=0.05, help="online_full: queries learned from every LLM")
    ap.add_argument("--epsilon", type=float, default=0.05, help="epsilon_greedy's share of random choices")
    ap.add_argument("--budget-per-1k", type=float, default=None, help="with --prices: also run online_budget, "
                    "paced to spend this many USD per 1,000 queries, and report its spend against it")
    args = ap.parse_args()
    if args.budget_per_1k is not None and (not args.prices or args.budget_per_1k <= 0):
        ap.error("--budget-per-1k needs --prices and a budget above 0")
    data = load_data(dataset_path(args.data, "mmlu_pro"))
    try:
        held, val_cat = sim.choose_categories(data, args.held_out, args.seed, args.held_out_categories)
    except ValueError as e:
        raise SystemExit(f"online.py: {e}")
    if not args.held_out_categories and len(held) < args.held_out:
        print(f"{data.name} has {len(set(data.benchmarks))} benchmarks: {len(held)} held out, not {args.held_out}, "
              f"so that one is left to train on" + ("" if val_cat else " (validation: the seen categories' own)"),
              flush=True)
    print(f"held out: {held}; validation category: {val_cat}", flush=True)
    val_cats = [val_cat] if val_cat else []
    prep = prepare(data, make_encoder(args.encoder), split=sim.held_out_split(data, held + val_cats, args.seed),
                   cache_root=paths.cache_dir(), progress=False)
    space = train_space(prep, fixed_config("jeirt"), members=args.members, seed=args.seed, progress=False)
    cost_of = costs_of(space, prep, args.prices)  # a table that fits none of the LLMs: one line (_common)
    in_val_cat = np.isin(data.benchmarks, val_cats)
    stream_rows = np.flatnonzero((prep.split.question_part == 2) & ~in_val_cat)
    val_rows = np.flatnonzero((prep.split.question_part == 1) | in_val_cat)
    test = sim.make_stream(prep, stream_rows, held, cost_of, args.seed, args.max_steps)
    val = sim.make_stream(prep, val_rows, val_cats, cost_of, args.seed, args.max_steps)
    config, tried = sim.choose_config(space, val, prep.X[val.rows], 0.0, args.seed)
    print(f"chosen on validation: {config}", flush=True)
    known = np.flatnonzero(prep.split.question_part == 0)  # the training questions: where the space is on the map
    known_x, known_y = prep.X[known], data.label_matrix(known)
    rconfig, rtried = sim.choose_region_config(space, val, prep.X[val.rows], known_x, known_y, 0.0, args.seed)
    print(f"online_regions, chosen on validation: {rconfig}", flush=True)
    cprior, ctried = sim.choose_category_prior(space, val, prep.X[val.rows], args.seed)
    x = prep.X[test.rows]
    runs = {}
    for m in ("static", "online", "online_full", "online_regions", "epsilon_greedy", "linucb", "category_thompson"):
        if m == "online_regions":
            method = sim.build_regions(space, known_x, known_y, rconfig, 0.0, args.seed)
        elif m == "category_thompson":
            method = sim.build_category(space, test, cprior, args.seed)
        else:
            method = sim.build(m, space, config, 0.0, args.seed, args.full_share, args.epsilon)
        runs[m] = sim.run_method(method, test, x)
        print(f"{m}: unseen {share(runs[m]['correct'][test.unseen])} seen {share(runs[m]['correct'][~test.unseen])}",
              flush=True)
    if args.budget_per_1k is not None:  # the pacer starts from the router's open-loop calibration, as jr.Learner's
        start = cost_of.router.budget_weight(args.budget_per_1k)
        gain, gains = sim.choose_pacer_gain(space, val, prep.X[val.rows], config, args.budget_per_1k, start, args.seed)
        print(f"pacer gain chosen on validation: {gain} ({gains})", flush=True)
        runs["online_budget"] = sim.run_method(sim.build("online_budget", space, config, 0.0, args.seed,
                                                         args.full_share, args.epsilon, args.budget_per_1k, start, gain),
                                               test, x)
    runs |= sim.hindsight(test)
    result = {"data": data.name, "seed": args.seed, "encoder": args.encoder, "members": args.members,
              "prices": args.prices, "held_out": held, "validation_category": val_cat,
              "stream": {"queries": int(len(test.rows)), "unseen": int(test.unseen.sum())},
              "narrowed_share": float(np.isnan(test.labels).any(1).mean()),
              "chosen_config": config, "validation": tried, "chosen_region_config": rconfig,
              "region_validation": rtried, "chosen_category_prior": cprior, "category_validation": ctried,
              **sim.summarise(test, runs)}
    result["adoption"] = sim.adoption(space, test, x, config, 0.0, args.seed)
    result["adoption_steps"] = result["adoption"]["adoption_steps"]
    result["timing"] = timing(space, prep, test.rows) | region_timing(space, known_x, known_y, rconfig, x)
    if args.budget_per_1k is not None:
        paced = runs["online_budget"]["cost"]
        late = paced[len(paced) // 2:]
        result["budget"] = {"budget_per_1k": args.budget_per_1k, "pacer_gain": gain, "pacer_validation": gains,
                            "spend_per_1k": float(paced.mean() * 1000),
                            "spend_per_1k_last_half": float(late.mean() * 1000),
                            "over_budget": float(paced.mean() * 1000 / args.budget_per_1k - 1),
                            "over_budget_last_half": float(late.mean() * 1000 / args.budget_per_1k - 1)}
        print(f"budget {args.budget_per_1k} USD/1k: spent {result['budget']}", flush=True)
    write_json(args.out, result, quiet=True)
    f = result["final"]
    for m in sim.METHODS:
        print(f"{m:15s} unseen {share([f[m]['unseen_accuracy_last_half']])}  seen "
              f"{share([f[m]['seen_accuracy_last_half']])}  cost/1k {f[m]['cost_per_1k']:.4g}  "
              f"exploration {f[m]['exploration_cost_share']:.3f}")
    diff = {part: "-" if f[f"online_minus_static_{part}"] is None else
            f"{f[f'online_minus_static_{part}']:+.4f} {f[f'online_minus_static_{part}_ci95']}" for part in ("unseen", "seen")}
    print(f"online - static, unseen last half: {diff['unseen']}; seen {diff['seen']}; adoption {result['adoption']}; "
          f"timing {result['timing']}")
    if args.plot:
        plot(result, args.plot)


if __name__ == "__main__":
    main()
