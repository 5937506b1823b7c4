"""Train every method on the same split and compare them on the test questions."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..core import paths
from .prepare import Prepared, pair_probs
from ..model.adaptive import space_error
from ..model.baselines import KNN, Majority
from ..model.metrics import binary_metrics
from ..model.space import CoreSpace, answer_table
from ..model.train import FitResult, TrainConfig, fit
from .selection import SearchSettings, fixed_config, rank_trials

METHODS = ("jeirt", "mf", "knn", "majority", "irt1pl", "irt2pl")
# The plain path (no search): this many seeds of selection.fixed_config, for JE-IRT and MF alike.
JEIRT_MEMBERS = 5
# run_search(prep, kind, settings, *, storage, tracking_uri, progress) -> {"members", "configs", "trials", ...}
SearchFn = Callable[..., dict]


def space_of(prep: Prepared, members: list, configs: list[TrainConfig], metadata: dict) -> CoreSpace:
    """The trained members as a CoreSpace, with its own error on an LLM's accuracy measured on the
    validation questions (`accuracy_error`: model.adaptive.space_error; onboarding's intervals)."""
    space = CoreSpace(members, configs[0], prep.encoder_id, prep.X.shape[1], prep.data.models.tolist(),
                 prep.data.question_ids.tolist(),
                 metadata={"data": prep.data.name, "data_fingerprint": prep.data.fingerprint(),
                           "split": {"kind": prep.split.kind, "seed": prep.split.seed},
                           **({"finetune": prep.finetune} if prep.finetune else {}), **metadata},
                 question_embeddings=prep.X, question_benchmarks=prep.data.benchmarks.tolist(),
                 member_configs=configs if any(c != configs[0] for c in configs) else [],
                 encoder_dir=prep.encoder_dir, question_texts=prep.data.texts.tolist())
    llms = prep.data.extra.get("llms") or {}
    if llms:  # sizes from the folder's models.csv: what serving filters candidates by
        space.metadata["llms"] = {n: llms[n] for n in space.model_names if n in llms}
    train = prep.pairs("train")
    space.answers = answer_table(prep.data.n_models, prep.data.n_questions, train.m.numpy(), train.q.numpy(),
                                 train.y.numpy())
    val = prep.pairs("val")
    if len(val.q):
        space.metadata["accuracy_error"] = space_error(space, prep.X, val.q.numpy(), val.m.numpy(), val.y.numpy(),
                                                       prep.data.benchmarks)
    return space


def train_space(prep: Prepared, config: TrainConfig | None = None, members: int = JEIRT_MEMBERS, seed: int = 0,
                progress: bool = True, fit_fn: Callable[..., FitResult] = fit) -> CoreSpace:
    """The plain path: `members` seeds (seed, seed + 1, ...) of one configuration (default: the
    fixed JE-IRT configuration, selection.fixed_config) as one CoreSpace (an ensemble). `fit_fn`
    trains one member: the core `fit`, or a distributed drop-in (distributed.train.RayFitter)."""
    config = config or fixed_config("jeirt")
    train, val = prep.pairs("train"), prep.pairs("val")
    results = [fit_fn(prep.X, prep.data.n_models, train, val, config.model_copy(update={"seed": seed + i}),
                      progress=progress) for i in range(members)]
    history = [{"seed": seed + i, "best_val_loss": r.best_val_loss, "best_epoch": r.best_epoch, "seconds": r.seconds,
                **r.notes} for i, r in enumerate(results)]
    return space_of(prep, [r.module for r in results], [config.model_copy(update={"seed": seed})],
                  {"recipe": "fixed", "members": history})


def searched_space(prep: Prepared, settings: SearchSettings, *, search_fn: SearchFn, storage: str | Path,
                   tracking_uri: str | None = None, progress: bool = True) -> CoreSpace:
    """JE-IRT's configuration searched on validation by `search_fn` (the Ray Tune driver,
    distributed.tune.run_search, passed in by the layer above); the best trials are the CoreSpace's
    members."""
    res = search_fn(prep, "jeirt", settings, storage=storage, tracking_uri=tracking_uri, progress=progress)
    return space_of(prep, res["members"], res["configs"], {"recipe": "searched", **_search_summary(res)})


def _search_summary(res: dict) -> dict:
    """What a searched space or method records of its search (members best first)."""
    ranked = rank_trials(res["trials"], res["settings"]["criterion"])
    return {"search": {"settings": res["settings"], "seconds": res["seconds"], "mlflow_run_id": res["mlflow_run_id"],
                       "completed": len(ranked), "trials": len(res["trials"]),
                       "failed": sum(1 for t in res["trials"] if t.get("error"))},
            "members": [{"best_val_loss": t["best"]["val_loss"], **t["best"], "epochs": t["epochs"],
                         "config": c.model_dump()} for c, t in zip(res["configs"], ranked)]}


def _space_predictor(space: CoreSpace, X):
    def predict(rows):
        return space.predict_proba(X[rows])
    return predict


def _modules_predictor(modules: list[torch.nn.Module], X: torch.Tensor):
    """Mean probability of one or more trained modules (MF's members, an IRT model)."""
    @torch.no_grad()
    def predict(rows):
        return np.mean([torch.sigmoid(m.eval().score_all(X[rows])).numpy() for m in modules], axis=0)
    return predict


def predictors(prep: Prepared, methods=METHODS, *, search: SearchSettings | None = None,
               search_storage: str | Path | None = None, tracking_uri: str | None = None,
               search_fn: SearchFn | None = None,
               jeirt_config: TrainConfig | None = None, members: int = JEIRT_MEMBERS, train_seed: int = 0,
               progress: bool = True, jeirt_fit: Callable[..., FitResult] = fit):
    """Yield (name, predict_all(question_rows) -> (n, n_models) probabilities, train seconds, info).

    With `search`, JE-IRT and matrix factorisation each get a configuration search of the same
    budget by `search_fn` (the Ray Tune driver; validation only) and are the ensemble of their
    best trials. Without it
    (the plain path), each is `members` seeds of a fixed configuration (`jeirt_config` or
    selection.fixed_config). `train_seed` seeds every trained method: plain members take seeds
    100*train_seed + i, a search's sampler takes train_seed. `jeirt_fit` trains plain JE-IRT
    members (the core `fit`, or Ray Train's drop-in)."""
    train = prep.pairs("train")
    q, m, y = train.q.numpy(), train.m.numpy(), train.y.numpy()
    n_models = prep.data.n_models
    if search is not None:
        if search_fn is None:
            raise TypeError("predictors: a search needs search_fn (distributed.tune.run_search)")
        search = search.model_copy(update={"seed": train_seed})
        search_storage = search_storage or paths.home() / "search"
    for name in methods:
        start = time.perf_counter()
        info: dict = {}
        if name == "jeirt":
            if search is not None:
                space = searched_space(prep, search, search_fn=search_fn, storage=search_storage,
                                       tracking_uri=tracking_uri, progress=progress)
            else:
                space = train_space(prep, jeirt_config, members, seed=100 * train_seed, progress=progress,
                                    fit_fn=jeirt_fit)
            predict = _space_predictor(space, prep.X)
            info = {"members": len(space.members), "recipe": space.metadata["recipe"],
                    "config": space.config.model_dump(), "space": space}
            if "search" in space.metadata:
                info["search"] = space.metadata["search"]
        elif name == "mf":
            if search is not None:
                res = search_fn(prep, "mf", search, storage=search_storage, tracking_uri=tracking_uri,
                                 progress=progress)
                modules, info = res["members"], {"recipe": "searched", **_search_summary(res)}
            else:
                cfg = fixed_config("mf")
                modules = [fit(prep.X, n_models, train, prep.pairs("val"), cfg.model_copy(
                    update={"seed": 100 * train_seed + i}), progress=progress).module for i in range(members)]
                info = {"recipe": "fixed", "config": cfg.model_dump()}
            predict = _modules_predictor(modules, prep.Xt)
            info["members"] = len(modules)
        elif name in ("irt1pl", "irt2pl"):
            r = fit(prep.X, n_models, train, prep.pairs("val"), TrainConfig(kind=name, seed=train_seed),
                  progress=progress)
            predict = _modules_predictor([r.module], prep.Xt)
        elif name == "knn":
            knn = KNN().fit(prep.X, n_models, q, m, y)
            val = prep.pairs("val")
            info = {"k": knn.select_k(prep.rows("val"), val.q.numpy(), val.m.numpy(), val.y.numpy())}
            predict = knn.predict_all
        elif name == "majority":
            maj = Majority().fit(n_models, q, m, y)
            predict = maj.predict_all
        else:
            raise ValueError(f"unknown method {name!r}; expected one of {METHODS}")
        yield name, predict, time.perf_counter() - start, info


def score_methods(prep: Prepared, methods=METHODS, spaces: dict | None = None, **kw) -> dict[str, dict]:
    """{method: {test_accuracy, auc, log_loss, train_seconds, ...}} on prep's test pairs, and on
    SYNTHETIC data `truth`: the generator's true probabilities (the ceiling). Pass a dict as
    `spaces` to get the trained JE-IRT CoreSpace back in it."""
    test = prep.pairs("test")
    rows = prep.rows("test")
    results = {}
    for name, predict, seconds, info in predictors(prep, methods, **kw):
        probs = predict(rows)
        if spaces is not None and "space" in info:
            spaces[name] = info["space"]
        results[name] = {**binary_metrics(pair_probs(probs, rows, test), test.y.numpy()),
                         "train_seconds": seconds, **{k: v for k, v in info.items() if k != "space"}}
    if "p_true" in prep.data.extra:
        # SYNTHETIC data knows each pair's true probability: the best any method can do there
        results["truth"] = {**binary_metrics(pair_probs(prep.data.extra["p_true"][rows], rows, test),
                                             test.y.numpy()), "train_seconds": 0.0}
    return results
