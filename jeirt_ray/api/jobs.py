"""The jobs, as plain functions that return their results: load and import data, train a space,
evaluate methods, register, the demo and the report. The CLI, the RayJob entrypoints, the
benchmarks and the tests call these; progress goes to the `jeirt` logger (the CLI shows it on
the terminal) and to progress bars.

Nothing here needs Ray on the plain path (`search=False, workers=None`); a search or
`workers=N` joins the cluster at RAY_ADDRESS or starts a local one.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Sequence

import pandas as pd

from ..core import paths
from ..data import ResponseData, Split, read_split
from ..encoders import DEFAULT_ENCODER

if TYPE_CHECKING:  # torch and the rest load when a job needs them: `jeirt data import` stays light
    from .space import Space
    from ..experiments.prepare import Prepared

log = logging.getLogger("jeirt.pipeline")
DataLike = ResponseData | str | Path | None
SplitLike = Split | pd.DataFrame | str | Path | None


# ---- data ---------------------------------------------------------------------------------------
def load_data(path: str | Path | None = None) -> ResponseData:
    """A dataset folder (the long format, EmbedLLM's CSVs, lm-evaluation-harness samples or HELM
    runs); None: the embedded SYNTHETIC dataset (simulated LLMs, not real results)."""
    from ..data import load_data as load
    from ..data.synthetic import generate
    if path is None:
        log.warning("no data given: using the embedded SYNTHETIC dataset (simulated LLMs, not real results)")
        return generate()
    return load(path)


def _data(data: DataLike) -> ResponseData:
    if isinstance(data, ResponseData):
        return data
    if data is not None and not isinstance(data, (str, Path)):
        raise TypeError(f"data must be a dataset folder, a ResponseData or None, not {type(data).__name__}: for "
                        f"frames, jr.ResponseData.from_frames(questions, responses, name=...)")
    return load_data(data)


class Imported(NamedTuple):
    data: ResponseData
    report: dict  # files read, items skipped (with where and why), near-duplicate model names


def import_results(format: str, src: str | Path, *, metrics: dict[str, str] | str | None = None,
                   filters: dict[str, str] | None = None, text_field: str | None = None,
                   texts: str | Path | None = None, texts_from_ids: bool | None = None,
                   names: dict[str, str] | str | Path | None = None, out: str | Path | None = None,
                   progress: bool = True) -> Imported:
    """Per-question results of another tool in the long format. `format`: `harness`
    (lm-evaluation-harness samples; `metrics` {task: metric}, `filters` {task: filter},
    `text_field`), `leaderboard` (the Open LLM Leaderboard's details, v1 and v2), `lighteval`
    (details parquet), `helm` (`metrics`: one metric name) or `pyirt` (`texts`: the question
    texts; `texts_from_ids`: the item ids are the texts, detected when neither is given).
    `names`: a model-name mapping ({name: canonical}, or a YAML/CSV file). With `out`, the data
    and `import_report.json` are written there."""
    from ..data.importers import HarnessOptions, import_results as run, read_mapping
    harness = HarnessOptions(metrics=metrics if isinstance(metrics, dict) else {}, filters=filters or {},
                             text_field=text_field)
    mapping = read_mapping(names) if isinstance(names, (str, Path)) else names
    data, report = run(format, src, harness=harness, metric=metrics if isinstance(metrics, str) else None,
                       texts=texts, texts_from_ids=texts_from_ids, mapping=mapping, progress=progress)
    if out is not None:
        data.save(out)
        (Path(out) / "import_report.json").write_text(json.dumps(report, indent=1))
    log.info("imported %s from %s file(s)", data.describe(), report["files"])
    return Imported(data, report)


def encode(data: DataLike = None, *, encoder: str = DEFAULT_ENCODER, replicas: int = 0, gpus_per_replica: float = 0.0,
           batch_size: int = 64) -> tuple[int, str]:
    """Embed every question into the on-disk cache, in this process or (`replicas` > 0) on Ray
    Data with that many encoder replicas; returns (vectors cached, encoder id)."""
    from ..encoders import EmbeddingCache, encode_cached, make_encoder
    d = _data(data)
    enc = make_encoder(encoder)
    if replicas > 0:
        from ..distributed import init_ray
        from ..distributed.encode import encode_with_ray
        init_ray()
        encode_with_ray(encoder, d.texts, paths.cache_dir(), replicas=replicas, gpus_per_replica=gpus_per_replica,
                        batch_size=batch_size)
    else:
        encode_cached(enc, d.texts, paths.cache_dir(), batch_size=batch_size)
    return len(EmbeddingCache(paths.cache_dir(), enc.encoder_id)), enc.encoder_id


# ---- training -----------------------------------------------------------------------------------
def prepare(data: DataLike, *, encoder: str = DEFAULT_ENCODER, seed: int = 0, split: SplitLike = None,
            partial_split: bool = False, finetune: str | None = None, encoder_lr: float = 3e-5,
            kind: str = "jeirt", fit_fn=None, progress: bool = True) -> Prepared:
    """The data, its split (`split`, else seeded 80/10/10 by question; a split that leaves
    questions out only with `partial_split=True`) and every question's embedding (cached under
    $JEIRT_HOME/cache). With `finetune` (top-K or all), the encoder's top layers are first
    trained end to end with a `kind` head on the training questions."""
    from ..encoders import make_encoder
    from ..experiments.prepare import prepare as embed, prepare_finetuned
    d = _data(data)
    log.info("%s", d.describe())
    chosen = read_split(split, d, partial_split) if split is not None else None
    if chosen is not None and chosen.info.get("unlisted_questions"):
        log.warning("the split leaves %s of %s questions out (partial_split): they take part in nothing",
                    chosen.info["unlisted_questions"], d.n_questions)
    if not finetune:
        prep = embed(d, make_encoder(encoder), seed=seed, split=chosen, cache_root=paths.cache_dir(), progress=progress)
    else:
        from ..model.finetune import FinetuneSettings, parse_layers
        settings = FinetuneSettings(layers=parse_layers(finetune), encoder_lr=encoder_lr)
        folder = paths.home() / "models" / "finetuned" / f"{d.name}-{kind}-{finetune}-seed{seed}"
        log.info("fine-tuning %s's %s layers with %s (encoder lr %g) into %s", encoder, finetune, kind, encoder_lr, folder)
        prep = prepare_finetuned(d, encoder, kind, settings, seed=seed, split=chosen, cache_root=paths.cache_dir(),
                                 folder=folder, fit_fn=fit_fn, progress=progress)
        f = prep.finetune
        log.info("fine-tuned %s of %s layers: best validation loss %.4f at epoch %s (%.0f s; hidden states %.0f s)",
                 f["layers"], f["of_layers"], f["best_val_loss"], f["best_epoch"], f["train_seconds"],
                 f["hidden_state_seconds"])
    return prep


def search_settings(trials: int | None = None, criterion: str = "val_loss", members: int | None = None, seed: int = 0):
    """The per-dataset search's settings (selection.SearchSettings); a pydantic ValidationError
    names a bad value."""
    from ..experiments.selection import SearchSettings
    return SearchSettings(trials=trials, criterion=criterion, seed=seed, **({"members": members} if members else {}))


def _search_kw(settings) -> dict:
    """What a search on Ray needs: the cluster, its storage, MLflow."""
    from ..distributed import init_ray
    from ..distributed.tune import run_search
    from ..tracking.registry import default_tracking_uri
    init_ray()
    log.info("searching configurations on Ray Tune (%s trials per method, ranked by %s); trials logged to MLflow "
             "at %s", settings.trials or "default number of", settings.criterion, default_tracking_uri())
    return {"search": settings, "search_storage": paths.home() / "search", "tracking_uri": default_tracking_uri(),
            "search_fn": run_search}


def ray_fitter(data_name: str, workers: int, gpus: bool = False, mlflow_run: str | None = None):
    """A Ray Train drop-in for the core `fit` (distributed.train.RayFitter): runs under
    $JEIRT_HOME/ray_results; with `mlflow_run` (a run name), rank 0 logs the epochs into a new
    MLflow run whose id the space records (and `register` then registers into)."""
    from ..distributed import init_ray
    from ..distributed.train import RayFitter
    init_ray()
    mlflow_cfg = None
    if mlflow_run:
        from ..tracking.runs import Tracker
        tracker = Tracker()
        mlflow_cfg = {"tracking_uri": tracker.tracking_uri, "run_id": tracker.new_run(mlflow_run)}
    prefix = f"{data_name}-{time.strftime('%Y%m%d-%H%M%S')}"
    storage = paths.home() / "ray_results"
    log.info("training on Ray Train: %s worker(s)%s; runs in %s/%s-*", workers, " with GPUs" if gpus else "",
             storage, prefix)
    return RayFitter(workers=workers, storage=storage, prefix=prefix, use_gpu=gpus, mlflow=mlflow_cfg)


def train(data: DataLike = None, *, encoder: str = DEFAULT_ENCODER, search: bool = True, members: int | None = None,
          workers: int | None = None, gpus: bool = False, finetune: str | None = None, encoder_lr: float = 3e-5,
          split: SplitLike = None, partial_split: bool = False, seed: int = 0, trials: int | None = None,
          criterion: str = "val_loss", held_out_benchmarks: int = 6, prices: str | Path | None = None,
          mlflow_run: str | None = None, out: str | Path | None = None,
          progress: bool = True) -> Space:
    """Train a JE-IRT space and choose its routing policy on validation questions.

    - `search=True` (default): JE-IRT's configuration searched on validation on Ray Tune
      (`trials`, ranked by `criterion`); the best `members` trials (default 5) are the ensemble.
    - `search=False`: `members` seeds (default 5) of the fixed configuration, in this process,
      or with `workers=N` each on Ray Train (`gpus`: one GPU per worker, nccl).
    - `finetune`: `top-K` or `all`, the encoder's top layers trained end to end first.
    - `split`: a user's own split (a DataFrame or CSV/Parquet of question_id,split, or a
      split.json); default: seeded 80/10/10 by question. A split that leaves questions out is
      refused unless `partial_split=True`.
    - `held_out_benchmarks`: the routing policy is chosen both on validation and with up to
      this many benchmarks held out of training in turn (one more training each), so that it
      also holds on benchmarks the space never saw; 0: on validation alone.
    - `prices`: a price table (CSV/YAML/JSON, USD per million tokens; routing.prices), stored
      with the space for its cost policies, with the answer lengths the data folder records
      (`outputs_meta.*`) per LLM and benchmark of the training questions.
    - `mlflow_run`: with `workers`, the name of an MLflow run that rank 0 logs the epochs into.
    - `out`: save the space there, with the split it was trained on (split.json).
    """
    from .space import Space
    from ..experiments.methods import JEIRT_MEMBERS, searched_space, train_space
    from ..experiments.routing_choice import tune_routing
    if workers is not None and search:
        log.info("workers= trains the fixed configuration on Ray Train: searching is off")
        search = False
    settings = search_settings(trials, criterion, members, seed) if search else None
    d = _data(data)
    fitter = ray_fitter(d.name, workers, gpus, mlflow_run) if workers is not None else None
    prep = prepare(d, encoder=encoder, seed=seed, split=split, partial_split=partial_split, finetune=finetune,
                   encoder_lr=encoder_lr, fit_fn=fitter if finetune else None, progress=progress)
    if settings is not None:
        kw = _search_kw(settings)
        space = searched_space(prep, settings, search_fn=kw["search_fn"], storage=kw["search_storage"],
                               tracking_uri=kw["tracking_uri"], progress=progress)
        space.metadata["mlflow_run_id"] = space.metadata["search"]["mlflow_run_id"]
    else:
        # members take seeds 100 * seed + i, as jr.evaluate's JE-IRT does: the same space for one seed
        space = train_space(prep, members=members or JEIRT_MEMBERS, seed=100 * seed, progress=progress,
                            **({"fit_fn": fitter} if fitter is not None else {}))
        space.metadata["mlflow_run_id"] = fitter.mlflow and fitter.mlflow["run_id"] if fitter is not None else None
    space.metadata["encoder"] = encoder if not prep.encoder_dir else None
    space, policy, _ = tune_routing(space, prep, held_out_benchmarks)
    log.info("routing policy chosen on %s validation questions: %s (router accuracy %.3f)",
             prep.split.questions(1).size, policy.model_dump(), space.metadata["routing_policy"]["val_accuracy"])
    if prices is not None:
        space.metadata |= price_metadata(prices, prep)
    space = Space.from_core(space)
    if out is not None:
        space.save(out)
        prep.split.save(Path(out) / "split.json", prep.data)
        log.info("saved the space (%s members, %s configuration, %s LLMs) and its split to %s", len(space.members),
                 space.metadata["recipe"], len(space.model_names), out)
    return space


def _prices_and_answers(prices: str | Path, prep):
    """(the price table resolved for the data's LLMs, each price's source said in one line; the
    answer tokens the data folder records as (matrix, what it says), or None)."""
    from ..routing.prices import PriceTable, read_answer_tokens, resolve_prices
    resolved = resolve_prices(prep.data.models, PriceTable.read(prices))
    log.info("%s", resolved.summary())
    folder = prep.data.extra.get("folder")
    return resolved, read_answer_tokens(folder, prep.data.models, prep.data.question_ids) if folder else None


def price_metadata(prices: str | Path, prep) -> dict:
    """The space's `prices` (resolved for its LLMs) and `answer_tokens` (from the data folder's
    recorded answer lengths, else the default)."""
    from ..routing.prices import OutputLengths
    resolved, answers = _prices_and_answers(prices, prep)
    lengths = OutputLengths.constant(prep.data.n_models) if answers is None else OutputLengths.from_matrix(
        answers[0], prep.split.questions(0), prep.data.benchmarks, answers[1])
    return {"prices": resolved.to_dict(), "answer_tokens": lengths.to_dict()}


def register(space: Space, name: str, *, alias: str | None = None, tracking_uri: str | None = None) -> int:
    """Register the space as a new version of `name` (into the MLflow run it was trained in, when
    it has one) and optionally point `alias` (e.g. champion) at it; returns the version."""
    from .space import Registry
    reg = Registry(tracking_uri)
    best_val = min(m["best_val_loss"] for m in space.metadata["members"])
    version = reg.register(space, name, {"best_member_val_loss": best_val}, run_id=space.metadata.get("mlflow_run_id"))
    log.info("registered as %s version %s in %s", name, version, reg.tracking_uri)
    if alias:
        reg.promote(name, version, alias)
        log.info("models:/%s@%s -> version %s", name, alias, version)
    return version


# ---- evaluation ---------------------------------------------------------------------------------
def evaluate(data: DataLike = None, *, methods: Sequence[str] | None = None, encoder: str = DEFAULT_ENCODER,
             search: bool = True, seed: int = 0, split: SplitLike = None, partial_split: bool = False,
             members: int | None = None,
             trials: int | None = None, criterion: str = "val_loss", finetune: str | None = None,
             encoder_lr: float = 3e-5, out: str | Path | None = None, progress: bool = True) -> dict[str, dict]:
    """Train every method in `methods` (default all: jeirt, mf, knn, majority, irt1pl, irt2pl) on one split
    and score it on the test questions: {method: {test_accuracy, auc, log_loss, train_seconds,
    ...}}; on SYNTHETIC data also `truth` (the generator's probabilities, the ceiling). With
    `search`, JE-IRT and MF each get a search of the same budget; with `finetune`, each
    fine-tunes its own copy of the encoder first. With `out`, the results are written there as
    JSON and the split next to them (`<out stem>.split.json`)."""
    from ..experiments.methods import JEIRT_MEMBERS, METHODS, score_methods as run
    methods = METHODS if methods is None else methods
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; expected some of {', '.join(METHODS)}")
    settings = search_settings(trials, criterion, members, seed) if search else None
    prep = prepare(data, encoder=encoder, seed=seed, split=split, partial_split=partial_split, progress=progress)
    kw = {"members": members or JEIRT_MEMBERS, "train_seed": seed, "progress": progress,
          **(_search_kw(settings) if settings is not None else {})}
    results: dict[str, dict] = {}
    for name in methods:
        if finetune and name in ("jeirt", "mf"):
            tuned = prepare(prep.data, encoder=encoder, seed=seed, split=prep.split, finetune=finetune,
                            encoder_lr=encoder_lr, kind=name, progress=progress)
            scored = run(tuned, [name], **kw)
            scored[name]["train_seconds"] += tuned.finetune["hidden_state_seconds"] + tuned.finetune["train_seconds"]
            scored[name]["finetune"] = tuned.finetune
            results.update(scored)  # on SYNTHETIC data also `truth`, the same for every method
        else:
            results.update(run(prep, [name], **kw))
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1))
        prep.split.save(out.with_name(out.stem + ".split.json"), prep.data)
        log.info("wrote %s and the split it used to %s", out, out.with_name(out.stem + ".split.json"))
    return results


# ---- the demo and the report -------------------------------------------------------------------
def demo(out: str | Path | None = None, *, encoder: str = DEFAULT_ENCODER, trials: int | None = None,
         name: str = "demo") -> dict:
    """The main job on the embedded SYNTHETIC dataset, on Ray: encode the questions (Ray Data),
    search JE-IRT's and MF's configurations (Ray Tune, the same budget), register the space and
    promote it to @champion, and compare every method with the generator's truth. Returns
    {"results", "closed" (the share of the majority-to-truth gap JE-IRT closes), "version",
    "out"}; writes results.json, the space and the data under `out`."""
    from ..data.synthetic import generate
    from ..distributed import init_ray
    from .space import Space
    from ..distributed.encode import encode_with_ray
    from ..encoders import make_encoder
    from ..experiments.methods import score_methods as run
    from ..experiments.prepare import prepare as embed
    from ..experiments.routing_choice import tune_routing
    out = Path(out) if out else paths.home() / "demo"
    data = generate()
    log.info("jeirt demo on the embedded %s", data.describe())
    init_ray()
    log.info("1/4 encoding the questions on Ray Data")
    encode_with_ray(encoder, data.texts, paths.cache_dir(), replicas=1)
    prep = embed(data, make_encoder(encoder), seed=0, cache_root=paths.cache_dir())  # all cached now
    log.info("2/4 searching JE-IRT's and MF's configurations on Ray Tune, training the baselines")
    spaces: dict = {}
    results = run(prep, spaces=spaces, **_search_kw(search_settings(trials)))
    space = spaces["jeirt"]
    space.metadata["mlflow_run_id"] = space.metadata["search"]["mlflow_run_id"]
    space.metadata["encoder"] = encoder
    gap = results["truth"]["test_accuracy"] - results["majority"]["test_accuracy"]
    closed = (results["jeirt"]["test_accuracy"] - results["majority"]["test_accuracy"]) / gap if gap > 0 else float("nan")
    space, _, _ = tune_routing(space, prep)
    space = Space.from_core(space)
    log.info("3/4 registering the space in MLflow")
    version = register(space, name, alias="champion")
    log.info("4/4 writing the results")
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    space.save(out / "space")
    prep.split.save(out / "space" / "split.json", data)
    data.save(out / "data")
    return {"results": results, "closed": closed, "version": version, "out": out}


def report(data: DataLike = None, *, out: str | Path, encoder: str = DEFAULT_ENCODER, seed: int = 0,
           members: int | None = None, costs: dict[str, float] | str | Path | None = None,
           prices: str | Path | None = None, studies: Sequence[str] | None = None) -> dict:
    """Run the paper's studies (analysis.report.STUDIES; default all) on one dataset and write
    report.md, report.html, the PNGs and results.json to `out`; logged to MLflow when
    MLFLOW_TRACKING_URI is set. `costs`: {LLM: price per call} or a JSON/CSV file for the routing
    study's curve (default: parameter counts read from the names); `prices`: a price table (USD
    per million tokens, routing.prices) for the `cost` study, the cost-accuracy frontier."""
    import os

    from ..analysis.report import STUDIES, run_report
    from ..experiments.methods import JEIRT_MEMBERS, train_space
    from ..routing.costs import load_costs, read_cost_table
    bad = sorted(set(studies or ()) - set(STUDIES))
    if bad:
        raise ValueError(f"unknown studies {bad}; known: {', '.join(STUDIES)}")
    prep = prepare(data, encoder=encoder, seed=seed)
    cost_array = None
    if costs is not None:
        table = read_cost_table(costs) if isinstance(costs, (str, Path)) else costs
        cost_array = load_costs(table, prep.data.models, str(costs) if isinstance(costs, (str, Path)) else "costs")
    space = train_space(prep, members=members or JEIRT_MEMBERS)
    llm_prices = answers = None
    if prices is not None:
        llm_prices, found = _prices_and_answers(prices, prep)
        answers = found[0] if found else None
    out = Path(out)
    results = run_report(prep, space, out, seed=seed, studies=list(studies) if studies else None, costs=cost_array,
                         prices=llm_prices, answer_tokens=answers)
    if os.environ.get("MLFLOW_TRACKING_URI"):
        from ..tracking.runs import Tracker
        tracker = Tracker()
        run_id = tracker.new_run(f"report-{prep.data.name}", experiment="jeirt-reports")
        tracker.log_artifacts(run_id, out, artifact_path="report")
        tracker.end_run(run_id)
        log.info("logged to MLflow at %s", os.environ["MLFLOW_TRACKING_URI"])
    log.info("wrote %s, %s, results.json and the PNGs", out / "report.md", out / "report.html")
    return results
