"""`jeirt <command>`: one Typer app, a thin layer over jeirt_ray.api.jobs (the jobs) and the
serving and registry modules. It parses options, shows the pipeline's progress (the `jeirt`
logger) and results, and turns expected failures into one line and an exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..core import logs
from ..core.secrets import redact
from ..routing.decisions import DEFAULT_TOP_K, POLICIES as POLICY_NAMES
from ..serving.ingress import DEFAULT_INGRESS
from .data import data_app, registry_app
from .feedback import decision, feedback, grade, judge, learn, shadow
from .keys import keys_app
from .onboard import onboard_app
from .zoo import similar_cmd
from .output import console, expected_failures, results_table

app = typer.Typer(help="JE-IRT for LLMs: embed LLMs and questions in one space, evaluate, route.",
                  no_args_is_help=True, pretty_exceptions_enable=False)
app.add_typer(data_app, name="data")
app.add_typer(registry_app, name="registry")
app.add_typer(keys_app, name="keys")
app.add_typer(onboard_app, name="onboard")
app.command("similar")(similar_cmd)
app.command("feedback")(feedback)
app.command("grade")(grade)
app.command("judge")(judge)
app.command("learn")(learn)
app.command("shadow")(shadow)
app.command("decision")(decision)

DataOpt = typer.Option(None, "--data", help="dataset folder (long format, EmbedLLM CSVs, harness or HELM output); "
                                            "default: the embedded SYNTHETIC dataset")
EncoderOpt = typer.Option("all-MiniLM-L6-v2", "--encoder", help="sentence-transformers name or path (default: "
                          "bundled all-MiniLM-L6-v2), optionally +int8/+bf16/+fp16, or 'hashing' (fast test encoder)")
SeedOpt = typer.Option(0, help="the split seed (by question, 80/10/10) and the training seed")
SplitOpt = typer.Option(None, "--split", help="your own split: CSV/Parquet with columns question_id,split "
                                              "(train/val/test), or a split.json a run saved")
PartialSplitOpt = typer.Option(False, "--partial-split", help="with --split: train and test on the questions "
                               "it lists, leaving the others out (without it, such a split is refused)")
SearchOpt = typer.Option(True, "--search/--fixed", help="choose the configuration on validation with a Ray Tune "
                         "search (default), or train the fixed configuration in this process (quick, no Ray)")
TrialsOpt = typer.Option(None, "--trials", help="configurations per search (default: scaled with the data)")
CriterionOpt = typer.Option("val_loss", "--criterion", help="rank trials by val_loss, val_accuracy or val_auc")
MembersOpt = typer.Option(None, "--members", min=1, help="ensemble size: the best trials of a search, or seeds (default 5)")
FinetuneOpt = typer.Option(None, "--finetune", help="train the encoder's top K transformer layers end to end "
                           "(top-K, e.g. top-2, or all); the fine-tuned encoder is saved with the space")
EncoderLrOpt = typer.Option(3e-5, "--encoder-lr", help="with --finetune: the encoder layers' learning rate")
CostsOpt = typer.Option(None, "--costs", help="the routing study's per-call cost of each LLM, in any unit: JSON "
                        "{model: cost} or CSV model,cost (default: billions of parameters read from the names; USD "
                        "comes from --prices)")


@app.callback()
def _options(ctx: typer.Context,
             verbose: bool = typer.Option(False, "--verbose", "-v", help="also show Ray's, MLflow's and the other "
                                          "libraries' log lines here (they always go to the log file)"),
             debug: bool = typer.Option(False, "--debug", help="verbose, and show the traceback of a failure")):
    """JE-IRT for LLMs: embed LLMs and questions in one space, evaluate, route."""
    logs.setup(ctx.invoked_subcommand or "jeirt", verbose=verbose, debug=debug)
    logs.show_progress(lambda line: console.print(line, markup=False, highlight=False))


def _methods(value: str) -> list[str]:
    return [m.strip() for m in value.split(",") if m.strip()]


@app.command()
def evaluate(data: Optional[Path] = DataOpt, encoder: str = EncoderOpt, seed: int = SeedOpt,
             split: Optional[Path] = SplitOpt, partial_split: bool = PartialSplitOpt,
             methods: str = typer.Option("jeirt,mf,knn,majority,irt1pl,irt2pl", help="comma-separated subset"),
             search: bool = SearchOpt, trials: Optional[int] = TrialsOpt, criterion: str = CriterionOpt,
             members: Optional[int] = MembersOpt, finetune: Optional[str] = FinetuneOpt,
             encoder_lr: float = EncoderLrOpt, out: Optional[Path] = typer.Option(None, help="write the results "
                                                                                  "as JSON here (and the split)")):
    """Train every method on one split and compare them on the test questions. With --finetune,
    JE-IRT and MF each fine-tune their own copy of the encoder first."""
    from ..api import jobs as pipeline
    with expected_failures():
        results = pipeline.evaluate(data, methods=_methods(methods), encoder=encoder, search=search, seed=seed,
                                    split=split, partial_split=partial_split, members=members, trials=trials,
                                    criterion=criterion, finetune=finetune, encoder_lr=encoder_lr, out=out)
    synthetic = "truth" in results
    console.print(results_table(results, f"{'SYNTHETIC ' if synthetic else ''}test questions, "
                                         f"{'split ' + str(split) if split else f'split by question, seed {seed}'}"))


@app.command()
def train(data: Optional[Path] = DataOpt, encoder: str = EncoderOpt, seed: int = SeedOpt,
          split: Optional[Path] = SplitOpt, partial_split: bool = PartialSplitOpt, search: bool = SearchOpt,
          trials: Optional[int] = TrialsOpt, criterion: str = CriterionOpt, members: Optional[int] = MembersOpt,
          workers: Optional[int] = typer.Option(None, "--workers", help="train on Ray Train with this many workers "
                                                "(0: Train's local mode, in this process); turns --fixed on"),
          gpus: bool = typer.Option(False, "--gpus", help="one GPU per Ray Train worker (nccl)"),
          out: Optional[Path] = typer.Option(None, help="folder to save the space in (default: "
                                                        "$JEIRT_HOME/spaces/<data name>)"),
          register: Optional[str] = typer.Option(None, help="also register the space under this name in MLflow"),
          promote: Optional[str] = typer.Option(None, help="with --register: point this alias at the new version"),
          finetune: Optional[str] = FinetuneOpt, encoder_lr: float = EncoderLrOpt,
          prices: Optional[Path] = typer.Option(None, "--prices", help="a price table (CSV model,input_usd_per_mtok,"
                                                "output_usd_per_mtok; YAML or JSON) stored with the space for "
                                                "its cost policies"),
          held_out_benchmarks: int = typer.Option(6, "--held-out-benchmarks", min=0, help=(
              "choose the routing policy also with up to this many benchmarks held out of training in turn "
              "(one more training each), so that it holds on unseen benchmarks; 0: on validation alone"))):
    """Train a JE-IRT space (searched on Ray Tune by default; --fixed in this process, or on Ray
    Train with --workers N), choose its routing policy on validation and save it."""
    from ..core import paths
    from ..api import jobs as pipeline
    # every argument checked before the first expensive step (training takes minutes to hours)
    if promote and not register:
        raise typer.BadParameter("--promote needs --register NAME (the alias moves on a registered version)")
    if not search and (trials is not None or criterion != "val_loss"):
        raise typer.BadParameter("--trials and --criterion are search settings: drop them, or drop --fixed")
    if out is not None and out.exists() and not out.is_dir():
        raise typer.BadParameter(f"--out {out} is a file: name a folder to save the space in")
    with expected_failures():
        if prices is not None:
            from ..routing.prices import PriceTable
            PriceTable.read(prices)  # a missing or broken table: its one line now, not after training
        d = pipeline.load_data(data)
        space = pipeline.train(d, encoder=encoder, search=search, members=members, workers=workers, gpus=gpus,
                               finetune=finetune, encoder_lr=encoder_lr, split=split, partial_split=partial_split,
                               seed=seed, trials=trials, criterion=criterion, held_out_benchmarks=held_out_benchmarks,
                               prices=prices,
                               mlflow_run=f"train-{register}" if register else None,
                               out=out or paths.home() / "spaces" / d.name)
        if register:
            version = pipeline.register(space, register, alias=promote)
            if not promote:
                console.print(f"promote with: jeirt registry promote {register} {version}")


@app.command()
def demo(out: Optional[Path] = typer.Option(None, help="output folder (default: $JEIRT_HOME/demo)"),
         encoder: str = EncoderOpt, trials: Optional[int] = TrialsOpt,
         name: str = typer.Option("demo", help="the registered model name")):
    """The main job on the embedded SYNTHETIC dataset, on Ray: encode (Ray Data), search JE-IRT's
    and MF's configurations (Ray Tune), register the space as @champion in MLflow, and compare
    every method with the generator's truth. A few minutes on a laptop."""
    from ..api import jobs as pipeline
    from ..tracking.registry import default_tracking_uri
    console.print("[yellow]SYNTHETIC: simulated LLMs drawn from a known JE-IRT geometry, not real results. "
                  "Use --data with `jeirt evaluate` / `jeirt train` for real data.[/yellow]")
    with expected_failures():
        res = pipeline.demo(out, encoder=encoder, trials=trials, name=name)
    console.print(results_table(res["results"], "SYNTHETIC data, split by question (80/10/10), seed 0"))
    console.print(f"`truth` is the generator's own probabilities: no method can beat it. JE-IRT closes "
                  f"{res['closed']:.0%} of the distance from the per-LLM majority to it.\nWrote {res['out']}. Look at "
                  f"the runs: mlflow ui --backend-store-uri {redact(default_tracking_uri())}\nThe registered space: "
                  f"jeirt registry list {name}")


