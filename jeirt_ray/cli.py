"""`jeirt <command>`: one Typer app for the whole project."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from . import logs, paths

app = typer.Typer(help="JE-IRT for LLMs: embed LLMs and questions in one space, evaluate, route.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
data_app = typer.Typer(help="Import, generate and check response data.", no_args_is_help=True)
app.add_typer(data_app, name="data")
registry_app = typer.Typer(help="The MLflow registry of trained spaces (MLFLOW_TRACKING_URI, default "
                                "sqlite under $JEIRT_HOME).", no_args_is_help=True)
app.add_typer(registry_app, name="registry")
console = Console()

DataOpt = typer.Option(None, "--data", help="dataset folder (long format or EmbedLLM CSVs); "
                                            "default: the embedded SYNTHETIC dataset")
EncoderOpt = typer.Option("all-MiniLM-L6-v2", "--encoder",
                          help="sentence-transformers name or path (default: bundled all-MiniLM-L6-v2), "
                               "or 'hashing' for the fast test encoder")


@app.callback()
def _options(ctx: typer.Context,
             verbose: bool = typer.Option(False, "--verbose", "-v", help="also show Ray's, MLflow's and the other "
                                          "libraries' log lines here (they always go to the log file)"),
             debug: bool = typer.Option(False, "--debug", help="verbose, and show the traceback of a failure")):
    """JE-IRT for LLMs: embed LLMs and questions in one space, evaluate, route."""
    logs.setup(ctx.invoked_subcommand or "jeirt", verbose=verbose, debug=debug)


@contextlib.contextmanager
def _one_line(*errors: type[Exception], code: int = 1, prefix: str = ""):
    """Expected failures (`errors`) end the command with one red line and exit `code`, no traceback
    (`jeirt --debug ...` shows it)."""
    try:
        yield
    except errors as e:
        if logs.State.debug:
            console.print_exception()
        console.print(f"[red]{prefix}{e}[/red]")
        raise typer.Exit(code)


def _load(data: Optional[Path]):
    from .data import DataError, load_data
    from .data.synthetic import generate
    if data is None:
        d = generate()
        console.print("[yellow]No --data given: using the embedded SYNTHETIC dataset "
                      "(simulated LLMs, not real results).[/yellow]")
        return d
    try:
        return load_data(data)
    except DataError as e:
        console.print(f"[red]bad input:[/red] {e}")
        raise typer.Exit(2)


def _prepare(data: Optional[Path], encoder: str, seed: int):
    from .encoders import make_encoder
    from .encoders.sentence import EncoderError
    from .experiment import prepare
    d = _load(data)
    console.print(d.describe())
    with _one_line(EncoderError, code=2):
        return prepare(d, make_encoder(encoder), seed=seed, cache_root=paths.cache_dir())


FinetuneOpt = typer.Option(None, "--finetune", help="train the encoder's top K transformer layers end to end with "
                           "the method (top-K, e.g. top-2, or all); the fine-tuned encoder is saved with the space")
EncoderLrOpt = typer.Option(3e-5, "--encoder-lr", help="with --finetune: the encoder layers' learning rate")


def _finetuned(d, encoder: str, kind: str, layers: str, encoder_lr: float, seed: int, fit_fn=None):
    """Prepared data whose embeddings come from `encoder` fine-tuned end to end with a `kind`
    head on the training questions (saved under $JEIRT_HOME/models/finetuned)."""
    from .encoders.sentence import EncoderError
    from .experiment import prepare_finetuned
    from .model.finetune import FinetuneSettings, parse_layers
    try:
        settings = FinetuneSettings(layers=parse_layers(layers), encoder_lr=encoder_lr)
    except ValueError as e:
        console.print(f"[red]bad option:[/red] {str(e).splitlines()[0]}")
        raise typer.Exit(2)
    folder = paths.home() / "models" / "finetuned" / f"{d.name}-{kind}-{layers}-seed{seed}"
    console.print(f"fine-tuning {encoder}'s {layers} layers with {kind} (encoder lr {encoder_lr:g}) into {folder}")
    with _one_line(EncoderError, ValueError, code=2):
        prep = prepare_finetuned(d, encoder, kind, settings, seed=seed, cache_root=paths.cache_dir(),
                                 folder=folder, fit_fn=fit_fn)
    f = prep.finetune
    console.print(f"fine-tuned {f['layers']} of {f['of_layers']} layers: best validation loss {f['best_val_loss']:.4f} "
                  f"at epoch {f['best_epoch']} ({f['train_seconds']:.0f} s; hidden states {f['hidden_state_seconds']:.0f} s)")
    return prep


def _results_table(results: dict, title: str) -> Table:
    table = Table(title=title)
    for col in ("method", "test acc", "AUC", "log-loss", "train s"):
        table.add_column(col, justify="left" if col == "method" else "right")
    for name, r in results.items():
        table.add_row(name, f"{r['test_accuracy']:.4f}", f"{r['auc']:.4f}", f"{r['log_loss']:.4f}",
                      f"{r['train_seconds']:.1f}")
    return table


SearchOpt = typer.Option(True, "--search/--fixed",
                         help="choose JE-IRT's (and MF's) configuration on validation with a Ray Tune search "
                              "(default), or train the fixed configuration in this process (quick, no Ray)")
TrialsOpt = typer.Option(None, "--trials", help="configurations per search (default: scaled with the data)")
CriterionOpt = typer.Option("val_loss", "--criterion", help="rank trials by val_loss, val_accuracy or val_auc")


def _search_settings(search: bool, trials: Optional[int], criterion: str, members: Optional[int]):
    """SearchSettings for --search (None for --fixed), or a one-line error naming the bad value."""
    from pydantic import ValidationError

    from .selection import SearchSettings
    if not search:
        return None
    try:
        return SearchSettings(trials=trials, criterion=criterion,
                              **({"members": members} if members else {}))
    except ValidationError as e:
        err = e.errors()[0]
        console.print(f"[red]bad option --{err['loc'][0]}:[/red] {err['msg']}")
        raise typer.Exit(2)


def _search_kw(settings) -> dict:
    """What evaluation.predictors needs to search on Ray: the cluster, storage, MLflow."""
    if settings is None:
        return {}
    from .distributed import init_ray
    from .registry import default_tracking_uri
    init_ray()
    console.print(f"searching configurations on Ray Tune ({settings.trials or 'default number of'} trials per "
                  f"method, ranked by {settings.criterion}); trials logged to MLflow at {default_tracking_uri()}")
    return {"search": settings, "search_storage": paths.home() / "search", "tracking_uri": default_tracking_uri()}


@app.command()
def evaluate(data: Optional[Path] = DataOpt, encoder: str = EncoderOpt,
             seed: int = typer.Option(0, help="the split seed (by question, 80/10/10)"),
             methods: str = typer.Option(",".join(("jeirt", "mf", "knn", "majority", "irt1pl", "irt2pl")),
                                         help="comma-separated subset"),
             search: bool = SearchOpt, trials: Optional[int] = TrialsOpt, criterion: str = CriterionOpt,
             members: int = typer.Option(None, help="ensemble size: the best trials of a search (default 5), or "
                                                    "seeds of the fixed configuration (default 5)"),
             finetune: Optional[str] = FinetuneOpt, encoder_lr: float = EncoderLrOpt,
             out: Optional[Path] = typer.Option(None, help="write the results as JSON here")):
    """Train every method on one split by question (80/10/10) and compare them on the test set.
    With --finetune, JE-IRT and MF each fine-tune their own copy of the encoder first (the same
    way), and the other methods use the frozen encoder."""
    from .evaluation import JEIRT_MEMBERS, evaluate as run
    settings = _search_settings(search, trials, criterion, members)
    prep = _prepare(data, encoder, seed)
    names = [m.strip() for m in methods.split(",") if m.strip()]
    kw = {"members": members or JEIRT_MEMBERS, "train_seed": seed, **_search_kw(settings)}
    results = {}
    for name in names:
        if finetune and name in ("jeirt", "mf"):
            tuned = _finetuned(prep.data, encoder, name, finetune, encoder_lr, seed)
            scored = run(tuned, [name], **kw)
            scored[name]["train_seconds"] += tuned.finetune["hidden_state_seconds"] + tuned.finetune["train_seconds"]
            scored[name]["finetune"] = tuned.finetune
            results.update(scored)  # on SYNTHETIC data also `truth`, the same for every method
        else:
            results.update(run(prep, [name], **kw))
    title = f"{'SYNTHETIC ' if prep.data.synthetic else ''}{prep.data.name}, split by question, seed {seed}"
    console.print(_results_table(results, title))
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1))
        split_file = out.with_name(out.stem + ".split.json")
        prep.split.save(split_file, prep.data)
        console.print(f"wrote {out} and the split it used to {split_file}")


@app.command()
def demo(out: Path = typer.Option(None, help="output folder (default: $JEIRT_HOME/demo)"),
         encoder: str = EncoderOpt, trials: Optional[int] = TrialsOpt,
         name: str = typer.Option("demo", help="the registered model name")):
    """The main job on the embedded SYNTHETIC dataset, on Ray: encode the questions (Ray Data),
    search JE-IRT's and MF's configurations (Ray Tune, the same budget), register the space in
    MLflow and promote it to @champion, then compare every method with the generator's truth. A
    few minutes on a laptop."""
    from .data.synthetic import generate
    from .distributed import init_ray
    from .distributed.encode import encode_with_ray
    from .encoders import make_encoder
    from .evaluation import evaluate as run
    from .experiment import prepare
    out = out or paths.home() / "demo"
    data = generate()
    console.print(f"[bold]jeirt demo[/bold] on the embedded {data.describe()}")
    console.print("[yellow]SYNTHETIC: simulated LLMs drawn from a known JE-IRT geometry, not real results. "
                  "Use --data with `jeirt evaluate` / `jeirt train` for real data.[/yellow]")
    init_ray()
    console.print("[bold]1/4[/bold] encoding the questions on Ray Data")
    encode_with_ray(encoder, data.texts, paths.cache_dir(), replicas=1)
    prep = prepare(data, make_encoder(encoder), seed=0, cache_root=paths.cache_dir())  # all cached now
    console.print("[bold]2/4[/bold] searching JE-IRT's and MF's configurations on Ray Tune, training the baselines")
    spaces: dict = {}
    results = run(prep, spaces=spaces, **_search_kw(_search_settings(True, trials, "val_loss", None)))
    space = spaces["jeirt"]
    space.metadata["mlflow_run_id"] = space.metadata["search"]["mlflow_run_id"]
    console.print(_results_table(results, "SYNTHETIC data, split by question (80/10/10), seed 0"))
    gap = results["truth"]["test_accuracy"] - results["majority"]["test_accuracy"]
    closed = (results["jeirt"]["test_accuracy"] - results["majority"]["test_accuracy"]) / gap if gap > 0 else float("nan")
    console.print(f"`truth` is the generator's own probabilities: no method can beat it. JE-IRT closes {closed:.0%} "
                  f"of the distance from the per-LLM majority to it.")
    _tune_routing(space, prep)
    console.print("[bold]3/4[/bold] registering the space in MLflow")
    _register(space, name, "champion")
    console.print("[bold]4/4[/bold] writing the results")
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    space.save(out / "space")
    prep.split.save(out / "space" / "split.json", data)
    data.save(out / "data")
    from .registry import default_tracking_uri
    console.print(f"wrote {out / 'results.json'}, the space in {out / 'space'} and the SYNTHETIC data in "
                  f"{out / 'data'}.\nLook at the runs: mlflow ui --backend-store-uri {default_tracking_uri()}"
                  f"\nThe registered space: jeirt registry list {name}")


WorkersOpt = typer.Option(None, "--workers", help="train on Ray Train with this many workers (0: Train's "
                                                   "local mode, in this process); default: plain single process")


@app.command()
def train(data: Optional[Path] = DataOpt, encoder: str = EncoderOpt,
          seed: int = typer.Option(0, help="the split seed (by question, 80/10/10)"),
          search: bool = SearchOpt, trials: Optional[int] = TrialsOpt, criterion: str = CriterionOpt,
          members: int = typer.Option(None, help="ensemble size (best trials of the search, or seeds)"),
          workers: Optional[int] = WorkersOpt,
          gpus: bool = typer.Option(False, "--gpus", help="one GPU per Ray Train worker (nccl)"),
          out: Optional[Path] = typer.Option(None, help="folder to save the space in "
                                                        "(default: $JEIRT_HOME/spaces/<data name>)"),
          register: Optional[str] = typer.Option(None, help="also register the space under this name in MLflow"),
          promote: Optional[str] = typer.Option(None, help="with --register: point this alias at the new version"),
          finetune: Optional[str] = FinetuneOpt, encoder_lr: float = EncoderLrOpt):
    """Train a JE-IRT space and save it as safetensors + JSON: the ensemble of the best trials of a
    configuration search on Ray Tune (default), or the fixed configuration (--fixed) in this
    process or, with --workers N, on Ray Train."""
    from .evaluation import JEIRT_MEMBERS
    if workers is not None and search:
        console.print("--workers trains the fixed configuration on Ray Train: searching is off (--fixed)")
        search = False
    settings = _search_settings(search, trials, criterion, members)
    if finetune:
        d = _load(data)
        console.print(d.describe())
        fitter = _ray_fitter(d.name, workers, gpus, None) if workers is not None else None
        prep = _finetuned(d, encoder, "jeirt", finetune, encoder_lr, seed, fit_fn=fitter)
    else:
        prep = _prepare(data, encoder, seed)
    if settings is not None:
        from .evaluation import searched_space
        kw = _search_kw(settings)
        space = searched_space(prep, settings.model_copy(update={"seed": seed}), storage=kw["search_storage"],
                               tracking_uri=kw["tracking_uri"])
        space.metadata["mlflow_run_id"] = space.metadata["search"]["mlflow_run_id"] if register else None
    else:
        space = _train_space(prep, members or JEIRT_MEMBERS, workers, gpus, register)
    _tune_routing(space, prep)
    out = out or paths.home() / "spaces" / prep.data.name
    space.save(out)
    prep.split.save(out / "split.json", prep.data)
    console.print(f"saved the space ({len(space.members)} members, {space.metadata['recipe']} configuration, "
                  f"{len(space.model_names)} LLMs) to {out}")
    if register:
        _register(space, register, promote)


def _tune_routing(space, prep) -> None:
    """Choose the routing policy on validation questions; it is saved with the space and is what
    the Serve router applies by default (policy `tuned`)."""
    from .routing.policies import tune_routing
    policy, _ = tune_routing(space, prep)
    console.print(f"routing policy chosen on {prep.split.questions(1).size} validation questions: "
                  f"{policy.model_dump()} (router accuracy {space.metadata['routing_policy']['val_accuracy']:.3f})")


def _train_space(prep, members: int, workers: Optional[int], gpus: bool, register: Optional[str]):
    """train_space in this process, or with every member a Ray Train run logging to MLflow."""
    from .evaluation import train_space
    if workers is None:
        return train_space(prep, members=members)
    fitter = _ray_fitter(prep.data.name, workers, gpus, register)
    space = train_space(prep, members=members, fit_fn=fitter)
    space.metadata["mlflow_run_id"] = fitter.mlflow and fitter.mlflow["run_id"]
    return space


def _ray_fitter(data_name: str, workers: int, gpus: bool, register: Optional[str]):
    """A RayFitter whose runs go under $JEIRT_HOME/ray_results and, when the space is to be
    registered, whose epochs are logged (by rank 0) into the MLflow run it will be registered in."""
    import time

    from .distributed import init_ray
    from .distributed.train import RayFitter
    from .registry import Registry
    init_ray()
    mlflow_cfg = None
    if register:
        reg = Registry()
        mlflow_cfg = {"tracking_uri": reg.tracking_uri, "run_id": reg.new_run(f"train-{register}")}
    prefix = f"{data_name}-{time.strftime('%Y%m%d-%H%M%S')}"
    storage = paths.home() / "ray_results"
    console.print(f"training on Ray Train: {workers} worker(s){' with GPUs' if gpus else ''}; runs in "
                  f"{storage}/{prefix}-*")
    return RayFitter(workers=workers, storage=storage, prefix=prefix, use_gpu=gpus, mlflow=mlflow_cfg)


def _register(space, name: str, alias: Optional[str]) -> int:
    from .registry import Registry
    reg = Registry()
    best_val = min(m["best_val_loss"] for m in space.metadata["members"])
    version = reg.register(space, name, {"best_member_val_loss": best_val}, run_id=space.metadata.get("mlflow_run_id"))
    console.print(f"registered as {name} version {version} in {reg.tracking_uri}")
    if alias:
        reg.promote(name, version, alias)
        console.print(f"models:/{name}@{alias} -> version {version}")
    else:
        console.print(f"promote with: jeirt registry promote {name} {version}")
    return version


@app.command()
def tune(config: Path = typer.Argument(..., help="a sweep YAML, e.g. tune_configs/smoke.yaml"),
         data: Optional[Path] = typer.Option(None, "--data", help="overrides the YAML's data folder"),
         out: Optional[Path] = typer.Option(None, help="folder for the summary JSON and the plot "
                                                       "(default: the sweep's folder under $JEIRT_HOME/tune)")):
    """Sweep JE-IRT settings on Ray Tune; every trial is a Ray Train run and a nested MLflow run,
    and the best trial's space is registered (see tune_configs/ for the YAML grammar)."""
    from .distributed import init_ray
    from .distributed.tune import SweepConfig, run_sweep
    from .registry import default_tracking_uri
    try:
        sweep = SweepConfig.from_yaml(config)
    except ValueError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(2)
    data = data or (Path(sweep.data) if sweep.data else None)
    if sweep.finetune:
        d = _load(data)
        prep = _finetuned(d, sweep.encoder, sweep.base.get("kind", "jeirt"), sweep.finetune, sweep.encoder_lr,
                          sweep.split_seed)
    else:
        prep = _prepare(data, sweep.encoder, sweep.split_seed)
    init_ray()
    summary = run_sweep(sweep, prep, storage=paths.home() / "tune", tracking_uri=default_tracking_uri(), out=out)
    table = Table(title=f"sweep {sweep.name} on {prep.data.name}")
    for col in ("params", "epochs", "val loss", "test acc", "status"):
        table.add_column(col)
    for t in sorted(summary["trials"], key=lambda t: (t["val_loss"] is None, t["val_loss"] or 0)):
        status = "completed" if t["completed"] else ("failed" if t["error"] else "stopped by the scheduler")
        table.add_row(json.dumps(t["params"]), str(t["epochs"]), f"{t['val_loss']:.4f}" if t["val_loss"] else "-",
                      f"{t['test_accuracy']:.4f}" if t["test_accuracy"] else "-", status)
    console.print(table)
    console.print(f"best: {summary['best']['params']} (validation loss {summary['best']['val_loss']:.4f})")
    if "registered_version" in summary:
        console.print(f"registered as {sweep.register_as} version {summary['registered_version']}")
    if "plot" in summary:
        console.print(f"plot: {summary['plot']}")
    console.print(f"MLflow: sweep run {summary['parent_run_id']} in {default_tracking_uri()}")


