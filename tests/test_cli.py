import json

import pandas as pd
from typer.testing import CliRunner

from jeirt_ray.cli import app

runner = CliRunner()


def test_data_check_bad_label(tmp_path):
    pd.DataFrame({"question_id": ["a"], "benchmark": ["x"], "text": ["hi"]}).to_csv(tmp_path / "questions.csv", index=False)
    pd.DataFrame({"model": ["m"], "question_id": ["a"], "label": [2]}).to_csv(tmp_path / "responses.csv", index=False)
    r = runner.invoke(app, ["data", "check", str(tmp_path)])
    assert r.exit_code == 2
    assert "responses.csv" in r.output and "row 1" in r.output and "outside [0, 1]" in r.output


def test_synth_then_evaluate_and_train(tmp_path, monkeypatch):
    monkeypatch.setenv("JEIRT_HOME", str(tmp_path / "home"))
    r = runner.invoke(app, ["data", "synth", "--out", str(tmp_path / "d"), "--models", "8", "--questions", "300"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "res.json"
    r = runner.invoke(app, ["evaluate", "--data", str(tmp_path / "d"), "--encoder", "hashing", "--members", "1",
                            "--methods", "jeirt,knn,majority", "--out", str(out)])
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    assert set(res) == {"jeirt", "knn", "majority"}
    assert json.loads((tmp_path / "res.split.json").read_text())["kind"] == "by_question"
    assert {"test_accuracy", "auc", "log_loss", "train_seconds"} <= set(res["jeirt"])
    r = runner.invoke(app, ["train", "--data", str(tmp_path / "d"), "--encoder", "hashing", "--members", "1",
                            "--out", str(tmp_path / "space")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "space" / "weights.safetensors").exists() and (tmp_path / "space" / "split.json").exists()
    # the embedding cache lives under JEIRT_HOME
    assert any((tmp_path / "home" / "cache").rglob("*.parquet"))


def test_demo_main_job(tmp_path, monkeypatch):
    """The README's main job, end to end (hashing encoder to keep it quick)."""
    from jeirt_ray.model.space import Space
    monkeypatch.setenv("JEIRT_HOME", str(tmp_path))
    r = runner.invoke(app, ["demo", "--encoder", "hashing"])
    assert r.exit_code == 0, r.output
    assert "SYNTHETIC" in r.output and "recipe chosen on validation" in r.output
    res = json.loads((tmp_path / "demo" / "results.json").read_text())
    assert set(res) == {"jeirt", "mf", "knn", "majority", "irt1pl", "irt2pl"}
    space = Space.load(tmp_path / "demo" / "space")
    assert len(space.members) == 5 and space.metadata["recipe"] in ("light", "regularised")


def test_train_register_promote_list(tmp_path, monkeypatch):
    monkeypatch.setenv("JEIRT_HOME", str(tmp_path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    runner.invoke(app, ["data", "synth", "--out", str(tmp_path / "d"), "--models", "6", "--questions", "200"])
    r = runner.invoke(app, ["train", "--data", str(tmp_path / "d"), "--encoder", "hashing", "--members", "1",
                            "--register", "cli-space"])
    assert r.exit_code == 0, r.output
    assert "registered as cli-space version 1" in r.output
    assert runner.invoke(app, ["registry", "promote", "cli-space", "1"]).exit_code == 0
    r = runner.invoke(app, ["registry", "list", "cli-space"])
    assert r.exit_code == 0 and "champion" in r.output and "best_member_val_loss" in r.output