@app.command()
def tune(config: Path = typer.Argument(..., help="a sweep YAML, e.g. tune_configs/smoke.yaml"),
         data: Optional[Path] = typer.Option(None, "--data", help="overrides the YAML's data folder"),
         out: Optional[Path] = typer.Option(None, help="folder for the summary JSON and the plot (default: the "
                                                       "sweep's folder under $JEIRT_HOME/tune)")):
    """Sweep JE-IRT settings on Ray Tune (see tune_configs/ for the YAML grammar); every trial is an
    MLflow run nested under the sweep's, and the best trial's space is registered."""
    from ..core import paths
    from ..api import jobs as pipeline
    from ..distributed import init_ray
    from ..distributed.sweep import SweepConfig, run_sweep
    from ..tracking.registry import default_tracking_uri
    with expected_failures():
        sweep = SweepConfig.from_yaml(config)
        prep = pipeline.prepare(data or sweep.data, encoder=sweep.encoder, seed=sweep.split_seed,
                                finetune=sweep.finetune, encoder_lr=sweep.encoder_lr,
                                kind=sweep.base.get("kind", "jeirt"))
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
    for key, text in (("registered_version", f"registered as {sweep.register_as} version {{}}"), ("plot", "plot: {}")):
        if key in summary:
            console.print(text.format(summary[key]))
    console.print(f"MLflow: sweep run {summary['parent_run_id']} in {redact(default_tracking_uri())}")