def _report(data, encoder, seed, out, members, costs, studies):
    import os

    from .analysis.report import run_report
    from .evaluation import JEIRT_MEMBERS, train_space
    from .routing.costs import load_costs, read_cost_table
    prep = _prepare(data, encoder, seed)
    cost_array = None
    if costs is not None:
        try:
            cost_array = load_costs(read_cost_table(costs), prep.data.models, str(costs))
        except (OSError, ValueError) as e:
            console.print(f"[red]bad cost table:[/red] {e}")
            raise typer.Exit(2)
    space = train_space(prep, members=members or JEIRT_MEMBERS)
    results = run_report(prep, space, out, seed=seed, studies=studies, costs=cost_array)
    if os.environ.get("MLFLOW_TRACKING_URI"):
        from .registry import Registry
        reg = Registry()
        client = reg.client
        run_id = client.create_run(reg.experiment_id("jeirt-reports"), run_name=f"report-{prep.data.name}").info.run_id
        client.log_artifacts(run_id, str(out), artifact_path="report")
        client.set_terminated(run_id)
        console.print(f"logged to MLflow at {os.environ['MLFLOW_TRACKING_URI']}")
    console.print(f"wrote {out / 'report.md'}, {out / 'report.html'}, results.json and the PNGs")
    return results


