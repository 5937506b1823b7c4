import numpy as np
import pytest
import torch

from jeirt_ray.encoders import HashingEncoder
from jeirt_ray.experiments.methods import score_methods, train_space
from jeirt_ray.experiments.prepare import prepare
from jeirt_ray.model.modules import JEIRT, build_module
from jeirt_ray.model.space import CoreSpace
from jeirt_ray.model.train import Pairs, QuestionBatcher, TrainConfig, TrainState, fit

FAST = TrainConfig(kind="jeirt", dim=8, lr=3e-3, input_dropout=0.3, max_epochs=300, patience=20)


@pytest.fixture(scope="module")
def prep():
    from jeirt_ray.data.synthetic import generate
    data = generate(n_models=40, n_questions=4000, seed=0)
    return prepare(data, HashingEncoder(256), seed=0, cache_root=None, progress=False)


@pytest.fixture(scope="module")
def space(prep):
    return train_space(prep, FAST, members=2, progress=False)


def test_jeirt_formula():
    torch.manual_seed(0)
    mod = JEIRT(8, 3, dim=4, dropout=0.0).eval()
    x = torch.randn(5, 8)
    e = mod.question_vectors(x)
    norm = e.norm(dim=1, keepdim=True)
    expected = (e @ mod.models.weight.T) / norm - norm
    assert torch.allclose(mod.score_all(x), expected, atol=1e-5)
    q, m = torch.tensor([0, 4, 2]), torch.tensor([2, 0, 1])
    assert torch.allclose(mod(x, q, m), expected[q, m], atol=1e-5)


def test_ability_prior_and_norm_shrinkage_pull_toward_the_population():
    """The two penalties: LLM vectors drawn toward their mean, difficulties toward the batch's."""
    from jeirt_ray.data.synthetic import generate
    small = prepare(generate(n_models=8, n_questions=300, seed=0), HashingEncoder(64), seed=0, progress=False)
    args = small.X, small.data.n_models, small.pairs("train"), small.pairs("val")

    def spreads(**kw):
        mod = fit(*args, TrainConfig(kind="jeirt", dim=8, lr=3e-3, weight_decay=0.0, max_epochs=15, patience=100,
                                     **kw), progress=False).module
        w = mod.models.weight.detach()
        norms = mod.split(mod.question_vectors(torch.as_tensor(small.X)))[1].detach()
        return float((w - w.mean(0)).norm(dim=1).mean()), float(norms.std())
    free, pulled, shrunk = spreads(), spreads(ability_prior=10.0), spreads(norm_shrinkage=10.0)
    assert pulled[0] < 0.7 * free[0]
    assert shrunk[1] < 0.7 * free[1]


@pytest.mark.parametrize("kind", ["jeirt", "mf", "irt1pl", "irt2pl"])
def test_forward_matches_score_all(kind):
    torch.manual_seed(0)
    mod = build_module(kind, 8, 4, dim=6).eval()
    x = torch.randn(7, 8)
    q, m = torch.randint(0, 7, (20,)), torch.randint(0, 4, (20,))
    assert torch.allclose(mod(x, q, m), mod.score_all(x)[q, m], atol=1e-5)