def _report(data, encoder, seed, out, members, costs, studies, prices=None) -> dict:
    from ..api import jobs as pipeline
    with expected_failures():
        return pipeline.report(data, out=out, encoder=encoder, seed=seed, members=members, costs=costs, studies=studies,
                               prices=prices)


@app.command()
def report(data: Optional[Path] = DataOpt, encoder: str = EncoderOpt, seed: int = typer.Option(0),
           out: Path = typer.Option(..., help="folder for report.md, report.html, the PNGs and results.json"),
           members: Optional[int] = MembersOpt, costs: Optional[Path] = CostsOpt,
           prices: Optional[Path] = typer.Option(None, "--prices", help="a price table (USD per million tokens) for "
                                                 "the cost study (the cost-accuracy frontier)"),
           studies: Optional[str] = typer.Option(None, "--studies", help="comma-separated studies to run "
                                                 "(default: all), e.g. --studies routing,probes"),
           skip: list[str] = typer.Option([], hidden=True, help="old name: a study to leave out (repeatable)")):
    """Run the paper's studies on one dataset (routing with costs, onboarding, 2PL failure, norm vs
    difficulty, taxonomy, probes, leave-one-benchmark-out, ranking) and write a report."""
    from ..analysis.report import STUDIES
    chosen = [s.strip() for s in studies.split(",") if s.strip()] if studies else None
    bad = sorted(set(skip) - set(STUDIES)) or sorted(set(chosen or ()) - set(STUDIES))
    if bad:
        raise typer.BadParameter(f"unknown studies {bad}; known: {', '.join(STUDIES)}",
                                 param_hint="--skip" if skip else "--studies")
    if skip:
        chosen = [n for n in (chosen or STUDIES) if n not in skip]
    results = _report(data, encoder, seed, out, members, costs, chosen, prices)
    summary = []
    if "routing" in results:
        acc = results["routing"]["accuracy"]
        summary.append(f"routing: JE-IRT {acc['jeirt_argmax']:.3f}, per-benchmark best {acc['per_benchmark_best']:.3f}, "
                       f"best average {acc['best_average']:.3f}")
    for key, label, field, fmt in (("norm_difficulty", "norm-difficulty Spearman", "spearman", ".3f"),
                                   ("irt_2pl", "2PL negative discriminations", "share_negative", ".1%"),
                                   ("lobo", "alignment-drop Spearman", "spearman_alignment_drop", ".3f")):
        if key in results:
            summary.append(f"{label} {results[key][field]:{fmt}}")
    console.print("; ".join(summary))


