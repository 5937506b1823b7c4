"""Every study at the size of a real population of LLMs (the Open LLM Leaderboard's 5,049).

    python benchmarks/population.py [--data DIR] --out F.json [--new-llms DIR] [--seed 0]
        [--encoder NAME] [--max-llms N] [--onboard-llms 200] [--train-workers 2] [--tune-trials 8]

--data: a results folder (default ../shared/data/openllm) with, optionally, models.csv (size,
the leaderboard's scores). With --new-llms DIR (the same questions, its own models.csv, LLMs not
in --data) the space is trained on all of --data and those are the new LLMs; without it, 20% of
--data's LLMs are held out by --seed. --max-llms N: a seeded slice of N LLMs (a quick run).

The JSON (jeirt_ray/population/study.py):
- data: {llms, questions, labels, known_llms, new_llms}
- timing: {encode_s, train_s (plain path, JE-IRT), train_peak_rss_gb (this process's peak so far,
  the data included), train_workers, ray_train_s (one member on Ray Train with that many
  workers), tune_s, tune_trials, onboard_s_per_llm (one vector from 100 answers), ...}
- prediction[jeirt|mf|knn|irt]: {auc, accuracy, log_loss, auc_ci95} on the held-out questions of
  the known LLMs; prediction.jeirt.minus_<method>_auc(_ci95): questions resampled
- onboarding["25"|"50"|"100"|"200"][default|random|adaptive|knn|irt|vector|sharpened]:
  {accuracy_mae (points), interval_coverage (90% intervals), llms}; default: the space's anchor
  questions where it keeps enough known LLMs' answers (model/anchors.py), else vector's way
- leaderboard["100"][arc|gsm8k|mmlu|truthfulqa|winogrande]: {rmse (points), llms}: from the
  first 100 anchors straight to the score; leaderboard_map: the default's per-benchmark
  accuracies through the accuracy-to-score map (leaderboard_vector, leaderboard_sharpened: the
  same from those ways)
- routing["10"|"100"|"1000"]: {best_single, benchmark_best, jeirt, mf, knn, oracle, pools,
  jeirt_minus_best_single_ci95}; routing_dedup: the same over one LLM per group of twins;
  routing_cost["1000"]: parameters per query at the best single's accuracy over its size
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import dataset_path, parser, write_json  # noqa: E402


def main(argv=None) -> dict:
    ap = parser(__doc__)
    ap.set_defaults(encoder="all-MiniLM-L6-v2")
    ap.add_argument("--new-llms", help="a folder of new LLMs (same questions, not in --data)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-llms", type=int, help="a seeded slice of this many LLMs of --data (a quick run)")
    ap.add_argument("--onboard-llms", type=int, default=200, help="new LLMs the onboarding studies run on")
    ap.add_argument("--members", type=int, default=1, help="seeds of JE-IRT and MF (the plain path)")
    ap.add_argument("--train-workers", type=int, default=2, help="Ray Train workers for the timed run (0: skip)")
    ap.add_argument("--tune-trials", type=int, default=8, help="Ray Tune trials of dimension x adapter width (0: skip)")
    ap.add_argument("--tune-epochs", type=int, default=30)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    for name in ("max_llms", "onboard_llms", "members", "train_workers", "tune_trials", "tune_epochs"):
        value = getattr(args, name)
        if value is not None and value < (1 if name in ("max_llms", "members", "tune_epochs") else 0):
            ap.error(f"--{name.replace('_', '-')} must be at least {1 if name in ('max_llms', 'members') else 0}")

    from jeirt_ray.core.paths import home
    from jeirt_ray.data import load_data
    from jeirt_ray.encoders import make_encoder
    from jeirt_ray.data.llm_table import read_models
    from jeirt_ray.population.llms import combine, select_models, split_llms
    from jeirt_ray.population.study import run_study

    folder = dataset_path(args.data, "openllm")
    data, table = load_data(folder), read_models(folder)
    if args.max_llms and args.max_llms < data.n_models:
        rng = np.random.default_rng(args.seed)
        data = select_models(data, np.sort(rng.choice(data.models, size=args.max_llms, replace=False)))
    if args.new_llms:
        new_folder = dataset_path(args.new_llms, "")
        new = load_data(new_folder)
        data = combine(data, new, str(new_folder))
        new_names = new.models
        extra = read_models(new_folder)
        if table is not None and extra is not None:
            table = table.combine_first(extra)
        elif extra is not None:
            table = extra
    else:
        _, new_names = split_llms(data.models, 0.2, args.seed)
    out = run_study(data, table, new_names, make_encoder(args.encoder), seed=args.seed, members=args.members,
                    onboard_llms=args.onboard_llms, train_workers=args.train_workers, tune_trials=args.tune_trials,
                    tune_epochs=args.tune_epochs, cache_root=home() / "cache", progress=not args.quiet)
    out["settings"] = {k: v for k, v in vars(args).items() if k != "out"} | {"data": str(folder)}
    write_json(args.out, out, quiet=args.quiet)
    return out


if __name__ == "__main__":
    main()
