"""Ray Train: local mode and 2 workers under DDP (one cluster per module)."""

import pytest

from jeirt_ray.encoders import HashingEncoder
from jeirt_ray.experiments.prepare import prepare
from jeirt_ray.model.train import TrainConfig, fit

import ray

CFG = TrainConfig(kind="jeirt", dim=16, lr=3e-3, max_epochs=14, patience=100)


@pytest.fixture(scope="module")
def prep(synthetic):
    return prepare(synthetic, HashingEncoder(128), progress=False)


def _args(prep):
    return prep.X, prep.data.n_models, prep.pairs("train"), prep.pairs("val"), CFG


def test_local_mode_is_the_single_process_run(ray_cluster, prep, tmp_path):
    from jeirt_ray.distributed.train import ray_fit
    plain = fit(*_args(prep), progress=False)
    local = ray_fit(*_args(prep), workers=0, storage=tmp_path, name="local", progress=False)
    assert local.best_val_loss == pytest.approx(plain.best_val_loss, abs=1e-6)
    assert local.epochs == plain.epochs == CFG.max_epochs


def test_two_workers_learn_like_one_process(ray_cluster, prep, tmp_path):
    """DDP on 2 workers ends where one process ends. (A worker lost mid-run, with its node, and
    the group resuming from its checkpoint: tests/test_cluster.py.)"""
    from jeirt_ray.distributed.train import ray_fit
    plain = fit(*_args(prep), progress=False)
    whole = ray_fit(*_args(prep), workers=2, storage=tmp_path, name="whole", progress=False, report_every_s=0)
    assert whole.best_val_loss == pytest.approx(plain.best_val_loss, abs=0.01)
    assert whole.notes["resumed_from_epoch"] == -1
    assert whole.epochs == CFG.max_epochs