@app.command()
def analyze(study: str = typer.Argument(..., help="one of: routing, onboarding, irt_2pl, norm_difficulty, "
                                                   "taxonomy, probes, lobo, ranking, cost"),
            data: Optional[Path] = DataOpt, encoder: str = EncoderOpt, seed: int = typer.Option(0),
            out: Path = typer.Option(..., help="folder for the study's report.md, PNGs and results.json"),
            members: Optional[int] = MembersOpt, costs: Optional[Path] = CostsOpt,
            prices: Optional[Path] = typer.Option(None, "--prices", help="a price table, for the cost study")):
    """Run one study of the report (see `jeirt report`) and print its figures."""
    from ..analysis.report import STUDIES
    if study not in STUDIES:
        raise typer.BadParameter(f"unknown study {study!r}; known: {', '.join(STUDIES)}", param_hint="STUDY")
    results = _report(data, encoder, seed, out, members, costs, [study], prices)
    console.print_json(json.dumps(results[study], default=float))


@app.command("serve")
def serve_cmd(config: Path = typer.Argument(..., help="a Serve config, e.g. deployments/local.yaml"),
              model: Optional[str] = typer.Option(None, help="override the registered model name (args.model)"),
              port: Optional[int] = typer.Option(None, help="override the HTTP port"),
              auth: Optional[str] = typer.Option(None, "--auth", help="required: every route needs an API key (`jeirt "
                                                 "keys create`); open: route, chat, feedback and explore need none (loopback "
                                                 "only). Default: the config's args.auth"),
              ingress: str = typer.Option(DEFAULT_INGRESS, "--ingress", help="the front door of the local Ray it starts: "
                                          "proxy (Serve's Python proxy) or haproxy (HAProxy straight to the Router "
                                          "replicas: one hop less per request; see docs/guide/serving.md)")):
    """Start the routing and onboarding service described by a Serve config; Ctrl-C stops it."""
    from ..serving.deploy import serve_forever
    with expected_failures(prefix="cannot serve: "):
        serve_forever(config, model, port, announce=console.print, auth=auth, ingress=ingress)