CostsOpt = typer.Option(None, help="cost per call of each LLM: JSON {model: cost} or CSV model,cost "
                                   "(default: parameter count read from the names)")
MembersOpt = typer.Option(None, help="JE-IRT ensemble size (default: the tuned one)")


@app.command()
def report(data: Optional[Path] = DataOpt, encoder: str = EncoderOpt, seed: int = typer.Option(0),
           out: Path = typer.Option(..., help="folder for report.md, report.html, the PNGs and results.json"),
           members: int = MembersOpt, costs: Optional[Path] = CostsOpt,
           skip: list[str] = typer.Option([], help="a study to leave out (repeatable), e.g. --skip lobo")):
    """Run the paper's studies on one dataset (routing with costs, onboarding, 2PL failure, norm vs
    difficulty, taxonomy, probes, leave-one-benchmark-out, ranking) and write a report; logged to
    MLflow when MLFLOW_TRACKING_URI is set."""
    from .analysis.report import STUDIES
    bad = sorted(set(skip) - set(STUDIES))
    if bad:
        raise typer.BadParameter(f"unknown studies {bad}; known: {', '.join(STUDIES)}", param_hint="--skip")
    studies = None if not skip else [n for n in STUDIES if n not in skip]
    results = _report(data, encoder, seed, out, members, costs, studies)
    summary = []
    if "routing" in results:
        acc = results["routing"]["accuracy"]
        summary.append(f"routing: JE-IRT {acc['jeirt_argmax']:.3f}, per-benchmark best {acc['per_benchmark_best']:.3f}, "
                       f"best average {acc['best_average']:.3f}")
    if "norm_difficulty" in results:
        summary.append(f"norm-difficulty Spearman {results['norm_difficulty']['spearman']:.3f}")
    if "irt_2pl" in results:
        summary.append(f"2PL negative discriminations {results['irt_2pl']['share_negative']:.1%}")
    if "lobo" in results:
        summary.append(f"alignment-drop Spearman {results['lobo']['spearman_alignment_drop']:.3f}")
    console.print("; ".join(summary))


