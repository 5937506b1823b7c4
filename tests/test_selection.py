"""Per-dataset selection: the search's rules without a cluster, then the Ray Tune search end to
end on SYNTHETIC data (one local cluster for the module)."""

import json

import numpy as np
import pytest

from jeirt_ray.encoders import HashingEncoder
from jeirt_ray.experiments.prepare import prepare
from jeirt_ray.model.train import TrainConfig
from jeirt_ray.experiments.selection import (SearchSettings, default_trials, ensemble_members, question_batches, rank_trials,
                                 search_space)


def test_search_space_fits_the_data_and_the_trainer():
    for n_questions in (100, 2_000, 80_000):
        batches = question_batches(n_questions)
        assert batches and all(8 * b <= n_questions for b in batches)  # at least 8 steps an epoch
    assert question_batches(40) == [5]
    for kind in ("jeirt", "mf"):
        space = search_space(kind, 384, 10_000)
        assert set(space) <= set(TrainConfig.model_fields)
        assert {"dim", "lr", "weight_decay", "dropout", "schedule", "question_batch"} <= set(space)
    assert search_space("jeirt", 384, 10_000)["hidden"].choice == [384, 768, 1536]
    with pytest.raises(ValueError, match="no search space for 'irt2pl'"):
        search_space("irt2pl", 384, 100)
    assert default_trials(50_000) >= default_trials(500_000) >= default_trials(5_000_000)


def test_trials_are_ranked_by_the_criterion_and_only_completed_ones_count():
    trials = [{"completed": True, "best": {"val_loss": 0.50, "val_accuracy": 0.70, "val_auc": 0.80}, "id": "a"},
              {"completed": True, "best": {"val_loss": 0.52, "val_accuracy": 0.72, "val_auc": 0.79}, "id": "b"},
              {"completed": False, "id": "stopped"},
              {"completed": True, "best": {"val_loss": 0.55, "val_accuracy": 0.71, "val_auc": 0.81}, "id": "c"}]
    assert [t["id"] for t in rank_trials(trials, "val_loss")] == ["a", "b", "c"]
    assert [t["id"] for t in rank_trials(trials, "val_accuracy")] == ["b", "c", "a"]
    assert [t["id"] for t in rank_trials(trials, "val_auc")] == ["c", "a", "b"]
    assert [t["id"] for t in ensemble_members(trials, SearchSettings(members=2))] == ["a", "b"]


def test_trials_report_at_ashas_rungs_only():
    from jeirt_ray.distributed.tune import rungs
    assert rungs(SearchSettings(grace_period=6, reduction_factor=3, max_epochs=60)) == [6, 18, 54]
    assert rungs(SearchSettings(grace_period=5, reduction_factor=2, max_epochs=30)) == [5, 10, 20]


@pytest.fixture(scope="module")
def prep():
    from jeirt_ray.data.synthetic import generate
    return prepare(generate(n_models=16, n_questions=800, seed=1), HashingEncoder(128), seed=0, cache_root=None,
                   progress=False)


@pytest.mark.slow
def test_search_finds_the_planted_region(ray_cluster, prep, tmp_path):
    """The data's JE-IRT geometry has 8 dimensions and LLMs with different specialities: one
    dimension cannot hold them, so every trial with dim 1 must lose to the trials with dim 16,
    whatever the other (random) settings."""
    from jeirt_ray.distributed.tune import run_search
    from jeirt_ray.experiments.selection import Domain
    space = {"dim": Domain(choice=[1, 16]), "lr": Domain(loguniform=(2e-3, 5e-3)),
             "dropout": Domain(uniform=(0.0, 0.2))}
    settings = SearchSettings(trials=8, max_epochs=30, grace_period=5, members=3, seed=3)
    res = run_search(prep, "jeirt", settings, storage=tmp_path, space=space, progress=False)
    assert len(res["trials"]) == 8 and {t["config"]["dim"] for t in res["trials"]} == {1, 16}  # both tried
    done = rank_trials(res["trials"], "val_loss")
    assert done[0]["config"]["dim"] == 16 and res["configs"][0].dim == 16
    best16 = min(t["best"]["val_loss"] for t in done if t["config"]["dim"] == 16)
    # a dim-1 trial was stopped early by ASHA, or ran to the end and lost clearly
    assert all(t["best"]["val_loss"] > best16 + 0.01 for t in done if t["config"]["dim"] == 1)
    stopped = [t for t in res["trials"] if not t["completed"]]
    assert all(t["epochs"] < settings.max_epochs for t in stopped)


@pytest.mark.slow
def test_evaluate_searches_both_methods_with_one_budget_and_logs_trials(ray_cluster, prep, tmp_path):
    from mlflow import MlflowClient

    from jeirt_ray.distributed.tune import run_search
    from jeirt_ray.experiments.methods import score_methods
    from jeirt_ray.model.space import CoreSpace
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spaces: dict = {}
    res = score_methods(prep, ("jeirt", "mf", "majority"), spaces=spaces,
                        search=SearchSettings(trials=6, max_epochs=20), search_fn=run_search,
                        search_storage=tmp_path / "s", tracking_uri=uri, progress=False)
    assert set(res) == {"jeirt", "mf", "majority", "truth"}
    for kind in ("jeirt", "mf"):
        search = res[kind]["search"]
        assert search["settings"]["trials"] == 6 and 1 <= res[kind]["members"] <= 5
        client = MlflowClient(uri)
        parent = client.get_run(search["mlflow_run_id"])
        children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
        assert len(children) == search["completed"]
        assert all(len(client.get_metric_history(c.info.run_id, "val_loss")) >= 1 for c in children)
    # the truth (the generator's probabilities) is the ceiling on SYNTHETIC data
    assert res["truth"]["log_loss"] < min(res[m]["log_loss"] for m in ("jeirt", "mf", "majority"))
    assert res["jeirt"]["test_accuracy"] > res["majority"]["test_accuracy"] + 0.02
    space = spaces["jeirt"]
    losses = [m["best_val_loss"] for m in space.metadata["members"]]
    assert losses == sorted(losses) and len(losses) == len(space.members)  # the best trials, best first
    # members of different configurations save and load to identical predictions
    loaded = CoreSpace.load(space.save(tmp_path / "space"))
    x = prep.X[:20]
    assert np.array_equal(loaded.predict_proba(x), space.predict_proba(x))
    assert json.loads((tmp_path / "space" / "space.json").read_text())["metadata"]["recipe"] == "searched"
    # a new LLM joins a space whose members differ in dimension: one vector per member
    from jeirt_ray.model.onboarding import onboard
    labels = (np.random.default_rng(0).random(60) < 0.6).astype(float)
    new = onboard(loaded, "new-llm", prep.X[:60], labels).space
    assert new.model_names[-1] == "new-llm"
    dims = [(space.member_configs[i] if space.member_configs else space.config).dim for i in range(len(space.members))]
    assert [m.models.weight.shape[1] for m in new.members] == dims
