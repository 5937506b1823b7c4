"""End-to-end fine-tuning of the encoder's top layers, on a tiny 2-layer BERT (conftest): the
split encoder reproduces the whole, a fine-tuned space saves and reloads with its encoder, Ray
Train runs it under DDP, and Serve routes with the space's own encoder (one Ray cluster)."""

from pathlib import Path

import numpy as np
import pytest
import torch

from jeirt_ray.data.synthetic import generate
from jeirt_ray.encoders import make_encoder
from jeirt_ray.encoders.hidden import bottom_states, cached_bottom_states
from jeirt_ray.experiments.methods import train_space
from jeirt_ray.experiments.prepare import prepare_finetuned
from jeirt_ray.model.finetune import EncoderTop, FinetuneSettings, build, finetune_encoder, parse_layers
from jeirt_ray.model.space import CoreSpace
from jeirt_ray.model.token_states import TokenStates
from jeirt_ray.model.train import Pairs, TrainConfig, fit
from jeirt_ray.experiments.selection import fixed_config

from .conftest import local_ray, local_serve_config, registry_env

SETTINGS = FinetuneSettings(layers=1, max_epochs=3, encoder_lr=1e-3)
HEAD = TrainConfig(kind="jeirt", dim=16, lr=3e-3, max_epochs=30, patience=5)


@pytest.fixture(scope="module")
def data():
    return generate(n_models=8, n_questions=240, seed=1)


@pytest.fixture(scope="module")
def tuned(data, tiny_encoder, tmp_path_factory):
    home = tmp_path_factory.mktemp("ft")
    return prepare_finetuned(data, str(tiny_encoder), "jeirt", SETTINGS, cache_root=home / "cache",
                             folder=home / "encoder", progress=False)


@pytest.mark.parametrize("first", [0, 1])
def test_the_cached_bottom_and_the_trainable_top_are_the_encoder(tiny_encoder, first):
    texts = ["what is the sum of 2 and 3", "def f return a", "which law of physics"]
    enc = make_encoder(str(tiny_encoder))
    X = TokenStates.from_list(bottom_states(enc.model, texts, first))
    with torch.no_grad():
        got = EncoderTop(enc.model, first).eval()(X[torch.arange(3)]).numpy()
    np.testing.assert_allclose(got, enc.encode(texts), atol=2e-3)  # float16 cache


def test_finetuned_space_saves_and_reloads_with_its_encoder(tuned, data, tiny_encoder, tmp_path):
    base, ft = make_encoder(str(tiny_encoder)), make_encoder(tuned.encoder_dir)
    assert tuned.encoder_id == ft.encoder_id != base.encoder_id
    layers = lambda e: e.model[0].auto_model.encoder.layer  # noqa: E731
    assert torch.equal(layers(base)[0].output.dense.weight, layers(ft)[0].output.dense.weight)  # frozen
    assert not torch.equal(layers(base)[1].output.dense.weight, layers(ft)[1].output.dense.weight)  # trained
    assert tuned.finetune["layers"] == 1 and tuned.finetune["of_layers"] == 2
    texts = [str(t) for t in data.texts[:20]]
    np.testing.assert_allclose(ft.encode(texts), tuned.X[:20], atol=1e-5)

    space = train_space(tuned, HEAD, members=1, progress=False)
    assert space.encoder_dir == tuned.encoder_dir and space.metadata["finetune"]["kind"] == "jeirt"
    space.save(tmp_path / "space")
    loaded = CoreSpace.load(tmp_path / "space")
    assert Path(loaded.encoder_dir) == tmp_path / "space" / "encoder"
    again = make_encoder(loaded.encoder_dir)
    assert again.encoder_id == space.encoder_id
    np.testing.assert_array_equal(loaded.predict_proba(again.encode(texts)), space.predict_proba(ft.encode(texts)))


def test_the_hidden_states_are_computed_once(tiny_encoder, tmp_path, monkeypatch):
    import jeirt_ray.encoders.hidden as hidden
    enc = make_encoder(str(tiny_encoder))
    texts = ["the answer is 4", "what is the value", "the answer is 4"]
    first = cached_bottom_states(enc.model, enc.encoder_id, texts, 1, tmp_path, progress=False)
    monkeypatch.setattr(hidden, "bottom_states", lambda *a, **k: pytest.fail("recomputed"))
    again = cached_bottom_states(enc.model, enc.encoder_id, texts, 1, tmp_path, progress=False)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


