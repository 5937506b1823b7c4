"""Ray Train (V2 API): the core trainer `fit`, unchanged, under DDP on N workers.

Every worker gets the same arrays and takes a disjoint share of the questions of every batch
(QuestionBatcher with rank/world), so the observed pairs are sharded across workers while the
global batch stays the single-process one. Rank 0 reports a checkpoint every epoch (safetensors
+ JSON: weights, optimizer, shuffler and RNG state) and logs the epoch's metrics to MLflow; after
a worker dies, Ray restarts the group (FailureConfig) and every worker resumes from the latest
checkpoint. `num_workers=0` is Train's local mode: the same function in this process.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from ..model.modules import build_module
from ..model.token_states import TokenStates
from ..model.train import FitResult, Pairs, TrainConfig, TrainState, fit


def save_state(state: TrainState, directory: str | Path) -> None:
    tensors, meta = state.to_flat()
    save_file(tensors, str(Path(directory) / "state.safetensors"))
    (Path(directory) / "state.json").write_text(json.dumps(meta))


def load_state(directory: str | Path) -> TrainState:
    d = Path(directory)
    return TrainState.from_flat(load_file(str(d / "state.safetensors")), json.loads((d / "state.json").read_text()))


def _log_to_mlflow(mlflow_cfg: dict | None, row: dict, prefix: str) -> None:
    if not mlflow_cfg:
        return
    from ..tracking.runs import Tracker
    Tracker(mlflow_cfg["tracking_uri"]).log(mlflow_cfg["run_id"], history=[row], prefix=prefix)


def train_loop(cfg: dict) -> None:
    """The per-worker training function (Ray Train calls it on every worker)."""
    import ray
    import ray.train
    import ray.train.torch

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    config = TrainConfig(**cfg["config"])
    # per-worker batch: the global batch (all workers' shares) stays the single-process one
    config = config.model_copy(update={"question_batch": math.ceil(config.question_batch / world)})
    resume = None
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as d:
            resume = load_state(d)
    device = ray.train.torch.get_device() if cfg["use_gpu"] else "cpu"

    last_report = [time.perf_counter()]

    def due(last: bool) -> bool:
        """Report (and checkpoint) at the last epoch and at most every `report_every_s` seconds:
        Train V2 takes one report per health check (2 s), so reporting every fast epoch would
        stall training. Rank 0's clock decides, for every worker alike."""
        flag = torch.tensor([float(last or time.perf_counter() - last_report[0] >= cfg["report_every_s"])])
        if world > 1:
            torch.distributed.broadcast(flag, src=0)
        return bool(flag.item())

    def on_epoch(row: dict, snapshot, last: bool) -> None:
        if rank == 0:
            _log_to_mlflow(cfg.get("mlflow"), row, cfg.get("metric_prefix", ""))
        if not due(last):
            return
        last_report[0] = time.perf_counter()
        metrics = {**row, "resumed_from_epoch": -1 if resume is None else resume.epoch}
        if rank != 0:
            ray.train.report(metrics)
            return
        if cfg["local_dir"]:
            # local mode keeps a reference to the reported folder instead of copying it: keep
            # the newest one on disk, under the run's storage
            d = Path(cfg["local_dir"]) / f"checkpoint_{row['epoch']:05d}"
            d.mkdir(parents=True, exist_ok=True)
            save_state(snapshot(), d)
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(str(d)))
            for old in Path(cfg["local_dir"]).glob("checkpoint_*"):
                if old != d:
                    shutil.rmtree(old, ignore_errors=True)
            return
        with tempfile.TemporaryDirectory() as d:
            save_state(snapshot(), d)
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(d))

    data = ray.get(cfg["data"]) if isinstance(cfg["data"], ray.ObjectRef) else cfg["data"]
    fit(data["X"], cfg["n_models"], Pairs.from_numpy(*data["train"]), Pairs.from_numpy(*data["val"]), config,
        progress=cfg["progress"] and cfg["local_dir"] is not None,  # a bar only in local mode (a terminal)
        module=cfg["module"], on_epoch=on_epoch, resume=resume, rank=rank, world=world,
        wrap=ray.train.torch.prepare_model if world > 1 else None, device=device)