@app.command()
def analyze(study: str = typer.Argument(..., help="one of: routing, onboarding, irt_2pl, norm_difficulty, "
                                                   "taxonomy, probes, lobo, ranking"),
            data: Optional[Path] = DataOpt, encoder: str = EncoderOpt, seed: int = typer.Option(0),
            out: Path = typer.Option(..., help="folder for the study's report.md, PNGs and results.json"),
            members: int = MembersOpt, costs: Optional[Path] = CostsOpt):
    """Run one study of the report (see `jeirt report`) and print its figures."""
    from .analysis.report import STUDIES
    if study not in STUDIES:
        raise typer.BadParameter(f"unknown study {study!r}; known: {', '.join(STUDIES)}", param_hint="STUDY")
    results = _report(data, encoder, seed, out, members, costs, [study])
    console.print_json(json.dumps(results[study], default=float))


@app.command("serve")
def serve_cmd(config: Path = typer.Argument(..., help="a Serve config, e.g. deployments/local.yaml"),
              model: Optional[str] = typer.Option(None, help="override the registered model name (args.model)"),
              port: Optional[int] = typer.Option(None, help="override the HTTP port")):
    """Start the routing and onboarding service described by a Serve config; Ctrl-C stops it."""
    import signal
    import threading

    from .distributed import init_ray
    from .serving.deploy import check_port, check_registry, deploy, load_config
    try:
        cfg = load_config(config, model, port)
    except ValueError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(2)
    with _one_line(OSError, LookupError, prefix="cannot serve: "):
        check_port(cfg)
        check_registry(cfg)  # also creates the MLflow store here, once, before any replica starts
    init_ray()
    try:
        url = deploy(cfg)
    except (RuntimeError, TimeoutError) as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(1)
    console.print(f"serving on {url} (docs: {url}/docs). Try: jeirt route \"What is 2 + 2?\" --url {url}\n"
                  "Ctrl-C stops the service.")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    from ray import serve
    serve.shutdown()


