"""Every study of a population in one run (`benchmarks/population.py`): the known LLMs' space
trained on the plain path (and timed on Ray Train and swept on Ray Tune), prediction of held-out
questions, new LLMs from few answers, the leaderboard's scores, and routing in pools."""

from __future__ import annotations

import dataclasses
import resource
import tempfile
import time

import numpy as np
import pandas as pd

from ..data import ResponseData
from ..encoders import QuestionEncoder
from ..experiments.prepare import prepare
from ..experiments.selection import Domain, SearchSettings, fixed_config
from ..model.anchors import anchors_of
from ..model.onboarding import onboard
from ..model.space import answers_of
from ..routing.centroids import Centroids
from .leaderboard import bank_accuracy, fit_map, from_anchors, reconstruct
from .llms import LEADERBOARD, select_models, twins
from .onboarding import CHECKPOINTS, STRATEGIES, ItemBank2PL, onboard_one, summarise
from .pools import cost_study, pools_study
from .prediction import predict_methods, prediction_metrics

POOLS = {10: 20, 100: 10, 1000: 5}  # pool size: pools drawn


def _log(progress: bool, message: str) -> None:
    if progress:
        print(f"[population {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run_study(data: ResponseData, table: pd.DataFrame | None, new_names, encoder: QuestionEncoder, *, seed: int = 0,
              members: int = 1, onboard_llms: int = 200, train_workers: int = 2, tune_trials: int = 8,
              tune_epochs: int = 30, pools: dict[int, int] = POOLS, cache_root=None, progress: bool = True) -> dict:
    """The population report (see benchmarks/population.py for its keys). `new_names`: the new
    LLMs (never trained on); the rest are known. `onboard_llms`: how many new LLMs the onboarding
    studies run on (drawn by `seed`; the plan is a few ms a call, so all of them would take hours
    here). `train_workers` 0 / `tune_trials` 0 skip Ray Train's timing / the sweep."""
    new_names = np.asarray(new_names, dtype=str)
    known_names = np.array([m for m in data.models if m not in set(new_names)], dtype=str)
    known = select_models(data, known_names)
    out: dict = {"data": {"llms": int(data.n_models), "questions": int(data.n_questions),
                          "labels": int(data.n_responses), "known_llms": int(len(known_names)),
                          "new_llms": int(len(new_names))},
                 "timing": {}}
    timing = out["timing"]

    _log(progress, f"encoding {data.n_questions} questions with {encoder.encoder_id}")
    start = time.perf_counter()
    prep = prepare(known, encoder, seed=seed, cache_root=cache_root, progress=progress)
    timing["encode_s"] = time.perf_counter() - start

    _log(progress, f"training JE-IRT, MF, kNN and IRT on {len(known_names)} known LLMs (plain path)")
    rows = {part: prep.rows(part) for part in ("train", "val", "test")}
    probs, seconds, trained = predict_methods(prep, {"val": rows["val"], "test": rows["test"]}, members=members,
                                              seed=seed, progress=progress)
    space = trained["space"]
    timing.update(train_s=seconds["jeirt"], train_peak_rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
                  train_members=members, method_train_s=seconds)
    out["prediction"] = prediction_metrics(prep, {k: v["test"] for k, v in probs.items()}, rows["test"], seed=seed)

    timing.update(train_workers=train_workers, ray_train_s=None, tune_s=None, tune_trials=tune_trials)
    if train_workers:
        _log(progress, f"the same training on Ray Train, {train_workers} workers")
        timing["ray_train_s"], out["ray_train"] = _ray_train(prep, train_workers, seed, progress)
    if tune_trials:
        _log(progress, f"sweeping dimension and adapter width on Ray Tune, {tune_trials} trials")
        timing["tune_s"], out["tune"] = _sweep(prep, tune_trials, tune_epochs, seed, progress)

    labels = data.label_matrix()  # questions x every LLM (NaN unanswered)
    known_cols = pd.Index(data.models).get_indexer(known_names)
    new_cols = pd.Index(data.models).get_indexer(new_names)
    known_labels = labels[:, known_cols]

    _log(progress, "fitting the known LLMs' 2PL item bank (the irt baseline)")
    from ..analysis.irt import fit_2pl
    irt = fit_2pl(known.q_idx, known.m_idx, known.labels, known.n_questions, known.n_models)
    bank = ItemBank2PL(irt["a"], irt["b"])

    _log(progress, "sharpening JE-IRT's items by the known LLMs' answers")
    from .items import sharpen
    start = time.perf_counter()
    sharp = sharpen(space, prep.X, known_labels)
    timing["sharpen_s"] = time.perf_counter() - start

    # the space keeps its known LLMs' answers to every question (training kept those to its training
    # questions): what a space trained on all of their data holds, and what knn and irt use
    space = dataclasses.replace(space, answers=answers_of(
        known_labels[:, pd.Index(known_names).get_indexer(space.model_names)]))
    rng = np.random.default_rng(seed)
    enough = [c for c in new_cols if (~np.isnan(labels[:, c])).sum() >= max(CHECKPOINTS)]
    chosen = sorted(rng.choice(enough, size=min(onboard_llms, len(enough)), replace=False).tolist()) if enough else []
    _log(progress, f"onboarding {len(chosen)} new LLMs from 25-200 answers, five ways")
    runs = []
    start = time.perf_counter()
    for i, c in enumerate(chosen):
        runs.append(onboard_one(space, str(data.models[c]), labels[:, c], data.question_ids, data.benchmarks,
                                known_labels, bank, seed=seed + i, sharpened=sharp,
                                strategies=(*STRATEGIES, "vector")))
        if progress and (i + 1) % max(1, len(chosen) // 10) == 0:
            _log(progress, f"  {i + 1}/{len(chosen)} new LLMs ({(time.perf_counter() - start) / (i + 1):.1f} s each)")
    out["onboarding"] = summarise(runs, strategies=(*STRATEGIES, "vector", "sharpened"))
    timing["onboard_study_s_per_llm"] = (time.perf_counter() - start) / max(1, len(chosen))
    timing["onboard_s_per_llm"] = _onboard_time(space, prep.X, labels, new_cols[:20], seed)

    out["leaderboard"] = {}
    if table is not None and all(b in table.columns for b in LEADERBOARD):
        maps, floor = fit_map(bank_accuracy(known_labels, data.benchmarks), table.reindex(known_names))
        for key, part in (("leaderboard_map", "per_benchmark"), ("leaderboard_vector", "per_benchmark_vector"),
                          ("leaderboard_sharpened", "per_benchmark_sharpened")):
            estimated = np.array([[r[part].get(b, np.nan) for b in LEADERBOARD] for r in runs]).reshape(-1, 5)
            out.setdefault(key, {})["100"] = reconstruct(maps, estimated, table.reindex(data.models[chosen]),
                                                         floor=floor)
        anchors = anchors_of(space)
        if anchors is None:  # too few known LLMs for anchors: the default's accuracies through the map
            out["leaderboard"] = out["leaderboard_map"]
        else:  # the same new LLMs (all five benchmarks estimated), their first 100 anchors straight to the scores
            every = [i for i, r in enumerate(runs) if all(b in r["per_benchmark"] for b in LEADERBOARD)]
            asked = [anchors.within(np.flatnonzero(~np.isnan(labels[:, chosen[i]])), 100) for i in every]
            out["leaderboard"] = {"100": from_anchors(
                anchors, asked, [labels[r, chosen[i]] for r, i in zip(asked, every)],
                table.reindex(space.model_names), table.reindex(data.models[[chosen[i] for i in every]]))}

    _log(progress, "routing in pools of known LLMs on the test questions")
    test_l, val_l, train_l = (known_labels[rows[p]] for p in ("test", "val", "train"))
    complete = np.flatnonzero(~np.isnan(test_l).any(0) & ~np.isnan(val_l).any(0))
    bench = data.benchmarks
    routers = {k: (v["val"], v["test"]) for k, v in probs.items() if k != "irt"}
    out["routing"], out["routing_dedup"] = {}, {}
    kept = complete[twins(train_l[:, complete])]
    out["twins"] = {"eligible_llms": int(len(complete)), "after_dedup": int(len(kept)), "agreement": 0.97}
    # each question's benchmark as the served router tells it: its embedding's nearest centroid
    centroids = Centroids.fit(prep.X[rows["train"]], bench[rows["train"]])
    nearest = (np.array(centroids.nearest(prep.X[rows["val"]])), np.array(centroids.nearest(prep.X[rows["test"]])))
    out["nearest_benchmark_accuracy"] = float(np.mean(nearest[1] == bench[rows["test"]]))
    for size, n_pools in pools.items():
        for key, eligible in (("routing", complete), ("routing_dedup", kept)):
            if len(eligible) >= size:
                out[key][str(size)] = pools_study(test_l, val_l, train_l, bench[rows["test"]], bench[rows["train"]],
                                                  routers, eligible, size, n_pools, seed, nearest=nearest)
    out["routing_cost"], out["routing_cost_detail"] = {}, {}
    if table is not None and "params_b" in table.columns:
        params = table.reindex(known_names)["params_b"].to_numpy(dtype=float, copy=True)
        params[~(params > 0)] = np.nan  # -1: unknown size
        size = max((s for s in pools if len(complete) >= s), default=None)
        if size is not None:
            detail = cost_study(test_l, val_l, train_l, probs["jeirt"]["test"], probs["jeirt"]["val"], params,
                                complete, size, pools[size], seed)
            out["routing_cost"][str(size)] = detail["params_share"]
            out["routing_cost_detail"][str(size)] = detail
    return out


def _ray_train(prep, workers: int, seed: int, progress: bool) -> tuple[float, dict]:
    """One member of the fixed configuration on Ray Train with `workers` workers: its seconds, and
    its best validation loss (the plain path's is in the space's metadata)."""
    from ..distributed import init_ray
    from ..distributed.train import RayFitter
    init_ray()
    with tempfile.TemporaryDirectory() as storage:
        fitter = RayFitter(workers=workers, storage=storage, prefix="population")
        start = time.perf_counter()
        result = fitter(prep.X, prep.data.n_models, prep.pairs("train"), prep.pairs("val"),
                        fixed_config("jeirt").model_copy(update={"seed": seed}), progress=progress)
        took = time.perf_counter() - start
    return took, {"workers": workers, "best_val_loss": result.best_val_loss, "best_epoch": result.best_epoch}


def _sweep(prep, trials: int, max_epochs: int, seed: int, progress: bool) -> tuple[float, dict]:
    """Ray Tune over the dimension and the adapter's width (ASHA stops poor trials early)."""
    from ..distributed import init_ray
    from ..distributed.tune import run_search
    init_ray()
    d = prep.X.shape[1]
    space = {"dim": Domain(choice=[32, 64, 128, 256]), "hidden": Domain(choice=[d, 2 * d, 4 * d])}
    fixed = fixed_config("jeirt").model_dump(exclude={"kind", "dim", "hidden", "max_epochs", "patience", "seed"})
    settings = SearchSettings(trials=trials, max_epochs=max_epochs, members=1, seed=seed, grace_period=3)
    with tempfile.TemporaryDirectory() as storage:
        start = time.perf_counter()
        res = run_search(prep, "jeirt", settings, storage=storage, space=space, base=fixed, progress=progress)
        took = time.perf_counter() - start
    done = [t for t in res["trials"] if t.get("completed")]
    return took, {"trials": len(res["trials"]), "completed": len(done),
                  "stopped_by_asha": sum(1 for t in res["trials"] if not t.get("completed") and not t.get("error")),
                  "best": {k: res["configs"][0].model_dump()[k] for k in ("dim", "hidden")} if res["configs"] else None,
                  "best_val_loss": min((t["best"]["val_loss"] for t in done), default=None)}


def _onboard_time(space, X: np.ndarray, labels: np.ndarray, cols: np.ndarray, seed: int, answers: int = 100) -> float:
    """Seconds to fit one new LLM's vector from `answers` of its answers (what `jeirt onboard`
    and POST /v1/onboard do), averaged over the LLMs `cols`."""
    rng = np.random.default_rng(seed)
    took = []
    for c in cols:
        rows = np.flatnonzero(~np.isnan(labels[:, c]))
        if len(rows) < answers:
            continue
        at = rng.choice(rows, size=answers, replace=False)
        start = time.perf_counter()
        onboard(space, f"new-{c}", X[at], labels[at, c], holdout=0)
        took.append(time.perf_counter() - start)
    return float(np.mean(took)) if took else None
