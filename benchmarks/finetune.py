"""Frozen against fine-tuned encoders, for JE-IRT and matrix factorisation alike.

    python benchmarks/finetune.py [--data DIR] --out results/finetune_zeroeval.json \
        [--settings all-MiniLM-L6-v2,all-MiniLM-L6-v2:top-2] [--seeds 0,1,2] [--finetune-seeds 0] \
        [--finetune-epochs 6] [--members 5]

A setting is an encoder, frozen (`NAME`) or fine-tuned end to end (`NAME:top-K` or `NAME:all`;
each method fine-tunes its own copy with its own head, model/finetune.py). For every setting and
seed (the split by question, 80/10/10, and the training seeds), JE-IRT and MF train their fixed
configuration (`members` seeds, the plain path of `jeirt evaluate --fixed`) on the training
questions, stop early on the validation questions, and are scored on the test questions:
pair accuracy, AUC, log-loss, and the router's accuracy (each test question goes to the LLM with
the highest predicted probability among those with a label for it) against the per-benchmark
best and the best-on-average LLM (both chosen on training labels), with 95% bootstrap intervals.
Times: training (fine-tuning included) per 1,000 training questions, and encoding per 1,000
questions measured on --time-n questions without the cache. Fine-tuned settings run the seeds
of --finetune-seeds (default: all of --seeds); on a CPU an epoch of the top 2 MiniLM layers costs
minutes. The JSON is rewritten after every run, so an interrupted run keeps what it finished.
"""

from __future__ import annotations

import time

import numpy as np

from _common import dataset_path, parser, write_json
from jeirt_ray.core import paths
from jeirt_ray.data import load_data, split_by_question
from jeirt_ray.encoders import make_encoder
from jeirt_ray.experiments.methods import predictors
from jeirt_ray.experiments.prepare import pair_probs, prepare, prepare_finetuned
from jeirt_ray.model.finetune import FinetuneSettings, parse_layers
from jeirt_ray.model.metrics import binary_metrics
from jeirt_ray.routing.outcomes import available_argmax, baseline_routers, bootstrap_ci, routed_labels

KINDS = ("jeirt", "mf")


def encode_seconds_per_1000(spec: str, texts: list[str]) -> float:
    enc = make_encoder(spec)
    enc.encode(texts[:4])
    start = time.perf_counter()
    enc.encode(texts)
    return (time.perf_counter() - start) / len(texts) * 1000


def score(prep, kind: str, members: int, seed: int, extra_seconds: float) -> dict:
    test = prep.pairs("test")
    rows = prep.rows("test")
    (_, predict, seconds, _), = predictors(prep, (kind,), members=members, train_seed=seed, progress=False)
    probs = predict(rows)
    L = prep.data.label_matrix()[rows]
    routed = routed_labels(available_argmax(probs, ~np.isnan(L)), L)
    n_train = len(prep.split.questions(0))
    return {**binary_metrics(pair_probs(probs, rows, test), test.y.numpy()),
            "router_accuracy": float(routed.mean()), "router_ci95": bootstrap_ci(routed),
            "train_seconds_per_1000_questions": (seconds + extra_seconds) / n_train * 1000, "_routed": routed}


def main():
    ap = parser(__doc__)
    ap.add_argument("--settings", default="all-MiniLM-L6-v2,all-MiniLM-L6-v2:top-2")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--finetune-seeds", default=None, help="seeds of the fine-tuned settings (default: --seeds)")
    ap.add_argument("--finetune-epochs", type=int, default=6)
    ap.add_argument("--members", type=int, default=5)
    ap.add_argument("--encoder-lr", type=float, default=3e-5)
    ap.add_argument("--time-n", type=int, default=200)
    args = ap.parse_args()
    data = load_data(dataset_path(args.data, "mmlu_pro"))
    texts = [str(t) for t in data.texts]
    seeds = [int(s) for s in args.seeds.split(",")]
    ft_seeds = [int(s) for s in args.finetune_seeds.split(",")] if args.finetune_seeds else seeds
    out = {"data": data.name, "seeds": seeds, "members": args.members, "settings": {}, "baselines": {}}
    for setting in args.settings.split(","):
        encoder, _, layers = setting.partition(":")
        row = out["settings"][setting] = {"encoder": encoder, "finetune": layers or None,
                                          "encode_seconds_per_1000": encode_seconds_per_1000(encoder, texts[:args.time_n])}
        for kind in KINDS:
            runs = []
            for seed in (ft_seeds if layers else seeds):
                split = split_by_question(data, seed)
                if layers:
                    prep = prepare_finetuned(data, encoder, kind, FinetuneSettings(layers=parse_layers(layers),
                                             encoder_lr=args.encoder_lr, max_epochs=args.finetune_epochs), seed=seed, split=split,
                                             cache_root=paths.cache_dir(), progress=False,
                                             folder=paths.home() / "models" / "finetuned" / f"bench-{data.name}-{kind}-{layers}-s{seed}")
                    extra = prep.finetune["hidden_state_seconds"] + prep.finetune["train_seconds"]
                else:
                    prep, extra = prepare(data, make_encoder(encoder), seed=seed, split=split,
                                          cache_root=paths.cache_dir(), progress=False), 0.0
                r = score(prep, kind, args.members, seed, extra)
                rows = prep.rows("test")
                L = data.label_matrix()[rows]
                train = prep.pairs("train")
                base = baseline_routers(L, train.m.numpy(), train.y.numpy(), data.benchmarks[train.q.numpy()],
                                        data.benchmarks[rows])
                routed = r.pop("_routed")
                r["router_minus_per_benchmark_best_ci95"] = bootstrap_ci(routed - base["per_benchmark_best"])
                r["router_minus_best_average_ci95"] = bootstrap_ci(routed - base["best_average"])
                if layers:
                    r["finetune"] = {k: prep.finetune[k] for k in ("layers", "best_val_loss", "best_epoch", "epochs",
                                                                   "train_seconds", "hidden_state_seconds")}
                out["baselines"][str(seed)] = {k: float(base[k].mean()) for k in ("per_benchmark_best", "best_average")}
                runs.append({"seed": seed, **r})
                print(f"{setting} {kind} seed {seed}: acc {r['test_accuracy']:.4f} router {r['router_accuracy']:.4f}",
                      flush=True)
                row[kind] = {"runs": runs, **{f"{k}_mean": float(np.mean([x[k] for x in runs]))
                                              for k in ("test_accuracy", "auc", "log_loss", "router_accuracy",
                                                        "train_seconds_per_1000_questions")},
                             "test_accuracy_std": float(np.std([x["test_accuracy"] for x in runs]))}
                out["baselines_mean"] = {k: float(np.mean([b[k] for b in out["baselines"].values()]))
                                         for k in ("per_benchmark_best", "best_average")}
                write_json(args.out, out, quiet=True)
    write_json(args.out, out)


if __name__ == "__main__":
    main()
