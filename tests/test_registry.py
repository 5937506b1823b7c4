import os
import subprocess
import sys

import numpy as np
import pytest

from jeirt_ray.encoders import HashingEncoder
from jeirt_ray.experiments.methods import train_space
from jeirt_ray.experiments.prepare import prepare
from jeirt_ray.model.train import TrainConfig



@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JEIRT_HOME", str(home))
        from jeirt_ray.tracking.registry import SpaceRegistry
        yield SpaceRegistry(f"sqlite:///{home / 'mlflow.db'}")


@pytest.fixture(scope="module")
def spaces():
    from jeirt_ray.data.synthetic import generate
    prep = prepare(generate(n_models=6, n_questions=200), HashingEncoder(64), progress=False)
    cfg = TrainConfig(kind="jeirt", dim=4, max_epochs=3)
    return prep, [train_space(prep, cfg, members=1, seed=s, progress=False) for s in (0, 1)]


def test_register_promote_load_roundtrip(registry, spaces):
    prep, (a, b) = spaces
    va = registry.register(a, "demo-space", {"test_accuracy": 0.7})
    vb = registry.register(b, "demo-space", {"test_accuracy": 0.6})
    assert (va, vb) == (1, 2)
    registry.promote("demo-space", va)
    registry.promote("demo-space", vb, alias="candidate")
    x = prep.X[:30]
    assert np.array_equal(registry.load("models:/demo-space@champion").predict_proba(x), a.predict_proba(x))
    assert np.array_equal(registry.load("models:/demo-space@candidate").predict_proba(x), b.predict_proba(x))
    assert np.array_equal(registry.load("models:/demo-space/2").predict_proba(x), b.predict_proba(x))
    # moving the alias switches what loads
    registry.promote("demo-space", vb)
    assert np.array_equal(registry.load("models:/demo-space@champion").predict_proba(x), b.predict_proba(x))
    rows = registry.versions("demo-space")
    assert [r["version"] for r in rows] == [2, 1]
    assert rows[0]["aliases"] == ["candidate", "champion"] and rows[1]["tags"]["metric.test_accuracy"] == "0.7"


def test_bad_uris_fail_loudly(registry, spaces):
    registry.register(spaces[1][0], "bad-uri-space")  # its own model: no other test's state needed
    with pytest.raises(ValueError, match="not a registry URI"):
        registry.load("runs:/abc")
    with pytest.raises(LookupError, match="no registered space named 'nope' .*jeirt train --data DIR --register nope"):
        registry.load("models:/nope@champion")
    with pytest.raises(LookupError, match="models:/bad-uri-space@staging does not resolve .*registry promote bad-uri"):
        registry.load("models:/bad-uri-space@staging")
    with pytest.raises(LookupError, match="models:/bad-uri-space/99 does not resolve"):
        registry.promote("bad-uri-space", 99)


KILLED_REGISTER = """
import os, signal, sys
from mlflow import MlflowClient
from jeirt_ray.data.synthetic import generate
from jeirt_ray.encoders import HashingEncoder
from jeirt_ray.experiments.methods import train_space
from jeirt_ray.experiments.prepare import prepare
from jeirt_ray.model.train import TrainConfig
from jeirt_ray.tracking.registry import SpaceRegistry

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

where = sys.argv[2]
if where == "log_artifacts":  # half of the files are written, then the process dies
    real = MlflowClient.log_artifact
    def log_artifacts(self, run_id, local_dir, artifact_path=None):
        first = sorted(os.listdir(local_dir))[0]
        real(self, run_id, os.path.join(local_dir, first), artifact_path)
        die()
    MlflowClient.log_artifacts = log_artifacts
elif where == "create_model_version":
    MlflowClient.create_model_version = die
prep = prepare(generate(n_models=6, n_questions=200), HashingEncoder(64), progress=False)
if where == "training":
    import threading; threading.Timer(0.5, die).start()
space = train_space(prep, TrainConfig(kind="jeirt", dim=4, max_epochs=2000, patience=2000), members=1, progress=False)
SpaceRegistry(sys.argv[1]).register(space, "killed")
"""


@pytest.mark.parametrize("where", ["training", "log_artifacts", "create_model_version"])
def test_a_register_killed_midway_leaves_no_half_registered_version(tmp_path, where):
    """SIGKILL during training, halfway through uploading the space, and just before the version
    is created: no version of the name exists afterwards, and the next register gives version 1."""
    from jeirt_ray.data.synthetic import generate
    from jeirt_ray.tracking.registry import SpaceRegistry
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run = subprocess.run([sys.executable, "-c", KILLED_REGISTER, uri, where], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "JEIRT_HOME": str(tmp_path)})
    assert run.returncode == -9, run.stderr[-2000:]
    registry = SpaceRegistry(uri)
    try:
        versions = registry.versions("killed")
    except LookupError:
        versions = []
    assert versions == []
    prep = prepare(generate(n_models=6, n_questions=200), HashingEncoder(64), progress=False)
    space = train_space(prep, TrainConfig(kind="jeirt", dim=4, max_epochs=2), members=1, progress=False)
    assert registry.register(space, "killed") == 1
    x = prep.X[:10]
    assert np.array_equal(registry.load("models:/killed/1").predict_proba(x), space.predict_proba(x))
