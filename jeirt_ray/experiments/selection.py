"""Choosing a method's configuration per dataset, on the validation split only.

`SearchSettings` says how much to search and how to rank trials; `search_space` gives the
domains (the same grammar as the YAML sweeps) for JE-IRT and for matrix factorisation, sized
from the data; `rank_trials` and `ensemble_members` turn finished trials into the members of
one ensemble. The search itself runs on Ray Tune (`distributed/tune.py`); this module holds
no Ray code, so the choices are testable without a cluster.

How the defaults were chosen (leave one dataset out over ../shared/data) is in
docs/results/selection.md; `benchmarks/across_datasets.py` measures them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..model.train import TrainConfig

CRITERIA = ("val_loss", "val_accuracy", "val_auc")
_DOMAINS = ("grid", "choice", "uniform", "loguniform", "randint")


class Domain(BaseModel):
    """One searched field's values: a sweep YAML's `search` entries and `search_space`'s."""

    model_config = ConfigDict(extra="forbid")
    grid: list | None = None
    choice: list | None = None
    uniform: tuple[float, float] | None = None
    loguniform: tuple[float, float] | None = None
    randint: tuple[int, int] | None = None

    @model_validator(mode="after")
    def one_domain(self):
        given = [k for k in _DOMAINS if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(_DOMAINS)} (got {given or 'none'})")
        return self

    def to_tune(self):
        from ray import tune
        kind = next(k for k in _DOMAINS if getattr(self, k) is not None)
        value = getattr(self, kind)
        return {"grid": tune.grid_search, "choice": tune.choice}[kind](value) if kind in ("grid", "choice") \
            else getattr(tune, kind)(*value)


class SearchSettings(BaseModel):
    """The search budget and the selection rule. `trials=None` scales with the data
    (`default_trials`); the budget is the same for every method searched."""

    trials: int | None = Field(None, ge=1, description="configurations tried; default: scaled with the data")
    max_epochs: int = Field(60, ge=2, description="epochs of a trial that is never stopped")
    patience: int = Field(8, ge=1)
    grace_period: int = Field(6, ge=1, description="epochs before ASHA may stop a trial")
    reduction_factor: float = Field(3, gt=1)
    concurrent: int | None = Field(None, ge=1, description="trials at once; default: one per CPU")
    gpus_per_trial: float = Field(0.0, ge=0, description="GPU share of each trial (0: CPU; 0.25: four a GPU)")
    members: int = Field(5, ge=1, description="the best trials kept as the ensemble")
    criterion: Literal["val_loss", "val_accuracy", "val_auc"] = "val_loss"
    scheduler: Literal["asha", "fifo"] = Field("asha", description="asha: stop poor trials early; fifo: run all")
    seed: int = 0


def default_trials(n_train_pairs: int) -> int:
    """Trials for a dataset: more where a trial is cheap, fewer where it is not, so that the
    search stays within minutes on a small machine (mmlu_pro, 300k training pairs: 24)."""
    if n_train_pairs <= 100_000:
        return 32
    if n_train_pairs <= 1_000_000:
        return 24
    return 16


def question_batches(n_train_questions: int) -> list[int]:
    """Distinct questions per step: at least 8 steps per epoch, whatever the data's size."""
    sizes = [b for b in (16, 32, 64, 128, 256, 512, 1024) if 8 * b <= n_train_questions]
    return sizes[-4:] if sizes else [max(1, n_train_questions // 8)]


def search_space(kind: str, in_dim: int, n_train_questions: int) -> dict[str, Domain]:
    """The domains searched for `kind` ("jeirt" or "mf"), from a small to a large model and
    from no to heavy regularisation; the optimiser's part is the same for both methods."""
    common = {
        "lr": Domain(loguniform=(3e-4, 5e-3)),
        "weight_decay": Domain(loguniform=(1e-5, 0.1)),
        "schedule": Domain(choice=["constant", "cosine"]),
        "question_batch": Domain(choice=question_batches(n_train_questions)),
        "dropout": Domain(uniform=(0.0, 0.6)),
        "dim": Domain(choice=[16, 32, 64, 128, 256, 512]),
    }
    if kind == "jeirt":
        return {**common, "hidden": Domain(choice=[in_dim, 2 * in_dim, 4 * in_dim]),
                "input_dropout": Domain(choice=[0.0, 0.25, 0.5, 0.8])}
    if kind == "mf":
        return common
    raise ValueError(f"no search space for {kind!r}; expected jeirt or mf")


def base_config(kind: str, settings: SearchSettings) -> dict:
    """The TrainConfig fields every trial shares."""
    return {"kind": kind, "max_epochs": settings.max_epochs, "patience": settings.patience}


def criterion_value(row: dict, criterion: str) -> float:
    """A trial's score to minimise (accuracy and AUC are negated)."""
    return row[criterion] if criterion == "val_loss" else -row[criterion]


def rank_trials(trials: list[dict], criterion: str) -> list[dict]:
    """Completed trials (each with `best`: its metrics at its best epoch), best first."""
    done = [t for t in trials if t.get("completed")]
    return sorted(done, key=lambda t: criterion_value(t["best"], criterion))


def ensemble_members(trials: list[dict], settings: SearchSettings) -> list[dict]:
    return rank_trials(trials, settings.criterion)[:settings.members]


def fixed_config(kind: str) -> TrainConfig:
    """The plain path's configuration (no search, no Ray): quick use and tests."""
    if kind == "jeirt":
        return TrainConfig(kind="jeirt", dim=256, dropout=0.5, input_dropout=0.0, lr=1e-3, weight_decay=0.01,
                           schedule="cosine", max_epochs=40, patience=6, question_batch=64)
    return TrainConfig(kind=kind, dim=128, dropout=0.1, lr=1e-3, weight_decay=1e-4, schedule="cosine",
                       max_epochs=40, patience=6, question_batch=64)
