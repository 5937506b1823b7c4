"""Per-dataset selection on Ray Tune: random configurations from `selection.search_space`,
ASHA stopping the poor ones by epoch on validation loss, trials running concurrently (the CPUs
shared out), and the best completed trials on the validation criterion kept as one ensemble.

Each trial is the core trainer `fit` in the Tune trial's process (a TorchTrainer per trial
would cost more than these small models take to train); it reports its best validation loss
at ASHA's rungs, saves its best weights (safetensors) with its validation loss, accuracy and
AUC, and is one MLflow run nested under the search's run. Nothing reads the test split.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from ..model.modules import build_module
from ..model.metrics import binary_metrics
from ..model.train import Pairs, TrainConfig, fit, pair_logits
from . import quiet_tune, trial_bar
from ..selection import Domain, SearchSettings, base_config, default_trials, ensemble_members, search_space


def rungs(settings: SearchSettings) -> list[int]:
    """The epochs at which ASHA compares trials: grace_period * reduction_factor^k < max_epochs."""
    out, t = [], float(settings.grace_period)
    while t < settings.max_epochs:
        out.append(int(round(t)))
        t *= settings.reduction_factor
    return out


def val_metrics(module: torch.nn.Module, X, val: Pairs) -> dict[str, float]:
    """Validation loss, accuracy and AUC of a trained module: what trials are ranked by."""
    p = torch.sigmoid(pair_logits(module, torch.as_tensor(X), val)).numpy()
    m = binary_metrics(p, val.y.numpy())
    return {"val_loss": m["log_loss"], "val_accuracy": m["test_accuracy"], "val_auc": m["auc"]}


def _trial(params: dict, *, X, n_models, train, val, base: dict, report_at: list[int],
           threads: int, storage: str, mlflow_cfg: dict | None, device: str = "cpu") -> None:
    from ray import tune

    torch.set_num_threads(threads)  # trials run side by side on their share of the CPUs
    trial_id = tune.get_context().get_trial_id()
    config = TrainConfig(**{**base, **params})
    val_pairs = Pairs.from_numpy(*val)
    best_loss = [float("inf")]

    def on_epoch(row: dict, snapshot, last: bool) -> None:
        # ASHA compares trials on their best validation loss so far, only at its rungs: a report
        # costs a round trip to the driver, longer than a small epoch
        best_loss[0] = min(best_loss[0], row["val_loss"])
        if row["epoch"] + 1 in report_at:
            tune.report({"epoch": row["epoch"] + 1, "val_loss": best_loss[0]})

    result = fit(X, n_models, Pairs.from_numpy(*train), val_pairs, config, progress=False, on_epoch=on_epoch,
                 device=device)
    result.module.cpu()
    best = val_metrics(result.module, X, val_pairs)  # the kept (best-loss) weights, every criterion
    out = Path(storage) / "trials" / trial_id
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in result.module.state_dict().items()}, str(out / "weights.safetensors"))
    record = {"trial_id": trial_id, "config": config.model_dump(), "best": best, "epochs": result.epochs,
              "seconds": result.seconds, "dir": str(out), "completed": True}
    (out / "trial.json").write_text(json.dumps(record))
    if mlflow_cfg:
        _log_trial(mlflow_cfg, trial_id, config, result.history, best)
    tune.report({"epoch": result.epochs, "val_loss": best["val_loss"], "completed": True, "trial_dir": str(out)})


def load_trial(trial: dict, in_dim: int, n_models: int) -> torch.nn.Module:
    """The saved best weights of a completed trial."""
    cfg = TrainConfig(**trial["config"])
    mod = build_module(cfg.kind, in_dim, n_models, **cfg.model_dump(exclude={"kind"}))
    mod.load_state_dict(load_file(str(Path(trial["dir"]) / "weights.safetensors")))
    return mod.eval()


def _log_trial(mlflow_cfg: dict, trial_id: str, config: TrainConfig, history: list[dict], best: dict) -> None:
    """One MLflow run per finished trial, nested under the search's run, in one batch."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric, Param

    client = MlflowClient(mlflow_cfg["tracking_uri"])
    run_id = client.create_run(mlflow_cfg["experiment_id"], run_name=f"trial-{trial_id}",
                               tags={"mlflow.parentRunId": mlflow_cfg["parent_run_id"]}).info.run_id
    now = int(time.time() * 1000)
    metrics = [Metric(k, float(v), now, row["epoch"]) for row in history for k, v in row.items() if k != "epoch"]
    metrics += [Metric(f"best_{k}", float(v), now, 0) for k, v in best.items()]
    params = [Param(k, str(v)) for k, v in config.model_dump().items()]
    for i in range(0, len(metrics), 900):  # MLflow takes at most 1000 entities a batch
        client.log_batch(run_id, metrics=metrics[i:i + 900], params=params if i == 0 else [])
    client.set_terminated(run_id)