def test_bad_options_are_named(tiny_encoder, data, tmp_path):
    assert parse_layers("top-3") == 3 and parse_layers("all") == "all"
    for bad in ("top-0", "3", "top", "bottom-2"):
        with pytest.raises(ValueError, match="top-K"):
            parse_layers(bad)
    pairs = Pairs.from_numpy(data.q_idx[:50], data.m_idx[:50], data.labels[:50])
    args = (list(map(str, data.texts)), data.n_models, pairs, pairs, fixed_config("jeirt"))
    with pytest.raises(ValueError, match="has 2 transformer layers"):
        finetune_encoder(str(tiny_encoder), *args, FinetuneSettings(layers=5), tmp_path / "e", None)
    with pytest.raises(ValueError, match="needs a sentence-transformers encoder"):
        finetune_encoder("hashing", *args, SETTINGS, tmp_path / "e", None)


# ---- on Ray: Train's DDP and Serve ---------------------------------------------------------------

import ray


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    home = tmp_path_factory.mktemp("ft-serve")
    with registry_env(home), local_ray():
        yield home


def test_finetuning_under_ddp_on_two_workers(cluster, data, tiny_encoder, tuned):
    """Two gloo workers share each batch of questions; the run learns like one process."""
    from jeirt_ray.distributed.train import ray_fit
    enc = make_encoder(str(tiny_encoder))
    X = TokenStates.from_list(bottom_states(enc.model, [str(t) for t in data.texts], 1))
    train, val = tuned.pairs("train"), tuned.pairs("val")
    config = HEAD.model_copy(update={"max_epochs": 3, "question_batch": 32})
    plain = fit(X, data.n_models, train, val, config, module=build(enc.model, 1, config, data.n_models, 1e-3),
                progress=False)
    ddp = ray_fit(X, data.n_models, train, val, config, workers=2, storage=cluster / "ray", name="ft-ddp",
                  module=build(enc.model, 1, config, data.n_models, 1e-3), progress=False)
    assert ddp.notes["workers"] == 2 and ddp.epochs == plain.epochs == 3
    assert ddp.best_val_loss == pytest.approx(plain.best_val_loss, abs=0.03)
    assert not torch.equal(ddp.module.top.encoder.layer[0].output.dense.weight,
                           EncoderTop(enc.model, 1).encoder.layer[0].output.dense.weight)  # the encoder trained


def test_serve_routes_with_the_spaces_own_encoder(cluster, tuned):
    """(Serve is shut down at the end: its replicas' CPUs are the DDP test's, whatever the order.)"""
    import httpx
    from ray import serve

    from jeirt_ray.tracking.registry import SpaceRegistry
    from jeirt_ray.serving.deployment.deploy import check_registry, deploy, load_config
    space = train_space(tuned, HEAD, members=1, progress=False)
    reg = SpaceRegistry()
    reg.promote("ft", reg.register(space, "ft"), "champion")
    path = local_serve_config(cluster / "serve.yaml", model="ft", encoder="hashing")
    with pytest.raises(LookupError, match="set args.encoder to models:/ft@champion"):
        check_registry(load_config(path))
    config = load_config(local_serve_config(cluster / "serve.yaml", model="ft", encoder="models:/ft@champion"))
    check_registry(config)
    # `encoder: space`, the shipped default: jeirt serve names the space's own before deploying,
    # and a deploy that did not (serve deploy, KubeRay) finds it in build_app; this deploy is one
    config = load_config(local_serve_config(cluster / "serve.yaml", model="ft", encoder="space"))
    named = load_config(local_serve_config(cluster / "named.yaml", model="ft", encoder="space"))
    check_registry(named)
    assert named.applications[0].args["encoder"] == "models:/ft@champion"
    try:
        url = deploy(config, timeout_s=300)
        text = str(tuned.data.texts[5])
        r = httpx.post(f"{url}/v1/route", json={"query": text, "top_k": 3}, timeout=60)
    finally:
        serve.shutdown()
    assert r.status_code == 200, r.text
    probs = space.predict_proba(make_encoder(tuned.encoder_dir).encode([text]))[0]
    assert r.json()["results"][0]["chosen"] == space.model_names[int(probs.argmax())]
    assert r.json()["results"][0]["p_correct"] == pytest.approx(float(probs.max()), abs=1e-4)