@app.command()
def route(query: str = typer.Argument(..., help="the question to route"),
          url: str = typer.Option("http://127.0.0.1:8000", help="the service's base URL"),
          top_k: int = typer.Option(5, help="how many LLMs to show"),
          policy: Optional[str] = typer.Option(None, help="tuned (default: chosen on validation) | most_likely | cost_weighted | cheapest_within_margin")):
    """Ask a running service which LLM should answer QUERY."""
    import httpx
    body = {"query": query, "top_k": top_k, **({"policy": policy} if policy else {})}
    try:
        r = httpx.post(f"{url.rstrip('/')}/v1/route", json=body, timeout=60)
    except httpx.HTTPError as e:
        console.print(f"[red]cannot reach {url}: {e}[/red] (start it with: jeirt serve deployments/local.yaml)")
        raise typer.Exit(1)
    if r.status_code != 200:
        console.print(f"[red]{r.status_code}: {r.text}[/red]")
        raise typer.Exit(1)
    d = r.json()["results"][0]
    console.print(f"[bold]{d['chosen']}[/bold] (p_correct {d['p_correct']:.3f}; difficulty {d['difficulty']:.2f}; "
                  f"nearest benchmark {d['nearest_benchmark']}; space {r.json()['space']})")
    table = Table()
    for col in ("LLM", "p_correct", "cost"):
        table.add_column(col)
    for s in d["scores"]:
        table.add_row(s["model"], f"{s['p_correct']:.3f}", "-" if s["cost"] is None else f"{s['cost']:g}")
    console.print(table)


