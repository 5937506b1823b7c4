"""Prediction at the population's size with each method's configuration chosen on validation, one
budget for both: does choosing close JE-IRT's gap to matrix factorisation (issue 63)?

    python benchmarks/prediction_choice.py [--data DIR] --out F.json [--seeds 0 1 2] [--max-llms N]

The population study (benchmarks/population.py) trains each method's fixed configuration. Here
JE-IRT and MF each get three configurations (the fixed one and two others, listed in GRID),
trained on the same known LLMs and training questions as the study's (20% of the LLMs held out
by seed, the split by seed, one member seeded 100 x seed); each method's configuration is the one
with the best validation AUC, and only the chosen ones (and, for reference, the fixed ones) are
scored on the test questions, with the study's question-resampled intervals.

The JSON: per seed, `val[method/config]` {val_auc, seconds}, `chosen[method]`,
`test_chosen` and `test_fixed` (prediction_metrics: {method: {auc, accuracy, log_loss, auc_ci95,
...}}, JE-IRT's minus_mf_auc_ci95); `mean` over seeds: chosen and fixed test AUCs and JE-IRT minus MF.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import dataset_path, parser, write_json  # noqa: E402

# three configurations each: the fixed one, and changes to the regularisation or size that are
# plausible at thousands of LLMs (chosen before any test score was read)
GRID = {"jeirt": {"fixed": {}, "input_dropout0.2": {"input_dropout": 0.2}, "dropout0.2": {"dropout": 0.2}},
        "mf": {"fixed": {}, "dim256": {"dim": 256}, "wd1e-3_dropout0.3": {"weight_decay": 1e-3, "dropout": 0.3}}}


def one_seed(data, encoder, seed: int, cache_root) -> dict:
    from sklearn.metrics import roc_auc_score

    from jeirt_ray.experiments.methods import _modules_predictor, _space_predictor, train_space
    from jeirt_ray.experiments.prepare import prepare
    from jeirt_ray.experiments.selection import fixed_config
    from jeirt_ray.model.train import fit
    from jeirt_ray.population.llms import select_models, split_llms
    from jeirt_ray.population.prediction import prediction_metrics

    _, new = split_llms(data.models, 0.2, seed)
    known = select_models(data, np.array([m for m in data.models if m not in set(new)]))
    prep = prepare(known, encoder, seed=seed, cache_root=cache_root, progress=False)
    val, rows_val, rows_test = prep.pairs("val"), prep.rows("val"), prep.rows("test")
    pos = np.full(prep.data.n_questions, -1)
    pos[rows_val] = np.arange(len(rows_val))
    out, predictors = {}, {}
    for kind, configs in GRID.items():
        for name, change in configs.items():
            cfg = fixed_config(kind).model_copy(update=change)
            start = time.perf_counter()
            if kind == "jeirt":
                predict = _space_predictor(train_space(prep, cfg, 1, seed=100 * seed, progress=False), prep.X)
            else:
                r = fit(prep.X, prep.data.n_models, prep.pairs("train"), val,
                        cfg.model_copy(update={"seed": 100 * seed}), progress=False)
                predict = _modules_predictor([r.module], prep.Xt)
            probs = predict(rows_val)[pos[val.q.numpy()], val.m.numpy()]
            out[f"{kind}/{name}"] = {"val_auc": float(roc_auc_score(val.y.numpy() >= 0.5, probs)),
                                     "seconds": time.perf_counter() - start}
            predictors[f"{kind}/{name}"] = predict
            print(f"seed {seed} {kind}/{name}: {out[f'{kind}/{name}']}", flush=True)
    chosen = {k: max((n for n in out if n.startswith(k + "/")), key=lambda n: out[n]["val_auc"]) for k in GRID}
    return {"val": out, "chosen": chosen,
            "test_chosen": prediction_metrics(prep, {k: predictors[n](rows_test) for k, n in chosen.items()},
                                              rows_test, seed=seed),
            "test_fixed": prediction_metrics(prep, {k: predictors[f"{k}/fixed"](rows_test) for k in GRID},
                                             rows_test, seed=seed)}


def main(argv=None) -> dict:
    ap = parser(__doc__)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--max-llms", type=int, help="a seeded slice of this many LLMs (a quick run)")
    args = ap.parse_args(argv)

    from jeirt_ray.core.paths import home
    from jeirt_ray.data import load_data
    from jeirt_ray.encoders import make_encoder
    from jeirt_ray.population.llms import select_models

    data = load_data(dataset_path(args.data, "openllm"))
    if args.max_llms and args.max_llms < data.n_models:
        rng = np.random.default_rng(0)
        data = select_models(data, np.sort(rng.choice(data.models, size=args.max_llms, replace=False)))
    encoder = make_encoder(args.encoder)
    seeds = {str(s): one_seed(data, encoder, s, home() / "cache") for s in args.seeds}
    mean = {f"{part}_{k}_auc": float(np.mean([r[f"test_{part}"][k]["auc"] for r in seeds.values()]))
            for part in ("chosen", "fixed") for k in GRID}
    for part in ("chosen", "fixed"):
        mean[f"{part}_jeirt_minus_mf_auc"] = mean[f"{part}_jeirt_auc"] - mean[f"{part}_mf_auc"]
    out = {"seeds": seeds, "mean": mean, "grid": GRID, "settings": vars(args)}
    write_json(args.out, out)
    return out


if __name__ == "__main__":
    main()