@app.command()
def route(query: str = typer.Argument(..., help="the question to route"),
          url: str = typer.Option("http://127.0.0.1:8000", help="the service's base URL"),
          key: Optional[str] = typer.Option(None, "--key", envvar="JEIRT_API_KEY", show_default=False,
                                            help="an API key with the route scope (default: JEIRT_API_KEY)"),
          top_k: int = typer.Option(DEFAULT_TOP_K, min=1, help="how many LLMs to show"),
          policy: Optional[str] = typer.Option(None, help=f"{' | '.join(POLICY_NAMES)} (default: the service's, "
                                                          "tuned unless its config says otherwise)"),
          candidates: Optional[list[str]] = typer.Option(None, "--candidate", help="allow only this LLM; repeat "
                                                         "for more"),
          min_p: Optional[float] = typer.Option(None, min=0, max=1, help="allow only LLMs whose p reaches this"),
          max_cost: Optional[float] = typer.Option(None, min=0, help="allow only LLMs costing at most this many "
                                                   "USD per call"),
          cost_weight: Optional[float] = typer.Option(None, min=0, help="cost_weighted: p - cost_weight x USD"),
          margin: Optional[float] = typer.Option(None, min=0, max=1, help="cheapest_within_margin: the margin "
                                                 "of p"),
          target_p: Optional[float] = typer.Option(None, min=0, max=1, help="quality_target: the cheapest LLM "
                                                   "whose p reaches this"),
          target_share: Optional[float] = typer.Option(None, min=0, max=1, help="quality_target: ... this share "
                                                       "of the best p"),
          budget_per_1k: Optional[float] = typer.Option(None, min=0, help="budget: USD per 1,000 queries to spend "
                                                        "on average")):
    """Ask a running service which LLM should answer QUERY (POST /v1/route, every setting of it)."""
    import httpx
    if policy is not None and policy not in POLICY_NAMES:
        console.print(f"[red]unknown --policy {policy!r}: one of {', '.join(POLICY_NAMES)}[/red]")
        raise typer.Exit(2)
    settings = {"policy": policy, "candidates": candidates or None, "min_p": min_p, "max_cost": max_cost,
                "cost_weight": cost_weight, "margin": margin, "target_p": target_p, "target_share": target_share,
                "budget_per_1k": budget_per_1k}
    body = {"query": query, "top_k": top_k, **{k: v for k, v in settings.items() if v is not None}}
    try:
        r = httpx.post(f"{url.rstrip('/')}/v1/route", json=body, timeout=60,
                       headers={"Authorization": f"Bearer {key}"} if key else None)
    except httpx.HTTPError as e:
        console.print(f"[red]cannot reach {url}: {e}[/red] (start it with: jeirt serve deployments/local.yaml)")
        raise typer.Exit(1)
    if r.status_code != 200:
        hint = " (pass --key, or set JEIRT_API_KEY, to a key with the route scope)" if r.status_code in (401, 403) else ""
        console.print(f"[red]{r.status_code}: {r.text}[/red]{hint}")
        raise typer.Exit(1 if r.status_code in (401, 403) or r.status_code >= 500 else 2)
    d = r.json()["results"][0]
    cost = "" if d.get("expected_cost") is None else f"; expected cost {d['expected_cost']:.6f} USD"
    console.print(f"[bold]{d['chosen']}[/bold] (policy {d['policy']}; p_correct {d['p_correct']:.3f}{cost}; "
                  f"difficulty {d['difficulty']:.2f}; nearest benchmark {d['nearest_benchmark']}; "
                  f"space {r.json()['space']})")
    table = Table()
    for col in ("LLM", "p_correct", "cost (USD)"):
        table.add_column(col)
    for s in d["scores"]:
        table.add_row(s["model"], f"{s['p_correct']:.3f}", "-" if s["cost"] is None else f"{s['cost']:g}")
    console.print(table)


