"""How `jeirt learn` scales with the feedback it reads: grades learned per second and the memory
it holds, measured at two sizes in one process and on Ray workers that share out the LLMs
(`--workers`), and the model that extrapolates them to a week at 100 requests per second (60.5 M
decisions, every one graded: the most there can be) and says how many workers finish it in an hour.

    python benchmarks/learn_scale.py --out F.json [--rows 20000 80000] [--workers 1 2] [--feedback-db URL]

The space: the synthetic generator's 24 LLMs trained on the hashing encoder (384 dimensions, as MiniLM's);
grades with random vectors and LLMs in a SQLite feedback store (or, with `--feedback-db`, a fresh
database per size on that PostgreSQL server, as a cluster's); a temporary MLflow registry.
Time and peak memory (the driver process's max RSS growth during `learn`; Ray actors' memory is
their own) are per run, in the same process, largest last; the workers run on a local Ray started
once (its start not timed).
"""

from __future__ import annotations

import gc
import math
import os
import resource
import tempfile
import time

import numpy as np

from _common import parser, postgres_database, write_json
from jeirt_ray.data.synthetic import generate
from jeirt_ray.encoders import HashingEncoder
from jeirt_ray.experiments.methods import train_space
from jeirt_ray.experiments.prepare import prepare
from jeirt_ray.feedback import FeedbackStore, Grade, new_id

WEEK = 7 * 86400 * 100  # decisions in a week at 100 per second


def fill(store: FeedbackStore, space, n: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, space.in_dim)).astype(np.float32)
    llm = rng.integers(len(space.model_names), size=n)
    for i in range(n):
        store.add(Grade(new_id(), float(rng.random() < 0.6), "key", llm=space.model_names[llm[i]],
                        encoder=space.encoder_id, embedding=x[i]))


def measure(runs: list, reg, url: str, n: int, workers: list[int]) -> None:
    """`learn` on the store at `url` (n grades) with each number of workers: time and memory."""
    from jeirt_ray.api.learn import learn
    for w in workers:
        gc.collect()
        before = max_rss_mb()
        start = time.perf_counter()
        out = learn("models:/scale/1", register="scale", feedback_url=url, registry=reg, workers=w)
        seconds = time.perf_counter() - start
        runs.append({"rows": n, "workers": w, "seconds": seconds, "grades_per_s": n / seconds,
                     "max_rss_growth_mb": max_rss_mb() - before, "grades_learned": out["grades_learned"],
                     "grades_compared": out["grades_compared"]})
        print(runs[-1], flush=True)


def max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main():
    ap = parser(__doc__, data=False)
    ap.add_argument("--rows", nargs="+", type=int, default=[20_000, 80_000])
    ap.add_argument("--workers", nargs="+", type=int, default=[1, 2], help="1: in this process; N: N Ray actors")
    ap.add_argument("--feedback-db", help="a PostgreSQL server's SQLAlchemy URL for the feedback store (default: SQLite)")
    args = ap.parse_args()
    if min(args.rows) < 1 or len(set(args.rows)) < 2 or min(args.workers) < 1:
        ap.error("--rows takes two or more different sizes and --workers whole numbers from 1")
    from jeirt_ray.api.learn import MAX_HELD
    from jeirt_ray.model.train import TrainConfig
    from jeirt_ray.tracking.registry import SpaceRegistry
    data = generate()  # 24 LLMs, 1,200 questions
    prep = prepare(data, HashingEncoder(384), progress=False)
    space = train_space(prep, TrainConfig(kind="jeirt", dim=16, lr=3e-3, max_epochs=40), members=1, progress=False)
    runs = []
    with tempfile.TemporaryDirectory() as home:
        os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{home}/mlflow.db"
        reg = SpaceRegistry()
        reg.promote("scale", reg.register(space, "scale"), "champion")
        if max(args.workers) > 1:
            from jeirt_ray.distributed import init_ray
            init_ray(num_cpus=max(args.workers))
        for n in sorted(args.rows):
            with postgres_database(args.feedback_db, f"jeirt_learn_scale_{n}") as server_db:
                url = server_db or f"sqlite:///{home}/feedback-{n}.db"
                fill(FeedbackStore(url), space, n)
                measure(runs, reg, url, n, args.workers)
    held_bytes = MAX_HELD * (space.in_dim * 4 + 200)  # the held-out sample at its cap: a vector and a row each
    model = {"week_at_100_rps_decisions": WEEK,
             "note": "time grows with the grades (one update each, in order, per LLM); memory does not (chunks of "
                     "10,000 rows and at most MAX_HELD held-out grades per worker)"}
    for w in args.workers:
        mine = sorted((r for r in runs if r["workers"] == w), key=lambda r: r["rows"])
        small, large = mine[0], mine[-1]
        per_grade_s = (large["seconds"] - small["seconds"]) / (large["rows"] - small["rows"])
        model[f"workers_{w}"] = {"seconds_per_grade": per_grade_s,
                                 "fixed_seconds": small["seconds"] - per_grade_s * small["rows"],
                                 "week_hours": per_grade_s * WEEK / 3600}
    if len(set(args.workers)) > 1:  # measured side by side: the speed-up per worker, and what a week needs
        one = model[f"workers_{min(args.workers)}"]["seconds_per_grade"] * min(args.workers)
        best = max(args.workers)
        efficiency = one / (best * model[f"workers_{best}"]["seconds_per_grade"])  # speed-up / workers
        model["parallel_efficiency"] = efficiency
        model["workers_for_week_in_1h"] = math.ceil(one * WEEK / 3600 / max(efficiency, 1e-9))
    model["driver_memory_bound_mb"] = held_bytes / 2**20 + max(r["max_rss_growth_mb"] for r in runs)
    print(model)
    write_json(args.out, {"encoder": "hashing-384", "llms": len(space.model_names),
                          "store": "postgresql" if args.feedback_db else "sqlite", "runs": runs, "model": model})


if __name__ == "__main__":
    main()
