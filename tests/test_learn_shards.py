"""`jeirt learn --workers N`: the LLMs shared out over Ray actors learn what one process learns
(one Ray cluster for the module)."""

import numpy as np
import pytest

from jeirt_ray.encoders import HashingEncoder
from jeirt_ray.experiments.methods import train_space
from jeirt_ray.experiments.prepare import prepare
from jeirt_ray.model.train import TrainConfig

from .conftest import registry_env


def test_two_ray_workers_learn_what_one_process_learns(ray_cluster, synthetic, tmp_path):
    from jeirt_ray.api.learn import learn
    from jeirt_ray.feedback import FeedbackStore, Grade, new_id
    from jeirt_ray.tracking.registry import SpaceRegistry
    prep = prepare(synthetic, HashingEncoder(128), progress=False)
    space = train_space(prep, TrainConfig(kind="jeirt", dim=16, lr=3e-3, max_epochs=20), members=2, progress=False)
    rng = np.random.default_rng(0)
    rows = prep.rows("test")[:150]
    labels = synthetic.label_matrix(rows)
    with registry_env(tmp_path):
        reg = SpaceRegistry()
        reg.promote("fb", reg.register(space, "fb"), "champion")
        url = f"sqlite:///{tmp_path / 'feedback.db'}"
        store = FeedbackStore(url)
        for i, q in enumerate(rows):  # every LLM graded on each question, in one interleaved stream
            for k in rng.permutation(np.flatnonzero(~np.isnan(labels[i]))):
                store.add(Grade(new_id()[:12] + rng.bytes(8).hex(), float(labels[i, k]), "key",
                                llm=space.model_names[k], encoder=space.encoder_id, embedding=prep.X[q]))
        # max_held far below the held-out share (~20% of the grades): a smaller share of decisions is
        # compared, the same whatever the workers, and every grade is learned all the same
        one = learn("models:/fb/1", register="one", feedback_url=url, registry=reg, max_held=80, promote=False)
        two = learn("models:/fb/1", register="two", feedback_url=url, registry=reg, workers=2, max_held=80,
                    promote=False)
        assert (one["workers"], two["workers"]) == (1, 2)
        for k in ("grades_learned", "grades_held_out", "grades_compared", "held_out_learned_after", "feedback_seq",
                  "better"):
            assert one[k] == two[k], k
        assert one["grades_learned"] + one["held_out_learned_after"] == store.count()
        assert 50 <= one["grades_compared"] <= 120  # about max_held, of ~160 held out at 20%
        assert two["log_loss_gain"] == pytest.approx(one["log_loss_gain"], abs=1e-9)
        a, b = reg.load(one["registered"]), reg.load(two["registered"])
        moved = np.abs(a.model_vectors() - space.model_vectors()).max()
        assert moved > 0.01
        for m in range(2):
            np.testing.assert_allclose(b.model_vectors(m), a.model_vectors(m), rtol=0, atol=1e-6)
        with pytest.raises(ValueError, match="--workers 3 needs 3 free CPUs; the Ray cluster has 2: ask for at most 2"):
            learn("models:/fb/1", register="three", feedback_url=url, registry=reg, workers=3, promote=False)
