import numpy as np
import pytest

from jeirt_ray.encoders import HashingEncoder
from jeirt_ray.evaluation import train_space
from jeirt_ray.experiment import prepare
from jeirt_ray.model.train import TrainConfig

pytest.importorskip("mlflow")


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JEIRT_HOME", str(home))
        from jeirt_ray.registry import Registry
        yield Registry(f"sqlite:///{home / 'mlflow.db'}")


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


def test_bad_uris_fail_loudly(registry):
    with pytest.raises(ValueError, match="not a registry URI"):
        registry.load("runs:/abc")
    with pytest.raises(LookupError, match="no registered space named 'nope' .*jeirt train --data DIR --register nope"):
        registry.load("models:/nope@champion")
    with pytest.raises(LookupError, match="models:/demo-space@staging does not resolve .*registry promote demo-space"):
        registry.load("models:/demo-space@staging")
    with pytest.raises(LookupError, match="models:/demo-space/99 does not resolve"):
        registry.promote("demo-space", 99)