def test_stacked_forward_is_the_spaces():
    """Routing's NumPy forward (members stacked) gives the space's probabilities and its first
    member's difficulties; spaces it cannot stack (members of other shapes, other kinds) have
    none, and the router then keeps the torch path with the same answers."""
    from jeirt_ray.model.stacked import StackedJEIRT
    from jeirt_ray.routing.router import SpaceRouter
    torch.manual_seed(0)
    names = [f"llm{i}" for i in range(6)]

    def space_of(members):
        return CoreSpace(members=members, config=TrainConfig(kind="jeirt"), encoder_id="hashing", in_dim=16,
                         model_names=names)
    space = space_of([JEIRT(16, 6, dim=5, hidden=12, input_dropout=0.2) for _ in range(3)])
    x = np.random.default_rng(0).normal(size=(9, 16)).astype(np.float32)
    p, norms = StackedJEIRT.of(space)(x)
    np.testing.assert_allclose(p, space.predict_proba(x), atol=1e-6)
    np.testing.assert_allclose(norms, np.linalg.norm(space.question_vectors(x), axis=1), rtol=1e-5)
    fast, slow = SpaceRouter(space, default_policy="most_likely"), SpaceRouter(space, default_policy="most_likely")
    slow.stacked = None
    a, b = fast.route(x, top_k=None, ranking=6), slow.route(x, top_k=None, ranking=6)
    assert [r["ranking"] for r in a] == [r["ranking"] for r in b]
    np.testing.assert_allclose([r["difficulty"] for r in a], [r["difficulty"] for r in b], rtol=1e-5)
    mixed = space_of([JEIRT(16, 6, dim=5, hidden=12), JEIRT(16, 6, dim=5, hidden=8)])
    assert StackedJEIRT.of(mixed) is None and SpaceRouter(mixed).stacked is None
    assert StackedJEIRT.of(space_of([build_module("mf", 16, 6, dim=5)])) is None


def test_batcher_covers_every_pair_once():
    q = torch.tensor([3, 1, 3, 0, 1, 3, 2])
    pairs = Pairs(q, torch.arange(7), torch.arange(7, dtype=torch.float32))
    seen = []
    for qb, local, m, y in QuestionBatcher(pairs).batches(2, torch.Generator().manual_seed(0)):
        assert len(qb) <= 2 and (qb[local] == q[m]).all()  # every pair sits with its own question
        seen += y.int().tolist()
    assert sorted(seen) == list(range(7))


def test_soft_labels_train(prep):
    """Graded labels in [0, 1] are targets as they are (BCE with soft targets)."""
    tr = prep.pairs("train")
    soft = Pairs(tr.q, tr.m, torch.full_like(tr.y, 0.3))
    r = fit(prep.X, prep.data.n_models, soft, soft, FAST.model_copy(update={"max_epochs": 40}), progress=False)
    p = torch.sigmoid(r.module.score_all(torch.as_tensor(prep.X[:50]))).detach().numpy()
    assert abs(p.mean() - 0.3) < 0.05


def test_parameter_recovery(prep, space):
    """On data drawn from a known JE-IRT geometry, learned probabilities on unseen test
    questions track the true ones."""
    rows = prep.rows("test")
    learned = space.predict_proba(prep.X[rows])
    true = prep.data.extra["p_true"][rows]
    r = np.corrcoef(learned.ravel(), true.ravel())[0, 1]
    assert r >= 0.95, r


def test_early_stopping_keeps_best(prep):
    r = fit(prep.X, prep.data.n_models, prep.pairs("train"), prep.pairs("val"),
            FAST.model_copy(update={"max_epochs": 60, "patience": 3, "lr": 3e-2}), progress=False)
    assert r.best_val_loss == min(h["val_loss"] for h in r.history)
    assert r.epochs <= 60 and r.epochs - 1 - r.best_epoch <= 3


def test_space_roundtrip(space, prep, tmp_path):
    space.save(tmp_path / "s")
    again = CoreSpace.load(tmp_path / "s")
    x = prep.X[:40]
    assert np.array_equal(space.predict_proba(x), again.predict_proba(x))
    assert again.model_names == space.model_names and again.encoder_id == "hashing-256"
    assert not list(tmp_path.glob("s/*.pkl")) and (tmp_path / "s" / "weights.safetensors").exists()


def test_seeded(prep):
    cfg = FAST.model_copy(update={"max_epochs": 5})
    a = fit(prep.X, prep.data.n_models, prep.pairs("train"), prep.pairs("val"), cfg, progress=False)
    b = fit(prep.X, prep.data.n_models, prep.pairs("train"), prep.pairs("val"), cfg, progress=False)
    assert a.best_val_loss == pytest.approx(b.best_val_loss, abs=1e-4)  # same seed, same run (up to float sums)
    c = fit(prep.X, prep.data.n_models, prep.pairs("train"), prep.pairs("val"), cfg.model_copy(update={"seed": 1}),
            progress=False)
    assert c.best_val_loss != pytest.approx(a.best_val_loss, abs=1e-4)