def run_search(prep, kind: str, settings: SearchSettings, *, storage: str | Path,
               tracking_uri: str | None = None, space: dict[str, Domain] | None = None,
               progress: bool = True) -> dict:
    """Search `kind`'s configuration on prep's validation split on the current Ray cluster;
    returns {"members": [modules, best first], "configs", "trials" (every one), "settings",
    "seconds", "storage", "mlflow_run_id"}. `space` replaces the default domains
    (selection.search_space). With `tracking_uri`, the search is an MLflow run and every
    finished trial a run nested under it."""
    quiet_tune()
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search import BasicVariantGenerator

    train, val = prep.pairs("train"), prep.pairs("val")
    n_train_q = int(np.unique(train.q.numpy()).size)
    trials = settings.trials or default_trials(len(train))
    space = space or search_space(kind, prep.X.shape[1], n_train_q)
    storage = Path(storage).resolve() / f"{prep.data.name}-{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 10**6}"
    mlflow_cfg = None
    if tracking_uri:
        from ..registry import Registry
        reg = Registry(tracking_uri)
        parent_run_id = reg.new_run(f"search-{prep.data.name}-{kind}")
        mlflow_cfg = {"tracking_uri": tracking_uri, "parent_run_id": parent_run_id,
                      "experiment_id": reg.client.get_run(parent_run_id).info.experiment_id}
        reg.client.log_dict(parent_run_id, {"settings": settings.model_dump(), "trials": trials,
                                            "space": {k: d.model_dump(exclude_none=True) for k, d in space.items()}},
                            "search.json")
    cpus = max(1.0, ray.cluster_resources().get("CPU", 1.0))
    concurrent = settings.concurrent or int(cpus)
    trainable = tune.with_parameters(
        _trial, X=np.asarray(prep.X, dtype=np.float32), n_models=prep.data.n_models,
        train=(train.q.numpy(), train.m.numpy(), train.y.numpy()), val=(val.q.numpy(), val.m.numpy(), val.y.numpy()),
        base=base_config(kind, settings), report_at=rungs(settings), threads=max(1, int(cpus // concurrent)),
        device="cuda" if settings.gpus_per_trial else "cpu", storage=str(storage), mlflow_cfg=mlflow_cfg)
    scheduler = ASHAScheduler(time_attr="epoch", max_t=settings.max_epochs, grace_period=settings.grace_period,
                              reduction_factor=settings.reduction_factor)
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": cpus / concurrent, "gpu": settings.gpus_per_trial}),
        param_space={k: d.to_tune() for k, d in space.items()},
        tune_config=tune.TuneConfig(metric="val_loss", mode="min", scheduler=scheduler, num_samples=trials,
                                    search_alg=BasicVariantGenerator(random_state=settings.seed),
                                    reuse_actors=True),
        run_config=tune.RunConfig(name="search", storage_path=str(storage), verbose=0, progress_reporter=None,
                                  callbacks=[trial_bar(trials, f"searching {kind}", progress)]))
    start = time.perf_counter()
    grid = tuner.fit()
    # finished trials wrote their record before their last report; the others ASHA stopped
    records = [json.loads(p.read_text()) for p in sorted((storage / "trials").glob("*/trial.json"))]
    finished = {t["trial_id"] for t in records}
    errors = [str(r.error) for r in grid if r.error]
    records += [{"trial_id": r.metrics.get("trial_id"), "completed": False, "epochs": r.metrics.get("epoch"),
                 "val_loss": r.metrics.get("val_loss"), "error": str(r.error) if r.error else None,
                 "config": {**base_config(kind, settings), **{k: r.config[k] for k in space}}}
                for r in grid if (r.metrics or {}).get("trial_id") not in finished]
    chosen = ensemble_members(records, settings)
    if not chosen:
        if mlflow_cfg:
            reg.client.set_terminated(mlflow_cfg["parent_run_id"], status="FAILED")
        raise RuntimeError(f"no {kind} trial completed in the search ({trials} trials); errors: {errors[:3]}")
    members = [load_trial(t, prep.X.shape[1], prep.data.n_models) for t in chosen]
    seconds = time.perf_counter() - start
    if mlflow_cfg:
        client = reg.client
        for k, v in chosen[0]["best"].items():
            client.log_metric(mlflow_cfg["parent_run_id"], f"best_{k}", float(v))
        client.log_metric(mlflow_cfg["parent_run_id"], "seconds", seconds)
        client.set_terminated(mlflow_cfg["parent_run_id"])
    if progress:
        done = sum(t["completed"] for t in records)
        print(f"{kind}: searched {trials} configurations in {seconds:.0f} s ({done} ran to the end, "
              f"{trials - done - len(errors)} stopped early by ASHA, {len(errors)} failed); ensemble of the "
              f"best {len(members)} on {settings.criterion}", flush=True)
    return {"members": members, "configs": [TrainConfig(**t["config"]) for t in chosen], "trials": records,
            "settings": settings.model_dump() | {"trials": trials}, "seconds": seconds, "storage": str(storage),
            "mlflow_run_id": mlflow_cfg and mlflow_cfg["parent_run_id"]}
