"""The one Ray Tune driver: the per-dataset search (`jeirt train`, `jeirt evaluate`) and the
YAML sweeps (`jeirt tune`, distributed/sweep.py) both run their trials here.

Configurations come from domains (`selection.search_space` by default: random ones; a sweep's
own, grids included); ASHA stops the poor ones by epoch on validation loss (or FIFO runs them
all); trials run concurrently; the completed trials are ranked on the validation criterion.

A trial is the core trainer `fit` in the Tune trial's process (the search: a TorchTrainer per
trial would cost more than these small models take to train), or, with `workers`, a Ray Train
run of it (a sweep's `workers:`), whose epochs reach Tune through TuneReportCallback. Either
way it saves its best weights (safetensors) with its validation loss, accuracy and AUC, and is
one MLflow run nested under the search's run. Nothing here reads the test split.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from ..model.metrics import binary_metrics
from ..model.modules import build_module
from ..model.train import FitResult, Pairs, TrainConfig, fit, pair_logits
from ..experiments.selection import Domain, SearchSettings, base_config, default_trials, ensemble_members, search_space
from . import quiet_tune, trial_bar


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


def _fit_in_trial(X, n_models, train: Pairs, val: Pairs, config: TrainConfig, report_at: list[int],
                  device: str) -> FitResult:
    """The core `fit` in this process, reporting its best validation loss so far at ASHA's rungs
    only: a report costs a round trip to the driver, longer than a small epoch."""
    from ray import tune
    best_loss = [float("inf")]

    def on_epoch(row: dict, snapshot, last: bool) -> None:
        best_loss[0] = min(best_loss[0], row["val_loss"])
        if row["epoch"] + 1 in report_at:
            tune.report({"epoch": row["epoch"] + 1, "val_loss": best_loss[0]})

    return fit(X, n_models, train, val, config, progress=False, on_epoch=on_epoch, device=device)


def _fit_on_ray_train(X, n_models, train: Pairs, val: Pairs, config: TrainConfig, trial_id: str, workers: int,
                      gpus: bool, storage: str, mlflow_cfg: dict | None, run_id: str | None) -> FitResult:
    """A Ray Train run of `fit` (rank 0 logs its epochs into the trial's MLflow run), its epochs
    reported to Tune as they come."""
    from ray.tune.integration.ray_train import TuneReportCallback

    from .train import ray_fit
    mlflow = {"tracking_uri": mlflow_cfg["tracking_uri"], "run_id": run_id} if mlflow_cfg else None
    return ray_fit(X, n_models, train, val, config, workers=workers, use_gpu=gpus, storage=storage,
                   name=f"trial-{trial_id}", progress=False, mlflow=mlflow, callbacks=[TuneReportCallback()])


def _trial(params: dict, *, X, n_models, train, val, base: dict, report_at: list[int], threads: int, storage: str,
           mlflow_cfg: dict | None, device: str = "cpu", workers: int | None = None, gpus: bool = False) -> None:
    from ray import tune

    torch.set_num_threads(threads)  # trials run side by side on their share of the CPUs
    trial_id = tune.get_context().get_trial_id()
    config = TrainConfig(**{**base, **params})
    train_pairs, val_pairs = Pairs.from_numpy(*train), Pairs.from_numpy(*val)
    tracker = run_id = None
    if mlflow_cfg:
        from ..tracking.runs import Tracker
        tracker = Tracker(mlflow_cfg["tracking_uri"])
        if workers is not None:  # Ray Train's rank 0 logs the epochs into it as they come
            run_id = tracker.new_run(f"trial-{trial_id}", mlflow_cfg["parent_run_id"])
    if workers is None:
        result = _fit_in_trial(X, n_models, train_pairs, val_pairs, config, report_at, device)
    else:
        result = _fit_on_ray_train(X, n_models, train_pairs, val_pairs, config, trial_id, workers, gpus, storage,
                                   mlflow_cfg, run_id)
    result.module.cpu()
    best = val_metrics(result.module, X, val_pairs)  # the kept (best-loss) weights, every criterion
    out = Path(storage) / "trials" / trial_id
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in result.module.state_dict().items()}, str(out / "weights.safetensors"))
    record = {"trial_id": trial_id, "config": config.model_dump(), "best": best, "epochs": result.epochs,
              "seconds": result.seconds, "dir": str(out), "completed": True}
    if tracker is not None:
        if run_id is None:  # the in-process path: one run per finished trial, its epochs in one batch
            run_id = tracker.new_run(f"trial-{trial_id}", mlflow_cfg["parent_run_id"])
        tracker.log(run_id, {f"best_{k}": v for k, v in best.items()}, config.model_dump(),
                    history=result.history if workers is None else None)
        tracker.end_run(run_id)
    record["mlflow_run_id"] = run_id
    (out / "trial.json").write_text(json.dumps(record))
    tune.report({"epoch": result.epochs, "val_loss": best["val_loss"], "completed": True, "trial_dir": str(out)})


def load_trial(trial: dict, in_dim: int, n_models: int) -> torch.nn.Module:
    """The saved best weights of a completed trial."""
    cfg = TrainConfig(**trial["config"])
    mod = build_module(cfg.kind, in_dim, n_models, **cfg.model_dump(exclude={"kind"}))
    mod.load_state_dict(load_file(str(Path(trial["dir"]) / "weights.safetensors")))
    return mod.eval()


class SearchFailed(LookupError):
    """No trial of a search completed (the CLI says so in one line)."""


def run_search(prep, kind: str, settings: SearchSettings, *, storage: str | Path,
               tracking_uri: str | None = None, space: dict[str, Domain] | None = None,
               base: dict | None = None, workers: int | None = None, gpus: bool = False,
               run_name: str | None = None, progress: bool = True) -> dict:
    """Search `kind`'s configuration on prep's validation split on the current Ray cluster;
    returns {"members": [modules, best first], "configs", "trials" (every one), "settings",
    "seconds", "storage", "mlflow_run_id"}. `space` replaces the default domains
    (selection.search_space; grids multiply `settings.trials` samples, as in Tune), `base` adds
    TrainConfig fields every trial shares, `workers` makes each trial a Ray Train run with that
    many workers (`gpus`: one GPU each). With `tracking_uri`, the search is an MLflow run
    (`run_name`) and every finished trial a run nested under it."""
    quiet_tune()
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
    from ray.tune.search import BasicVariantGenerator

    train, val = prep.pairs("train"), prep.pairs("val")
    n_train_q = int(np.unique(train.q.numpy()).size)
    samples = settings.trials or default_trials(len(train))
    space = space or search_space(kind, prep.X.shape[1], n_train_q)
    trials = samples * int(np.prod([len(d.grid) for d in space.values() if d.grid is not None]))
    base = {**base_config(kind, settings), **(base or {})}
    storage = Path(storage).resolve() / f"{prep.data.name}-{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 10**6}"
    mlflow_cfg = None
    if tracking_uri:
        from ..tracking.runs import Tracker
        tracker = Tracker(tracking_uri)
        parent_run_id = tracker.new_run(run_name or f"search-{prep.data.name}-{kind}")
        mlflow_cfg = {"tracking_uri": tracking_uri, "parent_run_id": parent_run_id}
        tracker.log_dict(parent_run_id, {"settings": settings.model_dump(), "trials": trials,
                                         "space": {k: d.model_dump(exclude_none=True) for k, d in space.items()}},
                         "search.json")
    cpus = max(1.0, ray.cluster_resources().get("CPU", 1.0))
    concurrent = settings.concurrent or int(cpus)
    trainable = tune.with_parameters(
        _trial, X=np.asarray(prep.X, dtype=np.float32), n_models=prep.data.n_models,
        train=(train.q.numpy(), train.m.numpy(), train.y.numpy()), val=(val.q.numpy(), val.m.numpy(), val.y.numpy()),
        base=base, report_at=rungs(settings), threads=max(1, int(cpus // concurrent)),
        device="cuda" if settings.gpus_per_trial else "cpu", storage=str(storage), mlflow_cfg=mlflow_cfg,
        workers=workers, gpus=gpus)
    scheduler = (ASHAScheduler(time_attr="epoch", max_t=settings.max_epochs, grace_period=settings.grace_period,
                               reduction_factor=settings.reduction_factor)
                 if settings.scheduler == "asha" else FIFOScheduler())
    # a Ray Train trial only waits on its TorchTrainer, whose workers hold the CPUs and GPUs
    resources = {"cpu": cpus / concurrent, "gpu": settings.gpus_per_trial} if workers is None else {"cpu": 0.01}
    tuner = tune.Tuner(
        tune.with_resources(trainable, resources),
        param_space={k: d.to_tune() for k, d in space.items()},
        tune_config=tune.TuneConfig(metric="val_loss", mode="min", scheduler=scheduler, num_samples=samples,
                                    search_alg=BasicVariantGenerator(max_concurrent=concurrent,
                                                                     random_state=settings.seed),
                                    reuse_actors=workers is None),
        # a trial whose node is lost (or whose worker dies) runs again, up to twice
        run_config=tune.RunConfig(name="search", storage_path=str(storage), verbose=0, progress_reporter=None,
                                  failure_config=tune.FailureConfig(max_failures=2),
                                  callbacks=[trial_bar(trials, f"searching {kind}", progress)]))
    start = time.perf_counter()
    grid = tuner.fit()
    # finished trials wrote their record before their last report; the others ASHA stopped
    records = [json.loads(p.read_text()) for p in sorted((storage / "trials").glob("*/trial.json"))]
    finished = {t["trial_id"] for t in records}
    errors = [str(r.error) for r in grid if r.error]
    records += [{"trial_id": r.metrics.get("trial_id"), "completed": False, "epochs": r.metrics.get("epoch"),
                 "val_loss": r.metrics.get("val_loss"), "error": str(r.error) if r.error else None,
                 "config": {**base, **{k: r.config[k] for k in space}}}
                for r in grid if (r.metrics or {}).get("trial_id") not in finished]
    chosen = ensemble_members(records, settings)
    if not chosen:
        if mlflow_cfg:
            tracker.end_run(mlflow_cfg["parent_run_id"], failed=True)
        raise SearchFailed(f"no {kind} trial completed in the search ({trials} trials); the first errors: "
                           f"{errors[:3]}; the trials' logs are under {storage}")
    members = [load_trial(t, prep.X.shape[1], prep.data.n_models) for t in chosen]
    seconds = time.perf_counter() - start
    if mlflow_cfg:
        tracker.log(mlflow_cfg["parent_run_id"], {**{f"best_{k}": v for k, v in chosen[0]["best"].items()},
                                                  "seconds": seconds})
        tracker.end_run(mlflow_cfg["parent_run_id"])
    if progress:
        done = sum(t["completed"] for t in records)
        print(f"{kind}: searched {trials} configurations in {seconds:.0f} s ({done} ran to the end, "
              f"{trials - done - len(errors)} stopped early by ASHA, {len(errors)} failed); ensemble of the "
              f"best {len(members)} on {settings.criterion}", flush=True)
    return {"members": members, "configs": [TrainConfig(**t["config"]) for t in chosen], "trials": records,
            "settings": settings.model_dump() | {"trials": trials}, "seconds": seconds, "storage": str(storage),
            "mlflow_run_id": mlflow_cfg and mlflow_cfg["parent_run_id"]}
