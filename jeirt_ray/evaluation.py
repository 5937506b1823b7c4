"""Train every method on the same split and compare them on the test questions."""

from __future__ import annotations

import time
from typing import Callable

import torch

from .experiment import Prepared, pair_probs
from .model.baselines import KNN, Majority
from .model.metrics import binary_metrics
from .model.space import Space
from .model.train import FitResult, TrainConfig, fit

METHODS = ("jeirt", "mf", "knn", "majority", "irt1pl", "irt2pl")
# JE-IRT recipes (README, "How the defaults were chosen"). Which one a dataset gets is decided
# by the validation loss of each recipe's first seed: heavy regularisation wins on large real
# data (mmlu_pro), a small light model on small data (the synthetic demo).
JEIRT_RECIPES = {
    "regularised": TrainConfig(kind="jeirt", dim=64, hidden=384, dropout=0.1, input_dropout=0.8, lr=1e-3,
                               weight_decay=0.05),
    "light": TrainConfig(kind="jeirt", dim=16, dropout=0.1, input_dropout=0.0, lr=3e-3, weight_decay=1e-4),
}
JEIRT_MEMBERS = 5
# Matrix factorisation gets its dimension chosen on validation from this grid.
MF_DIMS = (64, 128, 256)


def train_space(prep: Prepared, config: TrainConfig | None = None, members: int = JEIRT_MEMBERS, seed: int = 0,
                progress: bool = True, fit_fn: Callable[..., FitResult] = fit) -> Space:
    """Train `members` seeds (seed, seed + 1, ...) of one recipe into one Space (an ensemble).
    Without `config`, the recipe is chosen from JEIRT_RECIPES by the validation loss of its
    first seed, which is kept as member 0. `fit_fn` trains one member: the core `fit`, or a
    distributed drop-in (distributed.train.RayFitter)."""
    train, val = prep.pairs("train"), prep.pairs("val")

    def run(cfg: TrainConfig, i: int):
        return fit_fn(prep.X, prep.data.n_models, train, val, cfg.model_copy(update={"seed": seed + i}),
                      progress=progress)

    if config is None:
        trials = {name: run(recipe, 0) for name, recipe in JEIRT_RECIPES.items()}
        recipe = min(trials, key=lambda name: trials[name].best_val_loss)
        config, results = JEIRT_RECIPES[recipe], [trials[recipe]]
        chosen = {"recipe": recipe, "recipe_val_loss": {k: r.best_val_loss for k, r in trials.items()}}
    else:
        results, chosen = [], {"recipe": "given"}
    results += [run(config, i) for i in range(len(results), members)]
    history = [{"seed": seed + i, "best_val_loss": r.best_val_loss, "best_epoch": r.best_epoch, "seconds": r.seconds,
                **r.notes} for i, r in enumerate(results)]
    return Space([r.module for r in results], config.model_copy(update={"seed": seed}), prep.encoder_id,
                 prep.X.shape[1], prep.data.models.tolist(), prep.data.question_ids.tolist(),
                 metadata={"data": prep.data.name, "data_fingerprint": prep.data.fingerprint(),
                           "split": {"kind": prep.split.kind, "seed": prep.split.seed}, "members": history,
                           **chosen},
                 question_embeddings=prep.X, question_benchmarks=prep.data.benchmarks.tolist())


def _space_predictor(space: Space, X):
    def predict(rows):
        return space.predict_proba(X[rows])
    return predict


def _module_predictor(module: torch.nn.Module, X: torch.Tensor):
    @torch.no_grad()
    def predict(rows):
        return torch.sigmoid(module.eval().score_all(X[rows])).numpy()
    return predict


def predictors(prep: Prepared, methods=METHODS, *, jeirt_config: TrainConfig | None = None,
               jeirt_members: int = JEIRT_MEMBERS, train_seed: int = 0, progress: bool = True,
               jeirt_fit: Callable[..., FitResult] = fit):
    """Yield (name, predict_all(question_rows) -> (n, n_models) probabilities, train seconds, info).
    `train_seed` seeds every trained method (JE-IRT members take seeds 100*train_seed + i).
    Without `jeirt_config`, JE-IRT's recipe is chosen on validation (see train_space);
    `jeirt_fit` trains its members (the core `fit`, or Ray Train's drop-in)."""
    train = prep.pairs("train")
    q, m, y = train.q.numpy(), train.m.numpy(), train.y.numpy()
    n_models = prep.data.n_models
    for name in methods:
        start = time.perf_counter()
        info: dict = {}
        if name == "jeirt":
            space = train_space(prep, jeirt_config, jeirt_members, seed=100 * train_seed, progress=progress,
                                fit_fn=jeirt_fit)
            predict = _space_predictor(space, prep.X)
            info = {"members": jeirt_members, "recipe": space.metadata["recipe"], "config": space.config.model_dump(),
                    "space": space}
        elif name == "mf":
            best = None
            for dim in MF_DIMS:
                cfg = TrainConfig(kind="mf", dim=dim, seed=train_seed)
                r = fit(prep.X, n_models, train, prep.pairs("val"), cfg, progress=progress)
                if best is None or r.best_val_loss < best[0]:
                    best = (r.best_val_loss, dim, r.module)
            mod = best[2]
            predict = _module_predictor(mod, prep.Xt)
            info = {"dim": best[1], "chosen_from": list(MF_DIMS)}
        elif name in ("irt1pl", "irt2pl"):
            r = fit(prep.X, n_models, train, prep.pairs("val"), TrainConfig(kind=name, seed=train_seed),
                  progress=progress)
            predict = _module_predictor(r.module, prep.Xt)
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


def evaluate(prep: Prepared, methods=METHODS, spaces: dict | None = None, **kw) -> dict[str, dict]:
    """{method: {test_accuracy, auc, log_loss, train_seconds, ...}} on prep's test pairs.
    Pass a dict as `spaces` to get the trained JE-IRT Space back in it."""
    test = prep.pairs("test")
    rows = prep.rows("test")
    results = {}
    for name, predict, seconds, info in predictors(prep, methods, **kw):
        probs = predict(rows)
        if spaces is not None and "space" in info:
            spaces[name] = info["space"]
        results[name] = {**binary_metrics(pair_probs(probs, rows, test), test.y.numpy()),
                         "train_seconds": seconds, **{k: v for k, v in info.items() if k != "space"}}
    return results