def ray_fit(X: np.ndarray | TokenStates, n_models: int, train: Pairs, val: Pairs, config: TrainConfig, *,
            workers: int = 2, use_gpu: bool = False, storage: str | Path, name: str, max_failures: int = 3,
            mlflow: dict | None = None, metric_prefix: str = "", report_every_s: float = 2.0,
            callbacks: list | None = None, progress: bool = True, module: torch.nn.Module | None = None) -> FitResult:
    """Run `fit` on a Ray Train TorchTrainer and return the best weights like `fit` does.

    `module`: an untrained module to train instead of the one `config` builds (e.g. an
    encoder top with its head, model/finetune.py, with X its TokenStates); every worker gets a copy.
    `mlflow` = {"tracking_uri", "run_id"}: rank 0 logs every epoch's metrics into that run.
    `callbacks`: Ray Train callbacks (Tune's TuneReportCallback when run as a trial).
    """
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    start = time.perf_counter()
    storage = Path(storage).resolve()
    if workers == 0:
        logging.getLogger("ray.train").setLevel(logging.WARNING)  # no "Reported metrics" line per epoch
    data = {"X": X if isinstance(X, TokenStates) else np.asarray(X, dtype=np.float32),
            "train": (train.q.numpy(), train.m.numpy(), train.y.numpy()),
            "val": (val.q.numpy(), val.m.numpy(), val.y.numpy())}
    if workers > 0:
        # one copy in the object store that every worker maps (a config holding the arrays would be
        # serialised again for the controller and for each worker)
        import ray
        data = ray.put(data)
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"data": data, "n_models": n_models, "module": module,
                           "config": config.model_dump(), "use_gpu": use_gpu, "mlflow": mlflow,
                           "metric_prefix": metric_prefix, "progress": progress, "report_every_s": report_every_s,
                           "local_dir": str(storage / name / "local") if workers == 0 else None},
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=use_gpu),
        run_config=RunConfig(name=name, storage_path=str(storage),
                             failure_config=FailureConfig(max_failures=max_failures),
                             checkpoint_config=CheckpointConfig(num_to_keep=2), callbacks=callbacks))
    result = trainer.fit()
    if result.checkpoint is None:
        raise RuntimeError(f"Ray Train run {name!r} finished without a checkpoint (error: {result.error})")
    with result.checkpoint.as_directory() as d:
        state = load_state(d)
    module = copy.deepcopy(module) if module is not None else \
        build_module(config.kind, X.shape[1], n_models, **config.model_dump(exclude={"kind"}))
    module.load_state_dict(state.best_model)
    return FitResult(module.eval(), state.best_val_loss, state.best_epoch, len(state.history),
                     time.perf_counter() - start, state.seconds_to_best, state.history,
                     notes={"ray_train_run": str(storage / name), "workers": workers,
                            "resumed_from_epoch": result.metrics.get("resumed_from_epoch", -1)})


class RayFitter:
    """A drop-in for `fit` (same call) that runs each call as its own Ray Train run, named
    `<prefix>-<kind>-seed<seed>-<n>`, so evaluation and the CLI can train on Ray unchanged."""

    def __init__(self, *, workers: int, storage: str | Path, prefix: str, use_gpu: bool = False,
                 mlflow: dict | None = None):
        self.workers, self.storage, self.prefix, self.use_gpu, self.mlflow = workers, storage, prefix, use_gpu, mlflow
        self.calls = 0

    def __call__(self, X, n_models, train, val, config: TrainConfig, progress: bool = True,
                 module: torch.nn.Module | None = None) -> FitResult:
        self.calls += 1
        name = f"{self.prefix}-{config.kind}{'-finetune' if module is not None else ''}-seed{config.seed}-{self.calls}"
        return ray_fit(X, n_models, train, val, config, workers=self.workers, use_gpu=self.use_gpu,
                       storage=self.storage, name=name, mlflow=self.mlflow, metric_prefix=f"fit{self.calls}.",
                       progress=progress, module=module)