@app.command("k8s-check")
def k8s_check(crds: Path = typer.Option(Path("../shared/kuberay-crds"), help="folder with the KubeRay CRDs "
                                                                            "(ray.io_*.yaml, KubeRay v1.7.0)"),
              root: Path = typer.Option(Path("."), help="the repository root")):
    """Validate k8s/ and deployments/ offline: Kubernetes and KubeRay schemas, Serve configs, Ray versions."""
    from .manifests import check_all
    try:
        report = check_all(root, crds)
    except FileNotFoundError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(2)
    bad = {k: v for k, v in report.items() if v}
    for place, errors in report.items():
        console.print(f"{'[red]FAIL[/red]' if errors else '[green]ok[/green]  '} {place}")
        for e in errors:
            console.print(f"       {e}")
    raise typer.Exit(1 if bad else 0)


@app.command("mlflow-ui")
def mlflow_ui(port: int = typer.Option(5000)):
    """Open the MLflow UI on the project's tracking database (127.0.0.1 only)."""
    import subprocess
    import sys

    from .registry import default_tracking_uri
    uri = default_tracking_uri()
    console.print(f"MLflow UI for {uri} at http://127.0.0.1:{port}")
    raise typer.Exit(subprocess.call([sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri,
                                      "--host", "127.0.0.1", "--port", str(port)]))


