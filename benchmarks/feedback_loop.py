"""The feedback loop as the service runs it, on real labels: a category the space never saw
streams in, each answer is graded and recorded in the feedback store, and the replicas' learner
(feedback/applied.py) reads the store every `--poll` queries; its choices are compared with the
static router's on the same queries. The learner's settings (prior_var, residual_var) are chosen
on `--validation` categories (each trained without, streamed the same way), never the test's.

    python benchmarks/feedback_loop.py [--data DIR] --out F.json [--categories history health engineering law]
        [--seeds 0 1 2] [--poll 20] [--explore 0 0.1] [--llms ...]

The space holds mmlu_pro's four LLMs with recorded outputs (the ones a test replays as
upstreams); it is trained without the category (the others split 80/10/10), and the category's
questions arrive in random order (the seed). Both routers choose the LLM with the highest
P(correct) among those with a label for the question (the loop: learned from the grades so
far; static: as trained); the grade is that LLM's label (what the answer key gives for its
recorded output, 99.98% of rows). With `--explore` shares above 0 among the choices, the loop may
also decide a share of the queries by Thompson sampling from the learner's posterior (learning/
explore.py), so that it learns about LLMs it would not choose; its accuracy counts those choices.

JSON: `chosen_settings` (prior_var, residual_var, explore), `validation_gain` (each setting's mean
gain on validation), `runs[]` (category, seed, queries, static / loop / category_best accuracy over
the second half of the stream, loop_minus_static with its paired 95% interval), `mean` over runs.
"""

from __future__ import annotations

import itertools
import tempfile
import time

import numpy as np

from _common import dataset_path, parser, write_json
from jeirt_ray.core import paths
from jeirt_ray.data import load_data
from jeirt_ray.data.dataset import ResponseData
from jeirt_ray.encoders import make_encoder
from jeirt_ray.experiments import online_sim as sim
from jeirt_ray.experiments.methods import train_space
from jeirt_ray.experiments.prepare import prepare
from jeirt_ray.experiments.selection import fixed_config
from jeirt_ray.feedback import FeedbackStore, Grade, new_id
from jeirt_ray.feedback.applied import FeedbackLearner
from jeirt_ray.learning import Explorer

GRID = {"prior_var": (0.003, 0.03), "residual_var": (0.0, 1.0)}  # evidence 0, as the learner's defaults
FOUR = ["gemini-1.5-flash-002", "Meta-Llama-3.1-70B-Instruct", "DeepSeek-V2", "Phi-3-mini-4k-instruct"]


def only(data: ResponseData, names: list[str]) -> ResponseData:
    """The dataset with these LLMs alone (names matched case-insensitively, ignoring _ and .)."""
    def key(n):
        return str(n).lower().replace("_", "").replace(".", "").replace("-", "")
    where = {key(m): i for i, m in enumerate(data.models)}
    missing = [n for n in names if key(n) not in where]
    if missing:
        raise SystemExit(f"LLMs {missing} are not in {data.name}; it has {list(data.models)[:8]}...")
    cols = np.array([where[key(n)] for n in names])
    remap = np.full(data.n_models, -1)
    remap[cols] = np.arange(len(cols))
    keep = remap[data.m_idx] >= 0
    return ResponseData(data.question_ids, data.benchmarks, data.texts, data.models[cols], data.q_idx[keep],
                        remap[data.m_idx[keep]], data.labels[keep], name=data.name)


def trained(data: ResponseData, encoder, category: str, seed: int):
    """(space trained without `category`, the category's questions in stream order, their labels, vectors)."""
    prep = prepare(data, encoder, split=sim.held_out_split(data, [category], seed, (0.8, 0.1, 0.1)),
                   cache_root=paths.cache_dir(), progress=False)
    space = train_space(prep, fixed_config("jeirt").model_copy(update={"seed": seed}), members=1, progress=False)
    rows = np.flatnonzero(data.benchmarks == category)
    rows = rows[np.random.default_rng(seed).permutation(len(rows))]
    return space, rows, data.label_matrix(rows), prep.X[rows]


def simulate(space, labels: np.ndarray, x: np.ndarray, poll: int, prior_var: float, residual_var: float,
             explore: float = 0.0, seed: int = 0) -> tuple[np.ndarray, float]:
    """The loop's choice per query (the learner's argmax; on a share `explore` of the queries,
    Thompson sampling from the learner's posterior), and its ms per query."""
    has = ~np.isnan(labels)
    with tempfile.TemporaryDirectory() as tmp:
        store = FeedbackStore(f"sqlite:///{tmp}/feedback.db")
        learner = FeedbackLearner(space, store, space.encoder_id, prior_var=prior_var, residual_var=residual_var)
        explorer = Explorer(learner.state, rule="thompson", explore=explore, seed=seed) if explore else None
        chosen = np.zeros(len(x), dtype=int)
        start = time.perf_counter()
        for i in range(len(x)):
            if i % poll == 0:
                learner.poll()
            if explorer is None:
                chosen[i] = int(np.where(has[i], learner.predict_proba(x[i:i + 1])[0], -1.0).argmax())
            else:
                chosen[i] = explorer.decide(x[i:i + 1], allowed=has[i:i + 1])[0].chosen
            store.add(Grade(new_id(), float(labels[i, chosen[i]]), "key", llm=space.model_names[chosen[i]],
                            encoder=space.encoder_id, embedding=x[i]))
    return chosen, (time.perf_counter() - start) / len(x) * 1000


