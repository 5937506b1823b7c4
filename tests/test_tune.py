"""Ray Tune sweeps: the YAML grammar (no cluster) and the CI-sized sweep on a real local cluster."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jeirt_ray.cli.main import app
from jeirt_ray.distributed.sweep import SweepConfig

ROOT = Path(__file__).resolve().parents[1]


def test_repository_sweep_configs_validate():
    for path in sorted((ROOT / "tune_configs").glob("*.yaml")):
        sweep = SweepConfig.from_yaml(path)
        assert {"dim"} <= set(sweep.search), path  # every shipped sweep varies the dimension


@pytest.mark.parametrize("body, message", [
    ("name: x\nsearch: {dim: {grid: [8], choice: [16]}}", "exactly one of"),
    ("name: x\nsearch: {dims: {grid: [8]}}", "unknown TrainConfig field(s) ['dims']"),
    ("name: x\nbase: {dim: 8}\nsearch: {dim: {grid: [8]}}", "given in both base and search"),
    ("name: x\nsearch: {dim: {grid: [8]}}\nplot: lr", "plot: 'lr' is not a searched field"),
    ("name: x\nsearch: {dim: {grid: [8]}}\nworker: 2", "worker"),
    ("name: x\nbase: {lr: -1}\nsearch: {dim: {grid: [8]}}", "greater than 0"),
])
def test_bad_sweep_config_names_file_and_problem(tmp_path, body, message):
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    with pytest.raises(ValueError) as e:
        SweepConfig.from_yaml(path)
    assert str(path) in str(e.value) and message in str(e.value)


@pytest.mark.slow
def test_smoke_sweep_registers_best_and_nests_runs(tmp_path, monkeypatch):
    import ray
    from mlflow import MlflowClient
    monkeypatch.setenv("JEIRT_HOME", str(tmp_path))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    try:
        r = CliRunner().invoke(app, ["tune", str(ROOT / "tune_configs" / "smoke.yaml"), "--out", str(tmp_path / "o")])
    finally:
        ray.shutdown()
    assert r.exit_code == 0, r.output
    summary = json.loads((tmp_path / "o" / "smoke.json").read_text())
    assert len(summary["trials"]) == 2 and summary["registered_version"] == 1
    best = summary["best"]
    assert best["val_loss"] == min(t["val_loss"] for t in summary["trials"] if t["completed"])
    assert (tmp_path / "o" / "smoke.png").stat().st_size > 1000
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    parent = client.get_run(summary["parent_run_id"])
    children = client.search_runs([parent.info.experiment_id],
                                  f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert len(children) == 2
    assert client.get_model_version("smoke-best", "1").run_id == best["mlflow_run_id"]
    assert len(client.get_metric_history(best["mlflow_run_id"], "val_loss")) > 1  # epochs logged by rank 0