@app.command()
def encode(data: Optional[Path] = DataOpt, encoder: str = EncoderOpt,
           ray_replicas: int = typer.Option(0, "--ray", help="encode on Ray Data with this many encoder "
                                                              "replicas (0: in this process)"),
           gpus_per_replica: float = typer.Option(0.0, help="GPUs per Ray replica (0: CPU replicas)"),
           batch_size: int = typer.Option(64)):
    """Embed every question with the frozen encoder into the on-disk cache."""
    from .encoders import EmbeddingCache, encode_cached, make_encoder
    d = _load(data)
    enc = make_encoder(encoder)
    if ray_replicas > 0:
        from .distributed import init_ray
        from .distributed.encode import encode_with_ray
        init_ray()
        encode_with_ray(encoder, d.texts, paths.cache_dir(), replicas=ray_replicas,
                        gpus_per_replica=gpus_per_replica, batch_size=batch_size)
    else:
        from .encoders.sentence import EncoderError
        with _one_line(EncoderError, code=2):
            encode_cached(enc, d.texts, paths.cache_dir(), batch_size=batch_size)
    console.print(f"{len(EmbeddingCache(paths.cache_dir(), enc.encoder_id))} vectors cached for {enc.encoder_id} "
                  f"in {paths.cache_dir()}")


@data_app.command("check")
def data_check(data: Path = typer.Argument(..., help="dataset folder")):
    """Validate a dataset and describe it."""
    d = _load(data)
    console.print(d.describe())


