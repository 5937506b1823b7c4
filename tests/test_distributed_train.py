"""Ray Train: local mode, 2 workers under DDP, and a worker killed mid-run (one cluster per module)."""

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from jeirt_ray.encoders import HashingEncoder
from jeirt_ray.experiment import prepare
from jeirt_ray.model.train import TrainConfig, fit

ray = pytest.importorskip("ray")

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


def _train_worker_pids() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().startswith(b"ray::RayTrainWorker"):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def test_two_workers_and_a_killed_worker_resumes(ray_cluster, prep, tmp_path):
    """DDP on 2 workers learns like one process; killing a worker mid-run makes Ray restart the
    group, which resumes from the latest checkpoint and ends where an uninterrupted run ends."""
    from jeirt_ray.distributed.train import ray_fit
    plain = fit(*_args(prep), progress=False)
    whole = ray_fit(*_args(prep), workers=2, storage=tmp_path, name="whole", progress=False, report_every_s=0)
    assert whole.best_val_loss == pytest.approx(plain.best_val_loss, abs=0.01)
    assert whole.notes["resumed_from_epoch"] == -1

    result, killed = {}, []
    run = threading.Thread(target=lambda: result.update(r=ray_fit(
        *_args(prep), workers=2, storage=tmp_path, name="killed", progress=False, report_every_s=0)))
    run.start()
    deadline = time.time() + 120
    while time.time() < deadline and not killed:
        # the controller has registered a checkpoint (its snapshot names one)
        snapshot = tmp_path / "killed" / "checkpoint_manager_snapshot.json"
        if snapshot.exists() and "checkpoint_" in snapshot.read_text() and (pids := _train_worker_pids()):
            os.kill(max(pids), signal.SIGKILL)
            killed.append(max(pids))
        time.sleep(0.2)
    run.join(timeout=300)
    assert killed, "no training worker to kill appeared"
    r = result["r"]
    assert r.notes["resumed_from_epoch"] >= 0  # the last report came from the restarted group
    assert r.epochs == CFG.max_epochs
    assert r.best_val_loss == pytest.approx(whole.best_val_loss, abs=0.005)
