"""YAML sweeps: `jeirt tune tune_configs/<name>.yaml`.

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

The trials run on the one Ray Tune driver (distributed/tune.py), each a Ray Train run with
`workers` workers whose epochs reach Tune through TuneReportCallback (the Train V2 way); ASHA
stops poor trials on validation loss, by epoch. Every trial is an MLflow run nested under the
sweep's run; the best completed trial (lowest validation loss) is registered, and every completed
trial's test accuracy is computed afterwards, from its saved weights, for the plot.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..model.train import TrainConfig
from ..experiments.selection import Domain


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


def run_sweep(sweep: SweepConfig, prep, *, storage: str | Path, tracking_uri: str, out: Path | None = None,
              progress: bool = True) -> dict:
    """Run the sweep on the current Ray cluster through the one Tune driver (tune.run_search);
    returns a summary (trials with their test accuracy, the best by validation loss, the plot
    path, the registered version)."""
    from ..experiments.methods import space_of
    from ..experiments.prepare import pair_probs
    from ..model.metrics import binary_metrics
    from ..tracking.registry import SpaceRegistry
    from ..experiments.selection import SearchSettings
    from .tune import load_trial, run_search

    base = TrainConfig(**sweep.base)
    settings = SearchSettings(trials=sweep.num_samples, max_epochs=base.max_epochs, patience=base.patience,
                              grace_period=sweep.scheduler.grace_period,
                              reduction_factor=sweep.scheduler.reduction_factor, scheduler=sweep.scheduler.type,
                              concurrent=sweep.max_concurrent, members=1)
    res = run_search(prep, base.kind, settings, storage=Path(storage) / sweep.name, tracking_uri=tracking_uri,
                     space=sweep.search, base=sweep.base, workers=sweep.workers, gpus=sweep.gpus,
                     run_name=f"sweep-{sweep.name}", progress=progress)
    parent_run_id = res["mlflow_run_id"]
    tracker = SpaceRegistry(tracking_uri)
    tracker.log_dict(parent_run_id, sweep.model_dump(mode="json", by_alias=True), "sweep.json")
    # test accuracy of every completed trial, from its saved weights: the sweep's plot is a study
    # of the test split; trials themselves never read it
    test, rows = prep.pairs("test"), prep.rows("test")
    trials = []
    for t in res["trials"]:
        row = {"params": {k: t["config"][k] for k in sweep.search}, "completed": bool(t.get("completed")),
               "epochs": t.get("epochs"), "val_loss": t["best"]["val_loss"] if t.get("completed") else t.get("val_loss"),
               "test_accuracy": None, "mlflow_run_id": t.get("mlflow_run_id"), "error": t.get("error"), "trial": t}
        if row["completed"]:
            module = load_trial(t, prep.X.shape[1], prep.data.n_models)
            probs = space_of(prep, [module], [TrainConfig(**t["config"])], {}).predict_proba(prep.X[rows])
            row["test_accuracy"] = binary_metrics(pair_probs(probs, rows, test), test.y.numpy())["test_accuracy"]
        trials.append(row)
    done = [t for t in trials if t["completed"]]
    if not done:
        from .tune import SearchFailed
        raise SearchFailed(f"sweep {sweep.name!r}: none of its {len(trials)} trials completed; see {res['storage']}")
    best = min(done, key=lambda t: t["val_loss"])
    summary = {"name": sweep.name, "parent_run_id": parent_run_id, "storage": res["storage"],
               "trials": [{k: v for k, v in t.items() if k != "trial"} for t in trials],
               "best": {k: v for k, v in best.items() if k != "trial"}}
    tracker.log(parent_run_id, {"best_test_accuracy": best["test_accuracy"]})
    out = Path(out or res["storage"])
    out.mkdir(parents=True, exist_ok=True)
    if sweep.plot:
        summary["plot"] = str(plot_sweep(done, sweep.plot, out / f"{sweep.name}.png", sweep.name))
        tracker.log_artifacts(parent_run_id, summary["plot"])
    if sweep.register_as:
        trial = best["trial"]
        space = space_of(prep, [load_trial(trial, prep.X.shape[1], prep.data.n_models)], [TrainConfig(**trial["config"])],
                         {"recipe": "sweep", "tune_trial": trial["trial_id"],
                          "members": [{"best_val_loss": best["val_loss"], **trial["best"], "epochs": trial["epochs"]}]})
        summary["registered_version"] = tracker.register(space, sweep.register_as, {
            "best_val_loss": best["val_loss"], "test_accuracy": best["test_accuracy"]}, run_id=best["mlflow_run_id"])
    (out / f"{sweep.name}.json").write_text(json.dumps(summary, indent=1, default=str))
    tracker.log_artifacts(parent_run_id, out / f"{sweep.name}.json")
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