def scored(data, category, seed, space, labels, x, chosen, ms) -> dict:
    has = ~np.isnan(labels)
    static = np.where(has, space.predict_proba(x), -1.0).argmax(1)
    idx = np.arange(len(x))
    loop_y, static_y = labels[idx, chosen], labels[idx, static]
    half = idx >= len(x) // 2
    best = int(np.nanargmax(np.nanmean(labels[half], 0)))
    return {"category": category, "seed": seed, "queries": len(x), "second_half": int(half.sum()),
            "static": float(static_y[half].mean()), "loop": float(loop_y[half].mean()),
            "category_best": float(np.nanmean(labels[half, best])), "category_best_llm": str(data.models[best]),
            "static_llm_share": {str(m): float(np.mean(static[half] == k)) for k, m in enumerate(data.models)},
            "loop_llm_share": {str(m): float(np.mean(chosen[half] == k)) for k, m in enumerate(data.models)},
            "loop_minus_static": float(loop_y[half].mean() - static_y[half].mean()),
            "loop_minus_static_ci95": sim.paired_ci(loop_y[half], static_y[half], seed=seed), "ms_per_query": ms}


def main():
    ap = parser(__doc__)
    ap.add_argument("--categories", nargs="+", default=["history", "health", "engineering", "law"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--poll", type=int, default=20, help="queries between two reads of the feedback store")
    ap.add_argument("--llms", nargs="+", default=FOUR)
    ap.add_argument("--explore", nargs="+", type=float, default=[0.0, 0.1],
                    help="shares of queries decided by Thompson sampling to choose among on validation (0: none)")
    ap.add_argument("--validation", nargs="+", default=["psychology", "business"],
                    help="categories the learner's settings are chosen on (never the test's)")
    args = ap.parse_args()
    if any(not 0 <= e <= 1 for e in args.explore):
        ap.error(f"--explore takes shares from 0 to 1, not {args.explore}")
    data_dir = dataset_path(args.data, "mmlu_pro")
    data = only(load_data(data_dir), args.llms)
    names = {str(b).split("/")[-1]: str(b) for b in np.unique(data.benchmarks)}  # "history" or "mmlu_pro/history"
    unknown = [c for c in args.categories if c not in names and c not in names.values()]
    if unknown:
        raise SystemExit(f"categories {unknown} are not in {data_dir}; it has {sorted(names)}")
    categories = [names.get(c, c) for c in args.categories]
    validation = [names.get(c, c) for c in args.validation]
    if set(validation) & set(categories):
        raise SystemExit("--validation categories must not be among --categories (the test)")
    encoder = make_encoder(args.encoder)
    grid = [dict(zip(GRID, v)) | {"explore": e} for v in itertools.product(*GRID.values()) for e in args.explore]
    gains = np.zeros(len(grid))
    for seed in args.seeds:  # the learner's settings, chosen on validation categories
        for category in validation:
            space, _, labels, x = trained(data, encoder, category, seed)
            for g, settings in enumerate(grid):
                gains[g] += scored(data, category, seed, space, labels, x,
                                   *simulate(space, labels, x, args.poll, **settings, seed=seed))["loop_minus_static"]
    chosen = grid[int(gains.argmax())]
    print("validation:", {str(g): round(v / len(args.seeds) / len(validation), 4) for g, v in zip(grid, gains)},
          "chosen:", chosen, flush=True)
    runs = []
    for seed in args.seeds:
        for category in categories:
            space, _, labels, x = trained(data, encoder, category, seed)
            r = scored(data, category, seed, space, labels, x, *simulate(space, labels, x, args.poll, **chosen, seed=seed))
            runs.append(r)
            print(f"{category:22s} seed {seed}: static {r['static']:.4f}  loop {r['loop']:.4f}  "
                  f"best {r['category_best']:.4f} ({r['category_best_llm']})  diff {r['loop_minus_static']:+.4f} "
                  f"{np.round(r['loop_minus_static_ci95'], 4).tolist()}", flush=True)
    mean = {k: float(np.mean([r[k] for r in runs])) for k in ("static", "loop", "category_best", "loop_minus_static")}
    write_json(args.out, {"data": str(data_dir), "llms": [str(m) for m in data.models], "encoder": args.encoder,
                          "poll": args.poll, "validation": validation, "chosen_settings": chosen,
                          "validation_gain": {str(g): float(v / len(args.seeds) / len(validation))
                                              for g, v in zip(grid, gains)}, "runs": runs, "mean": mean,
                          "targets": {"loop_minus_static_second_half": 0.02}})


if __name__ == "__main__":
    main()