@app.command()
def replay(data: Path = typer.Option(..., "--data", help="a dataset folder with questions.* and "
                                      "outputs/<model>.jsonl.gz (e.g. ../shared/data/mmlu_pro)"),
           model: Optional[list[str]] = typer.Option(None, "--model", help="replay only this LLM; repeat for more "
                                                     "(default: every recorded one)"),
           port: int = typer.Option(8001, min=0, max=65535, help="the loopback port (0: any free one)")):
    """Serve LLMs' recorded answers as an OpenAI-compatible endpoint on 127.0.0.1, to try `jeirt
    onboard` on real answers without running the LLM; Ctrl-C stops it."""
    import signal
    import threading

    from ..api.replay import ReplayServer
    with expected_failures(prefix="cannot replay: "):
        server = ReplayServer(data, models=model or None, port=port).start()
    console.print(f"replaying {', '.join(server.outputs)} at {server.url} (POST /chat/completions); try: jeirt "
                  f"onboard --endpoint {server.url} --model {next(iter(server.outputs))} --answers "
                  f"{data / 'answers.csv.gz'} ...\nCtrl-C stops it.", highlight=False, soft_wrap=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop()


@app.command("k8s-check")
def k8s_check(crds: Path = typer.Option(Path("../shared/kuberay-crds"), help="folder with the KubeRay CRDs "
                                                                            "(ray.io_*.yaml, KubeRay v1.7.0)"),
              root: Path = typer.Option(Path("."), help="the repository root")):
    """Validate k8s/ and deployments/ offline: Kubernetes and KubeRay schemas, Serve configs, Ray versions."""
    from ..serving.manifests import check_all
    with expected_failures():
        report = check_all(root, crds)
    for place, errors in report.items():
        console.print(f"{'[red]FAIL[/red]' if errors else '[green]ok[/green]  '} {place}")
        for e in errors:
            console.print(f"       {e}")
    raise typer.Exit(1 if any(report.values()) else 0)


@app.command("mlflow-ui")
def mlflow_ui(port: int = typer.Option(5000)):
    """Open the MLflow UI on the project's tracking database (127.0.0.1 only)."""
    import subprocess
    import sys

    from ..tracking.registry import default_tracking_uri
    console.print(f"MLflow UI for {redact(default_tracking_uri())} at http://127.0.0.1:{port}")
    raise typer.Exit(subprocess.call([sys.executable, "-m", "mlflow", "ui", "--backend-store-uri",
                                      default_tracking_uri(), "--host", "127.0.0.1", "--port", str(port)]))


@app.command()
def encode(data: Optional[Path] = DataOpt, encoder: str = EncoderOpt,
           replicas: int = typer.Option(0, "--replicas", help="encode on Ray Data with this many encoder replicas "
                                                          "(0: in this process)"),
           ray: Optional[int] = typer.Option(None, "--ray", hidden=True, help="old name of --replicas"),
           gpus_per_replica: float = typer.Option(0.0, help="GPUs per Ray replica (0: CPU replicas)"),
           batch_size: int = typer.Option(64)):
    """Embed every question with the frozen encoder into the on-disk cache."""
    from ..api import jobs as pipeline
    with expected_failures():
        n, where = pipeline.encode(data, encoder=encoder, replicas=replicas if ray is None else ray,
                                   gpus_per_replica=gpus_per_replica, batch_size=batch_size)
    console.print(f"{n} vectors cached for {where}")


def main() -> None:
    """The `jeirt` entry point: expected failures that reach here (no Ray, an encoder that cannot
    load, a missing registry entry) end with one line and the log file's path, no traceback."""
    from ..distributed import RayUnavailable
    from ..encoders.sentence import EncoderError
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

command = typer.main.get_command(app)  # the Click command, for the generated CLI reference (docs/reference/cli.md)
