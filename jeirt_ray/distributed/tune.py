"""Ray Tune sweeps: `jeirt tune tune_configs/<name>.yaml`.

The YAML grammar (validated by `SweepConfig`; unknown keys are errors):

    name: smoke                 # names the sweep's MLflow run and its folder
    data: null                  # dataset folder; null: the embedded SYNTHETIC dataset
    encoder: hashing            # as `--encoder` elsewhere
    finetune: null              # top-K or all: fine-tune the encoder end to end first (as `jeirt
    encoder_lr: 3.0e-5          #   train --finetune`), then sweep the heads on its embeddings
    split_seed: 0               # the split by question (80/10/10)
    workers: 1                  # Ray Train workers per trial (each trial is one TorchTrainer)
    gpus: false                 # one GPU per worker
    max_concurrent: 2           # trials at once
    num_samples: 1              # samples of the random domains (grids multiply them)
    base: {kind: jeirt, max_epochs: 30}   # TrainConfig fields every trial shares
    search:                     # TrainConfig fields to vary, each with ONE domain:
      dim: {grid: [8, 16, 32]}          #   grid: every value, in every sample
      hidden: {choice: [64, 128]}       #   choice: one value per sample
      lr: {loguniform: [1.0e-4, 1.0e-2]} #   loguniform / uniform: [low, high]; randint: [low, high)
    scheduler: {type: asha, grace_period: 5, reduction_factor: 2}   # or {type: fifo}
    register: smoke-best        # register the best trial's space under this name (optional)
    plot: dim                   # plot test accuracy against this searched field (optional)

Each trial is a Ray Train run (`ray_fit`) whose epochs reach Tune through TuneReportCallback (the
Train V2 way); ASHA stops poor trials on validation loss, by epoch. Every trial is an MLflow run
nested under the sweep's run; the best completed trial (lowest validation loss) is registered.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..model.train import TrainConfig
from ..selection import Domain


class Scheduler(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["asha", "fifo"] = "asha"
    grace_period: int = Field(5, ge=1, description="epochs every trial runs before it can be stopped")
    reduction_factor: float = Field(2, gt=1)


class SweepConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    data: str | None = None
    encoder: str = "all-MiniLM-L6-v2"
    finetune: str | None = Field(None, pattern=r"^(top-[1-9][0-9]*|all)$")
    encoder_lr: float = Field(3e-5, gt=0)
    split_seed: int = 0
    workers: int = Field(1, ge=1)
    gpus: bool = False
    max_concurrent: int = Field(2, ge=1)
    num_samples: int = Field(1, ge=1)
    base: dict[str, Any] = Field(default_factory=dict)
    search: dict[str, Domain]
    scheduler: Scheduler = Field(default_factory=Scheduler)
    register_as: str | None = Field(None, alias="register")  # `register` would shadow BaseModel's
    plot: str | None = None

    @model_validator(mode="after")
    def fields_exist(self):
        fields = set(TrainConfig.model_fields)
        for where, keys in (("base", self.base), ("search", self.search)):
            unknown = sorted(set(keys) - fields)
            if unknown:
                raise ValueError(f"{where}: unknown TrainConfig field(s) {unknown}; known: {sorted(fields)}")
        both = sorted(set(self.base) & set(self.search))
        if both:
            raise ValueError(f"{both} given in both base and search")
        TrainConfig(**self.base)  # fixed values valid on their own
        if self.plot is not None and self.plot not in self.search:
            raise ValueError(f"plot: {self.plot!r} is not a searched field ({sorted(self.search)})")
        return self

    @property
    def trials(self) -> int:
        """Tune's trial count: num_samples times every grid's size."""
        return self.num_samples * int(np.prod([len(d.grid) for d in self.search.values() if d.grid is not None]))

    @classmethod
    def from_yaml(cls, path: str | Path) -> "SweepConfig":
        path = Path(path)
        try:
            raw = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as e:
            raise ValueError(f"{path}: cannot read the sweep config: {e}") from e
        try:
            return cls(**(raw or {}))
        except ValidationError as e:
            raise ValueError(f"{path}: invalid sweep config:\n{e}") from e


def _trial(params: dict, *, X, n_models, train, val, test, test_rows, sweep: dict, storage: str, mlflow_cfg: dict,
           encoder_id: str, model_names: list[str]) -> None:
    """One trial: a Ray Train run of the core trainer, reported to Tune epoch by epoch."""
    from mlflow import MlflowClient
    from ray import tune
    from ray.tune.integration.ray_train import TuneReportCallback

    from ..experiment import pair_probs
    from ..model.metrics import binary_metrics
    from ..model.space import Space
    from ..model.train import Pairs
    from .train import ray_fit

    trial_id = tune.get_context().get_trial_id()
    config = TrainConfig(**{**sweep["base"], **params})
    client = MlflowClient(mlflow_cfg["tracking_uri"])
    parent = client.get_run(mlflow_cfg["parent_run_id"])
    run_id = client.create_run(parent.info.experiment_id, run_name=f"trial-{trial_id}",
                               tags={"mlflow.parentRunId": parent.info.run_id}).info.run_id
    for k, v in config.model_dump().items():
        client.log_param(run_id, k, v)
    result = ray_fit(X, n_models, train, val, config, workers=sweep["workers"], use_gpu=sweep["gpus"],
                     storage=storage, name=f"trial-{trial_id}", progress=False,
                     mlflow={"tracking_uri": mlflow_cfg["tracking_uri"], "run_id": run_id},
                     callbacks=[TuneReportCallback()])
    space = Space([result.module], config, encoder_id, X.shape[1], model_names,
                  metadata={"tune_trial": trial_id, "best_val_loss": result.best_val_loss})
    space_dir = space.save(Path(storage) / "spaces" / trial_id)
    test_pairs = Pairs.from_numpy(*test)
    metrics = binary_metrics(pair_probs(space.predict_proba(X[test_rows]), test_rows, test_pairs),
                             test_pairs.y.numpy())
    final = {"best_val_loss": result.best_val_loss, "best_epoch": result.best_epoch,
             **{f"test_{k}" if not k.startswith("test_") else k: v for k, v in metrics.items()}}
    for k, v in final.items():
        client.log_metric(run_id, k, float(v))
    client.set_terminated(run_id)
    # one more report after the last epoch: what the driver ranks and plots
    tune.report({"epoch": result.epochs, "val_loss": result.best_val_loss, **final, "space_dir": str(space_dir),
                 "mlflow_run_id": run_id, "completed": True})


def run_sweep(sweep: SweepConfig, prep, *, storage: str | Path, tracking_uri: str, out: Path | None = None,
              progress: bool = True) -> dict:
    """Run the sweep on the current Ray cluster; returns a summary (trials, best, plot path)."""
    import mlflow
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    from ..registry import Registry
    from . import quiet_tune, trial_bar
    quiet_tune()

    reg = Registry(tracking_uri)
    parent_run_id = reg.new_run(f"sweep-{sweep.name}")
    mlflow.MlflowClient(tracking_uri).log_dict(parent_run_id, sweep.model_dump(mode="json", by_alias=True),
                                               "sweep.json")
    storage = Path(storage).resolve() / f"{sweep.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    train, val, test = prep.pairs("train"), prep.pairs("val"), prep.pairs("test")
    arrays = {"X": np.asarray(prep.X, dtype=np.float32), "n_models": prep.data.n_models,
              "train": train, "val": val, "test": (test.q.numpy(), test.m.numpy(), test.y.numpy()),
              "test_rows": prep.rows("test")}
    trainable = tune.with_parameters(
        _trial, **arrays, sweep={"base": sweep.base, "workers": sweep.workers, "gpus": sweep.gpus},
        storage=str(storage), mlflow_cfg={"tracking_uri": tracking_uri, "parent_run_id": parent_run_id},
        encoder_id=prep.encoder_id, model_names=prep.data.models.tolist())
    max_epochs = TrainConfig(**sweep.base).max_epochs
    scheduler = (ASHAScheduler(time_attr="epoch", max_t=max_epochs, grace_period=sweep.scheduler.grace_period,
                               reduction_factor=sweep.scheduler.reduction_factor)
                 if sweep.scheduler.type == "asha" else FIFOScheduler())
    tuner = tune.Tuner(
        # the trial itself only waits on its TorchTrainer, whose workers hold the CPUs/GPUs
        tune.with_resources(trainable, {"cpu": 0.01}),
        param_space={k: d.to_tune() for k, d in sweep.search.items()},
        tune_config=tune.TuneConfig(metric="val_loss", mode="min", scheduler=scheduler,
                                    num_samples=sweep.num_samples, max_concurrent_trials=sweep.max_concurrent),
        run_config=tune.RunConfig(name="tune", storage_path=str(storage), verbose=0, progress_reporter=None,
                                  callbacks=[trial_bar(sweep.trials, f"sweep {sweep.name}", progress)]))
    grid = tuner.fit()
    trials = []
    for r in grid:
        m = r.metrics or {}
        trials.append({"params": {k: r.config[k] for k in sweep.search}, "completed": bool(m.get("completed")),
                       "epochs": m.get("epoch"), "val_loss": m.get("val_loss"),
                       "test_accuracy": m.get("test_accuracy"), "space_dir": m.get("space_dir"),
                       "mlflow_run_id": m.get("mlflow_run_id"), "error": str(r.error) if r.error else None})
    done = [t for t in trials if t["completed"]]
    if not done:
        raise RuntimeError(f"no trial of sweep {sweep.name!r} completed: {[t['error'] for t in trials]}")
    best = min(done, key=lambda t: t["val_loss"])
    summary = {"name": sweep.name, "parent_run_id": parent_run_id, "storage": str(storage), "trials": trials,
               "best": best}
    client = mlflow.MlflowClient(tracking_uri)
    client.log_metric(parent_run_id, "best_val_loss", best["val_loss"])
    client.log_metric(parent_run_id, "best_test_accuracy", best["test_accuracy"])
    out = Path(out or storage)
    out.mkdir(parents=True, exist_ok=True)
    if sweep.plot:
        summary["plot"] = str(plot_sweep(done, sweep.plot, out / f"{sweep.name}.png", sweep.name))
        client.log_artifact(parent_run_id, summary["plot"])
    if sweep.register_as:
        import dataclasses

        from ..model.space import Space
        # trials save only weights; the registered space carries the questions as train_space's
        # do, so serving can onboard by question id and name a query's nearest benchmark
        space = dataclasses.replace(
            Space.load(best["space_dir"]), question_ids=prep.data.question_ids.tolist(),
            question_embeddings=prep.X, question_benchmarks=prep.data.benchmarks.tolist(),
            encoder_dir=prep.encoder_dir, question_texts=prep.data.texts.tolist())
        space.metadata["data_fingerprint"] = prep.data.fingerprint()
        if prep.finetune:
            space.metadata["finetune"] = prep.finetune
        summary["registered_version"] = reg.register(space, sweep.register_as, {
            "best_val_loss": best["val_loss"], "test_accuracy": best["test_accuracy"]}, run_id=best["mlflow_run_id"])
    (out / f"{sweep.name}.json").write_text(json.dumps(summary, indent=1, default=str))
    client.log_artifact(parent_run_id, str(out / f"{sweep.name}.json"))
    client.set_terminated(parent_run_id)
    return summary


def plot_sweep(trials: list[dict], field: str, path: Path, title: str) -> Path:
    """Test accuracy of completed trials against one searched field (best trial per value)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_value: dict = {}
    for t in trials:
        v = t["params"][field]
        if v not in by_value or t["val_loss"] < by_value[v]["val_loss"]:
            by_value[v] = t
    xs = sorted(by_value)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(xs, [by_value[x]["test_accuracy"] * 100 for x in xs], "o-")
    numeric = all(isinstance(x, (int, float)) for x in xs)
    if numeric and min(xs) > 0 and max(xs) / min(xs) >= 16:
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs])
    ax.set_xlabel(field)
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"{title}: test accuracy vs {field}")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path

