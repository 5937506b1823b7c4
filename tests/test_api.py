"""The public API (`import jeirt_ray as jr`) on the plain path: no Ray, no CLI."""

import json

import numpy as np
import pandas as pd
import pytest

import jeirt_ray as jr


@pytest.fixture(scope="module")
def data(synthetic):
    return synthetic


@pytest.fixture(scope="module", autouse=True)
def home(tmp_path_factory):
    """The embedding cache and runs of this module under a temporary JEIRT_HOME."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JEIRT_HOME", str(tmp_path_factory.mktemp("home")))
        yield


@pytest.fixture(scope="module")
def space(data, home):
    return jr.train(data, encoder="hashing", search=False, members=2, held_out_benchmarks=0)


TEXTS = ["What is 17 times 23?", "Which element has atomic number 6?"]


def test_only_public_names_take_a_user_from_data_to_routes(space, data, tmp_path):
    p = space.predict(TEXTS)
    assert list(p.index) == TEXTS and list(p.columns) == list(data.models)
    assert ((p.to_numpy() > 0) & (p.to_numpy() < 1)).all()
    routes = space.route(TEXTS, top_k=3)
    assert [set(r) >= {"chosen", "p_correct", "scores"} for r in routes] == [True, True]
    assert all(len(r["scores"]) == 3 and r["chosen"] in data.models for r in routes)
    # the tuned policy was chosen on validation and is what route applies by default
    assert space.metadata["routing_policy"]["name"] and routes[0]["policy"] == "tuned"
    most = space.route(TEXTS, policy="most_likely", top_k=None)
    assert [r["chosen"] for r in most] == [p.columns[i] for i in p.to_numpy().argmax(1)]
    assert len(most[0]["scores"]) == len(data.models)
    two = list(data.models[:2])
    assert {r["chosen"] for r in space.route(TEXTS, candidates=two)} <= set(two)
    again = jr.Space.load(space.save(tmp_path / "space"))
    assert isinstance(again, jr.Space)
    np.testing.assert_array_equal(again.predict(TEXTS).to_numpy(), p.to_numpy())


def test_onboard_returns_a_new_space_and_leaves_the_old_one(space, data):
    ids = list(space.question_ids[:30])
    labels = np.r_[np.ones(15), np.zeros(15)]
    new = space.onboard("new-llm", ids + TEXTS, np.r_[labels, [1, 0]])
    assert new.model_names[-1] == "new-llm" and "new-llm" not in space.model_names
    assert new.predict(TEXTS).shape == (2, len(data.models) + 1)
    assert new.metadata["onboarded"]["new-llm"]["responses"] == 32
    with pytest.raises(ValueError, match="labels must lie in"):
        space.onboard("x", ids[:2], [0.5, 2])
    with pytest.raises(ValueError, match="2 questions but 1 labels"):
        space.onboard("x", ids[:2], [1])
    with pytest.raises(ValueError, match=r"is given twice \(at 0 and 2\)"):
        space.onboard("x", ids[:2] + ids[:1], [1, 0, 0])


def test_evaluate_jeirt_and_mf_on_the_plain_path(data):
    res = jr.evaluate(data, encoder="hashing", search=False, methods=["jeirt", "mf"], members=1)
    assert set(res) == {"jeirt", "mf", "truth"}
    assert all({"test_accuracy", "auc", "log_loss", "train_seconds"} <= set(r) for r in res.values())
    with pytest.raises(ValueError, match="unknown method"):
        jr.evaluate(data, encoder="hashing", search=False, methods=["jeirt", "svm"])


def test_a_users_own_split_with_a_benchmark_only_in_val_and_test(data, tmp_path):
    """`split=` takes a user's question_id,split table; a benchmark with no training question
    (routing-only) must not break training or the routing policy (it crashed tune_routing)."""
    rng = np.random.default_rng(0)
    part = rng.choice(["train", "val", "test"], size=data.n_questions, p=[0.7, 0.15, 0.15])
    only_held = data.benchmarks == data.benchmarks[0]
    part[only_held] = np.where(rng.random(only_held.sum()) < 0.5, "val", "test")
    table = pd.DataFrame({"question_id": data.question_ids, "split": part})
    table.to_csv(tmp_path / "split.csv", index=False)
    space = jr.train(data, encoder="hashing", search=False, members=1, split=tmp_path / "split.csv",
                     out=tmp_path / "space")
    saved = json.loads((tmp_path / "space" / "split.json").read_text())
    assert saved["kind"] == "given" and set(saved["test_questions"]) == set(data.question_ids[part == "test"])
    assert data.benchmarks[0] not in space.metadata["routing_policy"]["benchmarks"]
    assert space.route(TEXTS)[0]["chosen"] in data.models
    res = jr.evaluate(data, encoder="hashing", search=False, methods=["majority"], split=table)
    assert 0 < res["majority"]["test_accuracy"] < 1


@pytest.mark.parametrize("rows, message", [
    ({"question_id": ["nope"], "split": ["train"]}, "question_id not in the dataset"),
    ({"question_id": ["q0"], "split": ["training"]}, "split must be train, val or test"),
    ({"qid": ["q0"], "split": ["train"]}, "missing column"),
])
def test_a_bad_split_table_names_the_row(data, rows, message):
    from jeirt_ray.data import DataError
    if rows.get("question_id") == ["q0"]:
        rows["question_id"] = [data.question_ids[0]]
    with pytest.raises(DataError, match=message):
        jr.train(data, encoder="hashing", search=False, members=1, split=pd.DataFrame(rows))


def test_registry_round_trip(space, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("JEIRT_HOME", str(tmp_path))
    version = jr.register(space, "api-space", alias="champion")
    reg = jr.Registry()
    assert [r["version"] for r in reg.list("api-space")] == [version]
    loaded = jr.Space.load("models:/api-space@champion")
    assert isinstance(reg.load("models:/api-space/1"), jr.Space)
    np.testing.assert_array_equal(loaded.predict(TEXTS).to_numpy(), space.predict(TEXTS).to_numpy())
