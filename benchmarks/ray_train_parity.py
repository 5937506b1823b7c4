"""Ray Train against the single-process trainer: the same JE-IRT recipe and seed, trained three
ways on the same split, compared on test accuracy, AUC, log-loss and time.

    python benchmarks/ray_train_parity.py [--data DIR] --out results/ray_train_parity.json

Ways: `single` (the core `fit` in this process), `ray_workers_0` (Ray Train's local mode) and
`ray_workers_2` (TorchTrainer, 2 DDP workers on gloo, each taking half of every batch). The
target: both Ray runs within 0.5 accuracy points of the single-process run.
"""

from __future__ import annotations

import tempfile

from _common import dataset_path, parser, write_json
from jeirt_ray.core import paths
from jeirt_ray.data import load_data
from jeirt_ray.distributed import init_ray
from jeirt_ray.distributed.train import ray_fit
from jeirt_ray.encoders import make_encoder
from jeirt_ray.experiments.selection import fixed_config
from jeirt_ray.experiments.prepare import pair_probs, prepare
from jeirt_ray.model.metrics import binary_metrics
from jeirt_ray.model.space import CoreSpace
from jeirt_ray.model.train import fit


def main():
    ap = parser(__doc__)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    prep = prepare(load_data(dataset_path(args.data, "mmlu_pro")), make_encoder(args.encoder), seed=args.split_seed,
                   cache_root=paths.cache_dir())
    config = fixed_config("jeirt").model_copy(update={"seed": args.seed})
    data = (prep.X, prep.data.n_models, prep.pairs("train"), prep.pairs("val"), config)
    test, rows = prep.pairs("test"), prep.rows("test")
    init_ray(num_cpus=2)
    results = {}
    with tempfile.TemporaryDirectory() as storage:
        runs = {"single": lambda: fit(*data, progress=False),
                "ray_workers_0": lambda: ray_fit(*data, workers=0, storage=storage, name="w0", progress=False),
                "ray_workers_2": lambda: ray_fit(*data, workers=2, storage=storage, name="w2", progress=False)}
        for name, run in runs.items():
            r = run()
            space = CoreSpace([r.module], config, prep.encoder_id, prep.X.shape[1], prep.data.models.tolist())
            metrics = binary_metrics(pair_probs(space.predict_proba(prep.X[rows]), rows, test), test.y.numpy())
            results[name] = {**metrics, "best_val_loss": r.best_val_loss, "epochs": r.epochs, "seconds": r.seconds}
            print(name, results[name], flush=True)
    gaps = {k: abs(results[k]["test_accuracy"] - results["single"]["test_accuracy"]) * 100
            for k in ("ray_workers_0", "ray_workers_2")}
    write_json(args.out, {"data": prep.data.name, "config": config.model_dump(),
                          "results": results, "accuracy_gap_points": gaps,
                          "within_half_point": all(g <= 0.5 for g in gaps.values())})


if __name__ == "__main__":
    main()