def test_resume_from_checkpoint_continues_the_same_run(prep):
    """A run resumed from its epoch-3 state (through the safetensors form) ends exactly like an
    uninterrupted one: weights, optimizer, shuffler and dropout RNG all come back."""
    cfg = FAST.model_copy(update={"max_epochs": 8, "patience": 100})
    saved = {}

    def keep(row, snapshot, last):
        if row["epoch"] == 3:
            saved["flat"] = snapshot().to_flat()

    args = (prep.X, prep.data.n_models, prep.pairs("train"), prep.pairs("val"), cfg)
    whole = fit(*args, progress=False, on_epoch=keep)
    resumed = fit(*args, progress=False, resume=TrainState.from_flat(*saved["flat"]))
    assert resumed.epochs == whole.epochs == 8
    assert [h["val_loss"] for h in resumed.history] == pytest.approx([h["val_loss"] for h in whole.history], abs=1e-6)
    for k, v in whole.module.state_dict().items():
        assert torch.allclose(v, resumed.module.state_dict()[k], atol=1e-6), k


def test_sharded_batches_are_disjoint_and_equal_in_number(prep):
    """Data-parallel workers get disjoint questions, all of their pairs, and the same step count."""
    batcher = QuestionBatcher(prep.pairs("train"))
    shards = [list(batcher.batches(16, torch.Generator().manual_seed(0), rank, 3)) for rank in range(3)]
    assert len({len(s) for s in shards}) == 1
    seen = [set(torch.cat([b[0] for b in s]).tolist()) for s in shards]
    assert not (seen[0] & seen[1]) and not (seen[1] & seen[2]) and not (seen[0] & seen[2])
    assert len(set().union(*seen)) >= len(batcher.questions) - 2  # at most world - 1 sit out
    qb, local, m, _ = shards[1][0]
    assert len(m) == int(batcher.counts[torch.isin(batcher.questions, qb)].sum())


def test_evaluate_all_methods(prep):
    res = score_methods(prep, jeirt_config=FAST, members=1, progress=False)
    assert set(res) == {"jeirt", "mf", "knn", "majority", "irt1pl", "irt2pl", "truth"}
    for r in res.values():
        assert {"test_accuracy", "auc", "log_loss", "train_seconds"} <= set(r)
    # the data is drawn from a JE-IRT geometry: JE-IRT must beat the question-blind majority,
    # and nothing beats the generator's own probabilities in log-loss
    assert res["jeirt"]["test_accuracy"] > res["majority"]["test_accuracy"] + 0.03
    assert res["jeirt"]["log_loss"] < res["majority"]["log_loss"]
    assert res["truth"]["log_loss"] < min(r["log_loss"] for m, r in res.items() if m != "truth")


@pytest.mark.real_data
def test_real_theoremqa_jeirt_beats_majority():
    """Real LLM results (theoremqa, 18 models): JE-IRT on the hashing encoder must beat the
    question-blind per-model majority on unseen questions."""
    from jeirt_ray.data import load_data

    from .conftest import shared_dataset
    data = load_data(shared_dataset("theoremqa"))
    prep = prepare(data, HashingEncoder(384), seed=0, progress=False)
    cfg = TrainConfig(kind="jeirt", dim=64, input_dropout=0.5, lr=1e-3)
    res = score_methods(prep, ("jeirt", "majority"), jeirt_config=cfg, members=2, progress=False)
    assert res["jeirt"]["log_loss"] < res["majority"]["log_loss"]
    assert res["jeirt"]["auc"] > res["majority"]["auc"] + 0.01