@data_app.command("import")
def data_import(fmt: str = typer.Argument(..., metavar="FORMAT", help="harness (lm-evaluation-harness samples, "
                                          "JSONL or Parquet), helm (HELM run folders) or pyirt (py-irt JSONL)"),
                src: Path = typer.Argument(..., help="a folder (or, for pyirt, a .jsonl file)"),
                out: Path = typer.Option(..., help="folder for questions.parquet, responses.parquet and "
                                                    "import_report.json"),
                metric: list[str] = typer.Option([], help="harness: TASK=METRIC, the label of a task (repeatable; "
                                                          "default: the first of acc, exact_match, pass@1, ...); "
                                                          "helm: METRIC (default exact_match)"),
                filter_: list[str] = typer.Option([], "--filter", help="harness: TASK=FILTER (default none, else "
                                                                       "strict-match, else the first by name)"),
                text_field: Optional[str] = typer.Option(None, help="harness: a field of `doc` as the question "
                                                                    "text (default: the prompt without few-shot "
                                                                    "examples)"),
                texts: Optional[Path] = typer.Option(None, help="pyirt: question texts (question_id, text "
                                                                "[, benchmark]; CSV or Parquet)"),
                names: Optional[Path] = typer.Option(None, help="model-name mapping (YAML {name: canonical} or "
                                                                "CSV name,canonical)")):
    """Import per-question results from lm-evaluation-harness, HELM or py-irt into the long format."""
    from .data import DataError
    from .data.importers import HarnessOptions, import_results, read_mapping

    def pairs(values: list[str], option: str) -> dict[str, str]:
        bad = [v for v in values if "=" not in v]
        if bad:
            console.print(f"[red]bad option {option} {bad[0]!r}:[/red] expected TASK=NAME")
            raise typer.Exit(2)
        return dict(v.split("=", 1) for v in values)

    harness = HarnessOptions(metrics=pairs(metric, "--metric") if fmt == "harness" else {},
                             filters=pairs(filter_, "--filter"), text_field=text_field)
    helm_metric = metric[0] if fmt == "helm" and metric else None
    try:
        mapping = read_mapping(names) if names else None
        data, report = import_results(fmt, src, harness=harness, metric=helm_metric, texts=texts, mapping=mapping)
    except (DataError, OSError) as e:
        console.print(f"[red]bad input:[/red] {e}")
        raise typer.Exit(2)
    data.save(out)
    (out / "import_report.json").write_text(json.dumps(report, indent=1))
    console.print(f"imported {data.describe()} from {report['files']} file(s) to {out}")
    if report["skipped"]:
        console.print(f"[yellow]skipped {len(report['skipped'])} item(s)[/yellow] (all in {out / 'import_report.json'}):")
        for line in report["skipped"][:10]:
            console.print(f"  {line}", markup=False, highlight=False)
    if report["near_duplicate_model_names"]:
        groups = report["near_duplicate_model_names"]
        console.print(f"[yellow]{len(groups)} group(s) of model names that may be one LLM[/yellow] (merge them with "
                      f"--names FILE): " + "; ".join(" = ".join(g) for g in groups[:5]), highlight=False)


@data_app.command("synth")
def data_synth(out: Path = typer.Option(..., help="folder to write questions/responses Parquet to"),
               models: int = 24, questions: int = 1200, seed: int = 0):
    """Write the SYNTHETIC dataset (known JE-IRT geometry) in the long format."""
    from .data.synthetic import generate
    d = generate(n_models=models, n_questions=questions, seed=seed)
    d.save(out)
    console.print(f"wrote {d.describe()} to {out}")


@data_app.command("fetch")
def data_fetch(dataset: str = typer.Argument(..., help="only 'embedllm' for now"),
               out: Optional[Path] = typer.Option(None, help="default: $JEIRT_HOME/data/embedllm")):
    """Download a public dataset (needs network access to the Hugging Face hub)."""
    from .data import fetch_embedllm
    if dataset != "embedllm":
        console.print(f"[red]unknown dataset {dataset!r}[/red]; available: embedllm")
        raise typer.Exit(2)
    try:
        target = fetch_embedllm(out or paths.home() / "data" / "embedllm")
    except RuntimeError as e:
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(1)
    console.print(f"downloaded to {target}; use it with --data {target}")


@registry_app.command("list")
def registry_list(name: str = typer.Argument(..., help="registered model name")):
    """Versions of a registered space, with aliases and metrics."""
    from .registry import Registry
    reg = Registry()
    with _one_line(LookupError):
        rows = reg.versions(name)
    table = Table(title=f"{name} in {reg.tracking_uri}")
    for col in ("version", "aliases", "metrics", "data"):
        table.add_column(col)
    for row in rows:
        metrics = ", ".join(f"{k[7:]}={v}" for k, v in row["tags"].items() if k.startswith("metric."))
        table.add_row(str(row["version"]), ", ".join(row["aliases"]), metrics, row["tags"].get("data_fingerprint", ""))
    console.print(table)


@registry_app.command("promote")
def registry_promote(name: str, version: int, alias: str = typer.Option("champion")):
    """Point an alias (default @champion) at a version."""
    from .registry import Registry
    with _one_line(LookupError):
        Registry().promote(name, version, alias)
    console.print(f"models:/{name}@{alias} -> version {version}")


def main() -> None:
    """The `jeirt` entry point: expected failures that reach here (no Ray, an encoder that cannot
    load, a missing registry entry) end with one line and the log file's path, no traceback."""
    from .distributed import RayUnavailable
    from .encoders.sentence import EncoderError
    try:
        app()
    except (RayUnavailable, EncoderError, LookupError) as e:
        if logs.State.debug:
            raise
        console.print(f"[red]{e}[/red]")
        if logs.State.file is not None:
            console.print(f"log: {logs.State.file}; `jeirt --debug ...` shows the traceback")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
